//! Crafted hostile logs: small inputs that decode to a lot, a shape mismatch that used
//! to be appended before it was rejected, and a frame prefix claiming a terabyte.

use observation_publisher::proto::{ModelInput, ModelOutput, PredictionLog};
use observation_publisher::table::TableLayout;
use prost::Message;
use prost_types::value::Kind;
use prost_types::{ListValue, Struct, Timestamp, Value};

fn v(kind: Kind) -> Value {
    Value { kind: Some(kind) }
}

fn list(values: Vec<Value>) -> Value {
    v(Kind::ListValue(ListValue { values }))
}

fn table(entries: Vec<(&str, Value)>) -> Struct {
    Struct {
        fields: entries
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
    }
}

/// A log of `rows` rows for `layout` whose prediction id is `id_len` bytes, whose feature table
/// is `columns: []` with empty rows (every declared feature NULL, four input bytes per row), and
/// whose prediction table has `short_ids` fewer row ids than rows.
pub(crate) fn amplifying(
    layout: &TableLayout,
    rows: usize,
    id_len: usize,
    short_ids: usize,
) -> Vec<u8> {
    let features = table(vec![
        ("columns", list(vec![])),
        ("data", list(vec![list(vec![]); rows])),
    ]);
    let score_row = list(vec![v(Kind::NumberValue(0.7)); layout.n_scores]);
    let predictions = table(vec![
        ("data", list(vec![score_row; rows])),
        (
            "row_ids",
            list(vec![v(Kind::StringValue("r".into())); rows - short_ids]),
        ),
    ]);
    PredictionLog {
        prediction_id: "i".repeat(id_len),
        input: Some(ModelInput {
            features_table: Some(features),
            ..Default::default()
        }),
        output: Some(ModelOutput {
            prediction_results_table: Some(predictions),
            ..Default::default()
        }),
        request_timestamp: Some(Timestamp {
            seconds: 1_700_000_000,
            nanos: 0,
        }),
        table_schema_version: 1,
        ..Default::default()
    }
    .encode_to_vec()
}

/// The crafted logs at full size (what `craft` writes and the RSS measurement converts):
/// `(name, log)`.
pub(crate) fn full_size(layout: &TableLayout) -> Vec<(&'static str, Vec<u8>)> {
    vec![
        // A 100 KB id copied into 10,000 rows: ~250 KB in, ~1 GB decoded.
        ("long_id", amplifying(layout, 10_000, 100_000, 0)),
        // Every feature NULL at a few bytes per row with a UUID-sized id: ~40 MB in, ~9× that
        // decoded (over the default per-log limit without any long string).
        ("no_columns", amplifying(layout, 2_000_000, 36, 0)),
        // The long id case one row id short: rejected, and it used to be appended first.
        ("shape_mismatch", amplifying(layout, 10_000, 100_000, 1)),
        // The long id case just under the default per-log limit: accepted (what the largest
        // log the default admits costs).
        ("under_limit", amplifying(layout, 2_600, 100_000, 0)),
    ]
}

/// Small versions of the crafted logs, as fuzzing seeds.
pub(crate) fn seeds(layout: &TableLayout) -> Vec<Vec<u8>> {
    vec![
        amplifying(layout, 64, 4096, 0),
        // Around the fuzzer's default per-log limit (4 MiB): 900 or 1,100 rows of a 4 KiB id.
        amplifying(layout, 900, 4096, 0),
        amplifying(layout, 1_100, 4096, 0),
        amplifying(layout, 2_000, 2, 0),
        amplifying(layout, 64, 4096, 1),
        amplifying(layout, 1, 0, 0),
    ]
}

/// A length prefix of 2^40 followed by `trailing` bytes (a frame that cannot be read).
pub(crate) fn huge_frame(trailing: usize) -> Vec<u8> {
    let mut out = vec![0x80, 0x80, 0x80, 0x80, 0x80, 0x20];
    out.resize(out.len() + trailing, 0);
    out
}
