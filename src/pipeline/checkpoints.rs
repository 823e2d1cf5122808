//! Exactly-once: how an assigned partition starts, decided from what reading its checkpoint
//! (the committed offset's metadata) returned. Never on a guess:
//!
//! | read                                   | decision | the partition                          |
//! |----------------------------------------|----------|----------------------------------------|
//! | no committed offset, or one with no metadata | [`Start::Fresh`] | starts without a checkpoint (a new group, or one that ran at-least-once) |
//! | committed offset with a checkpoint     | [`Start::Resume`] | starts from it (finalize, skip, fence) |
//! | the read failed (timeout, coordinator loading, a broker roll) | [`Start::Retry`] | stays paused; the read is retried; `/readyz` 503 |
//! | metadata that does not parse           | [`Start::Stop`] | stays paused until revoked; error log, metric, `/readyz` 503 |
//!
//! Starting a partition whose checkpoint is unknown would skip nothing, not fence the old
//! stream, and overwrite the checkpoint with `carried: 0`: duplicates nothing could remove.

use super::events;
use crate::commit::Partition;
use crate::sink::bigquery::checkpoint::Checkpoint;
use crate::source::group::{Committed, Group};
use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

/// What reading one partition's committed offset returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Read {
    /// The group has no committed offset for the partition.
    NoCommit,
    /// A committed offset, with its metadata (possibly empty).
    Committed(String),
    /// The read failed (the whole request, or this partition's entry).
    Failed(String),
}

/// How the partition starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Start {
    /// No checkpoint was ever recorded: start from the committed offset (or `start_from`).
    Fresh,
    /// Start from this checkpoint (the metadata, as the ledger keeps it).
    Resume(String),
    /// Not known yet: keep the partition paused and read again.
    Retry(String),
    /// The checkpoint cannot be understood: keep the partition stopped.
    Stop(String),
}

/// The decision for one partition (see the module table).
pub(crate) fn decide(read: Read) -> Start {
    match read {
        Read::NoCommit => Start::Fresh,
        Read::Committed(m) if m.is_empty() => Start::Fresh,
        Read::Committed(m) => match Checkpoint::from_metadata(&m) {
            Some(_) => Start::Resume(m),
            None => Start::Stop(format!(
                "the committed offset's metadata is not a checkpoint: {:?}",
                m.chars().take(200).collect::<String>()
            )),
        },
        Read::Failed(e) => Start::Retry(e),
    }
}

/// Reads the committed offsets of `partitions` and decides how each starts: a failed request
/// (or a failed entry) is a `Retry`, never "none".
pub(crate) fn read(
    group: &Group<'_>,
    partitions: &[Partition],
    timeout: Duration,
) -> Vec<(Partition, Start)> {
    let reads = group.committed(partitions, timeout);
    let read = |c| match c {
        Committed::Nothing => Read::NoCommit,
        Committed::At(_, metadata) => Read::Committed(metadata),
        Committed::Failed(e) => Read::Failed(e),
    };
    partitions
        .iter()
        .zip(reads)
        .map(|(&p, c)| (p, decide(read(c))))
        .collect()
}

/// How long the checkpoint read at assignment may take.
pub(crate) const READ_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a retried read may take (the poll loop waits for it).
pub(crate) const RETRY_READ_TIMEOUT: Duration = Duration::from_secs(1);

/// How long after a failed read it is tried again.
pub(crate) const RETRY_EVERY: Duration = Duration::from_secs(1);

/// Why a partition is held.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Held {
    /// Its checkpoint could not be read; retried from `retry_at` on.
    Unread {
        /// The last read's error.
        error: String,
        /// When to read again.
        retry_at: Instant,
    },
    /// Its checkpoint does not parse; it stays stopped until revoked.
    Unparseable(String),
}

/// The assigned partitions that may not start yet, and why.
#[derive(Debug, Default)]
pub(crate) struct HeldPartitions {
    held: BTreeMap<Partition, Held>,
}

/// What a round of start decisions says.
#[derive(Debug, Default)]
pub(crate) struct Starting {
    /// The partitions that start.
    pub(crate) start: Vec<Partition>,
    /// The checkpoints of those that resume from one.
    pub(crate) checkpoints: HashMap<Partition, String>,
    /// The partitions held (to pause).
    pub(crate) hold: Vec<Partition>,
}

impl HeldPartitions {
    /// Records `decisions` at `now` (reporting each held partition) and sorts the partitions
    /// into those that start and those held.
    pub(crate) fn decide(&mut self, decisions: Vec<(Partition, Start)>, now: Instant) -> Starting {
        let mut out = Starting::default();
        for (p, d) in decisions {
            match &d {
                Start::Retry(e) => events::CheckpointHeld::Unread(p, e).emit(),
                Start::Stop(why) => events::CheckpointHeld::Unparseable(p, why).emit(),
                Start::Fresh => {}
                Start::Resume(m) => {
                    out.checkpoints.insert(p, m.clone());
                }
            }
            if self.apply(p, &d, now) {
                out.start.push(p);
            } else {
                out.hold.push(p);
            }
        }
        out
    }

    /// Records the decision for `p` at `now`; returns whether the partition may start
    /// (`Fresh`/`Resume`: it is released if it was held).
    pub(crate) fn apply(&mut self, p: Partition, start: &Start, now: Instant) -> bool {
        match start {
            Start::Fresh | Start::Resume(_) => {
                self.held.remove(&p);
                true
            }
            Start::Retry(e) => {
                self.held.insert(
                    p,
                    Held::Unread {
                        error: e.clone(),
                        retry_at: now + RETRY_EVERY,
                    },
                );
                false
            }
            Start::Stop(why) => {
                self.held.insert(p, Held::Unparseable(why.clone()));
                false
            }
        }
    }

    /// Whether `p` is held (paused for its checkpoint).
    pub(crate) fn is_held(&self, p: Partition) -> bool {
        self.held.contains_key(&p)
    }

    /// Partitions whose read is due again at `now` (never an unparseable one).
    pub(crate) fn due(&self, now: Instant) -> Vec<Partition> {
        self.held
            .iter()
            .filter(|(_, h)| matches!(h, Held::Unread { retry_at, .. } if *retry_at <= now))
            .map(|(p, _)| *p)
            .collect()
    }

    /// Forgets revoked partitions.
    pub(crate) fn revoked(&mut self, partitions: &[Partition]) {
        for p in partitions {
            self.held.remove(p);
        }
    }

    /// (partitions waiting for a read, partitions stopped on an unparseable checkpoint).
    pub(crate) fn counts(&self) -> (usize, usize) {
        let unread = self
            .held
            .values()
            .filter(|h| matches!(h, Held::Unread { .. }))
            .count();
        (unread, self.held.len() - unread)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const CP: &str = "obs-bq2:20:3:projects/p/datasets/d/tables/t/streams/s";

    #[test]
    fn the_three_cases_are_distinct() {
        assert_eq!(decide(Read::NoCommit), Start::Fresh);
        assert_eq!(decide(Read::Committed(String::new())), Start::Fresh);
        assert_eq!(decide(Read::Committed(CP.into())), Start::Resume(CP.into()));
        assert!(
            matches!(decide(Read::Failed("timed out".into())), Start::Retry(e) if e == "timed out")
        );
        assert!(matches!(
            decide(Read::Committed("obs-bq2:x".into())),
            Start::Stop(_)
        ));
        assert!(matches!(
            decide(Read::Committed("{\"json\":1}".into())),
            Start::Stop(_)
        ));
    }

    #[test]
    fn a_failed_read_is_retried_later_and_an_unparseable_one_never() {
        let t0 = Instant::now();
        let mut h = HeldPartitions::default();
        assert!(!h.apply(0, &decide(Read::Failed("loading".into())), t0));
        assert!(!h.apply(1, &decide(Read::Committed("garbage".into())), t0));
        assert!(h.apply(2, &decide(Read::NoCommit), t0));
        assert_eq!(h.counts(), (1, 1));
        assert!(h.due(t0).is_empty());
        assert_eq!(h.due(t0 + RETRY_EVERY), vec![0]);
        assert!(h.apply(0, &decide(Read::Committed(CP.into())), t0 + RETRY_EVERY));
        assert!(!h.is_held(0) && h.is_held(1));
        assert!(
            h.due(t0 + 100 * RETRY_EVERY).is_empty(),
            "stopped stays stopped"
        );
        h.revoked(&[1]);
        assert_eq!(h.counts(), (0, 0));
    }

    proptest! {
        /// A partition starts only on a successful read whose metadata is empty or a checkpoint;
        /// a resumed partition resumes from exactly the metadata read.
        #[test]
        fn never_starts_on_a_guess(meta in ".{0,80}", failed in any::<bool>(), none in any::<bool>()) {
            let read = if failed {
                Read::Failed(meta.clone())
            } else if none {
                Read::NoCommit
            } else {
                Read::Committed(meta.clone())
            };
            let start = decide(read.clone());
            let mut h = HeldPartitions::default();
            let started = h.apply(7, &start, Instant::now());
            match (&read, &start) {
                (Read::Failed(_), s) => prop_assert!(matches!(s, Start::Retry(_)) && !started),
                (Read::NoCommit, s) => prop_assert!(*s == Start::Fresh && started),
                (Read::Committed(m), Start::Fresh) => prop_assert!(m.is_empty() && started),
                (Read::Committed(m), Start::Resume(r)) => {
                    prop_assert!(r == m && Checkpoint::from_metadata(m).is_some() && started)
                }
                (Read::Committed(m), Start::Stop(_)) => {
                    prop_assert!(!m.is_empty() && Checkpoint::from_metadata(m).is_none() && !started)
                }
                (Read::Committed(_), Start::Retry(_)) => prop_assert!(false, "a read that succeeded"),
            }
        }
    }
}
