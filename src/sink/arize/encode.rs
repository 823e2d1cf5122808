//! The request body: the accepted rows of a batch as an Arrow IPC **stream** (the format of
//! pyarrow's `RecordBatchStreamWriter`, which the SDK posts), at most [`MAX_CHUNK_ROWS`] rows per
//! record batch, split into requests under a byte cap. Pure: no I/O.
//!
//! Columns come straight from the batch's arrays (filtered to the accepted rows): features and
//! prediction columns keep their Arrow type, NULLs included (a NULL INT64/BOOLEAN/STRING feature
//! is a null of its own type; a NULL FLOAT64 is what pandas' NaN becomes in the SDK's table);
//! `request_timestamp` becomes `timestamp[ns]` without a time zone (what pandas gives Merlin's
//! naive `ToDatetime()` values; whole microseconds); `_prediction_id` is built per row.

use super::schema::{Plan, Source};
use arrow_array::cast::AsArray;
use arrow_array::types::TimestampMicrosecondType;
use arrow_array::{
    Array, ArrayRef, BooleanArray, RecordBatch, StringArray, TimestampNanosecondArray,
};
use arrow_schema::{ArrowError, DataType, Field, Schema, SchemaRef, TimeUnit};
use bytes::Bytes;
use std::collections::HashMap;
use std::ops::Range;
use std::sync::Arc;

/// Rows per record batch inside one stream (the SDK's `max_chunksize`).
pub const MAX_CHUNK_ROWS: usize = 65_536;

/// The Arrow schema metadata key that carries the base64 schema (read by arize 7.x when the
/// header is absent, and the only place arize 8.x looks).
pub const SCHEMA_METADATA_KEY: &str = "arize-schema";

/// The body's Arrow schema: the plan's columns with their types, every field nullable, and the
/// schema protobuf in the metadata when it does not ride in the header (`metadata`).
pub fn body_schema(plan: &Plan, table: &Schema, metadata: Option<&str>) -> SchemaRef {
    let fields: Vec<Field> = plan
        .columns
        .iter()
        .map(|c| {
            let ty = match c.source {
                Source::Batch(i) => table.field(i).data_type().clone(),
                Source::Timestamp => DataType::Timestamp(TimeUnit::Nanosecond, None),
                Source::PredictionId => DataType::Utf8,
            };
            Field::new(&c.name, ty, true)
        })
        .collect();
    let metadata: HashMap<String, String> = metadata
        .map(|m| (SCHEMA_METADATA_KEY.to_string(), m.to_string()))
        .into_iter()
        .collect();
    Arc::new(Schema::new_with_metadata(fields, metadata))
}

/// The body columns of the rows of `records` where `keep` is true.
pub fn body_batch(
    records: &RecordBatch,
    keep: &BooleanArray,
    plan: &Plan,
    schema: &SchemaRef,
) -> Result<RecordBatch, ArrowError> {
    let kept = arrow_select::filter::filter_record_batch(records, keep)?;
    let columns = plan
        .columns
        .iter()
        .map(|c| -> ArrayRef {
            match c.source {
                Source::Batch(i) => Arc::clone(kept.column(i)),
                Source::Timestamp => {
                    let us = kept.column(2).as_primitive::<TimestampMicrosecondType>();
                    // Accepted rows lie within a few years of now: ×1000 cannot overflow.
                    Arc::new(TimestampNanosecondArray::new(
                        us.values().iter().map(|v| v.saturating_mul(1000)).collect(),
                        us.nulls().cloned(),
                    ))
                }
                Source::PredictionId => {
                    let s = kept.column(plan.session_col).as_string::<i32>();
                    let r = kept.column(plan.row_id_col).as_string::<i32>();
                    let mut buf = String::new();
                    Arc::new(
                        (0..kept.num_rows())
                            .map(|i| {
                                (s.is_valid(i) && r.is_valid(i)).then(|| {
                                    buf.clear();
                                    buf.push_str(s.value(i));
                                    buf.push('_');
                                    buf.push_str(r.value(i));
                                    buf.clone()
                                })
                            })
                            .collect::<StringArray>(),
                    )
                }
            }
        })
        .collect();
    RecordBatch::try_new(Arc::clone(schema), columns)
}

/// `rows` of `batch` as one IPC stream (schema message, record batches of at most
/// [`MAX_CHUNK_ROWS`] rows, end-of-stream marker).
pub fn encode(batch: &RecordBatch, rows: Range<usize>) -> Result<Bytes, ArrowError> {
    let mut w = arrow_ipc::writer::StreamWriter::try_new(Vec::new(), batch.schema_ref())?;
    let mut at = rows.start;
    while at < rows.end {
        let n = (rows.end - at).min(MAX_CHUNK_ROWS);
        w.write(&batch.slice(at, n))?;
        at += n;
    }
    w.finish()?;
    Ok(Bytes::from(w.into_inner()?))
}

/// Splits `rows` of `batch` into consecutive requests whose bodies are at most `cap` bytes
/// (a single row larger than `cap` is a request of its own), returning each range with its
/// body. One encoding when everything fits; otherwise the rows are cut into as many equal parts
/// as the size asks for, and a part still over the cap is halved again.
pub fn split_under_cap(
    batch: &RecordBatch,
    rows: Range<usize>,
    cap: usize,
) -> Result<Vec<(Range<usize>, Bytes)>, ArrowError> {
    let mut out = Vec::new();
    let body = encode(batch, rows.clone())?;
    let n = rows.len();
    if body.len() <= cap || n <= 1 {
        out.push((rows, body));
        return Ok(out);
    }
    let parts = body.len().div_ceil(cap).clamp(2, n);
    let mut start = rows.start;
    for p in 0..parts {
        let end = rows.start + n * (p + 1) / parts;
        out.extend(split_under_cap(batch, start..end, cap)?);
        start = end;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{FeatureType, InferenceSchema, ModelOutput};
    use crate::table::TableLayout;
    use arrow_array::{BooleanArray, Float64Array, Int64Array, TimestampMicrosecondArray};

    fn setup(n: usize) -> (RecordBatch, Plan, SchemaRef) {
        let s = InferenceSchema {
            feature_types: vec![
                ("i".into(), FeatureType::Int64),
                ("b".into(), FeatureType::Boolean),
                ("t".into(), FeatureType::String),
            ],
            model_prediction_output: ModelOutput::Ranking {
                rank_score_column: "score".into(),
                relevance_score_column: None,
            },
            session_id_column: "session_id".into(),
            row_id_column: "row_id".into(),
            feature_orders: vec![],
        };
        let layout = TableLayout::new(&s, "1");
        let plan = Plan::for_schema(&s, "m", "1").unwrap();
        let rows = 0..n as i64;
        let rb = RecordBatch::try_new(
            Arc::clone(&layout.arrow),
            vec![
                Arc::new(StringArray::from_iter_values(
                    rows.clone().map(|i| format!("s{}", i / 3)),
                )),
                Arc::new(StringArray::from_iter_values(
                    rows.clone().map(|i| format!("r{i}")),
                )),
                Arc::new(
                    TimestampMicrosecondArray::from_iter_values(
                        rows.clone().map(|i| 1_700_000_000_000_000 + i),
                    )
                    .with_timezone("UTC"),
                ),
                Arc::new(StringArray::from(vec!["1"; n])),
                Arc::new(Int64Array::from_iter(
                    rows.clone().map(|i| (i % 2 == 0).then_some(i)),
                )),
                Arc::new(BooleanArray::from_iter(
                    rows.clone().map(|i| (i % 3 != 0).then_some(i % 2 == 0)),
                )),
                Arc::new(StringArray::from_iter(
                    rows.clone().map(|i| (i % 4 != 0).then(|| format!("t{i}"))),
                )),
                Arc::new(Float64Array::from_iter_values(
                    rows.clone().map(|i| i as f64 / 10.0),
                )),
                Arc::new(Int64Array::from_iter_values(rows.map(|i| i % 3 + 1))),
            ],
        )
        .unwrap();
        let schema = body_schema(&plan, &layout.arrow, Some(&plan.schema_base64()));
        (rb, plan, schema)
    }

    fn decode(bytes: &[u8]) -> Vec<RecordBatch> {
        arrow_ipc::reader::StreamReader::try_new(std::io::Cursor::new(bytes.to_vec()), None)
            .unwrap()
            .map(|b| b.unwrap())
            .collect()
    }

    #[test]
    fn body_keeps_nulls_of_their_own_type_and_converts_the_timestamp() {
        let (rb, plan, schema) = setup(6);
        let keep = BooleanArray::from(vec![true, true, false, true, true, true]);
        let body = body_batch(&rb, &keep, &plan, &schema).unwrap();
        assert_eq!(body.num_rows(), 5);
        let names: Vec<_> = body
            .schema()
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect();
        assert_eq!(
            names,
            [
                "i",
                "b",
                "t",
                "score",
                "session_id",
                "request_timestamp",
                "_rank",
                "_prediction_id"
            ]
        );
        assert_eq!(body.column(0).data_type(), &DataType::Int64);
        assert!(body.column(0).is_null(1)); // row 1: i odd → NULL int64
        assert!(body.column(1).is_null(0)); // row 0: NULL boolean
        assert!(body.column(2).is_null(0)); // row 0: NULL string
        let ts = body
            .column(5)
            .as_primitive::<arrow_array::types::TimestampNanosecondType>();
        assert_eq!(
            ts.data_type(),
            &DataType::Timestamp(TimeUnit::Nanosecond, None)
        );
        assert_eq!(ts.value(2), (1_700_000_000_000_000 + 3) * 1000); // row 3 (row 2 dropped)
        let id = body.column(7).as_string::<i32>();
        assert_eq!(id.value(2), "s1_r3");
        assert!(body.schema().metadata().contains_key(SCHEMA_METADATA_KEY));
    }

    #[test]
    fn streams_hold_at_most_65536_rows_per_record_batch() {
        let n = MAX_CHUNK_ROWS * 2 + 5;
        let (rb, plan, schema) = setup(n);
        let body = body_batch(&rb, &BooleanArray::from(vec![true; n]), &plan, &schema).unwrap();
        let bytes = encode(&body, 0..n).unwrap();
        let sizes: Vec<_> = decode(&bytes).iter().map(RecordBatch::num_rows).collect();
        assert_eq!(sizes, [MAX_CHUNK_ROWS, MAX_CHUNK_ROWS, 5]);
    }

    #[test]
    fn requests_stay_under_the_cap_and_cover_every_row_once_in_order() {
        let n = 3_000;
        let (rb, plan, schema) = setup(n);
        let body = body_batch(&rb, &BooleanArray::from(vec![true; n]), &plan, &schema).unwrap();
        let whole = encode(&body, 0..n).unwrap().len();
        for cap in [whole, whole / 2, whole / 7, 20_000, 1] {
            let parts = split_under_cap(&body, 0..n, cap).unwrap();
            let mut next = 0;
            for (range, bytes) in &parts {
                assert_eq!(range.start, next);
                next = range.end;
                assert!(bytes.len() <= cap || range.len() == 1, "cap {cap}");
                let rows: usize = decode(bytes).iter().map(RecordBatch::num_rows).sum();
                assert_eq!(rows, range.len());
            }
            assert_eq!(next, n);
            if cap == whole {
                assert_eq!(parts.len(), 1);
            }
        }
    }
}
