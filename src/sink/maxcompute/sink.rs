//! The MAXCOMPUTE sink's adapter to the sink seam (the folder's module docs say how it writes).

use super::client::{Client, ClientOptions};
use super::ddl::SQL_SETTINGS;
use super::mover::{Epochs, Mover};
use super::schema::TableColumn;
use super::{client, ddl, table, upload};
use crate::backoff::Backoff;
use crate::batch::Batch;
use crate::config::{Config, MaxComputeSink as MaxComputeConfig};
use crate::sink::{
    Acknowledgement, CloseFuture, Progress, RevokeHook, Sink, SinkError, SinkErrorKind, StartError,
    SubmitFuture, WriteReport,
};
use crate::table::TableLayout;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{watch, Mutex, Semaphore};
use tokio_util::sync::CancellationToken;

/// Batches uploading at once (each its own Tunnel upload session).
pub const MAX_UPLOADS: usize = 4;

/// How long a clean stop tries to drop the staging table.
const DROP_BUDGET: Duration = Duration::from_secs(10);

/// How long the sink's close waits for a running move before leaving it (and the staging
/// table) behind. The pipeline's drain has already waited `consumer.drain_timeout` for the moves
/// its rows needed; this covers a move that started just before the drain ended.
const MOVE_WAIT: Duration = Duration::from_secs(10);

/// Writes batches into Merlin's MaxCompute table.
pub struct MaxComputeSink {
    client: Arc<Client>,
    dataset: String,
    staging: String,
    epochs: Arc<Mutex<Epochs>>,
    moved: watch::Receiver<u64>,
    uploads: Arc<Semaphore>,
    health: watch::Receiver<bool>,
    stuck: watch::Receiver<Option<String>>,
    mover: Option<tokio::task::JoinHandle<()>>,
    /// Tells the mover a revoke's deadline.
    urgent: Arc<watch::Sender<Option<tokio::time::Instant>>>,
    /// Tells the mover to end after its running move.
    closing: CancellationToken,
}

/// Checks `access_url` where the sink starts ([`crate::config::check_access_url`]).
pub fn check_access_url(url: &str) -> Result<(), StartError> {
    crate::config::check_access_url(url).map_err(StartError::Config)
}

impl MaxComputeSink {
    /// Creates or migrates the target, resets this instance's staging table and starts the
    /// mover (inside a tokio runtime). `stopping` is the process's stop signal: from then on
    /// staged rows are moved at once.
    pub async fn start(
        cfg: &Config,
        sink: &MaxComputeConfig,
        stopping: CancellationToken,
    ) -> Result<Self, StartError> {
        Self::start_as(
            cfg,
            sink,
            stopping,
            &table::instance_name(|k| std::env::var(k).ok()),
        )
        .await
    }

    /// [`MaxComputeSink::start`] with the instance name given.
    pub async fn start_as(
        cfg: &Config,
        sink: &MaxComputeConfig,
        stopping: CancellationToken,
        instance: &str,
    ) -> Result<Self, StartError> {
        check_access_url(&sink.access_url)?;
        let client = Client::new(ClientOptions::from_config(sink), client::credentials(sink))
            .map_err(|e| StartError::Config(e.to_string()))?;
        let client = Arc::new(client);
        let layout = TableLayout::from_config(cfg);
        let columns = TableColumn::from_layout(&layout.columns);
        let target = ddl::table_name(&cfg.project, &cfg.model_id);
        let dataset = sink.dataset.clone();
        let report = table::ensure_target(&client, &dataset, &target, &columns).await?;
        let prefix = table::staging_prefix(&target, instance);
        let since_epoch = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        let stamp = table::start_stamp(since_epoch.as_secs(), fastrand::u32(..));
        let staging = table::staging_table_name(&target, instance, &stamp);
        let left = table::prepare_staging(&client, &dataset, &prefix, &staging, &columns).await?;
        tracing::info!(
            table = %format!("{dataset}.{target}"),
            target = report,
            staging = %staging,
            dropped_left_by_earlier_start = left,
            "MaxCompute tables ready"
        );
        let epochs = Arc::new(Mutex::new(Epochs::default()));
        let (moved_tx, moved) = watch::channel(0u64);
        let (health_tx, health) = watch::channel(true);
        let (stuck_tx, stuck) = watch::channel(None);
        crate::metrics::startup::maxcompute_moves(sink.move_timeout);
        let (urgent, urgent_rx) = watch::channel(None);
        let closing = CancellationToken::new();
        let mover = Mover {
            client: Arc::clone(&client),
            dataset: dataset.clone(),
            target,
            staging: staging.clone(),
            columns,
            interval: sink.interval,
            backoff: Backoff::default(),
            epochs: Arc::clone(&epochs),
            moved: moved_tx,
            health: health_tx,
            move_timeout: sink.move_timeout,
            stuck: stuck_tx,
            step: Default::default(),
            stopping,
            urgent: urgent_rx,
            closing: closing.clone(),
        };
        Ok(MaxComputeSink {
            client,
            dataset,
            staging,
            epochs,
            moved,
            uploads: Arc::new(Semaphore::new(MAX_UPLOADS)),
            health,
            stuck,
            mover: Some(tokio::spawn(mover.run())),
            urgent: Arc::new(urgent),
            closing,
        })
    }

    /// This instance's staging table.
    pub fn staging_table(&self) -> &str {
        &self.staging
    }
}

impl Sink for MaxComputeSink {
    fn name(&self) -> &'static str {
        "maxcompute"
    }

    fn submit(&mut self, batch: Arc<Batch>) -> SubmitFuture<'_> {
        Box::pin(async move {
            let permit = Arc::clone(&self.uploads)
                .acquire_owned()
                .await
                .map_err(|_| SinkError::new(SinkErrorKind::Internal, false, "sink closed"))?;
            let client = Arc::clone(&self.client);
            let staging = self.staging.clone();
            let epochs = Arc::clone(&self.epochs);
            let mut moved = self.moved.clone();
            let ack: Acknowledgement = Box::pin(async move {
                let staged = upload::stage(&client, &staging, &batch.records, &epochs).await;
                drop(permit);
                let staged = staged?;
                let rejected = staged.rejected;
                let held = !rejected.is_empty();
                let Some(epoch) = staged.epoch else {
                    // Every row refused: nothing staged, nothing to wait for.
                    return Ok(Progress::Written(WriteReport {
                        rejected,
                        commit_metadata: Vec::new(),
                    }));
                };
                let written = async move {
                    moved.wait_for(|m| *m > epoch).await.map_err(|_| {
                        SinkError::new(
                            SinkErrorKind::Internal,
                            false,
                            "MaxCompute: the mover stopped before moving staged rows (they \
                             stay uncommitted in Kafka)",
                        )
                    })?;
                    Ok(Progress::Written(WriteReport {
                        rejected,
                        commit_metadata: Vec::new(),
                    }))
                };
                if held {
                    // Refused rows are dead-lettered from the batch: keep it until written.
                    let done = written.await;
                    drop(batch);
                    return done;
                }
                drop(batch);
                Ok(Progress::Staged(Box::pin(written)))
            });
            Ok(ack)
        })
    }

    fn health(&self) -> Option<watch::Receiver<bool>> {
        Some(self.health.clone())
    }

    fn stuck(&self) -> Option<watch::Receiver<Option<String>>> {
        Some(self.stuck.clone())
    }

    /// A revoke moves what is staged at once (and what is staged until its deadline), so the
    /// revoke commits it: rows left staged would be moved after the partition's next owner read
    /// them again.
    fn revoke_hook(&self) -> Option<RevokeHook> {
        let urgent = Arc::clone(&self.urgent);
        Some(Arc::new(move |deadline: std::time::Instant| {
            urgent.send_replace(Some(tokio::time::Instant::from_std(deadline)));
        }))
    }

    /// Ends the mover after its running move (waiting at most [`MOVE_WAIT`]) and drops the
    /// staging table once no move reads from it. A move still running is left to finish on its
    /// own, with the table: never cancelled, never emptied under it (its rows' offsets are not
    /// committed, so Kafka delivers them again; the next start of this pod drops the table).
    fn close(&mut self) -> CloseFuture<'_> {
        Box::pin(async move {
            self.closing.cancel();
            if let Some(m) = self.mover.take() {
                let mut m = m;
                if tokio::time::timeout(MOVE_WAIT, &mut m).await.is_err() {
                    tracing::warn!(
                        staging = %self.staging,
                        waited_s = MOVE_WAIT.as_secs(),
                        "MaxCompute: a move is still running at close; it is left to finish and \
                         the staging table is kept for it (its rows' offsets are uncommitted and \
                         will be read again; the next start of this pod drops the table)"
                    );
                    return;
                }
            }
            let sql = table::drop_sql(&self.dataset, &self.staging);
            let dropped = tokio::time::timeout(DROP_BUDGET, async {
                let mut waits = Backoff {
                    initial: Duration::from_millis(100),
                    max: Duration::from_secs(2),
                }
                .pauses();
                loop {
                    match self.client.run_sql(&sql, SQL_SETTINGS).await {
                        Ok(()) => return,
                        Err(e) => {
                            tracing::warn!(error = %e, "MaxCompute: dropping the staging table failed; retrying");
                            let wait = waits.next().unwrap_or(Duration::from_secs(2));
                            tokio::time::sleep(wait).await;
                        }
                    }
                }
            })
            .await;
            match dropped {
                Ok(()) => {
                    tracing::info!(staging = %self.staging, "MaxCompute: staging table dropped")
                }
                Err(_) => tracing::warn!(
                    staging = %self.staging,
                    "MaxCompute: the staging table could not be dropped; the next start of this pod drops it"
                ),
            }
        })
    }
}
