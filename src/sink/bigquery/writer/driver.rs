//! The writer task: owns the AppendRows connection, sends requests in order, matches each
//! answer to the oldest request sent, re-sends what a lost connection left unanswered,
//! reconnects with backoff and reports health; and its bookkeeping of batches: a batch admitted
//! as requests, the policy's verdict on a request carried out, a batch resolved when its last
//! request is.

use super::contract::{
    AppendOutcome, ConnectionMark, RejectReason, RejectedRow, WriterOptions, WriterStats,
};
use super::policy::{Evolving, Lost, StreamPolicy, Verdict};
use super::request::{Job, Req};
use crate::sink::bigquery::client::StorageClient;
use crate::sink::bigquery::encode::append_request;
use crate::sink::bigquery::error::{Action, ErrorInfo};
use crate::sink::bigquery::metrics as m;
use crate::sink::bigquery::proto::{append_rows_response, AppendRowsRequest, AppendRowsResponse};
use crate::sink::bigquery::table::{EnsureReport, TableError};
use arrow_schema::ArrowError;
use bytes::Bytes;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot, watch, OwnedSemaphorePermit};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tonic::codec::Streaming;
use tonic::Status;
use tracing::{debug, info, warn};

pub(super) enum ConnState {
    Opening(JoinHandle<Result<Streaming<AppendRowsResponse>, Status>>),
    Open(Box<Streaming<AppendRowsResponse>>),
}

pub(super) struct Conn {
    /// None once half-closed (draining).
    pub(super) tx: Option<mpsc::UnboundedSender<AppendRowsRequest>>,
    pub(super) state: ConnState,
    pub(super) schema_sent: bool,
    /// A request carrying the schema was accepted on this connection.
    pub(super) primed: bool,
    pub(super) drain_deadline: Option<Instant>,
    /// Counts the connection as open (gauge and writer flag) for as long as it lives.
    pub(super) _mark: ConnectionMark,
}

impl Drop for Conn {
    fn drop(&mut self) {
        if let ConnState::Opening(h) = &self.state {
            h.abort();
        }
    }
}

pub(super) enum Wake {
    Evolved(Result<Result<EnsureReport, TableError>, tokio::task::JoinError>),
    Conn(ConnEvent),
    Job(Option<Job>),
    Retry,
    DrainTimeout,
    AnswerTimeout,
    Idle,
}

pub(super) enum ConnEvent {
    Opened(Result<Streaming<AppendRowsResponse>, Status>),
    Message(Result<Option<AppendRowsResponse>, Status>),
}

impl ConnEvent {
    /// A short name for the log.
    fn kind(&self) -> &'static str {
        match self {
            ConnEvent::Opened(Ok(_)) => "opened",
            ConnEvent::Opened(Err(_)) => "open failed",
            ConnEvent::Message(Ok(Some(_))) => "answer",
            ConnEvent::Message(Ok(None)) => "ended",
            ConnEvent::Message(Err(_)) => "failed",
        }
    }
}

pub(super) async fn next_event(conn: &mut Conn) -> ConnEvent {
    match &mut conn.state {
        ConnState::Opening(h) => ConnEvent::Opened(match h.await {
            Ok(r) => r,
            Err(e) => Err(Status::internal(format!("append task failed: {e}"))),
        }),
        ConnState::Open(s) => ConnEvent::Message(s.message().await),
    }
}

/// Numbers the writers of a process for the log.
static NEXT_WRITER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

pub(super) struct Driver {
    /// This writer's number in the process (log field `writer`).
    pub(super) id: u64,
    /// What differs between the default stream and a committed stream.
    pub(super) policy: Box<dyn StreamPolicy>,
    /// Why the writer stopped, when its policy stopped it (it then resolves nothing more).
    pub(super) stopped: Option<String>,
    /// A running `ensure_table`; no connection is opened until it is done.
    pub(super) evolving: Option<Evolving>,
    pub(super) stats: Arc<WriterStats>,
    pub(super) client: StorageClient,
    pub(super) write_stream: String,
    pub(super) schema_bytes: Bytes,
    pub(super) opts: WriterOptions,
    pub(super) jobs: mpsc::UnboundedReceiver<Job>,
    pub(super) jobs_open: bool,
    pub(super) batches: HashMap<u64, BatchState>,
    pub(super) next_id: u64,
    /// Requests waiting to be sent on the current (or next) connection.
    pub(super) queue: VecDeque<Req>,
    /// Requests sent on the current connection, oldest first, awaiting their responses.
    pub(super) inflight: VecDeque<Req>,
    pub(super) conn: Option<Conn>,
    /// No connection attempt before this instant.
    pub(super) retry_at: Option<Instant>,
    /// Consecutive failed attempts (reset by an accepted append).
    pub(super) failures: u32,
    pub(super) connections: u64,
    /// The current connection attempt already counted as failed.
    pub(super) attempt_failed: bool,
    /// Last work: a batch admitted, an answer, a connection opened (for `opts.idle_close`).
    pub(super) last_active: Instant,
    /// The last connection was closed for idling (opening the next is no reconnect).
    pub(super) idle_closed: bool,
    pub(super) health: watch::Sender<bool>,
}

impl Driver {
    /// A driver for `write_stream`, with the sender of its jobs, its health and its counters;
    /// start it with [`Driver::run`].
    pub(super) fn new(
        client: StorageClient,
        write_stream: String,
        policy: Box<dyn StreamPolicy>,
        schema_bytes: Bytes,
        opts: WriterOptions,
    ) -> (
        Self,
        mpsc::UnboundedSender<Job>,
        watch::Receiver<bool>,
        Arc<WriterStats>,
    ) {
        let (jobs_tx, jobs) = mpsc::unbounded_channel();
        let (health, health_rx) = watch::channel(true);
        let stats = Arc::new(WriterStats::default());
        let driver = Driver {
            id: NEXT_WRITER.fetch_add(1, Ordering::Relaxed),
            stats: Arc::clone(&stats),
            client,
            write_stream,
            schema_bytes,
            opts,
            jobs,
            jobs_open: true,
            batches: HashMap::new(),
            next_id: 0,
            queue: VecDeque::new(),
            inflight: VecDeque::new(),
            conn: None,
            retry_at: None,
            failures: 0,
            connections: 0,
            attempt_failed: false,
            last_active: Instant::now(),
            idle_closed: false,
            health,
            evolving: None,
            policy,
            stopped: None,
        };
        (driver, jobs_tx, health_rx, stats)
    }

    pub(super) async fn run(mut self) {
        loop {
            if self.stopped.is_some() {
                return;
            }
            self.pump();
            if !self.jobs_open && self.batches.is_empty() {
                debug!("BigQuery writer drained");
                return;
            }
            let waiting = self.conn.is_none() && !self.queue.is_empty() && self.retry_at.is_some();
            let retry_at = self.retry_at.unwrap_or_else(Instant::now);
            let drain_at = self.conn.as_ref().and_then(|c| c.drain_deadline);
            let answer_due = self
                .inflight
                .front()
                .and_then(|r| r.sent_at)
                .map(|t| t + self.opts.response_timeout);
            let has_conn = self.conn.is_some();
            let evolving = self.evolving.is_some();
            let idle_at = self.idle_close_at();
            let wake = {
                let conn = &mut self.conn;
                let jobs = &mut self.jobs;
                let ev_task = &mut self.evolving;
                tokio::select! {
                    biased;
                    r = async {
                        match ev_task.as_mut() {
                            Some(h) => h.await,
                            None => std::future::pending().await,
                        }
                    }, if evolving => Wake::Evolved(r),
                    ev = async {
                        match conn.as_mut() {
                            Some(c) => next_event(c).await,
                            None => std::future::pending().await,
                        }
                    }, if has_conn => Wake::Conn(ev),
                    job = jobs.recv(), if self.jobs_open => Wake::Job(job),
                    _ = tokio::time::sleep_until(retry_at), if waiting => Wake::Retry,
                    _ = tokio::time::sleep_until(drain_at.unwrap_or(retry_at)), if drain_at.is_some() => Wake::DrainTimeout,
                    _ = tokio::time::sleep_until(answer_due.unwrap_or(retry_at)), if answer_due.is_some() => Wake::AnswerTimeout,
                    _ = tokio::time::sleep_until(idle_at.unwrap_or(retry_at)), if idle_at.is_some() => Wake::Idle,
                }
            };
            match wake {
                Wake::Evolved(r) => self.evolved(r),
                Wake::Conn(ev) => self.on_event(ev),
                Wake::Job(Some(job)) => self.admit(job),
                Wake::Job(None) => self.jobs_open = false,
                Wake::Retry => {
                    debug!(writer = self.id, "backoff over");
                    self.retry_at = None;
                }
                Wake::DrainTimeout => {
                    if !self.inflight.is_empty() {
                        warn!(
                            unanswered = self.inflight.len(),
                            "BigQuery did not answer after half-close; dropping the connection and re-sending"
                        );
                    }
                    self.lose_connection();
                }
                Wake::Idle => {
                    debug!(writer = self.id, "closing the idle AppendRows connection");
                    self.stats.idle_closes.fetch_add(1, Ordering::Relaxed);
                    self.idle_closed = true;
                    self.begin_drain();
                }
                Wake::AnswerTimeout => {
                    let info = ErrorInfo {
                        code: tonic::Code::DeadlineExceeded,
                        message: format!(
                            "no answer to an AppendRows request within {:?}",
                            self.opts.response_timeout
                        ),
                        storage_code: None,
                    };
                    self.lose_connection();
                    self.failed(&info, Action::Retry);
                }
            }
        }
    }

    /// Opens a connection when there is work and no backoff, and sends everything queued.
    pub(super) fn pump(&mut self) {
        if self.queue.is_empty() {
            return;
        }
        // A half-closed connection with nothing unanswered only waits for its end: new work
        // need not wait for it.
        if self.conn.as_ref().is_some_and(|c| c.tx.is_none()) && self.inflight.is_empty() {
            self.conn = None;
        }
        if self.conn.is_none() {
            if self.evolving.is_some() || self.retry_at.is_some_and(|t| t > Instant::now()) {
                return;
            }
            self.retry_at = None;
            self.open();
        }
        let Some(conn) = self.conn.as_mut() else {
            return;
        };
        let Some(tx) = conn.tx.as_ref() else { return };
        loop {
            // The first request of a connection carries the writer schema and is sent alone:
            // if BigQuery refuses it, the schema may not be registered, so the next request
            // must carry it again, and nothing may have been pipelined behind it without one.
            if conn.schema_sent && !conn.primed {
                break;
            }
            let Some(mut req) = self.queue.pop_front() else {
                break;
            };
            req.with_schema = !conn.schema_sent;
            let schema = req.with_schema.then_some(&self.schema_bytes);
            // The stream name goes on every request: BigQuery needs it only on the first, the
            // emulator on all of them, and it is small next to the rows.
            let msg = append_request(&self.write_stream, schema, &req.payload, req.offset);
            req.sent_at = Some(Instant::now());
            req.attempts += 1;
            if tx.send(msg).is_err() {
                // The stream's sending side is gone; its end will show up as an event.
                self.queue.push_front(req);
                break;
            }
            conn.schema_sent = true;
            self.stats.requests_sent.fetch_add(1, Ordering::Relaxed);
            self.inflight.push_back(req);
        }
        metrics::gauge!(m::INFLIGHT_REQUESTS).set(self.inflight.len() as f64);
    }

    pub(super) fn open(&mut self) {
        // The old connection goes first, so that the open-connection count never holds both.
        self.conn = None;
        let (tx, rx) = mpsc::unbounded_channel();
        let client = self.client.clone();
        let ws = self.write_stream.clone();
        let h = tokio::spawn(async move {
            client
                .append_rows(
                    &ws,
                    tokio_stream::wrappers::UnboundedReceiverStream::new(rx),
                )
                .await
        });
        self.connections += 1;
        self.stats.connections.fetch_add(1, Ordering::Relaxed);
        self.attempt_failed = false;
        self.last_active = Instant::now();
        if self.connections > 1 && !std::mem::take(&mut self.idle_closed) {
            metrics::counter!(m::RECONNECTS_TOTAL).increment(1);
        }
        debug!(
            writer = self.id,
            queued = self.queue.len(),
            "opening AppendRows connection"
        );
        self.policy.connected();
        self.conn = Some(Conn {
            tx: Some(tx),
            state: ConnState::Opening(h),
            schema_sent: false,
            primed: false,
            drain_deadline: None,
            _mark: ConnectionMark::new(&self.stats),
        });
    }

    /// When the open connection is due to be closed for idling: nothing queued, sent or
    /// unresolved (nor a schema change running) since [`WriterOptions::idle_close`] ago.
    fn idle_close_at(&self) -> Option<Instant> {
        let idle = self.conn.as_ref()?.tx.is_some()
            && (self.queue.is_empty() && self.inflight.is_empty() && self.batches.is_empty())
            && self.evolving.is_none();
        Some(self.last_active + self.opts.idle_close.filter(|_| idle)?)
    }

    pub(super) fn set_health(&self, ok: bool) {
        if *self.health.borrow() != ok {
            if ok {
                info!(stream = %self.write_stream, "BigQuery writer healthy again");
            }
            self.health.send_replace(ok);
            metrics::gauge!(m::HEALTHY).set(if ok { 1.0 } else { 0.0 });
        }
    }

    pub(super) fn backoff(&self) -> Duration {
        let exp = self.failures.saturating_sub(1).min(20);
        let d = self
            .opts
            .backoff_initial
            .saturating_mul(1u32 << exp)
            .min(self.opts.backoff_max);
        jitter(d)
    }

    /// A failed attempt: schedule the next one and update health.
    pub(super) fn failed(&mut self, info: &ErrorInfo, action: Action) {
        self.stats.failures.fetch_add(1, Ordering::Relaxed);
        if !self.attempt_failed {
            self.attempt_failed = true;
            self.failures = self.failures.saturating_add(1);
        }
        metrics::counter!(m::RETRIES_TOTAL, "code" => info.code_name()).increment(1);
        let fatal = matches!(
            action,
            Action::Fatal | Action::AlreadyExists | Action::OutOfRange
        );
        let delay = if fatal {
            metrics::counter!(m::FATAL_ERRORS_TOTAL, "code" => info.code_name()).increment(1);
            warn!(stream = %self.write_stream, error = %info, "BigQuery refuses the writer; unhealthy, retrying slowly, nothing is acknowledged");
            self.set_health(false);
            jitter(self.opts.fatal_retry_interval)
        } else {
            if self.failures >= self.opts.unhealthy_after {
                self.set_health(false);
            }
            if action == Action::SchemaMismatch {
                warn!(stream = %self.write_stream, error = %info, "table lacks columns of the writer's schema; adding them, then reconnecting");
                self.evolve();
            } else {
                warn!(stream = %self.write_stream, writer = self.id, error = %info, attempt = self.failures, "AppendRows failed; retrying");
            }
            self.backoff()
        };
        let at = Instant::now() + delay;
        self.retry_at = Some(self.retry_at.map_or(at, |t| t.max(at)));
    }

    /// Starts bringing the table up to the writer's schema (once at a time).
    pub(super) fn evolve(&mut self) {
        if self.evolving.is_some() {
            return;
        }
        if let Some(e) = self.policy.evolution() {
            let tables = e.tables.clone();
            let spec = e.spec.clone();
            self.evolving = Some(tokio::spawn(
                async move { tables.ensure_table(&spec).await },
            ));
        }
    }

    pub(super) fn evolved(
        &mut self,
        r: Result<Result<EnsureReport, TableError>, tokio::task::JoinError>,
    ) {
        self.evolving = None;
        match r {
            Ok(Ok(report)) => {
                info!(stream = %self.write_stream, added = ?report.added_columns, "table schema updated; reconnecting");
                // Columns were just added: reconnect without waiting out the backoff. Nothing was
                // missing: BigQuery still serves an older schema (it can for minutes after a
                // change); keep backing off.
                if !report.added_columns.is_empty() {
                    self.retry_at = None;
                }
            }
            Ok(Err(e)) if e.is_config_error() => {
                warn!(stream = %self.write_stream, error = %e, "cannot bring the table up to the writer's schema; unhealthy, retrying slowly");
                metrics::counter!(m::FATAL_ERRORS_TOTAL, "code" => "SCHEMA").increment(1);
                self.set_health(false);
                let at = Instant::now() + jitter(self.opts.fatal_retry_interval);
                self.retry_at = Some(self.retry_at.map_or(at, |t| t.max(at)));
            }
            Ok(Err(e)) => {
                warn!(stream = %self.write_stream, error = %e, "adding columns failed; will retry")
            }
            Err(e) => warn!(error = %e, "schema update task failed; will retry"),
        }
    }

    /// Stop sending on this connection; collect the answers to what was sent, then reconnect.
    pub(super) fn begin_drain(&mut self) {
        if let Some(c) = self.conn.as_mut() {
            if c.tx.take().is_some() {
                debug!(
                    writer = self.id,
                    inflight = self.inflight.len(),
                    "half-closing the AppendRows connection"
                );
                c.drain_deadline = Some(Instant::now() + self.opts.drain_timeout);
            }
        }
    }

    /// The connection is gone: everything un-answered is re-sent, first, on the next one.
    pub(super) fn lose_connection(&mut self) {
        self.conn = None;
        while let Some(r) = self.inflight.pop_back() {
            self.requeue(r);
        }
        metrics::gauge!(m::INFLIGHT_REQUESTS).set(0.0);
    }

    pub(super) fn on_event(&mut self, ev: ConnEvent) {
        debug!(
            writer = self.id,
            event = ev.kind(),
            inflight = self.inflight.len(),
            queued = self.queue.len(),
            batches = self.batches.len(),
            "AppendRows connection event"
        );
        match ev {
            ConnEvent::Opened(Ok(stream)) => {
                if let Some(c) = self.conn.as_mut() {
                    c.state = ConnState::Open(Box::new(stream));
                }
            }
            ConnEvent::Opened(Err(status)) | ConnEvent::Message(Err(status)) => {
                let info = ErrorInfo::from_status(&status);
                let lost = self.policy.connection_failed(&info);
                if lost == Lost::SplitLargest {
                    self.split_largest_inflight();
                }
                self.lose_connection();
                if let Lost::Stop(reason) = lost {
                    self.stop(reason);
                    return;
                }
                self.failed(&info, info.action());
            }
            ConnEvent::Message(Ok(None)) => {
                let clean = self.inflight.is_empty();
                self.lose_connection();
                if !clean {
                    let info = ErrorInfo {
                        code: tonic::Code::Unavailable,
                        message: "AppendRows stream ended with requests unanswered".into(),
                        storage_code: None,
                    };
                    self.failed(&info, Action::Retry);
                }
            }
            ConnEvent::Message(Ok(Some(resp))) => self.on_response(resp),
        }
    }

    pub(super) fn on_response(&mut self, resp: AppendRowsResponse) {
        self.last_active = Instant::now();
        let Some(req) = self.inflight.pop_front() else {
            warn!("AppendRows response without a request; reconnecting");
            self.begin_drain();
            return;
        };
        metrics::gauge!(m::INFLIGHT_REQUESTS).set(self.inflight.len() as f64);
        if let Some(t) = req.sent_at {
            metrics::histogram!(m::APPEND_LATENCY_SECONDS).record(t.elapsed().as_secs_f64());
        }
        if req.with_schema {
            let ok = resp.row_errors.is_empty()
                && matches!(
                    resp.response,
                    Some(append_rows_response::Response::AppendResult(_))
                );
            if let Some(c) = self.conn.as_mut() {
                // Accepted: the schema is registered; refused: the next request carries it.
                c.primed = ok;
                c.schema_sent = ok;
            }
        }
        if resp.updated_schema.is_some() {
            info!(stream = %self.write_stream, "BigQuery reports an updated table schema; reconnecting");
            self.evolve();
            self.begin_drain();
        }
        let verdict = self.policy.answer(&req, &resp);
        self.apply(req, verdict);
    }
}

/// A delay between d/2 and d.
pub(super) fn jitter(d: Duration) -> Duration {
    let half = d / 2;
    half + half.mul_f64(fastrand::f64())
}

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
        self.last_active = Instant::now();
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jitter_stays_within_half_and_full() {
        for _ in 0..100 {
            let j = jitter(Duration::from_millis(1000));
            assert!(
                j >= Duration::from_millis(500) && j <= Duration::from_millis(1000),
                "{j:?}"
            );
        }
    }
}
