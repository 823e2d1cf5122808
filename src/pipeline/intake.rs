//! When intake stops and starts again for the in-flight budget: the rule, apart from the I/O
//! that carries it out.
//!
//! Over the budget, intake is first held by not polling: librdkafka's queue stops at its
//! threshold (the prefetch the memory formula counts). Only a hold longer than [`PAUSE_AFTER`]
//! pauses the partitions, because a resume leaves librdkafka's fetcher idle for up to a second,
//! and a sink that acknowledges in a round trip would pay that on every cycle
//! (docs/performance.md, "Holding before pausing"). Paused intake resumes below half the budget.
//! While paused, a partition that was assigned since, or that gave a message over the budget
//! (its pause failed), is paused again.
//!
//! Staged rows (a sink such as MaxCompute's that publishes at an interval) no longer hold their
//! batches' bytes, but their bookkeeping stays until the sink's move, and counts against the
//! budget. Once it fills [`EARLY_MOVE_SHARE`] of the budget the staging sinks are asked to move
//! at once ([`EarlyMove`]), so intake that the bookkeeping holds resumes as soon as the move
//! finishes instead of at the sink's next interval.
//!
//! Beside the rule, the poll loop's turn: when the housekeeping and its periodic jobs run
//! ([`Timers`]), what the loop does next ([`Next`]) and the settings it follows ([`Settings`]).

use crate::config::StartFrom;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long intake is held over the in-flight budget (by not polling) before the partitions
/// are paused: a pause ends with a resume, after which librdkafka's broker thread fetches again
/// only at its next wake-up, up to a second later.
pub(crate) const PAUSE_AFTER: Duration = Duration::from_secs(1);

/// What the housekeeping does about intake.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Gate {
    /// Nothing changes.
    Keep,
    /// A hold begins (intake is held from now on, not paused yet).
    Hold,
    /// Pause the whole assignment; report the outcome with [`Intake::paused`].
    Pause,
    /// Resume the assignment (those partitions not held for another reason); report the
    /// outcome with [`Intake::resumed`].
    Resume,
}

/// The intake's state between housekeepings.
#[derive(Debug, Default)]
pub(crate) struct Intake {
    paused: bool,
    /// Over the budget, not paused: since when intake has been held by not polling.
    held_since: Option<Instant>,
    /// While paused, some partition may not be (assigned since, or its pause failed): pause
    /// the assignment again.
    repause: bool,
}

impl Intake {
    /// Decides at housekeeping from the budget's readings: `over` the budget, `under_half` of
    /// it.
    pub(crate) fn decide(&mut self, over: bool, under_half: bool, now: Instant) -> Gate {
        let was_held = self.held_since.is_some();
        self.held_since = (over && !self.paused).then(|| self.held_since.unwrap_or(now));
        let stalled = self
            .held_since
            .is_some_and(|t| now.duration_since(t) >= PAUSE_AFTER);
        if stalled || (self.paused && self.repause) {
            Gate::Pause
        } else if self.paused && under_half {
            Gate::Resume
        } else if self.held_since.is_some() && !was_held {
            Gate::Hold
        } else {
            Gate::Keep
        }
    }

    /// The assignment was paused (after [`Gate::Pause`]); returns whether intake was running
    /// until now.
    pub(crate) fn paused(&mut self) -> bool {
        let changed = !self.paused;
        self.paused = true;
        self.repause = false;
        changed
    }

    /// The assignment was resumed (after [`Gate::Resume`]).
    pub(crate) fn resumed(&mut self) {
        self.paused = false;
    }

    /// Partitions were assigned, or a message was taken over the budget: while paused, they
    /// are paused too at the next housekeeping.
    pub(crate) fn unpaused_partition(&mut self) {
        self.repause |= self.paused;
    }

    /// Whether intake is paused.
    pub(crate) fn is_paused(&self) -> bool {
        self.paused
    }

    /// Whether intake is held: the loop does not poll.
    pub(crate) fn holding(&self) -> bool {
        self.held_since.is_some()
    }
}

/// The share of the in-flight budget (numerator, denominator) the bookkeeping of staged rows
/// fills before the staging sinks are asked to move early: half, so that a move has the other
/// half to run in before intake is held, and the bookkeeping it releases brings intake below
/// half the budget, where paused intake resumes.
pub(crate) const EARLY_MOVE_SHARE: (usize, usize) = (1, 2);

/// How often an early move is asked for again while the bookkeeping stays over its share: a
/// sink may take the request while a move runs (and move only what was staged before it), and
/// asking on every housekeeping would start a move for each few batches staged meanwhile.
pub(crate) const EARLY_MOVE_AGAIN: Duration = Duration::from_secs(1);

/// What [`EarlyMove::decide`] asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ask {
    /// Nothing (under the share, nothing staged, or asked recently).
    Nothing,
    /// The bookkeeping just reached its share: ask, and say so (once per crossing).
    First,
    /// Still over it: ask again, silently.
    Again,
}

/// When to ask the staging sinks for an early move.
#[derive(Debug, Default)]
pub(crate) struct EarlyMove {
    /// When it was last asked for, while over the share.
    asked: Option<Instant>,
}

impl EarlyMove {
    /// Decides at housekeeping: `bookkeeping` bytes against `budget`, `staged` messages a move
    /// would release.
    pub(crate) fn decide(
        &mut self,
        bookkeeping: usize,
        staged: usize,
        budget: usize,
        now: Instant,
    ) -> Ask {
        let (n, d) = EARLY_MOVE_SHARE;
        if staged == 0 || bookkeeping < budget / d * n {
            self.asked = None;
            return Ask::Nothing;
        }
        match self.asked {
            None => {
                self.asked = Some(now);
                Ask::First
            }
            Some(t) if now.duration_since(t) >= EARLY_MOVE_AGAIN => {
                self.asked = Some(now);
                Ask::Again
            }
            Some(_) => Ask::Nothing,
        }
    }
}

/// How often the poll loop's housekeeping runs (acknowledgements, linger, retries, commits, the
/// budget).
pub(crate) const CADENCE: Duration = Duration::from_millis(5);
/// The longest the poll loop waits for a message between two housekeepings.
pub(crate) const MAX_WAIT: Duration = Duration::from_millis(100);
/// How often a missing source topic is looked up.
pub(crate) const TOPIC_LOOKUP_EVERY: Duration = Duration::from_secs(5);

/// The settings the housekeeping follows.
pub(crate) struct Settings {
    pub(crate) commit_interval: Duration,
    /// `consumer.start_from`: where partitions whose start could not be read start once it can.
    pub(crate) start_from: Option<StartFrom>,
    /// `start_from: group:<name>`'s client (its event queue is served at the commit cadence,
    /// so what it queues between rebalances, broker errors, stays bounded).
    pub(crate) other_group: Option<Arc<super::start_from::GroupReader>>,
}

/// What the poll loop does next.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Next {
    /// Poll, waiting up to this long for the first message.
    Poll(Duration),
    /// Intake is held: do not poll (acknowledgements arrive through the housekeeping).
    Hold,
    /// The sink task is gone: stop and drain.
    Stop,
}

/// When the housekeeping and its periodic jobs run.
pub(crate) struct Timers {
    last: Instant,
    /// A message was taken over the budget: the next turn housekeeps (the pause) first.
    due: bool,
    last_commit: Instant,
    next_start_read: Instant,
    last_topic_lookup: Option<Instant>,
}

impl Timers {
    pub(crate) fn new(now: Instant) -> Self {
        Timers {
            last: now,
            due: false,
            last_commit: now,
            next_start_read: now,
            last_topic_lookup: None,
        }
    }

    /// Whether this turn housekeeps (every [`CADENCE`], or at once after [`Timers::hurry`]).
    pub(crate) fn housekeeping(&mut self, now: Instant) -> bool {
        let due = self.due || now.duration_since(self.last) >= CADENCE;
        if due {
            (self.last, self.due) = (now, false);
        }
        due
    }

    /// The next turn housekeeps, whatever the time.
    pub(crate) fn hurry(&mut self) {
        self.due = true;
    }

    /// Whether to commit now (every `interval`).
    pub(crate) fn commit(&mut self, now: Instant, interval: Duration) -> bool {
        let due = now.duration_since(self.last_commit) >= interval;
        if due {
            self.last_commit = now;
        }
        due
    }

    /// Whether to read pending starts again now; [`Timers::start_read_done`] after.
    pub(crate) fn start_read(&self, now: Instant) -> bool {
        now >= self.next_start_read
    }

    /// A read of pending starts ended (counted from its end: a read that keeps timing out must
    /// not take every housekeeping).
    pub(crate) fn start_read_done(&mut self, end: Instant, every: Duration) {
        self.next_start_read = end + every;
    }

    /// Whether to look a missing topic up now (every [`TOPIC_LOOKUP_EVERY`]).
    pub(crate) fn topic_lookup(&mut self, now: Instant) -> bool {
        let due =
            (self.last_topic_lookup).is_none_or(|t| now.duration_since(t) >= TOPIC_LOOKUP_EVERY);
        if due {
            self.last_topic_lookup = Some(now);
        }
        due
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    enum Step {
        /// A housekeeping after `ms`, with the budget's readings and whether the consumer's
        /// pause or resume (if asked for) succeeds.
        Housekeep {
            ms: u64,
            over: bool,
            under_half: bool,
            ok: bool,
        },
        /// An assignment, or a message over the budget.
        Unpaused,
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            4 => (0u64..700, any::<bool>(), any::<bool>(), any::<bool>()).prop_map(
                |(ms, over, under, ok)| Step::Housekeep {
                    ms,
                    over,
                    // Under half the budget is never over it.
                    under_half: under && !over,
                    ok,
                }
            ),
            1 => Just(Step::Unpaused),
        ]
    }

    proptest! {
        /// Against the rule read plainly: intake is held exactly while over the budget and not
        /// paused; a pause is asked for only after a hold of `PAUSE_AFTER` without a break, or
        /// while paused after an unpaused partition (until one succeeds); a resume only while
        /// paused, under half the budget, with nothing to pause again.
        #[test]
        fn holds_pauses_and_resumes_as_the_rule_says(steps in prop::collection::vec(step(), 1..80)) {
            let mut intake = Intake::default();
            let t0 = Instant::now();
            let mut now = t0;
            let (mut paused, mut repause) = (false, false);
            let mut over_since: Option<Instant> = None;
            for s in steps {
                match s {
                    Step::Unpaused => {
                        intake.unpaused_partition();
                        repause |= paused;
                    }
                    Step::Housekeep { ms, over, under_half, ok } => {
                        now += Duration::from_millis(ms);
                        over_since = if over && !paused { Some(over_since.unwrap_or(now)) } else { None };
                        let gate = intake.decide(over, under_half, now);
                        prop_assert_eq!(intake.holding(), over && !paused);
                        let stalled = over_since.is_some_and(|t| now - t >= PAUSE_AFTER);
                        let expected_pause = stalled || (paused && repause);
                        prop_assert_eq!(gate == Gate::Pause, expected_pause, "{:?}", gate);
                        prop_assert_eq!(gate == Gate::Resume, !expected_pause && paused && under_half);
                        match gate {
                            Gate::Pause if ok => {
                                prop_assert_eq!(intake.paused(), !paused);
                                paused = true;
                                repause = false;
                            }
                            Gate::Resume if ok => {
                                intake.resumed();
                                paused = false;
                            }
                            _ => {}
                        }
                        prop_assert_eq!(intake.is_paused(), paused);
                    }
                }
            }
        }
    }

    #[test]
    fn housekeeping_runs_every_cadence_or_at_once_when_hurried_and_commits_every_interval() {
        let t0 = Instant::now();
        let mut t = Timers::new(t0);
        assert!(!t.housekeeping(t0 + CADENCE / 2));
        t.hurry();
        assert!(t.housekeeping(t0 + CADENCE / 2), "hurried");
        assert!(!t.housekeeping(t0 + CADENCE), "counted from the last one");
        assert!(t.housekeeping(t0 + CADENCE / 2 + CADENCE));
        let every = Duration::from_secs(5);
        assert!(!t.commit(t0 + every / 2, every));
        assert!(t.commit(t0 + every, every));
        assert!(
            !t.commit(t0 + every + every / 2, every),
            "counted from the last commit"
        );
        assert!(t.topic_lookup(t0), "the first lookup at once");
        assert!(!t.topic_lookup(t0 + TOPIC_LOOKUP_EVERY / 2));
        assert!(t.topic_lookup(t0 + TOPIC_LOOKUP_EVERY));
        assert!(t.start_read(t0));
        t.start_read_done(t0 + every, Duration::from_secs(1));
        assert!(!t.start_read(t0 + every), "counted from the read's end");
        assert!(t.start_read(t0 + every + Duration::from_secs(1)));
    }

    #[test]
    fn an_early_move_is_asked_for_once_over_the_share_and_again_each_second_while_over() {
        let mut e = EarlyMove::default();
        let t0 = Instant::now();
        let budget = 1000;
        assert_eq!(e.decide(499, 10, budget, t0), Ask::Nothing, "under half");
        assert_eq!(e.decide(500, 0, budget, t0), Ask::Nothing, "nothing staged");
        assert_eq!(e.decide(500, 10, budget, t0), Ask::First);
        let later = t0 + EARLY_MOVE_AGAIN / 2;
        assert_eq!(
            e.decide(900, 10, budget, later),
            Ask::Nothing,
            "asked recently"
        );
        let again = t0 + EARLY_MOVE_AGAIN;
        assert_eq!(e.decide(900, 10, budget, again), Ask::Again);
        assert_eq!(
            e.decide(100, 10, budget, again),
            Ask::Nothing,
            "the move freed it"
        );
        assert_eq!(
            e.decide(600, 10, budget, again),
            Ask::First,
            "a new crossing"
        );
    }

    #[test]
    fn a_hold_is_reported_once_and_turns_into_a_pause_after_pause_after() {
        let mut intake = Intake::default();
        let t0 = Instant::now();
        assert_eq!(intake.decide(true, false, t0), Gate::Hold);
        let mid = t0 + PAUSE_AFTER / 2;
        assert_eq!(intake.decide(true, false, mid), Gate::Keep);
        assert!(intake.holding());
        assert_eq!(intake.decide(true, false, t0 + PAUSE_AFTER), Gate::Pause);
        assert!(intake.paused());
        assert_eq!(intake.decide(true, false, t0 + PAUSE_AFTER), Gate::Keep);
        assert!(
            !intake.holding(),
            "paused intake polls (callbacks, other partitions)"
        );
        assert_eq!(intake.decide(false, false, t0 + PAUSE_AFTER), Gate::Keep);
        assert_eq!(intake.decide(false, true, t0 + PAUSE_AFTER), Gate::Resume);
    }
}
