//! The Kafka side of `run`: the polling loop and the rebalance listener. Both run on the
//! pipeline thread (librdkafka calls the rebalance callback from inside `poll`), so the state
//! behind the mutex is never contended.

use super::checkpoints::{self, Read, Start};
use super::events::{self, RateLimit};
use super::start_from;
use super::state::State;
use crate::commit::Partition;
use crate::config::StartFrom;
use crate::server::Health;
use crate::source::{RebalanceListener, SourceContext};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{Offset, TopicPartitionList};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// Settings of the Kafka loop.
pub(crate) struct KafkaLoop {
    pub(crate) topic: String,
    pub(crate) commit_interval: Duration,
    pub(crate) drain_timeout: Duration,
    /// [`Listener::other_group`]'s client: its event queue is served at the commit cadence, so
    /// what it queues between rebalances (broker errors) stays bounded.
    pub(crate) other_group: Option<Arc<BaseConsumer>>,
    /// `consumer.start_from`: where partitions whose start could not be read start once it can.
    pub(crate) start_from: Option<StartFrom>,
}

/// Messages taken per burst of the poll loop, between two clock readings and cancellation
/// checks: at ≈ 2 µs a message a burst lasts about 2 ms, within the 5 ms housekeeping cadence.
const BURST: usize = 1024;
/// How long intake is held over the in-flight budget (by not polling) before the partitions
/// are paused: a pause ends with a resume, after which librdkafka's broker thread fetches again
/// only at its next wake-up, up to a second later.
const PAUSE_AFTER: Duration = Duration::from_secs(1);

/// The pipeline state is used by the poll loop and by the rebalance callbacks. librdkafka runs
/// those callbacks inside `poll`, on the same thread, so the lock is never contended; it exists
/// because the consumer context holding the listener must be `Send + Sync` (and `unsafe` is
/// denied here: src/mapped.rs is the crate's one exception). It is the only lock on the
/// pipeline's own state (the exactly-once `Handoff`, shared with the sink task, has its own).
fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    // A panic while holding the lock is a bug; the data is still consistent enough to drain.
    state.lock().unwrap_or_else(|e| e.into_inner())
}

/// [`State::settle`], serving the exactly-once sink's stream registrations meanwhile (the sink
/// may need one to acknowledge what is being waited for).
fn settle(
    st: &mut State,
    consumer: &BaseConsumer<SourceContext>,
    deadline: Instant,
    only: Option<&[Partition]>,
) -> bool {
    loop {
        let step = (Instant::now() + Duration::from_millis(50)).min(deadline);
        if st.settle(step, only) {
            return true;
        }
        register(st, consumer);
        if Instant::now() >= deadline {
            return false;
        }
    }
}

/// Exactly-once: records the new streams the sink opened in the group's commit, synchronously,
/// before the sink writes a row into them, where the ledger says.
fn register(st: &mut State, consumer: &BaseConsumer<SourceContext>) {
    use crate::sink::bigquery::exactly_once::Registered;
    for r in st.take_registrations() {
        let Some(offset) = st.ledger.stream_opened(r.partition, r.epoch, r.offset) else {
            let _ = r.done.send(Registered::Stale);
            continue;
        };
        let mut tpl = TopicPartitionList::new();
        let committed = add_offset(
            &mut tpl,
            &st.topic,
            r.partition,
            offset,
            Some(r.metadata.clone()),
        )
        .and_then(|()| consumer.commit(&tpl, CommitMode::Sync));
        let answer = match committed {
            Ok(()) => {
                st.ledger.stream_recorded(r.partition, offset, r.metadata);
                Registered::Committed
            }
            Err(e) => {
                tracing::warn!(partition = r.partition, error = %e, "exactly-once: cannot record a new stream; retried");
                Registered::Failed(e.to_string())
            }
        };
        let _ = r.done.send(answer);
    }
}

/// Adds `p` at offset `o` to a commit list, with its exactly-once checkpoint if it has one.
fn add_offset(
    tpl: &mut TopicPartitionList,
    topic: &str,
    p: Partition,
    o: i64,
    metadata: Option<String>,
) -> rdkafka::error::KafkaResult<()> {
    tpl.add_partition_offset(topic, p, Offset::Offset(o))?;
    if let (Some(m), Some(mut e)) = (metadata, tpl.find_partition(topic, p)) {
        e.set_metadata(m);
    }
    Ok(())
}

/// Commits what the ledger says may be committed (only `only`'s partitions, if given).
fn commit(
    st: &mut State,
    consumer: &BaseConsumer<SourceContext>,
    only: Option<&[Partition]>,
    mode: CommitMode,
) {
    let points = st.ledger.commit_points(only);
    if points.is_empty() {
        return;
    }
    let mut tpl = TopicPartitionList::new();
    for p in &points {
        if let Err(e) = add_offset(
            &mut tpl,
            &st.topic,
            p.partition,
            p.offset,
            p.metadata.clone(),
        ) {
            tracing::error!(error = %e, "cannot build the commit list");
            return;
        }
    }
    match consumer.commit(&tpl, mode) {
        Ok(()) => {
            for p in &points {
                st.ledger.committed(p);
            }
            events::Committed::Done.emit();
        }
        Err(e) => events::Committed::Failed(&e).emit(),
    }
}

/// The rebalance listener: settles and commits revoked partitions, positions new ones.
pub(crate) struct Listener {
    pub(crate) state: Arc<Mutex<State>>,
    pub(crate) topic: String,
    pub(crate) revoke_timeout: Duration,
    pub(crate) start_from: Option<StartFrom>,
    /// `start_from: group:<name>`: a client of that group, made once before subscribing, that
    /// only reads its committed offsets (no client is made or closed inside the callback).
    pub(crate) other_group: Option<Arc<BaseConsumer>>,
    /// Bumped on every assignment (the loop re-applies a pause to new partitions).
    pub(crate) generation: Arc<AtomicU64>,
    /// Exactly-once: read the commit metadata of assigned partitions.
    pub(crate) exactly_once: bool,
    /// The staging sinks' [`crate::sink::Sink::revoke_hook`]s: told the revoke's deadline.
    pub(crate) revoke_hooks: Vec<crate::sink::RevokeHook>,
}

impl Listener {
    fn start_offsets(&self, consumer: &BaseConsumer<SourceContext>, tpl: &mut TopicPartitionList) {
        let Some(sf) = &self.start_from else { return };
        if matches!(sf, StartFrom::Earliest | StartFrom::Latest) {
            return; // auto.offset.reset does it
        }
        let ours: Vec<i32> = tpl
            .elements()
            .iter()
            .filter(|e| e.topic() == self.topic)
            .map(|e| e.partition())
            .collect();
        let other = self.other_group.as_deref();
        let read = start_from::read(
            consumer,
            sf,
            other,
            &self.topic,
            &ours,
            Duration::from_secs(10),
        );
        let mut st = lock(&self.state);
        for (p, off) in read.fresh.into_iter().filter_map(|(p, at)| Some((p, at?))) {
            tracing::info!(partition = p, offset = ?off, "start position from start_from");
            let _ = tpl.set_partition_offset(&self.topic, p, off);
            // Committed once the partition starts: a restart (or the other group's deletion)
            // cannot move an idle partition's start.
            if let Offset::Offset(o) = off {
                st.start_positions.insert(p, o);
            }
        }
        if !read.pending.is_empty() {
            tracing::warn!(partitions = ?read.pending, "where these partitions start cannot be read; they wait, paused, and are read again every second");
            st.start_pending.extend(read.pending);
        }
    }
}

/// The client [`Listener::other_group`] reads `start_from: group:<name>` through (`None` for
/// any other start, or when it cannot be made: then new partitions start per
/// `auto.offset.reset`, said once here).
pub(crate) fn other_group_reader(
    start_from: Option<&StartFrom>,
    connection: &ClientConfig,
) -> Option<BaseConsumer> {
    let Some(StartFrom::Group(g)) = start_from else {
        return None;
    };
    let mut cfg = connection.clone();
    cfg.set("group.id", g).set("enable.auto.commit", "false");
    match cfg.create::<BaseConsumer>() {
        Ok(c) => Some(c),
        Err(e) => {
            tracing::warn!(error = %e, group = %g, "cannot read start_from's group; new partitions start per auto.offset.reset");
            None
        }
    }
}

impl RebalanceListener for Listener {
    fn assigning(&self, consumer: &BaseConsumer<SourceContext>, tpl: &mut TopicPartitionList) {
        self.start_offsets(consumer, tpl);
        if self.exactly_once {
            let ours: Vec<Partition> = tpl
                .elements()
                .iter()
                .filter(|e| e.topic() == self.topic)
                .map(|e| e.partition())
                .collect();
            let decisions = read_checkpoints(consumer, &self.topic, &ours);
            lock(&self.state).checkpoints_read = decisions;
        }
    }

    fn assigned(&self, consumer: &BaseConsumer<SourceContext>, partitions: &[i32]) {
        let mut st = lock(&self.state);
        if self.exactly_once {
            let decisions = std::mem::take(&mut st.checkpoints_read);
            let (_, hold) = st.apply_starts(decisions, Instant::now());
            // Paused inside the rebalance callback, right after the assignment: no message of
            // a held partition reaches the pipeline before its checkpoint is known.
            pause(consumer, &self.topic, &hold);
        } else {
            st.assigned_with(partitions, &std::collections::HashMap::new());
        }
        // Partitions whose start could not be read: paused before any of their messages
        // reaches the pipeline ([`start_from`]).
        let pending: Vec<Partition> = partitions
            .iter()
            .copied()
            .filter(|p| st.start_pending.contains(p))
            .collect();
        pause(consumer, &self.topic, &pending);
        self.generation.fetch_add(1, Ordering::Relaxed);
    }

    fn revoking(&self, consumer: &BaseConsumer<SourceContext>, partitions: &[i32]) {
        let mut st = lock(&self.state);
        // Ship what is batched, wait (bounded) for the acknowledgements of these partitions,
        // commit what is acknowledged, forget the rest (the next owner re-reads it).
        st.flush(Instant::now());
        // After the final drain (the consumer's close revokes everything) the drain's deadline
        // has passed already: waiting `revoke_timeout` again would outlast the pod's grace
        // period (30 s + 15 s by default against Kubernetes' 30 s).
        let wait = if st.drained {
            // Acknowledgements that arrived since the drain's commit still count.
            st.drain_events(None);
            Duration::ZERO
        } else {
            self.revoke_timeout
        };
        let deadline = Instant::now() + wait;
        // A sink that stages rows finishes them by the deadline, so they are acknowledged and
        // committed here rather than moved later, after the next owner read them again.
        for hook in &self.revoke_hooks {
            hook(deadline);
        }
        let settled = settle(&mut st, consumer, deadline, Some(partitions));
        if !settled {
            tracing::warn!(partitions = ?partitions, "revoke deadline passed with rows unacknowledged; they stay uncommitted");
        }
        commit(&mut st, consumer, Some(partitions), CommitMode::Sync);
        st.forget(partitions);
    }
}

/// Exactly-once: reads the committed offsets of `partitions` and decides how each starts
/// ([`checkpoints::decide`]): a failed request (or a failed entry) is a `Retry`, never "none".
pub(super) fn read_checkpoints(
    consumer: &BaseConsumer<SourceContext>,
    topic: &str,
    partitions: &[Partition],
) -> Vec<(Partition, Start)> {
    read_checkpoints_within(consumer, topic, partitions, CHECKPOINT_READ_TIMEOUT)
}

/// [`read_checkpoints`] with its timeout.
fn read_checkpoints_within(
    consumer: &BaseConsumer<SourceContext>,
    topic: &str,
    partitions: &[Partition],
    timeout: Duration,
) -> Vec<(Partition, Start)> {
    if partitions.is_empty() {
        return Vec::new();
    }
    let mut q = TopicPartitionList::new();
    for p in partitions {
        q.add_partition(topic, *p);
    }
    let reads: Vec<(Partition, Read)> = match consumer.committed_offsets(q, timeout) {
        Ok(c) => partitions
            .iter()
            .map(|&p| {
                let read = match c.find_partition(topic, p) {
                    None => Read::Failed("the broker's answer left the partition out".into()),
                    Some(e) => match (e.error(), e.offset()) {
                        (Err(err), _) => Read::Failed(err.to_string()),
                        (Ok(()), Offset::Offset(_)) => Read::Committed(e.metadata().to_string()),
                        (Ok(()), _) => Read::NoCommit,
                    },
                };
                (p, read)
            })
            .collect(),
        Err(e) => partitions
            .iter()
            .map(|&p| (p, Read::Failed(e.to_string())))
            .collect(),
    };
    reads
        .into_iter()
        .map(|(p, r)| (p, checkpoints::decide(r)))
        .collect()
}

/// How long the checkpoint read at assignment may take.
const CHECKPOINT_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a retried checkpoint read may take (the poll loop waits for it).
const RETRY_READ_TIMEOUT: Duration = Duration::from_secs(1);

/// Pauses `partitions` of `topic` (logged if it fails: the held partitions are also kept out of
/// every resume).
fn pause(consumer: &BaseConsumer<SourceContext>, topic: &str, partitions: &[Partition]) {
    if partitions.is_empty() {
        return;
    }
    let mut tpl = TopicPartitionList::new();
    for p in partitions {
        tpl.add_partition(topic, *p);
    }
    if let Err(e) = consumer.pause(&tpl) {
        tracing::error!(error = %e, partitions = ?partitions, "cannot pause partitions held for their checkpoint or start");
    }
}

/// Exactly-once: reads again the checkpoints of held partitions whose retry is due; those that
/// can start are started and, unless intake is paused for the budget, resumed.
fn retry_held(st: &mut State, consumer: &BaseConsumer<SourceContext>, topic: &str, paused: bool) {
    let now = Instant::now();
    let due = st.held.due(now);
    if due.is_empty() {
        return;
    }
    // A short timeout: the loop (other partitions' intake, acknowledgements) waits meanwhile.
    let decisions = read_checkpoints_within(consumer, topic, &due, RETRY_READ_TIMEOUT);
    let (start, _) = st.apply_starts(decisions, Instant::now());
    if !start.is_empty() {
        tracing::info!(partitions = ?start, "exactly-once: checkpoints read; partitions start");
        if !paused {
            let mut tpl = TopicPartitionList::new();
            // Not those still waiting for their start (`start_from`): `start_from::retry` does.
            for p in start.iter().filter(|p| !st.start_pending.contains(p)) {
                tpl.add_partition(topic, *p);
            }
            if let Err(e) = consumer.resume(&tpl) {
                tracing::error!(error = %e, "cannot resume partitions after reading their checkpoints");
            }
        }
    }
}

/// The assignment minus the partitions held for their checkpoint or their start.
fn resumable(
    consumer: &BaseConsumer<SourceContext>,
    st: &State,
) -> rdkafka::error::KafkaResult<TopicPartitionList> {
    let a = consumer.assignment()?;
    let mut out = TopicPartitionList::new();
    for e in a.elements() {
        if !st.held.is_held(e.partition()) && !st.start_pending.contains(&e.partition()) {
            out.add_partition(e.topic(), e.partition());
        }
    }
    Ok(out)
}

/// Runs the consumer until `shutdown`, then drains. Returns whether everything in flight was
/// acknowledged and committed within the drain deadline.
pub(crate) fn run(
    consumer: BaseConsumer<SourceContext>,
    state: Arc<Mutex<State>>,
    health: Arc<Health>,
    generation: Arc<AtomicU64>,
    cfg: KafkaLoop,
    shutdown: CancellationToken,
) -> bool {
    if let Err(e) = consumer.subscribe(&[&cfg.topic]) {
        tracing::error!(error = %e, topic = %cfg.topic, "cannot subscribe");
        return false;
    }
    let mut paused = false;
    let mut paused_gen = 0u64;
    // Over the budget, not paused yet: since when intake has been held by not polling.
    let mut held_since: Option<Instant> = None;
    // A message was taken over the budget while paused: some partition is not paused (assigned
    // since, or its pause failed); the next housekeeping pauses the assignment again.
    let mut repause = false;
    let mut next_start_read = Instant::now();
    let mut last_commit = Instant::now();
    let mut last_meta: Option<Instant> = None;
    let mut last_housekeeping = Instant::now();
    let mut errors = RateLimit::new();
    loop {
        if shutdown.is_cancelled() {
            break;
        }
        let now = Instant::now();
        let deadline = if now.duration_since(last_housekeeping) >= Duration::from_millis(5) {
            last_housekeeping = now;
            let (over, under, deadline, batch_bytes, letter_bytes) = {
                let mut st = lock(&state);
                st.drain_events(None);
                if st.sink_gone() {
                    break;
                }
                register(&mut st, &consumer);
                st.retry_dead_letters(now);
                st.poll_linger(now);
                retry_held(&mut st, &consumer, &cfg.topic, paused);
                if let Some(sf) = cfg
                    .start_from
                    .as_ref()
                    .filter(|_| !st.start_pending.is_empty() && now >= next_start_read)
                {
                    let other = cfg.other_group.as_deref();
                    start_from::retry(
                        &mut st,
                        &consumer,
                        &cfg.topic,
                        sf,
                        other,
                        paused,
                        RETRY_READ_TIMEOUT,
                    );
                    // From the retry's end: a read that keeps timing out must not take the
                    // loop's every housekeeping.
                    next_start_read = Instant::now() + checkpoints::RETRY_EVERY;
                }
                if now.duration_since(last_commit) >= cfg.commit_interval {
                    commit(&mut st, &consumer, None, CommitMode::Sync);
                    last_commit = now;
                    if let Some(other) = &cfg.other_group {
                        start_from::serve_events(other);
                    }
                }
                (
                    st.over_budget(),
                    st.under_half_budget(),
                    st.batcher.deadline(),
                    st.inflight_bytes(),
                    st.letter_bytes(),
                )
            };
            let gen = generation.load(Ordering::Relaxed);
            // Over the budget, intake is first held by not polling: librdkafka's queue stops at
            // its threshold (the prefetch the memory formula counts). Only a hold longer than
            // PAUSE_AFTER pauses the partitions, because a resume leaves librdkafka's fetcher
            // idle for up to a second, and a sink that acknowledges in a round trip would pay
            // that on every cycle (docs/performance.md, "Holding before pausing").
            held_since = if over && !paused {
                if held_since.is_none() {
                    events::IntakeHeld.emit();
                }
                Some(held_since.unwrap_or(now))
            } else {
                None
            };
            let stalled = held_since.is_some_and(|t| now.duration_since(t) >= PAUSE_AFTER);
            if (over && !paused && stalled) || (paused && (gen != paused_gen || repause)) {
                repause = false;
                if let Ok(a) = consumer.assignment() {
                    match consumer.pause(&a) {
                        Ok(()) => {
                            events::Intake {
                                paused_partitions: a.count(),
                                changed: !paused,
                                batch_bytes,
                                letter_bytes,
                            }
                            .emit();
                            paused = true;
                            paused_gen = gen;
                        }
                        Err(e) => {
                            if errors.allow(now) {
                                tracing::warn!(error = %e, "cannot pause intake for the in-flight budget; trying again");
                            }
                        }
                    }
                }
            } else if paused && under {
                if let Ok(a) = resumable(&consumer, &lock(&state)) {
                    if consumer.resume(&a).is_ok() {
                        events::Intake {
                            paused_partitions: 0,
                            changed: true,
                            batch_bytes,
                            letter_bytes,
                        }
                        .emit();
                        paused = false;
                    }
                }
            }
            if !health.topic_exists.load(Ordering::Relaxed)
                && last_meta.is_none_or(|t| now.duration_since(t) >= Duration::from_secs(5))
            {
                last_meta = Some(now);
                // A listing of all topics never auto-creates one.
                if let Ok(md) = consumer.fetch_metadata(None, Duration::from_secs(5)) {
                    let exists = md
                        .topics()
                        .iter()
                        .any(|t| t.name() == cfg.topic && !t.partitions().is_empty());
                    health.topic_exists.store(exists, Ordering::Relaxed);
                    if !exists && errors.allow(now) {
                        tracing::warn!(topic = %cfg.topic, "source topic does not exist yet; waiting");
                    }
                }
            }
            deadline
        } else {
            None
        };
        if held_since.is_some() {
            // Held: nothing is polled until an acknowledgement frees the budget or the hold
            // turns into a pause; acknowledgements arrive through housekeeping.
            std::thread::sleep(Duration::from_millis(1));
            continue;
        }
        let timeout = deadline
            .map_or(Duration::from_millis(100), |d| {
                d.saturating_duration_since(now)
            })
            .min(Duration::from_millis(100));
        if let Some(at) = burst(&consumer, &state, &health, &cfg.topic, &mut errors, timeout) {
            // Over the budget: housekeeping (the pause) before the next message.
            last_housekeeping = at - Duration::from_millis(5);
            repause = paused;
        }
    }

    tracing::info!("draining: intake stopped");
    let deadline = Instant::now() + cfg.drain_timeout;
    let drained = {
        let mut st = lock(&state);
        st.flush(Instant::now());
        let ok = settle(&mut st, &consumer, deadline, None);
        commit(&mut st, &consumer, None, CommitMode::Sync);
        st.drained = true;
        let t = st.totals;
        tracing::info!(
            messages = t.messages,
            rows = t.rows,
            dead_letters = t.dead_letters,
            drained = ok,
            "drain finished"
        );
        ok
    };
    consumer.unsubscribe();
    drop(consumer);
    drained
}

/// One burst of the poll loop: waits up to `timeout` for the first message, then takes what
/// librdkafka already holds without waiting, up to [`BURST`] messages, with one clock reading
/// for the whole burst (the messages' arrival time for linger is the burst's start, at most a
/// few milliseconds early) and no cancellation check inside it. The state lock is still taken
/// per message: librdkafka runs the rebalance callbacks, which take it, inside `poll`, so it
/// cannot be held across one.
///
/// Stops after any message taken while the pipeline is at or over its in-flight budget, and
/// returns the burst's time then, so that the loop's housekeeping pauses intake before the
/// next message. Also when intake is already paused: a message then comes from a partition
/// that is not paused (assigned since the pause, the rebalance callbacks running inside
/// `poll`, or one whose pause failed), which the housekeeping pauses too. So the budget is
/// passed by one message, and by one more per partition assignment during a pause (stopping
/// only when not paused would read up to a whole burst over the budget after such an
/// assignment).
fn burst(
    consumer: &BaseConsumer<SourceContext>,
    state: &Mutex<State>,
    health: &Health,
    topic: &str,
    errors: &mut RateLimit,
    timeout: Duration,
) -> Option<Instant> {
    let first = consumer.poll(timeout)?;
    // After the first poll, which may have waited.
    let now = Instant::now();
    let rest = std::iter::from_fn(|| consumer.poll(Duration::ZERO));
    for polled in std::iter::once(first).chain(rest).take(BURST) {
        match polled {
            Ok(m) => {
                use rdkafka::Message;
                let mut st = lock(state);
                st.on_message(m.partition(), m.offset(), m.key(), m.payload(), now);
                if st.over_budget() {
                    return Some(now);
                }
            }
            Err(KafkaError::MessageConsumption(
                RDKafkaErrorCode::UnknownTopicOrPartition | RDKafkaErrorCode::UnknownTopic,
            )) => {
                health.topic_exists.store(false, Ordering::Relaxed);
                if errors.allow(now) {
                    tracing::warn!(topic = %topic, "source topic does not exist yet; waiting");
                }
                break;
            }
            Err(e) => {
                if errors.allow(now) {
                    tracing::warn!(error = %e, "consumer error");
                }
                break;
            }
        }
    }
    None
}

#[cfg(test)]
#[path = "kafka_checkpoint_tests.rs"]
mod checkpoint_tests;
