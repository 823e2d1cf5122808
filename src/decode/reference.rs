//! The readable reference: the same conversion written plainly on prost's generated types.
//!
//! It is slow (prost materialises every `Struct` as a map of boxed values) and allocates per
//! cell; that is the point. The property tests check that [`super::Decoder`] yields exactly
//! these rows, and the benchmarks use it as the generic-prost baseline.

use crate::proto::PredictionLog;
use crate::table::{ColumnType, Derived, TableLayout, FIRST_FEATURE};
use arrow_array::cast::AsArray;
use arrow_array::types::{Float64Type, Int64Type, TimestampMicrosecondType};
use arrow_array::{Array, RecordBatch};
use prost::Message;
use prost_types::value::Kind;
use prost_types::{ListValue, Struct, Value};

/// One cell of a table row.
#[derive(Debug, Clone)]
pub enum Cell {
    /// NULL.
    Null,
    /// STRING.
    Str(String),
    /// INTEGER.
    Int(i64),
    /// FLOAT (compared bit for bit, so NaN equals NaN).
    Float(f64),
    /// BOOLEAN.
    Bool(bool),
    /// TIMESTAMP, microseconds since the epoch.
    Ts(i64),
}

impl PartialEq for Cell {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Cell::Null, Cell::Null) => true,
            (Cell::Str(a), Cell::Str(b)) => a == b,
            (Cell::Int(a), Cell::Int(b)) | (Cell::Ts(a), Cell::Ts(b)) => a == b,
            (Cell::Float(a), Cell::Float(b)) => a.to_bits() == b.to_bits(),
            (Cell::Bool(a), Cell::Bool(b)) => a == b,
            _ => false,
        }
    }
}

/// Reads every row of a record batch as cells (for tests and comparisons).
pub fn batch_cells(batch: &RecordBatch) -> Vec<Vec<Cell>> {
    let mut rows = vec![Vec::with_capacity(batch.num_columns()); batch.num_rows()];
    for col in batch.columns() {
        for (i, row) in rows.iter_mut().enumerate() {
            let cell = if col.is_null(i) {
                Cell::Null
            } else {
                match col.data_type() {
                    arrow_schema::DataType::Utf8 => Cell::Str(col.as_string::<i32>().value(i).to_string()),
                    arrow_schema::DataType::Int64 => Cell::Int(col.as_primitive::<Int64Type>().value(i)),
                    arrow_schema::DataType::Float64 => Cell::Float(col.as_primitive::<Float64Type>().value(i)),
                    arrow_schema::DataType::Boolean => Cell::Bool(col.as_boolean().value(i)),
                    arrow_schema::DataType::Timestamp(..) => {
                        Cell::Ts(col.as_primitive::<TimestampMicrosecondType>().value(i))
                    }
                    other => panic!("unexpected column type {other}"),
                }
            };
            row.push(cell);
        }
    }
    rows
}

fn list<'a>(s: &'a Struct, key: &str) -> Result<Option<&'a [Value]>, String> {
    match s.fields.get(key).and_then(|v| v.kind.as_ref()) {
        None | Some(Kind::NullValue(_)) => Ok(None),
        Some(Kind::ListValue(ListValue { values })) => Ok(Some(values)),
        Some(_) => Err(format!("{key} is not a list")),
    }
}

fn row_values(v: &Value) -> Result<Vec<&Value>, String> {
    match &v.kind {
        Some(Kind::ListValue(l)) => Ok(l.values.iter().collect()),
        Some(Kind::StructValue(_)) => Err("struct row".into()),
        _ => Ok(vec![v]),
    }
}

fn coerce(v: &Value, ty: ColumnType) -> Result<Cell, String> {
    let kind = match &v.kind {
        None | Some(Kind::NullValue(_)) => return Ok(Cell::Null),
        Some(k) => k,
    };
    Ok(match (ty, kind) {
        (_, Kind::ListValue(_) | Kind::StructValue(_)) => return Err("nested".into()),
        (ColumnType::Float64, Kind::NumberValue(f)) => Cell::Float(*f),
        (ColumnType::Float64, Kind::BoolValue(b)) => Cell::Float(if *b { 1.0 } else { 0.0 }),
        (ColumnType::Int64, Kind::NumberValue(f)) => {
            if !f.is_finite() || f.trunc() >= 9.223_372_036_854_776e18 || f.trunc() < -9.223_372_036_854_776e18 {
                return Err("int64 out of range".into());
            }
            Cell::Int(f.trunc() as i64)
        }
        (ColumnType::Int64, Kind::BoolValue(b)) => Cell::Int(i64::from(*b)),
        (ColumnType::Boolean, Kind::BoolValue(b)) => Cell::Bool(*b),
        (ColumnType::String, Kind::StringValue(s)) => Cell::Str(s.clone()),
        _ => return Err("type mismatch".into()),
    })
}

/// Converts one serialized log into rows, or says why it is rejected.
pub fn convert(layout: &TableLayout, bytes: &[u8]) -> Result<Vec<Vec<Cell>>, String> {
    if bytes.is_empty() {
        return Err("empty".into());
    }
    let log = PredictionLog::decode(bytes).map_err(|e| e.to_string())?;
    let ts = log.request_timestamp.ok_or("no timestamp")?;
    if !(0..1_000_000_000).contains(&ts.nanos) || !(-62_135_596_800..=253_402_300_799).contains(&ts.seconds) {
        return Err("timestamp out of range".into());
    }
    let micros = ts.seconds * 1_000_000 + i64::from(ts.nanos / 1000);
    let ft = log.input.and_then(|i| i.features_table).ok_or("no features table")?;
    let pt = log.output.and_then(|o| o.prediction_results_table).ok_or("no predictions table")?;
    let f_data = list(&ft, "data")?.ok_or("no feature data")?;
    let p_data = list(&pt, "data")?.ok_or("no prediction data")?;
    let row_ids = list(&pt, "row_ids")?.ok_or("no row ids")?;

    let names = |vals: &[Value]| -> Result<Vec<String>, String> {
        vals.iter()
            .map(|v| match &v.kind {
                Some(Kind::StringValue(s)) => Ok(s.clone()),
                _ => Err("column name is not a string".to_string()),
            })
            .collect()
    };
    let feature_names = if !layout.feature_orders.is_empty() {
        layout.feature_orders.clone()
    } else {
        names(list(&ft, "columns")?.ok_or("no feature columns")?)?
    };
    let first_score = layout.first_score();
    let score_cols = &layout.columns[first_score..first_score + layout.n_scores];
    let score_names = match list(&pt, "columns")? {
        Some(c) => names(c)?,
        None => score_cols.iter().map(|c| c.name.clone()).collect(),
    };
    let feature_cols = &layout.columns[FIRST_FEATURE..FIRST_FEATURE + layout.n_features];
    // Declared columns named twice in a table are rejected (feature_orders: first one wins).
    let positions = |names: &[String], targets: &[crate::table::Column], first_wins: bool| {
        let mut out: Vec<Option<usize>> = vec![None; targets.len()];
        for (pos, n) in names.iter().enumerate() {
            if let Some(t) = targets.iter().position(|c| &c.name == n) {
                if out[t].is_some() {
                    if first_wins {
                        continue;
                    }
                    return Err("duplicate column".to_string());
                }
                out[t] = Some(pos);
            }
        }
        Ok(out)
    };
    let f_pos = positions(&feature_names, feature_cols, !layout.feature_orders.is_empty())?;
    let s_pos = positions(&score_names, score_cols, false)?;

    if f_data.len() != p_data.len() || p_data.len() != row_ids.len() {
        return Err("row counts differ".into());
    }
    let mut rows = Vec::new();
    let mut scores_per_row = Vec::new();
    for i in 0..f_data.len() {
        let mut row = Vec::new();
        let Some(Kind::StringValue(id)) = &row_ids[i].kind else {
            return Err("row id is not a string".into());
        };
        row.push(Cell::Str(log.prediction_id.clone()));
        row.push(Cell::Str(id.clone()));
        row.push(Cell::Ts(micros));
        row.push(Cell::Str(layout.model_version.clone()));
        let fv = row_values(&f_data[i])?;
        if fv.len() != feature_names.len() {
            return Err("feature row length".into());
        }
        for (pos, n) in feature_names.iter().enumerate() {
            // Values of dropped columns are not looked at, as in Merlin.
            if let Some(t) = feature_cols.iter().position(|c| &c.name == n) {
                if f_pos[t] == Some(pos) {
                    coerce(fv[pos], feature_cols[t].ty)?;
                }
            }
        }
        for (t, c) in feature_cols.iter().enumerate() {
            row.push(match f_pos[t] {
                Some(pos) => coerce(fv[pos], c.ty)?,
                None => Cell::Null,
            });
        }
        let pv = row_values(&p_data[i])?;
        if pv.len() != score_names.len() {
            return Err("prediction row length".into());
        }
        let mut scores = Vec::new();
        for pos in s_pos.iter() {
            let cell = match pos {
                Some(pos) => coerce(pv[*pos], ColumnType::Float64)?,
                None => Cell::Null,
            };
            scores.push(match cell {
                Cell::Float(f) if !f.is_nan() => Some(f),
                _ => None,
            });
            row.push(cell);
        }
        match &layout.derived {
            Derived::BinaryLabel { positive, negative, threshold } => row.push(match scores[0] {
                Some(s) if s >= *threshold => Cell::Str(positive.clone()),
                Some(_) => Cell::Str(negative.clone()),
                None => Cell::Null,
            }),
            Derived::ArgmaxLabel { labels } => {
                let mut best: Option<usize> = None;
                for (k, s) in scores.iter().enumerate() {
                    if let Some(s) = s {
                        if best.is_none_or(|b| *s > scores[b].unwrap_or(f64::NEG_INFINITY)) {
                            best = Some(k);
                        }
                    }
                }
                row.push(best.map_or(Cell::Null, |k| Cell::Str(labels[k].clone())));
            }
            Derived::Rank | Derived::None => {}
        }
        scores_per_row.push(scores.first().copied().flatten());
        rows.push(row);
    }
    if matches!(layout.derived, Derived::Rank) {
        for (i, row) in rows.iter_mut().enumerate() {
            row.push(match scores_per_row[i] {
                None => Cell::Null,
                Some(s) => {
                    let higher = scores_per_row.iter().flatten().filter(|o| **o > s).count();
                    let equal_before = scores_per_row[..i].iter().flatten().filter(|o| **o == s).count();
                    Cell::Int((1 + higher + equal_before) as i64)
                }
            });
        }
    }
    Ok(rows)
}
