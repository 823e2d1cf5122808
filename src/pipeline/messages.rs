//! What the pipeline thread and the threads beside it send each other: batches out to the sink
//! task ([`SinkJob`]), and reports back to the pipeline state ([`Event`]): the sinks'
//! acknowledgements, the dead-letter target's outcomes, the exactly-once sink's new streams.

use super::ledger::{BatchId, SinkIndex};
use crate::batch::Batch;
use crate::deadletter::{DeadLetter, Outcome};
use crate::sink::bigquery::exactly_once::Registration;
use crate::sink::StreamCheckpoint;
use std::sync::Arc;
use std::time::Instant;

/// A batch on its way to the sinks.
#[derive(Clone)]
pub(crate) struct SinkJob {
    pub(crate) id: BatchId,
    pub(crate) batch: Arc<Batch>,
    /// When the batch's first message arrived (flush latency).
    pub(crate) opened: Instant,
}

/// What other threads report back to the pipeline.
pub(crate) enum Event {
    /// Sink `sink` acknowledged the batch (sinks acknowledge independently, in any order);
    /// `dead` are rows it refused (dead-lettered once every sink has acknowledged the batch);
    /// `checkpoints` are the exactly-once sink's stream positions after it.
    Acked {
        id: BatchId,
        sink: SinkIndex,
        dead: Vec<DeadLetter>,
        checkpoints: Vec<StreamCheckpoint>,
    },
    /// Sink `sink` staged the batch: it no longer holds its bytes, but has not made its rows
    /// durable yet (its acknowledgement follows). `kept`: the bytes the sink task keeps for the
    /// batch until every sink has written it (its record, the rows' timestamp runs, the staged
    /// acknowledgements it awaits), as allocated.
    Staged {
        id: BatchId,
        sink: SinkIndex,
        kept: usize,
    },
    /// What sink `sink` staged failed to become durable: it is given the batch again, and holds
    /// its bytes again.
    Unstaged { id: BatchId, sink: SinkIndex },
    /// A dead-letter write finished.
    DeadLetter(Outcome),
    /// Exactly-once: the sink opened a new stream and waits for it to be recorded in the
    /// group's commit before writing to it.
    Register(Registration),
    /// The committer thread's answer to commit `id` (`state/commits.rs`).
    Committed {
        id: u64,
        result: rdkafka::error::KafkaResult<()>,
    },
}
