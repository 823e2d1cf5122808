//! The ledger against a model of the whole pipeline: a topic of good and bad logs, an owner that
//! consumes, batches and dead-letters through the ledger, one to three sinks that acknowledge
//! independently and out of order (across sinks and across batches), stage batches first and
//! refuse rows, dead letters written late or never, revocations, re-assignments, crashes, and
//! (exactly-once) a sink that writes batches in order and records each new stream before writing
//! to it and moves its partition window's day only where a commit at a batch's start records it,
//! next to sinks that acknowledge in any order.
//!
//! Invariants, checked at every commit the ledger asks for:
//! - **safety** (both modes): every log before the committed offset is safe — its rows are in
//!   an acknowledged batch and the letters for its refused rows are written, or (a bad log) its
//!   dead letter is written;
//! - **in-flight bytes** (both modes, after every step): the ledger counts exactly the bytes of
//!   the batches some sink still holds (a batch every sink staged or acknowledged no longer
//!   counts), and the letters of refused rows stashed until their batch is complete;
//! - **staged bookkeeping** (both modes, after every step): the messages of batches no sink
//!   holds and not every sink acknowledged are counted exactly, and the bookkeeping bytes hold
//!   at least their offsets (those still ours) and what the sink task keeps for every batch it
//!   reported staged; once everything is written and committed they return to zero;
//! - **pending letter bytes** (both modes, after every step): the bytes the ledger counts for
//!   unwritten dead letters are exactly those of the model's pending letters of the current
//!   assignments (so they never go negative and return to zero when every letter is written);
//! - **exactly-once metadata**: the checkpoint committed with offset `c` describes the stream at
//!   offset `x`, and only logs without rows (bad logs) lie between `x` and `c`, so the next owner,
//!   starting at `c`, skips exactly the rows the stream holds beyond the checkpoint.

use super::*;
use proptest::prelude::*;
use std::collections::HashSet;

const PARTITIONS: i32 = 2;

#[derive(Debug, Clone)]
enum Op {
    Consume(i32),
    Flush,
    /// Sink `sink` (modulo the sinks) acknowledges a batch in flight it has not acknowledged
    /// (which one: `pick`; the exactly-once sink, sink 0 in that mode: always its oldest);
    /// `refuse` selects rows the sink refuses (not the exactly-once sink).
    Ack {
        pick: usize,
        sink: usize,
        refuse: u8,
    },
    /// Sink `sink` stages a batch it holds (not the exactly-once sink).
    Stage {
        pick: usize,
        sink: usize,
    },
    /// What sink `sink` staged fails to become durable: it holds the batch again (the sink
    /// task submits it again).
    Unstage {
        pick: usize,
        sink: usize,
    },
    /// Write a pending dead letter.
    Letter(usize),
    Commit,
    Revoke(i32),
    Assign(i32),
    Crash,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..PARTITIONS).prop_map(Op::Consume),
        2 => Just(Op::Flush),
        4 => (any::<usize>(), any::<usize>(), any::<u8>())
            .prop_map(|(pick, sink, refuse)| Op::Ack { pick, sink, refuse }),
        2 => (any::<usize>(), any::<usize>()).prop_map(|(pick, sink)| Op::Stage { pick, sink }),
        1 => (any::<usize>(), any::<usize>()).prop_map(|(pick, sink)| Op::Unstage { pick, sink }),
        3 => any::<usize>().prop_map(Op::Letter),
        3 => Just(Op::Commit),
        1 => (0..PARTITIONS).prop_map(Op::Revoke),
        2 => (0..PARTITIONS).prop_map(Op::Assign),
        1 => Just(Op::Crash),
    ]
}

struct InFlight {
    id: BatchId,
    logs: Vec<(Partition, i64)>,
    epochs: Vec<(Partition, u64)>,
    bytes: usize,
    /// Per sink: 0 holding, 1 staged, 2 acknowledged.
    sinks: Vec<u8>,
    /// Rows refused so far (by the sinks that acknowledged), with their letters' bytes.
    refused: Vec<(Partition, i64, usize)>,
    /// Partitions whose rows the exactly-once sink did not write (a stale epoch).
    skipped: Vec<Partition>,
    /// The bytes the last stage reported the sink task keeps for it (0: never staged).
    kept: usize,
}

/// The world: the topic, the broker's committed offsets, and one owner process.
struct World {
    exactly_once: bool,
    /// How many sinks the pipeline has.
    sinks: usize,
    /// `bad[p][o]`: the log fails to decode.
    bad: Vec<Vec<bool>>,
    committed: HashMap<Partition, (i64, Option<String>)>,
    safe: HashSet<(Partition, i64)>,
    // The owner.
    ledger: Ledger,
    positions: HashMap<Partition, i64>,
    open: Vec<(Partition, i64)>,
    flights: VecDeque<InFlight>,
    /// Pending dead letters: partition, offset, epoch, bytes.
    letters: Vec<(Partition, i64, u64, usize)>,
    /// Exactly-once sink: the epoch each partition's stream was opened in.
    streams: HashMap<Partition, u64>,
}

impl World {
    fn new(exactly_once: bool, sinks: usize, bad: Vec<Vec<bool>>) -> Self {
        World {
            exactly_once,
            sinks,
            bad,
            committed: HashMap::new(),
            safe: HashSet::new(),
            ledger: Ledger::new(exactly_once),
            positions: HashMap::new(),
            open: Vec::new(),
            flights: VecDeque::new(),
            letters: Vec::new(),
            streams: HashMap::new(),
        }
    }

    fn commit(&mut self, p: Partition, offset: i64, metadata: Option<String>) {
        for o in 0..offset {
            assert!(
                self.safe.contains(&(p, o)),
                "commit of {p}@{offset} passes log {o}, which is in no acknowledged batch and no \
                 written dead letter"
            );
        }
        if self.exactly_once {
            if let Some(x) = metadata.as_deref().and_then(|m| m.strip_prefix("x=")) {
                let x: i64 = x.parse().unwrap();
                for o in x.min(offset)..x.max(offset) {
                    assert!(
                        self.bad[p as usize][o as usize],
                        "commit of {p}@{offset} carries the checkpoint of offset {x}, but log {o} \
                         between them has rows: the next owner would skip wrongly"
                    );
                }
            }
        }
        let prev = self.committed.get(&p).map_or(0, |c| c.0);
        assert!(
            offset >= prev,
            "commit of {p} moved back from {prev} to {offset}"
        );
        self.committed.insert(p, (offset, metadata));
    }

    fn apply(&mut self, op: Op) {
        match op {
            Op::Consume(p) => {
                let Some(pos) = self.positions.get_mut(&p) else {
                    return;
                };
                let o = *pos;
                if o as usize >= self.bad[p as usize].len() {
                    return;
                }
                *pos += 1;
                if !self.ledger.consumed(p, o) {
                    return;
                }
                if self.bad[p as usize][o as usize] {
                    let bytes = letter_size(p, o);
                    let epoch = self.ledger.letter_sent(p, o, bytes);
                    self.letters.push((p, o, epoch, bytes));
                } else {
                    self.open.push((p, o));
                }
            }
            Op::Flush => self.flush(),
            Op::Ack { pick, sink, refuse } => {
                let sink = sink % self.sinks;
                let candidates: Vec<usize> = (0..self.flights.len())
                    .filter(|&i| self.flights[i].sinks[sink] != 2)
                    .collect();
                if candidates.is_empty() {
                    return;
                }
                let i = if self.exactly_once && sink == 0 {
                    candidates[0] // the exactly-once sink writes batches in order
                } else {
                    candidates[pick % candidates.len()]
                };
                self.ack(i, sink, refuse);
            }
            Op::Stage { pick, sink } => {
                let sink = sink % self.sinks;
                if self.exactly_once && sink == 0 {
                    return;
                }
                let Some(f) = self.flight_where(pick, sink, 0) else {
                    return;
                };
                f.sinks[sink] = 1;
                // What the sink task keeps: a record and the timestamp runs, per stage.
                f.kept = 200 + 16 * f.logs.len() + sink;
                let (id, kept) = (f.id, f.kept);
                assert!(self.ledger.staged(id, sink, kept));
            }
            Op::Unstage { pick, sink } => {
                let sink = sink % self.sinks;
                let Some(f) = self.flight_where(pick, sink, 1) else {
                    return;
                };
                f.sinks[sink] = 0;
                let id = f.id;
                assert!(self.ledger.unstaged(id, sink));
                assert!(!self.ledger.unstaged(id, sink), "only a staged sink");
            }
            Op::Letter(pick) => {
                if self.letters.is_empty() {
                    return;
                }
                let (p, o, epoch, bytes) = self.letters.swap_remove(pick % self.letters.len());
                self.safe.insert((p, o));
                self.ledger.letter_written(p, o, epoch, bytes);
            }
            Op::Commit => {
                for point in self.ledger.commit_points(None) {
                    self.commit(point.partition, point.offset, point.metadata.clone());
                    self.ledger.committed(&point);
                }
            }
            Op::Revoke(p) => {
                if !self.positions.contains_key(&p) {
                    return;
                }
                // As the rebalance callback does: ship the open batch, commit what is
                // acknowledged for the partition, forget the rest.
                self.flush();
                for point in self.ledger.commit_points(Some(&[p])) {
                    self.commit(point.partition, point.offset, point.metadata.clone());
                    self.ledger.committed(&point);
                }
                self.ledger.revoked(&[p]);
                self.positions.remove(&p);
            }
            Op::Assign(p) => {
                if self.positions.contains_key(&p) {
                    return;
                }
                let (start, meta) = self.committed.get(&p).cloned().unwrap_or((0, None));
                let mut checkpoints = HashMap::new();
                if let Some(m) = meta {
                    checkpoints.insert(p, m);
                }
                self.ledger.assigned(&[p], &checkpoints);
                self.positions.insert(p, start);
            }
            Op::Crash => {
                // Everything in the process is gone; what was in flight never lands.
                let fresh = World::new(self.exactly_once, self.sinks, Vec::new());
                self.ledger = fresh.ledger;
                self.positions.clear();
                self.open.clear();
                self.flights.clear();
                self.letters.clear();
                self.streams.clear();
            }
        }
    }

    /// The `pick`-th (modulo) batch in flight where sink `sink` stands at `state` (0 holding,
    /// 1 staged, 2 acknowledged).
    fn flight_where(&mut self, pick: usize, sink: usize, state: u8) -> Option<&mut InFlight> {
        let mut matching: Vec<&mut InFlight> = self
            .flights
            .iter_mut()
            .filter(|f| f.sinks[sink] == state)
            .collect();
        let n = matching.len();
        (n > 0).then(|| matching.swap_remove(pick % n))
    }

    fn flush(&mut self) {
        if self.open.is_empty() {
            return;
        }
        let logs = std::mem::take(&mut self.open);
        let mut offsets: Vec<PartitionOffsets> = Vec::new();
        for &(p, o) in &logs {
            match offsets.iter_mut().find(|po| po.partition == p) {
                Some(po) => {
                    let last = po.ranges.last_mut().unwrap();
                    if last.last + 1 == o {
                        last.last = o;
                    } else {
                        po.ranges.push(OffsetRange::single(o));
                    }
                }
                None => offsets.push(PartitionOffsets {
                    partition: p,
                    ranges: vec![OffsetRange::single(o)],
                }),
            }
        }
        let bytes = 100 * logs.len();
        let (id, epochs) = self.ledger.dispatched(&offsets, bytes, self.sinks);
        self.flights.push_back(InFlight {
            id,
            logs,
            epochs,
            bytes,
            sinks: vec![0; self.sinks],
            refused: Vec::new(),
            skipped: Vec::new(),
            kept: 0,
        });
    }

    /// Sink `sink` acknowledges the `i`th batch in flight; when it is the last sink to, the
    /// batch's rows are durable everywhere and the letters of its refused rows are sent.
    fn ack(&mut self, i: usize, sink: usize, refuse: u8) {
        let mut refused = Vec::new();
        let mut checkpoints = Vec::new();
        let mut skipped = Vec::new();
        let (epochs, all_logs) = (self.flights[i].epochs.clone(), self.flights[i].logs.clone());
        if self.exactly_once && sink == 0 {
            // The sink, per partition of the batch: a new stream is recorded in the group's
            // commit before its first row; rows of an earlier assignment are not written.
            for &(p, epoch) in &epochs {
                let logs: Vec<i64> = all_logs
                    .iter()
                    .filter(|(q, _)| *q == p)
                    .map(|l| l.1)
                    .collect();
                let (first, last) = (logs[0], *logs.last().unwrap());
                if self.streams.get(&p) != Some(&epoch) {
                    let RegisterAt::At(at) = self.ledger.register_at(p, epoch, first, false) else {
                        skipped.push(p);
                        continue; // stale: not ours to write
                    };
                    let metadata = format!("x={first}");
                    self.commit(p, at, Some(metadata.clone()));
                    self.ledger.stream_recorded(p, at, metadata);
                    self.streams.insert(p, epoch);
                } else if refuse.is_multiple_of(2) {
                    // A checkpoint that holds only at the batch's start (the window's day
                    // moving): recorded there, or not yet while an earlier log is unsafe.
                    match self.ledger.register_at(p, epoch, first, true) {
                        RegisterAt::At(at) => {
                            assert_eq!(at, first, "exact");
                            let metadata = format!("x={first}");
                            self.commit(p, at, Some(metadata.clone()));
                            self.ledger.stream_recorded(p, at, metadata);
                        }
                        RegisterAt::Behind => {}
                        RegisterAt::Stale => {
                            skipped.push(p);
                            continue;
                        }
                    }
                }
                checkpoints.push(StreamCheckpoint {
                    partition: p,
                    first_offset: first,
                    last_offset: last,
                    metadata: format!("x={}", last + 1),
                });
            }
        } else {
            for (r, &(p, o)) in all_logs.iter().enumerate() {
                if refuse & (1 << (r % 8)) != 0 && r % 3 == 0 {
                    // A row's letter is smaller than the log's, and differs per row and sink.
                    let bytes = 1 + r + sink + (letter_size(p, o) / 3);
                    refused.push((p, o, bytes));
                }
            }
        }
        let id = self.flights[i].id;
        let completion = self.ledger.sink_acked(id, sink, &refused, checkpoints);
        let f = &mut self.flights[i];
        f.sinks[sink] = 2;
        f.refused.extend(refused);
        f.skipped.extend(skipped);
        let done = f.sinks.iter().all(|s| *s == 2);
        assert_eq!(
            completion,
            if done {
                Completion::Complete
            } else {
                Completion::Waiting
            }
        );
        if !done {
            return;
        }
        let f = self.flights.remove(i).unwrap();
        for (p, o, bytes) in &f.refused {
            // The refused row is dead-lettered, stamped with the batch's epoch.
            let epoch = f.epochs.iter().find(|e| e.0 == *p).unwrap().1;
            self.letters.push((*p, *o, epoch, *bytes));
        }
        self.safe.extend(
            f.logs
                .iter()
                .filter(|l| !f.refused.iter().any(|r| (r.0, r.1) == **l))
                .filter(|l| !f.skipped.contains(&l.0)),
        );
    }
}

/// The bytes of the dead letter of a bad log (any fixed function of its position will do).
fn letter_size(p: Partition, o: i64) -> usize {
    100 + (p as usize * 37 + o as usize * 1013) % 5000
}

impl World {
    /// The bytes of pending letters the ledger must count: those of the current assignments.
    fn expected_letter_bytes(&self) -> usize {
        self.letters
            .iter()
            .filter(|(p, _, e, _)| self.positions.contains_key(p) && self.ledger.epoch(*p) == *e)
            .map(|l| l.3)
            .sum()
    }

    /// The bytes of batches some sink still holds.
    fn expected_inflight_bytes(&self) -> usize {
        self.flights
            .iter()
            .filter(|f| f.sinks.contains(&0))
            .map(|f| f.bytes)
            .sum()
    }

    /// Messages of batches no sink holds and not every sink acknowledged.
    fn expected_staged_messages(&self) -> usize {
        self.flights
            .iter()
            .filter(|f| !f.sinks.contains(&0) && !f.sinks.iter().all(|s| *s == 2))
            .map(|f| f.logs.len())
            .sum()
    }

    /// The least bookkeeping the ledger must count: one window entry for every offset of a
    /// staged batch that is still ours (each once: a batch of an earlier assignment may hold
    /// the same offsets as a later one), and what the sink task keeps for each staged batch.
    fn least_bookkeeping(&self) -> usize {
        let staged = self.flights.iter().filter(|f| !f.sinks.contains(&0));
        let ours: HashSet<(Partition, i64)> = staged
            .clone()
            .flat_map(|f| f.logs.iter().map(move |l| (l, f)))
            .filter(|(l, f)| {
                let epoch = f.epochs.iter().find(|e| e.0 == l.0).unwrap().1;
                self.ledger.epoch(l.0) == epoch
            })
            .map(|(l, _)| *l)
            .collect();
        ours.len() * crate::commit::ENTRY_BYTES + self.flights.iter().map(|f| f.kept).sum::<usize>()
    }

    /// The bytes of refused rows' letters stashed until their batch is complete.
    fn expected_refused_bytes(&self) -> usize {
        self.flights
            .iter()
            .flat_map(|f| &f.refused)
            .map(|r| r.2)
            .sum()
    }
}

fn topic() -> impl Strategy<Value = Vec<Vec<bool>>> {
    prop::collection::vec(
        prop::collection::vec(prop::bool::weighted(0.25), 4..14),
        PARTITIONS as usize,
    )
}

fn run(exactly_once: bool, sinks: usize, bad: Vec<Vec<bool>>, ops: Vec<Op>) {
    let mut w = World::new(exactly_once, sinks, bad);
    for p in 0..PARTITIONS {
        w.apply(Op::Assign(p));
    }
    for op in ops {
        w.apply(op);
        assert_eq!(
            w.ledger.letter_bytes(),
            w.expected_letter_bytes(),
            "pending letter bytes"
        );
        assert_eq!(
            w.ledger.inflight_bytes(),
            w.expected_inflight_bytes(),
            "in-flight bytes: those of the batches some sink still holds"
        );
        assert_eq!(w.ledger.refused_bytes(), w.expected_refused_bytes());
        assert_eq!(w.ledger.staged_messages(), w.expected_staged_messages());
        let least = w.least_bookkeeping();
        assert!(
            w.ledger.bookkeeping_bytes() >= least,
            "bookkeeping {} under the staged batches' {least}",
            w.ledger.bookkeeping_bytes()
        );
    }
    // Whatever happened, draining (all work lands) lets the commit reach the end of what was
    // consumed, and the bookkeeping returns to zero.
    w.flush();
    while !w.flights.is_empty() {
        for sink in 0..w.sinks {
            w.apply(Op::Ack {
                pick: 0,
                sink,
                refuse: 0,
            });
        }
    }
    while !w.letters.is_empty() {
        w.apply(Op::Letter(0));
    }
    w.apply(Op::Commit);
    assert!(w.ledger.settled());
    assert_eq!(w.ledger.letters_held(), 0);
    assert_eq!(w.ledger.letter_bytes(), 0, "letter bytes return to zero");
    assert_eq!(w.ledger.inflight_bytes(), 0);
    assert_eq!(w.ledger.refused_bytes(), 0);
    assert_eq!(w.ledger.staged_messages(), 0);
    assert_eq!(
        w.ledger.bookkeeping_bytes(),
        0,
        "the bookkeeping is released once everything is written"
    );
    for (p, pos) in &w.positions {
        let committed = w.committed.get(p).map_or(0, |c| c.0);
        if !w.exactly_once {
            assert_eq!(
                committed, *pos,
                "partition {p}: everything consumed is committed"
            );
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn at_least_once_never_commits_past_an_unsafe_log(
        sinks in 1..=3usize,
        bad in topic(),
        ops in prop::collection::vec(op(), 0..80),
    ) {
        run(false, sinks, bad, ops);
    }

    #[test]
    fn exactly_once_commits_are_safe_and_carry_their_own_checkpoint(
        sinks in 1..=3usize,
        bad in topic(),
        ops in prop::collection::vec(op(), 0..80),
    ) {
        run(true, sinks, bad, ops);
    }
}

/// A case found by reading the code, kept as a plain test beside the model: the first
/// log of an assignment waits for its dead letter when the partition's first batch opens a
/// stream; recording the stream must not commit past that log.
#[test]
fn a_new_stream_is_recorded_before_a_log_still_waiting_for_its_dead_letter() {
    let mut w = World::new(true, 1, vec![vec![true, false, false], vec![false]]);
    w.apply(Op::Assign(0));
    w.apply(Op::Consume(0)); // offset 0: bad, its letter pending
    w.apply(Op::Consume(0)); // offset 1: good
    w.apply(Op::Flush);
    w.apply(Op::Ack {
        pick: 0,
        sink: 0,
        refuse: 0,
    });
    assert_eq!(
        w.committed[&0],
        (0, Some("x=1".into())),
        "recorded at the waiting log"
    );
    w.apply(Op::Letter(0));
    w.apply(Op::Commit);
    assert_eq!(w.committed[&0], (2, Some("x=2".into())));
}

#[test]
fn acknowledgements_of_an_earlier_assignment_do_not_count() {
    let mut l = Ledger::new(false);
    l.assigned(&[0], &HashMap::new());
    assert!(l.consumed(0, 5));
    let epoch = l.letter_sent(0, 5, 40);
    l.revoked(&[0]);
    l.assigned(&[0], &HashMap::new());
    assert!(l.consumed(0, 5));
    let po = PartitionOffsets {
        partition: 0,
        ranges: vec![OffsetRange::single(5)],
    };
    let (id, _) = l.dispatched(std::slice::from_ref(&po), 10, 1);
    l.letter_written(0, 5, epoch, 40); // the old letter lands late: the new batch still pending
    assert!(l.commit_points(None).is_empty());
    l.acked(id, &[], Vec::new());
    assert_eq!(
        l.commit_points(None),
        vec![CommitPoint {
            partition: 0,
            offset: 6,
            metadata: None
        }]
    );
}

#[test]
fn a_revoke_counts_the_offsets_one_sink_wrote_and_another_did_not() {
    let mut l = Ledger::new(false);
    l.assigned(&[0, 1], &HashMap::new());
    let po = |p, first, last| PartitionOffsets {
        partition: p,
        ranges: vec![OffsetRange::new(first, last)],
    };
    for o in 0..20 {
        assert!(l.consumed(0, o));
        assert!(l.consumed(1, o));
    }
    // Written by sink 0 (the MaxCompute move done), not by sink 1: counted.
    let (a, _) = l.dispatched(&[po(0, 0, 4), po(1, 0, 4)], 10, 2);
    l.sink_acked(a, 0, &[], Vec::new());
    // Staged only, or held by both: nothing written yet, the next owner's copy is the first.
    let (b, _) = l.dispatched(&[po(0, 5, 9)], 10, 2);
    l.staged(b, 0, 0);
    let (_c, _) = l.dispatched(&[po(0, 10, 12)], 10, 2);
    // Written by both: complete, its offsets are the tracker's, not left by another sink.
    let (d, _) = l.dispatched(&[po(0, 13, 14)], 10, 2);
    l.sink_acked(d, 0, &[], Vec::new());
    l.sink_acked(d, 1, &[], Vec::new());
    // Two ranges in one batch, written by sink 1 only.
    let (e, _) = l.dispatched(
        &[PartitionOffsets {
            partition: 0,
            ranges: vec![OffsetRange::new(15, 16), OffsetRange::new(18, 19)],
        }],
        10,
        2,
    );
    l.sink_acked(e, 1, &[], Vec::new());
    assert_eq!(l.written_uncommitted(&[0]), 5 + 4);
    assert_eq!(l.written_uncommitted(&[1]), 5, "partition 1 of batch a");
    assert_eq!(l.written_uncommitted(&[0, 1]), 14);
    l.revoked(&[0]);
    // Batch a is still in flight for partition 1, but partition 0's offsets in it belong to
    // an earlier assignment now: a second revoke does not count them again.
    l.assigned(&[0], &HashMap::new());
    assert_eq!(l.written_uncommitted(&[0]), 0);
    assert_eq!(l.written_uncommitted(&[1]), 5);
}
