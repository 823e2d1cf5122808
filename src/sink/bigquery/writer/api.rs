//! The writer's public face: [`AppendWriter`] and the [`Pending`] outcome of one batch (their
//! types are in `contract`).

use super::committed_stream::CommittedStream;
use super::contract::{AppendOutcome, WriterError, WriterOptions, WriterStats};
use super::default_stream::DefaultStream;
use super::driver::Driver;
use super::policy::Evolution;
use super::policy::StreamPolicy;
use super::request::{prepare, Job, Prepared};
use crate::sink::bigquery::client::StorageClient;
use crate::sink::bigquery::encode::{payload_budget, schema_bytes};
use crate::sink::bigquery::metrics as m;
use crate::sink::bigquery::table::{TableManager, TableSpec};
use crate::sink::bigquery::validate::{now_micros, PartitionWindow};
use crate::sink::bigquery::TableRef;
use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot, watch, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinHandle;

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

/// A batch encoded into requests by [`AppendWriter::encode`], to be queued with
/// [`AppendWriter::submit`] on that writer or on another writer of the same stream and schema
/// (a pool chooses its writer by the encoded size).
#[derive(Debug)]
pub struct Encoded(Prepared);

impl Encoded {
    /// Encoded bytes: what the batch takes of a writer's `max_inflight_bytes`.
    pub fn bytes(&self) -> usize {
        self.0.bytes
    }
}

/// Room taken in one writer's in-flight byte budget by [`AppendWriter::room`], for
/// [`AppendWriter::submit_in`] of that writer.
#[derive(Debug)]
pub struct Room(OwnedSemaphorePermit);

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
    /// The stream refuses a batch holding a row alone over the size cap (see
    /// [`StreamPolicy::oversized_row_fails_batch`]).
    oversized_row_fails_batch: bool,
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
        let policy = Box::new(DefaultStream::new(None));
        Self::start_inner(client, stream, policy, schema, opts)
    }

    /// Starts a writer on an existing COMMITTED stream `stream` (see
    /// [`crate::sink::bigquery::checkpoint`]), appending at explicit offsets from `next_offset` on. Batches
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
        let policy = Box::new(CommittedStream::new(partition, next_offset));
        Self::start_inner(client, stream, policy, schema, opts)
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
        let policy = Box::new(DefaultStream::new(Some(Evolution { tables, spec })));
        Self::start_inner(client, stream, policy, schema, opts)
    }

    fn start_inner(
        client: StorageClient,
        write_stream: String,
        policy: Box<dyn StreamPolicy>,
        schema: SchemaRef,
        opts: WriterOptions,
    ) -> Result<Self, WriterError> {
        let oversized_row_fails_batch = policy.oversized_row_fails_batch();
        let partition_window = opts.partition_window;
        let schema_bytes = schema_bytes(&schema)?;
        let payload_budget = payload_budget(opts.max_request_bytes, &write_stream, &schema_bytes);
        metrics::gauge!(m::HEALTHY).set(1.0);
        let max_inflight = opts.max_inflight_bytes.clamp(1, u32::MAX as usize);
        let (driver, jobs_tx, health, stats) =
            Driver::new(client, write_stream, policy, schema_bytes, opts);
        Ok(AppendWriter {
            jobs: Some(jobs_tx),
            budget: Arc::new(Semaphore::new(max_inflight)),
            max_inflight,
            payload_budget,
            schema,
            health,
            stats,
            oversized_row_fails_batch,
            partition_window,
            task: Some(tokio::spawn(driver.run())),
        })
    }

    /// Encodes `batch`, waits until the in-flight byte budget admits it, and queues it. The
    /// returned [`Pending`] resolves when every row is accepted or reported rejected.
    pub async fn append(&self, batch: RecordBatch) -> Result<Pending, WriterError> {
        self.submit(self.encode(batch)?).await
    }

    /// Encodes `batch` into requests (the first half of [`Self::append`]).
    pub fn encode(&self, batch: RecordBatch) -> Result<Encoded, WriterError> {
        if batch.schema().fields() != self.schema.fields() {
            return Err(WriterError::SchemaMismatch);
        }
        let prepared = prepare(
            batch,
            self.partition_window.as_ref(),
            now_micros(),
            self.payload_budget,
        )?;
        Ok(Encoded(prepared))
    }

    /// Waits until the in-flight byte budget admits `encoded`, and queues it (the second half
    /// of [`Self::append`]).
    pub async fn submit(&self, encoded: Encoded) -> Result<Pending, WriterError> {
        let room = self.room(encoded.bytes()).await?;
        self.submit_in(encoded, room)
    }

    /// Waits for room for a batch of `bytes` encoded bytes in the in-flight byte budget and
    /// takes it (dropping the future before it is ready takes nothing), so that a pool can wait
    /// on several writers at once and use the first that has room.
    pub fn room(
        &self,
        bytes: usize,
    ) -> impl Future<Output = Result<Room, WriterError>> + Send + 'static {
        let permits = bytes.clamp(1, self.max_inflight) as u32;
        let budget = Arc::clone(&self.budget);
        async move {
            let permit = budget.acquire_many_owned(permits).await;
            permit.map(Room).map_err(|_| WriterError::Closed)
        }
    }

    /// Queues `encoded` in `room` (taken for it with [`Self::room`]).
    ///
    /// # Panics
    /// If `room` was taken in another writer's budget.
    pub fn submit_in(&self, encoded: Encoded, room: Room) -> Result<Pending, WriterError> {
        assert!(
            Arc::ptr_eq(room.0.semaphore(), &self.budget),
            "room taken in another writer's budget"
        );
        let prepared = encoded.0;
        let permit = room.0;
        if self.oversized_row_fails_batch {
            if let Some(i) = prepared.first_oversized {
                return Err(WriterError::RowTooLarge(i));
            }
        }
        let (done, rx) = oneshot::channel();
        let job = Job {
            rows: prepared.rows,
            written: prepared.written,
            bytes: prepared.bytes,
            reqs: prepared.reqs,
            rejected: prepared.rejected,
            permit,
            done,
        };
        let jobs = self.jobs.as_ref().ok_or(WriterError::Closed)?;
        jobs.send(job).map_err(|_| WriterError::Closed)?;
        Ok(Pending(rx))
    }

    /// Encoded bytes admitted and not yet resolved (the requests in flight and queued): at most
    /// `max_inflight_bytes`.
    pub fn inflight_bytes(&self) -> usize {
        self.max_inflight
            .saturating_sub(self.budget.available_permits())
    }

    /// The writer's `max_inflight_bytes`: a batch is admitted once its encoded bytes (at most
    /// this many) fit beside [`Self::inflight_bytes`].
    pub fn capacity(&self) -> usize {
        self.max_inflight
    }

    /// True while an AppendRows connection is open (or being opened, or half-closed and not yet
    /// ended).
    pub fn is_connected(&self) -> bool {
        self.stats
            .connected
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Counters (connections, requests, failures).
    pub fn stats(&self) -> &WriterStats {
        &self.stats
    }

    /// The most bytes of rows one request of this writer carries ([`Self::append`] splits a
    /// batch into requests of at most this; a row alone over it is refused).
    pub fn payload_budget(&self) -> usize {
        self.payload_budget
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
