//! The driver's bookkeeping of batches: a batch admitted as requests, the policy's verdict on
//! a request carried out, a batch resolved when its last request is.

use super::api::{AppendOutcome, RejectReason, RejectedRow};
use super::driver::Driver;
use super::policy::Verdict;
use super::request::{Job, Req};
use crate::sink::bigquery::metrics as m;
use arrow_schema::ArrowError;
use std::sync::atomic::Ordering;
use tokio::sync::{oneshot, OwnedSemaphorePermit};
use tracing::warn;

/// A batch being written.
pub(super) struct BatchState {
    pub(super) rows: usize,
    pub(super) bytes: usize,
    pub(super) appended: usize,
    /// Requests of this batch not yet resolved.
    pub(super) open: usize,
    pub(super) rejected: Vec<RejectedRow>,
    pub(super) stream_offsets: Option<std::ops::Range<i64>>,
    pub(super) done: Option<oneshot::Sender<Result<AppendOutcome, String>>>,
    pub(super) _permit: OwnedSemaphorePermit,
}

impl Driver {
    /// Records a batch and queues its requests, placed by the policy (offsets, send order).
    pub(super) fn admit(&mut self, job: Job) {
        let id = self.next_id;
        self.next_id += 1;
        tracing::debug!(
            writer = self.id,
            batch = id,
            requests = job.reqs.len(),
            queued = self.queue.len(),
            inflight = self.inflight.len(),
            connected = self.conn.is_some(),
            "batch admitted"
        );
        metrics::gauge!(m::INFLIGHT_BYTES).increment(job.bytes as f64);
        let mut reqs = job.reqs;
        let stream_offsets = self.policy.admit(job.written, &mut reqs);
        self.batches.insert(
            id,
            BatchState {
                rows: job.rows,
                bytes: job.bytes,
                appended: 0,
                open: reqs.len(),
                rejected: job.rejected,
                stream_offsets: stream_offsets.clone(),
                done: Some(job.done),
                _permit: job.permit,
            },
        );
        for mut r in reqs {
            r.batch = id;
            self.queue.push_back(r);
        }
        self.finish_if_done(id);
    }

    /// Resolves batch `id` once none of its requests is open.
    pub(super) fn finish_if_done(&mut self, id: u64) {
        let done = self.batches.get(&id).is_some_and(|b| b.open == 0);
        if !done {
            return;
        }
        if let Some(mut b) = self.batches.remove(&id) {
            metrics::gauge!(m::INFLIGHT_BYTES).decrement(b.bytes as f64);
            b.rejected.sort_by_key(|r| r.index);
            for r in &b.rejected {
                metrics::counter!(m::ROW_ERRORS_TOTAL, "kind" => r.reason.as_str()).increment(1);
            }
            if let Some(r) = &b.stream_offsets {
                self.policy.resolved(r);
            }
            let outcome = AppendOutcome {
                rows: b.rows,
                appended: b.appended,
                rejected: b.rejected,
                stream_offsets: b.stream_offsets,
            };
            if let Some(done) = b.done.take() {
                // The caller may have stopped waiting; the rows are written either way.
                let _ = done.send(Ok(outcome));
            }
        }
    }

    /// Carries out the policy's verdict on `req`.
    pub(super) fn apply(&mut self, req: Req, verdict: Verdict) {
        match verdict {
            Verdict::Accept => self.accepted(req),
            Verdict::Reject(rows) => {
                let bad: Vec<usize> = rows.iter().map(|r| r.0).collect();
                self.reject(&req, rows);
                match req.without(&bad) {
                    Ok(Some(rest)) => self.replace(&req, vec![rest]),
                    Ok(None) => self.replace(&req, Vec::new()),
                    Err(e) => self.encode_failure(req, e),
                }
            }
            Verdict::Resend => self.requeue(req),
            Verdict::Split { reconnect } => {
                match self.halves(&req) {
                    Ok(parts) => self.replace(&req, parts),
                    Err(e) => self.encode_failure(req, e),
                }
                if reconnect {
                    self.begin_drain();
                }
            }
            Verdict::Retry(info) => {
                self.requeue(req);
                self.failed(&info, info.action());
                self.begin_drain();
            }
            Verdict::Stop(reason) => self.stop(reason),
        }
    }

    pub(super) fn accepted(&mut self, req: Req) {
        self.stats.requests_accepted.fetch_add(1, Ordering::Relaxed);
        self.failures = 0;
        self.set_health(true);
        metrics::counter!(m::ROWS_APPENDED_TOTAL).increment(req.n() as u64);
        metrics::counter!(m::BYTES_APPENDED_TOTAL).increment(req.payload.len() as u64);
        if let Some(b) = self.batches.get_mut(&req.batch) {
            b.appended += req.n();
            b.open -= 1;
        }
        self.finish_if_done(req.batch);
    }

    pub(super) fn reject(
        &mut self,
        req: &Req,
        rows: impl IntoIterator<Item = (usize, RejectReason, String)>,
    ) {
        if let Some(b) = self.batches.get_mut(&req.batch) {
            for (i, reason, message) in rows {
                b.rejected.push(RejectedRow {
                    index: req.rows.get(i),
                    reason,
                    message,
                });
            }
        }
    }

    /// Replaces `req` (already counted as one open request of its batch) by `parts`.
    pub(super) fn replace(&mut self, req: &Req, parts: Vec<Req>) {
        if let Some(b) = self.batches.get_mut(&req.batch) {
            b.open = b.open + parts.len() - 1;
        }
        for p in parts {
            self.requeue(p);
        }
        self.finish_if_done(req.batch);
    }

    pub(super) fn halves(&self, req: &Req) -> Result<Vec<Req>, ArrowError> {
        let half = req.n() / 2;
        Ok(vec![req.slice(0, half)?, req.slice(half, req.n() - half)?])
    }

    /// Re-encoding rows that encoded fine before cannot fail in practice; if it does, the
    /// request goes back unchanged (never acknowledged).
    pub(super) fn encode_failure(&mut self, req: Req, e: ArrowError) {
        warn!(error = %e, "re-encoding a refused request failed; re-sending it unchanged");
        self.requeue(req);
    }

    /// Puts a request back in send order (after any queued request of the same order).
    pub(super) fn requeue(&mut self, req: Req) {
        let at = self.queue.partition_point(|q| q.order <= req.order);
        self.queue.insert(at, req);
    }

    /// Fails every unresolved batch with `reason` and stops the writer.
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

    /// The connection failed over the transport's message cap: halves the largest request
    /// sent on it (a single row is reported rejected).
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
