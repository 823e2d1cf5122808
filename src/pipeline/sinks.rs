//! The sink task: takes batches from the pipeline, writes each to every sink in turn (retrying
//! retryable errors with jittered, capped backoff, never giving up), and reports the batch as
//! acknowledged only when all sinks have it, together with the rows a sink refused for good
//! (rendered as JSON with their source coordinates, to be dead-lettered before their offsets
//! count as acknowledged). Merlin's metrics are updated here, on success.

use super::state::{Event, SinkJob};
use crate::deadletter::{DeadLetter, Kind};
use crate::metrics::names;
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

/// Merlin's metric labels.
#[derive(Clone)]
pub(crate) struct ModelLabels {
    pub(crate) model_id: String,
    pub(crate) model_version: String,
    pub(crate) project: String,
}

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
    while let Some(job) = tokio::select! {
        j = rx.recv() => j,
        () = hard_stop.cancelled() => None,
    } {
        let mut dead = Vec::new();
        let mut checkpoints = Vec::new();
        for sink in sinks.iter_mut() {
            let name = sink.name();
            loop {
                let started = Instant::now();
                let r = write_with_retry(sink.as_mut(), &job.batch, Backoff::default(), &hard_stop, |e, attempt, wait| {
                    health.sinks_ok.store(false, Ordering::Relaxed);
                    metrics::counter!(names::SINK_ERRORS, names::SINK => name, names::ERROR_CODE => e.kind.code(), names::RETRYABLE => "true")
                        .increment(1);
                    tracing::warn!(sink = name, attempt, wait_ms = wait.as_millis() as u64, error = %e, "sink write failed; retrying");
                })
                .await;
                match r {
                    Ok(report) => {
                        health.sinks_ok.store(true, Ordering::Relaxed);
                        metrics::histogram!(names::SINK_LATENCY, names::SINK => name)
                            .record(started.elapsed().as_secs_f64());
                        let written = job.batch.rows().saturating_sub(report.rejected.len());
                        metrics::counter!(names::ROWS_WRITTEN, names::SINK => name)
                            .increment(written as u64);
                        checkpoints.extend(report.commit_metadata);
                        for r in report.rejected {
                            let Some((partition, offset)) = job.batch.source_of_row(r.row) else {
                                continue;
                            };
                            metrics::counter!(names::DEAD_LETTERS, names::KIND => "row", names::REASON => r.code)
                                .increment(1);
                            tracing::warn!(sink = name, partition, offset, row = r.row, code = r.code,
                                reason = %r.message, "row rejected by the sink; dead-lettered");
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
                            });
                        }
                        break;
                    }
                    Err(RetryError::Cancelled(_)) => return,
                    Err(RetryError::NeedsFix(e)) => {
                        health.sinks_ok.store(false, Ordering::Relaxed);
                        metrics::counter!(names::SINK_ERRORS, names::SINK => name, names::ERROR_CODE => e.kind.code(), names::RETRYABLE => "false")
                            .increment(1);
                        tracing::error!(sink = name, error = %e, "sink refuses the batch until the cause is fixed; it stays unacknowledged and is tried again every 30 s");
                        tokio::select! {
                            () = hard_stop.cancelled() => return,
                            () = tokio::time::sleep(NEEDS_FIX_RETRY) => {}
                        }
                    }
                }
            }
        }
        metrics::histogram!(names::FLUSH_LATENCY).record(job.opened.elapsed().as_secs_f64());
        let l = &labels;
        metrics::counter!(names::PREDICTION_LOGS_PROCESSED, names::MODEL_ID => l.model_id.clone(),
            names::MODEL_VERSION => l.model_version.clone(), names::MERLIN_PROJECT => l.project.clone())
        .increment(job.batch.messages as u64);
        if let Some(ts) = max_timestamp_seconds(&job.batch.records) {
            metrics::gauge!(names::LAST_PROCESSED_TIMESTAMP, names::MODEL_ID => l.model_id.clone(),
                names::MODEL_VERSION => l.model_version.clone(), names::MERLIN_PROJECT => l.project.clone())
            .set(ts);
        }
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
