//! The Kafka side of `run`: the poll loop and the rebalance listener. Both only hand the
//! pipeline state messages and turns; the state decides every commit, pause, resume and
//! position (`state.rs`). Both run on the pipeline thread (librdkafka calls the
//! rebalance callbacks from inside `poll`), so the state behind the mutex is never contended.

use super::checkpoints;
use super::start_from;
use super::state::{self, Event, Next, Settings, State};
use crate::commit::Partition;
use crate::config::StartFrom;
use crate::source::group::Group;
use crate::source::{RebalanceListener, SourceContext};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::TopicPartitionList;
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// Settings of the Kafka loop.
pub(crate) struct KafkaLoop {
    pub(crate) topic: String,
    pub(crate) drain_timeout: Duration,
    /// What the state's housekeeping follows.
    pub(crate) settings: Settings,
    /// Where the committer thread's answers go (the state's events).
    pub(crate) commit_events: mpsc::Sender<Event>,
}

/// Messages taken per burst of the poll loop, between two clock readings and cancellation
/// checks: at ≈ 2 µs a message a burst lasts about 2 ms, within the 5 ms housekeeping cadence.
const BURST: usize = 1024;

/// The rebalance listener: positions new partitions, hands assignments and revokes to the
/// state.
pub(crate) struct Listener {
    pub(crate) state: Arc<Mutex<State>>,
    pub(crate) topic: String,
    pub(crate) revoke_timeout: Duration,
    pub(crate) start_from: Option<StartFrom>,
    /// `start_from: group:<name>`: a client of that group, made once before subscribing, that
    /// only reads its committed offsets (no client is made or closed inside the callback).
    pub(crate) other_group: Option<Arc<super::start_from::GroupReader>>,
    /// Exactly-once: read the commit metadata of assigned partitions.
    pub(crate) exactly_once: bool,
    /// The staging sinks' [`crate::sink::Sink::revoke_hook`]s: told the revoke's deadline.
    pub(crate) revoke_hooks: Vec<crate::sink::RevokeHook>,
}

impl RebalanceListener for Listener {
    fn assigning(&self, consumer: &BaseConsumer<SourceContext>, tpl: &mut TopicPartitionList) {
        let ours: Vec<Partition> = (tpl.elements().iter())
            .filter(|e| e.topic() == self.topic)
            .map(|e| e.partition())
            .collect();
        let group = Group::new(consumer, &self.topic);
        // `earliest` and `latest` are auto.offset.reset's.
        let start_from = (self.start_from.as_ref())
            .filter(|sf| !matches!(sf, StartFrom::Earliest | StartFrom::Latest));
        let starts = start_from.map(|sf| {
            let other = self.other_group.as_deref();
            start_from::read(&group, sf, other, &ours, Duration::from_secs(10))
        });
        let checkpoints = match self.exactly_once {
            true => checkpoints::read(&group, &ours, checkpoints::READ_TIMEOUT),
            false => Vec::new(),
        };
        let set = State::lock(&self.state).assigning(starts, checkpoints);
        for (p, off) in set {
            let _ = tpl.set_partition_offset(&self.topic, p, off);
        }
    }

    fn assigned(&self, consumer: &BaseConsumer<SourceContext>, partitions: &[i32]) {
        let group = Group::new(consumer, &self.topic);
        State::lock(&self.state).assigned(&group, partitions, self.exactly_once);
    }

    fn revoking(&self, consumer: &BaseConsumer<SourceContext>, partitions: &[i32]) {
        let group = Group::new(consumer, &self.topic);
        let (timeout, hooks) = (self.revoke_timeout, &self.revoke_hooks);
        State::lock(&self.state).revoking(&group, partitions, timeout, hooks);
    }
}

/// Runs the consumer until `shutdown`, then drains. Returns whether everything in flight was
/// acknowledged and committed within the drain deadline.
pub(crate) fn run(
    consumer: BaseConsumer<SourceContext>,
    state: Arc<Mutex<State>>,
    cfg: KafkaLoop,
    shutdown: CancellationToken,
) -> bool {
    if let Err(e) = consumer.subscribe(&[&cfg.topic]) {
        tracing::error!(error = %e, topic = %cfg.topic, "cannot subscribe");
        return false;
    }
    // The commits that need not hold intake go through a thread of their own
    // (`state/commits.rs`): a commit waits for a pending rebalance round.
    let consumer = Arc::new(consumer);
    let committer =
        state::start_committer(Arc::clone(&consumer), cfg.topic.clone(), cfg.commit_events);
    let committer = match committer {
        Ok((queue, thread)) => {
            State::lock(&state).commit_through(queue);
            Some(thread)
        }
        Err(e) => {
            tracing::warn!(error = %e, "cannot start the commit thread; committing on the pipeline thread, which a rebalance then holds");
            None
        }
    };
    let group = Group::new(&consumer, &cfg.topic);
    // Each turn: intake as the state said, then the state's housekeeping, which says what the
    // next turn's intake does.
    let mut next = Next::Poll(Duration::ZERO);
    while !shutdown.is_cancelled() {
        match next {
            Next::Stop => break,
            Next::Hold => std::thread::sleep(Duration::from_millis(1)),
            Next::Poll(wait) => {
                burst(&consumer, &state, wait);
            }
        }
        let mut st = State::lock(&state);
        next = st.housekeep(Instant::now(), &group, &cfg.settings);
    }
    tracing::info!("draining: intake stopped");
    let mut st = State::lock(&state);
    let drained = st.drain(&group, cfg.drain_timeout);
    st.stop_committer();
    drop(st);
    if let Some(t) = committer {
        let _ = t.join();
    }
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
/// Returns whether it stopped over the budget: after any message that leaves the pipeline at
/// or over its in-flight budget ([`State::take`]), so that the next turn's housekeeping holds
/// or pauses intake before the next message. Also when intake is already paused: a message
/// then comes from a partition that is not paused (assigned since the pause, the rebalance callbacks running inside `poll`, or
/// one whose pause failed), which the housekeeping pauses too. So the budget is passed by one
/// message, and by one more per partition assignment during a pause (stopping only when not
/// paused would read up to a whole burst over the budget after such an assignment).
fn burst(consumer: &BaseConsumer<SourceContext>, state: &Mutex<State>, timeout: Duration) -> bool {
    let Some(first) = consumer.poll(timeout) else {
        return false;
    };
    // After the first poll, which may have waited.
    let now = Instant::now();
    let rest = std::iter::from_fn(|| consumer.poll(Duration::ZERO));
    for polled in std::iter::once(first).chain(rest).take(BURST) {
        use rdkafka::Message;
        let mut st = State::lock(state);
        match polled {
            Ok(m) => {
                if st.take(m.partition(), m.offset(), m.key(), m.payload(), now) {
                    return true;
                }
            }
            Err(e) => {
                st.poll_failed(&e, now);
                return false;
            }
        }
    }
    false
}

#[cfg(test)]
#[path = "kafka_checkpoint_tests.rs"]
mod checkpoint_tests;
