//! `gen:` (optional, strict): the distribution `observation-publisher gen` draws a feature's
//! values from, instead of the one it infers from the feature's name and type. The publisher
//! itself ignores the section.
//!
//! ```yaml
//! gen:
//!   country: {dist: categorical, values: {ID: 0.6, SG: 0.3, TH: 0.1}, nulls: 0.02}
//!   merchant_id: {dist: id, prefix: "m-", pool: 500}
//!   amount: {dist: lognormal, mu: 3.5, sigma: 1.0}
//!   risk_score: {dist: unit, power: 2}          # u^power: skewed towards 0
//!   avg_amount_7d: {dist: normal, mean: 50, std: 15}
//!   num_txn_24h: {dist: count, mean: 3}         # geometric
//!   hour_of_day: {dist: uniform_int, min: 0, max: 23}
//!   is_foreign: {dist: bernoulli, p: 0.1}
//! ```
//!
//! Every key must be a declared feature; `categorical` and `id` fit string features,
//! `bernoulli` boolean ones, the others numeric ones (`unit` float64 only). `nulls` is the
//! share of NULL cells (default 0.01).

use super::value::{kind, Obj, Problems};
use super::{FeatureType, InferenceSchema};
use serde::Serialize;
use serde_yaml_ng::Value;

/// The distribution one feature's values are drawn from: what a `gen:` entry names, and what
/// `gen` infers for the others (`crate::gen::values::infer`, which also draws from it).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Dist {
    /// One of `values`, weighted.
    Categorical(Vec<(String, f64)>),
    /// `prefix` and a number below `pool`, the low numbers more frequent (Zipf-like).
    Id {
        /// Text before the number.
        prefix: String,
        /// Distinct ids.
        pool: u32,
    },
    /// An integer in `0..=max`, by weights (index = value).
    IntWeights(Vec<f64>),
    /// A count: geometric with mean `mean`.
    Count {
        /// The mean.
        mean: f64,
    },
    /// `exp(normal(mu, sigma))`, rounded to cents.
    LogNormal {
        /// Mean of the logarithm.
        mu: f64,
        /// Standard deviation of the logarithm.
        sigma: f64,
    },
    /// In [0, 1], skewed low: `u^power`.
    Unit {
        /// The exponent (above 1: skewed towards 0).
        power: f64,
    },
    /// Normal, rounded to cents.
    Normal {
        /// The mean.
        mean: f64,
        /// The standard deviation.
        std: f64,
    },
    /// An integer uniform in `min..=max`.
    IntUniform {
        /// Smallest value.
        min: i64,
        /// Largest value.
        max: i64,
    },
    /// True with probability `p`.
    Bool {
        /// Probability of true.
        p: f64,
    },
}

/// One feature's entry of the `gen:` section.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GenColumn {
    /// The feature.
    pub column: String,
    /// Its distribution.
    pub dist: Dist,
    /// Share of NULL cells (0–1).
    pub nulls: f64,
}

/// Default share of NULL cells.
pub const DEFAULT_NULLS: f64 = 0.01;

const DISTS: &[&str] = &[
    "categorical",
    "id",
    "bernoulli",
    "uniform_int",
    "count",
    "normal",
    "lognormal",
    "unit",
];

/// Reads the `gen:` section (absent: empty) against the schema's features.
pub(crate) fn read(
    v: Option<&Value>,
    schema: Option<&InferenceSchema>,
    problems: &mut Problems,
) -> Vec<GenColumn> {
    let top = Obj::new(v, "gen", problems);
    let mut out = Vec::new();
    for (column, entry) in top.entries() {
        let path = format!("gen.{column}");
        let ty = schema.map(|s| {
            s.feature_types
                .iter()
                .find(|(n, _)| *n == column)
                .map(|(_, t)| *t)
        });
        if let Some(None) = ty {
            problems.push(
                &path,
                "not a declared feature (inference_schema.feature_types)",
            );
            continue;
        }
        let dist_name = match entry.get("dist") {
            Some(Value::String(s)) if DISTS.contains(&s.as_str()) => s.clone(),
            Some(Value::String(s)) => {
                problems.push(
                    &format!("{path}.dist"),
                    format_args!(
                        "unknown distribution {s:?}; expected one of {}",
                        DISTS.join(", ")
                    ),
                );
                continue;
            }
            Some(other) => {
                problems.push(
                    &format!("{path}.dist"),
                    format_args!("expected a string, found {}", kind(other)),
                );
                continue;
            }
            None => {
                problems.push(
                    &format!("{path}.dist"),
                    format_args!("required: one of {}", DISTS.join(", ")),
                );
                continue;
            }
        };
        let params: &[&'static str] = match dist_name.as_str() {
            "categorical" => &["dist", "nulls", "values"],
            "id" => &["dist", "nulls", "prefix", "pool"],
            "bernoulli" => &["dist", "nulls", "p"],
            "uniform_int" => &["dist", "nulls", "min", "max"],
            "count" => &["dist", "nulls", "mean"],
            "normal" => &["dist", "nulls", "mean", "std"],
            "lognormal" => &["dist", "nulls", "mu", "sigma"],
            _ => &["dist", "nulls", "power"],
        };
        let before = problems.0.len();
        let mut o = Obj::closed(Some(entry), &path, params, problems);
        let nulls = o.f64("nulls", problems).unwrap_or(DEFAULT_NULLS);
        if !(0.0..=1.0).contains(&nulls) {
            problems.push(&o.path_of("nulls"), "must be from 0 to 1");
        }
        let any = |_: f64| true;
        let positive = |x: f64| x > 0.0;
        let dist = match dist_name.as_str() {
            "categorical" => {
                let vp = o.path_of("values");
                let vals = Obj::new(o.raw("values"), &vp, problems);
                let mut values = Vec::new();
                for (name, w) in vals.entries() {
                    match w.as_f64() {
                        Some(w) if w > 0.0 && w.is_finite() => values.push((name, w)),
                        _ => problems.push(&format!("{vp}.{name}"), "must be a positive weight"),
                    }
                }
                if values.is_empty() {
                    problems.push(&vp, "required: a mapping of value to weight");
                }
                Dist::Categorical(values)
            }
            "id" => {
                let prefix = o.string("prefix", problems).unwrap_or_default();
                let pool = num(
                    &mut o,
                    problems,
                    "pool",
                    |x| x >= 1.0 && x.fract() == 0.0 && x < 4e9,
                    "a whole number from 1",
                );
                Dist::Id {
                    prefix,
                    pool: pool as u32,
                }
            }
            "bernoulli" => Dist::Bool {
                p: num(
                    &mut o,
                    problems,
                    "p",
                    |x| (0.0..=1.0).contains(&x),
                    "from 0 to 1",
                ),
            },
            "uniform_int" => {
                let min = num(
                    &mut o,
                    problems,
                    "min",
                    |x| x.fract() == 0.0,
                    "a whole number",
                );
                let max = num(
                    &mut o,
                    problems,
                    "max",
                    |x| x.fract() == 0.0,
                    "a whole number",
                );
                if max < min {
                    problems.push(&o.path_of("max"), "must be at least min");
                }
                Dist::IntUniform {
                    min: min as i64,
                    max: max as i64,
                }
            }
            "count" => Dist::Count {
                mean: num(&mut o, problems, "mean", positive, "positive"),
            },
            "normal" => Dist::Normal {
                mean: num(&mut o, problems, "mean", any, "a number"),
                std: num(&mut o, problems, "std", |x| x >= 0.0, "at least 0"),
            },
            "lognormal" => Dist::LogNormal {
                mu: num(
                    &mut o,
                    problems,
                    "mu",
                    |x| x.abs() < 700.0,
                    "between -700 and 700",
                ),
                sigma: num(&mut o, problems, "sigma", |x| x >= 0.0, "at least 0"),
            },
            _ => Dist::Unit {
                power: num(&mut o, problems, "power", positive, "positive"),
            },
        };
        if let Some(Some(t)) = ty {
            let fits = match dist {
                Dist::Categorical(_) | Dist::Id { .. } => t == FeatureType::String,
                Dist::Bool { .. } => t == FeatureType::Boolean,
                Dist::Unit { .. } => t == FeatureType::Float64,
                _ => matches!(t, FeatureType::Int64 | FeatureType::Float64),
            };
            if !fits {
                problems.push(
                    &format!("{path}.dist"),
                    format_args!("{dist_name} does not fit a {} feature", type_name(t)),
                );
            }
        }
        if problems.0.len() == before {
            out.push(GenColumn {
                column,
                dist,
                nulls,
            });
        }
    }
    out
}

fn type_name(t: FeatureType) -> &'static str {
    match t {
        FeatureType::Int64 => "int64",
        FeatureType::Float64 => "float64",
        FeatureType::Boolean => "boolean",
        FeatureType::String => "string",
    }
}

/// A required parameter that `ok` accepts (finite), else a problem and 0.
fn num(
    o: &mut Obj<'_>,
    problems: &mut Problems,
    key: &'static str,
    ok: fn(f64) -> bool,
    want: &str,
) -> f64 {
    let p = o.path_of(key);
    match o.f64(key, problems) {
        Some(x) if ok(x) && x.is_finite() => x,
        Some(_) => {
            problems.push(&p, format_args!("must be {want}"));
            0.0
        }
        None => {
            problems.push(&p, "required");
            0.0
        }
    }
}
