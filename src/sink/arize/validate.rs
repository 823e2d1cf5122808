//! Row validation: exactly the rows arize 7.10.2's `Validator.validate_values` refuses for the
//! model type, found row by row. The SDK refuses the whole frame for one bad row; the sink
//! dead-letters only that row (as a row letter naming the sink) and sends the rest. Pure: the
//! caller passes the current time.
//!
//! The SDK's checks, and what each means for one row of Merlin's DataFrame:
//! - `_check_invalid_missing_values`: the prediction id (and, for ranking, the group id and the
//!   rank) must not be null;
//! - `_check_value_timestamp`: the timestamp must not be null, nor more than 5 × 365 days before
//!   or 365 days after now;
//! - `_check_id_field_str_length`: the prediction id (and, for ranking, the group id) is 1–512
//!   characters (Unicode code points, as Python's `len`);
//! - `_check_value_rank`: the rank is within 1–100;
//! - `_check_invalid_record_prod`: a record must have a prediction: for binary classification the
//!   label or the score, for regression the score (NaN counts as missing, as in pandas), for
//!   ranking the score, group id or rank (the latter two are never null once the checks above
//!   passed).
//!
//! Checks that look at column types or configuration (feature types, column names) are not
//! per-row; the configuration satisfies them by construction.

use super::schema::{ArizeModelType, Plan};
use crate::sink::RejectedRow;
use arrow_array::cast::AsArray;
use arrow_array::types::{Float64Type, Int64Type, TimestampMicrosecondType};
use arrow_array::{Array, RecordBatch};

/// Shortest prediction id / group id Arize accepts (characters).
pub const MIN_ID_CHARS: usize = 1;
/// Longest prediction id / group id Arize accepts (characters).
pub const MAX_ID_CHARS: usize = 512;
/// Lowest rank Arize accepts.
pub const MIN_RANK: i64 = 1;
/// Highest rank Arize accepts.
pub const MAX_RANK: i64 = 100;
/// How far back a timestamp may be: 5 × 365 days, in microseconds.
pub const MAX_PAST_MICROS: i64 = 5 * 365 * 86_400 * 1_000_000;
/// How far ahead a timestamp may be: 365 days, in microseconds.
pub const MAX_FUTURE_MICROS: i64 = 365 * 86_400 * 1_000_000;

/// The rows of `records` (in the table layout) that Arize would refuse, in row order, each with
/// its first failing check. `now_micros` is the current unix time in microseconds.
pub fn refused_rows(records: &RecordBatch, plan: &Plan, now_micros: i64) -> Vec<RejectedRow> {
    let ts = records.column(2).as_primitive::<TimestampMicrosecondType>();
    let session = records.column(plan.session_col).as_string::<i32>();
    let row_id = records.column(plan.row_id_col).as_string::<i32>();
    let score = records.column(plan.score_col).as_primitive::<Float64Type>();
    let label = match (plan.model_type, plan.derived_col) {
        (ArizeModelType::ScoreCategorical, Some(d)) => Some(records.column(d).as_string::<i32>()),
        _ => None,
    };
    let rank = match (plan.model_type, plan.derived_col) {
        (ArizeModelType::Ranking, Some(d)) => Some(records.column(d).as_primitive::<Int64Type>()),
        _ => None,
    };
    let (lo, hi) = (
        now_micros.saturating_sub(MAX_PAST_MICROS),
        now_micros.saturating_add(MAX_FUTURE_MICROS),
    );
    let mut out = Vec::new();
    for row in 0..records.num_rows() {
        let refuse = |code: &'static str, message: String| RejectedRow { row, code, message };
        if ts.is_null(row) {
            out.push(refuse(
                "arize_timestamp_missing",
                "Arize refuses a record without a timestamp".into(),
            ));
            continue;
        }
        let t = ts.value(row);
        if t < lo || t > hi {
            out.push(refuse(
                "arize_timestamp_range",
                format!("request_timestamp {t} µs is more than 5 years (5 × 365 days) in the past or 1 year (365 days) in the future; Arize refuses it"),
            ));
            continue;
        }
        if session.is_null(row) || row_id.is_null(row) {
            out.push(refuse(
                "arize_prediction_id_missing",
                "the prediction id (<session id>_<row id>) is null; Arize refuses it".into(),
            ));
            continue;
        }
        let id_chars = session.value(row).chars().count() + 1 + row_id.value(row).chars().count();
        if !(MIN_ID_CHARS..=MAX_ID_CHARS).contains(&id_chars) {
            out.push(refuse(
                "arize_prediction_id_length",
                format!("the prediction id (<session id>_<row id>) has {id_chars} characters; Arize accepts {MIN_ID_CHARS} to {MAX_ID_CHARS}"),
            ));
            continue;
        }
        if let Some(rank) = rank {
            let group_chars = session.value(row).chars().count();
            if !(MIN_ID_CHARS..=MAX_ID_CHARS).contains(&group_chars) {
                out.push(refuse(
                    "arize_group_id_length",
                    format!("the ranking group id (session id) has {group_chars} characters; Arize accepts {MIN_ID_CHARS} to {MAX_ID_CHARS}"),
                ));
                continue;
            }
            if rank.is_null(row) {
                out.push(refuse(
                    "arize_rank_missing",
                    "the rank is null; Arize refuses it".into(),
                ));
                continue;
            }
            let r = rank.value(row);
            if !(MIN_RANK..=MAX_RANK).contains(&r) {
                out.push(refuse(
                    "arize_rank_range",
                    format!("rank {r} is outside Arize's range {MIN_RANK} to {MAX_RANK} (a ranking log with more than {MAX_RANK} rows)"),
                ));
                continue;
            }
        }
        let score_missing = score.is_null(row) || score.value(row).is_nan();
        let no_prediction = match plan.model_type {
            ArizeModelType::ScoreCategorical => {
                score_missing && label.is_none_or(|l| l.is_null(row))
            }
            ArizeModelType::Numeric => score_missing,
            // The group id and the rank were checked above: never all null.
            ArizeModelType::Ranking => false,
        };
        if no_prediction {
            out.push(refuse(
                "arize_no_prediction",
                "the record has neither a prediction label nor a score; Arize refuses it".into(),
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{FeatureType, InferenceSchema, ModelOutput};
    use crate::table::TableLayout;
    use arrow_array::{ArrayRef, Float64Array, Int64Array, StringArray, TimestampMicrosecondArray};
    use std::sync::Arc;

    const NOW: i64 = 1_780_000_000_000_000;

    fn schema(out: ModelOutput) -> InferenceSchema {
        InferenceSchema {
            feature_types: vec![("f".into(), FeatureType::Int64)],
            model_prediction_output: out,
            session_id_column: "session_id".into(),
            row_id_column: "row_id".into(),
            feature_orders: vec![],
        }
    }

    fn binary() -> InferenceSchema {
        schema(ModelOutput::Binary {
            prediction_score_column: "s".into(),
            actual_score_column: None,
            positive_class_label: "p".into(),
            negative_class_label: "n".into(),
            score_threshold: 0.5,
        })
    }

    fn regression() -> InferenceSchema {
        schema(ModelOutput::Regression {
            prediction_score_column: "s".into(),
            actual_score_column: None,
        })
    }

    fn ranking() -> InferenceSchema {
        schema(ModelOutput::Ranking {
            rank_score_column: "s".into(),
            relevance_score_column: None,
        })
    }

    struct Row {
        session: Option<String>,
        row_id: Option<String>,
        ts: Option<i64>,
        score: Option<f64>,
        derived_label: Option<&'static str>,
        rank: Option<i64>,
    }

    fn good() -> Row {
        Row {
            session: Some("s1".into()),
            row_id: Some("r1".into()),
            ts: Some(NOW),
            score: Some(0.7),
            derived_label: Some("p"),
            rank: Some(1),
        }
    }

    fn batch(s: &InferenceSchema, rows: &[Row]) -> (RecordBatch, Plan) {
        let layout = TableLayout::new(s, "1");
        let mut cols: Vec<ArrayRef> = vec![
            Arc::new(StringArray::from(
                rows.iter().map(|r| r.session.clone()).collect::<Vec<_>>(),
            )),
            Arc::new(StringArray::from(
                rows.iter().map(|r| r.row_id.clone()).collect::<Vec<_>>(),
            )),
            Arc::new(
                TimestampMicrosecondArray::from(rows.iter().map(|r| r.ts).collect::<Vec<_>>())
                    .with_timezone("UTC"),
            ),
            Arc::new(StringArray::from(vec!["1"; rows.len()])),
            Arc::new(Int64Array::from(vec![1; rows.len()])),
            Arc::new(Float64Array::from(
                rows.iter().map(|r| r.score).collect::<Vec<_>>(),
            )),
        ];
        match s.model_prediction_output {
            ModelOutput::Binary { .. } => cols.push(Arc::new(StringArray::from(
                rows.iter().map(|r| r.derived_label).collect::<Vec<_>>(),
            ))),
            ModelOutput::Ranking { .. } => cols.push(Arc::new(Int64Array::from(
                rows.iter().map(|r| r.rank).collect::<Vec<_>>(),
            ))),
            _ => {}
        }
        let rb = RecordBatch::try_new(Arc::clone(&layout.arrow), cols).unwrap();
        (rb, Plan::for_schema(s, "m", "1").unwrap())
    }

    fn codes(s: &InferenceSchema, rows: Vec<Row>) -> Vec<(usize, &'static str)> {
        let (rb, plan) = batch(s, &rows);
        refused_rows(&rb, &plan, NOW)
            .into_iter()
            .map(|r| (r.row, r.code))
            .collect()
    }

    #[test]
    fn good_rows_pass_for_every_model_type() {
        for s in [binary(), regression(), ranking()] {
            assert_eq!(codes(&s, vec![good(), good()]), []);
        }
    }

    #[test]
    fn timestamp_bounds_are_5_years_back_and_1_year_ahead_inclusive() {
        let at = |ts| Row {
            ts: Some(ts),
            ..good()
        };
        let rows = vec![
            at(NOW - MAX_PAST_MICROS),
            at(NOW - MAX_PAST_MICROS - 1),
            at(NOW + MAX_FUTURE_MICROS),
            at(NOW + MAX_FUTURE_MICROS + 1),
            Row { ts: None, ..good() },
        ];
        assert_eq!(
            codes(&regression(), rows),
            [
                (1, "arize_timestamp_range"),
                (3, "arize_timestamp_range"),
                (4, "arize_timestamp_missing")
            ]
        );
    }

    #[test]
    fn prediction_id_is_1_to_512_characters_counted_as_code_points() {
        // session (509 × "é", 2 bytes each) + "_" + "r1" = 512 characters, 1021 bytes.
        let ok = Row {
            session: Some("é".repeat(509)),
            ..good()
        };
        let long = Row {
            session: Some("é".repeat(510)),
            ..good()
        };
        let null = Row {
            row_id: None,
            ..good()
        };
        assert_eq!(
            codes(&binary(), vec![ok, long, null]),
            [
                (1, "arize_prediction_id_length"),
                (2, "arize_prediction_id_missing")
            ]
        );
    }

    #[test]
    fn ranking_checks_group_id_and_rank() {
        let rows = vec![
            Row {
                session: Some(String::new()),
                ..good()
            },
            Row {
                rank: None,
                ..good()
            },
            Row {
                rank: Some(101),
                ..good()
            },
            Row {
                rank: Some(100),
                ..good()
            },
            Row {
                rank: Some(0),
                ..good()
            },
            // A ranking row without a score still has a group id and a rank: accepted.
            Row {
                score: None,
                ..good()
            },
        ];
        assert_eq!(
            codes(&ranking(), rows),
            [
                (0, "arize_group_id_length"),
                (1, "arize_rank_missing"),
                (2, "arize_rank_range"),
                (4, "arize_rank_range")
            ]
        );
    }

    #[test]
    fn a_record_without_any_prediction_is_refused() {
        let no_score = || Row {
            score: None,
            derived_label: None,
            ..good()
        };
        let nan = || Row {
            score: Some(f64::NAN),
            derived_label: None,
            ..good()
        };
        assert_eq!(
            codes(&binary(), vec![no_score(), nan(), good()]),
            [(0, "arize_no_prediction"), (1, "arize_no_prediction")]
        );
        assert_eq!(
            codes(&regression(), vec![good(), no_score(), nan()]),
            [(1, "arize_no_prediction"), (2, "arize_no_prediction")]
        );
        // A binary row with a label but a NaN score has a prediction.
        let labelled_nan = Row {
            score: Some(f64::NAN),
            ..good()
        };
        assert_eq!(codes(&binary(), vec![labelled_nan]), []);
        // The session id may be empty outside ranking: "_r1" is 3 characters.
        let empty_session = Row {
            session: Some(String::new()),
            ..good()
        };
        assert_eq!(codes(&binary(), vec![empty_session]), []);
    }
}
