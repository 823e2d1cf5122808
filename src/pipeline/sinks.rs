//! The sink task: takes batches from the pipeline, writes each to every sink in turn (retrying
//! retryable errors with jittered, capped backoff, never giving up), and reports the batch as
//! acknowledged only when all sinks have it, together with the rows a sink refused for good
//! (rendered as JSON with their source coordinates, to be dead-lettered before their offsets
//! count as acknowledged). Merlin's metrics are updated here, on success.

use super::events::{self, ModelLabels, RateLimit};
use super::state::{Event, SinkJob};
use crate::deadletter::{DeadLetter, Kind};
use crate::server::Health;
use crate::sink::retry::{write_with_retry, Backoff, RetryError};
use crate::sink::Sink;
use arrow_array::cast::AsArray;
use arrow_array::types::TimestampMicrosecondType;
use arrow_array::Array;
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// How long to wait before trying a batch again after an error that retrying at once cannot fix
/// ([`RetryError::NeedsFix`]: a permission, a schema). Nothing is acknowledged meanwhile;
/// readiness turns false and the error is logged loudly.
const NEEDS_FIX_RETRY: Duration = Duration::from_secs(30);

pub(crate) async fn run(
    mut rx: tokio::sync::mpsc::Receiver<SinkJob>,
    mut sinks: Vec<Box<dyn Sink>>,
    events: mpsc::Sender<Event>,
    health: Arc<Health>,
    hard_stop: CancellationToken,
    labels: ModelLabels,
    topic: String,
) {
    let mut rows_log = RateLimit::new();
    while let Some(job) = tokio::select! {
        j = rx.recv() => j,
        () = hard_stop.cancelled() => None,
    } {
        if super::crash::injected("panic_in_sink_task") {
            panic!("injected fault: panic_in_sink_task");
        }
        let mut dead = Vec::new();
        let mut checkpoints = Vec::new();
        for sink in sinks.iter_mut() {
            let name = sink.name();
            loop {
                let started = Instant::now();
                let r = write_with_retry(
                    sink.as_mut(),
                    &job.batch,
                    Backoff::default(),
                    &hard_stop,
                    |error, attempt, wait| {
                        health.sinks_ok.store(false, Ordering::Relaxed);
                        events::SinkRetrying {
                            sink: name,
                            attempt,
                            wait,
                            error,
                        }
                        .emit();
                    },
                )
                .await;
                match r {
                    Ok(report) => {
                        health.sinks_ok.store(true, Ordering::Relaxed);
                        events::SinkWrote {
                            sink: name,
                            rows: job.batch.rows().saturating_sub(report.rejected.len()),
                            latency: started.elapsed(),
                        }
                        .emit();
                        checkpoints.extend(report.commit_metadata);
                        for r in report.rejected {
                            let Some((partition, offset)) = job.batch.source_of_row(r.row) else {
                                continue;
                            };
                            events::RowRejected {
                                sink: name,
                                partition,
                                offset,
                                row: r.row,
                                code: r.code,
                                reason: &r.message,
                            }
                            .emit(&mut rows_log, Instant::now());
                            dead.push(DeadLetter {
                                topic: topic.clone(),
                                partition,
                                offset,
                                epoch: job.batch.epoch_of(partition),
                                key: None,
                                payload: crate::output::row_json(&job.batch.records, r.row),
                                kind: Kind::Row,
                                code: r.code,
                                message: format!("{name}: {}", r.message),
                                claim_check: false,
                            });
                        }
                        break;
                    }
                    Err(RetryError::Cancelled(_)) => return,
                    Err(RetryError::NeedsFix(e)) => {
                        health.sinks_ok.store(false, Ordering::Relaxed);
                        events::SinkNeedsFix {
                            sink: name,
                            wait: NEEDS_FIX_RETRY,
                            error: &e,
                        }
                        .emit();
                        tokio::select! {
                            () = hard_stop.cancelled() => return,
                            () = tokio::time::sleep(NEEDS_FIX_RETRY) => {}
                        }
                    }
                }
            }
        }
        events::BatchAcknowledged {
            labels: &labels,
            messages: job.batch.messages,
            newest: max_timestamp_seconds(&job.batch.records),
            since_opened: job.opened.elapsed(),
        }
        .emit();
        if events
            .send(Event::Acked {
                id: job.id,
                dead,
                checkpoints,
            })
            .is_err()
        {
            return;
        }
    }
}

/// Largest `request_timestamp` (column 2) of a batch, in unix seconds.
fn max_timestamp_seconds(b: &arrow_array::RecordBatch) -> Option<f64> {
    let col = b.column(2).as_primitive_opt::<TimestampMicrosecondType>()?;
    let mut max: Option<i64> = None;
    for i in 0..col.len() {
        if col.is_valid(i) {
            let v = col.value(i);
            max = Some(max.map_or(v, |m| m.max(v)));
        }
    }
    max.map(|m| m as f64 / 1e6)
}
