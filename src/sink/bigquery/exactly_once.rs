//! The BigQuery sink in `delivery: exactly_once`: one COMMITTED write stream per assigned Kafka
//! partition, rows appended at explicit stream offsets.
//!
//! The position of each partition's stream travels with the Kafka offset commit, in its
//! metadata ([`Checkpoint`]: stream name and the number of the stream's rows that belong to
//! messages before the committed offset). When a partition is (re)assigned, the pipeline reads
//! that checkpoint from the group's committed offsets and hands it over through
//! [`PartitionStarts`]; on the partition's first batch this sink finalizes the checkpoint's
//! stream (which fences any previous owner and returns its row count), skips exactly the replayed
//! rows that stream already holds beyond the checkpoint, and continues on a new stream — which it
//! first has the pipeline record in the group's commit ([`Registration`]), so that a crash
//! before the next ordinary commit cannot hide the new stream's rows from the next owner. A
//! partition that comes back to this sink, whose checkpoint names the stream it was writing and
//! whose length it knows, keeps that stream instead (no finalize, no new stream, no
//! registration); the first append of the new assignment confirms it, and until then the usual
//! path stays open (the `checkpoint` module's docs, "Kept stream"). Each
//! write reports, per partition, the checkpoint that goes with the batch's last offset; the
//! pipeline attaches it to the commit.
//!
//! Batches hold several partitions; they are split per partition (in row order), and a
//! partition's rows are appended in batch order (the sink task is sequential). Rows BigQuery
//! would refuse (outside the table's partition range) and rows alone over a request's size are
//! refused here, before the skip and before anything is sent, and dead-lettered by the
//! pipeline: the stream holds only the rows kept, which is what a resume's skip counts. (The
//! writer's own range check is off for these streams: rows it dropped after the skip would
//! shift the stream's rows against the messages, and a batch it reported with refused rows,
//! after the rest had landed, was retried and landed again.) A refusal anyway, a gap or a
//! fenced stream stops that partition without acknowledging (see `docs/bigquery.md` for the
//! guarantee and its limits).

use super::readiness::Readiness;
use crate::batch::Batch;
use crate::commit::Partition;
use crate::config::{BigQuerySink as BigQueryConfig, Config};
use crate::sink::bigquery::checkpoint::{kept_stream_skip, resume_partition, Checkpoint};
use crate::sink::bigquery::validate::{self, PartitionWindow};
use crate::sink::bigquery::{self, AppendWriter, StorageClient, TableRef, WriterOptions};
use crate::sink::{
    RejectedRow, Sink, SinkError, SinkErrorKind, StreamCheckpoint, SubmitFuture, WriteReport,
};
use arrow_array::{RecordBatch, UInt32Array};
use arrow_schema::SchemaRef;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// A new stream to record in the group's offset commit before any row goes into it: the
/// pipeline, which owns the consumer, commits `offset` (the first offset of the partition's
/// first batch in this assignment: where it was positioned) with `metadata` and answers through
/// `done`.
#[derive(Debug)]
pub struct Registration {
    /// The partition.
    pub partition: Partition,
    /// The assignment epoch the stream was opened for.
    pub epoch: u64,
    /// The partition's first offset in the batch that opened the stream (or that moves the
    /// partition window's day).
    pub offset: i64,
    /// Commit exactly at `offset` or not at all ([`Registered::Behind`]): a checkpoint that
    /// moves the window's day holds only where no row before it is still unacknowledged.
    pub exact: bool,
    /// The checkpoint `{new stream, 0, rows to skip}`.
    pub metadata: String,
    /// The answer.
    pub done: tokio::sync::oneshot::Sender<Registered>,
}

/// How a [`Registration`] ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Registered {
    /// Committed: rows may go into the stream.
    Committed,
    /// The partition is no longer ours in that epoch: its rows are not ours to write.
    Stale,
    /// The commit failed (retry later).
    Failed(String),
    /// `exact`, but earlier messages of the partition are not acknowledged yet (by this sink
    /// or another): nothing was committed; ask again once they are.
    Behind,
}

/// Hands a [`Registration`] to the pipeline; false when the pipeline is gone.
pub type Registrar = Box<dyn Fn(Registration) -> bool + Send + Sync>;

/// What the pipeline and this sink share.
#[derive(Default)]
pub struct Handoff {
    /// Per partition: the assignment epoch and the checkpoint read from the group's commit.
    /// Written by the rebalance callback (which librdkafka runs inside `poll`, on the pipeline
    /// thread, but behind a `Send + Sync` context) and read by the sink task when a partition's
    /// first batch arrives: one uncontended lock.
    pub starts: Mutex<HashMap<Partition, (u64, Option<Checkpoint>)>>,
    /// Sends new streams to the pipeline, which records them in the group's commit (an event on
    /// its channel). Set once, before the sink task starts.
    pub registrar: std::sync::OnceLock<Registrar>,
}

impl std::fmt::Debug for Handoff {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Handoff")
            .field("starts", &self.starts)
            .finish_non_exhaustive()
    }
}

impl Handoff {
    /// Hands the pipeline `metadata` to commit for `partition` (in `epoch`, for the batch whose
    /// first offset of it is `offset`; only there when `exact`) and waits for its answer. The
    /// pipeline gone is a retryable error.
    async fn register(
        &self,
        partition: Partition,
        epoch: u64,
        offset: i64,
        exact: bool,
        metadata: String,
    ) -> Result<Registered, SinkError> {
        let gone = || err(SinkErrorKind::Unavailable, true, "pipeline gone");
        let (done, answer) = tokio::sync::oneshot::channel();
        let registration = Registration {
            partition,
            epoch,
            offset,
            exact,
            metadata,
            done,
        };
        if !self.registrar.get().is_some_and(|send| send(registration)) {
            return Err(gone());
        }
        answer.await.map_err(|_| gone())
    }
}

/// The [`Handoff`], shared.
pub type PartitionStarts = Arc<Handoff>;

struct Part {
    epoch: u64,
    writer: AppendWriter,
    stream: String,
    skip: u64,
    next_row: i64,
    /// The stream holds exactly `next_row` rows as far as this process knows: every append to
    /// it resolved, accepted. Only then may the partition keep the stream when it comes back.
    settled: bool,
    /// The partition came back and kept its stream, but no append of this assignment has been
    /// accepted yet: until one is (BigQuery checks its explicit offset), the usual path is
    /// still open, since nothing of the partition has been acknowledged in this assignment.
    unconfirmed: bool,
    /// The day the partition window is evaluated at (see `checkpoint`'s module docs): every
    /// checkpoint carries it, and it moves only where a registration has recorded the move.
    day: i64,
}

impl Part {
    /// After the writer stopped (refused rows, a gap, or fenced by a new owner): a new
    /// connection on the same stream at the same row, for the retry of the batch. Fenced, it
    /// fails again until the partition is revoked from us.
    fn reconnect(
        &mut self,
        client: &StorageClient,
        p: Partition,
        schema: &SchemaRef,
        opts: &WriterOptions,
        readiness: &mut Readiness,
    ) -> bool {
        match AppendWriter::start_committed(
            client.clone(),
            self.stream.clone(),
            self.next_row,
            p,
            Arc::clone(schema),
            opts.clone(),
        ) {
            Ok(w) => {
                readiness.follow(w.health());
                self.writer = w;
                true
            }
            Err(_) => false,
        }
    }
}

/// Exactly-once writes into the model's table.
pub struct ExactlyOnceSink {
    client: StorageClient,
    table: TableRef,
    /// The schema rows are written with (with the source-position columns if configured).
    schema: SchemaRef,
    /// `Some(schema)` with `kafka_columns`.
    kafka_schema: Option<SchemaRef>,
    opts: WriterOptions,
    /// The table's partition range: rows outside it are refused before the skip.
    window: Option<PartitionWindow>,
    starts: PartitionStarts,
    parts: HashMap<Partition, Part>,
    progress: Progress,
    readiness: Readiness,
    /// Microseconds since the epoch: the wall clock, which decides when a partition's window
    /// day may move ([`ExactlyOnceSink::with_clock`]).
    clock: Clock,
}

/// A source of the time (microseconds since the epoch).
pub type Clock = Arc<dyn Fn() -> i64 + Send + Sync>;

/// The batch being written and the partitions of it already written, with their checkpoints:
/// a batch that failed part-way is retried whole, and those partitions must not be appended
/// twice. (The `Weak` keeps the batch's allocation, so its address cannot be reused by another.)
#[derive(Default)]
struct Progress {
    batch: std::sync::Weak<Batch>,
    written: HashMap<Partition, (StreamCheckpoint, Vec<RejectedRow>)>,
}

fn err(kind: SinkErrorKind, retryable: bool, e: impl std::fmt::Display) -> SinkError {
    SinkError::new(kind, retryable, e.to_string())
}

impl ExactlyOnceSink {
    /// Connects, creates or migrates the table (inside a tokio runtime).
    pub async fn start(
        cfg: &Config,
        sink: &BigQueryConfig,
        starts: PartitionStarts,
    ) -> Result<Self, crate::sink::StartError> {
        let p = super::sink::prepare(cfg, sink).await?;
        let mut opts = bigquery::writer_options(sink);
        let window = opts.partition_window.take();
        // Both series exist from the start, so a dashboard's rate and an alert's increase() see
        // the first stream too.
        for name in [
            super::metrics::STREAMS_CREATED_TOTAL,
            super::metrics::STREAMS_REUSED_TOTAL,
        ] {
            metrics::counter!(name).absolute(0);
        }
        Ok(ExactlyOnceSink {
            client: p.client,
            table: p.spec.table.clone(),
            schema: p.schema,
            kafka_schema: p.kafka_schema,
            opts,
            window,
            starts,
            parts: HashMap::new(),
            progress: Progress::default(),
            readiness: Readiness::new(),
            clock: Arc::new(validate::now_micros),
        })
    }

    /// The same sink reading the time from `clock` instead of the wall clock (to drive it
    /// across midnight).
    pub fn with_clock(mut self, clock: Clock) -> Self {
        self.clock = clock;
        self
    }

    fn today(&self) -> i64 {
        validate::day_of((self.clock)())
    }

    /// The partition's writer for the current assignment, resuming its stream if needed; `None`
    /// when the partition is no longer assigned, or the batch's rows were consumed in an earlier
    /// assignment (they are not ours to write).
    async fn ensure_part(
        &mut self,
        p: Partition,
        batch_epoch: Option<u64>,
        first_offset: i64,
    ) -> Result<bool, SinkError> {
        let start = self
            .starts
            .starts
            .lock()
            .map_err(|_| err(SinkErrorKind::Internal, false, "lock"))?
            .get(&p)
            .cloned();
        if let (Some((epoch, _)), Some(b)) = (&start, batch_epoch) {
            if *epoch != b {
                // The current assignment replays these messages.
                return Ok(false);
            }
        }
        let Some((epoch, prior)) = start else {
            // Revoked: a stream that may be kept if the partition comes back stays open.
            let keep = (self.parts.get(&p)).is_some_and(|x| x.settled && x.writer.is_healthy());
            if !keep {
                if let Some(old) = self.parts.remove(&p) {
                    let _ = old.writer.close(std::time::Duration::from_secs(1)).await;
                }
            }
            return Ok(false);
        };
        if self.parts.get(&p).is_some_and(|x| x.epoch == epoch) {
            return Ok(true);
        }
        if let Some(mut old) = self.parts.remove(&p) {
            // Back to us: keep the stream if the checkpoint read at assignment names it and its
            // length is known (see `checkpoint`'s module docs, "Kept stream").
            let kept = prior
                .as_ref()
                .filter(|_| old.settled && old.writer.is_healthy())
                .and_then(|cp| kept_stream_skip(cp, &old.stream, old.next_row));
            if let Some(skip) = kept {
                tracing::info!(partition = p, stream = %old.stream, row = old.next_row, skip_rows = skip,
                    "exactly-once: partition assigned again keeps its stream (its first append confirms it)");
                let day = prior.as_ref().and_then(|cp| cp.day).unwrap_or(old.day);
                (old.epoch, old.skip, old.unconfirmed, old.day) = (epoch, skip, true, day);
                self.parts.insert(p, old);
                return Ok(true);
            }
            // Revoked since: the next owner (maybe us again) finalizes its stream.
            let _ = old.writer.close(std::time::Duration::from_secs(1)).await;
        }
        let resume = resume_partition(&self.client, &self.table, prior.as_ref())
            .await
            .map_err(|e| err(SinkErrorKind::Unavailable, true, e))?;
        // The replay evaluates the window at the day its rows were first evaluated at.
        let day = prior.as_ref().and_then(|cp| cp.day).unwrap_or(self.today());
        // Record the new stream before writing to it (see the module docs).
        let metadata = Checkpoint {
            stream: resume.stream.clone(),
            next_row: 0,
            carried: resume.skip_rows,
            day: Some(day),
        }
        .to_metadata();
        let answer = (self.starts)
            .register(p, epoch, first_offset, false, metadata)
            .await?;
        match answer {
            Registered::Committed => {}
            Registered::Stale => return Ok(false),
            Registered::Failed(e) => return Err(err(SinkErrorKind::Unavailable, true, e)),
            Registered::Behind => {
                return Err(err(
                    SinkErrorKind::Internal,
                    false,
                    "behind, not asked exact",
                ))
            }
        }
        tracing::info!(partition = p, stream = %resume.stream, skip_rows = resume.skip_rows, finalized = ?resume.finalized,
            "exactly-once: partition resumed on a new stream");
        let writer = AppendWriter::start_committed(
            self.client.clone(),
            resume.stream.clone(),
            0,
            p,
            Arc::clone(&self.schema),
            self.opts.clone(),
        )
        .map_err(super::sink::sink_error)?;
        self.readiness.follow(writer.health());
        self.parts.insert(
            p,
            Part {
                epoch,
                writer,
                stream: resume.stream,
                skip: resume.skip_rows,
                next_row: 0,
                settled: true,
                unconfirmed: false,
                day,
            },
        );
        Ok(true)
    }

    /// Moves `p`'s window to today when the day has changed and the move can be recorded at
    /// the batch's first offset (see `checkpoint`'s module docs); waits while earlier messages
    /// are unacknowledged. `false`: the partition is no longer ours in its epoch.
    async fn move_day(&mut self, p: Partition, first_offset: i64) -> Result<bool, SinkError> {
        let today = self.today();
        let Some(part) = self.parts.get(&p) else {
            return Ok(true);
        };
        if self.window.is_none()
            || today <= part.day
            || part.skip > 0
            || part.unconfirmed
            || !part.settled
        {
            return Ok(true);
        }
        let (epoch, from) = (part.epoch, part.day);
        let metadata = Checkpoint {
            stream: part.stream.clone(),
            next_row: part.next_row,
            carried: 0,
            day: Some(today),
        }
        .to_metadata();
        let mut waited = 0u32;
        loop {
            let answer = (self.starts)
                .register(p, epoch, first_offset, true, metadata.clone())
                .await?;
            match answer {
                Registered::Committed => break,
                Registered::Stale => return Ok(false),
                Registered::Behind => {
                    if waited == 0 {
                        tracing::info!(partition = p, offset = first_offset,
                            "exactly-once: a new day; the partition window moves once every earlier message is acknowledged by every sink (waiting)");
                    }
                    // Asked again at a growing pace: a sink that acknowledges late (MaxCompute)
                    // can keep it waiting for its interval.
                    let ms = 50u64 << waited.min(4);
                    waited = waited.saturating_add(1);
                    tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
                }
                Registered::Failed(e) => return Err(err(SinkErrorKind::Unavailable, true, e)),
            }
        }
        if let Some(part) = self.parts.get_mut(&p) {
            part.day = today;
        }
        tracing::info!(
            partition = p,
            offset = first_offset,
            from_day = from,
            to_day = today,
            "exactly-once: partition window moved to a new day (recorded in the commit)"
        );
        Ok(true)
    }

    /// Appends `p`'s rows of the batch (`rows` of `records`) to its stream and returns the
    /// checkpoint that goes with the batch's last offset of `p`, and the rows refused (outside
    /// the partition range, or alone over a request's size: not sent, not counted in the
    /// stream). `None`: the partition kept its stream and it is not confirmed (BigQuery refused
    /// the append, or there was nothing to append): the stream is to be given up and the
    /// batch written again the usual way.
    async fn write_partition(
        &mut self,
        p: Partition,
        records: &RecordBatch,
        rows: &[u32],
    ) -> Result<Option<(Checkpoint, Vec<RejectedRow>)>, SinkError> {
        let ExactlyOnceSink {
            parts,
            client,
            schema,
            opts,
            window,
            readiness,
            ..
        } = self;
        let part = parts
            .get_mut(&p)
            .ok_or_else(|| err(SinkErrorKind::Internal, false, "partition not started"))?;
        // Rows BigQuery would refuse are taken out before the skip: the stream holds only the
        // rows kept, and a resume's skip counts those.
        let mut sub = Refusing::new(take(records, rows)?, rows);
        if let Some(w) = window {
            let outside = w.outside(&sub.rows, validate::day_start(part.day));
            sub.refuse(
                &outside,
                bigquery::RejectReason::OutsidePartitionRange,
                validate::OUTSIDE_MESSAGE,
            )?;
        }
        // A row alone over a request's size too: the writer of a COMMITTED stream fails the
        // whole batch on it, every 30 s for good.
        let budget = part.writer.payload_budget();
        let too_large = bigquery::encode::oversized_rows(&sub.rows, budget)
            .map_err(|e| err(SinkErrorKind::Encode, false, e))?;
        sub.refuse(
            &too_large,
            bigquery::RejectReason::TooLarge,
            &bigquery::encode::oversized_message(budget),
        )?;
        let Refusing {
            rows: mut sub,
            refused,
            ..
        } = sub;
        // Rows already written (by a previous owner); counted off only once this batch is
        // acknowledged, since a failed attempt is retried whole.
        let k = (part.skip as usize).min(sub.num_rows());
        sub = sub.slice(k, sub.num_rows() - k);
        if part.unconfirmed && sub.num_rows() == 0 {
            // Acknowledging a batch before the kept stream is confirmed would leave checkpoints
            // naming it in the ledger, which no later stream could replace.
            tracing::info!(
                partition = p,
                "exactly-once: nothing to append to the kept stream to confirm it; finalizing it"
            );
            return Ok(None);
        }
        if sub.num_rows() > 0 {
            part.settled = false;
            let appended = match part.writer.append(sub).await {
                Ok(pending) => pending.await,
                Err(e) => Err(e),
            };
            let outcome = match appended {
                Ok(o) => o,
                Err(e) if part.unconfirmed => {
                    tracing::warn!(partition = p, stream = %part.stream, error = %e,
                        "exactly-once: the kept stream refused its first append (finalized by another owner?); finalizing it and continuing on a new one");
                    return Ok(None);
                }
                Err(e) => {
                    if !part.writer.is_healthy()
                        && part.reconnect(client, p, schema, opts, readiness)
                    {
                        tracing::warn!(partition = p, error = %e, "exactly-once: writer stopped; reconnected at row {}", part.next_row);
                        return Err(err(SinkErrorKind::Unavailable, true, e));
                    }
                    return Err(super::sink::sink_error(e));
                }
            };
            if !outcome.rejected.is_empty() {
                return Err(err(
                    SinkErrorKind::Rejected,
                    false,
                    "rows refused on a committed stream",
                ));
            }
            if let Some(r) = outcome.stream_offsets {
                part.next_row = r.end;
            }
            part.settled = true;
            if part.unconfirmed {
                part.unconfirmed = false;
                metrics::counter!(bigquery::metrics::STREAMS_REUSED_TOTAL).increment(1);
                tracing::info!(partition = p, stream = %part.stream, "exactly-once: kept stream confirmed");
            }
        }
        part.skip -= k as u64;
        Ok(Some((
            Checkpoint {
                stream: part.stream.clone(),
                next_row: part.next_row,
                carried: part.skip,
                day: Some(part.day),
            },
            refused,
        )))
    }
}

/// A partition's rows of a batch while rows BigQuery would refuse are taken out of them (before
/// the skip): what is left, each row's index in the batch, and the rows refused so far.
struct Refusing {
    rows: RecordBatch,
    index: Vec<u32>,
    refused: Vec<RejectedRow>,
}

impl Refusing {
    fn new(rows: RecordBatch, index: &[u32]) -> Self {
        Refusing {
            rows,
            index: index.to_vec(),
            refused: Vec::new(),
        }
    }

    /// Refuses the rows at `drop` (ascending positions in what is left) for `reason`.
    fn refuse(
        &mut self,
        drop: &[usize],
        reason: bigquery::RejectReason,
        message: &str,
    ) -> Result<(), SinkError> {
        if drop.is_empty() {
            return Ok(());
        }
        self.refused.extend(drop.iter().map(|&i| RejectedRow {
            row: self.index[i] as usize,
            code: reason.as_str(),
            message: message.into(),
        }));
        let keep = validate::kept(drop, self.index.len());
        self.rows = take(&self.rows, &keep)?;
        self.index = keep.iter().map(|&i| self.index[i as usize]).collect();
        Ok(())
    }
}

/// Splits a batch's rows by source partition: (partition, row indices, first offset, last offset).
fn by_partition(batch: &Batch) -> Vec<(Partition, Vec<u32>, i64, i64)> {
    let mut out: Vec<(Partition, Vec<u32>, i64, i64)> = batch
        .offsets
        .iter()
        .map(|po| {
            let first = po.ranges.first().map_or(-1, |r| r.first);
            (
                po.partition,
                Vec::new(),
                first,
                po.ranges.last().map_or(-1, |r| r.last),
            )
        })
        .collect();
    let mut start = 0u32;
    for s in &batch.rows_by_source {
        if let Some(e) = out.iter_mut().find(|e| e.0 == s.partition) {
            e.1.extend(start..s.end_row);
        }
        start = s.end_row;
    }
    out
}

fn take(records: &RecordBatch, rows: &[u32]) -> Result<RecordBatch, SinkError> {
    arrow_select::take::take_record_batch(records, &UInt32Array::from(rows.to_vec()))
        .map_err(|e| err(SinkErrorKind::Encode, false, e))
}

impl ExactlyOnceSink {
    /// Writes one batch on the partitions' COMMITTED streams and returns its checkpoints.
    async fn write_now(&mut self, batch: Arc<Batch>) -> Result<WriteReport, SinkError> {
        let records = super::sink::rows_to_write(&batch, self.kafka_schema.as_ref())?;
        if !std::ptr::eq(self.progress.batch.as_ptr(), Arc::as_ptr(&batch)) {
            self.progress = Progress {
                batch: Arc::downgrade(&batch),
                written: HashMap::new(),
            };
        }
        let mut report = WriteReport::default();
        for (p, rows, first_offset, last_offset) in by_partition(&batch) {
            if let Some((done, refused)) = self.progress.written.get(&p) {
                report.commit_metadata.push(done.clone());
                report.rejected.extend(refused.iter().cloned());
                continue;
            }
            let epoch = batch.epochs.iter().find(|(q, _)| *q == p).map(|e| e.1);
            let mut written = None;
            // A kept stream not confirmed is given up and the batch written the usual way,
            // whose new stream needs no confirmation: at most two rounds.
            for round in 0..2 {
                if !self.ensure_part(p, epoch, first_offset).await?
                    || !self.move_day(p, first_offset).await?
                {
                    break;
                }
                written = self.write_partition(p, &records, &rows).await?;
                if written.is_some() {
                    break;
                }
                if let Some(old) = self.parts.remove(&p) {
                    let _ = old.writer.close(std::time::Duration::from_secs(1)).await;
                }
                if round == 1 {
                    return Err(err(
                        SinkErrorKind::Internal,
                        false,
                        "new stream unconfirmed",
                    ));
                }
            }
            let Some((checkpoint, refused)) = written else {
                tracing::info!(
                    partition = p,
                    "exactly-once: rows of a revoked partition not written"
                );
                continue;
            };
            let done = StreamCheckpoint {
                partition: p,
                first_offset,
                last_offset,
                metadata: checkpoint.to_metadata(),
            };
            self.progress
                .written
                .insert(p, (done.clone(), refused.clone()));
            report.commit_metadata.push(done);
            report.rejected.extend(refused);
        }
        self.progress = Progress::default();
        Ok(report)
    }
}

impl Sink for ExactlyOnceSink {
    fn name(&self) -> &'static str {
        "bigquery"
    }

    /// Writes the batch while taking it, partition by partition, each on its COMMITTED stream
    /// (so a partition's batches land in order and a failed one is retried before the next is
    /// taken); the acknowledgement is then ready.
    fn submit(&mut self, batch: Arc<Batch>) -> SubmitFuture<'_> {
        Box::pin(async move { self.write_now(batch).await.map(crate::sink::written) })
    }

    fn health(&self) -> Option<tokio::sync::watch::Receiver<bool>> {
        Some(self.readiness.tx.subscribe())
    }
}

#[cfg(test)]
mod tests {
    use super::{take, PartitionWindow, Refusing};
    use arrow_array::{ArrayRef, Int64Array, RecordBatch, TimestampMicrosecondArray};
    use std::sync::Arc;

    /// The rows of one partition (indices into the batch) are split into those to write and
    /// those refused, each refused row named by its index in the batch, before anything else
    /// (the skip of a resume counts only the rows written).
    #[test]
    fn rows_outside_the_partition_range_are_refused_by_their_batch_index() {
        const DAY: i64 = 86_400_000_000;
        let now = 20_000 * DAY;
        let ts = TimestampMicrosecondArray::from(vec![
            Some(now),
            Some(now - 400 * DAY), // expired, but not this partition's row
            Some(now - DAY),
            Some(now - 30 * DAY),  // expired
            None,                  // kept (BigQuery's __NULL__ partition)
            Some(now + 400 * DAY), // too far ahead
        ]);
        let ids: ArrayRef = Arc::new(Int64Array::from((0..6).collect::<Vec<i64>>()));
        let records = RecordBatch::try_from_iter([
            ("a", Arc::clone(&ids)),
            ("b", ids),
            ("request_timestamp", Arc::new(ts) as ArrayRef),
        ])
        .unwrap();
        let w = PartitionWindow::for_ttl_days(2, 14);
        let rows = [0, 2, 3, 4, 5];
        let mut sub = Refusing::new(take(&records, &rows).unwrap(), &rows);
        let outside = w.outside(&sub.rows, now);
        sub.refuse(
            &outside,
            crate::sink::bigquery::RejectReason::OutsidePartitionRange,
            "m",
        )
        .unwrap();
        assert_eq!(sub.index, [0, 2, 4]);
        assert_eq!(sub.rows.num_rows(), 3);
        // A second refusal counts positions in what is left, and names batch rows.
        sub.refuse(&[1], crate::sink::bigquery::RejectReason::TooLarge, "m")
            .unwrap();
        assert_eq!(sub.index, [0, 4]);
        let refused: Vec<(usize, &str)> = sub.refused.iter().map(|r| (r.row, r.code)).collect();
        assert_eq!(
            refused,
            [
                (3, "outside_partition_range"),
                (5, "outside_partition_range"),
                (2, "too_large")
            ]
        );
    }
}
