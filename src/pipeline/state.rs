//! The pipeline's state, owned by the polling thread: the batcher, the [`Ledger`] (every
//! commit decision), the batches waiting for room in the sink channel, the dead-letter target
//! and its retries, and the exactly-once stream registrations waiting to be committed.
//!
//! Flow: a consumed message is entered in the ledger, then decoded into the batcher. A full
//! batch is stamped by the ledger and queued for the sink task (bounded channel); the ledger
//! acknowledges its offsets when every sink has it. A rejected message goes to the dead-letter
//! target; the ledger holds its offset until the letter is written. What may be committed is
//! the ledger's answer alone; `kafka.rs` only carries it to the broker.

use super::checkpoints::{HeldPartitions, Start};
use super::events::{self, RateLimit};
use super::ledger::{BatchId, Completion, Ledger, SinkIndex};
use crate::batch::{Batch, Batcher};
use crate::commit::Partition;
use crate::deadletter::{self, DeadLetter, Failure, Outcome};
use crate::server::Health;
use crate::sink::bigquery::exactly_once::{PartitionStarts, Registration};
use crate::sink::StreamCheckpoint;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};
use tokio::sync::mpsc::error::TrySendError;

/// A batch on its way to the sinks.
#[derive(Clone)]
pub(crate) struct SinkJob {
    pub(crate) id: BatchId,
    pub(crate) batch: Arc<Batch>,
    /// When the batch's first message arrived (flush latency).
    pub(crate) opened: Instant,
}

/// What other threads report back to the pipeline.
pub(crate) enum Event {
    /// Sink `sink` acknowledged the batch (sinks acknowledge independently, in any order);
    /// `dead` are rows it refused (dead-lettered once every sink has acknowledged the batch);
    /// `checkpoints` are the exactly-once sink's stream positions after it.
    Acked {
        id: BatchId,
        sink: SinkIndex,
        dead: Vec<DeadLetter>,
        checkpoints: Vec<StreamCheckpoint>,
    },
    /// Sink `sink` staged the batch: it no longer holds its bytes, but has not made its rows
    /// durable yet (its acknowledgement follows).
    Staged { id: BatchId, sink: SinkIndex },
    /// What sink `sink` staged failed to become durable: it is given the batch again, and holds
    /// its bytes again.
    Unstaged { id: BatchId, sink: SinkIndex },
    /// A dead-letter write finished.
    DeadLetter(Outcome),
    /// Exactly-once: the sink opened a new stream and waits for it to be recorded in the
    /// group's commit before writing to it.
    Register(Registration),
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

/// The pipeline state.
pub(crate) struct State {
    pub(crate) topic: String,
    pub(crate) batcher: Batcher,
    pub(crate) ledger: Ledger,
    pub(crate) health: Arc<Health>,
    events: mpsc::Receiver<Event>,
    sink_tx: tokio::sync::mpsc::Sender<SinkJob>,
    dead_letters: Box<dyn deadletter::Target>,
    queue: VecDeque<SinkJob>,
    /// How many sinks every batch goes to.
    sinks: usize,
    /// Letters for rows a sink refused, kept until every sink acknowledged their batch (their
    /// bytes count against the budget: [`Ledger::refused_bytes`]).
    stashed: HashMap<BatchId, Vec<DeadLetter>>,
    dlq_retry: VecDeque<(Instant, DeadLetter)>,
    budget: usize,
    /// Exactly-once: the checkpoints handed to the sink at assignment.
    starts: Option<PartitionStarts>,
    /// Exactly-once: new streams waiting to be recorded (arrived as [`Event::Register`]).
    registrations: Vec<Registration>,
    /// Exactly-once: the start decisions made while partitions are being assigned, applied
    /// once the assignment is done.
    pub(crate) checkpoints_read: Vec<(Partition, Start)>,
    /// Where `start_from` placed partitions being assigned (the group had no commit for them),
    /// until they start: that position is then committed, so the group owns it even if the
    /// partition stays idle.
    pub(crate) start_positions: HashMap<Partition, i64>,
    /// `start_from`: assigned partitions whose start could not be read yet (paused; read
    /// again by the poll loop, `pipeline::start_from`).
    pub(crate) start_pending: std::collections::BTreeSet<Partition>,
    /// Exactly-once: assigned partitions held (paused) for their checkpoint.
    pub(crate) held: HeldPartitions,
    counts: Counts,
    pub(crate) totals: Totals,
    log_limit: RateLimit,
    dlq_log_limit: RateLimit,
    claim_log_limit: RateLimit,
    sink_closed: bool,
    /// The final drain has run (settled as far as its deadline allowed): a revoke after it
    /// (the consumer's close) commits what is acknowledged without waiting again.
    pub(crate) drained: bool,
}

impl State {
    /// `starts` is `Some` in exactly-once mode (commits then carry checkpoints); every batch goes
    /// to `sinks` sinks.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        topic: String,
        sinks: usize,
        batcher: Batcher,
        health: Arc<Health>,
        events: mpsc::Receiver<Event>,
        sink_tx: tokio::sync::mpsc::Sender<SinkJob>,
        dead_letters: Box<dyn deadletter::Target>,
        budget: usize,
        starts: Option<PartitionStarts>,
    ) -> Self {
        State {
            topic,
            batcher,
            ledger: Ledger::new(starts.is_some()),
            health,
            events,
            sink_tx,
            dead_letters,
            queue: VecDeque::new(),
            sinks,
            stashed: HashMap::new(),
            dlq_retry: VecDeque::new(),
            budget,
            starts,
            registrations: Vec::new(),
            checkpoints_read: Vec::new(),
            start_positions: HashMap::new(),
            start_pending: std::collections::BTreeSet::new(),
            held: HeldPartitions::default(),
            counts: Counts::default(),
            totals: Totals::default(),
            log_limit: RateLimit::new(),
            dlq_log_limit: RateLimit::new(),
            claim_log_limit: RateLimit::new(),
            sink_closed: false,
            drained: false,
        }
    }

    /// Bytes the batches hold between decoding and every sink's acknowledgement: the Arrow
    /// buffers of batches flushed but not yet acknowledged ([`Batch::held_bytes`], their
    /// capacity, not their data) and what the open batch's builders hold
    /// ([`Batcher::held_bytes`]). librdkafka's prefetch (a quarter of the budget, see
    /// [`crate::source::prefetch_split`]) comes on top; docs/reliability.md §1.4 has the
    /// whole memory formula.
    pub(crate) fn inflight_bytes(&self) -> usize {
        self.ledger.inflight_bytes() + self.batcher.held_bytes()
    }

    /// Bytes held by dead letters waiting for their write ([`DeadLetter::held_bytes`]), and by
    /// those stashed until every sink acknowledged their batch.
    pub(crate) fn letter_bytes(&self) -> usize {
        self.ledger.letter_bytes() + self.ledger.refused_bytes()
    }

    /// Whether intake should pause: batches in flight and dead letters waiting for their write
    /// together use up the in-flight budget (`batching.max_inflight_bytes`).
    pub(crate) fn over_budget(&self) -> bool {
        self.inflight_bytes() + self.letter_bytes() >= self.budget
    }

    /// Whether paused intake may resume (both together below half the budget).
    pub(crate) fn under_half_budget(&self) -> bool {
        self.inflight_bytes() + self.letter_bytes() < self.budget / 2
    }

    /// Nothing is waiting for an acknowledgement.
    pub(crate) fn settled(&self) -> bool {
        self.ledger.settled() && self.batcher.is_empty()
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
        if !self.ledger.consumed(partition, offset) {
            // Delivered again after a rewind: it is already accounted for.
            return;
        }
        let Some(payload) = payload else {
            // A tombstone carries no log; Merlin skips them too. Nothing to write.
            self.ledger.nothing_to_write(partition, offset);
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
                // A rejected log's mismatches are reported now: no batch may follow it.
                let counts = self.batcher.take_counts();
                if !counts.is_empty() {
                    crate::metrics::quality::emit_counts(self.batcher.layout(), counts);
                }
                let code = failure.error.kind.code();
                events::LogRejected {
                    topic: &self.topic,
                    partition,
                    offset,
                    code,
                    reason: &failure.error.reason,
                }
                .emit(&mut self.log_limit, now);
                let mut letter = DeadLetter {
                    topic: self.topic.clone(),
                    partition,
                    offset,
                    epoch: 0,
                    key: key.map(<[u8]>::to_vec),
                    payload: payload.to_vec(),
                    kind: deadletter::Kind::Decode,
                    code,
                    message: failure.error.into_reason(),
                    claim_check: false,
                };
                letter.epoch = self
                    .ledger
                    .letter_sent(partition, offset, letter.held_bytes());
                self.dead_letters.send(letter);
            }
        }
        for b in ready {
            self.dispatch(b, now);
        }
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
        let (id, epochs) = self
            .ledger
            .dispatched(&batch.offsets, batch.held_bytes, self.sinks);
        batch.epochs = epochs;
        let counts = std::mem::take(&mut self.counts);
        events::BatchFlushed {
            reason: batch.reason.code(),
            rows: batch.rows(),
            bytes: batch.bytes,
            messages: counts.messages,
            input_bytes: counts.bytes,
            rows_decoded: counts.rows,
            inflight_bytes: self.inflight_bytes(),
        }
        .emit();
        let counts = self.batcher.take_counts();
        crate::metrics::quality::emit_batch(self.batcher.layout(), &batch.records, counts);
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
                    self.sink_gone();
                    break;
                }
            }
        }
    }

    /// Whether the sink task has stopped while the pipeline runs (it stops on its own only when
    /// a sink broke its contract, e.g. failed a batch after staging it once no sink held it):
    /// no batch can be acknowledged any more, so the intake loops stop and the process exits
    /// non-zero. The first time, it is recorded as a crash (`/healthz` fails, so a restart
    /// reads the unacknowledged offsets again) and the publisher turns unready.
    pub(crate) fn sink_gone(&mut self) -> bool {
        if !self.sink_tx.is_closed() {
            return false;
        }
        if !self.sink_closed {
            self.sink_closed = true;
            tracing::error!("sink task stopped; batches stay unacknowledged; stopping");
            self.health.sinks_ok.store(false, Ordering::Relaxed);
            self.health.crash("the sink task stopped".into());
        }
        true
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
            Event::Acked {
                id,
                sink,
                dead,
                checkpoints,
            } => {
                // Offsets with refused rows wait for their dead-letter writes.
                let refused: Vec<(Partition, i64, usize)> = dead
                    .iter()
                    .map(|d| (d.partition, d.offset, d.held_bytes()))
                    .collect();
                match self.ledger.sink_acked(id, sink, &refused, checkpoints) {
                    Completion::Ignored => {}
                    Completion::Waiting => {
                        if !dead.is_empty() {
                            self.stashed.entry(id).or_default().extend(dead);
                        }
                    }
                    Completion::Complete => {
                        let mut letters = self.stashed.remove(&id).unwrap_or_default();
                        letters.extend(dead);
                        self.totals.dead_letters += letters.len() as u64;
                        for letter in letters {
                            self.dead_letters.send(letter);
                        }
                    }
                }
                events::InflightBytes(self.inflight_bytes()).emit();
                events::PendingLetters(self.letter_bytes()).emit();
            }
            Event::Staged { id, sink } => {
                if self.ledger.staged(id, sink) {
                    events::InflightBytes(self.inflight_bytes()).emit();
                }
            }
            Event::Unstaged { id, sink } => {
                if self.ledger.unstaged(id, sink) {
                    events::InflightBytes(self.inflight_bytes()).emit();
                }
            }
            Event::DeadLetter(Outcome::Written {
                partition,
                offset,
                epoch,
                bytes,
                claim_check,
            }) => {
                self.health.dead_letter_ok.store(true, Ordering::Relaxed);
                if let Some(original_bytes) = claim_check {
                    events::ClaimCheckWritten {
                        topic: &self.topic,
                        partition,
                        offset,
                        original_bytes,
                    }
                    .emit(&mut self.claim_log_limit, Instant::now());
                }
                self.ledger.letter_written(partition, offset, epoch, bytes);
                events::PendingLetters(self.letter_bytes()).emit();
            }
            Event::DeadLetter(Outcome::Failed {
                letter,
                failure,
                error,
            }) => self.letter_failed(*letter, failure, &error),
            Event::Register(r) => self.registrations.push(r),
        }
    }

    /// A dead-letter write failed: send it again, as a claim check if it was too large.
    fn letter_failed(&mut self, mut letter: DeadLetter, failure: Failure, error: &str) {
        if self.ledger.epoch(letter.partition) != letter.epoch {
            // Its partition was revoked since: the offset was not committed, the next owner
            // reads the log again and dead-letters it itself. Keeping it would hold memory the
            // budget no longer counts.
            return;
        }
        // A claim check refused as too large is not a size problem any more: the target is.
        let failure = if failure == Failure::TooLarge && letter.claim_check {
            Failure::NeedsOperator
        } else {
            failure
        };
        let now = Instant::now();
        events::DeadLetterFailed {
            topic: &letter.topic,
            partition: letter.partition,
            offset: letter.offset,
            failure,
            error,
        }
        .emit(&mut self.dlq_log_limit, now);
        if failure == Failure::TooLarge {
            letter.claim_check = true;
            self.dead_letters.send(letter);
            return;
        }
        self.health.dead_letter_ok.store(false, Ordering::Relaxed);
        self.dlq_retry
            .push_back((now + failure.retry_after(), letter));
    }

    /// Re-sends dead letters whose retry time has come.
    pub(crate) fn retry_dead_letters(&mut self, now: Instant) {
        while self.dlq_retry.front().is_some_and(|(t, _)| *t <= now) {
            if let Some((_, l)) = self.dlq_retry.pop_front() {
                self.dead_letters.send(l);
            }
        }
        // With nothing pending, the target's own word decides: a Kafka target whose topic was
        // not there at start-up becomes ready once it is, without waiting for a bad log.
        if self.ledger.letter_bytes() == 0
            && !self.health.dead_letter_ok.load(Ordering::Relaxed)
            && self.dead_letters.is_ready()
        {
            self.health.dead_letter_ok.store(true, Ordering::Relaxed);
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
                Some(ps) => self.ledger.settled_for(ps),
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

    /// A new assignment of `partitions`: acknowledgements of earlier batches no longer apply.
    /// `checkpoints` (exactly-once) are the commit metadata read for them; the sink gets them
    /// with the partition's new epoch.
    pub(crate) fn assigned_with(
        &mut self,
        partitions: &[Partition],
        checkpoints: &HashMap<Partition, String>,
    ) {
        let epochs = self.ledger.assigned(partitions, checkpoints);
        for p in partitions {
            if let Some(offset) = self.start_positions.remove(p) {
                if !checkpoints.contains_key(p) {
                    self.ledger.positioned(*p, offset);
                }
            }
        }
        if let Some(starts) = &self.starts {
            if let Ok(mut s) = starts.starts.lock() {
                for (p, epoch) in epochs {
                    let cp = checkpoints.get(&p).and_then(|m| {
                        crate::sink::bigquery::checkpoint::Checkpoint::from_metadata(m)
                    });
                    s.insert(p, (epoch, cp));
                }
            }
        }
        if !partitions.is_empty() {
            self.health.topic_exists.store(true, Ordering::Relaxed);
        }
    }

    /// Exactly-once: applies start decisions at `now`. Returns the partitions that start
    /// (their checkpoints handed to the ledger and the sink) and those held (to pause).
    pub(crate) fn apply_starts(
        &mut self,
        decisions: Vec<(Partition, Start)>,
        now: Instant,
    ) -> (Vec<Partition>, Vec<Partition>) {
        let (mut start, mut hold) = (Vec::new(), Vec::new());
        let mut checkpoints = HashMap::new();
        for (p, d) in decisions {
            match &d {
                Start::Retry(e) => super::events::CheckpointHeld::Unread(p, e).emit(),
                Start::Stop(why) => super::events::CheckpointHeld::Unparseable(p, why).emit(),
                Start::Fresh => {}
                Start::Resume(m) => {
                    checkpoints.insert(p, m.clone());
                }
            }
            if self.held.apply(p, &d, now) {
                start.push(p);
            } else {
                hold.push(p);
            }
        }
        if !start.is_empty() {
            self.assigned_with(&start, &checkpoints);
        }
        self.publish_held();
        (start, hold)
    }

    fn publish_held(&self) {
        let (unread, unparseable) = self.held.counts();
        self.health
            .checkpoints_unread
            .store(unread, Ordering::Relaxed);
        self.health
            .checkpoints_unparseable
            .store(unparseable, Ordering::Relaxed);
    }

    /// Exactly-once: new streams the sink wants recorded.
    pub(crate) fn take_registrations(&mut self) -> Vec<Registration> {
        std::mem::take(&mut self.registrations)
    }

    /// Forgets revoked partitions (after their committable offsets were committed). Their
    /// letters waiting for a retry are dropped: the next owner dead-letters those logs again.
    pub(crate) fn forget(&mut self, partitions: &[Partition]) {
        self.start_positions.retain(|p, _| !partitions.contains(p));
        self.start_pending.retain(|p| !partitions.contains(p));
        self.held.revoked(partitions);
        self.publish_held();
        self.dlq_retry
            .retain(|(_, l)| !partitions.contains(&l.partition));
        for r in self.ledger.revoked(partitions) {
            if r.dropped > 0 {
                tracing::info!(
                    partition = r.partition,
                    dropped = r.dropped,
                    "unacknowledged offsets of a revoked partition left uncommitted"
                );
            }
        }
        if let Some(starts) = &self.starts {
            if let Ok(mut s) = starts.starts.lock() {
                for p in partitions {
                    s.remove(p);
                }
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

#[cfg(test)]
mod tests;
