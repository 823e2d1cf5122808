//! The writer: one persistent bidirectional AppendRows stream per table (the `_default`
//! stream, at-least-once) or per partition (a COMMITTED stream with explicit offsets,
//! exactly-once: see [`super::exactly_once`]), fed from a channel, many requests in flight,
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

use super::client::StorageClient;
use super::encode::{append_request, payload_budget, schema_bytes, split_to_fit};
use super::error::{Action, ErrorInfo};
use super::metrics as m;
use super::proto::{append_rows_response, AppendRowsRequest, AppendRowsResponse};
use super::table::{EnsureReport, TableError, TableManager, TableSpec};
use super::validate::{now_micros, PartitionWindow};
use super::TableRef;
use arrow_array::{RecordBatch, UInt32Array};
use arrow_schema::{ArrowError, SchemaRef};
use bytes::Bytes;
use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot, watch, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tonic::codec::Streaming;
use tonic::Status;
use tracing::{debug, info, warn};

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
    /// Index of the row in the batch given to [`AppendWriter::append`].
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

/// The caller's handle on one appended batch; resolves as described in the module docs.
#[derive(Debug)]
pub struct Pending(oneshot::Receiver<Result<AppendOutcome, String>>);

impl Future for Pending {
    type Output = Result<AppendOutcome, WriterError>;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.0).poll(cx).map(|r| match r {
            Ok(Ok(outcome)) => Ok(outcome),
            Ok(Err(reason)) => Err(WriterError::Stopped(reason)),
            Err(_) => Err(WriterError::Closed),
        })
    }
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
}

/// Handle on the writer task of one table. Cheap operations only; drop it to stop the task.
#[derive(Debug)]
pub struct AppendWriter {
    jobs: Option<mpsc::UnboundedSender<Job>>,
    budget: Arc<Semaphore>,
    max_inflight: usize,
    payload_budget: usize,
    schema: SchemaRef,
    health: watch::Receiver<bool>,
    stats: Arc<WriterStats>,
    exactly_once: bool,
    partition_window: Option<PartitionWindow>,
    task: Option<JoinHandle<()>>,
}

impl AppendWriter {
    /// Starts the writer task for `table`'s default stream. Connects lazily, on the first batch.
    pub fn start(
        client: StorageClient,
        table: &TableRef,
        schema: SchemaRef,
        opts: WriterOptions,
    ) -> Result<Self, WriterError> {
        let stream = table.default_stream();
        Self::start_inner(client, stream, Mode::Default, schema, opts, None)
    }

    /// Starts a writer on an existing COMMITTED stream `stream` (see
    /// [`super::exactly_once`]), appending at explicit offsets from `next_offset` on. Batches
    /// must be appended in row order (one task per partition). `partition` labels the offset
    /// metric.
    pub fn start_committed(
        client: StorageClient,
        stream: String,
        next_offset: i64,
        partition: i32,
        schema: SchemaRef,
        opts: WriterOptions,
    ) -> Result<Self, WriterError> {
        let mode = Mode::Committed {
            partition,
            next_offset,
        };
        Self::start_inner(client, stream, mode, schema, opts, None)
    }

    /// Like [`Self::start`], and when BigQuery reports that the table lacks columns of the
    /// writer's schema (`SCHEMA_MISMATCH_EXTRA_FIELDS`) or sends an `updated_schema`, the writer
    /// runs [`TableManager::ensure_table`] with `spec` (adding the columns) before it reconnects,
    /// without a restart. A configuration error found there (a changed column type) keeps the
    /// writer unhealthy and retrying slowly.
    pub fn start_evolving(
        client: StorageClient,
        tables: TableManager,
        spec: TableSpec,
        schema: SchemaRef,
        opts: WriterOptions,
    ) -> Result<Self, WriterError> {
        let stream = spec.table.default_stream();
        let evolution = Some(Evolution { tables, spec });
        Self::start_inner(client, stream, Mode::Default, schema, opts, evolution)
    }

    fn start_inner(
        client: StorageClient,
        write_stream: String,
        mode: Mode,
        schema: SchemaRef,
        opts: WriterOptions,
        evolution: Option<Evolution>,
    ) -> Result<Self, WriterError> {
        let exactly_once = matches!(mode, Mode::Committed { .. });
        let partition_window = opts.partition_window;
        let schema_bytes = schema_bytes(&schema)?;
        let payload_budget = payload_budget(opts.max_request_bytes, &write_stream, &schema_bytes);
        let (jobs_tx, jobs_rx) = mpsc::unbounded_channel();
        let (health_tx, health) = watch::channel(true);
        metrics::gauge!(m::HEALTHY).set(1.0);
        let max_inflight = opts.max_inflight_bytes.clamp(1, u32::MAX as usize);
        let stats = Arc::new(WriterStats::default());
        let driver = Driver {
            stats: Arc::clone(&stats),
            client,
            write_stream,
            schema_bytes,
            opts,
            jobs: jobs_rx,
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
            health: health_tx,
            evolution,
            evolving: None,
            mode,
            next_order: 0,
            stopped: None,
        };
        Ok(AppendWriter {
            jobs: Some(jobs_tx),
            budget: Arc::new(Semaphore::new(max_inflight)),
            max_inflight,
            payload_budget,
            schema,
            health,
            stats,
            exactly_once,
            partition_window,
            task: Some(tokio::spawn(driver.run())),
        })
    }

    /// Encodes `batch`, waits until the in-flight byte budget admits it, and queues it. The
    /// returned [`Pending`] resolves when every row is accepted or reported rejected.
    pub async fn append(&self, batch: RecordBatch) -> Result<Pending, WriterError> {
        if batch.schema().fields() != self.schema.fields() {
            return Err(WriterError::SchemaMismatch);
        }
        let rows = batch.num_rows();
        let mut rejected = Vec::new();
        // Rows BigQuery would refuse are reported now and never sent; `map` takes the rows
        // that remain back to their index in `batch`.
        let outside = match &self.partition_window {
            Some(w) => w.outside(&batch, now_micros()),
            None => Vec::new(),
        };
        let (work, map): (RecordBatch, Option<Arc<[u32]>>) = if outside.is_empty() {
            (batch, None)
        } else {
            for &index in &outside {
                rejected.push(RejectedRow {
                    index,
                    reason: RejectReason::OutsidePartitionRange,
                    message: "request_timestamp is outside the table's partition range (older than the partition expiration, or more than a year ahead)".into(),
                });
            }
            let keep: Vec<u32> = (0..rows)
                .filter(|i| !outside.contains(i))
                .map(|i| i as u32)
                .collect();
            let work =
                arrow_select::take::take_record_batch(&batch, &UInt32Array::from(keep.clone()))?;
            (work, Some(keep.into()))
        };
        let original = |i: usize| map.as_ref().map_or(i, |m| m[i] as usize);
        let written = work.num_rows();
        let split = split_to_fit(&work, self.payload_budget)?;
        let bytes: usize = split.pieces.iter().map(|p| p.payload.len()).sum();
        let permits = bytes.clamp(1, self.max_inflight) as u32;
        let permit = Arc::clone(&self.budget)
            .acquire_many_owned(permits)
            .await
            .map_err(|_| WriterError::Closed)?;
        if self.exactly_once {
            // Skipping a row here would break the row ↔ message mapping resume relies on.
            if let Some(&i) = split.oversized.first() {
                return Err(WriterError::RowTooLarge(original(i)));
            }
        }
        let (done, rx) = oneshot::channel();
        rejected.extend(split.oversized.iter().map(|&i| RejectedRow {
            index: original(i),
            reason: RejectReason::TooLarge,
            message: format!(
                "the row alone exceeds max_request_bytes ({} payload bytes)",
                self.payload_budget
            ),
        }));
        let reqs = split
            .pieces
            .into_iter()
            .map(|p| Req {
                batch: 0,
                pos: p.offset,
                rows: match &map {
                    None => RowMap::Range(p.offset),
                    Some(m) => RowMap::Indexed(m[p.offset..p.offset + p.batch.num_rows()].into()),
                },
                data: p.batch,
                payload: p.payload,
                sent_at: None,
                with_schema: false,
                offset: None,
                order: 0,
                attempts: 0,
            })
            .collect();
        let job = Job {
            rows,
            written,
            bytes,
            reqs,
            rejected,
            permit,
            done,
        };
        let jobs = self.jobs.as_ref().ok_or(WriterError::Closed)?;
        jobs.send(job).map_err(|_| WriterError::Closed)?;
        Ok(Pending(rx))
    }

    /// Counters (connections, requests, failures).
    pub fn stats(&self) -> &WriterStats {
        &self.stats
    }

    /// True while BigQuery is reachable with the needed permissions (see [`Self::health`]).
    pub fn is_healthy(&self) -> bool {
        *self.health.borrow()
    }

    /// Health updates: false after `unhealthy_after` consecutive failed attempts or at once on a
    /// permission / not-found / authentication error; true again after an accepted append.
    pub fn health(&self) -> watch::Receiver<bool> {
        self.health.clone()
    }

    /// Stops taking batches and waits up to `deadline` for the queued ones to resolve. Returns
    /// true when everything was resolved; otherwise the task is stopped and the unresolved
    /// batches fail with [`WriterError::Closed`].
    pub async fn close(mut self, deadline: Duration) -> bool {
        self.jobs = None;
        let Some(mut task) = self.task.take() else {
            return true;
        };
        match tokio::time::timeout(deadline, &mut task).await {
            Ok(_) => true,
            Err(_) => {
                task.abort();
                false
            }
        }
    }
}

impl Drop for AppendWriter {
    fn drop(&mut self) {
        if let Some(t) = self.task.take() {
            t.abort();
        }
    }
}

/// Maps a request's rows to the rows of the caller's batch.
#[derive(Debug, Clone)]
enum RowMap {
    /// Row i is row `start + i`.
    Range(usize),
    /// Row i is row `v[i]`.
    Indexed(Arc<[u32]>),
}

impl RowMap {
    fn get(&self, i: usize) -> usize {
        match self {
            RowMap::Range(start) => start + i,
            RowMap::Indexed(v) => v[i] as usize,
        }
    }

    fn slice(&self, off: usize, len: usize) -> RowMap {
        match self {
            RowMap::Range(start) => RowMap::Range(start + off),
            RowMap::Indexed(v) => RowMap::Indexed(v[off..off + len].into()),
        }
    }
}

/// One request's worth of rows.
#[derive(Debug)]
struct Req {
    batch: u64,
    /// Position of the first row among the rows of its batch that are sent.
    pos: usize,
    rows: RowMap,
    data: RecordBatch,
    payload: Bytes,
    sent_at: Option<Instant>,
    /// Sent as the schema-carrying first request of its connection.
    with_schema: bool,
    /// Committed streams: the stream offset of the first row.
    offset: Option<i64>,
    /// Position in send order (the offset on committed streams, admission order otherwise).
    order: i64,
    /// Times sent.
    attempts: u32,
}

impl Req {
    fn n(&self) -> usize {
        self.data.num_rows()
    }

    /// Re-encodes the rows `[off, off+len)` as a new request.
    fn slice(&self, off: usize, len: usize) -> Result<Req, ArrowError> {
        let data = self.data.slice(off, len);
        let payload = super::encode::batch_bytes(&data)?;
        Ok(Req {
            batch: self.batch,
            pos: self.pos + off,
            rows: self.rows.slice(off, len),
            data,
            payload,
            sent_at: None,
            with_schema: false,
            offset: self.offset.map(|o| o + off as i64),
            order: self.order + if self.offset.is_some() { off as i64 } else { 0 },
            attempts: 0,
        })
    }

    /// Re-encodes the rows not in `drop` as a new request (None if none is left).
    fn without(&self, drop: &[usize]) -> Result<Option<Req>, ArrowError> {
        let keep: Vec<u32> = (0..self.n())
            .filter(|i| !drop.contains(i))
            .map(|i| i as u32)
            .collect();
        if keep.is_empty() {
            return Ok(None);
        }
        let data =
            arrow_select::take::take_record_batch(&self.data, &UInt32Array::from(keep.clone()))?;
        let payload = super::encode::batch_bytes(&data)?;
        let rows = RowMap::Indexed(
            keep.iter()
                .map(|&i| self.rows.get(i as usize) as u32)
                .collect(),
        );
        Ok(Some(Req {
            batch: self.batch,
            pos: self.pos,
            rows,
            data,
            payload,
            sent_at: None,
            with_schema: false,
            offset: self.offset,
            order: self.order,
            attempts: 0,
        }))
    }
}

/// A batch as handed to the driver.
struct Job {
    rows: usize,
    /// Rows to be sent (committed streams: the offsets they take).
    written: usize,
    bytes: usize,
    reqs: Vec<Req>,
    rejected: Vec<RejectedRow>,
    permit: OwnedSemaphorePermit,
    done: oneshot::Sender<Result<AppendOutcome, String>>,
}

impl std::fmt::Debug for Job {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Job")
            .field("rows", &self.rows)
            .field("requests", &self.reqs.len())
            .finish()
    }
}

/// A batch being written.
struct BatchState {
    rows: usize,
    bytes: usize,
    appended: usize,
    /// Requests of this batch not yet resolved.
    open: usize,
    rejected: Vec<RejectedRow>,
    stream_offsets: Option<std::ops::Range<i64>>,
    done: Option<oneshot::Sender<Result<AppendOutcome, String>>>,
    _permit: OwnedSemaphorePermit,
}

enum ConnState {
    Opening(JoinHandle<Result<Streaming<AppendRowsResponse>, Status>>),
    Open(Box<Streaming<AppendRowsResponse>>),
}

struct Conn {
    /// None once half-closed (draining).
    tx: Option<mpsc::UnboundedSender<AppendRowsRequest>>,
    state: ConnState,
    schema_sent: bool,
    /// A request carrying the schema was accepted on this connection.
    primed: bool,
    /// Committed streams: a request of this connection was refused, so later ones may be
    /// refused with OUT_OF_RANGE (a gap of our own making) and are re-sent in order.
    gap: bool,
    drain_deadline: Option<Instant>,
}

impl Drop for Conn {
    fn drop(&mut self) {
        if let ConnState::Opening(h) = &self.state {
            h.abort();
        }
    }
}

enum Wake {
    Evolved(Result<Result<EnsureReport, TableError>, tokio::task::JoinError>),
    Conn(ConnEvent),
    Job(Option<Job>),
    Retry,
    DrainTimeout,
    AnswerTimeout,
}

enum ConnEvent {
    Opened(Result<Streaming<AppendRowsResponse>, Status>),
    Message(Result<Option<AppendRowsResponse>, Status>),
}

async fn next_event(conn: &mut Conn) -> ConnEvent {
    match &mut conn.state {
        ConnState::Opening(h) => ConnEvent::Opened(match h.await {
            Ok(r) => r,
            Err(e) => Err(Status::internal(format!("append task failed: {e}"))),
        }),
        ConnState::Open(s) => ConnEvent::Message(s.message().await),
    }
}

/// Which kind of stream the driver writes.
#[derive(Debug, Clone, Copy)]
enum Mode {
    /// `_default`: at-least-once, no offsets.
    Default,
    /// A COMMITTED stream with explicit offsets (exactly-once).
    Committed {
        /// Kafka partition (metric label).
        partition: i32,
        /// Offset of the next row admitted.
        next_offset: i64,
    },
}

/// What the writer needs to add columns itself.
struct Evolution {
    tables: TableManager,
    spec: TableSpec,
}

type Evolving = JoinHandle<Result<EnsureReport, TableError>>;

struct Driver {
    mode: Mode,
    /// Admission counter for `Req::order` on the default stream.
    next_order: i64,
    /// Committed streams: why the writer stopped (it then resolves nothing more).
    stopped: Option<String>,
    evolution: Option<Evolution>,
    /// A running `ensure_table`; no connection is opened until it is done.
    evolving: Option<Evolving>,
    stats: Arc<WriterStats>,
    client: StorageClient,
    write_stream: String,
    schema_bytes: Bytes,
    opts: WriterOptions,
    jobs: mpsc::UnboundedReceiver<Job>,
    jobs_open: bool,
    batches: HashMap<u64, BatchState>,
    next_id: u64,
    /// Requests waiting to be sent on the current (or next) connection.
    queue: VecDeque<Req>,
    /// Requests sent on the current connection, oldest first, awaiting their responses.
    inflight: VecDeque<Req>,
    conn: Option<Conn>,
    /// No connection attempt before this instant.
    retry_at: Option<Instant>,
    /// Consecutive failed attempts (reset by an accepted append).
    failures: u32,
    connections: u64,
    /// The current connection attempt already counted as failed.
    attempt_failed: bool,
    health: watch::Sender<bool>,
}

impl Driver {
    async fn run(mut self) {
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
                }
            };
            match wake {
                Wake::Evolved(r) => self.evolved(r),
                Wake::Conn(ev) => self.on_event(ev),
                Wake::Job(Some(job)) => self.admit(job),
                Wake::Job(None) => self.jobs_open = false,
                Wake::Retry => self.retry_at = None,
                Wake::DrainTimeout => {
                    warn!(
                        unanswered = self.inflight.len(),
                        "BigQuery did not answer after half-close; dropping the connection and re-sending"
                    );
                    self.lose_connection();
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
    fn pump(&mut self) {
        if self.queue.is_empty() {
            return;
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

    fn open(&mut self) {
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
        if self.connections > 1 {
            metrics::counter!(m::RECONNECTS_TOTAL).increment(1);
        }
        debug!(stream = %self.write_stream, "opening AppendRows connection");
        self.conn = Some(Conn {
            tx: Some(tx),
            state: ConnState::Opening(h),
            schema_sent: false,
            primed: false,
            gap: false,
            drain_deadline: None,
        });
    }

    fn admit(&mut self, job: Job) {
        let id = self.next_id;
        self.next_id += 1;
        metrics::gauge!(m::INFLIGHT_BYTES).increment(job.bytes as f64);
        let stream_offsets = match &mut self.mode {
            Mode::Committed { next_offset, .. } => {
                let start = *next_offset;
                *next_offset += job.written as i64;
                Some(start..*next_offset)
            }
            Mode::Default => None,
        };
        self.batches.insert(
            id,
            BatchState {
                rows: job.rows,
                bytes: job.bytes,
                appended: 0,
                open: job.reqs.len(),
                rejected: job.rejected,
                stream_offsets: stream_offsets.clone(),
                done: Some(job.done),
                _permit: job.permit,
            },
        );
        for mut r in job.reqs {
            r.batch = id;
            match &stream_offsets {
                Some(range) => {
                    r.offset = Some(range.start + r.pos as i64);
                    r.order = range.start + r.pos as i64;
                }
                None => {
                    r.order = self.next_order;
                    self.next_order += 1;
                }
            }
            self.queue.push_back(r);
        }
        self.finish_if_done(id);
    }

    fn finish_if_done(&mut self, id: u64) {
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
            if let (Some(r), Mode::Committed { partition, .. }) = (&b.stream_offsets, self.mode) {
                metrics::gauge!(m::STREAM_OFFSET, "partition" => partition.to_string())
                    .set(r.end as f64);
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

    fn set_health(&self, ok: bool) {
        if *self.health.borrow() != ok {
            if ok {
                info!(stream = %self.write_stream, "BigQuery writer healthy again");
            }
            self.health.send_replace(ok);
            metrics::gauge!(m::HEALTHY).set(if ok { 1.0 } else { 0.0 });
        }
    }

    fn backoff(&self) -> Duration {
        let exp = self.failures.saturating_sub(1).min(20);
        let d = self
            .opts
            .backoff_initial
            .saturating_mul(1u32 << exp)
            .min(self.opts.backoff_max);
        jitter(d)
    }

    /// A failed attempt: schedule the next one and update health.
    fn failed(&mut self, info: &ErrorInfo, action: Action) {
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
                warn!(stream = %self.write_stream, error = %info, attempt = self.failures, "AppendRows failed; retrying");
            }
            self.backoff()
        };
        let at = Instant::now() + delay;
        self.retry_at = Some(self.retry_at.map_or(at, |t| t.max(at)));
    }

    /// Starts bringing the table up to the writer's schema (once at a time).
    fn evolve(&mut self) {
        if self.evolving.is_some() {
            return;
        }
        if let Some(e) = &self.evolution {
            let tables = e.tables.clone();
            let spec = e.spec.clone();
            self.evolving = Some(tokio::spawn(
                async move { tables.ensure_table(&spec).await },
            ));
        }
    }

    fn evolved(&mut self, r: Result<Result<EnsureReport, TableError>, tokio::task::JoinError>) {
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
    fn begin_drain(&mut self) {
        if let Some(c) = self.conn.as_mut() {
            if c.tx.take().is_some() {
                c.drain_deadline = Some(Instant::now() + self.opts.drain_timeout);
            }
        }
    }

    /// The connection is gone: everything un-answered is re-sent, first, on the next one.
    fn lose_connection(&mut self) {
        self.conn = None;
        while let Some(r) = self.inflight.pop_back() {
            self.requeue(r);
        }
        metrics::gauge!(m::INFLIGHT_REQUESTS).set(0.0);
    }

    fn on_event(&mut self, ev: ConnEvent) {
        match ev {
            ConnEvent::Opened(Ok(stream)) => {
                if let Some(c) = self.conn.as_mut() {
                    c.state = ConnState::Open(Box::new(stream));
                }
            }
            ConnEvent::Opened(Err(status)) | ConnEvent::Message(Err(status)) => {
                let info = ErrorInfo::from_status(&status);
                let action = info.action();
                if action == Action::Split && matches!(self.mode, Mode::Default) {
                    self.split_largest_inflight();
                }
                self.lose_connection();
                if matches!(self.mode, Mode::Committed { .. }) && committed_stops(&info, false) {
                    self.stop(format!("{info}"));
                    return;
                }
                self.failed(&info, action);
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

    fn on_response(&mut self, resp: AppendRowsResponse) {
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
        if matches!(self.mode, Mode::Committed { .. }) {
            self.on_committed_response(req, resp);
            return;
        }
        if !resp.row_errors.is_empty() {
            self.on_row_errors(req, &resp);
            return;
        }
        match resp.response {
            Some(append_rows_response::Response::AppendResult(_)) => self.accepted(req),
            Some(append_rows_response::Response::Error(status)) => {
                let info = ErrorInfo::from_rpc(&status);
                self.on_refused(req, info);
            }
            None => {
                let info = ErrorInfo {
                    code: tonic::Code::Unknown,
                    message: "AppendRows response with neither a result nor an error".into(),
                    storage_code: None,
                };
                self.on_refused(req, info);
            }
        }
    }

    fn accepted(&mut self, req: Req) {
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

    fn reject(&mut self, req: &Req, rows: impl IntoIterator<Item = (usize, RejectReason, String)>) {
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
    fn replace(&mut self, req: &Req, parts: Vec<Req>) {
        if let Some(b) = self.batches.get_mut(&req.batch) {
            b.open = b.open + parts.len() - 1;
        }
        for p in parts {
            self.requeue(p);
        }
        self.finish_if_done(req.batch);
    }

    fn halves(&self, req: &Req) -> Result<Vec<Req>, ArrowError> {
        let half = req.n() / 2;
        Ok(vec![req.slice(0, half)?, req.slice(half, req.n() - half)?])
    }

    fn on_row_errors(&mut self, req: Req, resp: &AppendRowsResponse) {
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

    fn on_refused(&mut self, req: Req, info: ErrorInfo) {
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

    /// Re-encoding rows that encoded fine before cannot fail in practice; if it does, the
    /// request goes back unchanged (never acknowledged).
    fn encode_failure(&mut self, req: Req, e: ArrowError) {
        warn!(error = %e, "re-encoding a refused request failed; re-sending it unchanged");
        self.requeue(req);
    }

    /// Puts a request back in send order (after any queued request of the same order).
    fn requeue(&mut self, req: Req) {
        let at = self.queue.partition_point(|q| q.order <= req.order);
        self.queue.insert(at, req);
    }

    /// Committed streams: the answer to one request.
    ///
    /// Rows are never dropped here: the stream's row count must stay a function of the
    /// messages. An ALREADY_EXISTS counts as success only for a re-send of the identical request
    /// (its first attempt landed and the answer was lost); OUT_OF_RANGE is expected only behind a
    /// request of the same connection that was refused (re-sent in order), otherwise it is a gap
    /// and stops the writer.
    fn on_committed_response(&mut self, req: Req, resp: AppendRowsResponse) {
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
            None => super::proto::rpc::Status {
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
    fn stop(&mut self, reason: String) {
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

    fn split_largest_inflight(&mut self) {
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

/// Committed streams: errors after which the writer must stop rather than retry. `resent`:
/// the request was sent before (only then may ALREADY_EXISTS be a lost answer).
fn committed_stops(info: &ErrorInfo, resent: bool) -> bool {
    use super::proto::storage_error::StorageErrorCode as S;
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

/// A delay between d/2 and d.
fn jitter(d: Duration) -> Duration {
    let half = d / 2;
    half + half.mul_f64(fastrand::f64())
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

    #[test]
    fn row_maps_compose() {
        let r = RowMap::Range(10);
        assert_eq!(r.get(3), 13);
        assert_eq!(r.slice(2, 5).get(0), 12);
        let ix = RowMap::Indexed(vec![1u32, 4, 9, 16].into());
        assert_eq!(ix.slice(1, 2).get(1), 9);
    }
}
