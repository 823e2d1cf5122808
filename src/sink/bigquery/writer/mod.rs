//! The writer: one persistent bidirectional AppendRows stream per table (the `_default`
//! stream, at-least-once) or per partition (a COMMITTED stream with explicit offsets,
//! exactly-once: see [`crate::sink::bigquery::checkpoint`]), fed from a channel, many requests in flight,
//! bounded by bytes.
//!
//! # Guarantee
//! A caller's [`Pending`] resolves only when **every** row of its batch is either accepted by
//! BigQuery (a response with an append result for the request carrying it) or reported in
//! [`AppendOutcome::rejected`] because BigQuery refused it or would refuse it (`row_errors`, a
//! data error isolated to that single row, a row larger than a request may be, a timestamp
//! outside the partition range). Nothing else resolves it: transient errors are retried forever
//! with jittered, capped backoff; permission and missing-table errors mark the writer unhealthy
//! and are retried slowly; if the writer is dropped or closed first, the `Pending` fails with
//! [`WriterError::Closed`] and the rows count as not written. On the default stream a request
//! whose response was lost with its connection is re-sent, so a row can land twice
//! (at-least-once), never zero times. On a committed stream the re-send is identical (same
//! offset), so it cannot land twice; what cannot be resolved safely there (a gap, a fenced
//! stream, rows BigQuery refuses) stops the writer with [`WriterError::Stopped`].
//!
//! # Mechanics
//! Responses arrive in request order, so the driver keeps the requests sent on the current
//! connection in a FIFO and matches each response to its front. The first request of a
//! connection carries the writer schema and is sent alone; once it is accepted the rest are
//! pipelined. On a retryable in-band error the driver stops sending (half-close), collects the
//! answers to what was already sent, backs off and reconnects; when a connection ends or fails,
//! every un-answered request is re-sent in order on the next one. A request over the size cap is
//! split in two; on the default stream a request refused for its data without `row_errors` is
//! bisected until the refused rows are alone.
//!
//! # Layout
//! - `contract`: its options, outcomes, errors and counters (every other file uses them).
//! - `api`: the handle ([`AppendWriter`]) and a batch's [`Pending`] outcome.
//! - `request`: a batch turned into requests under `max_request_bytes`; slicing a request.
//! - `driver`: the task that owns the AppendRows connection: sends in order, matches answers,
//!   re-sends, reconnects, reports health, and resolves each batch when its last request is.
//! - `policy`: what differs between the kinds of stream, chosen once at start
//!   ([`AppendWriter::start`] / [`AppendWriter::start_evolving`]: `default_stream`;
//!   [`AppendWriter::start_committed`]: `committed_stream`).

mod api;
mod committed_stream;
mod contract;
mod default_stream;
mod driver;
mod policy;
mod request;

pub use api::{AppendWriter, Encoded, Pending, Room};
pub use contract::{
    AppendOutcome, RejectReason, RejectedRow, WriterError, WriterOptions, WriterStats,
};
