//! Where newly assigned partitions start under `consumer.start_from` (a time, or another
//! group's committed offsets): only partitions the group has never committed start there; the
//! others continue from their committed offset.
//!
//! Either answer needs a read from the coordinator (the group's committed offsets, then the
//! offsets for a time or the other group's). When a read fails (a coordinator still loading
//! during a broker roll, a timeout) nothing is guessed: the partitions it leaves open are
//! **pending**, paused inside the rebalance callback right after the assignment, read again
//! every second by the poll loop ([`retry`]), then positioned (`seek`) and resumed. Before,
//! they started per `auto.offset.reset` (`earliest` whenever `start_from` is set): the whole
//! retained topic was published again.

use super::state::State;
use crate::commit::Partition;
use crate::config::StartFrom;
use crate::source::SourceContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{Offset, TopicPartitionList};
use std::time::Duration;

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

/// Reads the group's committed offsets of `partitions` of `topic`.
fn read_committed(
    consumer: &BaseConsumer<SourceContext>,
    topic: &str,
    partitions: &[Partition],
    timeout: Duration,
) -> Committed {
    let mut q = TopicPartitionList::new();
    for p in partitions {
        q.add_partition(topic, *p);
    }
    let mut out = Committed::default();
    match consumer.committed_offsets(q, timeout) {
        Ok(list) => {
            for e in list.elements().iter().filter(|e| e.topic() == topic) {
                match (e.error(), e.offset()) {
                    (Err(_), _) => out.failed.push(e.partition()),
                    (Ok(()), Offset::Offset(o)) => out.at.push((e.partition(), o)),
                    (Ok(()), _) => out.fresh.push(e.partition()),
                }
            }
        }
        Err(e) => {
            tracing::warn!(error = %e, partitions = ?partitions, "cannot read the group's committed offsets");
            out.failed.extend_from_slice(partitions);
        }
    }
    out
}

/// Where each of `fresh` starts per `start_from`: its offset, the end, or `None` (what the
/// other group never committed, a time past the end: `auto.offset.reset`, which `start_from`
/// sets to `earliest`). Partitions whose entry of the answer failed are left out (read again
/// later, the others start); `Err` when the whole lookup failed.
fn resolve(
    consumer: &BaseConsumer<SourceContext>,
    start_from: &StartFrom,
    other_group: Option<&BaseConsumer>,
    topic: &str,
    fresh: &[Partition],
    timeout: Duration,
) -> Result<Vec<(Partition, Option<Offset>)>, String> {
    let found = match start_from {
        StartFrom::Timestamp(ms) => {
            let mut q = TopicPartitionList::new();
            for p in fresh {
                let _ = q.add_partition_offset(topic, *p, Offset::Offset(*ms));
            }
            consumer.offsets_for_times(q, timeout)
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
    consumer: &BaseConsumer<SourceContext>,
    start_from: &StartFrom,
    other_group: Option<&BaseConsumer>,
    topic: &str,
    partitions: &[Partition],
    timeout: Duration,
) -> Starts {
    let c = read_committed(consumer, topic, partitions, timeout);
    let mut starts = Starts {
        committed: c.at,
        fresh: Vec::new(),
        pending: c.failed,
    };
    if !c.fresh.is_empty() {
        match resolve(consumer, start_from, other_group, topic, &c.fresh, timeout) {
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

/// Reads again where the pending partitions start (a short `timeout`: the loop waits), and
/// positions and resumes those it can (not resumed while intake is `paused` for the budget,
/// nor while held for an exactly-once checkpoint: the loop's resume takes them then).
pub(super) fn retry(
    st: &mut State,
    consumer: &BaseConsumer<SourceContext>,
    topic: &str,
    start_from: &StartFrom,
    other_group: Option<&BaseConsumer>,
    paused: bool,
    timeout: Duration,
) {
    let pending: Vec<Partition> = st.start_pending.iter().copied().collect();
    if pending.is_empty() {
        return;
    }
    let read = read(consumer, start_from, other_group, topic, &pending, timeout);
    let committed = read
        .committed
        .iter()
        .map(|&(p, o)| (p, Offset::Offset(o), false));
    let fresh = (read.fresh.iter()).map(|&(p, at)| (p, at.unwrap_or(Offset::Beginning), true));
    let mut resume = TopicPartitionList::new();
    for (p, off, fresh) in committed.chain(fresh) {
        if let Err(e) = consumer.seek(topic, p, off, timeout) {
            tracing::debug!(error = %e, partition = p, "cannot position a pending partition yet");
            continue;
        }
        st.start_pending.remove(&p);
        if let (Offset::Offset(o), true) = (off, fresh) {
            st.ledger.positioned(p, o);
        }
        tracing::info!(partition = p, offset = ?off, "start position read; the partition starts");
        if !paused && !st.held.is_held(p) {
            resume.add_partition(topic, p);
        }
    }
    if resume.count() > 0 {
        if let Err(e) = consumer.resume(&resume) {
            tracing::error!(error = %e, "cannot resume partitions after reading their start");
        }
    }
}

/// Serves what a client that is never subscribed has queued, without waiting: its events are
/// errors (rdkafka returns them from `poll` rather than logging them), logged here at debug
/// level since the consumer beside it reports the same brokers' troubles.
pub(super) fn serve_events(client: &BaseConsumer) {
    while let Some(event) = client.poll(Duration::ZERO) {
        if let Err(e) = event {
            tracing::debug!(error = %e, "start_from's group reader");
        }
    }
}
