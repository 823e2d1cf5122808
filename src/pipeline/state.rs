//! The pipeline's state, owned by the polling thread: batcher, offset tracker, batches in
//! flight, dead letters in flight. Every decision about what may be committed is made here.
//!
//! Flow: a consumed message is registered with the tracker, then decoded into the batcher. A
//! full batch is queued for the sink task (bounded channel); its offsets are acknowledged in the
//! tracker when every sink has acknowledged it. A rejected message goes to the dead-letter
//! target; its offset is acknowledged when the target has acknowledged the write. Only the
//! contiguous acknowledged prefix per partition is ever committed.

use crate::batch::{Batch, Batcher, PartitionOffsets};
use crate::commit::{OffsetRange, OffsetTracker, Partition};
use crate::deadletter::{self, DeadLetter, Outcome};
use crate::metrics::names;
use crate::server::Health;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};
use tokio::sync::mpsc::error::TrySendError;

/// A batch on its way to the sinks.
#[derive(Clone)]
pub(crate) struct SinkJob {
    pub(crate) id: u64,
    pub(crate) batch: Arc<Batch>,
    /// When the batch's first message arrived (flush latency).
    pub(crate) opened: Instant,
}

/// What other threads report back to the pipeline.
pub(crate) enum Event {
    /// Every sink acknowledged the batch; `dead` are rows a sink refused (to dead-letter);
    /// `metadata` is exactly-once commit metadata per partition (last offset, metadata).
    Acked {
        id: u64,
        dead: Vec<DeadLetter>,
        metadata: Vec<(Partition, i64, i64, String)>,
    },
    /// A dead-letter write finished.
    DeadLetter(Outcome),
}

struct Inflight {
    offsets: Vec<(PartitionOffsets, u64)>,
    bytes: usize,
}

/// Counters kept locally and published once per batch (telemetry is never per message).
#[derive(Default)]
struct Counts {
    messages: u64,
    bytes: u64,
    rows: u64,
}

/// Totals since start (for summaries).
#[derive(Default, Debug, Clone, Copy)]
pub(crate) struct Totals {
    pub(crate) messages: u64,
    pub(crate) rows: u64,
    pub(crate) dead_letters: u64,
}

/// Logs at most `burst` lines per window, then a summary of what was suppressed.
pub(crate) struct RateLimit {
    window: Instant,
    emitted: u32,
    suppressed: u64,
}

impl RateLimit {
    pub(crate) fn new() -> Self {
        RateLimit {
            window: Instant::now(),
            emitted: 0,
            suppressed: 0,
        }
    }

    /// Whether to log now (at most 10 lines per 10 s).
    pub(crate) fn allow(&mut self, now: Instant) -> bool {
        if now.duration_since(self.window) >= Duration::from_secs(10) {
            if self.suppressed > 0 {
                tracing::warn!(
                    suppressed = self.suppressed,
                    "dead-letter log lines suppressed in the last window"
                );
            }
            self.window = now;
            self.emitted = 0;
            self.suppressed = 0;
        }
        if self.emitted < 10 {
            self.emitted += 1;
            true
        } else {
            self.suppressed += 1;
            false
        }
    }
}

/// The pipeline state.
pub(crate) struct State {
    pub(crate) topic: String,
    pub(crate) batcher: Batcher,
    pub(crate) tracker: OffsetTracker,
    pub(crate) health: Arc<Health>,
    events: mpsc::Receiver<Event>,
    sink_tx: tokio::sync::mpsc::Sender<SinkJob>,
    dead_letters: Box<dyn deadletter::Target>,
    next_id: u64,
    inflight: HashMap<u64, Inflight>,
    queue: VecDeque<SinkJob>,
    epochs: HashMap<Partition, u64>,
    dlq_pending: usize,
    /// Dead letters not yet written, per source offset (its ack waits for all of them).
    dlq_waiting: HashMap<(Partition, i64), u32>,
    dlq_retry: VecDeque<(Instant, DeadLetter)>,
    inflight_bytes: usize,
    budget: usize,
    /// Exactly-once: per partition, commit metadata by the batch's last offset (increasing).
    marks: HashMap<Partition, VecDeque<(i64, i64, String)>>,
    /// Exactly-once: the metadata read at assignment, used until a batch of ours lands.
    prior_marks: HashMap<Partition, String>,
    /// Exactly-once: the checkpoints handed to the sink at assignment.
    starts: Option<crate::sink::exactly_once::PartitionStarts>,
    counts: Counts,
    pub(crate) totals: Totals,
    log_limit: RateLimit,
    sink_closed: bool,
}

impl State {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        topic: String,
        batcher: Batcher,
        health: Arc<Health>,
        events: mpsc::Receiver<Event>,
        sink_tx: tokio::sync::mpsc::Sender<SinkJob>,
        dead_letters: Box<dyn deadletter::Target>,
        budget: usize,
    ) -> Self {
        State {
            topic,
            batcher,
            tracker: OffsetTracker::new(),
            health,
            events,
            sink_tx,
            dead_letters,
            next_id: 0,
            inflight: HashMap::new(),
            queue: VecDeque::new(),
            epochs: HashMap::new(),
            dlq_pending: 0,
            dlq_waiting: HashMap::new(),
            dlq_retry: VecDeque::new(),
            inflight_bytes: 0,
            budget,
            marks: HashMap::new(),
            prior_marks: HashMap::new(),
            starts: None,
            counts: Counts::default(),
            totals: Totals::default(),
            log_limit: RateLimit::new(),
            sink_closed: false,
        }
    }

    /// Arrow bytes of batches flushed but not yet acknowledged by every sink. The open batch
    /// (at most `batching.max_bytes`) and librdkafka's prefetch (a quarter of the budget, see
    /// [`crate::source::consumer_config`]) come on top; validation keeps the budget at least
    /// `max_bytes`.
    pub(crate) fn inflight_bytes(&self) -> usize {
        self.inflight_bytes
    }

    /// Whether intake should pause (the in-flight budget is used up).
    pub(crate) fn over_budget(&self) -> bool {
        self.inflight_bytes() >= self.budget || self.dlq_pending + self.dlq_retry.len() >= 100_000
    }

    /// Whether paused intake may resume.
    pub(crate) fn under_half_budget(&self) -> bool {
        self.inflight_bytes() < self.budget / 2 && self.dlq_pending + self.dlq_retry.len() < 50_000
    }

    /// Nothing is waiting for an acknowledgement.
    pub(crate) fn settled(&self) -> bool {
        self.inflight.is_empty()
            && self.dlq_pending == 0
            && self.dlq_retry.is_empty()
            && self.batcher.is_empty()
    }

    /// Handles one consumed message.
    pub(crate) fn on_message(
        &mut self,
        partition: Partition,
        offset: i64,
        key: Option<&[u8]>,
        payload: Option<&[u8]>,
        now: Instant,
    ) {
        if self.tracker.register(partition, offset).is_err() {
            // Delivered again after a rewind: it is already registered (and pending or done).
            return;
        }
        let Some(payload) = payload else {
            // A tombstone carries no log; Merlin skips them too. Acknowledge it at once.
            self.tracker.ack(partition, OffsetRange::single(offset));
            return;
        };
        self.counts.messages += 1;
        self.counts.bytes += payload.len() as u64;
        self.totals.messages += 1;
        let mut ready = Vec::new();
        match self
            .batcher
            .push(partition, offset, payload, now, &mut ready)
        {
            Ok(rows) => {
                self.counts.rows += rows as u64;
                self.totals.rows += rows as u64;
            }
            Err(failure) => {
                self.totals.dead_letters += 1;
                let code = failure.error.kind.code();
                metrics::counter!(names::DEAD_LETTERS, names::KIND => "decode", names::REASON => code).increment(1);
                if self.log_limit.allow(now) {
                    tracing::warn!(
                        topic = %self.topic, partition, offset, code, reason = %failure.error.reason,
                        "log rejected; dead-lettered"
                    );
                }
                self.send_dead_letter(
                    true,
                    DeadLetter {
                        topic: self.topic.clone(),
                        partition,
                        offset,
                        key: key.map(<[u8]>::to_vec),
                        payload: payload.to_vec(),
                        kind: deadletter::Kind::Decode,
                        code,
                        message: failure.error.reason,
                    },
                );
            }
        }
        for b in ready {
            self.dispatch(b, now);
        }
    }

    /// Sends a dead letter; `fresh` (not a re-send) adds it to the letters its source offset
    /// waits for.
    fn send_dead_letter(&mut self, fresh: bool, letter: DeadLetter) {
        if fresh {
            *self
                .dlq_waiting
                .entry((letter.partition, letter.offset))
                .or_insert(0) += 1;
        }
        self.dlq_pending += 1;
        self.dead_letters.send(letter);
    }

    /// Flushes the open batch if its linger time has passed.
    pub(crate) fn poll_linger(&mut self, now: Instant) {
        if let Some(b) = self.batcher.poll_linger(now) {
            self.dispatch(b, now);
        }
    }

    /// Flushes the open batch whatever its size.
    pub(crate) fn flush(&mut self, now: Instant) {
        if let Some(b) = self.batcher.flush() {
            self.dispatch(b, now);
        }
    }

    fn dispatch(&mut self, mut batch: Batch, now: Instant) {
        let id = self.next_id;
        self.next_id += 1;
        metrics::histogram!(names::FLUSH_ROWS, names::REASON => batch.reason.code())
            .record(batch.rows() as f64);
        metrics::histogram!(names::FLUSH_BYTES).record(batch.bytes as f64);
        metrics::counter!(names::MESSAGES_CONSUMED)
            .increment(std::mem::take(&mut self.counts.messages));
        metrics::counter!(names::BYTES_CONSUMED).increment(std::mem::take(&mut self.counts.bytes));
        metrics::counter!(names::ROWS_DECODED).increment(std::mem::take(&mut self.counts.rows));
        let offsets: Vec<(PartitionOffsets, u64)> = batch
            .offsets
            .iter()
            .map(|po| {
                (
                    po.clone(),
                    self.epochs.get(&po.partition).copied().unwrap_or(0),
                )
            })
            .collect();
        batch.epochs = offsets.iter().map(|(po, e)| (po.partition, *e)).collect();
        let bytes = batch.bytes;
        self.inflight.insert(id, Inflight { offsets, bytes });
        self.inflight_bytes += bytes;
        metrics::gauge!(names::INFLIGHT_BYTES).set(self.inflight_bytes as f64);
        let opened = batch.opened.unwrap_or(now);
        self.queue.push_back(SinkJob {
            id,
            batch: Arc::new(batch),
            opened,
        });
        self.pump();
    }

    /// Hands queued batches to the sink task while its channel has room.
    pub(crate) fn pump(&mut self) {
        while let Some(job) = self.queue.front() {
            match self.sink_tx.try_send(job.clone()) {
                Ok(()) => {
                    self.queue.pop_front();
                }
                Err(TrySendError::Full(_)) => break,
                Err(TrySendError::Closed(_)) => {
                    if !self.sink_closed {
                        tracing::error!("sink task stopped; batches stay unacknowledged");
                        self.sink_closed = true;
                    }
                    break;
                }
            }
        }
    }

    /// Applies every event that has arrived; with `wait`, first blocks up to that long for one.
    pub(crate) fn drain_events(&mut self, wait: Option<Duration>) {
        if let Some(w) = wait {
            match self.events.recv_timeout(w) {
                Ok(e) => self.apply(e),
                Err(_) => return,
            }
        }
        while let Ok(e) = self.events.try_recv() {
            self.apply(e);
        }
        self.pump();
    }

    fn apply(&mut self, e: Event) {
        match e {
            Event::Acked { id, dead, metadata } => {
                if let Some(b) = self.inflight.remove(&id) {
                    for (p, first, last, m) in metadata {
                        let current = b.offsets.iter().any(|(po, e)| {
                            po.partition == p && self.epochs.get(&p).copied().unwrap_or(0) == *e
                        });
                        if current {
                            self.marks.entry(p).or_default().push_back((first, last, m));
                        }
                    }
                    self.inflight_bytes -= b.bytes;
                    metrics::gauge!(names::INFLIGHT_BYTES).set(self.inflight_bytes as f64);
                    // Offsets with refused rows wait for their dead-letter writes.
                    let mut held: Vec<(Partition, i64)> =
                        dead.iter().map(|d| (d.partition, d.offset)).collect();
                    held.sort_unstable();
                    held.dedup();
                    self.totals.dead_letters += dead.len() as u64;
                    for letter in dead {
                        self.send_dead_letter(true, letter);
                    }
                    for (po, epoch) in b.offsets {
                        // Acks for a partition revoked (and perhaps re-assigned) since are
                        // stale: the rows were written, but the offsets are no longer ours.
                        if self.epochs.get(&po.partition).copied().unwrap_or(0) != epoch {
                            continue;
                        }
                        for r in po.ranges {
                            let mut first = r.first;
                            for &(_, o) in held
                                .iter()
                                .filter(|(p, o)| *p == po.partition && r.contains(*o))
                            {
                                if o > first {
                                    self.tracker
                                        .ack(po.partition, OffsetRange::new(first, o - 1));
                                }
                                first = o + 1;
                            }
                            if first <= r.last {
                                self.tracker
                                    .ack(po.partition, OffsetRange::new(first, r.last));
                            }
                        }
                    }
                }
            }
            Event::DeadLetter(Outcome::Written { partition, offset }) => {
                self.dlq_pending = self.dlq_pending.saturating_sub(1);
                self.health.dead_letter_ok.store(true, Ordering::Relaxed);
                let key = (partition, offset);
                let left = self.dlq_waiting.get_mut(&key).map(|n| {
                    *n = n.saturating_sub(1);
                    *n
                });
                if left.unwrap_or(0) == 0 {
                    self.dlq_waiting.remove(&key);
                    self.tracker.ack(partition, OffsetRange::single(offset));
                }
            }
            Event::DeadLetter(Outcome::Failed { letter, error }) => {
                self.dlq_pending = self.dlq_pending.saturating_sub(1);
                self.health.dead_letter_ok.store(false, Ordering::Relaxed);
                tracing::error!(partition = letter.partition, offset = letter.offset, error = %error,
                    "dead-letter write failed; retrying, nothing past it is committed");
                self.dlq_retry
                    .push_back((Instant::now() + Duration::from_secs(1), *letter));
            }
        }
    }

    /// Re-sends dead letters whose retry time has come.
    pub(crate) fn retry_dead_letters(&mut self, now: Instant) {
        while self.dlq_retry.front().is_some_and(|(t, _)| *t <= now) {
            if let Some((_, l)) = self.dlq_retry.pop_front() {
                self.send_dead_letter(false, l);
            }
        }
    }

    /// Waits, bounded by `deadline`, until nothing is in flight (or, with `partitions`, until
    /// no batch in flight holds those partitions and no dead letter is pending).
    pub(crate) fn settle(&mut self, deadline: Instant, partitions: Option<&[Partition]>) -> bool {
        loop {
            let now = Instant::now();
            self.retry_dead_letters(now);
            self.pump();
            let done = match partitions {
                None => self.settled(),
                Some(ps) => {
                    self.dlq_pending == 0
                        && self
                            .dlq_retry
                            .iter()
                            .all(|(_, l)| !ps.contains(&l.partition))
                        && self
                            .inflight
                            .values()
                            .all(|b| b.offsets.iter().all(|(po, _)| !ps.contains(&po.partition)))
                }
            };
            if done {
                return true;
            }
            if now >= deadline {
                return false;
            }
            self.drain_events(Some((deadline - now).min(Duration::from_millis(50))));
        }
    }

    /// Exactly-once: hands checkpoints to the sink through `starts`.
    pub(crate) fn set_starts(&mut self, starts: crate::sink::exactly_once::PartitionStarts) {
        self.starts = Some(starts);
    }

    /// Whether commits carry exactly-once metadata.
    pub(crate) fn exactly_once(&self) -> bool {
        self.starts.is_some()
    }

    /// Exactly-once: what to commit for a committable `offset` on `p`: the offset, moved back to
    /// the start of a batch when it falls inside one (a checkpoint exists only at batch
    /// boundaries), and the checkpoint of the last batch below it (else the one read at
    /// assignment). Drops marks no longer needed.
    pub(crate) fn commit_point(&mut self, p: Partition, offset: i64) -> (i64, Option<String>) {
        let mut target = offset;
        let mut found = None;
        if let Some(marks) = self.marks.get_mut(&p) {
            while let Some((first, last, _)) = marks.front() {
                if *last < offset {
                    found = marks.pop_front().map(|(_, _, m)| m);
                } else {
                    if *first < offset {
                        target = *first; // inside this batch: commit up to its start
                    }
                    break;
                }
            }
        }
        if let Some(m) = &found {
            // The floor for later commits that do not pass another batch.
            self.prior_marks.insert(p, m.clone());
        }
        (target, found.or_else(|| self.prior_marks.get(&p).cloned()))
    }

    /// A new assignment of `partitions`: acknowledgements of earlier batches no longer apply.
    /// `checkpoints` (exactly-once) are the commit metadata read for them.
    pub(crate) fn assigned_with(
        &mut self,
        partitions: &[Partition],
        checkpoints: &HashMap<Partition, String>,
    ) {
        for p in partitions {
            *self.epochs.entry(*p).or_insert(0) += 1;
            self.marks.remove(p);
            match checkpoints.get(p) {
                Some(m) if !m.is_empty() => {
                    self.prior_marks.insert(*p, m.clone());
                }
                _ => {
                    self.prior_marks.remove(p);
                }
            }
            if let Some(starts) = &self.starts {
                let epoch = self.epochs[p];
                let cp = checkpoints
                    .get(p)
                    .and_then(|m| crate::bigquery::exactly_once::Checkpoint::from_metadata(m));
                if let Ok(mut s) = starts.starts.lock() {
                    s.insert(*p, (epoch, cp));
                }
            }
        }
        if !partitions.is_empty() {
            self.health.topic_exists.store(true, Ordering::Relaxed);
        }
    }

    /// Exactly-once: new streams the sink wants committed.
    pub(crate) fn take_registrations(&self) -> Vec<crate::sink::exactly_once::Registration> {
        self.starts
            .as_ref()
            .and_then(|s| {
                s.registrations
                    .lock()
                    .ok()
                    .map(|mut r| std::mem::take(&mut *r))
            })
            .unwrap_or_default()
    }

    /// Exactly-once: whether `r` was made for the partition's current assignment (batches
    /// consumed in an earlier one never get this far: the sink checks their epoch).
    pub(crate) fn registration_is_current(
        &self,
        r: &crate::sink::exactly_once::Registration,
    ) -> bool {
        self.epochs.get(&r.partition).copied().unwrap_or(0) == r.epoch
    }

    /// Exactly-once: `metadata` was committed at `offset`; later commits that pass no batch
    /// carry it.
    pub(crate) fn registered(&mut self, p: Partition, offset: i64, metadata: String) {
        self.tracker.mark_committed(p, offset);
        self.prior_marks.insert(p, metadata);
    }

    /// Forgets revoked partitions (after their committable offsets were committed).
    pub(crate) fn forget(&mut self, partitions: &[Partition]) {
        for p in partitions {
            let r = self.tracker.revoke(*p);
            *self.epochs.entry(*p).or_insert(0) += 1;
            self.marks.remove(p);
            self.prior_marks.remove(p);
            if let Some(starts) = &self.starts {
                if let Ok(mut s) = starts.starts.lock() {
                    s.remove(p);
                }
            }
            if r.dropped > 0 {
                tracing::info!(
                    partition = p,
                    dropped = r.dropped,
                    "unacknowledged offsets of a revoked partition left uncommitted"
                );
            }
        }
    }

    /// Waits for every dead-letter write to finish (bounded).
    pub(crate) fn flush_dead_letters(&mut self, timeout: Duration) {
        self.dead_letters.flush(timeout);
        self.health
            .dead_letter_ok
            .store(self.dead_letters.is_ready(), Ordering::Relaxed);
    }
}
