//! The `_default` stream (at-least-once): how BigQuery's refusals are resolved. Rows BigQuery
//! refuses are reported rejected (a request is bisected until they are alone); everything else
//! is re-sent.

use super::api::RejectReason;
use super::driver::Driver;
use super::request::Req;
use crate::bigquery::error::{Action, ErrorInfo};
use crate::bigquery::metrics as m;
use crate::bigquery::proto::AppendRowsResponse;
use tracing::{debug, warn};

impl Driver {
    pub(super) fn on_row_errors(&mut self, req: Req, resp: &AppendRowsResponse) {
        let n = req.n();
        let mut bad: Vec<usize> = Vec::new();
        let mut rows = Vec::new();
        for e in &resp.row_errors {
            match usize::try_from(e.index) {
                Ok(i) if i < n && !bad.contains(&i) => {
                    bad.push(i);
                    rows.push((i, RejectReason::RowError, e.message.clone()));
                }
                _ => warn!(
                    index = e.index,
                    rows = n,
                    "row error index outside the request; ignored"
                ),
            }
        }
        metrics::counter!(m::RETRIES_TOTAL, "code" => "ROW_ERRORS").increment(1);
        if bad.is_empty() {
            // Nothing usable: the whole request was refused; send it again as is.
            warn!("row_errors without a usable index; re-sending the request");
            self.requeue(req);
            return;
        }
        self.reject(&req, rows);
        match req.without(&bad) {
            Ok(Some(rest)) => self.replace(&req, vec![rest]),
            Ok(None) => self.replace(&req, Vec::new()),
            Err(e) => self.encode_failure(req, e),
        }
    }

    pub(super) fn on_refused(&mut self, req: Req, info: ErrorInfo) {
        let action = info.action();
        match action {
            Action::Split | Action::BadRows => {
                if req.n() <= 1 {
                    let reason = if action == Action::Split {
                        RejectReason::TooLarge
                    } else {
                        RejectReason::Invalid
                    };
                    warn!(error = %info, "BigQuery refused a row; reporting it as rejected");
                    self.reject(&req, [(0, reason, info.to_string())]);
                    self.replace(&req, Vec::new());
                    return;
                }
                if action == Action::Split {
                    metrics::counter!(m::SPLITS_TOTAL).increment(1);
                }
                debug!(error = %info, rows = req.n(), "splitting a refused request");
                match self.halves(&req) {
                    Ok(parts) => self.replace(&req, parts),
                    Err(e) => self.encode_failure(req, e),
                }
            }
            _ => {
                // Retry (or wait out a fatal condition) on a new connection, after backoff.
                self.requeue(req);
                self.failed(&info, action);
                self.begin_drain();
            }
        }
    }

    pub(super) fn split_largest_inflight(&mut self) {
        let Some((i, _)) = self
            .inflight
            .iter()
            .enumerate()
            .max_by_key(|(_, r)| r.payload.len())
        else {
            return;
        };
        let Some(req) = self.inflight.remove(i) else {
            return;
        };
        if req.n() <= 1 {
            self.reject(
                &req,
                [(
                    0,
                    RejectReason::TooLarge,
                    "the row exceeds the transport's message cap".into(),
                )],
            );
            self.replace(&req, Vec::new());
            return;
        }
        match self.halves(&req) {
            Ok(parts) => self.replace(&req, parts),
            Err(e) => self.encode_failure(req, e),
        }
    }
}
