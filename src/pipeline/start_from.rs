//! Where newly assigned partitions start under `consumer.start_from` (a time, or another
//! group's committed offsets): only partitions the group has never committed start there; the
//! others continue from their committed offset.
//!
//! Either answer needs a read from the coordinator (the group's committed offsets, then the
//! offsets for a time or the other group's). When a read fails (a coordinator still loading
//! during a broker roll, a timeout) nothing is guessed: the partitions it leaves open are
//! **pending**, paused inside the rebalance callback right after the assignment, read again
//! every second by the poll loop (`State::retry_starts`), then positioned (`seek`) and resumed. Before,
//! they started per `auto.offset.reset` (`earliest` whenever `start_from` is set): the whole
//! retained topic was published again.

use crate::commit::Partition;
use crate::config::StartFrom;
use crate::kafka_log::HelperContext;
use crate::source::group::{self, Group};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{Offset, TopicPartitionList};
use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

/// The client that reads another group's committed offsets (`start_from: group:`).
pub(crate) type GroupReader = BaseConsumer<HelperContext>;

/// What a read of the group's committed offsets says about each partition.
#[derive(Debug, Default, PartialEq, Eq)]
struct Committed {
    /// Partitions with a committed offset (they continue from it).
    at: Vec<(Partition, i64)>,
    /// Partitions the group never committed: `start_from` decides.
    fresh: Vec<Partition>,
    /// Partitions the read did not answer for (the whole request, or their entry, failed).
    failed: Vec<Partition>,
}

/// Reads the group's committed offsets of `partitions`.
fn read_committed(group: &Group<'_>, partitions: &[Partition], timeout: Duration) -> Committed {
    let mut out = Committed::default();
    for (&p, c) in partitions.iter().zip(group.committed(partitions, timeout)) {
        match c {
            group::Committed::At(o, _) => out.at.push((p, o)),
            group::Committed::Nothing => out.fresh.push(p),
            group::Committed::Failed(e) => {
                tracing::debug!(error = %e, partition = p, "cannot read the group's committed offset");
                out.failed.push(p);
            }
        }
    }
    out
}

/// Where each of `fresh` starts per `start_from`: its offset, the end, or `None` (what the
/// other group never committed, a time past the end: `auto.offset.reset`, which `start_from`
/// sets to `earliest`). Partitions whose entry of the answer failed are left out (read again
/// later, the others start); `Err` when the whole lookup failed.
fn resolve(
    group: &Group<'_>,
    start_from: &StartFrom,
    other_group: Option<&GroupReader>,
    fresh: &[Partition],
    timeout: Duration,
) -> Result<Vec<(Partition, Option<Offset>)>, String> {
    let topic = group.topic();
    let found = match start_from {
        StartFrom::Timestamp(ms) => {
            let mut q = TopicPartitionList::new();
            for p in fresh {
                let _ = q.add_partition_offset(topic, *p, Offset::Offset(*ms));
            }
            group.consumer().offsets_for_times(q, timeout)
        }
        StartFrom::Group(_) => {
            let Some(other) = other_group else {
                // It could not be made; `other_group_reader` said why.
                return Ok(fresh.iter().map(|p| (*p, None)).collect());
            };
            serve_events(other);
            let mut q = TopicPartitionList::new();
            for p in fresh {
                q.add_partition(topic, *p);
            }
            other.committed_offsets(q, timeout)
        }
        StartFrom::Earliest | StartFrom::Latest => {
            return Ok(fresh.iter().map(|p| (*p, None)).collect())
        }
    };
    let list = found.map_err(|e| e.to_string())?;
    let mut out = Vec::with_capacity(fresh.len());
    for e in list.elements().iter().filter(|e| e.topic() == topic) {
        if let Err(err) = e.error() {
            tracing::debug!(error = %err, partition = e.partition(), "start_from cannot be resolved yet");
            continue;
        }
        let off = e.offset();
        let at = matches!(off, Offset::Offset(_) | Offset::End).then_some(off);
        out.push((e.partition(), at));
    }
    Ok(out)
}

/// What is known of where some partitions start.
pub(super) struct Starts {
    /// Partitions with a committed offset: they continue from it.
    pub(super) committed: Vec<(Partition, i64)>,
    /// Partitions the group never committed, with where `start_from` puts them (`None`:
    /// `auto.offset.reset`).
    pub(super) fresh: Vec<(Partition, Option<Offset>)>,
    /// Partitions a read did not answer for: they wait (paused) and are read again.
    pub(super) pending: Vec<Partition>,
}

/// Reads where `partitions` start under `start_from`: the group's committed offsets, then
/// `start_from`'s lookup for those never committed.
pub(super) fn read(
    group: &Group<'_>,
    start_from: &StartFrom,
    other_group: Option<&GroupReader>,
    partitions: &[Partition],
    timeout: Duration,
) -> Starts {
    let c = read_committed(group, partitions, timeout);
    let mut starts = Starts {
        committed: c.at,
        fresh: Vec::new(),
        pending: c.failed,
    };
    if !c.fresh.is_empty() {
        match resolve(group, start_from, other_group, &c.fresh, timeout) {
            Ok(found) => {
                let answered = |p: &Partition| found.iter().any(|(q, _)| q == p);
                starts
                    .pending
                    .extend(c.fresh.iter().copied().filter(|p| !answered(p)));
                starts.fresh = found;
            }
            Err(e) => {
                tracing::debug!(error = %e, "start_from cannot be resolved");
                starts.pending.extend(c.fresh);
            }
        }
    }
    starts
}

/// The partitions whose start is not settled: where `start_from` placed those the group never
/// committed (committed once they start, so that a restart, or the other group's deletion,
/// cannot move an idle partition's start), and those whose start could not be read (they wait,
/// paused, and are read again).
#[derive(Debug, Default)]
pub(super) struct Pending {
    positions: HashMap<Partition, i64>,
    unread: BTreeSet<Partition>,
}

impl Pending {
    /// What was read for partitions being assigned; returns the positions to set in the
    /// assignment.
    pub(super) fn read(&mut self, read: Starts) -> Vec<(Partition, Offset)> {
        let mut set = Vec::new();
        for (p, off) in read.fresh.into_iter().filter_map(|(p, at)| Some((p, at?))) {
            tracing::info!(partition = p, offset = ?off, "start position from start_from");
            set.push((p, off));
            if let Offset::Offset(o) = off {
                self.positions.insert(p, o);
            }
        }
        if !read.pending.is_empty() {
            tracing::warn!(partitions = ?read.pending, "where these partitions start cannot be read; they wait, paused, and are read again every second");
            self.unread.extend(read.pending);
        }
        set
    }

    /// Whether `p`'s start could not be read yet.
    pub(super) fn is_unread(&self, p: Partition) -> bool {
        self.unread.contains(&p)
    }

    pub(super) fn any_unread(&self) -> bool {
        !self.unread.is_empty()
    }

    /// Where `start_from` placed `p`, once: the partition starts.
    pub(super) fn take_position(&mut self, p: Partition) -> Option<i64> {
        self.positions.remove(&p)
    }

    /// Reads again where the unread partitions start (a short `timeout`: the poll loop waits)
    /// and positions those it can. Returns those, each with its position if `start_from`
    /// placed it (the group never committed it).
    pub(super) fn retry(
        &mut self,
        group: &Group<'_>,
        start_from: &StartFrom,
        other_group: Option<&GroupReader>,
        timeout: Duration,
    ) -> Vec<(Partition, Option<i64>)> {
        let unread: Vec<Partition> = self.unread.iter().copied().collect();
        let read = read(group, start_from, other_group, &unread, timeout);
        let committed = (read.committed.iter()).map(|&(p, o)| (p, Offset::Offset(o), false));
        let fresh = (read.fresh.iter()).map(|&(p, at)| (p, at.unwrap_or(Offset::Beginning), true));
        let mut started = Vec::new();
        for (p, off, fresh) in committed.chain(fresh) {
            if let Err(e) = group.seek(p, off, timeout) {
                tracing::debug!(error = %e, partition = p, "cannot position a pending partition yet");
                continue;
            }
            self.unread.remove(&p);
            tracing::info!(partition = p, offset = ?off, "start position read; the partition starts");
            let placed = match (off, fresh) {
                (Offset::Offset(o), true) => Some(o),
                _ => None,
            };
            started.push((p, placed));
        }
        started
    }

    /// Forgets revoked partitions.
    pub(super) fn forget(&mut self, partitions: &[Partition]) {
        self.positions.retain(|p, _| !partitions.contains(p));
        self.unread.retain(|p| !partitions.contains(p));
    }
}

/// Serves what a client that is never subscribed has queued, without waiting: its events are
/// errors (rdkafka returns them from `poll` rather than logging them), logged here at debug
/// level since the consumer beside it reports the same brokers' troubles.
pub(super) fn serve_events(client: &GroupReader) {
    while let Some(event) = client.poll(Duration::ZERO) {
        if let Err(e) = event {
            tracing::debug!(error = %e, "start_from's group reader");
        }
    }
}

/// The client the rebalance listener reads `start_from: group:<name>` through (`None` for
/// any other start, or when it cannot be made: then new partitions start per
/// `auto.offset.reset`, said once here).
pub(crate) fn other_group_reader(
    start_from: Option<&StartFrom>,
    connection: &ClientConfig,
    tokens: Option<&std::sync::Arc<crate::auth::kafka::Tokens>>,
) -> Option<GroupReader> {
    let Some(StartFrom::Group(g)) = start_from else {
        return None;
    };
    let mut cfg = connection.clone();
    cfg.set("group.id", g).set("enable.auto.commit", "false");
    let oauth = tokens.is_some();
    match cfg.create_with_context(HelperContext("start_from group reader", tokens.cloned())) {
        Ok(c) => {
            if oauth {
                // The first token is asked for at creation; a poll serves that request before
                // the first read of the group's offsets (which does not poll) needs it.
                serve_events(&c);
            }
            Some(c)
        }
        Err(e) => {
            tracing::warn!(error = %e, group = %g, "cannot read start_from's group; new partitions start per auto.offset.reset");
            None
        }
    }
}
