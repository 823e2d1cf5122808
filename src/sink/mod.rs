//! The sink seam: batches in, acknowledgement (or a classified error) out.
//!
//! Input: shared [`Batch`]es (`Arc`, so several sinks can take the same batch without copying).
//! Output: `Ok(report)` from [`Sink::write`] means the batch's rows are durable in that sink,
//! except the rows the report lists as rejected (which the runtime dead-letters); only then may
//! the runtime acknowledge the batch's offsets (after *every* sink has acknowledged, and after
//! the rejected rows' dead-letter writes).
//! An error says whether retrying the same batch can succeed ([`SinkError::is_retryable`]);
//! [`retry::write_with_retry`] retries retryable errors with capped, jittered exponential
//! backoff until they succeed or the runtime cancels.
//!
//! Sinks:
//! - [`parquet::ParquetSink`]: the embedded default, local Parquet files under `dt=YYYY-MM-DD/`.
//! - [`bigquery::BigQueryTableSink`]: BigQuery through the Storage Write API.
//! - [`arize::ArizeSink`]: Arize's pandas-logger endpoint (what Merlin sends through arize 7.10.2).

pub mod arize;
pub mod bigquery;
pub mod exactly_once;
pub mod parquet;
pub mod retry;

use crate::batch::Batch;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

/// A row the sink refused for good (it is dead-lettered; the rest of the batch is written).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RejectedRow {
    /// Row index in the batch.
    pub row: usize,
    /// Bounded reason code.
    pub code: &'static str,
    /// The sink's message.
    pub message: String,
}

/// What a successful write reports.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WriteReport {
    /// Rows the sink refused; every other row is durable.
    pub rejected: Vec<RejectedRow>,
    /// Exactly-once sinks: per partition of the batch, the stream position after it.
    pub commit_metadata: Vec<StreamCheckpoint>,
}

/// Exactly-once: where a partition's stream stands after a batch: the commit metadata that goes
/// with committing right after `last_offset`. `first_offset` is the batch's first offset of the
/// partition: a commit must not fall between the two (no checkpoint exists there).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamCheckpoint {
    /// The partition.
    pub partition: crate::commit::Partition,
    /// The batch's first offset of the partition.
    pub first_offset: i64,
    /// The batch's last offset of the partition.
    pub last_offset: i64,
    /// The checkpoint, as committed with the offset.
    pub metadata: String,
}

/// The future a [`Sink::write`] returns.
pub type WriteFuture<'a> =
    Pin<Box<dyn Future<Output = Result<WriteReport, SinkError>> + Send + 'a>>;

/// A destination for batches. Object-safe, so the runtime can fan out over `Vec<Box<dyn Sink>>`.
pub trait Sink: Send {
    /// A short, stable name (metric label `sink`, log field).
    fn name(&self) -> &'static str;

    /// Writes one batch. Resolves to `Ok(report)` only once the rows are durable, except those
    /// the report lists as rejected (dead-lettered by the runtime), with the exactly-once
    /// checkpoints if the sink has them. On error nothing of the batch may be considered written:
    /// the batch is tried again whole (never given up), so a sink that can fail half-way must
    /// make a retry safe, e.g. by writing atomically or remembering what it already wrote.
    fn write(&mut self, batch: Arc<Batch>) -> WriteFuture<'_>;

    /// A live view of the sink's connection health (for readiness), if it has one. A sink that
    /// retries internally stays inside `write` during an outage; this is how readiness learns.
    fn health(&self) -> Option<tokio::sync::watch::Receiver<bool>> {
        None
    }
}

/// Bounded classification of a sink failure (metric label `error_code`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SinkErrorKind {
    /// Local or remote I/O failed (full disk, permissions, network); usually transient.
    Io,
    /// The batch could not be encoded for the destination.
    Encode,
    /// The destination refused the rows themselves.
    Rejected,
    /// The destination is temporarily unavailable (throttling, overload, not ready).
    Unavailable,
    /// A bug or a crashed worker inside the publisher.
    Internal,
}

impl SinkErrorKind {
    /// Stable snake_case code.
    pub fn code(self) -> &'static str {
        match self {
            SinkErrorKind::Io => "io",
            SinkErrorKind::Encode => "encode",
            SinkErrorKind::Rejected => "rejected",
            SinkErrorKind::Unavailable => "unavailable",
            SinkErrorKind::Internal => "internal",
        }
    }

    /// Every kind, for describing metrics up front.
    pub const ALL: [SinkErrorKind; 5] = [
        SinkErrorKind::Io,
        SinkErrorKind::Encode,
        SinkErrorKind::Rejected,
        SinkErrorKind::Unavailable,
        SinkErrorKind::Internal,
    ];
}

/// A failed write: what kind, whether to retry, a message for the log, and the cause.
#[derive(Debug)]
pub struct SinkError {
    /// Classification.
    pub kind: SinkErrorKind,
    retryable: bool,
    message: String,
    retry_after: Option<std::time::Duration>,
    source: Option<Box<dyn std::error::Error + Send + Sync + 'static>>,
}

impl SinkError {
    /// An error with an explicit retry decision.
    pub fn new(kind: SinkErrorKind, retryable: bool, message: impl Into<String>) -> Self {
        SinkError {
            kind,
            retryable,
            message: message.into(),
            retry_after: None,
            source: None,
        }
    }

    /// The destination asked to wait this long before trying again (HTTP 429 Retry-After):
    /// [`retry::write_with_retry`] waits exactly this instead of its own backoff.
    pub fn with_retry_after(mut self, wait: std::time::Duration) -> Self {
        self.retry_after = Some(wait);
        self
    }

    /// How long the destination asked to wait, if it said.
    pub fn retry_after(&self) -> Option<std::time::Duration> {
        self.retry_after
    }

    /// An I/O failure: always retryable (a full disk or a read-only mount can be fixed while
    /// the publisher waits, and nothing is committed meanwhile).
    pub fn io(context: impl Into<String>, cause: std::io::Error) -> Self {
        SinkError::new(SinkErrorKind::Io, true, context).with_source(cause)
    }

    /// Attaches the underlying cause (kept in the `source()` chain, not in the message).
    pub fn with_source(mut self, cause: impl std::error::Error + Send + Sync + 'static) -> Self {
        self.source = Some(Box::new(cause));
        self
    }

    /// Whether writing the same batch again can succeed.
    pub fn is_retryable(&self) -> bool {
        self.retryable
    }

    /// The message, without the cause.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for SinkError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let retry = if self.retryable {
            "retryable"
        } else {
            "needs its cause fixed"
        };
        write!(f, "{} ({}, {retry})", self.message, self.kind.code())?;
        if let Some(cause) = &self.source {
            write!(f, ": {cause}")?;
        }
        Ok(())
    }
}

impl std::error::Error for SinkError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error as _;
    use std::io;

    #[test]
    fn io_errors_are_retryable_full_disk_included() {
        for kind in [
            io::ErrorKind::StorageFull,
            io::ErrorKind::PermissionDenied,
            io::ErrorKind::Other,
        ] {
            let e = SinkError::io(
                "writing dt=2024-01-01/part-1.parquet",
                io::Error::from(kind),
            );
            assert!(e.is_retryable(), "{kind:?}");
            assert_eq!(e.kind, SinkErrorKind::Io);
            assert!(e.source().is_some());
        }
    }

    #[test]
    fn display_names_kind_retry_and_cause() {
        let e = SinkError::io("writing x", io::Error::from(io::ErrorKind::StorageFull));
        let s = e.to_string();
        assert!(s.starts_with("writing x (io, retryable): "), "{s}");
        let p = SinkError::new(SinkErrorKind::Rejected, false, "bad rows");
        assert!(!p.is_retryable());
        assert_eq!(p.to_string(), "bad rows (rejected, needs its cause fixed)");
        assert_eq!(p.message(), "bad rows");
    }

    #[test]
    fn the_trait_is_object_safe() {
        struct Nop;
        impl Sink for Nop {
            fn name(&self) -> &'static str {
                "nop"
            }
            fn write(&mut self, _batch: Arc<Batch>) -> WriteFuture<'_> {
                Box::pin(async { Ok(WriteReport::default()) })
            }
        }
        let sinks: Vec<Box<dyn Sink>> = vec![Box::new(Nop)];
        assert_eq!(sinks[0].name(), "nop");
    }
}
