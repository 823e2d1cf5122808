//! The batcher: consumed messages in, [`Batch`]es out.
//!
//! Input: messages `(partition, offset, bytes)` in consumption order and the current time (the
//! caller passes [`Instant`]s; nothing here reads a clock, so tests need no sleeping). Each
//! message is decoded straight into the batch's Arrow builders ([`Decoder`]).
//!
//! Output: a [`Batch`] when a limit is reached: `max_rows`, `max_bytes` (the decoder's estimate of
//! the data in the Arrow buffers; what the buffers hold is [`Batch::held_bytes`]) or `linger` elapsed since the first message entered the batch. The runtime
//! drives linger with a timer on [`Batcher::deadline`] and [`Batcher::poll_linger`], so a quiet
//! topic still flushes; [`Batcher::flush`] empties the batcher on drain or rebalance. A message
//! the decoder rejects comes back as a [`DecodeFailure`] with its coordinates, to be
//! dead-lettered; it is never part of a batch.
//!
//! Guarantees:
//! - every pushed message ends in exactly one place: one batch's [`Batch::offsets`] (even if its
//!   log held no rows, so its offset is acknowledged with the batch) or one [`DecodeFailure`];
//! - a batch's offset ranges never cover a rejected message of the same partition, so
//!   acknowledging the ranges never acknowledges a dead letter before its own write;
//! - no batch has more than `max_rows` rows or more than `max_bytes` bytes, except a batch made
//!   of a single message that alone exceeds them (a log is never split across batches, because
//!   its offset can be acknowledged only once);
//! - [`Batch::rows_by_source`] maps every row back to the message it came from (for row-level
//!   dead-lettering), at one entry per message, not per row.
//!
//! Rebalance: rows cannot be taken out of a batch per partition. On a revoke the runtime may
//! still write the current batch; the ledger ignores acknowledgements for revoked partitions,
//! so those rows are at worst written twice (at-least-once), never committed by us.

#[cfg(test)]
pub(crate) mod testing;

use crate::commit::{OffsetRange, Partition};
use crate::config::Batching;
use crate::decode::{Counts, DecodeError, Decoder};
use crate::table::TableLayout;
use arrow_array::RecordBatch;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Why a batch was flushed (a bounded metric label).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FlushReason {
    /// `max_rows` reached (or the next log would have passed it).
    Rows,
    /// `max_bytes` reached (or the next log would have passed it).
    Bytes,
    /// `linger` elapsed since the first message entered the batch.
    Linger,
    /// Flushed on request (drain, rebalance).
    Drain,
}

impl FlushReason {
    /// Stable snake_case code.
    pub fn code(self) -> &'static str {
        match self {
            FlushReason::Rows => "rows",
            FlushReason::Bytes => "bytes",
            FlushReason::Linger => "linger",
            FlushReason::Drain => "drain",
        }
    }

    /// Every reason, for describing metrics up front.
    pub const ALL: [FlushReason; 4] = [
        FlushReason::Rows,
        FlushReason::Bytes,
        FlushReason::Linger,
        FlushReason::Drain,
    ];
}

/// The offsets of one partition held by a batch, as ranges in increasing order. Each range
/// covers only offsets that are in the batch, apart from offsets that were never consumed (gaps),
/// so it can be handed to [`crate::commit::OffsetTracker::ack`] as is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionOffsets {
    /// The partition.
    pub partition: Partition,
    /// Offset ranges, increasing and disjoint.
    pub ranges: Vec<OffsetRange>,
}

/// The message that rows `previous end_row .. end_row` of a batch came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowSource {
    /// Source partition.
    pub partition: Partition,
    /// Source offset.
    pub offset: i64,
    /// One past the message's last row in the batch.
    pub end_row: u32,
}

/// Decoded rows ready for the sinks, with where they came from.
#[derive(Debug, Clone)]
pub struct Batch {
    /// The rows, in the table layout's schema.
    pub records: RecordBatch,
    /// Per partition, the offsets the batch holds (including logs that yielded no rows).
    pub offsets: Vec<PartitionOffsets>,
    /// One entry per message that yielded rows, in row order; see [`Batch::source_of_row`].
    pub rows_by_source: Vec<RowSource>,
    /// Approximate size of the data in the Arrow buffers (what `max_bytes` limits).
    pub bytes: usize,
    /// What the batch's Arrow buffers hold (their capacity, as Arrow reports it): the weight
    /// the in-flight budget counts until every sink acknowledged the batch.
    pub held_bytes: usize,
    /// Bytes of the serialized logs that went into the batch.
    pub input_bytes: usize,
    /// Messages in the batch (with or without rows).
    pub messages: usize,
    /// What triggered the flush.
    pub reason: FlushReason,
    /// When the batch's first message arrived (for flush latency).
    pub opened: Option<Instant>,
    /// Per partition, the assignment epoch the batch's messages were consumed in (set by the
    /// pipeline when it ships the batch; empty from the batcher). The exactly-once sink does not
    /// write rows consumed in an earlier assignment of a partition that is ours again.
    pub epochs: Vec<(i32, u64)>,
}

impl Batch {
    /// Number of rows.
    pub fn rows(&self) -> usize {
        self.records.num_rows()
    }

    /// The assignment epoch `partition`'s messages in this batch were consumed in (0 if unset).
    pub fn epoch_of(&self, partition: Partition) -> u64 {
        self.epochs
            .iter()
            .find(|(p, _)| *p == partition)
            .map_or(0, |e| e.1)
    }

    /// The `(partition, offset)` a row came from, or `None` past the last row.
    pub fn source_of_row(&self, row: usize) -> Option<(Partition, i64)> {
        let i = self
            .rows_by_source
            .partition_point(|s| (s.end_row as usize) <= row);
        self.rows_by_source.get(i).map(|s| (s.partition, s.offset))
    }
}

/// A message the decoder rejected, with its coordinates (for the dead-letter target).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeFailure {
    /// Source partition.
    pub partition: Partition,
    /// Source offset.
    pub offset: i64,
    /// Why it was rejected.
    pub error: DecodeError,
}

impl fmt::Display for DecodeFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "partition {} offset {}: {}",
            self.partition, self.offset, self.error
        )
    }
}

impl std::error::Error for DecodeFailure {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}

#[derive(Debug)]
struct Runs {
    partition: Partition,
    ranges: Vec<OffsetRange>,
    /// Whether the next offset of this partition may extend the last range (false after a
    /// rejected message of this partition).
    open: bool,
}

/// Decodes messages into batches; see the module docs.
pub struct Batcher {
    decoder: Decoder,
    max_rows: usize,
    max_bytes: usize,
    linger: Duration,
    /// When the first message entered the current batch.
    opened: Option<Instant>,
    runs: Vec<Runs>,
    /// Index into `runs` of the partition pushed last (consecutive messages mostly share one).
    last_run: usize,
    rows_by_source: Vec<RowSource>,
    messages: usize,
    input_bytes: usize,
    /// The open batch's data bytes ([`Decoder::approx_bytes`]), as of the last push or flush.
    data_bytes: usize,
    /// What the decoder's builders hold ([`Decoder::allocated_bytes`]), as of the last push or
    /// flush.
    held_bytes: usize,
}

impl Batcher {
    /// A batcher for `layout` with the flush limits of `cfg` and its per-log limit
    /// (`max_log_bytes`: a larger log is rejected as `too_large`; `max_inflight_bytes` is the
    /// runtime's business and ignored here). `max_rows` is capped at `u32::MAX`.
    pub fn new(layout: Arc<TableLayout>, cfg: Batching) -> Self {
        let mut decoder = Decoder::new(layout)
            .with_max_log_bytes(cfg.max_log_bytes)
            .with_reserve_limit(cfg.batch_bytes());
        let (data_bytes, held_bytes) = decoder.sizes();
        Batcher {
            decoder,
            max_rows: cfg.max_rows.clamp(1, u32::MAX as usize),
            max_bytes: cfg.batch_bytes(),
            linger: cfg.linger,
            opened: None,
            runs: Vec::new(),
            last_run: 0,
            rows_by_source: Vec::new(),
            messages: 0,
            input_bytes: 0,
            data_bytes,
            held_bytes,
        }
    }

    /// Bytes the open batch's builders hold (capacity, not data: a batch with few rows can hold
    /// a lot); 0 while it holds no message (what an empty decoder keeps is bounded: the first
    /// batch's initial capacity, later a room of 64 rows, 64 NULLs and 1 KiB of strings per column,
    /// boolean values for up to 64 Ki rows and the row numbers of up to 16 Ki NULLs per column). Counted against the in-flight
    /// budget with the batches in flight.
    pub fn held_bytes(&self) -> usize {
        if self.messages == 0 {
            0
        } else {
            self.held_bytes
        }
    }

    /// Rows in the current batch.
    pub fn rows(&self) -> usize {
        self.decoder.rows()
    }

    /// Messages in the current batch.
    pub fn messages(&self) -> usize {
        self.messages
    }

    /// Whether the current batch holds no message.
    pub fn is_empty(&self) -> bool {
        self.messages == 0
    }

    /// When the current batch must be flushed by linger; `None` while it is empty.
    pub fn deadline(&self) -> Option<Instant> {
        self.opened.map(|t| t + self.linger)
    }

    /// Decodes one message into the current batch. Batches that became ready are appended to
    /// `ready` (none, one, or two when a log that may not fit the current batch ships it first
    /// and then fills the next one by itself). Returns the number of rows the log yielded, or
    /// the rejected message.
    ///
    /// A log is decoded once: its structure and cheap checks come first ([`Decoder::prepare`]),
    /// and if the rows or the size bound they give could pass the batch's limits, the open batch
    /// is shipped before any row of the log is appended.
    pub fn push(
        &mut self,
        partition: Partition,
        offset: i64,
        bytes: &[u8],
        now: Instant,
        ready: &mut Vec<Batch>,
    ) -> Result<usize, DecodeFailure> {
        let log = match self.decoder.prepare(bytes) {
            Ok(p) => p,
            Err(error) => {
                // Linger still applies: a flood of bad logs must not hold back good rows.
                ready.extend(self.poll_linger(now));
                return Err(self.reject(partition, offset, error));
            }
        };
        if self.messages > 0 {
            let rows = self.decoder.rows();
            // Counting the rows costs a pass over the row ids: only near the limit.
            let over_rows =
                rows + log.most_rows() > self.max_rows && rows + log.rows() > self.max_rows;
            if over_rows {
                ready.push(self.take(FlushReason::Rows));
            } else if self.data_bytes + log.bound() > self.max_bytes {
                ready.push(self.take(FlushReason::Bytes));
            }
        }
        let appended = self.decoder.append(&log);
        (self.data_bytes, self.held_bytes) = self.decoder.sizes();
        let n = match appended {
            Ok(n) => n,
            Err(error) => {
                ready.extend(self.poll_linger(now));
                return Err(self.reject(partition, offset, error));
            }
        };
        self.record(partition, offset, bytes.len(), now);
        if self.decoder.rows() >= self.max_rows {
            ready.push(self.take(FlushReason::Rows));
        } else if self.data_bytes >= self.max_bytes {
            ready.push(self.take(FlushReason::Bytes));
        } else if self.deadline().is_some_and(|d| now >= d) {
            ready.push(self.take(FlushReason::Linger));
        }
        Ok(n)
    }

    /// The current batch if its linger deadline has passed at `now`.
    pub fn poll_linger(&mut self, now: Instant) -> Option<Batch> {
        match self.deadline() {
            Some(d) if now >= d => Some(self.take(FlushReason::Linger)),
            _ => None,
        }
    }

    /// What the decoder counted about the data since the last call ([`Counts`]), for the quality
    /// metrics: taken per batch (and per rejected log), not per message.
    pub fn take_counts(&mut self) -> Counts {
        self.decoder.take_counts()
    }

    /// The table layout rows are decoded into.
    pub fn layout(&self) -> &Arc<TableLayout> {
        self.decoder.layout()
    }

    /// The current batch, whatever its size; `None` if it holds no message.
    pub fn flush(&mut self) -> Option<Batch> {
        (!self.is_empty()).then(|| self.take(FlushReason::Drain))
    }

    fn reject(&mut self, partition: Partition, offset: i64, error: DecodeError) -> DecodeFailure {
        // The batch must not acknowledge this offset: close the partition's current range.
        if let Some(r) = self.runs.iter_mut().find(|r| r.partition == partition) {
            r.open = false;
        }
        DecodeFailure {
            partition,
            offset,
            error,
        }
    }

    fn record(&mut self, partition: Partition, offset: i64, input_bytes: usize, now: Instant) {
        if self.opened.is_none() {
            self.opened = Some(now);
        }
        self.messages += 1;
        self.input_bytes += input_bytes;
        let idx = match self.runs.get(self.last_run) {
            Some(r) if r.partition == partition => self.last_run,
            _ => match self.runs.iter().position(|r| r.partition == partition) {
                Some(i) => i,
                None => {
                    self.runs.push(Runs {
                        partition,
                        ranges: Vec::new(),
                        open: false,
                    });
                    self.runs.len() - 1
                }
            },
        };
        self.last_run = idx;
        let run = &mut self.runs[idx];
        match run.ranges.last_mut() {
            Some(last) if run.open => {
                debug_assert!(offset > last.last, "offsets of a partition must increase");
                last.last = offset;
            }
            _ => {
                run.ranges.push(OffsetRange::single(offset));
                run.open = true;
            }
        }
        let end = self.decoder.rows();
        let start = self.rows_by_source.last().map_or(0, |s| s.end_row as usize);
        if end > start {
            self.rows_by_source.push(RowSource {
                partition,
                offset,
                end_row: end as u32,
            });
        }
    }

    fn take(&mut self, reason: FlushReason) -> Batch {
        let bytes = self.decoder.approx_bytes();
        let records = self.decoder.finish();
        let held_bytes = records.get_array_memory_size();
        (self.data_bytes, self.held_bytes) = self.decoder.sizes();
        let offsets = self
            .runs
            .drain(..)
            .map(|r| PartitionOffsets {
                partition: r.partition,
                ranges: r.ranges,
            })
            .collect();
        let cap = self.rows_by_source.len();
        let batch = Batch {
            records,
            offsets,
            rows_by_source: std::mem::replace(&mut self.rows_by_source, Vec::with_capacity(cap)),
            bytes,
            held_bytes,
            input_bytes: std::mem::take(&mut self.input_bytes),
            messages: std::mem::take(&mut self.messages),
            reason,
            opened: self.opened,
            epochs: Vec::new(),
        };
        self.opened = None;
        self.last_run = 0;
        batch
    }
}

#[cfg(test)]
mod tests;
