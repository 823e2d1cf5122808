//! Unit and property tests of the walker against the prost-based reference.

use super::reference::{batch_cells, convert, Cell};
use super::*;
use crate::config::{FeatureType, InferenceSchema, ModelOutput};
use crate::proto::{ModelInput, ModelOutput as PbOutput, PredictionLog};
use crate::table::TableLayout;
use proptest::prelude::*;
use prost::Message;
use prost_types::value::Kind;
use prost_types::{ListValue, Struct, Timestamp, Value};
use std::collections::BTreeMap;

fn schema(output: ModelOutput) -> InferenceSchema {
    InferenceSchema {
        feature_types: vec![
            ("f_int".into(), FeatureType::Int64),
            ("f_float".into(), FeatureType::Float64),
            ("f_bool".into(), FeatureType::Boolean),
            ("f_str".into(), FeatureType::String),
        ],
        model_prediction_output: output,
        session_id_column: "session_id".into(),
        row_id_column: "row_id".into(),
        feature_orders: vec![],
    }
}

fn binary() -> ModelOutput {
    ModelOutput::Binary {
        prediction_score_column: "score".into(),
        actual_score_column: None,
        positive_class_label: "yes".into(),
        negative_class_label: "no".into(),
        score_threshold: 0.5,
    }
}

fn ranking() -> ModelOutput {
    ModelOutput::Ranking {
        rank_score_column: "rank_score".into(),
        relevance_score_column: None,
    }
}

fn multiclass() -> ModelOutput {
    ModelOutput::Multiclass {
        prediction_score_columns: vec!["p_a".into(), "p_b".into(), "p_c".into()],
        class_labels: vec!["a".into(), "b".into(), "c".into()],
    }
}

fn regression() -> ModelOutput {
    ModelOutput::Regression {
        prediction_score_column: "y".into(),
        actual_score_column: None,
    }
}

fn num(f: f64) -> Value {
    Value {
        kind: Some(Kind::NumberValue(f)),
    }
}
fn st(s: &str) -> Value {
    Value {
        kind: Some(Kind::StringValue(s.into())),
    }
}
fn b(x: bool) -> Value {
    Value {
        kind: Some(Kind::BoolValue(x)),
    }
}
fn null() -> Value {
    Value {
        kind: Some(Kind::NullValue(0)),
    }
}
fn lst(v: Vec<Value>) -> Value {
    Value {
        kind: Some(Kind::ListValue(ListValue { values: v })),
    }
}
fn table(entries: Vec<(&str, Value)>) -> Struct {
    Struct {
        fields: entries
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect::<BTreeMap<_, _>>(),
    }
}

fn log(
    features: Option<Struct>,
    predictions: Option<Struct>,
    ts: Option<(i64, i32)>,
) -> PredictionLog {
    PredictionLog {
        prediction_id: "s1".into(),
        input: Some(ModelInput {
            features_table: features,
            ..Default::default()
        }),
        output: Some(PbOutput {
            prediction_results_table: predictions,
            ..Default::default()
        }),
        request_timestamp: ts.map(|(seconds, nanos)| Timestamp { seconds, nanos }),
        table_schema_version: 1,
        ..Default::default()
    }
}

fn cols(names: &[&str]) -> Value {
    lst(names.iter().map(|n| st(n)).collect())
}

/// Features table with the standard four columns and the given rows.
fn ftable(rows: Vec<Value>) -> Struct {
    table(vec![
        ("columns", cols(&["f_int", "f_float", "f_bool", "f_str"])),
        ("data", lst(rows)),
    ])
}

fn ptable(score_col: &str, scores: Vec<Value>) -> Struct {
    let ids = (0..scores.len()).map(|i| st(&format!("r{i}"))).collect();
    table(vec![
        ("columns", cols(&[score_col])),
        ("data", lst(scores)),
        ("row_ids", lst(ids)),
    ])
}

fn frow() -> Value {
    lst(vec![num(4.7), num(1.5), b(true), st("x")])
}

fn decode_one(out: ModelOutput, l: &PredictionLog) -> Result<Vec<Vec<Cell>>, DecodeError> {
    let layout = Arc::new(TableLayout::new(&schema(out), "7"));
    let mut d = Decoder::new(layout);
    d.decode(&l.encode_to_vec())?;
    Ok(batch_cells(&d.finish()))
}

fn err_of(out: ModelOutput, l: &PredictionLog) -> DecodeError {
    decode_one(out, l).expect_err("log must be rejected")
}

#[test]
fn binary_row_matches_merlin_semantics() {
    let l = log(
        Some(ftable(vec![frow()])),
        Some(ptable("score", vec![num(0.5)])),
        Some((1_700_000_000, 123_456_789)),
    );
    let rows = decode_one(binary(), &l).unwrap();
    assert_eq!(
        rows,
        vec![vec![
            Cell::Str("s1".into()),
            Cell::Str("r0".into()),
            Cell::Ts(1_700_000_000_123_456),
            Cell::Str("7".into()),
            Cell::Int(4), // truncated toward zero
            Cell::Float(1.5),
            Cell::Bool(true),
            Cell::Str("x".into()),
            Cell::Float(0.5),
            Cell::Str("yes".into()), // score >= threshold
        ]]
    );
}

#[test]
fn coercions_nulls_and_dropped_columns() {
    let f = table(vec![
        (
            "columns",
            cols(&["customer_id", "f_float", "f_int", "f_str"]),
        ), // f_bool absent, customer_id undeclared
        (
            "data",
            lst(vec![lst(vec![st("c-1"), b(true), num(-4.7), null()])]),
        ),
    ]);
    let l = log(Some(f), Some(ptable("score", vec![null()])), Some((0, 0)));
    let rows = decode_one(binary(), &l).unwrap();
    assert_eq!(
        rows[0][4..],
        [
            Cell::Int(-4),
            Cell::Float(1.0),
            Cell::Null,
            Cell::Null,
            Cell::Null,
            Cell::Null
        ]
    );
}

#[test]
fn bare_scalar_rows_and_feature_orders() {
    let mut s = schema(regression());
    s.feature_types = vec![("only".into(), FeatureType::Float64)];
    s.feature_orders = vec!["only".into()];
    let layout = Arc::new(TableLayout::new(&s, "1"));
    let f = table(vec![("data", lst(vec![num(3.0), num(4.0)]))]); // no columns: feature_orders
    let p = table(vec![
        ("data", lst(vec![num(1.0), num(2.0)])),
        ("row_ids", lst(vec![st("a"), st("b")])),
    ]);
    let mut d = Decoder::new(layout);
    assert_eq!(
        d.decode(&log(Some(f), Some(p), Some((5, 0))).encode_to_vec())
            .unwrap(),
        2
    );
    let rows = batch_cells(&d.finish());
    assert_eq!(rows[1][4..], [Cell::Float(4.0), Cell::Float(2.0)]);
}

#[test]
fn ranking_is_per_log_with_ties_in_order() {
    let rows = vec![frow(), frow(), frow(), frow()];
    let l = log(
        Some(ftable(rows)),
        Some(ptable(
            "rank_score",
            vec![num(0.2), num(0.9), null(), num(0.9)],
        )),
        Some((1, 0)),
    );
    let layout = Arc::new(TableLayout::new(&schema(ranking()), "1"));
    let mut d = Decoder::new(layout);
    d.decode(&l.encode_to_vec()).unwrap();
    d.decode(&l.encode_to_vec()).unwrap(); // same session id again: ranked on its own
    let ranks: Vec<Cell> = batch_cells(&d.finish())
        .into_iter()
        .map(|r| r.last().unwrap().clone())
        .collect();
    let one = [Cell::Int(3), Cell::Int(1), Cell::Null, Cell::Int(2)];
    assert_eq!(ranks[..4], one);
    assert_eq!(ranks[4..], one);
}

#[test]
fn multiclass_argmax_first_on_ties_null_when_all_null() {
    let p = table(vec![
        ("columns", cols(&["p_a", "p_b", "p_c", "_prediction_label"])),
        (
            "data",
            lst(vec![
                lst(vec![num(0.2), num(0.4), num(0.4), st("ignored")]),
                lst(vec![null(), null(), null(), st("ignored")]),
                lst(vec![null(), num(0.1), null(), null()]),
            ]),
        ),
        ("row_ids", lst(vec![st("0"), st("1"), st("2")])),
    ]);
    let l = log(
        Some(ftable(vec![frow(), frow(), frow()])),
        Some(p),
        Some((1, 0)),
    );
    let labels: Vec<Cell> = decode_one(multiclass(), &l)
        .unwrap()
        .into_iter()
        .map(|r| r.last().unwrap().clone())
        .collect();
    assert_eq!(
        labels,
        [Cell::Str("b".into()), Cell::Null, Cell::Str("b".into())]
    );
}

#[test]
fn malformed_logs_are_rejected_with_reasons() {
    let ok_f = || Some(ftable(vec![frow()]));
    let ok_p = || Some(ptable("score", vec![num(0.1)]));
    let ts = Some((1, 0));
    let cases: Vec<(PredictionLog, ErrorKind, &str)> = vec![
        (
            log(ok_f(), ok_p(), None),
            ErrorKind::MissingField,
            "request_timestamp",
        ),
        (
            log(None, ok_p(), ts),
            ErrorKind::MissingField,
            "input.features_table",
        ),
        (
            log(ok_f(), None, ts),
            ErrorKind::MissingField,
            "output.prediction_results_table",
        ),
        (
            log(ok_f(), Some(table(vec![("data", lst(vec![num(0.1)]))])), ts),
            ErrorKind::MissingField,
            "row_ids",
        ),
        (
            log(Some(table(vec![("data", lst(vec![frow()]))])), ok_p(), ts),
            ErrorKind::MissingField,
            "no columns and the schema has no feature_orders",
        ),
        (
            log(Some(ftable(vec![frow(), frow()])), ok_p(), ts),
            ErrorKind::ShapeMismatch,
            "2 feature rows, 1 prediction rows and 1 row ids",
        ),
        (
            log(
                Some(ftable(vec![lst(vec![num(1.0), num(2.0)])])),
                ok_p(),
                ts,
            ),
            ErrorKind::ShapeMismatch,
            "has 2 values but there are 4 columns",
        ),
        (
            log(
                Some(ftable(vec![lst(vec![
                    num(1.0),
                    num(2.0),
                    b(true),
                    num(3.0),
                ])])),
                ok_p(),
                ts,
            ),
            ErrorKind::TypeMismatch,
            "input.features_table.data[0][3] (column \"f_str\", STRING): found a number",
        ),
        (
            log(
                Some(ftable(vec![lst(vec![
                    num(1.0),
                    num(2.0),
                    num(1.0),
                    st("x"),
                ])])),
                ok_p(),
                ts,
            ),
            ErrorKind::TypeMismatch,
            "column \"f_bool\", BOOLEAN): found a number",
        ),
        (
            log(
                Some(ftable(vec![lst(vec![
                    num(f64::NAN),
                    num(2.0),
                    b(true),
                    st("x"),
                ])])),
                ok_p(),
                ts,
            ),
            ErrorKind::InvalidValue,
            "NaN or infinity",
        ),
        (
            log(
                Some(ftable(vec![lst(vec![
                    num(1e19),
                    num(2.0),
                    b(true),
                    st("x"),
                ])])),
                ok_p(),
                ts,
            ),
            ErrorKind::InvalidValue,
            "out of range for int64",
        ),
        (
            log(
                Some(ftable(vec![lst(vec![
                    lst(vec![]),
                    num(2.0),
                    b(true),
                    st("x"),
                ])])),
                ok_p(),
                ts,
            ),
            ErrorKind::NestedValue,
            "found a list",
        ),
        (
            log(
                Some(ftable(vec![frow()])),
                Some(ptable("score", vec![st("high")])),
                ts,
            ),
            ErrorKind::TypeMismatch,
            "column \"score\", FLOAT): found a string",
        ),
        (
            log(
                Some(table(vec![
                    ("columns", cols(&["f_int", "f_int"])),
                    ("data", lst(vec![lst(vec![num(1.0), num(2.0)])])),
                ])),
                ok_p(),
                ts,
            ),
            ErrorKind::DuplicateColumn,
            "names \"f_int\" more than once",
        ),
        (
            log(ok_f(), ok_p(), Some((1, -5))),
            ErrorKind::InvalidValue,
            "nanos",
        ),
        (
            log(ok_f(), ok_p(), Some((300_000_000_000, 0))),
            ErrorKind::InvalidValue,
            "years 1 to 9999",
        ),
    ];
    for (l, kind, text) in cases {
        let e = err_of(binary(), &l);
        assert_eq!(e.kind, kind, "{e}");
        assert!(e.to_string().contains(text), "expected {text:?} in {e}");
        assert!(
            convert(
                &TableLayout::new(&schema(binary()), "7"),
                &l.encode_to_vec()
            )
            .is_err(),
            "reference agrees: {e}"
        );
    }
}

#[test]
fn undecodable_and_empty_bytes() {
    let layout = Arc::new(TableLayout::new(&schema(binary()), "7"));
    let mut d = Decoder::new(layout);
    assert_eq!(d.decode(&[]).unwrap_err().kind, ErrorKind::EmptyMessage);
    assert_eq!(
        d.decode(b"\xff\xff\xff\xff garbage").unwrap_err().kind,
        ErrorKind::InvalidProtobuf
    );
    let good = log(
        Some(ftable(vec![frow()])),
        Some(ptable("score", vec![num(0.9)])),
        Some((1, 0)),
    )
    .encode_to_vec();
    let e = d.decode(&good[..good.len() / 2]).unwrap_err();
    assert_eq!(e.kind, ErrorKind::InvalidProtobuf, "{e}");
}

#[test]
fn a_rejected_log_leaves_no_rows_behind() {
    let layout = Arc::new(TableLayout::new(&schema(binary()), "7"));
    let mut d = Decoder::new(layout);
    let good = log(
        Some(ftable(vec![frow()])),
        Some(ptable("score", vec![num(0.9)])),
        Some((1, 0)),
    );
    // Second row of three has a bad cell: the first row was already appended and must go.
    let bad_rows = vec![
        frow(),
        lst(vec![num(1.0), num(2.0), b(true), num(9.0)]),
        frow(),
    ];
    let bad = log(
        Some(ftable(bad_rows)),
        Some(ptable("score", vec![num(0.1), num(0.2), num(0.3)])),
        Some((1, 0)),
    );
    d.decode(&good.encode_to_vec()).unwrap();
    let before = d.approx_bytes();
    assert!(d.decode(&bad.encode_to_vec()).is_err());
    assert_eq!(d.rows(), 1);
    assert_eq!(d.approx_bytes(), before);
    d.decode(&good.encode_to_vec()).unwrap();
    let rows = batch_cells(&d.finish());
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0], rows[1]);
}

// Property tests: random logs encoded with prost; the walker must agree with the reference.

fn arb_scalar() -> impl Strategy<Value = Value> {
    prop_oneof![
        6 => (-1e6f64..1e6).prop_map(num),
        2 => (-100i64..100).prop_map(|i| num(i as f64)),
        2 => any::<bool>().prop_map(b),
        3 => "[a-z0-9é ]{0,6}".prop_map(|s| st(&s)),
        2 => Just(null()),
        1 => Just(Value { kind: None }),
        1 => prop_oneof![Just(num(f64::NAN)), Just(num(f64::INFINITY)), Just(num(1e20)), Just(lst(vec![])),
                         Just(Value { kind: Some(Kind::StructValue(Struct::default())) })],
    ]
}

/// Values that fit a column of the given type most of the time.
fn arb_cell(ty: FeatureType) -> BoxedStrategy<Value> {
    let typed: BoxedStrategy<Value> = match ty {
        FeatureType::Int64 => {
            prop_oneof![(-1e9f64..1e9).prop_map(num), any::<bool>().prop_map(b)].boxed()
        }
        FeatureType::Float64 => {
            prop_oneof![any::<f64>().prop_map(num), any::<bool>().prop_map(b)].boxed()
        }
        FeatureType::Boolean => any::<bool>().prop_map(b).boxed(),
        FeatureType::String => "[a-zA-Z0-9_ -]{0,12}".prop_map(|s| st(&s)).boxed(),
    };
    prop_oneof![12 => typed, 2 => Just(null()), 1 => arb_scalar()].boxed()
}

const NAMES: [&str; 6] = ["f_int", "f_float", "f_bool", "f_str", "extra", "score"];

fn ty_of(name: &str) -> FeatureType {
    match name {
        "f_int" => FeatureType::Int64,
        "f_bool" => FeatureType::Boolean,
        "f_str" => FeatureType::String,
        _ => FeatureType::Float64,
    }
}

prop_compose! {
    fn arb_log()(
        col_names in prop::sample::subsequence(NAMES.to_vec(), 0..=6).prop_shuffle(),
        n_rows in 0usize..5,
        extra_row in prop::bool::weighted(0.05),
        short_ids in prop::bool::weighted(0.05),
        no_ts in prop::bool::weighted(0.03),
        no_row_ids in prop::bool::weighted(0.03),
        pred_has_cols in any::<bool>(),
        secs in -100_000_000_000i64..300_000_000_000,
        nanos in prop_oneof![20 => 0i32..1_000_000_000, 1 => Just(-1i32)],
        seed in any::<u64>(),
    )(
        rows in prop::collection::vec(
            col_names.iter().map(|n| arb_cell(ty_of(n))).collect::<Vec<_>>(), n_rows + usize::from(extra_row)),
        scores in prop::collection::vec(prop_oneof![8 => (0f64..1.0).prop_map(num), 1 => Just(null()), 1 => arb_scalar()], n_rows),
        col_names in Just(col_names), n_rows in Just(n_rows), short_ids in Just(short_ids), no_ts in Just(no_ts), no_row_ids in Just(no_row_ids),
        pred_has_cols in Just(pred_has_cols), secs in Just(secs), nanos in Just(nanos), seed in Just(seed),
    ) -> PredictionLog {
        let _ = seed;
        let f = table(vec![("columns", cols(&col_names)), ("data", lst(rows.into_iter().map(lst).collect()))]);
        let n_ids = if short_ids { n_rows.saturating_sub(1) } else { n_rows };
        let mut p = vec![("data", lst(scores))];
        if !no_row_ids {
            p.push(("row_ids", lst((0..n_ids).map(|i| st(&i.to_string())).collect())));
        }
        if pred_has_cols {
            p.push(("columns", cols(&["score"])));
        }
        log(Some(f), Some(table(p)), if no_ts { None } else { Some((secs, nanos)) })
    }
}

fn agree(out: ModelOutput, logs: &[PredictionLog]) -> Result<(), TestCaseError> {
    let mut s = schema(out);
    s.feature_types
        .push(("score_feature_like".into(), FeatureType::Float64));
    let layout = Arc::new(TableLayout::new(&s, "3"));
    let mut d = Decoder::new(Arc::clone(&layout));
    let mut expected = Vec::new();
    for l in logs {
        let bytes = l.encode_to_vec();
        let want = convert(&layout, &bytes);
        let got = d.decode(&bytes);
        prop_assert_eq!(
            want.is_ok(),
            got.is_ok(),
            "reference {:?} vs walker {:?}",
            want,
            got
        );
        if let Ok(rows) = want {
            prop_assert_eq!(got.unwrap(), rows.len());
            expected.extend(rows);
        }
    }
    prop_assert_eq!(batch_cells(&d.finish()), expected);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn walker_matches_reference_binary(logs in prop::collection::vec(arb_log(), 1..6)) {
        agree(binary(), &logs)?;
    }

    #[test]
    fn walker_matches_reference_ranking(logs in prop::collection::vec(arb_log(), 1..6)) {
        let logs: Vec<_> = logs.into_iter().map(|mut l| {
            if let Some(t) = l.output.as_mut().and_then(|o| o.prediction_results_table.as_mut()) {
                if t.fields.contains_key("columns") { t.fields.insert("columns".into(), cols(&["rank_score"])); }
            }
            l
        }).collect();
        agree(ranking(), &logs)?;
    }

    #[test]
    fn walker_matches_reference_regression(logs in prop::collection::vec(arb_log(), 1..4)) {
        agree(regression(), &logs)?;
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let layout = Arc::new(TableLayout::new(&schema(binary()), "1"));
        let mut d = Decoder::new(layout);
        let before = d.rows();
        if d.decode(&bytes).is_err() {
            prop_assert_eq!(d.rows(), before);
        }
        let _ = d.finish();
    }

    #[test]
    fn mutated_logs_never_panic(l in arb_log(), flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8), cut in any::<prop::sample::Index>()) {
        let mut bytes = l.encode_to_vec();
        if bytes.is_empty() { return Ok(()); }
        for (i, x) in flips { let i = i.index(bytes.len()); bytes[i] ^= x; }
        let cut = cut.index(bytes.len() + 1);
        let layout = Arc::new(TableLayout::new(&schema(multiclass()), "1"));
        let mut d = Decoder::new(layout);
        let _ = d.decode(&bytes[..cut]);
        let batch = d.finish();
        prop_assert_eq!(batch.num_rows(), d.rows() + batch.num_rows());
    }
}

#[test]
fn multiclass_matches_reference_on_generated_logs() {
    let s = schema(multiclass());
    let layout = Arc::new(TableLayout::new(&s, "3"));
    let mut g = crate::gen::Generator::new(
        &s,
        crate::gen::GenOptions {
            rows_per_log: 3,
            seed: 9,
            malformed_ratio: 0.2,
            start_micros: 1_700_000_000_000_000,
            model: ("p".into(), "m".into(), "3".into()),
        },
    );
    let mut d = Decoder::new(Arc::clone(&layout));
    let mut expected = Vec::new();
    let mut rejected = 0;
    for _ in 0..300 {
        let gl = g.next_log();
        let want = convert(&layout, &gl.bytes);
        let got = d.decode(&gl.bytes);
        assert_eq!(
            got.is_err(),
            gl.malformed,
            "generator's malformed flag is honest: {got:?}"
        );
        assert_eq!(want.is_err(), gl.malformed);
        if let Ok(rows) = want {
            expected.extend(rows);
        } else {
            rejected += 1;
        }
    }
    assert!(rejected > 20, "some malformed logs were generated");
    assert_eq!(batch_cells(&d.finish()), expected);
}

/// A binary-model log of `rows` rows whose prediction id is `id_len` bytes; `short_ids` row ids
/// fewer than rows; the feature table is `columns: []` with empty rows when `no_columns`.
fn amplifying_log(rows: usize, id_len: usize, short_ids: usize, no_columns: bool) -> Vec<u8> {
    let f = if no_columns {
        table(vec![
            ("columns", lst(vec![])),
            ("data", lst(vec![lst(vec![]); rows])),
        ])
    } else {
        ftable(vec![frow(); rows])
    };
    let ids = (0..rows - short_ids).map(|_| st("r")).collect();
    let p = table(vec![
        ("columns", cols(&["score"])),
        ("data", lst(vec![num(0.7); rows])),
        ("row_ids", lst(ids)),
    ]);
    let mut l = log(Some(f), Some(p), Some((1, 0)));
    l.prediction_id = "i".repeat(id_len);
    l.encode_to_vec()
}

#[test]
fn amplifying_logs_are_rejected_before_any_row_is_appended() {
    const LIMIT: usize = 1 << 20;
    let layout = Arc::new(TableLayout::new(&schema(binary()), "7"));
    let mut d = Decoder::new(layout).with_max_log_bytes(LIMIT);
    let baseline = d.allocated_bytes();
    let cases = [
        // A 4 KiB prediction id copied into 2,000 rows: 40 KB in, over 8 MB decoded.
        ("long id", amplifying_log(2_000, 4096, 0, false)),
        // `columns: []`: every declared feature NULL at a few input bytes per row.
        ("no columns", amplifying_log(100_000, 2, 0, true)),
    ];
    for (what, bytes) in cases {
        let e = d.decode(&bytes).unwrap_err();
        assert_eq!(e.kind, ErrorKind::TooLarge, "{what}: {e}");
        assert!(e.reason.contains("batching.max_log_bytes"), "{what}: {e}");
        assert!(
            d.allocated_bytes() <= baseline + LIMIT,
            "{what}: {} bytes allocated for a {}-byte log rejected at {LIMIT}",
            d.allocated_bytes(),
            bytes.len()
        );
        assert_eq!(d.rows(), 0);
    }
    // A log under the limit still decodes, and the limit is not a batch limit.
    let small = amplifying_log(100, 8, 0, false);
    for _ in 0..10 {
        assert_eq!(d.decode(&small), Ok(100));
    }
}

#[test]
fn a_log_rejected_after_its_reservation_gives_the_capacity_back() {
    let layout = Arc::new(TableLayout::new(&schema(binary()), "7"));
    let mut d = Decoder::new(layout);
    d.decode(&amplifying_log(3, 8, 0, false)).unwrap();
    let before = d.allocated_bytes();
    // 2,000 rows of a 4 KiB id (≈ 8 MB reserved), rejected at its last row id.
    let bad = crate::batch::testing::numeric_last_row_id(&amplifying_log(2_000, 4096, 0, false));
    let e = d.decode(&bad).unwrap_err();
    assert_eq!(e.kind, ErrorKind::TypeMismatch, "{e}");
    assert_eq!(d.rows(), 3);
    assert!(
        d.allocated_bytes() <= before + (512 << 10),
        "{} bytes allocated after the rollback (was {before})",
        d.allocated_bytes()
    );
}

#[test]
fn a_shape_mismatch_is_rejected_before_any_row_is_appended() {
    let layout = Arc::new(TableLayout::new(&schema(binary()), "7"));
    let mut d = Decoder::new(layout);
    let baseline = d.allocated_bytes();
    // One row id short, 2,000 rows of a 4 KiB id: rejected without appending 8 MB first.
    let e = d
        .decode(&amplifying_log(2_000, 4096, 1, false))
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::ShapeMismatch, "{e}");
    assert!(e.reason.contains("1999 row ids"), "{e}");
    assert_eq!(d.allocated_bytes(), baseline, "nothing was appended");
}

/// A large ranking log, rejected (a number as its last row id) or accepted, leaves no scratch
/// behind: it stayed allocated, counted in every later open batch.
#[test]
fn a_large_ranking_log_leaves_no_rank_scratch_behind() {
    let rank_log = |n: usize| {
        let ids = (0..n).map(|i| st(&format!("r{i}"))).collect();
        let (c, scores) = (cols(&["rank_score"]), lst(vec![num(0.5); n]));
        let p = table(vec![
            ("columns", c),
            ("data", scores),
            ("row_ids", lst(ids)),
        ]);
        log(Some(ftable(vec![frow(); n])), Some(p), Some((1, 0))).encode_to_vec()
    };
    let mut d = Decoder::new(Arc::new(TableLayout::new(&schema(ranking()), "7")))
        .with_max_log_bytes(256 << 20);
    let mut small = 0;
    for _ in 0..2 {
        d.finish();
        d.decode(&rank_log(3)).unwrap();
        small = d.allocated_bytes();
    }
    let bad = crate::batch::testing::numeric_last_row_id(&rank_log(200_000));
    assert_eq!(d.decode(&bad).unwrap_err().kind, ErrorKind::TypeMismatch);
    let after_rejected = d.allocated_bytes();
    d.finish();
    d.decode(&rank_log(200_000)).unwrap();
    for _ in 0..2 {
        d.finish(); // the batch after the large one reserves its size; the next does not
        d.decode(&rank_log(3)).unwrap();
    }
    let accepted = d.allocated_bytes();
    for (held, when) in [(after_rejected, "rejected"), (accepted, "accepted")] {
        assert!(
            held <= small + (64 << 10),
            "{held} bytes after the {when} log, {small} before"
        );
    }
}
