//! What a writer is given and what it answers: its options, the outcome of a batch, the rows
//! BigQuery will not take, its errors and its counters (with the mark that counts an open
//! connection). Every other file of the writer uses these; this one uses none of them.

use crate::sink::bigquery::metrics as m;
use crate::sink::bigquery::validate::PartitionWindow;
use arrow_schema::ArrowError;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Writer settings.
#[derive(Debug, Clone)]
pub struct WriterOptions {
    /// Upper bound of one serialized AppendRows request.
    pub max_request_bytes: usize,
    /// Upper bound of the encoded bytes admitted and not yet resolved; `append` waits above it.
    pub max_inflight_bytes: usize,
    /// First reconnect delay after a transient error.
    pub backoff_initial: Duration,
    /// Cap of the reconnect delay.
    pub backoff_max: Duration,
    /// Delay between attempts while BigQuery refuses for permissions or a missing table.
    pub fatal_retry_interval: Duration,
    /// Consecutive failed attempts after which the writer reports itself unhealthy.
    pub unhealthy_after: u32,
    /// How long to wait for the answers to requests already sent after a half-close.
    pub drain_timeout: Duration,
    /// How long the oldest request may wait for its answer before the connection is given up
    /// (and its requests re-sent on a new one).
    pub response_timeout: Duration,
    /// Rows outside this range of the partitioning column are reported rejected and not sent
    /// (None: no check).
    pub partition_window: Option<PartitionWindow>,
    /// A connection with nothing to send and nothing unanswered for this long is closed (a
    /// half-close); the next batch opens a new one. None: the connection stays open. The
    /// at-least-once sink sets it per connection of its pool (`sink::bigquery::pool`).
    pub idle_close: Option<Duration>,
}

impl Default for WriterOptions {
    fn default() -> Self {
        WriterOptions {
            max_request_bytes: crate::config::DEFAULT_MAX_REQUEST_BYTES as usize,
            max_inflight_bytes: crate::config::DEFAULT_MAX_INFLIGHT_BYTES as usize,
            backoff_initial: Duration::from_millis(100),
            backoff_max: Duration::from_secs(10),
            fatal_retry_interval: Duration::from_secs(30),
            unhealthy_after: 3,
            drain_timeout: Duration::from_secs(30),
            response_timeout: Duration::from_secs(300),
            partition_window: None,
            idle_close: None,
        }
    }
}

/// Why rows were refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RejectReason {
    /// BigQuery listed the row in `row_errors`.
    RowError,
    /// BigQuery refused a request holding only this row (INVALID_ARGUMENT).
    Invalid,
    /// The row alone exceeds `max_request_bytes`.
    TooLarge,
    /// The partitioning timestamp is older than the partition expiration or too far ahead.
    OutsidePartitionRange,
}

impl RejectReason {
    /// Bounded label value.
    pub fn as_str(self) -> &'static str {
        match self {
            RejectReason::RowError => "row_error",
            RejectReason::Invalid => "invalid",
            RejectReason::TooLarge => "too_large",
            RejectReason::OutsidePartitionRange => "outside_partition_range",
        }
    }
}

/// A row BigQuery will not take; dead-letter it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RejectedRow {
    /// Index of the row in the batch given to [`AppendWriter::append`](super::AppendWriter::append).
    pub index: usize,
    /// Why.
    pub reason: RejectReason,
    /// BigQuery's message.
    pub message: String,
}

/// The resolution of one appended batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppendOutcome {
    /// Rows in the batch.
    pub rows: usize,
    /// Rows BigQuery accepted.
    pub appended: usize,
    /// Rows BigQuery refused, by index, sorted.
    pub rejected: Vec<RejectedRow>,
    /// Committed streams: the stream offsets `[start, end)` the batch's rows occupy; `end` is
    /// the `next_row` to persist with the Kafka offset after this batch.
    pub stream_offsets: Option<std::ops::Range<i64>>,
}

/// Errors of the writer's API.
#[derive(Debug, thiserror::Error)]
pub enum WriterError {
    /// The batch's schema is not the writer's (a schema change needs a new writer).
    #[error("record batch schema differs from the writer's schema")]
    SchemaMismatch,
    /// Arrow IPC encoding failed.
    #[error("encoding the record batch: {0}")]
    Encode(#[from] ArrowError),
    /// The writer stopped before the batch was resolved: its rows are not written.
    #[error("the BigQuery writer stopped before the batch was acknowledged")]
    Closed,
    /// Committed streams: the partition's writer stopped (a gap, a fenced or finalized stream,
    /// rows BigQuery refused); the batch is not acknowledged and the partition must restart
    /// from its last committed Kafka offset.
    #[error("exactly-once writer stopped: {0}")]
    Stopped(String),
    /// Committed streams: a row alone exceeds `max_request_bytes` (dead-letter it before).
    #[error("row {0} alone exceeds max_request_bytes")]
    RowTooLarge(usize),
}

/// Counters of one writer, for tests and diagnostics.
#[derive(Debug, Default)]
pub struct WriterStats {
    /// AppendRows connections opened.
    pub connections: AtomicU64,
    /// Requests sent (re-sends included).
    pub requests_sent: AtomicU64,
    /// Requests BigQuery accepted.
    pub requests_accepted: AtomicU64,
    /// Failed attempts (connection failures and retryable refusals).
    pub failures: AtomicU64,
    /// An AppendRows connection is open now (or being opened, or half-closed and not yet ended).
    pub connected: AtomicBool,
    /// Connections closed because they were idle ([`WriterOptions::idle_close`]).
    pub idle_closes: AtomicU64,
}

/// Held by a writer's connection for as long as it lives: counts it in
/// `observation_publisher_bigquery_connections_open` and in [`WriterStats::connected`], so the
/// count stays right however the connection ends (closed, lost, or the writer dropped).
#[derive(Debug)]
pub(super) struct ConnectionMark(Arc<WriterStats>);

impl ConnectionMark {
    pub(super) fn new(stats: &Arc<WriterStats>) -> Self {
        stats.connected.store(true, Ordering::Relaxed);
        metrics::gauge!(m::CONNECTIONS_OPEN).increment(1.0);
        ConnectionMark(Arc::clone(stats))
    }
}

impl Drop for ConnectionMark {
    fn drop(&mut self) {
        self.0.connected.store(false, Ordering::Relaxed);
        metrics::gauge!(m::CONNECTIONS_OPEN).decrement(1.0);
    }
}
