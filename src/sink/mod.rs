//! The sink seam: batches in, acknowledgements (or classified errors) out, asynchronously.
//!
//! Input: shared [`Batch`]es (`Arc`, so several sinks can take the same batch without copying).
//! [`Sink::submit`] resolves as soon as the sink has *taken* the batch (within its own bounds:
//! a sink may make it wait for room) and hands back an [`Acknowledgement`], a `'static` future
//! the runtime awaits on its own while it submits the next batches. The acknowledgement resolves
//! to:
//! - [`Progress::Written`]: the batch's rows are durable in that sink, except the rows the
//!   report lists as rejected (which the runtime dead-letters);
//! - [`Progress::Staged`]: the sink no longer holds the batch's bytes (they leave the in-flight
//!   budget) but its rows are not durable yet; the acknowledgement continues with the future it
//!   carries (a sink that uploads now and publishes at an interval);
//! - an error: nothing of the batch may be considered written in that sink; the runtime submits
//!   the batch to it again, whole.
//!
//! The runtime acknowledges a batch's offsets once **every** sink has written it, in any order
//! (and after the rejected rows' dead-letter writes): `pipeline::Ledger` decides. An error says
//! whether retrying the same batch can succeed ([`SinkError::is_retryable`]): retryable errors
//! are retried with capped, jittered exponential backoff, the others every 30 s with the
//! publisher unready (`pipeline/sinks.rs`). After an error, a sink is given nothing new until
//! the failed batch was submitted again, so a sink sees its batches in order except when an
//! acknowledgement fails after later batches were submitted.
//! [`Sink::write`] (submit, then wait for the acknowledgement) and [`retry::write_with_retry`]
//! serve callers that want one batch at a time. When the sink task ends (a clean stop, or
//! not) it calls [`Sink::close`] on every sink: a sink releases what it holds outside the
//! process there (the MAXCOMPUTE sink drops its staging table once no move reads from it).
//!
//! Sinks, one folder each holding everything the sink needs (its protocol client, table or
//! schema management, request building and the adapter to this seam):
//! - [`parquet::ParquetSink`]: the embedded default, local Parquet files under `dt=YYYY-MM-DD/`.
//! - [`bigquery::BigQueryTableSink`]: BigQuery through the Storage Write API.
//! - [`arize::ArizeSink`]: Arize's pandas-logger endpoint (what Merlin sends through arize 7.10.2).
//! - [`maxcompute::MaxComputeSink`]: Merlin's MaxCompute table, through the Tunnel and a staging
//!   table moved by interval.

pub mod arize;
pub mod bigquery;
pub mod maxcompute;
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

/// Makes rustls use ring for every client in the process (reqwest is built without a provider
/// of its own, so no second TLS provider is linked). Idempotent.
pub fn install_crypto_provider() {
    // Err means a provider is already installed: fine either way.
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// Why a sink could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The configuration cannot work (changed column type, missing dataset or table, bad
    /// endpoint or credentials): exit 2.
    #[error("{0}")]
    Config(String),
    /// The service is unreachable or refused for now: retry.
    #[error("{0}")]
    Unavailable(String),
}

/// Where a submitted batch stands in a sink; see the module docs.
pub enum Progress {
    /// Durable, except the rows the report lists as rejected.
    Written(WriteReport),
    /// The sink no longer holds the batch's bytes; its rows are not durable yet. The
    /// acknowledgement continues with this future. Once every sink has let go of a batch the
    /// runtime drops it, so what follows a staged step must not need the batch again: it
    /// retries on its own from what it staged, refuses no rows (refuse them before staging),
    /// and an error from it (once no sink holds the batch) stops the sink task with the offsets
    /// uncommitted.
    Staged(Acknowledgement),
}

impl fmt::Debug for Progress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Progress::Written(r) => f.debug_tuple("Written").field(r).finish(),
            Progress::Staged(_) => f.write_str("Staged(..)"),
        }
    }
}

/// A submitted batch's acknowledgement: owns what it needs (`'static`), so the runtime can await
/// it while submitting later batches.
pub type Acknowledgement = Pin<Box<dyn Future<Output = Result<Progress, SinkError>> + Send>>;

/// The future a [`Sink::submit`] returns: resolves once the sink has taken the batch.
pub type SubmitFuture<'a> =
    Pin<Box<dyn Future<Output = Result<Acknowledgement, SinkError>> + Send + 'a>>;

/// The future a [`Sink::close`] returns.
pub type CloseFuture<'a> = Pin<Box<dyn Future<Output = ()> + Send + 'a>>;

/// An acknowledgement that is already there (a sink that writes while it takes the batch).
pub fn written(report: WriteReport) -> Acknowledgement {
    Box::pin(std::future::ready(Ok(Progress::Written(report))))
}

/// See [`Sink::revoke_hook`]: called from the rebalance callback (not async, must not block).
pub type RevokeHook = Arc<dyn Fn(std::time::Instant) + Send + Sync>;

/// A destination for batches. Object-safe, so the runtime can fan out over `Vec<Box<dyn Sink>>`.
pub trait Sink: Send {
    /// A short, stable name (metric label `sink`, log field).
    fn name(&self) -> &'static str;

    /// Takes one batch. Resolves once the sink has taken it (it may wait for room within its
    /// own bounds), to the batch's [`Acknowledgement`]: written (durable, except the rows the
    /// report lists as rejected, which the runtime dead-letters; with the exactly-once
    /// checkpoints if the sink has them) or staged first. On error (of the submission or of the
    /// acknowledgement) nothing of the batch may be considered written: the batch is submitted
    /// again whole (never given up), so a sink that can fail half-way must make a retry safe,
    /// e.g. by writing atomically or remembering what it already wrote.
    fn submit(&mut self, batch: Arc<Batch>) -> SubmitFuture<'_>;

    /// Submits one batch and waits for it to be written (through any staged step).
    fn write(&mut self, batch: Arc<Batch>) -> WriteFuture<'_> {
        Box::pin(async move {
            let mut ack = self.submit(batch).await?;
            loop {
                match ack.await? {
                    Progress::Written(report) => return Ok(report),
                    Progress::Staged(next) => ack = next,
                }
            }
        })
    }

    /// A live view of the sink's connection health (for readiness), if it has one. A sink that
    /// retries internally stays inside `write` during an outage; this is how readiness learns.
    fn health(&self) -> Option<tokio::sync::watch::Receiver<bool>> {
        None
    }

    /// A live view of what keeps the sink's work from finishing although it reaches its
    /// destination (a step of its own running too long): a sentence naming the sink, what is
    /// stuck and what to check, `None` while nothing is. Readiness lists it. Default: `None`.
    fn stuck(&self) -> Option<tokio::sync::watch::Receiver<Option<String>>> {
        None
    }

    /// For a sink that stages rows (acknowledged only after a later step of its own): what the
    /// pipeline calls when partitions are revoked, with the deadline of the revoke's wait for
    /// their acknowledgements. The sink finishes what it staged by then if it can, so the revoke
    /// commits it rather than leave it staged while the partition's next owner reads it again.
    /// The pipeline also calls it with a deadline already reached when the bookkeeping of staged
    /// rows fills half the in-flight budget (again every second while it does): the sink moves
    /// what it staged as soon as it can, so that intake held for that bookkeeping resumes.
    /// Default: `None` (nothing staged).
    fn revoke_hook(&self) -> Option<RevokeHook> {
        None
    }

    /// The sink task is ending: release what the sink holds outside the process. Called once,
    /// after the last acknowledgement the task awaited (acknowledgements still pending are
    /// abandoned: their batches' offsets stay uncommitted). Default: nothing.
    fn close(&mut self) -> CloseFuture<'_> {
        Box::pin(std::future::ready(()))
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
            fn submit(&mut self, _batch: Arc<Batch>) -> SubmitFuture<'_> {
                Box::pin(async { Ok(written(WriteReport::default())) })
            }
        }
        let sinks: Vec<Box<dyn Sink>> = vec![Box::new(Nop)];
        assert_eq!(sinks[0].name(), "nop");
    }
}
