//! Writers for table rows: JSON lines, Arrow IPC stream and Parquet. Each takes record batches
//! one at a time, so output is streamed in constant memory.

use arrow_array::cast::AsArray;
use arrow_array::types::{Float64Type, Int64Type, TimestampMicrosecondType};
use arrow_array::{Array, RecordBatch};
use arrow_schema::{DataType, SchemaRef};
use parquet::arrow::ArrowWriter;
use parquet::basic::Compression;
use parquet::file::properties::{EnabledStatistics, WriterProperties};

/// The one column whose Parquet files carry min/max statistics ([`parquet_properties`]).
pub const STATISTICS_COLUMN: &str = "request_timestamp";
use std::io::{self, Write};

/// A sink for record batches of one schema.
pub trait BatchWriter {
    /// Writes one batch.
    fn write(&mut self, batch: &RecordBatch) -> io::Result<()>;
    /// Flushes and closes the output (writes footers).
    fn finish(self: Box<Self>) -> io::Result<()>;
}

fn other(e: impl std::error::Error + Send + Sync + 'static) -> io::Error {
    io::Error::other(e)
}

/// JSON lines: one object per row, keys in column order, every column present; TIMESTAMP as
/// RFC 3339 UTC with six fraction digits and `Z`; NaN and ±Inf as null; UTF-8 unescaped.
pub struct JsonlWriter<W: Write> {
    out: W,
    keys: Vec<String>,
    line: Vec<u8>,
}

impl<W: Write> JsonlWriter<W> {
    /// A writer for `schema` onto `out`.
    pub fn new(out: W, schema: &SchemaRef) -> Self {
        let keys = schema
            .fields()
            .iter()
            .map(|f| serde_json::to_string(f.name()).expect("string serializes"))
            .collect();
        JsonlWriter {
            out,
            keys,
            line: Vec::with_capacity(1024),
        }
    }
}

impl<W: Write> BatchWriter for JsonlWriter<W> {
    fn write(&mut self, batch: &RecordBatch) -> io::Result<()> {
        let cols = batch.columns();
        for row in 0..batch.num_rows() {
            self.line.clear();
            self.line.push(b'{');
            for (i, col) in cols.iter().enumerate() {
                if i > 0 {
                    self.line.push(b',');
                }
                self.line.extend_from_slice(self.keys[i].as_bytes());
                self.line.push(b':');
                write_cell(&mut self.line, col.as_ref(), row)?;
            }
            self.line.extend_from_slice(b"}\n");
            self.out.write_all(&self.line)?;
        }
        Ok(())
    }

    fn finish(mut self: Box<Self>) -> io::Result<()> {
        self.out.flush()
    }
}

/// One row of a batch as a JSON object (keys in column order), as the `jsonl` format writes it.
pub fn row_json(batch: &RecordBatch, row: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(512);
    out.push(b'{');
    for (i, (field, col)) in batch
        .schema()
        .fields()
        .iter()
        .zip(batch.columns())
        .enumerate()
    {
        if i > 0 {
            out.push(b',');
        }
        let _ = serde_json::to_writer(&mut out, field.name());
        out.push(b':');
        if write_cell(&mut out, col.as_ref(), row).is_err() {
            out.extend_from_slice(b"null");
        }
    }
    out.push(b'}');
    out
}

fn write_cell(out: &mut Vec<u8>, col: &dyn Array, row: usize) -> io::Result<()> {
    if col.is_null(row) {
        out.extend_from_slice(b"null");
        return Ok(());
    }
    match col.data_type() {
        DataType::Utf8 => {
            serde_json::to_writer(&mut *out, col.as_string::<i32>().value(row)).map_err(other)?
        }
        DataType::Int64 => {
            serde_json::to_writer(&mut *out, &col.as_primitive::<Int64Type>().value(row))
                .map_err(other)?
        }
        // serde_json writes non-finite floats as null.
        DataType::Float64 => {
            serde_json::to_writer(&mut *out, &col.as_primitive::<Float64Type>().value(row))
                .map_err(other)?
        }
        DataType::Boolean => out.extend_from_slice(if col.as_boolean().value(row) {
            b"true"
        } else {
            b"false"
        }),
        DataType::Timestamp(..) => {
            out.push(b'"');
            out.extend_from_slice(
                rfc3339_micros(col.as_primitive::<TimestampMicrosecondType>().value(row))
                    .as_bytes(),
            );
            out.push(b'"');
        }
        other_type => {
            return Err(io::Error::other(format!(
                "unsupported column type {other_type}"
            )))
        }
    }
    Ok(())
}

/// Formats microseconds since the epoch as `YYYY-MM-DDTHH:MM:SS.ffffffZ` (proleptic Gregorian,
/// years 1–9999).
pub fn rfc3339_micros(micros: i64) -> String {
    let secs = micros.div_euclid(1_000_000);
    let frac = micros.rem_euclid(1_000_000);
    let days = secs.div_euclid(86_400);
    let sod = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{frac:06}Z",
        sod / 3600,
        (sod / 60) % 60,
        sod % 60
    )
}

/// Days since 1970-01-01 → (year, month, day) (H. Hinnant's algorithm).
pub fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// Arrow IPC stream format.
pub struct ArrowStreamWriter<W: Write> {
    inner: arrow_ipc::writer::StreamWriter<W>,
}

impl<W: Write> ArrowStreamWriter<W> {
    /// A writer for `schema` onto `out`.
    pub fn new(out: W, schema: &SchemaRef) -> io::Result<Self> {
        Ok(ArrowStreamWriter {
            inner: arrow_ipc::writer::StreamWriter::try_new(out, schema).map_err(other)?,
        })
    }
}

impl<W: Write> BatchWriter for ArrowStreamWriter<W> {
    fn write(&mut self, batch: &RecordBatch) -> io::Result<()> {
        self.inner.write(batch).map_err(other)
    }

    fn finish(mut self: Box<Self>) -> io::Result<()> {
        self.inner.finish().map_err(other)?;
        self.inner.get_mut().flush()
    }
}

/// Writer properties for the publisher's Parquet files, one choice per column kind, each
/// measured (docs/performance.md, "Parquet writer options"):
/// - integer and timestamp columns: DELTA_BINARY_PACKED, not compressed. Deltas pack request
///   times and bounded integers into a few bits each, smaller than Snappy over PLAIN and cheaper
///   to write; Snappy finds nothing left in them. (A Parquet 2.2 encoding, from 2015; read by
///   arrow-rs, pyarrow and DuckDB, which `tests/it/parquet_readers.rs` checks.)
/// - other columns: Snappy.
/// - dictionary encoding only on string columns other than the two ids (unique per row) and
///   `model_version` (one value per table, which Snappy shrinks as well for less work than the
///   dictionary's hashing); elsewhere a dictionary is built and then abandoned.
/// - min/max statistics only for `request_timestamp`, per column chunk: readers prune files and
///   row groups by time; on ids and features they rarely prune anything, and computing them
///   took 22% of the writer's instructions.
pub fn parquet_properties(schema: &arrow_schema::Schema) -> WriterProperties {
    use parquet::basic::Encoding;
    use parquet::schema::types::ColumnPath;
    let mut b = WriterProperties::builder()
        .set_compression(Compression::SNAPPY)
        .set_dictionary_enabled(false)
        .set_statistics_enabled(EnabledStatistics::None)
        .set_column_statistics_enabled(
            ColumnPath::from(STATISTICS_COLUMN),
            EnabledStatistics::Chunk,
        );
    for (i, f) in schema.fields().iter().enumerate() {
        let path = || ColumnPath::from(f.name().as_str());
        match f.data_type() {
            DataType::Int64 | DataType::Timestamp(..) => {
                b = b
                    .set_column_encoding(path(), Encoding::DELTA_BINARY_PACKED)
                    .set_column_compression(path(), Compression::UNCOMPRESSED);
            }
            DataType::Utf8 if i >= crate::table::FIRST_FEATURE => {
                b = b.set_column_dictionary_enabled(path(), true);
            }
            _ => {}
        }
    }
    b.build()
}

/// One Parquet file.
pub struct ParquetFileWriter<W: Write + Send> {
    inner: ArrowWriter<W>,
}

impl<W: Write + Send> ParquetFileWriter<W> {
    /// A writer for `schema` onto `out`.
    pub fn new(out: W, schema: &SchemaRef) -> io::Result<Self> {
        Ok(ParquetFileWriter {
            inner: ArrowWriter::try_new(
                out,
                std::sync::Arc::clone(schema),
                Some(parquet_properties(schema)),
            )
            .map_err(other)?,
        })
    }
}

impl<W: Write + Send> BatchWriter for ParquetFileWriter<W> {
    fn write(&mut self, batch: &RecordBatch) -> io::Result<()> {
        self.inner.write(batch).map_err(other)
    }

    fn finish(self: Box<Self>) -> io::Result<()> {
        let mut out = self.inner.into_inner().map_err(other)?;
        out.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_have_six_digits_and_z() {
        assert_eq!(rfc3339_micros(0), "1970-01-01T00:00:00.000000Z");
        assert_eq!(
            rfc3339_micros(1_709_296_496_123_456),
            "2024-03-01T12:34:56.123456Z"
        );
        assert_eq!(rfc3339_micros(-1), "1969-12-31T23:59:59.999999Z");
        assert_eq!(
            rfc3339_micros(-62_135_596_800_000_000),
            "0001-01-01T00:00:00.000000Z"
        );
        assert_eq!(
            rfc3339_micros(253_402_300_799_999_999),
            "9999-12-31T23:59:59.999999Z"
        );
    }
}
