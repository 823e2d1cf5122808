//! Tests of what the decoder counts for the quality metrics ([`super::Counts`]), against a
//! model computed from the generated logs.

use super::*;
use crate::config::{FeatureType, InferenceSchema, ModelOutput};
use crate::proto::{ModelInput, ModelOutput as PbOutput, PredictionLog};
use proptest::prelude::*;
use prost::Message;
use prost_types::value::Kind;
use prost_types::{ListValue, Struct, Timestamp, Value};
use std::collections::BTreeMap;

fn v(k: Kind) -> Value {
    Value { kind: Some(k) }
}
fn lst(values: Vec<Value>) -> Value {
    v(Kind::ListValue(ListValue { values }))
}
fn st(s: &str) -> Value {
    v(Kind::StringValue(s.into()))
}

fn layout() -> Arc<TableLayout> {
    let schema = InferenceSchema {
        feature_types: vec![
            ("f_int".into(), FeatureType::Int64),
            ("f_float".into(), FeatureType::Float64),
            ("f_bool".into(), FeatureType::Boolean),
            ("f_str".into(), FeatureType::String),
        ],
        model_prediction_output: ModelOutput::Regression {
            prediction_score_column: "y".into(),
            actual_score_column: None,
        },
        session_id_column: "session_id".into(),
        row_id_column: "row_id".into(),
        feature_orders: vec![],
    };
    Arc::new(TableLayout::new(&schema, "1"))
}

/// A log with the four declared features, then `extra` undeclared ones, and `rows` as given.
fn log(extra: &[String], rows: Vec<Vec<Value>>) -> Vec<u8> {
    let mut names: Vec<Value> = ["f_int", "f_float", "f_bool", "f_str"]
        .iter()
        .map(|n| st(n))
        .collect();
    names.extend(extra.iter().map(|n| st(n)));
    let n = rows.len();
    let f = Struct {
        fields: BTreeMap::from([
            ("columns".to_string(), lst(names)),
            ("data".to_string(), lst(rows.into_iter().map(lst).collect())),
        ]),
    };
    let p = Struct {
        fields: BTreeMap::from([
            ("columns".to_string(), lst(vec![st("y")])),
            (
                "data".to_string(),
                lst((0..n).map(|_| v(Kind::NumberValue(0.5))).collect()),
            ),
            (
                "row_ids".to_string(),
                lst((0..n).map(|i| st(&format!("r{i}"))).collect()),
            ),
        ]),
    };
    PredictionLog {
        prediction_id: "s".into(),
        input: Some(ModelInput {
            features_table: Some(f),
            ..Default::default()
        }),
        output: Some(PbOutput {
            prediction_results_table: Some(p),
            ..Default::default()
        }),
        request_timestamp: Some(Timestamp {
            seconds: 1_700_000_000,
            nanos: 0,
        }),
        ..Default::default()
    }
    .encode_to_vec()
}

/// A cell for a numeric column: a number, a bool (coerced: a mismatch) or NULL.
fn numeric_cell() -> impl Strategy<Value = (Value, bool)> {
    prop_oneof![
        (-1e6f64..1e6).prop_map(|f| (v(Kind::NumberValue(f.trunc())), false)),
        any::<bool>().prop_map(|b| (v(Kind::BoolValue(b)), true)),
        Just((v(Kind::NullValue(0)), false)),
    ]
}

type Row = (Vec<(Value, bool)>, Value, Value);

fn row() -> impl Strategy<Value = Row> {
    (
        proptest::collection::vec(numeric_cell(), 2),
        prop_oneof![
            any::<bool>().prop_map(|b| v(Kind::BoolValue(b))),
            Just(v(Kind::NullValue(0)))
        ],
        prop_oneof![
            "[a-z]{0,5}".prop_map(|s| st(&s)),
            Just(v(Kind::NullValue(0)))
        ],
    )
}

proptest! {
    /// Over logs with coerced bools, NULLs and changing sets of undeclared columns, the counts
    /// are exactly the model's: one mismatch per bool in a numeric column, one undeclared cell
    /// per row and undeclared column, whatever the batches.
    #[test]
    fn counts_match_the_logs(
        logs in proptest::collection::vec(
            (proptest::collection::vec("u[0-3]", 0..3), proptest::collection::vec(row(), 1..5)),
            1..12,
        ),
        take_every in 1usize..5,
    ) {
        let mut d = Decoder::new(layout());
        let mut want_mismatch = [0u64; 4];
        let mut want_undeclared: BTreeMap<String, u64> = BTreeMap::new();
        let mut got_mismatch = [0u64; 4];
        let mut got_undeclared: BTreeMap<String, u64> = BTreeMap::new();
        let mut take = |d: &mut Decoder| {
            let c = d.take_counts();
            for (g, n) in got_mismatch.iter_mut().zip(c.mismatches) {
                *g += n;
            }
            for (name, n) in c.undeclared {
                *got_undeclared.entry(name).or_default() += n;
            }
        };
        for (i, (extra, rows)) in logs.iter().enumerate() {
            let mut extra = extra.clone();
            extra.sort();
            extra.dedup();
            let cells: Vec<Vec<Value>> = rows
                .iter()
                .map(|(nums, b, s)| {
                    let mut r: Vec<Value> = nums.iter().map(|c| c.0.clone()).collect();
                    r.push(b.clone());
                    r.push(s.clone());
                    r.extend(extra.iter().map(|_| v(Kind::NumberValue(1.0))));
                    r
                })
                .collect();
            for (nums, _, _) in rows {
                for (k, c) in nums.iter().enumerate() {
                    want_mismatch[k] += u64::from(c.1);
                }
            }
            for name in &extra {
                *want_undeclared.entry(name.clone()).or_default() += rows.len() as u64;
            }
            prop_assert_eq!(d.decode(&log(&extra, cells)).unwrap(), rows.len());
            if i % take_every == 0 {
                take(&mut d);
                d.finish();
            }
        }
        take(&mut d);
        prop_assert_eq!(got_mismatch, want_mismatch);
        prop_assert_eq!(got_undeclared, want_undeclared);
        prop_assert!(d.take_counts().is_empty());
    }
}

#[test]
fn a_rejected_log_counts_the_cell_that_rejected_it() {
    let mut d = Decoder::new(layout());
    let bad = log(
        &["extra".into()],
        vec![vec![
            v(Kind::BoolValue(true)),
            st("not a number"),
            v(Kind::BoolValue(false)),
            st("x"),
            st("e"),
        ]],
    );
    let e = d.decode(&bad).unwrap_err();
    assert_eq!(e.kind, ErrorKind::TypeMismatch);
    let c = d.take_counts();
    // The coerced bool before it, and the string in the float column; the rejected log's
    // undeclared cells are not rows and are not counted.
    assert_eq!(c.mismatches, vec![1, 1, 0, 0]);
    assert!(c.undeclared.is_empty(), "{c:?}");
}

#[test]
fn undeclared_names_in_feature_orders_are_counted() {
    let schema = InferenceSchema {
        feature_types: vec![("a".into(), FeatureType::Float64)],
        model_prediction_output: ModelOutput::Regression {
            prediction_score_column: "y".into(),
            actual_score_column: None,
        },
        session_id_column: "session_id".into(),
        row_id_column: "row_id".into(),
        feature_orders: vec!["a".into(), "zz".into()],
    };
    let mut d = Decoder::new(Arc::new(TableLayout::new(&schema, "1")));
    let mut bytes = log(&[], vec![]);
    // The same log without feature `columns`: positions follow feature_orders.
    let mut l = PredictionLog::decode(bytes.as_slice()).unwrap();
    let f = l.input.as_mut().unwrap().features_table.as_mut().unwrap();
    f.fields.remove("columns");
    f.fields.insert(
        "data".into(),
        lst(vec![
            lst(vec![v(Kind::NumberValue(1.0)), st("q")]),
            lst(vec![v(Kind::NumberValue(2.0)), st("r")]),
        ]),
    );
    let p = l
        .output
        .as_mut()
        .unwrap()
        .prediction_results_table
        .as_mut()
        .unwrap();
    p.fields.insert(
        "data".into(),
        lst(vec![v(Kind::NumberValue(0.1)), v(Kind::NumberValue(0.2))]),
    );
    p.fields
        .insert("row_ids".into(), lst(vec![st("r0"), st("r1")]));
    bytes = l.encode_to_vec();
    assert_eq!(d.decode(&bytes).unwrap(), 2);
    assert_eq!(d.take_counts().undeclared, vec![("zz".to_string(), 2)]);
}
