//! The BigQuery sink: the runtime's [`Sink`] over a small pool of Storage Write writers
//! ([`crate::sink::bigquery::writer::AppendWriter`], each at most one AppendRows connection on
//! the table's `_default` stream, at-least-once; `connections` of them at most).
//!
//! At start-up the table is created or migrated (add-only columns, partition expiration); a
//! changed column type or a missing dataset is a configuration error. Submitting a batch encodes
//! it and queues it on the writer the pool's rule picks ([`crate::sink::bigquery::pool`]): the
//! first open one with room in its share of `max_inflight_bytes`, else a closed one (a backlog
//! opens another connection), else the first to have room, waiting for it. Writers close their
//! connection when idle, so an idle sink holds one connection, then none, and a backlog up to
//! `connections`. The acknowledgement resolves, asynchronously, when BigQuery
//! accepted every row except those it refused for good, which come back in the [`WriteReport`]
//! to be dead-lettered. Each writer pipelines its requests, so several batches are in flight per
//! connection and across connections; the default stream gives no order between requests, and
//! at-least-once needs none. Transient failures are retried inside the writer, so during an
//! outage an acknowledgement simply waits (readiness follows the writers' health).

use crate::batch::Batch;
use crate::config::{BigQuerySink as BigQueryConfig, Config};
use crate::sink::bigquery::pool::{Elastic, Lane, Route};
use crate::sink::bigquery::writer::{Encoded, Pending};
use crate::sink::bigquery::{
    self, AppendWriter, StorageClient, TableManager, TableSpec, WriterError,
};
use crate::sink::{
    Progress, RejectedRow, Sink, SinkError, SinkErrorKind, StartError, SubmitFuture, WriteReport,
};
use crate::table::{TableLayout, KAFKA_COLUMNS};
use arrow_array::{ArrayRef, Int64Array, RecordBatch};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use std::sync::Arc;

/// Writes batches into the model's table.
pub struct BigQueryTableSink {
    /// The pool: at most one AppendRows connection each, opened and closed as the rule says.
    writers: Vec<AppendWriter>,
    /// The rule that picks a batch's writer.
    pool: Elastic,
    /// Whether every writer is healthy.
    health: tokio::sync::watch::Receiver<bool>,
    /// With `kafka_columns`: the schema with `_kafka_partition` and `_kafka_offset` appended.
    kafka_schema: Option<SchemaRef>,
}

/// The layout's schema plus the two source-position columns.
fn with_kafka_columns(schema: &SchemaRef) -> SchemaRef {
    let mut fields: Vec<Field> = schema.fields().iter().map(|f| f.as_ref().clone()).collect();
    for name in KAFKA_COLUMNS {
        fields.push(Field::new(name, DataType::Int64, true));
    }
    Arc::new(Schema::new(fields))
}

/// The batch's rows with each row's source partition and offset appended.
fn add_kafka_columns(batch: &Batch, schema: &SchemaRef) -> Result<RecordBatch, SinkError> {
    let rows = batch.rows();
    let mut partitions = Vec::with_capacity(rows);
    let mut offsets = Vec::with_capacity(rows);
    let mut start = 0usize;
    for s in &batch.rows_by_source {
        let end = s.end_row as usize;
        partitions.extend(std::iter::repeat_n(i64::from(s.partition), end - start));
        offsets.extend(std::iter::repeat_n(s.offset, end - start));
        start = end;
    }
    let mut columns = batch.records.columns().to_vec();
    columns.push(Arc::new(Int64Array::from(partitions)) as ArrayRef);
    columns.push(Arc::new(Int64Array::from(offsets)) as ArrayRef);
    RecordBatch::try_new(Arc::clone(schema), columns)
        .map_err(|e| SinkError::new(SinkErrorKind::Encode, false, e.to_string()))
}

/// The rows of `batch` as written: with the source-position columns appended when the sink
/// has `kafka_columns` (`kafka_schema`), else as they are.
pub(crate) fn rows_to_write(
    batch: &Batch,
    kafka_schema: Option<&SchemaRef>,
) -> Result<RecordBatch, SinkError> {
    match kafka_schema {
        Some(schema) => add_kafka_columns(batch, schema),
        None => Ok(batch.records.clone()),
    }
}

/// What both BigQuery sinks start from.
pub(crate) struct Prepared {
    pub(crate) client: StorageClient,
    pub(crate) tables: TableManager,
    pub(crate) spec: TableSpec,
    /// The schema rows are written with: the layout's, plus the source-position columns with
    /// `kafka_columns`.
    pub(crate) schema: SchemaRef,
    /// `Some(schema)` with `kafka_columns`.
    pub(crate) kafka_schema: Option<SchemaRef>,
}

/// Connects and creates or migrates the table (inside a tokio runtime): the start-up shared by
/// [`BigQueryTableSink`] and the exactly-once sink.
pub(crate) async fn prepare(cfg: &Config, sink: &BigQueryConfig) -> Result<Prepared, StartError> {
    let (client, tables) = bigquery::connect(sink)
        .await
        .map_err(|e| StartError::Config(e.to_string()))?;
    let spec = TableSpec::from_config(cfg, sink).map_err(|e| StartError::Config(e.to_string()))?;
    match tables.ensure_table(&spec).await {
        Ok(report) => {
            tracing::info!(table = %spec.table.dotted(), report = ?report, "BigQuery table ready")
        }
        Err(e) if e.is_config_error() => return Err(StartError::Config(e.to_string())),
        Err(e) => return Err(StartError::Unavailable(e.to_string())),
    }
    let layout = Arc::clone(&TableLayout::from_config(cfg).arrow);
    let kafka_schema = sink.kafka_columns.then(|| with_kafka_columns(&layout));
    Ok(Prepared {
        client,
        tables,
        spec,
        schema: kafka_schema.clone().unwrap_or(layout),
        kafka_schema,
    })
}

impl BigQueryTableSink {
    /// Connects, creates or migrates the table and starts the writer (inside a tokio runtime).
    pub async fn start(cfg: &Config, sink: &BigQueryConfig) -> Result<Self, StartError> {
        let p = prepare(cfg, sink).await?;
        let pool = Elastic::new(sink.connections as usize);
        let writers = lane_options(bigquery::writer_options(sink), &pool)
            .map(|opts| {
                AppendWriter::start_evolving(
                    p.client.own_connection(),
                    p.tables.clone(),
                    p.spec.clone(),
                    Arc::clone(&p.schema),
                    opts,
                )
                .map_err(|e| StartError::Config(e.to_string()))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(BigQueryTableSink {
            health: all_healthy(&writers),
            writers,
            pool,
            kafka_schema: p.kafka_schema,
        })
    }

    /// A sink on `table`'s default stream through at most `pool.max` connections sharing
    /// `opts.max_inflight_bytes`, without table management (the table must exist with the
    /// layout's columns): for measurements against a stand-in AppendRows server
    /// (`examples/bq_pipeline.rs`) and for tests, which shorten the pool's idle periods.
    pub fn on_default_stream(
        client: &StorageClient,
        table: &bigquery::TableRef,
        schema: SchemaRef,
        opts: bigquery::WriterOptions,
        pool: Elastic,
    ) -> Result<Self, WriterError> {
        let writers = lane_options(opts, &pool)
            .map(|opts| {
                AppendWriter::start(client.own_connection(), table, Arc::clone(&schema), opts)
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(BigQueryTableSink {
            health: all_healthy(&writers),
            writers,
            pool,
            kafka_schema: None,
        })
    }

    /// Encoded bytes of the requests in flight or queued, over the pool: at most
    /// `max_inflight_bytes` (each writer's share at least one request). This is what pipelining
    /// adds to the memory formula (docs/reliability.md §1.2).
    pub fn pipelined_bytes(&self) -> usize {
        self.writers.iter().map(AppendWriter::inflight_bytes).sum()
    }

    /// The most connections the pool opens (`connections`).
    pub fn connections(&self) -> usize {
        self.writers.len()
    }

    /// AppendRows connections open now (opening and half-closed ones included).
    pub fn connections_open(&self) -> usize {
        self.writers.iter().filter(|w| w.is_connected()).count()
    }

    /// Where `records` go, by the pool's rule, and the records encoded.
    fn route(&self, records: RecordBatch) -> Result<(Route, Encoded), SinkError> {
        let encoded = self.writers[0].encode(records).map_err(sink_error)?;
        let lanes: Vec<Lane> = self
            .writers
            .iter()
            .map(|w| Lane {
                open: w.is_connected() || w.inflight_bytes() > 0,
                inflight: w.inflight_bytes(),
                capacity: w.capacity(),
            })
            .collect();
        let route = self.pool.route(&lanes, encoded.bytes());
        if let Route::Open(i) = route {
            tracing::debug!(
                lane = i,
                open = lanes.iter().filter(|l| l.open).count(),
                "every open AppendRows connection is full; opening another"
            );
        }
        Ok((route, encoded))
    }

    /// Queues `encoded` on the first writer to have room for it (every connection is open and
    /// full): whichever connection BigQuery answers first takes the next batch, as round-robin
    /// over equally full connections did.
    async fn submit_to_first_room(&self, encoded: Encoded) -> Result<Pending, WriterError> {
        let bytes = encoded.bytes();
        let mut rooms: Vec<_> = self
            .writers
            .iter()
            .map(|w| Box::pin(w.room(bytes)))
            .collect();
        let (i, room) = std::future::poll_fn(|cx| {
            for (i, room) in rooms.iter_mut().enumerate() {
                if let std::task::Poll::Ready(r) = std::future::Future::poll(room.as_mut(), cx) {
                    return std::task::Poll::Ready((i, r));
                }
            }
            std::task::Poll::Pending
        })
        .await;
        // The other writers' waits are dropped here, taking nothing.
        drop(rooms);
        self.writers[i].submit_in(encoded, room?)
    }
}

/// Each lane's writer options: its share of the sink's in-flight bound (each writer still
/// admits a whole request) and its idle period.
fn lane_options(
    opts: bigquery::WriterOptions,
    pool: &Elastic,
) -> impl Iterator<Item = bigquery::WriterOptions> + '_ {
    let share = (opts.max_inflight_bytes / pool.max).max(opts.max_request_bytes);
    (0..pool.max).map(move |i| bigquery::WriterOptions {
        max_inflight_bytes: share,
        idle_close: Some(pool.idle_close(i)),
        ..opts.clone()
    })
}

/// A watch that is true while every writer of the pool is healthy (checked every 200 ms, as
/// readiness is read at a human pace).
fn all_healthy(writers: &[AppendWriter]) -> tokio::sync::watch::Receiver<bool> {
    let mut watches: Vec<_> = writers.iter().map(AppendWriter::health).collect();
    if watches.len() == 1 {
        return watches.remove(0);
    }
    let (tx, rx) = tokio::sync::watch::channel(true);
    tokio::spawn(async move {
        while !tx.is_closed() {
            tx.send_replace(watches.iter().all(|w| *w.borrow()));
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
    });
    rx
}

/// A writer error as a sink error (also used by the exactly-once sink).
pub(crate) fn sink_error(e: WriterError) -> SinkError {
    match e {
        WriterError::Closed => SinkError::new(SinkErrorKind::Unavailable, true, e.to_string()),
        WriterError::SchemaMismatch | WriterError::Encode(_) => {
            SinkError::new(SinkErrorKind::Encode, false, e.to_string())
        }
        WriterError::Stopped(_) | WriterError::RowTooLarge(_) => {
            SinkError::new(SinkErrorKind::Rejected, false, e.to_string())
        }
    }
}

impl Sink for BigQueryTableSink {
    fn name(&self) -> &'static str {
        "bigquery"
    }

    /// Queues the batch on the writer the pool's rule picks (waiting while its share of the
    /// in-flight bytes is used up, when every connection is open and full); the
    /// acknowledgement resolves when BigQuery answered for every row.
    fn submit(&mut self, batch: Arc<Batch>) -> SubmitFuture<'_> {
        Box::pin(async move {
            let records = rows_to_write(&batch, self.kafka_schema.as_ref())?;
            let pending = match self.route(records)? {
                (Route::Use(i) | Route::Open(i), encoded) => self.writers[i].submit(encoded).await,
                (Route::Wait, encoded) => self.submit_to_first_room(encoded).await,
            }
            .map_err(sink_error)?;
            let ack: crate::sink::Acknowledgement = Box::pin(async move {
                let outcome = pending.await.map_err(sink_error)?;
                Ok(Progress::Written(WriteReport {
                    rejected: outcome
                        .rejected
                        .into_iter()
                        .map(|r| RejectedRow {
                            row: r.index,
                            code: r.reason.as_str(),
                            message: r.message,
                        })
                        .collect(),
                    commit_metadata: Vec::new(),
                }))
            });
            Ok(ack)
        })
    }

    fn health(&self) -> Option<tokio::sync::watch::Receiver<bool>> {
        Some(self.health.clone())
    }
}
