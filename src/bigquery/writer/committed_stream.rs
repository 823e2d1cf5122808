//! COMMITTED streams (exactly-once, explicit offsets): how answers are resolved. Rows are
//! never dropped; what cannot be resolved safely stops the writer.

use super::driver::Driver;
use super::request::Req;
use crate::bigquery::error::{Action, ErrorInfo};
use crate::bigquery::metrics as m;
use crate::bigquery::proto::{append_rows_response, AppendRowsResponse};
use tracing::{debug, warn};

impl Driver {
    /// Committed streams: the answer to one request.
    ///
    /// Rows are never dropped here: the stream's row count must stay a function of the
    /// messages. An ALREADY_EXISTS counts as success only for a re-send of the identical request
    /// (its first attempt landed and the answer was lost); OUT_OF_RANGE is expected only behind a
    /// request of the same connection that was refused (re-sent in order), otherwise it is a gap
    /// and stops the writer.
    pub(super) fn on_committed_response(&mut self, req: Req, resp: AppendRowsResponse) {
        if !resp.row_errors.is_empty() {
            let first = &resp.row_errors[0];
            self.stop(format!(
                "BigQuery refused {} row(s) of an exactly-once stream (first: row {}: {}); rows must be validated before they are sent",
                resp.row_errors.len(),
                req.offset.unwrap_or(0) + first.index,
                first.message
            ));
            return;
        }
        let status = match resp.response {
            Some(append_rows_response::Response::AppendResult(_)) => return self.accepted(req),
            Some(append_rows_response::Response::Error(status)) => status,
            None => crate::bigquery::proto::rpc::Status {
                code: tonic::Code::Unknown as i32,
                message: "AppendRows response with neither a result nor an error".into(),
                details: Vec::new(),
            },
        };
        let info = ErrorInfo::from_rpc(&status);
        let gap = self.conn.as_ref().is_some_and(|c| c.gap);
        match info.action() {
            Action::AlreadyExists if req.attempts > 1 => {
                debug!(offset = ?req.offset, "re-sent request already written; counting it as accepted");
                return self.accepted(req);
            }
            Action::OutOfRange if gap => {
                // Behind a refused request of this connection: re-send in order.
                self.requeue(req);
                return;
            }
            _ => {}
        }
        if committed_stops(&info, req.attempts > 1) {
            self.stop(format!("offset {}: {info}", req.offset.unwrap_or(-1)));
            return;
        }
        if let Some(c) = self.conn.as_mut() {
            c.gap = true;
        }
        match info.action() {
            Action::Split if req.n() > 1 => {
                metrics::counter!(m::SPLITS_TOTAL).increment(1);
                match self.halves(&req) {
                    Ok(parts) => self.replace(&req, parts),
                    Err(e) => self.encode_failure(req, e),
                }
                // Later requests of this connection will meet a gap: reconnect and re-send.
                self.begin_drain();
            }
            Action::Split => self.stop(format!(
                "offset {}: a single row exceeds the request size cap: {info}",
                req.offset.unwrap_or(-1)
            )),
            action => {
                self.requeue(req);
                self.failed(&info, action);
                self.begin_drain();
            }
        }
    }

    /// Committed streams: fails every unresolved batch with `reason` and stops the writer.
    pub(super) fn stop(&mut self, reason: String) {
        warn!(stream = %self.write_stream, %reason, "exactly-once writer stopped; nothing more is acknowledged");
        metrics::counter!(m::FATAL_ERRORS_TOTAL, "code" => "STOPPED").increment(1);
        self.set_health(false);
        for (_, mut b) in self.batches.drain() {
            metrics::gauge!(m::INFLIGHT_BYTES).decrement(b.bytes as f64);
            if let Some(done) = b.done.take() {
                let _ = done.send(Err(reason.clone()));
            }
        }
        self.queue.clear();
        self.inflight.clear();
        self.conn = None;
        self.jobs.close();
        self.stopped = Some(reason);
    }
}

/// Committed streams: errors after which the writer must stop rather than retry. `resent`:
/// the request was sent before (only then may ALREADY_EXISTS be a lost answer).
pub(super) fn committed_stops(info: &ErrorInfo, resent: bool) -> bool {
    use crate::bigquery::proto::storage_error::StorageErrorCode as S;
    if matches!(
        info.storage_code,
        Some(
            S::StreamFinalized
                | S::StreamNotFound
                | S::InvalidStreamState
                | S::StreamAlreadyCommitted
        )
    ) {
        return true;
    }
    match info.action() {
        Action::BadRows | Action::OutOfRange => true,
        Action::AlreadyExists => !resent,
        // A finalized (fenced) or missing stream: a newer owner has taken the partition over.
        Action::Fatal => matches!(
            info.code,
            tonic::Code::FailedPrecondition | tonic::Code::NotFound
        ),
        Action::Retry | Action::Split | Action::SchemaMismatch => false,
    }
}
