//! Record batches → AppendRows requests carrying `arrow_rows` (pure; no I/O).
//!
//! Arrow IPC encapsulated messages: the schema message goes on the first request of a
//! connection, record-batch messages on every request (`row_count` 0, deprecated). A batch
//! whose request would exceed `max_request_bytes` is cut into row slices that each fit; a single
//! row that cannot fit is reported, not sent (BigQuery would refuse it whatever we do).

use super::proto::{append_rows_request, AppendRowsRequest, ArrowRecordBatch, ArrowSchema};
use arrow_array::RecordBatch;
use arrow_ipc::writer::{
    write_message, DictionaryTracker, IpcDataGenerator, IpcWriteOptions, StreamWriter,
};
use arrow_schema::{ArrowError, Schema};
use bytes::Bytes;
use prost::Message;

/// Serialized Arrow IPC schema message.
pub fn schema_bytes(schema: &Schema) -> Result<Bytes, ArrowError> {
    let gen = IpcDataGenerator::default();
    let opts = IpcWriteOptions::default();
    let mut tracker = DictionaryTracker::new(false);
    let enc = gen.schema_to_bytes_with_dictionary_tracker(schema, &mut tracker, &opts);
    let mut buf = Vec::new();
    write_message(&mut buf, enc, &opts)?;
    Ok(buf.into())
}

/// Serialized Arrow IPC record-batch message (slices are written truncated).
///
/// Written by a `StreamWriter` straight into one buffer sized from the batch beforehand: the
/// arrays' bytes are copied once. (`IpcDataGenerator::encode` first gathers the body in a
/// buffer of its own that grows by doubling, then `write_message` copies it again: three copies
/// of every byte on the BigQuery path, measured in docs/performance.md, "IPC encoding".) The stream's
/// schema message, which the writer puts first, is left out of the returned slice; the
/// record-batch message is the same bytes either way (test
/// `batch_bytes_are_the_generators_message`).
pub fn batch_bytes(batch: &RecordBatch) -> Result<Bytes, ArrowError> {
    let mut w = StreamWriter::try_new(Vec::new(), batch.schema_ref())?;
    let schema_len = w.get_ref().len();
    w.get_mut().reserve(message_bound(batch).unwrap_or(0));
    w.write(batch)?;
    let out = std::mem::take(w.get_mut());
    Ok(Bytes::from(out).slice(schema_len..))
}

/// At least the length of a batch's record-batch message ([`batch_bytes`]) when its columns are
/// flat (every table here): every buffer of its rows (`get_slice_memory_size`: a slice counts
/// its own rows only, NULLs included), each padded to the writer's 64-byte alignment, and the
/// message header (a fixed part, and per column a field node and its buffer entries, 16 bytes
/// each). `None` when a column's size cannot be read. Used to size the buffer and to skip
/// looking for oversized rows ([`oversized_rows`]).
fn message_bound(batch: &RecordBatch) -> Option<usize> {
    const ALIGN: usize = 64;
    let mut body = 0usize;
    for a in batch.columns() {
        let d = a.to_data();
        body = body
            .checked_add(d.get_slice_memory_size().ok()?)?
            .checked_add(ALIGN * (d.buffers().len() + 1))?;
    }
    body.checked_add(1024 + 64 * batch.num_columns())
}

/// One AppendRows request. `schema` is set on the first request of a connection.
pub fn append_request(
    write_stream: &str,
    schema: Option<&Bytes>,
    payload: &Bytes,
    offset: Option<i64>,
) -> AppendRowsRequest {
    AppendRowsRequest {
        write_stream: write_stream.to_string(),
        offset,
        rows: Some(append_rows_request::Rows::ArrowRows(
            append_rows_request::ArrowData {
                writer_schema: schema.map(|s| ArrowSchema {
                    serialized_schema: s.clone(),
                }),
                // `row_count` is deprecated: left 0.
                rows: Some(ArrowRecordBatch {
                    serialized_record_batch: payload.clone(),
                    ..Default::default()
                }),
            },
        )),
        ..Default::default()
    }
}

/// The largest record-batch payload that keeps a request carrying the schema, the stream name
/// and an offset within `max_request_bytes`.
pub fn payload_budget(max_request_bytes: usize, write_stream: &str, schema: &Bytes) -> usize {
    let frame =
        append_request(write_stream, Some(schema), &Bytes::new(), Some(i64::MAX)).encoded_len();
    // Length prefixes of the three nested messages grow by up to 4 bytes each with the payload.
    max_request_bytes.saturating_sub(frame + 16)
}

/// A contiguous row slice of a batch, encoded.
#[derive(Debug, Clone)]
pub struct Piece {
    /// Index of the slice's first row in the batch it was cut from.
    pub offset: usize,
    /// The rows (a zero-copy slice).
    pub batch: RecordBatch,
    /// Its IPC record-batch message.
    pub payload: Bytes,
}

/// A batch cut to fit.
#[derive(Debug, Clone, Default)]
pub struct Split {
    /// Slices that fit, in row order.
    pub pieces: Vec<Piece>,
    /// Rows (indexes in the input) that alone exceed the budget.
    pub oversized: Vec<usize>,
}

/// Encodes `batch` into slices whose payload is at most `budget` bytes each.
///
/// The whole batch is tried first; a batch that is too large is cut into as many equal row
/// slices as its size suggests, and any slice still too large is halved until it fits.
pub fn split_to_fit(batch: &RecordBatch, budget: usize) -> Result<Split, ArrowError> {
    let mut out = Split::default();
    if batch.num_rows() == 0 {
        return Ok(out);
    }
    let whole = batch_bytes(batch)?;
    if whole.len() <= budget {
        out.pieces.push(Piece {
            offset: 0,
            batch: batch.clone(),
            payload: whole,
        });
        return Ok(out);
    }
    // First guess from the average row size, with 10% slack; halving fixes the rest.
    let n = batch.num_rows();
    let parts = (whole.len() as f64 * 1.1 / budget.max(1) as f64)
        .ceil()
        .max(2.0) as usize;
    let step = n.div_ceil(parts.min(n));
    let mut start = 0;
    while start < n {
        let len = step.min(n - start);
        fit(batch, start, len, budget, &mut out)?;
        start += len;
    }
    Ok(out)
}

/// The rows of `batch` that [`split_to_fit`] would find alone over `budget` (and a writer would
/// refuse), without encoding anything when an upper bound of the whole batch's encoding fits:
/// a row's own encoding is never larger than its batch's (every buffer of it is a part of the
/// batch's, padded the same way, under the same header). Otherwise the batch is split as the
/// writer splits it.
pub fn oversized_rows(batch: &RecordBatch, budget: usize) -> Result<Vec<usize>, ArrowError> {
    if message_bound(batch).is_some_and(|b| b <= budget) {
        return Ok(Vec::new());
    }
    Ok(split_to_fit(batch, budget)?.oversized)
}

/// Why a row alone over a request's `budget` is refused (its dead letter's message).
pub fn oversized_message(budget: usize) -> String {
    format!("the row alone exceeds max_request_bytes ({budget} payload bytes)")
}

fn fit(
    batch: &RecordBatch,
    start: usize,
    len: usize,
    budget: usize,
    out: &mut Split,
) -> Result<(), ArrowError> {
    let slice = batch.slice(start, len);
    let payload = batch_bytes(&slice)?;
    if payload.len() <= budget {
        out.pieces.push(Piece {
            offset: start,
            batch: slice,
            payload,
        });
    } else if len == 1 {
        out.oversized.push(start);
    } else {
        let half = len / 2;
        fit(batch, start, half, budget, out)?;
        fit(batch, start + half, len - half, budget, out)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{ArrayRef, Int64Array, StringArray};
    use arrow_schema::{DataType, Field};
    use std::sync::Arc;

    fn batch(rows: usize, text: usize) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, true),
            Field::new("s", DataType::Utf8, true),
        ]));
        let ids = Int64Array::from_iter_values(0..rows as i64);
        let s = StringArray::from_iter_values((0..rows).map(|i| format!("{i:0>text$}")));
        RecordBatch::try_new(schema, vec![Arc::new(ids), Arc::new(s)]).unwrap()
    }

    /// The message as `IpcDataGenerator::encode` and `write_message` make it (what
    /// `batch_bytes` wrote before it used a `StreamWriter`).
    fn generator_message(batch: &RecordBatch) -> Vec<u8> {
        use arrow_ipc::writer::IpcWriteContext;
        let opts = IpcWriteOptions::default();
        let mut tracker = DictionaryTracker::new(false);
        let (_, enc) = IpcDataGenerator::default()
            .encode(batch, &mut tracker, &opts, &mut IpcWriteContext::default())
            .unwrap();
        let mut buf = Vec::new();
        write_message(&mut buf, enc, &opts).unwrap();
        buf
    }

    /// Whole batches and slices of them (first row, middle, last row), with and without NULLs.
    fn pieces(rows: usize) -> Vec<RecordBatch> {
        let b = batch(rows, 17);
        let m = mixed(rows);
        vec![
            b.clone(),
            b.slice(0, 1),
            b.slice(rows / 3, rows / 3),
            b.slice(rows - 1, 1),
            m.clone(),
            m.slice(5, rows / 3),
        ]
    }

    #[test]
    fn batch_bytes_are_the_generators_message() {
        for piece in pieces(3_000) {
            let got = batch_bytes(&piece).unwrap();
            assert_eq!(&got[..], &generator_message(&piece)[..]);
            let back = arrow_ipc::reader::StreamReader::try_new(
                [
                    &schema_bytes(piece.schema().as_ref()).unwrap()[..],
                    &got[..],
                ]
                .concat()
                .as_slice(),
                None,
            )
            .unwrap()
            .next()
            .unwrap()
            .unwrap();
            assert_eq!(back, piece);
        }
    }

    /// NULLs, booleans and timestamps beside `batch`'s columns.
    fn mixed(rows: usize) -> RecordBatch {
        use arrow_array::{ArrayRef, BooleanArray, TimestampMicrosecondArray};
        let ts: ArrayRef = Arc::new(
            TimestampMicrosecondArray::from_iter(
                (0..rows as i64).map(|i| (i % 3 != 0).then_some(i)),
            )
            .with_timezone("UTC"),
        );
        let flags: ArrayRef = Arc::new(BooleanArray::from_iter(
            (0..rows).map(|i| (i % 5 != 0).then_some(i % 2 == 0)),
        ));
        let nums: ArrayRef = Arc::new(Int64Array::from_iter(
            (0..rows as i64).map(|i| (i % 7 != 0).then_some(i * 1_000_003)),
        ));
        RecordBatch::try_from_iter([("ts", ts), ("flag", flags), ("n", nums)]).unwrap()
    }

    #[test]
    fn the_bound_covers_the_message() {
        for rows in [8, 64, 5_000] {
            for piece in pieces(rows) {
                let len = batch_bytes(&piece).unwrap().len();
                let bound = message_bound(&piece).unwrap();
                assert!(bound >= len, "bound {bound} < message {len} ({rows} rows)");
                assert!(
                    bound <= len + 8_192,
                    "bound {bound} far above message {len}"
                );
            }
        }
    }

    /// What the exactly-once sink refuses before writing is exactly what the writer's split
    /// finds alone over the budget, whether the bound lets it skip the encoding or not.
    #[test]
    fn oversized_rows_are_the_splits_oversized_rows() {
        // Rows of 20, 20, 6,000, 20 and 9,000 characters.
        let s = StringArray::from_iter_values([20, 20, 6_000, 20, 9_000].map(|n| "x".repeat(n)));
        let b = RecordBatch::try_from_iter([("s", Arc::new(s) as ArrayRef)]).unwrap();
        for budget in [1_000, 5_000, 8_000, 20_000, 1 << 20] {
            assert_eq!(
                oversized_rows(&b, budget).unwrap(),
                split_to_fit(&b, budget).unwrap().oversized,
                "budget {budget}"
            );
        }
        assert_eq!(oversized_rows(&b, 8_000).unwrap(), [4]);
        assert!(oversized_rows(&b, 1 << 20).unwrap().is_empty());
    }

    #[test]
    fn a_small_batch_is_one_piece() {
        let b = batch(10, 8);
        let s = split_to_fit(&b, 1 << 20).unwrap();
        assert_eq!(s.pieces.len(), 1);
        assert_eq!(s.pieces[0].batch.num_rows(), 10);
        assert!(s.oversized.is_empty());
    }

    #[test]
    fn slices_are_encoded_truncated() {
        let b = batch(10_000, 100);
        let whole = batch_bytes(&b).unwrap().len();
        let tenth = batch_bytes(&b.slice(5_000, 1_000)).unwrap().len();
        assert!(
            tenth * 8 < whole,
            "a slice must not carry the parent's buffers: {tenth} vs {whole}"
        );
    }

    #[test]
    fn large_batches_are_cut_into_fitting_slices_covering_every_row_once() {
        let b = batch(20_000, 50);
        let budget = 100_000;
        let s = split_to_fit(&b, budget).unwrap();
        assert!(s.pieces.len() > 10);
        let mut next = 0;
        for p in &s.pieces {
            assert!(p.payload.len() <= budget, "{} > {budget}", p.payload.len());
            assert_eq!(p.offset, next, "pieces in row order, no gap or overlap");
            next += p.batch.num_rows();
        }
        assert_eq!(next, 20_000);
    }

    #[test]
    fn rows_that_cannot_fit_are_reported() {
        let b = batch(4, 5_000);
        let s = split_to_fit(&b, 3_000).unwrap();
        assert!(s.pieces.is_empty());
        assert_eq!(s.oversized, [0, 1, 2, 3]);
    }

    #[test]
    fn requests_stay_under_the_cap() {
        let b = batch(30_000, 40);
        let schema = schema_bytes(b.schema().as_ref()).unwrap();
        let stream = "projects/p/datasets/d/tables/t/streams/_default";
        let max = 200_000;
        let s = split_to_fit(&b, payload_budget(max, stream, &schema)).unwrap();
        for p in &s.pieces {
            let req = append_request(stream, Some(&schema), &p.payload, Some(1 << 40));
            assert!(req.encoded_len() <= max, "{} > {max}", req.encoded_len());
        }
    }

    #[test]
    fn empty_batches_need_no_request() {
        let s = split_to_fit(&batch(0, 1), 10).unwrap();
        assert!(s.pieces.is_empty() && s.oversized.is_empty());
    }
}
