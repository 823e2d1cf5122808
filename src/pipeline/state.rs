//! The pipeline's state, owned by the polling thread: the batcher, the [`Ledger`] (every
//! commit decision), the batches waiting for room in the sink channel, the dead-letter target
//! and its retries, and the exactly-once stream registrations waiting to be committed.
//!
//! Flow: a consumed message is entered in the ledger, then decoded into the batcher. A full
//! batch is stamped by the ledger and queued for the sink task (bounded channel); the ledger
//! acknowledges its offsets when every sink has it. A rejected message goes to the dead-letter
//! target; the ledger holds its offset until the letter is written. What may be committed is
//! the ledger's answer alone.
//!
//! The state is the one owner of the pipeline's decisions: the poll loop (`kafka.rs`) and the
//! rebalance callbacks only hand it messages and turns, and it asks the consumer group for
//! commits, pauses, resumes and positions itself (through [`crate::source::group::Group`],
//! which carries requests and decides nothing).

use super::checkpoints::{self, HeldPartitions, Start};
use super::events::{self, Counts, RateLimit, Totals};
use super::intake::{EarlyMove, Intake, Timers, MAX_WAIT};
pub(crate) use super::intake::{Next, Settings};
use super::ledger::{Completion, Ledger};
use super::letters::Letters;
pub(crate) use super::messages::{Event, SinkJob};
use super::start_from::{self, Pending, Starts};
use crate::batch::{Batch, Batcher};
use crate::commit::Partition;
use crate::deadletter::{self, DeadLetter, Outcome};
use crate::server::Health;
use crate::sink::bigquery::exactly_once::{PartitionStarts, Registration};
use crate::sink::RevokeHook;
use crate::source::group::Group;
use rdkafka::error::KafkaError;
use rdkafka::Offset;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tokio::sync::mpsc::error::TrySendError;

/// The pipeline state.
pub(crate) struct State {
    pub(crate) topic: String,
    pub(crate) batcher: Batcher,
    pub(crate) ledger: Ledger,
    pub(crate) health: Arc<Health>,
    events: mpsc::Receiver<Event>,
    sink_tx: tokio::sync::mpsc::Sender<SinkJob>,
    letters: Letters,
    queue: VecDeque<SinkJob>,
    /// How many sinks every batch goes to.
    sinks: usize,
    budget: usize,
    /// Exactly-once: the checkpoints handed to the sink at assignment.
    starts: Option<PartitionStarts>,
    /// Exactly-once: new streams waiting to be recorded (arrived as [`Event::Register`]).
    registrations: Vec<Registration>,
    /// Exactly-once: the start decisions made while partitions are being assigned, applied
    /// once the assignment is done.
    checkpoints_read: Vec<(Partition, Start)>,
    /// `start_from`: the partitions being assigned whose start is not settled.
    pub(crate) pending_starts: Pending,
    /// Exactly-once: assigned partitions held (paused) for their checkpoint.
    pub(crate) held: HeldPartitions,
    counts: Counts,
    pub(crate) totals: Totals,
    log_limit: RateLimit,
    sink_closed: bool,
    /// The final drain has run (settled as far as its deadline allowed): a revoke after it
    /// (the consumer's close) commits what is acknowledged without waiting again.
    pub(crate) drained: bool,
    /// Whether intake is held or paused for the budget.
    intake: Intake,
    /// The poll loop's periodic jobs.
    timers: Timers,
    /// The poll loop's warnings (a pause that failed, a missing topic).
    errors: RateLimit,
    /// Commits with the committer thread.
    commits: commits::Commits,
    /// The staging sinks' hooks, called for an early move ([`State::move_early`]).
    staging_hooks: Vec<RevokeHook>,
    /// When to ask them.
    early_move: EarlyMove,
}

impl State {
    /// Locks the state, shared by the poll loop and the rebalance callbacks, which librdkafka
    /// runs inside `poll` on the same thread: never contended, it exists because the consumer
    /// context must be `Send + Sync` (`unsafe` is denied outside two named blocks). It is the only
    /// lock on the pipeline's own state (the exactly-once `Handoff` has its own).
    pub(crate) fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
        // A panic while holding the lock is a bug; the data is still consistent enough to drain.
        state.lock().unwrap_or_else(|e| e.into_inner())
    }

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
            letters: Letters::new(dead_letters),
            queue: VecDeque::new(),
            sinks,
            budget,
            starts,
            registrations: Vec::new(),
            checkpoints_read: Vec::new(),
            pending_starts: Pending::default(),
            held: HeldPartitions::default(),
            counts: Counts::default(),
            totals: Totals::default(),
            log_limit: RateLimit::new(),
            sink_closed: false,
            drained: false,
            intake: Intake::default(),
            timers: Timers::new(Instant::now()),
            errors: RateLimit::new(),
            commits: commits::Commits::default(),
            staging_hooks: Vec::new(),
            early_move: EarlyMove::default(),
        }
    }

    /// Nothing is waiting for an acknowledgement.
    pub(crate) fn settled(&self) -> bool {
        self.ledger.settled() && self.batcher.is_empty()
    }

    /// Takes one consumed message; returns whether the pipeline is now at or over its
    /// in-flight budget (the poll loop then stops its burst, and the next turn housekeeps
    /// first).
    pub(crate) fn take(
        &mut self,
        partition: Partition,
        offset: i64,
        key: Option<&[u8]>,
        payload: Option<&[u8]>,
        now: Instant,
    ) -> bool {
        if !self.ledger.consumed(partition, offset) {
            // Delivered again after a rewind: it is already accounted for.
            return self.stop_if_over();
        }
        let Some(payload) = payload else {
            // A tombstone carries no log; Merlin skips them too. Nothing to write.
            self.ledger.nothing_to_write(partition, offset);
            return self.stop_if_over();
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
                let message = failure.error.into_reason();
                let mut letter = DeadLetter::undecodable(
                    &self.topic,
                    partition,
                    offset,
                    key,
                    payload,
                    code,
                    message,
                );
                letter.epoch = self
                    .ledger
                    .letter_sent(partition, offset, letter.held_bytes());
                self.letters.send(letter);
            }
        }
        for b in ready {
            self.dispatch(b, now);
        }
        self.stop_if_over()
    }

    /// Whether the pipeline is at or over its budget; if so, the next turn housekeeps first
    /// (while paused, the message came from a partition that is not: it is paused too).
    fn stop_if_over(&mut self) -> bool {
        let over = self.over_budget();
        if over {
            self.timers.hurry();
            self.intake.unpaused_partition();
        }
        over
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
                    Completion::Waiting => self.letters.stash(id, dead),
                    Completion::Complete => {
                        self.totals.dead_letters += self.letters.release(id, dead);
                    }
                }
                events::InflightBytes(self.inflight_bytes()).emit();
                events::PendingLetters(self.letter_bytes()).emit();
                events::Bookkeeping(self.bookkeeping_bytes()).emit();
            }
            Event::Staged { id, sink, kept } => {
                if self.ledger.staged(id, sink, kept) {
                    events::InflightBytes(self.inflight_bytes()).emit();
                    events::Bookkeeping(self.bookkeeping_bytes()).emit();
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
                (self.letters).written(&self.topic, partition, offset, claim_check);
                self.ledger.letter_written(partition, offset, epoch, bytes);
                events::PendingLetters(self.letter_bytes()).emit();
            }
            Event::DeadLetter(Outcome::Failed {
                letter,
                failure,
                error,
            }) => {
                let epoch = self.ledger.epoch(letter.partition);
                if self.letters.failed(*letter, failure, &error, epoch) {
                    self.health.dead_letter_ok.store(false, Ordering::Relaxed);
                }
            }
            Event::Register(r) => self.registrations.push(r),
            Event::Committed { id, result } => self.commit_answered(id, result),
        }
    }

    /// Re-sends dead letters whose retry time has come.
    pub(crate) fn retry_dead_letters(&mut self, now: Instant) {
        self.letters.retry_due(now);
        // With nothing pending, the target's own word decides: a Kafka target whose topic was
        // not there at start-up becomes ready once it is, without waiting for a bad log.
        if self.ledger.letter_bytes() == 0
            && !self.health.dead_letter_ok.load(Ordering::Relaxed)
            && self.letters.target_ready()
        {
            self.health.dead_letter_ok.store(true, Ordering::Relaxed);
        }
    }

    /// Waits, bounded by `deadline`, until nothing is in flight (or, with `partitions`, until
    /// no batch in flight holds those partitions and no dead letter is pending). With a
    /// `group`, serves the exactly-once sink's stream registrations meanwhile (the sink may
    /// need one to acknowledge what is being waited for).
    pub(crate) fn settle(
        &mut self,
        deadline: Instant,
        partitions: Option<&[Partition]>,
        group: Option<&Group<'_>>,
    ) -> bool {
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
            if let Some(g) = group {
                self.register(g);
            }
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
            if let Some(offset) = self.pending_starts.take_position(*p) {
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
        let starting = self.held.decide(decisions, now);
        if !starting.start.is_empty() {
            self.assigned_with(&starting.start, &starting.checkpoints);
        }
        self.publish_held();
        (starting.start, starting.hold)
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

    /// Forgets revoked partitions (after their committable offsets were committed). Their
    /// letters waiting for a retry are dropped: the next owner dead-letters those logs again.
    pub(crate) fn forget(&mut self, partitions: &[Partition]) {
        self.pending_starts.forget(partitions);
        self.held.revoked(partitions);
        self.publish_held();
        self.letters.forget(partitions);
        events::RevokeLeftWritten(self.ledger.written_uncommitted(partitions)).emit();
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
        let ready = self.letters.flush(timeout);
        self.health.dead_letter_ok.store(ready, Ordering::Relaxed);
    }

    /// One turn of the poll loop: every [`CADENCE`] (or at once after a message over the
    /// budget), applies what the sinks and the dead-letter target reported, registers new
    /// exactly-once streams, retries what is due, flushes a lingering batch, commits at the
    /// commit interval, and holds, pauses or resumes intake for the budget. Says what the loop
    /// does next.
    pub(crate) fn housekeep(&mut self, now: Instant, group: &Group<'_>, s: &Settings) -> Next {
        let mut deadline = None;
        if self.timers.housekeeping(now) {
            self.drain_events(None);
            if self.sink_gone() {
                return Next::Stop;
            }
            self.register(group);
            self.retry_dead_letters(now);
            self.poll_linger(now);
            self.retry_held(group);
            self.retry_starts(now, group, s);
            if self.timers.commit(now, s.commit_interval) {
                self.commit_in_background(group);
                if let Some(other) = &s.other_group {
                    start_from::serve_events(other);
                }
            }
            self.gate(now, group);
            self.look_for_topic(now, group);
            deadline = self.batcher.deadline();
        }
        if self.intake.holding() {
            return Next::Hold;
        }
        let wait = deadline.map_or(MAX_WAIT, |d| d.saturating_duration_since(now));
        Next::Poll(wait.min(MAX_WAIT))
    }

    /// Whether `p` may be resumed: held neither for its checkpoint nor for its start.
    fn may_run(&self, p: Partition) -> bool {
        !self.held.is_held(p) && !self.pending_starts.is_unread(p)
    }

    /// `poll` returned an error instead of a message (librdkafka retries on its own).
    pub(crate) fn poll_failed(&mut self, e: &KafkaError, now: Instant) {
        use rdkafka::types::RDKafkaErrorCode::{UnknownTopic, UnknownTopicOrPartition};
        if let KafkaError::MessageConsumption(UnknownTopicOrPartition | UnknownTopic) = e {
            self.health.topic_exists.store(false, Ordering::Relaxed);
            if self.errors.allow(now) {
                tracing::warn!(topic = %self.topic, "source topic does not exist yet; waiting");
            }
        } else {
            crate::kafka_log::poll_error(e);
        }
    }

    /// While the source topic is not known to exist, looks it up every few seconds.
    fn look_for_topic(&mut self, now: Instant, group: &Group<'_>) {
        let exists = &self.health.topic_exists;
        if exists.load(Ordering::Relaxed) || !self.timers.topic_lookup(now) {
            return;
        }
        if let Some(listed) = group.topic_listed(Duration::from_secs(5)) {
            exists.store(listed, Ordering::Relaxed);
            if !listed && self.errors.allow(now) {
                tracing::warn!(topic = %group.topic(), "source topic does not exist yet; waiting");
            }
        }
    }

    /// Exactly-once: reads again the checkpoints of held partitions whose retry is due; those
    /// that can start are started and, unless intake is paused for the budget, resumed.
    fn retry_held(&mut self, group: &Group<'_>) {
        let due = self.held.due(Instant::now());
        if due.is_empty() {
            return;
        }
        // A short timeout: the loop (other partitions' intake, acknowledgements) waits.
        let decisions = checkpoints::read(group, &due, checkpoints::RETRY_READ_TIMEOUT);
        let (start, _) = self.apply_starts(decisions, Instant::now());
        if start.is_empty() {
            return;
        }
        tracing::info!(partitions = ?start, "exactly-once: checkpoints read; partitions start");
        if !self.intake.is_paused() {
            let resume: Vec<Partition> = start.into_iter().filter(|&p| self.may_run(p)).collect();
            if let Err(e) = group.resume(&resume) {
                tracing::error!(error = %e, "cannot resume partitions after reading their checkpoints");
            }
        }
    }

    /// `start_from`: once a second, reads again where the pending partitions start, and
    /// resumes those positioned (not while intake is paused for the budget, nor while held for
    /// an exactly-once checkpoint: the budget's resume, or [`State::retry_held`], takes them
    /// then).
    fn retry_starts(&mut self, now: Instant, group: &Group<'_>, s: &Settings) {
        let Some(sf) = (s.start_from.as_ref())
            .filter(|_| self.pending_starts.any_unread() && self.timers.start_read(now))
        else {
            return;
        };
        let other = s.other_group.as_deref();
        let started =
            (self.pending_starts).retry(group, sf, other, checkpoints::RETRY_READ_TIMEOUT);
        let mut resume = Vec::new();
        for (p, placed) in started {
            if let Some(o) = placed {
                self.ledger.positioned(p, o);
            }
            if !self.intake.is_paused() && self.may_run(p) {
                resume.push(p);
            }
        }
        if let Err(e) = group.resume(&resume) {
            tracing::error!(error = %e, "cannot resume partitions after reading their start");
        }
        (self.timers).start_read_done(Instant::now(), checkpoints::RETRY_EVERY);
    }

    /// Partitions are being assigned: what was read of where they start (`start_from`) and of
    /// their checkpoints (exactly-once). Returns the positions to set in the assignment.
    pub(crate) fn assigning(
        &mut self,
        starts: Option<Starts>,
        checkpoints: Vec<(Partition, Start)>,
    ) -> Vec<(Partition, Offset)> {
        self.checkpoints_read = checkpoints;
        starts.map_or_else(Vec::new, |s| self.pending_starts.read(s))
    }

    /// Partitions were assigned: they start (exactly-once: those whose checkpoint is known,
    /// `checkpoints_read` at assignment); the others are paused inside the rebalance callback,
    /// before any of their messages reaches the pipeline.
    pub(crate) fn assigned(
        &mut self,
        group: &Group<'_>,
        partitions: &[Partition],
        exactly_once: bool,
    ) {
        let mut hold = if exactly_once {
            let decisions = std::mem::take(&mut self.checkpoints_read);
            self.apply_starts(decisions, Instant::now()).1
        } else {
            self.assigned_with(partitions, &HashMap::new());
            Vec::new()
        };
        let unread = |p: &&Partition| self.pending_starts.is_unread(**p);
        hold.extend(partitions.iter().filter(unread));
        hold.sort_unstable();
        hold.dedup();
        if let Err(e) = group.pause(&hold) {
            tracing::error!(error = %e, partitions = ?hold, "cannot pause partitions held for their checkpoint or start");
        }
        self.intake.unpaused_partition();
    }

    /// Partitions are being revoked: ships what is batched, waits (bounded) for the
    /// acknowledgements of these partitions, commits what is acknowledged, forgets the rest
    /// (the next owner reads it again).
    pub(crate) fn revoking(
        &mut self,
        group: &Group<'_>,
        partitions: &[Partition],
        timeout: Duration,
        hooks: &[RevokeHook],
    ) {
        self.flush(Instant::now());
        // After the final drain (the consumer's close revokes everything) the drain's deadline
        // has passed already: waiting `timeout` again would outlast the pod's grace period
        // (30 s + 15 s by default against Kubernetes' 30 s).
        let wait = if self.drained {
            // Acknowledgements that arrived since the drain's commit still count.
            self.drain_events(None);
            Duration::ZERO
        } else {
            timeout
        };
        let deadline = Instant::now() + wait;
        // A sink that stages rows finishes them by the deadline, so they are acknowledged and
        // committed here rather than moved later, after the next owner read them again.
        for hook in hooks {
            hook(deadline);
        }
        if !self.settle(deadline, Some(partitions), Some(group)) {
            tracing::warn!(partitions = ?partitions, "revoke deadline passed with rows unacknowledged; they stay uncommitted");
        }
        self.commit(group, Some(partitions), deadline);
        self.forget(partitions);
    }

    /// The final drain, after intake stopped: ships what is batched, waits up to `timeout` for
    /// every acknowledgement, commits. Returns whether everything was acknowledged.
    pub(crate) fn drain(&mut self, group: &Group<'_>, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        self.flush(Instant::now());
        let ok = self.settle(deadline, None, Some(group));
        self.commit(group, None, deadline);
        self.drained = true;
        let Totals {
            messages,
            rows,
            dead_letters,
        } = self.totals;
        tracing::info!(messages, rows, dead_letters, drained = ok, "drain finished");
        ok
    }
}

mod budget;
mod commits;
pub(crate) use commits::start as start_committer;

#[cfg(test)]
mod tests;
