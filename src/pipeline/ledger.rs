//! The one owner of every commit decision: what may be committed now, with which metadata.
//!
//! Pure and synchronous, like [`OffsetTracker`] (which it wraps): no I/O, no clocks, no locks.
//! The pipeline state feeds it what happened and asks it what to commit, then carries the answer
//! to the broker (through `source::group`); the sink task reports what the sinks acknowledged.
//!
//! What it holds, per partition:
//! - the **assignment epoch**, bumped on every assignment and revocation. Batches and dead
//!   letters are stamped with the epoch they were consumed in; an acknowledgement from an
//!   earlier epoch is a fact about rows, not about offsets that are ours, and is ignored.
//! - the consumed offsets and which are acknowledged ([`OffsetTracker`]);
//! - **batches in flight** (their offset ranges and Arrow bytes) and where each sink stands
//!   with each: *holding* it, *staged* (the sink no longer holds the bytes, but its rows are not
//!   durable yet: the bytes leave the in-flight count, the offsets stay uncommittable) or
//!   *acknowledged*. Sinks acknowledge independently and in any order; a batch's offsets count
//!   once every sink has acknowledged it;
//! - **offsets held by dead letters** not yet written (a rejected log, or a row a sink refused):
//!   such an offset is acknowledged only when every letter for it is written. The ledger also
//!   counts the bytes those letters hold (each letter carries a full copy of its payload until
//!   it is written): they count against the same in-flight budget as batches;
//! - its own **bookkeeping**, as allocated ([`Ledger::bookkeeping_bytes`]): the offset windows,
//!   the batches' records, and what the sink task keeps for a staged batch until it is written
//!   (reported with the stage). A staged batch's bytes leave the in-flight count, but its
//!   bookkeeping stays until the sink's *written*, about 33 bytes a message for MaxCompute's
//!   interval: it counts against the same budget, so staged rows cannot outgrow memory;
//! - exactly-once only: the **checkpoints** the sink reported per written batch, and the last one
//!   committed (or read at assignment), so that every commit carries the checkpoint that belongs
//!   exactly to its offset.
//!
//! The rule, for both delivery modes: a committed offset never passes a log that is neither in an
//! acknowledged batch nor in a written dead letter. In exactly-once mode, additionally, the
//! metadata committed with offset `c` describes the stream position at `c`: a commit never falls
//! inside a batch (it moves back to the batch's start), and a new stream is recorded at the
//! partition's first unacknowledged offset — never past a log still waiting for its dead letter.
//! `ledger/tests.rs` checks both against a model under random interleavings.

use crate::batch::PartitionOffsets;
use crate::commit::{OffsetRange, OffsetTracker, Partition, Revoked};
use crate::sink::StreamCheckpoint;
use std::collections::{HashMap, VecDeque};

/// Names one batch in flight.
pub(crate) type BatchId = u64;

/// One offset to commit, with its exactly-once checkpoint if the mode has one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CommitPoint {
    pub(crate) partition: Partition,
    /// Kafka's "next offset to read".
    pub(crate) offset: i64,
    pub(crate) metadata: Option<String>,
}

/// Names one sink of the pipeline (its index in the configuration's order).
pub(crate) type SinkIndex = usize;

/// Where one sink stands with one batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Held {
    /// The sink holds the batch's bytes and has not acknowledged it.
    Holding,
    /// The sink no longer holds the bytes, but the rows are not durable in it yet.
    Staged,
    /// The rows are durable in the sink (except those it refused).
    Acked,
}

/// A batch handed to the sinks: its offsets, stamped with the epoch they were consumed in,
/// where each sink stands with it, and what the sinks that acknowledged it reported.
struct Flight {
    offsets: Vec<(PartitionOffsets, u64)>,
    /// Bytes the batch holds; counted in the in-flight bytes until no sink holds them.
    bytes: usize,
    sinks: Vec<Held>,
    /// Rows refused by the sinks that acknowledged, with the bytes of their letters (counted in
    /// [`Ledger::refused_bytes`] until the batch is complete).
    refused: Vec<(Partition, i64, usize)>,
    checkpoints: Vec<StreamCheckpoint>,
    /// Messages (offsets) the batch covers.
    messages: usize,
    /// Bytes of its own records (offsets, sinks), as allocated when dispatched.
    own: usize,
    /// Bytes the sink task keeps for it while it is staged (the last report).
    kept: usize,
    /// No sink holds it and not every sink acknowledged it: counted in
    /// [`Ledger::staged_messages`].
    staged: bool,
}

impl Flight {
    fn holds_bytes(&self) -> bool {
        self.sinks.contains(&Held::Holding)
    }
}

/// What a sink's acknowledgement did to its batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Completion {
    /// Other sinks have not acknowledged it yet.
    Waiting,
    /// Every sink acknowledged it: its offsets count (refused rows wait for their letters).
    Complete,
    /// Unknown batch or sink, or this sink had already acknowledged it: nothing changed.
    Ignored,
}

/// Dead letters not yet written for one source offset, sent in `epoch`, and the bytes they hold.
#[derive(Debug, Clone, Copy)]
struct Letters {
    epoch: u64,
    count: u32,
    bytes: usize,
}

/// See the module docs.
pub(crate) struct Ledger {
    exactly_once: bool,
    tracker: OffsetTracker,
    epochs: HashMap<Partition, u64>,
    flights: HashMap<BatchId, Flight>,
    next_batch: BatchId,
    inflight_bytes: usize,
    /// Bytes of letters for rows refused by a sink, stashed until their batch is complete.
    refused_bytes: usize,
    letters: HashMap<(Partition, i64), Letters>,
    letters_held: usize,
    /// Bytes held by the letters in `letters` (the sum of their `bytes`).
    letter_bytes: usize,
    /// The flights' `own` and `kept` bytes, summed.
    flight_bytes: usize,
    /// Messages of flights no sink holds and not every sink acknowledged (staged).
    staged_messages: usize,
    /// Exactly-once: checkpoints of acknowledged batches of the current epoch, by batch order.
    marks: HashMap<Partition, VecDeque<StreamCheckpoint>>,
    /// Exactly-once: the checkpoint of the last commit (or the one read at assignment), carried
    /// by commits that pass no new batch.
    floors: HashMap<Partition, String>,
}

/// Where a registration commits ([`Ledger::register_at`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RegisterAt {
    /// The partition's epoch has changed: the rows are not ours to write.
    Stale,
    /// Exact, but an earlier message is not acknowledged yet.
    Behind,
    /// Commit at this offset.
    At(i64),
}

impl Ledger {
    /// An empty ledger; `exactly_once` makes commits carry checkpoints.
    pub(crate) fn new(exactly_once: bool) -> Self {
        Ledger {
            exactly_once,
            tracker: OffsetTracker::new(),
            epochs: HashMap::new(),
            flights: HashMap::new(),
            next_batch: 0,
            inflight_bytes: 0,
            refused_bytes: 0,
            letters: HashMap::new(),
            letters_held: 0,
            letter_bytes: 0,
            flight_bytes: 0,
            staged_messages: 0,
            marks: HashMap::new(),
            floors: HashMap::new(),
        }
    }

    /// The partition's current assignment epoch.
    pub(crate) fn epoch(&self, p: Partition) -> u64 {
        self.epochs.get(&p).copied().unwrap_or(0)
    }

    /// A message was consumed. False when it was delivered before in this assignment (a rewind):
    /// it is already accounted for and must be skipped.
    pub(crate) fn consumed(&mut self, p: Partition, offset: i64) -> bool {
        self.tracker.register(p, offset).is_ok()
    }

    /// A consumed message that needs no write (a tombstone): done at once.
    pub(crate) fn nothing_to_write(&mut self, p: Partition, offset: i64) {
        self.tracker.ack(p, OffsetRange::single(offset));
    }

    /// A dead letter for `offset`, holding `bytes`, is being sent: the offset waits for it and
    /// its bytes count against the budget until it is written. Returns the epoch to stamp on the
    /// letter.
    pub(crate) fn letter_sent(&mut self, p: Partition, offset: i64, bytes: usize) -> u64 {
        let epoch = self.epoch(p);
        self.hold_letter(p, offset, epoch, bytes);
        epoch
    }

    fn hold_letter(&mut self, p: Partition, offset: i64, epoch: u64, bytes: usize) {
        let e = self.letters.entry((p, offset)).or_insert(Letters {
            epoch,
            count: 0,
            bytes: 0,
        });
        if e.epoch != epoch {
            // Left over from an earlier assignment (forgotten at revoke, so not expected).
            self.letters_held -= e.count as usize;
            self.letter_bytes -= e.bytes;
            *e = Letters {
                epoch,
                count: 0,
                bytes: 0,
            };
        }
        e.count += 1;
        e.bytes += bytes;
        self.letters_held += 1;
        self.letter_bytes += bytes;
    }

    /// A dead letter sent in `epoch` for `offset`, holding `bytes`, is durably written. The
    /// offset counts as acknowledged once all of its letters are; letters from an earlier epoch
    /// change nothing. The bytes released never exceed what the offset's letters hold, and the
    /// last letter releases all of it.
    pub(crate) fn letter_written(&mut self, p: Partition, offset: i64, epoch: u64, bytes: usize) {
        let key = (p, offset);
        let Some(l) = self.letters.get_mut(&key) else {
            return;
        };
        if l.epoch != epoch {
            return;
        }
        l.count -= 1;
        self.letters_held -= 1;
        let released = if l.count == 0 {
            l.bytes
        } else {
            bytes.min(l.bytes)
        };
        l.bytes -= released;
        self.letter_bytes -= released;
        if l.count == 0 {
            self.letters.remove(&key);
            self.tracker.ack(p, OffsetRange::single(offset));
        }
    }

    /// A batch goes to `sinks` sinks. Returns its id and the epoch of each of its partitions.
    pub(crate) fn dispatched(
        &mut self,
        offsets: &[PartitionOffsets],
        bytes: usize,
        sinks: usize,
    ) -> (BatchId, Vec<(Partition, u64)>) {
        let id = self.next_batch;
        self.next_batch += 1;
        let offsets: Vec<(PartitionOffsets, u64)> = offsets
            .iter()
            .map(|po| (po.clone(), self.epoch(po.partition)))
            .collect();
        let epochs = offsets.iter().map(|(po, e)| (po.partition, *e)).collect();
        let ranges = offsets.iter().flat_map(|(po, _)| &po.ranges);
        let messages = ranges
            .clone()
            .map(|r| (r.last - r.first + 1) as usize)
            .sum();
        let holders = vec![Held::Holding; sinks];
        let own = offsets.capacity() * std::mem::size_of::<(PartitionOffsets, u64)>()
            + offsets
                .iter()
                .map(|(po, _)| po.ranges.capacity())
                .sum::<usize>()
                * std::mem::size_of::<OffsetRange>()
            + holders.capacity() * std::mem::size_of::<Held>();
        let flight = Flight {
            offsets,
            bytes,
            sinks: holders,
            refused: Vec::new(),
            checkpoints: Vec::new(),
            messages,
            own,
            kept: 0,
            staged: false,
        };
        if flight.holds_bytes() {
            self.inflight_bytes += bytes;
        }
        self.flight_bytes += own;
        self.flights.insert(id, flight);
        if sinks == 0 {
            self.complete(id);
        }
        (id, epochs)
    }

    /// Sink `sink` staged batch `id`: it no longer holds the batch's bytes, but the rows are not
    /// durable in it yet. When no sink holds them any more, the bytes leave the in-flight count;
    /// the offsets stay uncommittable until the sink acknowledges, and the batch's bookkeeping
    /// stays counted, with the `kept` bytes the sink task keeps for it until then. Returns
    /// whether anything changed.
    pub(crate) fn staged(&mut self, id: BatchId, sink: SinkIndex, kept: usize) -> bool {
        let Some(flight) = self.flights.get_mut(&id) else {
            return false;
        };
        let Some(held) = flight.sinks.get_mut(sink) else {
            return false;
        };
        if *held != Held::Holding {
            return false;
        }
        *held = Held::Staged;
        self.flight_bytes = self.flight_bytes - flight.kept + kept;
        flight.kept = kept;
        if !flight.holds_bytes() {
            self.inflight_bytes -= flight.bytes;
        }
        self.recount_staged(id);
        true
    }

    /// Keeps [`Ledger::staged_messages`] in step with batch `id`'s state.
    fn recount_staged(&mut self, id: BatchId) {
        let Some(f) = self.flights.get_mut(&id) else {
            return;
        };
        let staged = !f.holds_bytes() && !f.sinks.iter().all(|h| *h == Held::Acked);
        if staged != f.staged {
            f.staged = staged;
            if staged {
                self.staged_messages += f.messages;
            } else {
                self.staged_messages -= f.messages;
            }
        }
    }

    /// Sink `sink` holds staged batch `id` again: what it staged failed to become durable and
    /// the batch is submitted to it again, from the bytes another sink still holds. The bytes
    /// count again if no other sink held them. Returns whether anything changed.
    pub(crate) fn unstaged(&mut self, id: BatchId, sink: SinkIndex) -> bool {
        let Some(flight) = self.flights.get_mut(&id) else {
            return false;
        };
        let was_holding = flight.holds_bytes();
        let Some(held) = flight.sinks.get_mut(sink) else {
            return false;
        };
        if *held != Held::Staged {
            return false;
        }
        *held = Held::Holding;
        if !was_holding {
            self.inflight_bytes += flight.bytes;
        }
        self.recount_staged(id);
        true
    }

    /// Sink `sink` acknowledged batch `id`, in any order relative to other sinks and batches.
    /// `refused` names the source offset of each row it refused and the bytes of its letter
    /// (one entry per dead letter that will be sent for it); `checkpoints` are the exactly-once
    /// sink's per-partition stream positions. The batch counts once **every** sink has
    /// acknowledged it ([`Completion::Complete`]): then its offsets are acknowledged, except the
    /// refused ones, which wait for their letters (the caller sends them now).
    pub(crate) fn sink_acked(
        &mut self,
        id: BatchId,
        sink: SinkIndex,
        refused: &[(Partition, i64, usize)],
        checkpoints: Vec<StreamCheckpoint>,
    ) -> Completion {
        let Some(flight) = self.flights.get_mut(&id) else {
            return Completion::Ignored;
        };
        let was_holding = flight.holds_bytes();
        let Some(held) = flight.sinks.get_mut(sink) else {
            return Completion::Ignored;
        };
        if *held == Held::Acked {
            return Completion::Ignored;
        }
        *held = Held::Acked;
        if was_holding && !flight.holds_bytes() {
            self.inflight_bytes -= flight.bytes;
        }
        self.refused_bytes += refused.iter().map(|r| r.2).sum::<usize>();
        flight.refused.extend_from_slice(refused);
        flight.checkpoints.extend(checkpoints);
        if flight.sinks.iter().all(|h| *h == Held::Acked) {
            self.complete(id);
            Completion::Complete
        } else {
            self.recount_staged(id);
            Completion::Waiting
        }
    }

    /// The only sink acknowledged batch `id` (a pipeline with one sink; tests).
    #[cfg(test)]
    pub(crate) fn acked(
        &mut self,
        id: BatchId,
        refused: &[(Partition, i64, usize)],
        checkpoints: Vec<StreamCheckpoint>,
    ) {
        self.sink_acked(id, 0, refused, checkpoints);
    }

    /// Every sink acknowledged batch `id`: its offsets are acknowledged, except those of refused
    /// rows, which wait for their letters.
    fn complete(&mut self, id: BatchId) {
        let Some(flight) = self.flights.remove(&id) else {
            return;
        };
        if flight.holds_bytes() {
            self.inflight_bytes -= flight.bytes;
        }
        if flight.staged {
            self.staged_messages -= flight.messages;
        }
        self.flight_bytes -= flight.own + flight.kept;
        // A backlog of staged batches would otherwise keep the map's peak size for good.
        let (len, cap) = (self.flights.len(), self.flights.capacity());
        if len == 0 || len < cap / 4 {
            self.flights.shrink_to(len * 2);
        }
        let refused = flight.refused;
        self.refused_bytes -= refused.iter().map(|r| r.2).sum::<usize>();
        let current = |ledger: &Self, p: Partition| {
            flight
                .offsets
                .iter()
                .any(|(po, e)| po.partition == p && ledger.epoch(p) == *e)
        };
        for cp in flight.checkpoints {
            if current(self, cp.partition) {
                // Batches complete in any order (sinks acknowledge independently); the marks
                // stay in offset order, which `checkpoint_at` relies on.
                let marks = self.marks.entry(cp.partition).or_default();
                let at = marks.partition_point(|m| m.first_offset < cp.first_offset);
                marks.insert(at, cp);
            }
        }
        for &(p, o, bytes) in &refused {
            if current(self, p) {
                self.hold_letter(p, o, self.epoch(p), bytes);
            }
        }
        for (po, epoch) in &flight.offsets {
            if self.epoch(po.partition) != *epoch {
                continue; // consumed in an earlier assignment: not ours to commit
            }
            for r in &po.ranges {
                let mut first = r.first;
                let mut held: Vec<i64> = refused
                    .iter()
                    .filter(|(p, o, _)| *p == po.partition && r.contains(*o))
                    .map(|(_, o, _)| *o)
                    .collect();
                held.sort_unstable();
                held.dedup();
                for o in held {
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

    /// `partitions` were assigned; `checkpoints` are the commit metadata read for them
    /// (exactly-once). Returns each partition's new epoch.
    pub(crate) fn assigned(
        &mut self,
        partitions: &[Partition],
        checkpoints: &HashMap<Partition, String>,
    ) -> Vec<(Partition, u64)> {
        partitions
            .iter()
            .map(|&p| {
                let epoch = self.bump(p);
                match checkpoints.get(&p) {
                    Some(m) if !m.is_empty() => {
                        self.floors.insert(p, m.clone());
                    }
                    _ => {
                        self.floors.remove(&p);
                    }
                }
                (p, epoch)
            })
            .collect()
    }

    /// `p`, just assigned, reads from `offset`, a start its group never committed
    /// (`start_from`): commit it as is (see [`OffsetTracker::positioned`]).
    pub(crate) fn positioned(&mut self, p: Partition, offset: i64) {
        self.tracker.positioned(p, offset);
    }

    /// Offsets of `partitions`, consumed in their current assignment, in batches some sink has
    /// written (acknowledged) and another has not: a revoke leaves them uncommitted, so the next
    /// owner writes their rows again to the sinks that had them. Ask before [`Ledger::revoked`].
    pub(crate) fn written_uncommitted(&self, partitions: &[Partition]) -> usize {
        self.flights
            .values()
            .filter(|f| f.sinks.contains(&Held::Acked))
            .flat_map(|f| &f.offsets)
            .filter(|(po, e)| partitions.contains(&po.partition) && self.epoch(po.partition) == *e)
            .flat_map(|(po, _)| &po.ranges)
            .map(|r| (r.last - r.first + 1) as usize)
            .sum()
    }

    /// `partitions` were revoked (after what could be committed for them was): their
    /// unacknowledged offsets and letters are forgotten; the next owner reads them again.
    pub(crate) fn revoked(&mut self, partitions: &[Partition]) -> Vec<Revoked> {
        let revoked = partitions
            .iter()
            .map(|&p| {
                self.bump(p);
                self.floors.remove(&p);
                self.tracker.revoke(p)
            })
            .collect();
        let (mut dropped, mut bytes) = (0, 0);
        self.letters.retain(|(p, _), l| {
            let keep = !partitions.contains(p);
            if !keep {
                dropped += l.count as usize;
                bytes += l.bytes;
            }
            keep
        });
        self.letters_held -= dropped;
        self.letter_bytes -= bytes;
        revoked
    }

    fn bump(&mut self, p: Partition) -> u64 {
        self.marks.remove(&p);
        let e = self.epochs.entry(p).or_insert(0);
        *e += 1;
        *e
    }

    /// Exactly-once: the sink opened a new stream for `p` in `epoch`, for a batch whose first
    /// offset of `p` is `first_offset`, and must have it recorded in the group's commit before
    /// writing. Returns where to commit it, or `None` when the epoch is no longer current (the
    /// rows are not ours to write). The offset is the partition's first unacknowledged one: a
    /// log before the batch that still waits for its dead letter must be read again after a
    /// crash, so the commit cannot pass it.
    pub(crate) fn stream_opened(&self, p: Partition, epoch: u64, first_offset: i64) -> Option<i64> {
        if self.epoch(p) != epoch {
            return None;
        }
        Some(
            self.tracker
                .frontier(p)
                .map_or(first_offset, |f| f.min(first_offset)),
        )
    }

    /// Exactly-once: where a registration for `p`'s batch starting at `first_offset` commits:
    /// [`Self::stream_opened`]'s offset, or with `exact` (a checkpoint that holds only at the
    /// batch's start, such as a move of the partition window's day) that offset only if it is
    /// `first_offset`, else [`RegisterAt::Behind`]: an earlier message is unacknowledged, and a
    /// commit before it would put rows between the commit and what its checkpoint describes.
    pub(crate) fn register_at(
        &self,
        p: Partition,
        epoch: u64,
        first_offset: i64,
        exact: bool,
    ) -> RegisterAt {
        match self.stream_opened(p, epoch, first_offset) {
            None => RegisterAt::Stale,
            Some(at) if exact && at != first_offset => RegisterAt::Behind,
            Some(at) => RegisterAt::At(at),
        }
    }

    /// Exactly-once: the new stream's `metadata` was committed at `offset`; later commits that
    /// pass no batch carry it.
    pub(crate) fn stream_recorded(&mut self, p: Partition, offset: i64, metadata: String) {
        self.tracker.mark_committed(p, offset);
        self.floors.insert(p, metadata);
    }

    /// What may be committed now (only `only`'s partitions, if given): per partition whose
    /// acknowledged prefix moved, the offset and, in exactly-once mode, its checkpoint. Call
    /// [`committed`](Self::committed) for each one the broker accepted.
    pub(crate) fn commit_points(&mut self, only: Option<&[Partition]>) -> Vec<CommitPoint> {
        let items: Vec<(Partition, i64)> = self
            .tracker
            .to_commit()
            .filter(|(p, _)| only.is_none_or(|o| o.contains(p)))
            .collect();
        let mut out = Vec::new();
        for (p, o) in items {
            let (offset, metadata) = if self.exactly_once {
                self.checkpoint_at(p, o)
            } else {
                (o, None)
            };
            if self.tracker.committed(p).is_some_and(|c| c >= offset) {
                continue;
            }
            out.push(CommitPoint {
                partition: p,
                offset,
                metadata,
            });
        }
        out
    }

    /// The broker accepted `point`.
    pub(crate) fn committed(&mut self, point: &CommitPoint) {
        self.tracker.mark_committed(point.partition, point.offset);
    }

    /// Exactly-once: what to commit for a committable `offset` of `p`: the offset, moved back to
    /// the start of a batch when it falls inside one (checkpoints exist only at batch
    /// boundaries), and the checkpoint of the last batch below it (else the floor).
    fn checkpoint_at(&mut self, p: Partition, offset: i64) -> (i64, Option<String>) {
        let mut target = offset;
        let mut found = None;
        if let Some(marks) = self.marks.get_mut(&p) {
            while let Some(m) = marks.front() {
                if m.last_offset < offset {
                    found = marks.pop_front().map(|m| m.metadata);
                } else {
                    if m.first_offset < offset {
                        target = m.first_offset;
                    }
                    break;
                }
            }
        }
        if let Some(m) = &found {
            self.floors.insert(p, m.clone());
        }
        (target, found.or_else(|| self.floors.get(&p).cloned()))
    }

    /// Arrow bytes of batches in flight that some sink still holds (a batch every sink has
    /// staged or acknowledged no longer counts).
    pub(crate) fn inflight_bytes(&self) -> usize {
        self.inflight_bytes
    }

    /// The ledger's own bookkeeping and what the sink task keeps for staged batches, as
    /// allocated: the offset windows (every message from its consumption until the commit
    /// frontier passes it), the batches' records, and the `kept` bytes reported with each
    /// stage. Counted against the in-flight budget beside the batches' bytes.
    pub(crate) fn bookkeeping_bytes(&self) -> usize {
        self.tracker.allocated_bytes()
            // The map's buckets (its capacity is seven eighths of them), each an entry and a
            // control byte.
            + self.flights.capacity() * 8 / 7 * (std::mem::size_of::<(BatchId, Flight)>() + 1)
            + self.flight_bytes
    }

    /// Messages of batches that every sink has staged or written but not every sink written:
    /// what a staging sink's early move would release.
    pub(crate) fn staged_messages(&self) -> usize {
        self.staged_messages
    }

    /// Bytes of the letters for rows a sink refused, kept until every sink acknowledged their
    /// batch (then they are sent and count in [`letter_bytes`](Self::letter_bytes)).
    pub(crate) fn refused_bytes(&self) -> usize {
        self.refused_bytes
    }

    /// Dead letters not yet written (counted per letter; the budget counts their bytes).
    #[cfg(test)]
    pub(crate) fn letters_held(&self) -> usize {
        self.letters_held
    }

    /// Bytes held by dead letters not yet written (of the current assignments).
    pub(crate) fn letter_bytes(&self) -> usize {
        self.letter_bytes
    }

    /// Nothing waits for an acknowledgement.
    pub(crate) fn settled(&self) -> bool {
        self.flights.is_empty() && self.letters.is_empty()
    }

    /// No batch in flight and no dead letter holds any of `partitions`.
    pub(crate) fn settled_for(&self, partitions: &[Partition]) -> bool {
        self.letters.keys().all(|(p, _)| !partitions.contains(p))
            && self.flights.values().all(|f| {
                f.offsets
                    .iter()
                    .all(|(po, _)| !partitions.contains(&po.partition))
            })
    }
}

#[cfg(test)]
mod tests;
