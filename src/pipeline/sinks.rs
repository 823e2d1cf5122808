//! The sink task: takes batches from the pipeline and submits each to every sink, each sink in
//! its own lane ([`super::lanes`]), so one sink's slow `submit` never holds up another's, and
//! without waiting for a sink's acknowledgement before submitting its next batch or taking the
//! next batch (a sink bounds what it takes itself). Acknowledgements are awaited concurrently
//! and reported one by one, per sink, as they arrive ([`Event::Acked`], [`Event::Staged`]); the
//! ledger counts a batch when every sink has acknowledged it. A failed submission or acknowledgement is
//! retried for that sink alone: retryable errors after a jittered, capped backoff, errors that
//! need an operator every 30 s with the publisher unready; never given up, never acknowledged
//! meanwhile. After a failure, the sink is given nothing new until the failed batch has been
//! submitted again (so a sink that remembers its progress, like Arize's, gets the same batch
//! next). Refused rows come back rendered as JSON with their source coordinates, to be
//! dead-lettered. Merlin's metrics are updated here, on success.

use super::events::{self, ModelLabels, RateLimit};
use super::lanes::{Lanes, Submission};
use super::ledger::{BatchId, SinkIndex};
use super::state::{Event, SinkJob};
use crate::batch::Batch;
use crate::deadletter::{DeadLetter, Kind};
use crate::server::Health;
use crate::sink::retry::Backoff;
use crate::sink::{Acknowledgement, Progress, Sink, SinkError, WriteReport};
use arrow_array::cast::AsArray;
use arrow_array::types::TimestampMicrosecondType;
use arrow_array::Array;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

/// How long to wait before trying a batch again after an error that retrying at once cannot fix
/// (a permission, a schema). Nothing is acknowledged meanwhile; readiness turns false and the
/// error is logged loudly.
const NEEDS_FIX_RETRY: Duration = Duration::from_secs(30);

/// One batch the task has taken and not every sink has written.
struct Taken {
    /// The batch, while some sink holds it (not staged, not written): dropped once every sink
    /// has let go, as the ledger stops counting its bytes then.
    batch: Option<Arc<Batch>>,
    rows: usize,
    messages: usize,
    newest: Option<f64>,
    opened: Instant,
    /// Sinks that have not written it yet.
    remaining: usize,
    /// Per sink: it let go of the batch (staged or written it).
    released: Vec<bool>,
    /// The rows' `request_timestamp`s, for their freshness when each sink has written them.
    stamps: crate::metrics::quality::Stamps,
    /// Per sink: the bytes of the staged acknowledgement awaited for it (0 when none).
    waiting: Vec<usize>,
}

impl Taken {
    /// What the task keeps for the batch once no sink holds it, as allocated: this record, the
    /// timestamp runs and the staged acknowledgements awaited (the tokio task around each, a
    /// header of about a cache line, is not counted). Reported with each stage, so the ledger
    /// counts it against the budget until the batch is written.
    fn kept_bytes(&self) -> usize {
        std::mem::size_of::<(BatchId, Taken)>()
            + self.stamps.allocated_bytes()
            + self.released.capacity() * std::mem::size_of::<bool>()
            + self.waiting.capacity() * std::mem::size_of::<usize>()
            + self.waiting.iter().sum::<usize>()
    }

    /// Sink `sink` let go of the batch (staged or written); drops it when no sink holds it.
    fn let_go(&mut self, sink: SinkIndex) {
        self.released[sink] = true;
        if self.released.iter().all(|s| *s) {
            self.batch = None;
        }
    }
}

/// A batch waiting to be submitted to one sink, and when it may be.
struct Queued {
    id: BatchId,
    not_before: Option<tokio::time::Instant>,
    /// Failed attempts so far (the backoff's exponent).
    attempt: u32,
}

/// What an acknowledgement future ended with.
struct Answer {
    id: BatchId,
    sink: SinkIndex,
    attempt: u32,
    submitted: Instant,
    result: Result<Progress, SinkError>,
}

/// The task's state, apart from the sinks (borrowed by a submission in progress).
struct Task {
    events: mpsc::Sender<Event>,
    health: Arc<Health>,
    labels: ModelLabels,
    topic: String,
    names: Vec<&'static str>,
    /// Per sink: its last submission or acknowledgement failed. Readiness (`sinks_ok`) is true
    /// only while no sink is failing, whatever the others do meanwhile.
    failing: Vec<bool>,
    taken: HashMap<BatchId, Taken>,
    /// Per sink: batches to submit, in order.
    queues: Vec<VecDeque<Queued>>,
    acks: JoinSet<Answer>,
    rows_log: RateLimit,
    backoff: Backoff,
}

pub(crate) async fn run(
    rx: tokio::sync::mpsc::Receiver<SinkJob>,
    sinks: Vec<Box<dyn Sink>>,
    events: mpsc::Sender<Event>,
    health: Arc<Health>,
    hard_stop: CancellationToken,
    labels: ModelLabels,
    topic: String,
) {
    let names: Vec<&'static str> = sinks.iter().map(|s| s.name()).collect();
    let mut lanes = Lanes::start(sinks, hard_stop.child_token());
    run_until_done(
        rx, &mut lanes, names, events, health, hard_stop, labels, topic,
    )
    .await;
    // Whatever ended the task, each sink releases what it holds outside the process.
    lanes.close().await;
}

#[allow(clippy::too_many_arguments)]
async fn run_until_done(
    mut rx: tokio::sync::mpsc::Receiver<SinkJob>,
    lanes: &mut Lanes,
    names: Vec<&'static str>,
    events: mpsc::Sender<Event>,
    health: Arc<Health>,
    hard_stop: CancellationToken,
    labels: ModelLabels,
    topic: String,
) {
    let mut t = Task {
        events,
        health,
        labels,
        topic,
        failing: vec![false; names.len()],
        queues: names.iter().map(|_| VecDeque::new()).collect(),
        names,
        taken: HashMap::new(),
        acks: JoinSet::new(),
        rows_log: RateLimit::new(),
        backoff: Backoff::default(),
    };
    let mut open = true;
    loop {
        // Give each idle lane its next batch, if it is due.
        let now = tokio::time::Instant::now();
        for i in 0..t.queues.len() {
            if !lanes.idle(i) {
                continue;
            }
            while let Some(q) = t.queues[i].front() {
                if q.not_before.is_some_and(|at| at > now) {
                    break;
                }
                let (id, attempt) = (q.id, q.attempt);
                t.queues[i].pop_front();
                let Some(taken) = t.taken.get(&id) else {
                    continue;
                };
                let Some(batch) = taken.batch.clone() else {
                    tracing::error!(
                        sink = t.names[i],
                        "a sink failed a batch after staging it, when no sink holds it any \
                         more: it cannot be submitted again; its offsets stay uncommitted"
                    );
                    return;
                };
                lanes.submit(i, Submission { id, attempt, batch });
                break;
            }
        }
        if !open && t.taken.is_empty() {
            return;
        }
        // The next retry due in an idle lane (a busy lane is woken by its submission).
        let wake = t
            .queues
            .iter()
            .enumerate()
            .filter(|(i, _)| lanes.idle(*i))
            .filter_map(|(_, q)| q.front().and_then(|q| q.not_before))
            .min();
        tokio::select! {
            () = hard_stop.cancelled() => return,
            j = rx.recv(), if open => match j {
                Some(job) => t.take(job),
                None => open = false,
            },
            s = lanes.next() => match s {
                Some(s) => match s.result {
                    Ok(ack) => {
                        t.watch(s.id, s.sink, s.attempt, s.submitted, ack);
                    }
                    Err(e) => t.failed(s.id, s.sink, s.attempt, &e),
                },
                None => return,
            },
            Some(done) = t.acks.join_next() => {
                if !t.answered(done) {
                    return;
                }
            }
            () = sleep_until(wake) => {}
        }
    }
}

async fn sleep_until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

impl Task {
    /// A new batch: queued for every sink.
    fn take(&mut self, job: SinkJob) {
        if super::crash::injected("panic_in_sink_task") {
            panic!(
                "injected fault: panic_in_sink_task{}",
                super::crash::injected_message()
            );
        }
        if self.queues.is_empty() {
            // No sinks: the ledger counted the batch as written when it was dispatched.
            return;
        }
        let id = job.id;
        for q in &mut self.queues {
            q.push_back(Queued {
                id,
                not_before: None,
                attempt: 0,
            });
        }
        let remaining = self.queues.len();
        let taken = Taken {
            rows: job.batch.rows(),
            messages: job.batch.messages,
            newest: max_timestamp_seconds(&job.batch.records),
            stamps: crate::metrics::quality::Stamps::of(&job.batch.records),
            opened: job.opened,
            batch: Some(job.batch),
            remaining,
            released: vec![false; remaining],
            waiting: vec![0; remaining],
        };
        self.taken.insert(id, taken);
    }

    /// Awaits `ack` beside the others; returns the bytes it holds while awaited (the
    /// acknowledgement's future and the one awaiting it).
    fn watch(
        &mut self,
        id: BatchId,
        sink: SinkIndex,
        attempt: u32,
        submitted: Instant,
        ack: Acknowledgement,
    ) -> usize {
        let inner = std::mem::size_of_val(&*ack);
        let answer = async move {
            Answer {
                id,
                sink,
                attempt,
                submitted,
                result: ack.await,
            }
        };
        let bytes = inner + std::mem::size_of_val(&answer);
        self.acks.spawn(answer);
        bytes
    }

    /// A submission or an acknowledgement failed: the batch goes back to the front of the
    /// sink's queue, due after the backoff (or the destination's Retry-After), or after
    /// [`NEEDS_FIX_RETRY`] when retrying at once cannot help.
    fn failed(&mut self, id: BatchId, sink: SinkIndex, attempt: u32, error: &SinkError) {
        self.failing[sink] = true;
        self.health.sinks_ok.store(false, Ordering::Relaxed);
        let name = self.names[sink];
        *self
            .health
            .sink_problem
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(format!("{name}: {error}"));
        let wait = if error.is_retryable() {
            let wait = error
                .retry_after()
                .unwrap_or_else(|| self.backoff.delay(attempt, fastrand::f64()));
            events::SinkRetrying {
                sink: name,
                attempt,
                wait,
                error,
            }
            .emit();
            wait
        } else {
            events::SinkNeedsFix {
                sink: name,
                wait: NEEDS_FIX_RETRY,
                error,
            }
            .emit();
            NEEDS_FIX_RETRY
        };
        self.queues[sink].push_front(Queued {
            id,
            not_before: Some(tokio::time::Instant::now() + wait),
            attempt: attempt.saturating_add(1),
        });
    }

    /// An acknowledgement ended. False when the pipeline is gone.
    fn answered(&mut self, done: Result<Answer, tokio::task::JoinError>) -> bool {
        let a = match done {
            Ok(a) => a,
            Err(e) => {
                // The acknowledgement panicked: its batch stays unacknowledged in that sink.
                // Which batch is lost with the task; stop rather than leave it uncounted.
                tracing::error!(error = %e, "a sink acknowledgement failed unexpectedly");
                return false;
            }
        };
        match a.result {
            Err(e) => {
                // Submitted again, the sink holds the batch again: if it had staged it and
                // another sink still holds it, the ledger counts this sink's hold again (or the
                // batch's bytes would leave the count when the other sink lets go).
                let unstaged = self.taken.get_mut(&a.id).is_some_and(|t| {
                    let staged = t.released[a.sink] && t.batch.is_some();
                    t.released[a.sink] = false;
                    t.waiting[a.sink] = 0;
                    staged
                });
                self.failed(a.id, a.sink, a.attempt, &e);
                if unstaged {
                    let (id, sink) = (a.id, a.sink);
                    return self.events.send(Event::Unstaged { id, sink }).is_ok();
                }
                true
            }
            Ok(Progress::Staged(next)) => {
                let waiting = self.watch(a.id, a.sink, a.attempt, a.submitted, next);
                let kept = self.taken.get_mut(&a.id).map_or(0, |t| {
                    t.let_go(a.sink);
                    t.waiting[a.sink] = waiting;
                    t.kept_bytes()
                });
                self.events
                    .send(Event::Staged {
                        id: a.id,
                        sink: a.sink,
                        kept,
                    })
                    .is_ok()
            }
            Ok(Progress::Written(report)) => self.written(a.id, a.sink, a.submitted, report),
        }
    }

    /// Sink `sink` wrote batch `id`: report it, with its refused rows as dead letters.
    fn written(
        &mut self,
        id: BatchId,
        sink: SinkIndex,
        submitted: Instant,
        report: WriteReport,
    ) -> bool {
        let recovered = std::mem::replace(&mut self.failing[sink], false);
        let ok = !self.failing.contains(&true);
        self.health.sinks_ok.store(ok, Ordering::Relaxed);
        // The lock is taken only when the last failing sink recovers, not at every write.
        if ok && recovered {
            *self
                .health
                .sink_problem
                .lock()
                .unwrap_or_else(|e| e.into_inner()) = None;
        }
        let Some(taken) = self.taken.get_mut(&id) else {
            return true;
        };
        let name = self.names[sink];
        events::SinkWrote {
            sink: name,
            rows: taken.rows.saturating_sub(report.rejected.len()),
            latency: submitted.elapsed(),
        }
        .emit();
        let now = std::time::SystemTime::now();
        match &taken.batch {
            Some(batch) if !report.rejected.is_empty() => {
                let rows: Vec<usize> = report.rejected.iter().map(|r| r.row).collect();
                taken.stamps.without(&batch.records, &rows).acked(name, now);
            }
            _ => taken.stamps.acked(name, now),
        }
        let mut dead = Vec::new();
        if taken.batch.is_none() && !report.rejected.is_empty() {
            tracing::error!(
                sink = name,
                "a sink refused rows after staging a batch no sink holds any more: they cannot \
                 be dead-lettered; its offsets stay uncommitted"
            );
            return false;
        }
        if let Some(batch) = taken.batch.clone() {
            for r in report.rejected {
                let Some((partition, offset)) = batch.source_of_row(r.row) else {
                    // A sink that breaks its contract: the row cannot be dead-lettered, and
                    // acknowledging the batch would commit past it. Stop (a crash) instead.
                    tracing::error!(
                        sink = name,
                        row = r.row,
                        rows = taken.rows,
                        "a sink refused a row the batch does not have: it cannot be \
                         dead-lettered; the batch's offsets stay uncommitted"
                    );
                    return false;
                };
                events::RowRejected {
                    sink: name,
                    partition,
                    offset,
                    row: r.row,
                    code: r.code,
                    reason: &r.message,
                }
                .emit(&mut self.rows_log, Instant::now());
                dead.push(DeadLetter {
                    topic: self.topic.clone(),
                    partition,
                    offset,
                    epoch: batch.epoch_of(partition),
                    key: None,
                    payload: crate::output::row_json(&batch.records, r.row),
                    kind: Kind::Row,
                    code: r.code,
                    message: format!("{name}: {}", r.message),
                    claim_check: false,
                });
            }
        }
        taken.remaining -= 1;
        taken.waiting[sink] = 0;
        taken.let_go(sink);
        if taken.remaining == 0 {
            if let Some(t) = self.taken.remove(&id) {
                events::BatchAcknowledged {
                    labels: &self.labels,
                    messages: t.messages,
                    newest: t.newest,
                    since_opened: t.opened.elapsed(),
                }
                .emit();
            }
        }
        self.events
            .send(Event::Acked {
                id,
                sink,
                dead,
                checkpoints: report.commit_metadata,
            })
            .is_ok()
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

#[cfg(test)]
mod tests;
