//! Tunnel record encoding against pyodps: blocks our encoder writes from batches of the model's
//! table decode with pyodps's `TunnelRecordReader`, under its C and its pure-Python
//! implementation, in both pyodps versions, to exactly the values written (doubles bit for bit,
//! timestamps to the microsecond); and where pyodps's own pure-Python writer is right, its bytes
//! equal ours.

use super::{oracle, VERSIONS};
use arrow_array::{
    ArrayRef, BooleanArray, Float64Array, Int64Array, RecordBatch, StringArray,
    TimestampMicrosecondArray,
};
use observation_publisher::config::{FeatureType, InferenceSchema, ModelOutput};
use observation_publisher::sink::maxcompute::encode::RecordEncoder;
use observation_publisher::sink::maxcompute::record::BlockWriter;
use observation_publisher::sink::maxcompute::schema::TableColumn;
use observation_publisher::table::TableLayout;
use serde_json::{json, Value as Json};
use std::sync::Arc;

/// One row: session id, row id, request_timestamp (µs), model_version, f_int, f_float, f_bool,
/// f_str, then the score and the derived column (`_prediction_label` or `_rank`).
#[derive(Clone)]
pub(crate) struct Row {
    pub(crate) session: Option<&'static str>,
    pub(crate) row: Option<&'static str>,
    pub(crate) ts: Option<i64>,
    pub(crate) version: Option<&'static str>,
    pub(crate) f_int: Option<i64>,
    pub(crate) f_float: Option<f64>,
    pub(crate) f_bool: Option<bool>,
    pub(crate) f_str: Option<&'static str>,
    pub(crate) score: Option<f64>,
    pub(crate) label: Option<&'static str>,
    pub(crate) rank: Option<i64>,
}

pub(crate) const EMPTY: Row = Row {
    session: None,
    row: None,
    ts: None,
    version: None,
    f_int: None,
    f_float: None,
    f_bool: None,
    f_str: None,
    score: None,
    label: None,
    rank: None,
};

/// 1928-01-01 is pyodps's "antique" limit (its readers refuse older dates by default).
const US_1950: i64 = -631_152_000_000_000 - 123_457;

pub(crate) fn rows() -> Vec<Row> {
    vec![
        Row {
            session: Some("session-1"),
            row: Some("0"),
            ts: Some(1_764_623_000_123_456),
            version: Some("3"),
            f_int: Some(42),
            f_float: Some(0.1),
            f_bool: Some(true),
            f_str: Some("plain"),
            score: Some(0.75),
            label: Some("fraud"),
            rank: Some(1),
        },
        Row {
            session: Some("séssion ünïcode 日本語 🚀"),
            row: Some(""),
            ts: Some(-1),
            version: Some("v-2"),
            f_int: Some(-1),
            f_float: Some(-0.0),
            f_bool: Some(false),
            f_str: Some("Zürich\n\"quoted\"\ttab"),
            score: Some(-2.5e-300),
            label: Some("非欺诈"),
            rank: Some(-7),
        },
        Row {
            session: Some("s"),
            row: Some("r"),
            ts: Some(US_1950),
            version: Some("3"),
            f_int: Some(i64::MIN),
            f_float: Some(f64::MAX),
            f_bool: None,
            f_str: None,
            score: Some(f64::INFINITY),
            label: None,
            rank: Some(i64::MAX),
        },
        Row {
            ts: Some(-1_500_000),
            f_int: Some(i64::MAX),
            f_float: Some(f64::MIN_POSITIVE / 4.0),
            score: Some(f64::NAN),
            ..EMPTY
        },
        Row {
            ts: Some(0),
            f_int: Some(0),
            f_float: Some(f64::NEG_INFINITY),
            ..EMPTY
        },
        EMPTY,
    ]
}

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

pub(crate) fn binary() -> TableLayout {
    TableLayout::new(
        &schema(ModelOutput::Binary {
            prediction_score_column: "score".into(),
            actual_score_column: None,
            positive_class_label: "fraud".into(),
            negative_class_label: "ok".into(),
            score_threshold: 0.5,
        }),
        "3",
    )
}

pub(crate) fn ranking() -> TableLayout {
    TableLayout::new(
        &schema(ModelOutput::Ranking {
            rank_score_column: "score".into(),
            relevance_score_column: None,
        }),
        "3",
    )
}

pub(crate) fn batch(layout: &TableLayout, rows: &[Row]) -> RecordBatch {
    let s = |f: fn(&Row) -> Option<&'static str>| -> ArrayRef {
        Arc::new(rows.iter().map(f).collect::<StringArray>())
    };
    let i = |f: fn(&Row) -> Option<i64>| -> ArrayRef {
        Arc::new(rows.iter().map(f).collect::<Int64Array>())
    };
    let d = |f: fn(&Row) -> Option<f64>| -> ArrayRef {
        Arc::new(rows.iter().map(f).collect::<Float64Array>())
    };
    let derived = if layout.columns.last().unwrap().name == "_rank" {
        i(|r| r.rank)
    } else {
        s(|r| r.label)
    };
    let columns = vec![
        s(|r| r.session),
        s(|r| r.row),
        Arc::new(
            rows.iter()
                .map(|r| r.ts)
                .collect::<TimestampMicrosecondArray>()
                .with_timezone("UTC"),
        ) as ArrayRef,
        s(|r| r.version),
        i(|r| r.f_int),
        d(|r| r.f_float),
        Arc::new(rows.iter().map(|r| r.f_bool).collect::<BooleanArray>()),
        s(|r| r.f_str),
        d(|r| r.score),
        derived,
    ];
    RecordBatch::try_new(Arc::clone(&layout.arrow), columns).unwrap()
}

/// The row as the oracle prints it: doubles as their bits, timestamps as {"us": n}.
pub(crate) fn plain(layout: &TableLayout, r: &Row) -> Vec<Json> {
    let s = |v: Option<&str>| v.map_or(Json::Null, |v| json!(v));
    let i = |v: Option<i64>| v.map_or(Json::Null, |v| json!(v));
    let d = |v: Option<f64>| v.map_or(Json::Null, |v| json!({"f64": v.to_bits() as i64}));
    let derived = if layout.columns.last().unwrap().name == "_rank" {
        i(r.rank)
    } else {
        s(r.label)
    };
    vec![
        s(r.session),
        s(r.row),
        r.ts.map_or(Json::Null, |us| json!({"us": us})),
        s(r.version),
        i(r.f_int),
        d(r.f_float),
        r.f_bool.map_or(Json::Null, |b| json!(b)),
        s(r.f_str),
        d(r.score),
        derived,
    ]
}

pub(crate) fn odps_columns(layout: &TableLayout) -> Json {
    TableColumn::from_layout(&layout.columns)
        .iter()
        .map(|c| json!([c.name, c.ty.name().to_lowercase()]))
        .collect()
}

pub(crate) fn block(layout: &TableLayout, rows: &[Row]) -> Vec<u8> {
    let table = TableColumn::from_layout(&layout.columns);
    let enc = RecordEncoder::new(&table, Arc::clone(&layout.arrow)).unwrap();
    let b = batch(layout, rows);
    let mut w = BlockWriter::new();
    enc.write(&b, 0..b.num_rows(), &mut w);
    w.finish()
}

#[test]
fn pyodps_readers_decode_our_blocks_to_the_values_written() {
    let rows = rows();
    let dir = tempfile::tempdir().unwrap();
    let layouts = [binary(), ranking()];
    let mut blocks = Vec::new();
    for (n, layout) in layouts.iter().enumerate() {
        let path = dir.path().join(format!("block-{n}.bin"));
        std::fs::write(&path, block(layout, &rows)).unwrap();
        blocks.push(json!({"columns": odps_columns(layout), "block": path}));
    }
    let spec = json!({ "blocks": blocks });
    for version in VERSIONS {
        for force_py in [false, true] {
            let answer = oracle(version, force_py, "decode", &spec);
            assert_eq!(
                answer["mode"],
                if force_py { "py" } else { "c" },
                "pyodps {version}: the reader implementation asked for"
            );
            for (layout, got) in layouts.iter().zip(answer["results"].as_array().unwrap()) {
                let got: Vec<Vec<Json>> = serde_json::from_value(got.clone()).unwrap();
                let expected: Vec<Vec<Json>> = rows.iter().map(|r| plain(layout, r)).collect();
                assert_eq!(got.len(), expected.len());
                for (n, (g, e)) in got.iter().zip(&expected).enumerate() {
                    assert_eq!(
                        g, e,
                        "row {n}, pyodps {} force_py {force_py}",
                        answer["version"]
                    );
                }
            }
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn bytes_equal_pyodps_pure_python_writer() {
    // pyodps's pure-Python writer, bytes compared with ours. Its C writer differs by design (a
    // CRC ≥ 2^31 as a 10-byte varint, which its own pure-Python reader refuses).
    //
    // pyodps truncates seconds towards zero (`int(ms / 1000)`) while taking the sub-second part
    // from the floored datetime: for an instant before 1970 with a fraction it writes a value
    // one second late (its readers read it back so). Those rows are compared separately: one
    // row 1.5 s before the epoch, which ours writes as -2 s + 0.5 s and pyodps as -1 s + 0.5 s,
    // i.e. what ours writes for -0.5 s.
    let fractional_before_1970 = |r: &Row| r.ts.is_some_and(|us| us < 0 && us % 1_000_000 != 0);
    let early = Row {
        ts: Some(-1_500_000),
        ..EMPTY
    };
    let one_second_late = Row {
        ts: Some(-500_000),
        ..EMPTY
    };
    let layouts = [binary(), ranking()];
    let exact: Vec<Row> = rows()
        .into_iter()
        .filter(|r| !fractional_before_1970(r))
        .collect();
    let mut sets = Vec::new();
    let mut expected = Vec::new();
    for layout in &layouts {
        sets.push(json!({
            "columns": odps_columns(layout),
            "rows": exact.iter().map(|r| plain(layout, r)).collect::<Vec<_>>(),
        }));
        expected.push(hex(&block(layout, &exact)));
    }
    sets.push(json!({
        "columns": odps_columns(&layouts[0]),
        "rows": [plain(&layouts[0], &early)],
    }));
    expected.push(hex(&block(&layouts[0], &[one_second_late])));
    let spec = json!({ "sets": sets });
    for version in VERSIONS {
        let answer = oracle(version, true, "encode", &spec);
        assert_eq!(answer["mode"], "py");
        let theirs: Vec<String> = serde_json::from_value(answer["results"].clone()).unwrap();
        assert_eq!(theirs[..2], expected[..2], "pyodps {}", answer["version"]);
        assert_eq!(
            theirs[2], expected[2],
            "pyodps {}: -1.5 s written as -0.5 s",
            answer["version"]
        );
    }
}
