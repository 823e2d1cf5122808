//! The `_default` stream (at-least-once, no offsets). Rows BigQuery refuses are reported
//! rejected: listed in `row_errors`, or found by bisecting a request refused for its data until
//! they are alone. Everything else is re-sent, so a row can land twice, never zero times. The
//! writer may add missing columns to the table ([`Evolution`]).

use super::contract::RejectReason;
use super::policy::{Evolution, Lost, StreamPolicy, Verdict};
use super::request::Req;
use crate::sink::bigquery::error::{Action, ErrorInfo};
use crate::sink::bigquery::metrics as m;
use crate::sink::bigquery::proto::{append_rows_response, AppendRowsResponse};
use std::ops::Range;
use tracing::{debug, warn};

/// The policy of a table's `_default` stream.
pub(super) struct DefaultStream {
    /// Admission counter: the send order of the next request.
    next_order: i64,
    /// How to add missing columns, when the writer may.
    evolution: Option<Evolution>,
}

impl DefaultStream {
    /// A default stream; with `evolution`, the writer adds the columns the table lacks.
    pub(super) fn new(evolution: Option<Evolution>) -> Self {
        DefaultStream {
            next_order: 0,
            evolution,
        }
    }

    /// `row_errors`: the listed rows are rejected, the others sent again.
    fn row_errors(req: &Req, resp: &AppendRowsResponse) -> Verdict {
        let n = req.n();
        let mut rows: Vec<(usize, RejectReason, String)> = Vec::new();
        for e in &resp.row_errors {
            match usize::try_from(e.index) {
                Ok(i) if i < n && !rows.iter().any(|r| r.0 == i) => {
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
        if rows.is_empty() {
            // Nothing usable: the whole request was refused; send it again as is.
            warn!("row_errors without a usable index; re-sending the request");
            return Verdict::Resend;
        }
        Verdict::Reject(rows)
    }

    /// An in-band refusal without `row_errors`.
    fn refused(req: &Req, info: ErrorInfo) -> Verdict {
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
                    return Verdict::Reject(vec![(0, reason, info.to_string())]);
                }
                if action == Action::Split {
                    metrics::counter!(m::SPLITS_TOTAL).increment(1);
                }
                debug!(error = %info, rows = req.n(), "splitting a refused request");
                Verdict::Split { reconnect: false }
            }
            // Retry (or wait out a fatal condition) on a new connection, after backoff.
            _ => Verdict::Retry(info),
        }
    }
}

impl StreamPolicy for DefaultStream {
    fn oversized_row_fails_batch(&self) -> bool {
        false
    }

    fn admit(&mut self, _written: usize, reqs: &mut [Req]) -> Option<Range<i64>> {
        for r in reqs {
            r.order = self.next_order;
            self.next_order += 1;
        }
        None
    }

    fn connection_failed(&self, info: &ErrorInfo) -> Lost {
        if info.action() == Action::Split {
            Lost::SplitLargest
        } else {
            Lost::Retry
        }
    }

    fn answer(&mut self, req: &Req, resp: &AppendRowsResponse) -> Verdict {
        if !resp.row_errors.is_empty() {
            return Self::row_errors(req, resp);
        }
        match &resp.response {
            Some(append_rows_response::Response::AppendResult(_)) => Verdict::Accept,
            Some(append_rows_response::Response::Error(status)) => {
                Self::refused(req, ErrorInfo::from_rpc(status))
            }
            None => Self::refused(
                req,
                ErrorInfo {
                    code: tonic::Code::Unknown,
                    message: "AppendRows response with neither a result nor an error".into(),
                    storage_code: None,
                },
            ),
        }
    }

    fn evolution(&self) -> Option<&Evolution> {
        self.evolution.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::super::policy::testing::*;
    use super::*;
    use tonic::Code;

    #[test]
    fn requests_are_sent_in_admission_order_without_offsets() {
        let mut p = DefaultStream::new(None);
        let mut reqs = vec![req(3, 0, None), req(2, 0, None)];
        assert_eq!(p.admit(5, &mut reqs), None);
        let mut more = vec![req(1, 0, None)];
        p.admit(1, &mut more);
        let orders: Vec<i64> = reqs.iter().chain(&more).map(|r| r.order).collect();
        assert_eq!(orders, [0, 1, 2]);
        assert!(reqs.iter().all(|r| r.offset.is_none()));
        assert!(!p.oversized_row_fails_batch());
        assert!(p.evolution().is_none());
    }

    #[test]
    fn row_errors_reject_the_listed_rows_once_and_resend_the_rest() {
        let mut p = DefaultStream::new(None);
        let v = p.answer(
            &req(4, 1, None),
            &row_errors(&[(2, "bad"), (9, "outside"), (2, "again"), (0, "worse")]),
        );
        assert_eq!(
            v,
            Verdict::Reject(vec![
                (2, RejectReason::RowError, "bad".into()),
                (0, RejectReason::RowError, "worse".into()),
            ])
        );
        let v = p.answer(&req(4, 1, None), &row_errors(&[(-1, "?"), (4, "?")]));
        assert_eq!(
            v,
            Verdict::Resend,
            "no usable index: the request is sent again"
        );
    }

    #[test]
    fn refused_data_is_bisected_until_a_row_is_alone() {
        let mut p = DefaultStream::new(None);
        let bad = refused(Code::InvalidArgument, "bad value", None);
        assert_eq!(
            p.answer(&req(2, 1, None), &bad),
            Verdict::Split { reconnect: false }
        );
        let Verdict::Reject(rows) = p.answer(&req(1, 1, None), &bad) else {
            panic!("a single refused row is rejected");
        };
        assert_eq!(rows[0].0, 0);
        assert_eq!(rows[0].1, RejectReason::Invalid);
        let big = refused(Code::InvalidArgument, "AppendRows request too large", None);
        assert_eq!(
            p.answer(&req(2, 1, None), &big),
            Verdict::Split { reconnect: false }
        );
        let Verdict::Reject(rows) = p.answer(&req(1, 1, None), &big) else {
            panic!("a single row over the cap is rejected");
        };
        assert_eq!(rows[0].1, RejectReason::TooLarge);
    }

    #[test]
    fn everything_else_is_retried_and_never_stops_the_writer() {
        let mut p = DefaultStream::new(None);
        assert_eq!(p.answer(&req(2, 1, None), &ok()), Verdict::Accept);
        for code in [
            Code::Unavailable,
            Code::PermissionDenied,
            Code::NotFound,
            Code::AlreadyExists,
            Code::OutOfRange,
            Code::FailedPrecondition,
        ] {
            let v = p.answer(&req(2, 2, None), &refused(code, "no", None));
            assert!(matches!(v, Verdict::Retry(i) if i.code == code), "{code:?}");
        }
        let empty = AppendRowsResponse::default();
        assert!(matches!(
            p.answer(&req(2, 1, None), &empty),
            Verdict::Retry(i) if i.code == Code::Unknown
        ));
    }

    #[test]
    fn a_connection_over_the_transport_cap_splits_the_largest_request() {
        let p = DefaultStream::new(None);
        assert_eq!(
            p.connection_failed(&info(Code::ResourceExhausted, "message larger than max")),
            Lost::SplitLargest
        );
        assert_eq!(
            p.connection_failed(&info(Code::NotFound, "stream gone")),
            Lost::Retry
        );
    }
}
