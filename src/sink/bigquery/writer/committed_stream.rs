//! COMMITTED streams (exactly-once, explicit offsets; see [`crate::sink::bigquery::checkpoint`]).
//!
//! Rows are never dropped: the stream's row count must stay a function of the messages. A
//! re-send is identical (same offset), so it cannot land twice. An ALREADY_EXISTS counts as
//! success only for a re-send (its first attempt landed and the answer was lost); OUT_OF_RANGE
//! is expected only behind a request of the same connection that was refused (re-sent in
//! order). What cannot be resolved safely (a gap, a fenced or finalized stream, rows BigQuery
//! refuses, a single row over the size cap) stops the writer.

use super::policy::{Lost, StreamPolicy, Verdict};
use super::request::Req;
use crate::sink::bigquery::error::{Action, ErrorInfo};
use crate::sink::bigquery::metrics as m;
use crate::sink::bigquery::proto::{append_rows_response, AppendRowsResponse};
use std::ops::Range;
use tracing::debug;

/// The policy of one partition's COMMITTED stream.
pub(super) struct CommittedStream {
    /// Kafka partition (metric label).
    partition: i32,
    /// Offset of the next row admitted.
    next_offset: i64,
    /// A request of the current connection was refused, so later ones may be refused with
    /// OUT_OF_RANGE (a gap of our own making) and are re-sent in order.
    gap: bool,
}

impl CommittedStream {
    /// A stream whose next row goes at `next_offset`; `partition` labels the offset metric.
    pub(super) fn new(partition: i32, next_offset: i64) -> Self {
        CommittedStream {
            partition,
            next_offset,
            gap: false,
        }
    }
}

impl StreamPolicy for CommittedStream {
    fn oversized_row_fails_batch(&self) -> bool {
        // Skipping a row would break the row ↔ message mapping resume relies on.
        true
    }

    fn admit(&mut self, written: usize, reqs: &mut [Req]) -> Option<Range<i64>> {
        let start = self.next_offset;
        self.next_offset += written as i64;
        for r in reqs {
            r.offset = Some(start + r.pos as i64);
            r.order = start + r.pos as i64;
        }
        Some(start..self.next_offset)
    }

    fn resolved(&self, offsets: &Range<i64>) {
        metrics::gauge!(m::STREAM_OFFSET, "partition" => self.partition.to_string())
            .set(offsets.end as f64);
    }

    fn connected(&mut self) {
        self.gap = false;
    }

    fn connection_failed(&self, info: &ErrorInfo) -> Lost {
        if committed_stops(info, false) {
            Lost::Stop(info.to_string())
        } else {
            Lost::Retry
        }
    }

    fn answer(&mut self, req: &Req, resp: &AppendRowsResponse) -> Verdict {
        if let Some(first) = resp.row_errors.first() {
            return Verdict::Stop(format!(
                "BigQuery refused {} row(s) of an exactly-once stream (first: row {}: {}); rows must be validated before they are sent",
                resp.row_errors.len(),
                req.offset.unwrap_or(0) + first.index,
                first.message
            ));
        }
        let status = match &resp.response {
            Some(append_rows_response::Response::AppendResult(_)) => return Verdict::Accept,
            Some(append_rows_response::Response::Error(status)) => status.clone(),
            None => crate::sink::bigquery::proto::rpc::Status {
                code: tonic::Code::Unknown as i32,
                message: "AppendRows response with neither a result nor an error".into(),
                details: Vec::new(),
            },
        };
        let info = ErrorInfo::from_rpc(&status);
        match info.action() {
            Action::AlreadyExists if req.attempts > 1 => {
                debug!(offset = ?req.offset, "re-sent request already written; counting it as accepted");
                return Verdict::Accept;
            }
            // Behind a refused request of this connection: re-send in order.
            Action::OutOfRange if self.gap => return Verdict::Resend,
            _ => {}
        }
        if committed_stops(&info, req.attempts > 1) {
            return Verdict::Stop(format!("offset {}: {info}", req.offset.unwrap_or(-1)));
        }
        self.gap = true;
        match info.action() {
            Action::Split if req.n() > 1 => {
                metrics::counter!(m::SPLITS_TOTAL).increment(1);
                // Later requests of this connection will meet a gap: reconnect and re-send.
                Verdict::Split { reconnect: true }
            }
            Action::Split => Verdict::Stop(format!(
                "offset {}: a single row exceeds the request size cap: {info}",
                req.offset.unwrap_or(-1)
            )),
            _ => Verdict::Retry(info),
        }
    }
}

/// Committed streams: errors after which the writer must stop rather than retry. `resent`:
/// the request was sent before (only then may ALREADY_EXISTS be a lost answer).
fn committed_stops(info: &ErrorInfo, resent: bool) -> bool {
    use crate::sink::bigquery::proto::storage_error::StorageErrorCode as S;
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

#[cfg(test)]
mod tests {
    use super::super::policy::testing::*;
    use super::*;
    use crate::sink::bigquery::proto::storage_error::StorageErrorCode as S;
    use tonic::Code;

    #[test]
    fn batches_take_consecutive_offsets_from_the_resume_point() {
        let mut p = CommittedStream::new(3, 100);
        let mut reqs = vec![req(3, 0, None), req(2, 0, None)];
        reqs[1].pos = 3;
        assert_eq!(p.admit(5, &mut reqs), Some(100..105));
        assert_eq!(
            reqs.iter().map(|r| (r.offset, r.order)).collect::<Vec<_>>(),
            [(Some(100), 100), (Some(103), 103)]
        );
        assert_eq!(p.admit(2, &mut []), Some(105..107));
        assert!(p.oversized_row_fails_batch());
        assert!(
            p.evolution().is_none(),
            "no schema evolution on a committed stream"
        );
    }

    #[test]
    fn already_exists_is_success_only_for_a_resend() {
        let mut p = CommittedStream::new(0, 0);
        let exists = refused(
            Code::AlreadyExists,
            "offset exists",
            Some(S::OffsetAlreadyExists),
        );
        assert_eq!(p.answer(&req(2, 2, Some(7)), &exists), Verdict::Accept);
        let Verdict::Stop(why) = p.answer(&req(2, 1, Some(7)), &exists) else {
            panic!("a first attempt that already exists is someone else's row");
        };
        assert!(why.starts_with("offset 7: "), "{why}");
    }

    #[test]
    fn out_of_range_is_resent_only_behind_a_refusal_on_the_same_connection() {
        let mut p = CommittedStream::new(0, 0);
        let gap = refused(Code::OutOfRange, "past the end", Some(S::OffsetOutOfRange));
        assert!(matches!(
            p.answer(&req(2, 1, Some(4)), &gap),
            Verdict::Stop(_)
        ));
        p.connected();
        let busy = refused(Code::Unavailable, "try later", None);
        assert!(matches!(
            p.answer(&req(2, 1, Some(2)), &busy),
            Verdict::Retry(i) if i.code == Code::Unavailable
        ));
        assert_eq!(p.answer(&req(2, 1, Some(4)), &gap), Verdict::Resend);
        p.connected();
        assert!(
            matches!(p.answer(&req(2, 1, Some(4)), &gap), Verdict::Stop(_)),
            "a new connection has no gap of its own making"
        );
    }

    #[test]
    fn refused_rows_fenced_streams_and_single_rows_over_the_cap_stop_the_writer() {
        let mut p = CommittedStream::new(0, 0);
        let Verdict::Stop(why) = p.answer(&req(3, 1, Some(10)), &row_errors(&[(1, "bad")])) else {
            panic!("rows are never dropped from an exactly-once stream");
        };
        assert!(why.contains("first: row 11: bad"), "{why}");
        for fenced in [
            refused(
                Code::FailedPrecondition,
                "finalized",
                Some(S::StreamFinalized),
            ),
            refused(Code::FailedPrecondition, "finalized", None),
            refused(Code::NotFound, "no stream", None),
            refused(Code::InvalidArgument, "bad data", None),
        ] {
            assert!(matches!(
                p.answer(&req(2, 1, Some(0)), &fenced),
                Verdict::Stop(_)
            ));
        }
        let big = refused(Code::InvalidArgument, "AppendRows request too large", None);
        assert_eq!(
            p.answer(&req(2, 1, Some(0)), &big),
            Verdict::Split { reconnect: true }
        );
        let Verdict::Stop(why) = p.answer(&req(1, 1, Some(0)), &big) else {
            panic!("a single row over the cap cannot be skipped");
        };
        assert!(why.contains("a single row exceeds"), "{why}");
        assert_eq!(p.answer(&req(1, 1, Some(0)), &ok()), Verdict::Accept);
    }

    #[test]
    fn a_failed_connection_stops_only_on_a_fenced_or_missing_stream() {
        let p = CommittedStream::new(0, 0);
        assert_eq!(
            p.connection_failed(&info(Code::Unavailable, "reset")),
            Lost::Retry
        );
        assert_eq!(
            p.connection_failed(&info(Code::ResourceExhausted, "message larger than max")),
            Lost::Retry,
            "no splitting on a committed stream's connection"
        );
        assert!(matches!(
            p.connection_failed(&info(Code::NotFound, "stream gone")),
            Lost::Stop(_)
        ));
        assert!(matches!(
            p.connection_failed(&info(Code::PermissionDenied, "no")),
            Lost::Retry
        ));
    }
}
