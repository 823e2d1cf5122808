//! The ARIZE sink against the real arize==7.10.2 SDK: the SDK (in its own
//! venv, `scripts/arize-oracle setup`, pinned like Merlin) and our sink send the same rows to a
//! local capturing server ([`server`]); the tests compare what arrived. Also the SDK's
//! validation, check by check, and the sink's handling of Arize's statuses.

mod keys;
mod oracle;
mod outage;
mod status;

use observation_publisher::batch::{Batch, Batcher};
use observation_publisher::config::{ArizeSink as ArizeCfg, Batching, Config, Needs};
use observation_publisher::proto::{ModelInput, ModelOutput, PredictionLog};
use observation_publisher::sink::arize::ArizeSink;
use observation_publisher::table::TableLayout;
use prost::Message;
use prost_types::value::Kind;
use prost_types::{ListValue, Struct, Timestamp, Value};
use serde_json::{json, Value as Json};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

pub(crate) const API_KEY: &str = "api-key-PLANTED-1";
pub(crate) const SPACE_KEY: &str = "space-key-PLANTED-2";

/// The features of every test model, in declaration order.
pub(crate) const FEATURES: [(&str, &str); 4] = [
    ("f_float", "float64"),
    ("f_int", "int64"),
    ("f_bool", "boolean"),
    ("f_str", "string"),
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Model {
    Binary,
    Regression,
    Ranking,
}

impl Model {
    fn output_yaml(self) -> &'static str {
        match self {
            Model::Binary => "{output_class: BinaryClassificationOutput, prediction_score_column: score, actual_score_column: '', positive_class_label: yes, negative_class_label: no, score_threshold: 0.5}",
            Model::Regression => "{output_class: RegressionOutput, prediction_score_column: score, actual_score_column: ''}",
            Model::Ranking => "{output_class: RankingOutput, rank_score_column: score, relevance_score_column: ''}",
        }
    }

    fn python(self) -> Json {
        let output = match self {
            Model::Binary => "binary",
            Model::Regression => "regression",
            Model::Ranking => "ranking",
        };
        json!({
            "feature_types": FEATURES,
            "output": output,
            "score": "score",
            "positive": "yes",
            "negative": "no",
            "threshold": 0.5,
            "session_id_column": "session_id",
            "row_id_column": "row_id",
        })
    }

    pub(crate) fn config(self) -> Config {
        let yaml = format!(
            "project: proj-a\nmodel_id: model-b\nmodel_version: \"3\"\ninference_schema:\n  feature_types: {{f_float: float64, f_int: int64, f_bool: boolean, f_str: string}}\n  model_prediction_output: {}\n",
            self.output_yaml()
        );
        let v: serde_yaml_ng::Value = serde_yaml_ng::from_str(&yaml).unwrap();
        Config::from_value(&v, Needs::CONVERT).unwrap().0
    }
}

/// One prediction log, as the test writes it (to protobuf for our decoder, to JSON for the
/// oracle).
#[derive(Debug, Clone)]
pub(crate) struct TestLog {
    pub(crate) session: String,
    pub(crate) micros_ago: i64,
    pub(crate) nanos_extra: i32,
    /// Per row: f_float, f_int, f_bool, f_str (JSON null = NULL).
    pub(crate) features: Vec<[Json; 4]>,
    pub(crate) scores: Vec<Option<f64>>,
}

impl TestLog {
    /// A log of `rows` rows, `micros_ago` before now.
    pub(crate) fn new(session: &str, rows: usize, micros_ago: i64, seed: i64) -> Self {
        TestLog {
            session: session.into(),
            micros_ago,
            nanos_extra: 789,
            features: (0..rows as i64)
                .map(|r| {
                    let i = seed * 10 + r;
                    [
                        if i % 4 == 1 {
                            Json::Null
                        } else {
                            json!(i as f64 * 1.25)
                        },
                        json!(i * 7),
                        json!(i % 2 == 0),
                        json!(format!("é-{i}")),
                    ]
                })
                .collect(),
            scores: (0..rows as i64)
                .map(|r| Some(((seed * 37 + r * 13) % 100) as f64 / 100.0))
                .collect(),
        }
    }

    fn timestamp(&self, now: SystemTime) -> (i64, i32) {
        let unix = now
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_micros() as i64;
        let t = unix - self.micros_ago;
        (
            t.div_euclid(1_000_000),
            (t.rem_euclid(1_000_000) * 1000) as i32 + self.nanos_extra,
        )
    }

    fn row_ids(&self) -> Vec<String> {
        (0..self.scores.len()).map(|r| format!("row-{r}")).collect()
    }

    pub(crate) fn proto(&self, now: SystemTime) -> Vec<u8> {
        fn v(k: Kind) -> Value {
            Value { kind: Some(k) }
        }
        fn list(values: Vec<Value>) -> Value {
            v(Kind::ListValue(ListValue { values }))
        }
        fn from_json(j: &Json) -> Value {
            match j {
                Json::Null => v(Kind::NullValue(0)),
                Json::Bool(b) => v(Kind::BoolValue(*b)),
                Json::Number(n) => v(Kind::NumberValue(n.as_f64().unwrap())),
                Json::String(s) => v(Kind::StringValue(s.clone())),
                other => panic!("{other}"),
            }
        }
        let s = |x: &str| v(Kind::StringValue(x.into()));
        let table = |fields: Vec<(&str, Value)>| Struct {
            fields: fields
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect(),
        };
        let features = table(vec![
            (
                "columns",
                list(FEATURES.iter().map(|(n, _)| s(n)).collect()),
            ),
            (
                "data",
                list(
                    self.features
                        .iter()
                        .map(|row| list(row.iter().map(from_json).collect()))
                        .collect(),
                ),
            ),
        ]);
        let predictions = table(vec![
            ("columns", list(vec![s("score")])),
            (
                "data",
                list(
                    self.scores
                        .iter()
                        .map(|x| {
                            list(vec![
                                x.map_or(v(Kind::NullValue(0)), |f| v(Kind::NumberValue(f)))
                            ])
                        })
                        .collect(),
                ),
            ),
            (
                "row_ids",
                list(self.row_ids().iter().map(|r| s(r)).collect()),
            ),
        ]);
        let (seconds, nanos) = self.timestamp(now);
        PredictionLog {
            prediction_id: self.session.clone(),
            model_version: "3".into(),
            input: Some(ModelInput {
                features_table: Some(features),
                ..Default::default()
            }),
            output: Some(ModelOutput {
                prediction_results_table: Some(predictions),
                ..Default::default()
            }),
            request_timestamp: Some(Timestamp { seconds, nanos }),
            ..Default::default()
        }
        .encode_to_vec()
    }

    pub(crate) fn json(&self, now: SystemTime) -> Json {
        let (seconds, nanos) = self.timestamp(now);
        json!({
            "prediction_id": self.session,
            "seconds": seconds,
            "nanos": nanos,
            "feature_columns": FEATURES.iter().map(|(n, _)| n).collect::<Vec<_>>(),
            "feature_rows": self.features,
            "prediction_columns": ["score"],
            "prediction_rows": self.scores.iter().map(|s| [s]).collect::<Vec<_>>(),
            "row_ids": self.row_ids(),
        })
    }
}

/// The logs decoded by our decoder into one batch.
pub(crate) fn batch(cfg: &Config, logs: &[TestLog], now: SystemTime) -> Arc<Batch> {
    let layout = Arc::new(TableLayout::from_config(cfg));
    let mut b = Batcher::new(layout, Batching::default());
    let mut ready = Vec::new();
    for (i, log) in logs.iter().enumerate() {
        b.push(0, i as i64, &log.proto(now), Instant::now(), &mut ready)
            .unwrap();
    }
    assert!(ready.is_empty());
    Arc::new(b.flush().unwrap())
}

/// The ARIZE sink settings for `uri`.
pub(crate) fn arize_cfg(uri: &str, max_request_bytes: u64) -> ArizeCfg {
    ArizeCfg {
        api_key: API_KEY.into(),
        space_key: SPACE_KEY.into(),
        space_id: String::new(),
        uri: uri.into(),
        request_timeout: Duration::from_secs(10),
        connect_timeout: Duration::from_secs(5),
        max_request_bytes,
    }
}

pub(crate) fn sink(cfg: &Config, uri: &str, max_request_bytes: u64) -> ArizeSink {
    ArizeSink::new(cfg, &arize_cfg(uri, max_request_bytes)).unwrap()
}

/// A case for the oracle: send `logs` through the SDK.
pub(crate) fn case(name: &str, model: Model, logs: &[TestLog], now: SystemTime) -> Json {
    json!({
        "name": name,
        "project": "proj-a",
        "model_id": "model-b",
        "model_version": "3",
        "api_key": API_KEY,
        "space_key": SPACE_KEY,
        "schema": model.python(),
        "logs": logs.iter().map(|l| l.json(now)).collect::<Vec<_>>(),
    })
}

/// The Python of the oracle's venv (arize 7.10.2, Merlin's pins), created if needed.
pub(crate) fn oracle_python() -> std::path::PathBuf {
    static SETUP: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    crate::common::oracle_python("arize-oracle", "venv-arize", &SETUP)
}

/// Runs the oracle (creating its venv if needed) on `spec`; returns its JSON answer.
pub(crate) fn oracle(dir: &Path, spec: &Json) -> Json {
    run_oracle(dir, spec, false)
}

/// [`oracle`] with Arize's current SDK (7.40.1, `scripts/arize-oracle current`) in place of
/// Merlin's pin.
pub(crate) fn oracle_current(dir: &Path, spec: &Json) -> Json {
    run_oracle(dir, spec, true)
}

fn run_oracle(dir: &Path, spec: &Json, current: bool) -> Json {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let python = oracle_python();
    let spec_path = dir.join("spec.json");
    std::fs::write(&spec_path, spec.to_string()).unwrap();
    let mut cmd = std::process::Command::new(&python);
    if current {
        // Beside the venv's python: .../venv-arize/bin/python → .../arize-current.
        let services = python.parent().unwrap().parent().unwrap().parent().unwrap();
        cmd.env("PYTHONPATH", services.join("arize-current"));
    }
    let out = cmd
        .arg(root.join("tests/it/arize/oracle.py"))
        .arg(&spec_path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "oracle failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "oracle output: {e}\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}
