//! Commit bookkeeping: which Kafka offsets may be committed.
//!
//! Input: the offsets the source consumed (in consumption order, per partition) and the
//! acknowledgements of the sinks and the dead-letter writer (in any order). Output: per
//! partition, the offset to commit (Kafka semantics: the next offset to read). Guarantee: an
//! offset is only ever committable when it and every registered offset before it has been
//! acknowledged, so a commit never skips a row that is not durable somewhere.
//!
//! [`OffsetTracker`] is pure (no I/O, no clocks); the committer task that drives it and talks to
//! the consumer lives in the runtime.

mod tracker;

pub use tracker::{OffsetRange, OffsetTracker, Partition, RegisterError, Revoked};
