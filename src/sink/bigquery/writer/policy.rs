//! What differs between the two kinds of stream, decided once when the writer starts: the
//! driver asks its [`StreamPolicy`] where a batch goes, and what an answer or a failed
//! connection means, and carries out the [`Verdict`].
//!
//! - [`super::default_stream::DefaultStream`]: the table's `_default` stream, at-least-once, no
//!   offsets; rows BigQuery refuses are reported rejected; may add columns to the table.
//! - [`super::committed_stream::CommittedStream`]: a COMMITTED stream with explicit offsets,
//!   exactly-once; rows are never dropped, and what cannot be resolved safely stops the writer.

use super::contract::RejectReason;
use super::request::Req;
use crate::sink::bigquery::error::ErrorInfo;
use crate::sink::bigquery::proto::AppendRowsResponse;
use crate::sink::bigquery::table::{EnsureReport, TableError, TableManager, TableSpec};
use std::ops::Range;
use tokio::task::JoinHandle;

/// What the writer needs to add columns itself.
pub(super) struct Evolution {
    pub(super) tables: TableManager,
    pub(super) spec: TableSpec,
}

pub(super) type Evolving = JoinHandle<Result<EnsureReport, TableError>>;

/// What the driver does with the request an answer was for.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Verdict {
    /// It landed.
    Accept,
    /// Report these rows of it (index in the request, reason, BigQuery's message) and send the
    /// others again.
    Reject(Vec<(usize, RejectReason, String)>),
    /// Send it again, in order, on this connection; not a failure.
    Resend,
    /// Send it again as two halves; `reconnect`: on a new connection (later requests of this
    /// one would meet a gap).
    Split {
        /// Stop sending on this connection and reconnect.
        reconnect: bool,
    },
    /// A failed attempt: send it again on a new connection after backoff.
    Retry(ErrorInfo),
    /// Stop the writer: every unresolved batch fails with this reason.
    Stop(String),
}

/// What the driver does when the connection itself fails (its requests are re-sent).
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Lost {
    /// Reconnect after backoff.
    Retry,
    /// A request was over the transport's cap: split the largest one sent, then reconnect.
    SplitLargest,
    /// Stop the writer with this reason.
    Stop(String),
}

/// The behaviour of one kind of write stream.
pub(super) trait StreamPolicy: Send + 'static {
    /// True when a row alone over the size cap fails its batch (its offset cannot be skipped)
    /// rather than being reported rejected.
    fn oversized_row_fails_batch(&self) -> bool;

    /// Places an admitted batch of `written` rows: sets each request's offset (if any) and send
    /// order; returns the stream offsets the batch occupies, if the stream has offsets.
    fn admit(&mut self, written: usize, reqs: &mut [Req]) -> Option<Range<i64>>;

    /// Every request of a batch occupying `offsets` resolved.
    fn resolved(&self, _offsets: &Range<i64>) {}

    /// A new connection is being opened.
    fn connected(&mut self) {}

    /// The connection failed with `info`.
    fn connection_failed(&self, info: &ErrorInfo) -> Lost;

    /// BigQuery's answer `resp` to `req`.
    fn answer(&mut self, req: &Req, resp: &AppendRowsResponse) -> Verdict;

    /// How to add missing columns to the table, when this stream may.
    fn evolution(&self) -> Option<&Evolution> {
        None
    }
}

#[cfg(test)]
pub(super) mod testing {
    //! Requests and answers for the policies' unit tests.

    use super::*;
    use crate::sink::bigquery::proto::append_rows_response::{self, AppendResult};
    use crate::sink::bigquery::proto::{rpc, storage_error};
    use crate::sink::bigquery::proto::{RowError, StorageError};
    use crate::sink::bigquery::writer::request::RowMap;
    use arrow_array::{Int64Array, RecordBatch};
    use prost::Message;
    use std::sync::Arc;

    /// A request of `n` rows, sent `attempts` times, at `offset`.
    pub(crate) fn req(n: usize, attempts: u32, offset: Option<i64>) -> Req {
        let data = RecordBatch::try_from_iter([(
            "x",
            Arc::new(Int64Array::from_iter_values(0..n as i64)) as _,
        )])
        .unwrap();
        Req {
            batch: 0,
            pos: 0,
            rows: RowMap::Range(0),
            data,
            payload: bytes::Bytes::from_static(b"rows"),
            sent_at: None,
            with_schema: false,
            offset,
            order: offset.unwrap_or(0),
            attempts,
        }
    }

    /// An accepted answer.
    pub(crate) fn ok() -> AppendRowsResponse {
        AppendRowsResponse {
            response: Some(append_rows_response::Response::AppendResult(
                AppendResult::default(),
            )),
            ..Default::default()
        }
    }

    /// An in-band refusal with `code`, `message` and an optional StorageError detail.
    pub(crate) fn refused(
        code: tonic::Code,
        message: &str,
        storage: Option<storage_error::StorageErrorCode>,
    ) -> AppendRowsResponse {
        let details = storage
            .map(|c| prost_types::Any {
                type_url: "type.googleapis.com/google.cloud.bigquery.storage.v1.StorageError"
                    .into(),
                value: StorageError {
                    code: c as i32,
                    ..Default::default()
                }
                .encode_to_vec(),
            })
            .into_iter()
            .collect();
        AppendRowsResponse {
            response: Some(append_rows_response::Response::Error(rpc::Status {
                code: code as i32,
                message: message.into(),
                details,
            })),
            ..Default::default()
        }
    }

    /// An answer listing `rows` (index, message) in `row_errors`.
    pub(crate) fn row_errors(rows: &[(i64, &str)]) -> AppendRowsResponse {
        AppendRowsResponse {
            row_errors: rows
                .iter()
                .map(|&(index, message)| RowError {
                    index,
                    message: message.into(),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }
    }

    /// An error as the connection reports it.
    pub(crate) fn info(code: tonic::Code, message: &str) -> ErrorInfo {
        ErrorInfo {
            code,
            message: message.into(),
            storage_code: None,
        }
    }
}
