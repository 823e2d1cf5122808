//! The PARQUET sink's adapter to the sink seam (the folder's module docs say how it writes).

use crate::batch::Batch;
use crate::config::LocalSink;
use crate::output::{civil_from_days, parquet_properties};
use crate::sink::{Progress, Sink, SinkError, SinkErrorKind, SubmitFuture};
use arrow_array::cast::AsArray;
use arrow_array::types::TimestampMicrosecondType;
use arrow_array::{Array, RecordBatch, UInt32Array};
use parquet::arrow::ArrowWriter;
use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

const MICROS_PER_DAY: i64 = 86_400_000_000;

/// Name of the column that decides a row's day folder.
pub const DAY_COLUMN: &str = "request_timestamp";

/// The local Parquet sink. See the module docs.
#[derive(Debug, Clone)]
pub struct ParquetSink {
    inner: Arc<Inner>,
    /// Bounds the batches being written at once (see [`WRITES_AT_ONCE`]).
    writes: Arc<tokio::sync::Semaphore>,
}

/// Batches written at once, each on tokio's blocking pool: while one is `fsync`ing, the next is
/// encoded. Each holds its encoded file in memory until written (at most `rotate_bytes` per
/// file), so this also bounds the sink's own memory.
pub const WRITES_AT_ONCE: usize = 2;

#[derive(Debug)]
struct Inner {
    path: PathBuf,
    rotate_bytes: u64,
    /// Distinguishes this sink instance's files from other processes' (random per start).
    run: u32,
    seq: AtomicU64,
}

impl ParquetSink {
    /// A sink writing under `cfg.path` (created on the first write if missing).
    pub fn new(cfg: LocalSink) -> Self {
        ParquetSink {
            inner: Arc::new(Inner {
                path: cfg.path,
                rotate_bytes: cfg.rotate_bytes.max(1),
                run: fastrand::u32(..),
                seq: AtomicU64::new(0),
            }),
            writes: Arc::new(tokio::sync::Semaphore::new(WRITES_AT_ONCE)),
        }
    }

    /// The base folder.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// Writes `batch` durably, blocking the calling thread; returns the files written. This is
    /// what [`Sink::write`] runs on tokio's blocking pool.
    pub fn write_blocking(&self, batch: &Batch) -> Result<Vec<PathBuf>, SinkError> {
        self.inner.write_batch(batch)
    }
}

impl Sink for ParquetSink {
    fn name(&self) -> &'static str {
        "local_parquet"
    }

    /// Takes the batch once fewer than [`WRITES_AT_ONCE`] are being written and writes it on
    /// tokio's blocking pool; the acknowledgement resolves when its files are durable.
    fn submit(&mut self, batch: Arc<Batch>) -> SubmitFuture<'_> {
        let inner = Arc::clone(&self.inner);
        let writes = Arc::clone(&self.writes);
        Box::pin(async move {
            let permit = writes.acquire_owned().await.map_err(|_| {
                SinkError::new(SinkErrorKind::Internal, true, "parquet sink closed")
            })?;
            let job = tokio::task::spawn_blocking(move || {
                let r = inner.write_batch(&batch);
                drop(permit);
                r
            });
            let ack: crate::sink::Acknowledgement = Box::pin(async move {
                match job.await {
                    Ok(result) => {
                        result.map(|_| Progress::Written(crate::sink::WriteReport::default()))
                    }
                    Err(join) => Err(SinkError::new(
                        SinkErrorKind::Internal,
                        false,
                        "parquet writer task failed",
                    )
                    .with_source(join)),
                }
            });
            Ok(ack)
        })
    }
}

impl Inner {
    fn write_batch(&self, batch: &Batch) -> Result<Vec<PathBuf>, SinkError> {
        let records = &batch.records;
        if records.num_rows() == 0 {
            return Ok(Vec::new());
        }
        let mut written = Vec::new();
        for (day, slice) in split_by_day(records)? {
            let dir = self.path.join(day_folder(day));
            self.ensure_dir(&dir)?;
            // Arrow size of this slice, pro rata.
            let slice_bytes = (batch.bytes as u64).saturating_mul(slice.num_rows() as u64)
                / records.num_rows() as u64;
            let files = slice_bytes
                .div_ceil(self.rotate_bytes)
                .clamp(1, slice.num_rows() as u64) as usize;
            let per_file = slice.num_rows().div_ceil(files);
            let mut start = 0;
            while start < slice.num_rows() {
                let len = per_file.min(slice.num_rows() - start);
                written.push(self.write_file(&dir, &slice.slice(start, len))?);
                start += len;
            }
        }
        Ok(written)
    }

    fn ensure_dir(&self, dir: &Path) -> Result<(), SinkError> {
        if dir.is_dir() {
            return Ok(());
        }
        fs::create_dir_all(dir)
            .map_err(|e| SinkError::io(format!("creating {}", dir.display()), e))?;
        // Make the new folder's entry durable too.
        sync_dir(&self.path)
    }

    fn write_file(&self, dir: &Path, rows: &RecordBatch) -> Result<PathBuf, SinkError> {
        let encoded = encode(rows)?;
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_micros());
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        let name = format!("part-{now:016}-{:08x}-{seq:06}.parquet", self.run);
        let tmp = dir.join(format!(".{name}.tmp"));
        let dest = dir.join(&name);
        let result = write_durably(&tmp, &encoded).and_then(|()| {
            fs::rename(&tmp, &dest)
                .map_err(|e| SinkError::io(format!("renaming {} to {name}", tmp.display()), e))
        });
        if let Err(e) = result {
            // Best effort: a failed write leaves nothing behind (the error is what matters).
            let _ = fs::remove_file(&tmp);
            return Err(e);
        }
        sync_dir(dir)?;
        Ok(dest)
    }
}

fn write_durably(tmp: &Path, bytes: &[u8]) -> Result<(), SinkError> {
    let ctx = || format!("writing {}", tmp.display());
    let mut file: File = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(tmp)
        .map_err(|e| SinkError::io(ctx(), e))?;
    file.write_all(bytes).map_err(|e| SinkError::io(ctx(), e))?;
    file.sync_all().map_err(|e| SinkError::io(ctx(), e))
}

fn sync_dir(dir: &Path) -> Result<(), SinkError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| SinkError::io(format!("syncing folder {}", dir.display()), e))
}

/// Encodes rows as one Parquet file in memory, so encoding failures (permanent) are told apart
/// from I/O failures (retryable).
fn encode(rows: &RecordBatch) -> Result<Vec<u8>, SinkError> {
    let fail = |e: parquet::errors::ParquetError| {
        SinkError::new(SinkErrorKind::Encode, false, "encoding parquet").with_source(e)
    };
    let mut w = ArrowWriter::try_new(
        Vec::new(),
        rows.schema(),
        Some(parquet_properties(&rows.schema())),
    )
    .map_err(fail)?;
    w.write(rows).map_err(fail)?;
    w.into_inner().map_err(fail)
}

/// `dt=YYYY-MM-DD` for a day number (days since 1970-01-01), `dt=__NULL__` for rows without a
/// timestamp (BigQuery's name for that partition).
fn day_folder(day: Option<i64>) -> String {
    match day {
        Some(d) => {
            let (y, m, dd) = civil_from_days(d);
            format!("dt={y:04}-{m:02}-{dd:02}")
        }
        None => "dt=__NULL__".to_string(),
    }
}

/// Splits rows by the UTC day of [`DAY_COLUMN`], in day order. A batch within one day (the
/// common case) is returned as is, without copying.
fn split_by_day(records: &RecordBatch) -> Result<Vec<(Option<i64>, RecordBatch)>, SinkError> {
    let missing = || {
        SinkError::new(
            SinkErrorKind::Internal,
            false,
            format!("batch has no {DAY_COLUMN} column"),
        )
    };
    let idx = records
        .schema()
        .index_of(DAY_COLUMN)
        .map_err(|_| missing())?;
    let ts = records
        .column(idx)
        .as_primitive_opt::<TimestampMicrosecondType>()
        .ok_or_else(missing)?;
    let day_of = |i: usize| (!ts.is_null(i)).then(|| ts.value(i).div_euclid(MICROS_PER_DAY));
    let first = day_of(0);
    if (1..ts.len()).all(|i| day_of(i) == first) {
        return Ok(vec![(first, records.clone())]);
    }
    let mut groups: BTreeMap<Option<i64>, Vec<u32>> = BTreeMap::new();
    for i in 0..ts.len() {
        groups.entry(day_of(i)).or_default().push(i as u32);
    }
    groups
        .into_iter()
        .map(|(day, rows)| {
            arrow_select::take::take_record_batch(records, &UInt32Array::from(rows))
                .map(|rb| (day, rb))
                .map_err(|e| {
                    SinkError::new(SinkErrorKind::Internal, false, "splitting a batch by day")
                        .with_source(e)
                })
        })
        .collect()
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
