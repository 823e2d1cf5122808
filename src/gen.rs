//! Synthetic, realistic PredictionLogs for a configured schema (tests, benchmarks, the demo).
//!
//! Logs look like the ones Merlin's pyfunc server writes: a split-layout feature table with the
//! schema's features in their order plus an undeclared entity column (which the publisher
//! drops and counts), a prediction table with `row_ids`, `prediction_id` = a unique session id,
//! and about 1% NULL cells. Values are plausible for each feature's name and type, and the score
//! is a function of the features ([`values`]). With a [`Drift`], logs from a given index on come
//! from a shifted world (a feature's distribution, another's NULL share, the score's level), so
//! the quality metrics can be seen to move. With `malformed_ratio > 0`, that share of logs is
//! broken in one of several ways the decoder must reject. Output is deterministic for a given
//! seed and start time.

pub mod values;

use crate::config::Dist;
use crate::config::{FeatureType, InferenceSchema, ModelOutput};
use crate::proto::{ModelInput, ModelOutput as PbOutput, PredictionLog};
use prost::Message;
use prost_types::value::Kind;
use prost_types::{ListValue, Struct, Timestamp, Value};
use std::collections::BTreeMap;
use values::{infer, sigmoid, weight, Drawn};

/// Share of feature cells that are NULL, and of the drifting feature's after a NULL drift.
const NULL_SHARE: f64 = 0.01;
const DRIFTED_NULL_SHARE: f64 = 0.30;
/// Logit of a prediction with every feature at its usual value (binary: about 12% positive).
const BIAS: f64 = -2.0;
/// What a score drift adds to the logit.
const SCORE_DRIFT: f64 = 1.5;

/// What changes from log `after` on ([`Generator::with_drift`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Drift {
    /// The first drifted log's index.
    pub after: u64,
    /// The first float64 feature (else the first feature) draws from a shifted distribution.
    pub feature: bool,
    /// The first string feature (else the first feature) is NULL in 30% of rows, not 1%.
    pub nulls: bool,
    /// The score's logit rises by 1.5.
    pub score: bool,
}

/// Generator settings.
#[derive(Debug, Clone)]
pub struct GenOptions {
    /// Rows (predictions) per log.
    pub rows_per_log: u32,
    /// Random seed.
    pub seed: u64,
    /// Share of logs (0.0–1.0) to make malformed.
    pub malformed_ratio: f64,
    /// Timestamp of the first log, microseconds since the epoch; later logs are 1 ms apart.
    pub start_micros: i64,
    /// Project / model / version written into the logs (informational; the publisher uses its
    /// configuration).
    pub model: (String, String, String),
}

impl Default for GenOptions {
    /// One row per log, seed 1, nothing malformed, from 2023-11-14T22:13:20Z, model `p/m/1`.
    fn default() -> Self {
        GenOptions {
            rows_per_log: 1,
            seed: 1,
            malformed_ratio: 0.0,
            start_micros: 1_700_000_000_000_000,
            model: ("p".into(), "m".into(), "1".into()),
        }
    }
}

/// One generated log.
#[derive(Debug, Clone)]
pub struct GenLog {
    /// The serialized PredictionLog (or the broken bytes).
    pub bytes: Vec<u8>,
    /// Whether it was deliberately broken.
    pub malformed: bool,
    /// Its session id (unique per log).
    pub session_id: String,
}

/// The benchmark schema: `n` features cycling through float64, int64, string and boolean
/// (`feature_00` …), binary output. `config/bench-20.yaml` is the same for `n = 20`.
pub fn benchmark_schema(n: usize) -> InferenceSchema {
    let types = [
        FeatureType::Float64,
        FeatureType::Int64,
        FeatureType::String,
        FeatureType::Boolean,
    ];
    InferenceSchema {
        feature_types: (0..n)
            .map(|i| (format!("feature_{i:02}"), types[i % 4]))
            .collect(),
        model_prediction_output: ModelOutput::Binary {
            prediction_score_column: "prediction_score".into(),
            actual_score_column: None,
            positive_class_label: "fraud".into(),
            negative_class_label: "legit".into(),
            score_threshold: 0.5,
        },
        session_id_column: "session_id".into(),
        row_id_column: "row_id".into(),
        feature_orders: vec![],
    }
}

/// Produces logs one by one.
pub struct Generator {
    schema: InferenceSchema,
    opts: GenOptions,
    rng: fastrand::Rng,
    n: u64,
    /// Per feature: its distribution and its weight in the score.
    dists: Vec<(Dist, f64)>,
    /// Per feature: its share of NULL cells.
    nulls: Vec<f64>,
    drift: Option<Drift>,
}

fn v(kind: Kind) -> Value {
    Value { kind: Some(kind) }
}

fn list(values: Vec<Value>) -> Value {
    v(Kind::ListValue(ListValue { values }))
}

fn s(x: &str) -> Value {
    v(Kind::StringValue(x.to_string()))
}

impl Generator {
    /// A generator for `schema`.
    pub fn new(schema: &InferenceSchema, opts: GenOptions) -> Self {
        Generator {
            dists: schema
                .feature_types
                .iter()
                .map(|(n, t)| (infer(n, *t), weight(n)))
                .collect(),
            nulls: vec![NULL_SHARE; schema.feature_types.len()],
            schema: schema.clone(),
            rng: fastrand::Rng::with_seed(opts.seed),
            opts,
            n: 0,
            drift: None,
        }
    }

    /// Draws the features the `gen:` section names from its distributions (and NULL shares)
    /// instead of the inferred ones; names the schema does not declare are ignored (the
    /// configuration rejects them).
    pub fn with_columns(mut self, columns: &[crate::config::GenColumn]) -> Self {
        for c in columns {
            if let Some(k) = self
                .schema
                .feature_types
                .iter()
                .position(|(n, _)| *n == c.column)
            {
                self.dists[k].0 = c.dist.clone();
                self.nulls[k] = c.nulls;
            }
        }
        self
    }

    /// Logs from `drift.after` on drift as it says.
    pub fn with_drift(mut self, drift: Drift) -> Self {
        self.drift = Some(drift);
        self
    }

    /// The features a drift changes: (distribution, NULL share), by index.
    pub fn drift_targets(&self) -> (Option<usize>, Option<usize>) {
        let f = &self.schema.feature_types;
        let first = (!f.is_empty()).then_some(0);
        let of = |t: FeatureType| f.iter().position(|(_, x)| *x == t).or(first);
        (of(FeatureType::Float64), of(FeatureType::String))
    }

    /// One row's feature values and its score's logit (before noise and drift).
    fn feature_row(&mut self, drifted: Option<Drift>) -> (Vec<Value>, f64) {
        let (dist_target, null_target) = self.drift_targets();
        let mut logit = 0.0;
        let mut vals = Vec::with_capacity(self.dists.len() + 1);
        for k in 0..self.dists.len() {
            let null_share = match drifted {
                Some(d) if d.nulls && null_target == Some(k) => DRIFTED_NULL_SHARE,
                _ => self.nulls[k],
            };
            if self.rng.f64() < null_share {
                vals.push(v(Kind::NullValue(0)));
                continue;
            }
            let (dist, w) = &self.dists[k];
            let shifted;
            let dist = match drifted {
                Some(d) if d.feature && dist_target == Some(k) => {
                    shifted = dist.drifted();
                    &shifted
                }
                _ => dist,
            };
            let drawn = dist.draw(&mut self.rng);
            // The score reads the value against the usual distribution: a drifted feature
            // moves it.
            logit += w * 1.5 * self.dists[k].0.signal(&drawn);
            let int = self.schema.feature_types[k].1 == FeatureType::Int64;
            vals.push(match drawn {
                // Python Struct numbers are doubles: ints travel as whole floats.
                Drawn::Number(x) if int => v(Kind::NumberValue(x.round())),
                Drawn::Number(x) => v(Kind::NumberValue(x)),
                Drawn::Str(x) => v(Kind::StringValue(x)),
                Drawn::Bool(b) => v(Kind::BoolValue(b)),
            });
        }
        (vals, logit)
    }

    fn normal(&mut self) -> f64 {
        let u = 1.0 - self.rng.f64();
        (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * self.rng.f64()).cos()
    }

    /// A well-formed log with index `i`.
    pub fn valid_log(&mut self, i: u64) -> PredictionLog {
        let rows = self.opts.rows_per_log.max(1) as usize;
        let session = format!("sess-{:x}-{i}", self.opts.seed);
        let drifted = self.drift.filter(|d| i >= d.after);
        let bias = BIAS + drifted.filter(|d| d.score).map_or(0.0, |_| SCORE_DRIFT);
        let mut columns: Vec<Value> = self
            .schema
            .feature_types
            .iter()
            .map(|(n, _)| s(n))
            .collect();
        columns.push(s("customer_id")); // an entity column the schema does not declare
        let mut f_rows = Vec::with_capacity(rows);
        let mut logits = Vec::with_capacity(rows);
        for r in 0..rows {
            let (mut vals, logit) = self.feature_row(drifted);
            vals.push(s(&format!("cust-{}", (i as usize * rows + r) % 9973)));
            f_rows.push(list(vals));
            logits.push(bias + logit);
        }
        let mut f_fields = BTreeMap::new();
        if self.schema.feature_orders.is_empty() {
            f_fields.insert("columns".to_string(), list(columns));
        }
        f_fields.insert("data".to_string(), list(f_rows));

        let out = self.schema.model_prediction_output.clone();
        let score_cols: Vec<String> = out.score_columns().iter().map(|c| c.to_string()).collect();
        let row_ids: Vec<Value> = (0..rows).map(|r| s(&format!("{r}"))).collect();
        let mut p_rows = Vec::with_capacity(rows);
        for logit in logits {
            let logit = logit + 0.5 * self.normal();
            let scores: Vec<Value> = match &out {
                ModelOutput::Multiclass { .. } => {
                    // Class k leans on the features with its own sign; softmax.
                    let raw: Vec<f64> = (0..score_cols.len())
                        .map(|k| {
                            let sign = if k % 2 == 0 { 1.0 } else { -1.0 };
                            (sign * (logit - BIAS) / (k as f64 + 1.0) + 0.3 * self.normal()).exp()
                        })
                        .collect();
                    let sum: f64 = raw.iter().sum::<f64>().max(f64::MIN_POSITIVE);
                    raw.iter().map(|x| v(Kind::NumberValue(x / sum))).collect()
                }
                ModelOutput::Regression { .. } => {
                    vec![v(Kind::NumberValue(
                        (100.0 * (logit / 2.0).exp() * 100.0).round() / 100.0,
                    ))]
                }
                _ => vec![v(Kind::NumberValue(sigmoid(logit)))],
            };
            p_rows.push(if scores.len() == 1 {
                scores.into_iter().next().expect("one")
            } else {
                list(scores)
            });
        }
        let mut p_fields = BTreeMap::new();
        p_fields.insert(
            "columns".to_string(),
            list(score_cols.iter().map(|c| s(c)).collect()),
        );
        p_fields.insert("data".to_string(), list(p_rows));
        p_fields.insert("row_ids".to_string(), list(row_ids));

        let micros = self.opts.start_micros + i as i64 * 1_000;
        let (model_project, model_name, model_version) = self.opts.model.clone();
        PredictionLog {
            prediction_id: session,
            target_name: String::new(),
            project_name: model_project,
            model_name,
            model_version,
            input: Some(ModelInput {
                features_table: Some(Struct { fields: f_fields }),
                ..Default::default()
            }),
            output: Some(PbOutput {
                prediction_results_table: Some(Struct { fields: p_fields }),
                ..Default::default()
            }),
            request_timestamp: Some(Timestamp {
                seconds: micros.div_euclid(1_000_000),
                nanos: (micros.rem_euclid(1_000_000) * 1_000) as i32,
            }),
            table_schema_version: 1,
        }
    }

    /// The next log (malformed with probability `malformed_ratio`).
    pub fn next_log(&mut self) -> GenLog {
        let i = self.n;
        self.n += 1;
        let mut log = self.valid_log(i);
        let session_id = log.prediction_id.clone();
        let malformed =
            self.opts.malformed_ratio > 0.0 && self.rng.f64() < self.opts.malformed_ratio;
        if !malformed {
            return GenLog {
                bytes: log.encode_to_vec(),
                malformed,
                session_id,
            };
        }
        let bytes = match self.rng.u32(0..5) {
            // Not protobuf at all.
            0 => b"\xff\xff\xff\xff not a prediction log".to_vec(),
            // Truncated in the middle.
            1 => {
                let b = log.encode_to_vec();
                b[..b.len() / 2].to_vec()
            }
            // No row ids.
            2 => {
                if let Some(t) = log
                    .output
                    .as_mut()
                    .and_then(|o| o.prediction_results_table.as_mut())
                {
                    t.fields.remove("row_ids");
                }
                log.encode_to_vec()
            }
            // No timestamp.
            3 => {
                log.request_timestamp = None;
                log.encode_to_vec()
            }
            // No feature data (a schema without features cannot hold a nested cell).
            _ if self.schema.feature_types.is_empty() => {
                if let Some(t) = log.input.as_mut().and_then(|i| i.features_table.as_mut()) {
                    t.fields.remove("data");
                }
                log.encode_to_vec()
            }
            // A list where a cell should be.
            _ => {
                if let Some(Kind::ListValue(rows)) = log
                    .input
                    .as_mut()
                    .and_then(|i| i.features_table.as_mut())
                    .and_then(|t| t.fields.get_mut("data"))
                    .and_then(|d| d.kind.as_mut())
                {
                    if let Some(Kind::ListValue(first)) =
                        rows.values.get_mut(0).and_then(|r| r.kind.as_mut())
                    {
                        first.values[0] = list(vec![s("nested")]);
                    }
                }
                log.encode_to_vec()
            }
        };
        GenLog {
            bytes,
            malformed,
            session_id,
        }
    }
}
