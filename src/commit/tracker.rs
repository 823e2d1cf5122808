//! The pure per-partition offset tracker.
//!
//! Input: [`OffsetTracker::register`] for every consumed message, per partition in consumption
//! order (offsets strictly increasing; gaps such as compacted records or transaction markers are
//! fine), and [`OffsetTracker::ack`] for every offset range a sink batch or a dead-letter write
//! made durable, in any order and across partitions. Output: [`OffsetTracker::committable`], the
//! offset to commit (last acknowledged offset of the contiguous acknowledged prefix + 1, Kafka's
//! "next offset to read"), and [`OffsetTracker::to_commit`], the partitions whose committable
//! offset moved past what was last committed.
//!
//! Guarantees:
//! - the committable offset only passes offsets that were registered *and* acknowledged, and it
//!   never passes an unacknowledged registered offset;
//! - an acknowledgement is a fact ("these rows are durable"), so one that names offsets the
//!   tracker does not hold (already passed, revoked, never registered) is ignored, and acking
//!   twice is harmless;
//! - [`OffsetTracker::revoke`] forgets a partition completely (it may come back later, from the
//!   committed offset) and reports what could still be committed for it.
//!
//! Cost: registering is one map lookup plus an amortized `VecDeque` push of 16 bytes; an ack of a
//! range is a binary search plus one step per offset in it. Memory is proportional to the
//! offsets between the commit frontier and the newest registered offset:
//! [`OffsetTracker::allocated_bytes`] says how much, as allocated (a window's capacity, which
//! shrinks again once the window empties), and the runtime counts it against its in-flight byte
//! budget.

use std::collections::{BTreeMap, VecDeque};
use std::fmt;

/// A Kafka partition number.
pub type Partition = i32;

/// An inclusive range of offsets of one partition. Acknowledging a range acknowledges every
/// *registered* offset inside it; unregistered offsets in it (gaps) are ignored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct OffsetRange {
    /// First offset in the range.
    pub first: i64,
    /// Last offset in the range (inclusive).
    pub last: i64,
}

impl OffsetRange {
    /// The range `first..=last`.
    pub fn new(first: i64, last: i64) -> Self {
        OffsetRange { first, last }
    }

    /// The range holding just `offset`.
    pub fn single(offset: i64) -> Self {
        OffsetRange {
            first: offset,
            last: offset,
        }
    }

    /// Whether `offset` lies in the range.
    pub fn contains(&self, offset: i64) -> bool {
        self.first <= offset && offset <= self.last
    }
}

/// A registration that breaks the consumption order. Not retryable: it is a bug in the caller
/// (or a seek the runtime did not announce with [`OffsetTracker::revoke`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegisterError {
    /// The partition.
    pub partition: Partition,
    /// The offset that was registered.
    pub offset: i64,
    /// The last offset registered before it.
    pub last: i64,
}

impl fmt::Display for RegisterError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "offset {} of partition {} registered after offset {}: offsets must increase",
            self.offset, self.partition, self.last
        )
    }
}

impl std::error::Error for RegisterError {}

/// What [`OffsetTracker::revoke`] reports about the partition it forgot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Revoked {
    /// The partition.
    pub partition: Partition,
    /// The offset to commit before giving the partition up, if it moved past the last commit.
    pub commit: Option<i64>,
    /// Registered offsets that were not acknowledged; they will be read again by whoever owns
    /// the partition next.
    pub dropped: usize,
}

/// Bytes one registered offset takes in a window (an `i64` and a flag, padded).
pub const ENTRY_BYTES: usize = std::mem::size_of::<Entry>();

#[derive(Debug, Clone, Copy)]
struct Entry {
    offset: i64,
    acked: bool,
}

#[derive(Debug, Default)]
struct PartitionState {
    /// Registered offsets after the commit frontier, in increasing order. The front is always
    /// unacknowledged (acknowledged entries at the front are popped at once).
    window: VecDeque<Entry>,
    /// The newest registered offset.
    last_registered: Option<i64>,
    /// Last acknowledged offset of the contiguous prefix + 1.
    committable: Option<i64>,
    /// The offset last reported as committed.
    committed: Option<i64>,
    /// Entries in `window` that are not acknowledged.
    unacked: usize,
}

impl PartitionState {
    /// Pops the acknowledged prefix. A window that fell below a quarter of its capacity is
    /// shrunk to twice its length, one left empty to nothing: a backlog (staged rows waiting
    /// for a move) would otherwise keep its peak allocation, counted against the budget, for
    /// good.
    fn advance(&mut self) {
        let before = self.window.len();
        while let Some(front) = self.window.front() {
            if !front.acked {
                break;
            }
            self.committable = Some(front.offset + 1);
            self.window.pop_front();
        }
        let (len, cap) = (self.window.len(), self.window.capacity());
        if len < before && (len == 0 || len < cap / 4) {
            if len == 0 {
                self.window = VecDeque::new();
            } else {
                self.window.shrink_to(len * 2);
            }
        }
    }

    fn allocated(&self) -> usize {
        self.window.capacity() * ENTRY_BYTES
    }

    fn pending_commit(&self) -> Option<i64> {
        match (self.committable, self.committed) {
            (Some(c), Some(done)) if c <= done => None,
            (c, _) => c,
        }
    }
}

/// Per-partition "contiguous acknowledged prefix" tracker. See the module docs.
#[derive(Debug, Default)]
pub struct OffsetTracker {
    parts: BTreeMap<Partition, PartitionState>,
    /// Bytes the windows hold, as allocated (the sum of their capacities).
    allocated: usize,
}

impl OffsetTracker {
    /// An empty tracker.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records that `offset` of `partition` was consumed and now awaits an acknowledgement.
    /// Offsets of one partition must be registered in increasing order (gaps allowed); after a
    /// [`revoke`](Self::revoke) the partition starts afresh.
    pub fn register(&mut self, partition: Partition, offset: i64) -> Result<(), RegisterError> {
        let st = self.parts.entry(partition).or_default();
        if let Some(last) = st.last_registered {
            if offset <= last {
                return Err(RegisterError {
                    partition,
                    offset,
                    last,
                });
            }
        }
        st.last_registered = Some(offset);
        let before = st.allocated();
        st.window.push_back(Entry {
            offset,
            acked: false,
        });
        st.unacked += 1;
        self.allocated = self.allocated + st.allocated() - before;
        Ok(())
    }

    /// `partition` was (re)assigned and reads from `offset`, a position its own group never
    /// committed (`start_from` chose it): that offset is committable before anything is
    /// consumed, so an idle partition's start is recorded too, and offsets below it are refused
    /// by [`register`](Self::register). Ignored (false) unless the partition is fresh: nothing
    /// registered, acknowledged or committed since it was assigned.
    pub fn positioned(&mut self, partition: Partition, offset: i64) -> bool {
        let st = self.parts.entry(partition).or_default();
        if st.last_registered.is_some() || st.committable.is_some() || st.committed.is_some() {
            return false;
        }
        st.last_registered = Some(offset.saturating_sub(1));
        st.committable = Some(offset);
        true
    }

    /// Acknowledges every registered offset of `partition` inside `range`. Returns how many
    /// offsets were newly acknowledged (offsets not held by the tracker are ignored).
    pub fn ack(&mut self, partition: Partition, range: OffsetRange) -> usize {
        let Some(st) = self.parts.get_mut(&partition) else {
            return 0;
        };
        if range.first > range.last {
            return 0;
        }
        let start = st.window.partition_point(|e| e.offset < range.first);
        let mut newly = 0;
        for e in st.window.range_mut(start..) {
            if e.offset > range.last {
                break;
            }
            if !e.acked {
                e.acked = true;
                newly += 1;
            }
        }
        st.unacked -= newly;
        let before = st.allocated();
        st.advance();
        self.allocated = self.allocated + st.allocated() - before;
        newly
    }

    /// Bytes the tracker holds for registered offsets, as allocated: every window's capacity.
    pub fn allocated_bytes(&self) -> usize {
        self.allocated
    }

    /// The offset to commit for `partition` (the next offset to read), or `None` when nothing
    /// has been acknowledged since the partition was (re)assigned.
    pub fn committable(&self, partition: Partition) -> Option<i64> {
        self.parts.get(&partition).and_then(|s| s.committable)
    }

    /// The lowest registered offset of `partition` not acknowledged yet: no commit may pass it.
    pub fn frontier(&self, partition: Partition) -> Option<i64> {
        self.parts
            .get(&partition)
            .and_then(|s| s.window.front())
            .map(|e| e.offset)
    }

    /// The offset last recorded with [`mark_committed`](Self::mark_committed).
    pub fn committed(&self, partition: Partition) -> Option<i64> {
        self.parts.get(&partition).and_then(|s| s.committed)
    }

    /// Registered offsets of `partition` that are not acknowledged yet.
    pub fn unacked(&self, partition: Partition) -> usize {
        self.parts.get(&partition).map_or(0, |s| s.unacked)
    }

    /// Registered offsets of `partition` held behind the commit frontier (unacknowledged ones
    /// plus acknowledged ones waiting for an earlier offset).
    pub fn held(&self, partition: Partition) -> usize {
        self.parts.get(&partition).map_or(0, |s| s.window.len())
    }

    /// Unacknowledged offsets over all partitions.
    pub fn pending(&self) -> usize {
        self.parts.values().map(|s| s.unacked).sum()
    }

    /// The partitions the tracker knows, in increasing order.
    pub fn partitions(&self) -> impl Iterator<Item = Partition> + '_ {
        self.parts.keys().copied()
    }

    /// The partitions whose committable offset moved past the last recorded commit, with that
    /// offset, in partition order. Commit these, then call [`mark_committed`](Self::mark_committed)
    /// for each that succeeded.
    pub fn to_commit(&self) -> impl Iterator<Item = (Partition, i64)> + '_ {
        self.parts
            .iter()
            .filter_map(|(p, s)| s.pending_commit().map(|o| (*p, o)))
    }

    /// Records that `offset` of `partition` was committed. Older offsets than the one recorded
    /// are ignored (commits may complete out of order).
    pub fn mark_committed(&mut self, partition: Partition, offset: i64) {
        if let Some(st) = self.parts.get_mut(&partition) {
            st.committed = Some(st.committed.map_or(offset, |c| c.max(offset)));
        }
    }

    /// Forgets `partition` (revoked by a rebalance): its unacknowledged offsets are dropped
    /// without being committed, and later acknowledgements for them are ignored. Returns the
    /// offset still to commit for it, if any, and how many offsets were dropped.
    pub fn revoke(&mut self, partition: Partition) -> Revoked {
        match self.parts.remove(&partition) {
            Some(st) => {
                self.allocated -= st.allocated();
                Revoked {
                    partition,
                    commit: st.pending_commit(),
                    dropped: st.unacked,
                }
            }
            None => Revoked {
                partition,
                commit: None,
                dropped: 0,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn commits_only_the_contiguous_prefix() {
        let mut t = OffsetTracker::new();
        for o in [10, 11, 12, 13] {
            t.register(0, o).unwrap();
        }
        assert_eq!(t.committable(0), None);
        assert_eq!(t.ack(0, OffsetRange::single(12)), 1);
        assert_eq!(t.committable(0), None);
        t.ack(0, OffsetRange::single(10));
        assert_eq!(t.committable(0), Some(11));
        t.ack(0, OffsetRange::single(11));
        assert_eq!(t.committable(0), Some(13));
        assert_eq!(t.unacked(0), 1);
        assert_eq!(t.held(0), 1);
    }

    #[test]
    fn gaps_are_skipped_and_ranges_ack_only_registered_offsets() {
        let mut t = OffsetTracker::new();
        for o in [5, 6, 9, 20] {
            t.register(3, o).unwrap();
        }
        assert_eq!(t.ack(3, OffsetRange::new(0, 9)), 3);
        assert_eq!(t.committable(3), Some(10));
        assert_eq!(t.ack(3, OffsetRange::new(7, 9)), 0, "already passed");
        t.ack(3, OffsetRange::new(15, 25));
        assert_eq!(t.committable(3), Some(21));
        assert_eq!(t.pending(), 0);
    }

    #[test]
    fn registration_must_increase() {
        let mut t = OffsetTracker::new();
        t.register(1, 4).unwrap();
        let e = t.register(1, 4).unwrap_err();
        assert_eq!(
            e,
            RegisterError {
                partition: 1,
                offset: 4,
                last: 4
            }
        );
        assert!(e.to_string().contains("must increase"));
        t.register(2, 0).unwrap();
    }

    #[test]
    fn commit_bookkeeping_reports_only_changes() {
        let mut t = OffsetTracker::new();
        t.register(0, 0).unwrap();
        t.register(1, 7).unwrap();
        assert_eq!(t.to_commit().count(), 0);
        t.ack(0, OffsetRange::single(0));
        t.ack(1, OffsetRange::single(7));
        assert_eq!(t.to_commit().collect::<Vec<_>>(), vec![(0, 1), (1, 8)]);
        t.mark_committed(0, 1);
        assert_eq!(t.to_commit().collect::<Vec<_>>(), vec![(1, 8)]);
        t.mark_committed(1, 8);
        t.mark_committed(1, 3); // a late, older commit completion changes nothing
        assert_eq!(t.committed(1), Some(8));
        assert_eq!(t.to_commit().count(), 0);
    }

    #[test]
    fn revoke_forgets_and_reports() {
        let mut t = OffsetTracker::new();
        for o in 0..5 {
            t.register(0, o).unwrap();
        }
        t.ack(0, OffsetRange::new(0, 1));
        t.ack(0, OffsetRange::single(3));
        let r = t.revoke(0);
        assert_eq!(
            r,
            Revoked {
                partition: 0,
                commit: Some(2),
                dropped: 2
            }
        );
        // Stale acks after the revoke are ignored; the partition can come back from the commit.
        assert_eq!(t.ack(0, OffsetRange::new(0, 4)), 0);
        assert_eq!(t.committable(0), None);
        t.register(0, 2).unwrap();
        assert_eq!(
            t.revoke(0),
            Revoked {
                partition: 0,
                commit: None,
                dropped: 1
            }
        );
        assert_eq!(
            t.revoke(9),
            Revoked {
                partition: 9,
                commit: None,
                dropped: 0
            }
        );
    }

    #[test]
    fn a_positioned_partition_commits_its_start_and_refuses_older_offsets() {
        let mut t = OffsetTracker::new();
        assert!(t.positioned(4, 100));
        assert_eq!(t.to_commit().collect::<Vec<_>>(), vec![(4, 100)]);
        assert!(t.register(4, 99).is_err(), "below the start position");
        t.register(4, 100).unwrap();
        assert_eq!(
            t.committable(4),
            Some(100),
            "not past an unacknowledged offset"
        );
        t.ack(4, OffsetRange::single(100));
        assert_eq!(t.committable(4), Some(101));
        assert!(
            !t.positioned(4, 500),
            "only a fresh partition is positioned"
        );
        assert_eq!(t.committable(4), Some(101));
    }

    /// The obvious implementation: every registered offset of the current assignment in a list.
    #[derive(Default, Clone)]
    struct ModelPartition {
        registered: Vec<(i64, bool)>,
        committed: Option<i64>,
        next: i64,
        /// Where `positioned` said the partition starts.
        start: Option<i64>,
    }

    impl ModelPartition {
        fn committable(&self) -> Option<i64> {
            let mut c = self.start;
            for (o, acked) in &self.registered {
                if !acked {
                    break;
                }
                c = Some(o + 1);
            }
            c
        }
        fn pending_commit(&self) -> Option<i64> {
            match (self.committable(), self.committed) {
                (Some(c), Some(d)) if c <= d => None,
                (c, _) => c,
            }
        }
    }

    #[derive(Debug, Clone)]
    enum Op {
        /// Register the next offset of a partition, after a gap.
        Register { p: i32, gap: i64 },
        /// Acknowledge the registered offsets with indices `from..=from+len` (indices modulo the
        /// number registered), widened by `pad` on both sides to cover gaps and strangers.
        Ack {
            p: i32,
            from: usize,
            len: usize,
            pad: i64,
        },
        /// Acknowledge an arbitrary offset (stale or never registered).
        AckStray { p: i32, offset: i64 },
        /// Position a partition after a gap (effective only when it is fresh).
        Position { p: i32, gap: i64 },
        /// Commit what is committable.
        Commit,
        /// Revoke; the partition restarts from its committed (or committable) offset.
        Revoke { p: i32 },
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            6 => (0..3i32, prop_oneof![4 => Just(0i64), 1 => 1..5i64]).prop_map(|(p, gap)| Op::Register { p, gap }),
            5 => (0..3i32, any::<usize>(), 0..4usize, 0..2i64).prop_map(|(p, from, len, pad)| Op::Ack { p, from, len, pad }),
            1 => (0..3i32, 0..60i64).prop_map(|(p, offset)| Op::AckStray { p, offset }),
            1 => (0..3i32, 0..5i64).prop_map(|(p, gap)| Op::Position { p, gap }),
            1 => Just(Op::Commit),
            1 => (0..3i32).prop_map(|p| Op::Revoke { p }),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]
        #[test]
        fn matches_the_model(ops in proptest::collection::vec(op(), 1..200)) {
            let mut t = OffsetTracker::new();
            let mut model: BTreeMap<i32, ModelPartition> = BTreeMap::new();
            for op in ops {
                match op {
                    Op::Register { p, gap } => {
                        let m = model.entry(p).or_default();
                        let offset = m.next + gap;
                        m.next = offset + 1;
                        m.registered.push((offset, false));
                        t.register(p, offset).unwrap();
                    }
                    Op::Ack { p, from, len, pad } => {
                        let m = model.entry(p).or_default();
                        if m.registered.is_empty() {
                            continue;
                        }
                        let i = from % m.registered.len();
                        let j = (i + len).min(m.registered.len() - 1);
                        let range = OffsetRange::new(m.registered[i].0 - pad, m.registered[j].0 + pad);
                        let mut newly = 0;
                        // Offsets already passed by the frontier are not "newly" acknowledged.
                        for e in m.registered.iter_mut().filter(|e| range.contains(e.0)) {
                            if !e.1 {
                                e.1 = true;
                                newly += 1;
                            }
                        }
                        prop_assert_eq!(t.ack(p, range), newly);
                    }
                    Op::AckStray { p, offset } => {
                        let m = model.entry(p).or_default();
                        let mut newly = 0;
                        for e in m.registered.iter_mut().filter(|e| e.0 == offset && !e.1) {
                            e.1 = true;
                            newly += 1;
                        }
                        prop_assert_eq!(t.ack(p, OffsetRange::single(offset)), newly);
                    }
                    Op::Position { p, gap } => {
                        let m = model.entry(p).or_default();
                        let offset = m.next + gap;
                        let fresh = m.registered.is_empty() && m.committed.is_none() && m.start.is_none();
                        if fresh {
                            m.start = Some(offset);
                            m.next = offset;
                        }
                        prop_assert_eq!(t.positioned(p, offset), fresh);
                    }
                    Op::Commit => {
                        let expected: Vec<(i32, i64)> =
                            model.iter().filter_map(|(p, m)| m.pending_commit().map(|o| (*p, o))).collect();
                        let got: Vec<(i32, i64)> = t.to_commit().collect();
                        prop_assert_eq!(&got, &expected);
                        for (p, o) in got {
                            t.mark_committed(p, o);
                            model.get_mut(&p).unwrap().committed = Some(o);
                        }
                    }
                    Op::Revoke { p } => {
                        let m = model.remove(&p).unwrap_or_default();
                        let expected = Revoked {
                            partition: p,
                            commit: m.pending_commit(),
                            dropped: m.registered.iter().filter(|e| !e.1).count(),
                        };
                        prop_assert_eq!(t.revoke(p), expected);
                        // Whoever owns it next resumes from the last commit (or what we could have
                        // committed), so offsets may be registered again.
                        let resume = m.committable().or(m.committed).unwrap_or(0);
                        model.insert(p, ModelPartition { next: resume, ..Default::default() });
                    }
                }
                for (p, m) in &model {
                    prop_assert_eq!(t.committable(*p), m.committable());
                    prop_assert_eq!(t.unacked(*p), m.registered.iter().filter(|e| !e.1).count());
                }
                prop_assert_eq!(t.pending(), model.values().map(|m| m.registered.iter().filter(|e| !e.1).count()).sum::<usize>());
                // The allocation holds every offset behind the frontier, and nothing once
                // every window is empty.
                let held: usize = t.partitions().map(|p| t.held(p)).sum();
                prop_assert!(t.allocated_bytes() >= held * ENTRY_BYTES);
                let live: usize = t.parts.values().map(PartitionState::allocated).sum();
                prop_assert_eq!(t.allocated_bytes(), live);
                if held == 0 {
                    prop_assert_eq!(t.allocated_bytes(), 0);
                }
            }
        }
    }
}
