//! `metrics:` (optional, strict): quality metrics that cost per row, off by default.
//!
//! ```yaml
//! metrics:
//!   feature_histograms:
//!     amount: [1, 10, 50, 100, 500, 1000, 5000]
//! ```

use super::value::{Obj, Problems};
use super::{FeatureType, InferenceSchema};
use serde::Serialize;
use serde_yaml_ng::Value;

/// `metrics:` (optional, strict): quality metrics that cost per row and are off by default.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct MetricsConfig {
    /// Numeric features whose values get a histogram
    /// (`observation_publisher_feature_value{column}`), with their buckets.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub feature_histograms: Vec<FeatureHistogram>,
}

/// One feature's value histogram: `metrics.feature_histograms.<column>: [bucket, …]`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FeatureHistogram {
    /// The feature (int64 or float64).
    pub column: String,
    /// Upper bounds, ascending (at most [`MAX_BUCKETS`]).
    pub buckets: Vec<f64>,
}

/// Most buckets one feature histogram may have.
pub const MAX_BUCKETS: usize = 50;

impl MetricsConfig {
    /// Reads `metrics:` (absent: nothing on) against the schema's features.
    pub(crate) fn read(
        mut o: Obj<'_>,
        schema: Option<&InferenceSchema>,
        problems: &mut Problems,
    ) -> Self {
        let path = o.path_of("feature_histograms");
        let fh = Obj::new(o.raw("feature_histograms"), &path, problems);
        o.deny_unknown(problems);
        let mut feature_histograms = Vec::new();
        for (column, v) in fh.entries() {
            let p = format!("{path}.{column}");
            let ty = schema.map(|s| {
                s.feature_types
                    .iter()
                    .find(|(n, _)| *n == column)
                    .map(|(_, t)| *t)
            });
            match ty {
                Some(None) => {
                    problems.push(&p, "not a declared feature");
                    continue;
                }
                Some(Some(FeatureType::String | FeatureType::Boolean)) => {
                    problems.push(&p, "not a numeric (int64 or float64) feature");
                    continue;
                }
                _ => {}
            }
            let buckets: Option<Vec<f64>> = match v {
                Value::Sequence(items) => items.iter().map(Value::as_f64).collect(),
                _ => None,
            };
            match buckets {
                Some(b)
                    if !b.is_empty()
                        && b.len() <= MAX_BUCKETS
                        && b.iter().all(|x| x.is_finite())
                        && b.windows(2).all(|w| w[0] < w[1]) =>
                {
                    feature_histograms.push(FeatureHistogram { column, buckets: b })
                }
                _ => problems.push(
                    &p,
                    format_args!(
                        "must be a list of 1 to {MAX_BUCKETS} finite numbers, strictly ascending"
                    ),
                ),
            }
        }
        MetricsConfig { feature_histograms }
    }
}
