//! The model's inference schema: Merlin SDK `InferenceSchema` plus a multiclass output class.
//!
//! Read from `inference_schema` exactly as Merlin's control plane writes it: `feature_types`
//! keeps its order (it is the BigQuery column order and the feature allow-list),
//! `model_prediction_output` is a tagged union on `output_class`, unknown keys such as
//! `prediction_label_column` or `tag_columns` are tolerated with a warning, and
//! `score_threshold: null` means 0.5.

use super::value::{kind, Obj, Problems};
use serde::Serialize;
use serde_yaml_ng::Value;

/// Declared type of a feature column.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum FeatureType {
    /// `int64` → BigQuery INTEGER.
    Int64,
    /// `float64` → BigQuery FLOAT.
    Float64,
    /// `boolean` → BigQuery BOOLEAN.
    Boolean,
    /// `string` → BigQuery STRING.
    String,
}

impl FeatureType {
    fn parse(s: &str) -> Option<Self> {
        // The SDK's ValueType values; a few common spellings are accepted as well.
        match s {
            "int64" | "INT64" | "integer" | "INTEGER" => Some(Self::Int64),
            "float64" | "FLOAT64" | "float" | "FLOAT" | "double" | "DOUBLE" => Some(Self::Float64),
            "boolean" | "BOOLEAN" | "bool" | "BOOL" => Some(Self::Boolean),
            "string" | "STRING" => Some(Self::String),
            _ => None,
        }
    }
}

/// What the model predicts, and so which prediction and derived columns the table has.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "output_class")]
pub enum ModelOutput {
    /// Binary classification: a score column and the derived `_prediction_label`.
    #[serde(rename = "BinaryClassificationOutput")]
    Binary {
        /// Column holding the positive-class score.
        prediction_score_column: String,
        /// Ground-truth score column (never written by the publisher).
        #[serde(skip_serializing_if = "Option::is_none")]
        actual_score_column: Option<String>,
        /// Label when score ≥ threshold.
        positive_class_label: String,
        /// Label when score < threshold.
        negative_class_label: String,
        /// Threshold; `null` in Merlin's YAML means 0.5.
        score_threshold: f64,
    },
    /// Regression: a score column, nothing derived.
    #[serde(rename = "RegressionOutput")]
    Regression {
        /// Column holding the predicted value.
        prediction_score_column: String,
        /// Ground-truth column (never written by the publisher).
        #[serde(skip_serializing_if = "Option::is_none")]
        actual_score_column: Option<String>,
    },
    /// Ranking: a score column and the derived `_rank` (within each log).
    #[serde(rename = "RankingOutput")]
    Ranking {
        /// Column holding the ranking score.
        rank_score_column: String,
        /// Ground-truth relevance column (never written by the publisher).
        #[serde(skip_serializing_if = "Option::is_none")]
        relevance_score_column: Option<String>,
    },
    /// Multiclass classification (an addition Merlin lacks): one score column per class and the
    /// derived `_prediction_label` = label of the highest score.
    #[serde(rename = "MulticlassClassificationOutput")]
    Multiclass {
        /// One score column per class.
        prediction_score_columns: Vec<String>,
        /// One label per class, same order and length.
        class_labels: Vec<String>,
    },
}

impl ModelOutput {
    /// Why an ARIZE sink cannot take this output class, if it cannot: Merlin's Arize sink maps
    /// binary classification, regression and ranking only.
    pub fn arize_unsupported(&self) -> Option<&'static str> {
        matches!(self, ModelOutput::Multiclass { .. }).then_some(
            "MulticlassClassificationOutput cannot be sent to Arize: Merlin's Arize sink has no mapping for it (only binary classification, regression and ranking); remove the ARIZE sink or use another output class",
        )
    }

    /// The prediction (score) columns, in table order.
    pub fn score_columns(&self) -> Vec<&str> {
        match self {
            ModelOutput::Binary {
                prediction_score_column,
                ..
            }
            | ModelOutput::Regression {
                prediction_score_column,
                ..
            } => vec![prediction_score_column],
            ModelOutput::Ranking {
                rank_score_column, ..
            } => vec![rank_score_column],
            ModelOutput::Multiclass {
                prediction_score_columns,
                ..
            } => prediction_score_columns
                .iter()
                .map(String::as_str)
                .collect(),
        }
    }
}

/// Name of the derived label column (binary and multiclass).
pub const PREDICTION_LABEL_COLUMN: &str = "_prediction_label";
/// Name of the derived rank column (ranking).
pub const RANK_COLUMN: &str = "_rank";

/// Storage type of a table column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColumnType {
    /// STRING / Utf8.
    String,
    /// INTEGER / Int64.
    Int64,
    /// FLOAT / Float64.
    Float64,
    /// BOOLEAN / Boolean.
    Boolean,
    /// TIMESTAMP / `timestamp[us, tz=UTC]`.
    Timestamp,
}

impl ColumnType {
    /// BigQuery legacy type name as the REST API spells it.
    pub fn bigquery_name(self) -> &'static str {
        match self {
            ColumnType::String => "STRING",
            ColumnType::Int64 => "INTEGER",
            ColumnType::Float64 => "FLOAT",
            ColumnType::Boolean => "BOOLEAN",
            ColumnType::Timestamp => "TIMESTAMP",
        }
    }
}

impl From<FeatureType> for ColumnType {
    fn from(t: FeatureType) -> Self {
        match t {
            FeatureType::Int64 => ColumnType::Int64,
            FeatureType::Float64 => ColumnType::Float64,
            FeatureType::Boolean => ColumnType::Boolean,
            FeatureType::String => ColumnType::String,
        }
    }
}

/// One column of the model's table.
#[derive(Debug, Clone, PartialEq)]
pub struct Column {
    /// Column name.
    pub name: String,
    /// Column type.
    pub ty: ColumnType,
}

/// The model's schema.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct InferenceSchema {
    /// Features and their types, in declaration order (= table column order).
    #[serde(serialize_with = "super::value::ser_pairs")]
    pub feature_types: Vec<(String, FeatureType)>,
    /// Output class and its columns.
    pub model_prediction_output: ModelOutput,
    /// Output column name for `PredictionLog.prediction_id`.
    pub session_id_column: String,
    /// Output column name for the row id.
    pub row_id_column: String,
    /// Positional feature names for feature tables without `columns`; if non-empty it takes
    /// precedence over the table's own `columns` (as in Merlin).
    pub feature_orders: Vec<String>,
}

impl InferenceSchema {
    /// The table's columns in Merlin's BigQuery order: session id, row id, `request_timestamp`,
    /// `model_version`, the features in declaration order, the score column(s), then the derived
    /// column (`_prediction_label` for binary and multiclass, `_rank` for ranking).
    pub fn columns(&self) -> Vec<Column> {
        let col = |name: &str, ty| Column {
            name: name.to_string(),
            ty,
        };
        let mut columns = vec![
            col(&self.session_id_column, ColumnType::String),
            col(&self.row_id_column, ColumnType::String),
            col("request_timestamp", ColumnType::Timestamp),
            col("model_version", ColumnType::String),
        ];
        columns.extend(
            self.feature_types
                .iter()
                .map(|(name, ty)| col(name, (*ty).into())),
        );
        let out = &self.model_prediction_output;
        columns.extend(
            out.score_columns()
                .into_iter()
                .map(|s| col(s, ColumnType::Float64)),
        );
        match out {
            ModelOutput::Binary { .. } | ModelOutput::Multiclass { .. } => {
                columns.push(col(PREDICTION_LABEL_COLUMN, ColumnType::String));
            }
            ModelOutput::Ranking { .. } => columns.push(col(RANK_COLUMN, ColumnType::Int64)),
            ModelOutput::Regression { .. } => {}
        }
        columns
    }

    /// Reads `inference_schema` from `o`, recording problems and warnings.
    pub(crate) fn read(
        mut o: Obj<'_>,
        problems: &mut Problems,
        warnings: &mut Problems,
    ) -> Option<Self> {
        if o.is_absent() {
            problems.push(o.path(), "required");
            return None;
        }
        let session_id_column = o
            .string("session_id_column", problems)
            .unwrap_or_else(|| "session_id".into());
        let row_id_column = o
            .string("row_id_column", problems)
            .unwrap_or_else(|| "row_id".into());
        let feature_orders = o
            .string_list("feature_orders", problems)
            .unwrap_or_default();
        let _ = o.raw("tag_columns"); // parsed and ignored, as in Merlin

        let ft_path = o.path_of("feature_types");
        let mut feature_types = Vec::new();
        match o.raw("feature_types") {
            None => problems.push(&ft_path, "required"),
            Some(Value::Mapping(m)) => {
                for (k, v) in m {
                    let name = match k {
                        Value::String(s) => s.clone(),
                        other => {
                            problems.push(
                                &ft_path,
                                format_args!(
                                    "feature names must be strings, found {}",
                                    kind(other)
                                ),
                            );
                            continue;
                        }
                    };
                    let ty = match v {
                        Value::String(s) => FeatureType::parse(s),
                        _ => None,
                    };
                    match ty {
                        Some(t) => feature_types.push((name, t)),
                        None => problems.push(
                            &format!("{ft_path}.{name}"),
                            format_args!("unknown feature type {v:?}; expected int64, float64, boolean or string"),
                        ),
                    }
                }
            }
            Some(other) => problems.push(
                &ft_path,
                format_args!("expected a mapping, found {}", kind(other)),
            ),
        }

        let mut out = o.obj("model_prediction_output", problems);
        let output = if out.is_absent() {
            problems.push(&o.path_of("model_prediction_output"), "required");
            None
        } else {
            read_output(&mut out, problems)
        };
        out.warn_unknown(warnings);
        o.warn_unknown(warnings);
        super::validate_columns(
            &session_id_column,
            &row_id_column,
            &feature_types,
            output.as_ref(),
            problems,
        );

        Some(InferenceSchema {
            feature_types,
            model_prediction_output: output?,
            session_id_column,
            row_id_column,
            feature_orders,
        })
    }
}

fn read_output(o: &mut Obj<'_>, problems: &mut Problems) -> Option<ModelOutput> {
    let class = o.req_string("output_class", problems);
    // Merlin's control plane writes it; the label column is always `_prediction_label`
    // (`check-config` says so, see understood.rs).
    let _ = o.raw("prediction_label_column");
    match class.as_str() {
        "BinaryClassificationOutput" => {
            let prediction_score_column = o.req_string("prediction_score_column", problems);
            let actual_score_column = o.string("actual_score_column", problems);
            let positive_class_label = o.req_string("positive_class_label", problems);
            let negative_class_label = o.req_string("negative_class_label", problems);
            let score_threshold = o.f64("score_threshold", problems).unwrap_or(0.5);
            if !score_threshold.is_finite() {
                problems.push(&o.path_of("score_threshold"), "must be a finite number");
            }
            Some(ModelOutput::Binary {
                prediction_score_column,
                actual_score_column,
                positive_class_label,
                negative_class_label,
                score_threshold,
            })
        }
        "RegressionOutput" => Some(ModelOutput::Regression {
            prediction_score_column: o.req_string("prediction_score_column", problems),
            actual_score_column: o.string("actual_score_column", problems),
        }),
        "RankingOutput" => Some(ModelOutput::Ranking {
            rank_score_column: o.req_string("rank_score_column", problems),
            relevance_score_column: o.string("relevance_score_column", problems),
        }),
        "MulticlassClassificationOutput" => {
            let cols = o.string_list("prediction_score_columns", problems);
            let labels = o.string_list("class_labels", problems);
            let (cols, labels) = match (cols, labels) {
                (Some(c), Some(l)) => (c, l),
                (c, l) => {
                    if c.is_none() {
                        problems.push(&o.path_of("prediction_score_columns"), "required");
                    }
                    if l.is_none() {
                        problems.push(&o.path_of("class_labels"), "required");
                    }
                    (c.unwrap_or_default(), l.unwrap_or_default())
                }
            };
            if cols.is_empty() {
                problems.push(
                    &o.path_of("prediction_score_columns"),
                    "must name at least one column",
                );
            }
            if cols.len() != labels.len() {
                problems.push(
                    &o.path_of("class_labels"),
                    format_args!(
                        "has {} labels but prediction_score_columns has {} columns; they must match one to one",
                        labels.len(),
                        cols.len()
                    ),
                );
            }
            Some(ModelOutput::Multiclass {
                prediction_score_columns: cols,
                class_labels: labels,
            })
        }
        "" => None,
        other => {
            problems.push(
                &o.path_of("output_class"),
                format_args!(
                    "unknown output class {other:?}; expected BinaryClassificationOutput, RegressionOutput, RankingOutput or MulticlassClassificationOutput"
                ),
            );
            None
        }
    }
}
