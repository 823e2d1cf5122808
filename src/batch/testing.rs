//! Test helpers: a small regression-model layout and PredictionLogs with a chosen number of rows
//! and timestamp (shared by the batcher and sink tests).

use crate::config::{FeatureType, InferenceSchema, ModelOutput};
use crate::proto::{ModelInput, ModelOutput as PbOutput, PredictionLog};
use crate::table::TableLayout;
use prost::Message;
use prost_types::value::Kind;
use prost_types::{ListValue, Struct, Timestamp, Value};
use std::sync::Arc;

fn v(kind: Kind) -> Value {
    Value { kind: Some(kind) }
}

fn list(values: Vec<Value>) -> Value {
    v(Kind::ListValue(ListValue { values }))
}

fn s(x: &str) -> Value {
    v(Kind::StringValue(x.to_string()))
}

/// Layout: session_id, row_id, request_timestamp, model_version, `x` (int64), `y` (float64).
pub(crate) fn layout() -> Arc<TableLayout> {
    let schema = InferenceSchema {
        feature_types: vec![("x".into(), FeatureType::Int64)],
        model_prediction_output: ModelOutput::Regression {
            prediction_score_column: "y".into(),
            actual_score_column: None,
        },
        session_id_column: "session_id".into(),
        row_id_column: "row_id".into(),
        feature_orders: vec![],
    };
    Arc::new(TableLayout::new(&schema, "3"))
}

/// A log with `rows` rows (`x` = `first_x`, `first_x + 1`, …; `y` = `x / 2`) at `micros`.
pub(crate) fn log(session: &str, rows: usize, first_x: i64, micros: i64) -> Vec<u8> {
    let f_rows = (0..rows)
        .map(|r| list(vec![v(Kind::NumberValue((first_x + r as i64) as f64))]))
        .collect();
    let p_rows = (0..rows)
        .map(|r| v(Kind::NumberValue((first_x + r as i64) as f64 / 2.0)))
        .collect();
    let ids = (0..rows).map(|r| s(&format!("r{r}"))).collect();
    let features = Struct {
        fields: [
            ("columns".to_string(), list(vec![s("x")])),
            ("data".to_string(), list(f_rows)),
        ]
        .into_iter()
        .collect(),
    };
    let predictions = Struct {
        fields: [
            ("columns".to_string(), list(vec![s("y")])),
            ("data".to_string(), list(p_rows)),
            ("row_ids".to_string(), list(ids)),
        ]
        .into_iter()
        .collect(),
    };
    PredictionLog {
        prediction_id: session.into(),
        input: Some(ModelInput {
            features_table: Some(features),
            ..Default::default()
        }),
        output: Some(PbOutput {
            prediction_results_table: Some(predictions),
            ..Default::default()
        }),
        request_timestamp: Some(Timestamp {
            seconds: micros.div_euclid(1_000_000),
            nanos: (micros.rem_euclid(1_000_000) * 1_000) as i32,
        }),
        table_schema_version: 1,
        ..Default::default()
    }
    .encode_to_vec()
}

/// Bytes the decoder rejects.
pub(crate) fn malformed() -> Vec<u8> {
    vec![0xff, 0xff, 0xff]
}

/// `log` with its last row id a number: every count agrees and the size bound admits it, so it
/// is rejected only by the row loop, after its other rows were appended.
pub(crate) fn numeric_last_row_id(log: &[u8]) -> Vec<u8> {
    let mut l = PredictionLog::decode(log).expect("a PredictionLog");
    let ids = l
        .output
        .as_mut()
        .and_then(|o| o.prediction_results_table.as_mut())
        .and_then(|t| t.fields.get_mut("row_ids"))
        .and_then(|v| match &mut v.kind {
            Some(Kind::ListValue(l)) => l.values.last_mut(),
            _ => None,
        })
        .expect("the log has row ids");
    *ids = v(Kind::NumberValue(7.0));
    l.encode_to_vec()
}
