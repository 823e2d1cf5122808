//! Commit bookkeeping: which Kafka offsets may be committed.
//!
//! Input: the offsets the source consumed (in consumption order, per partition) and the
//! acknowledgements of the sinks and the dead-letter writer (in any order). Output: per
//! partition, the offset to commit (Kafka semantics: the next offset to read). Guarantee: an
//! offset is only ever committable when it and every registered offset before it has been
//! acknowledged, so a commit never skips a row that is not durable somewhere.
//!
//! [`OffsetTracker`] is pure (no I/O, no clocks). The pipeline's ledger (`pipeline/ledger.rs`)
//! wraps it with everything else a commit depends on (batches in flight, dead letters, epochs,
//! exactly-once checkpoints); the poll loop carries the ledger's answers to the broker.

mod tracker;

pub use tracker::{OffsetRange, OffsetTracker, Partition, RegisterError, Revoked, ENTRY_BYTES};
