//! The model's table: columns in BigQuery order, their Arrow schema and the BigQuery REST table
//! resource (`schema` command; table creation in the BigQuery sink).
//!
//! Column order is Merlin's BigQuery order: session id, row id, `request_timestamp`,
//! `model_version`, the features in `feature_types` order, the score column(s), then the derived
//! column (`_prediction_label` for binary and multiclass, `_rank` for ranking).

use crate::config::{BigQuerySink, Config, InferenceSchema, ModelOutput};
use arrow_schema::{DataType, Field, Schema, SchemaRef, TimeUnit};
use serde_json::{json, Value};
use std::sync::Arc;

pub use crate::config::{Column, ColumnType};
pub use crate::naming::{table_id, table_identity};

impl ColumnType {
    /// Arrow type.
    pub fn arrow(self) -> DataType {
        match self {
            ColumnType::String => DataType::Utf8,
            ColumnType::Int64 => DataType::Int64,
            ColumnType::Float64 => DataType::Float64,
            ColumnType::Boolean => DataType::Boolean,
            ColumnType::Timestamp => DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
        }
    }
}

/// How the derived column is computed.
#[derive(Debug, Clone, PartialEq)]
pub enum Derived {
    /// Regression: nothing derived.
    None,
    /// Binary: positive label if score ≥ threshold, else negative; NULL for a NULL score.
    BinaryLabel {
        /// Label for score ≥ threshold.
        positive: String,
        /// Label for score < threshold.
        negative: String,
        /// The threshold.
        threshold: f64,
    },
    /// Multiclass: label of the highest non-null score (ties: first); NULL if all are NULL.
    ArgmaxLabel {
        /// One label per score column.
        labels: Vec<String>,
    },
    /// Ranking: 1-based rank of the score within the log, descending, ties by appearance.
    Rank,
}

/// Index of the first feature column (after session id, row id, timestamp, version).
pub const FIRST_FEATURE: usize = 4;

/// The table layout of one model version.
#[derive(Debug, Clone)]
pub struct TableLayout {
    /// All columns in order.
    pub columns: Vec<Column>,
    /// Number of feature columns (they start at [`FIRST_FEATURE`]).
    pub n_features: usize,
    /// Number of score columns (they follow the features).
    pub n_scores: usize,
    /// The derived column, if any (always last).
    pub derived: Derived,
    /// `feature_orders` from the schema (positional names for tables without `columns`).
    pub feature_orders: Vec<String>,
    /// The model version written to every row.
    pub model_version: String,
    /// Arrow schema of the record batches.
    pub arrow: SchemaRef,
}

impl TableLayout {
    /// Builds the layout from the inference schema and the configured model version.
    pub fn new(schema: &InferenceSchema, model_version: &str) -> Self {
        let columns = schema.columns();
        let derived = match &schema.model_prediction_output {
            ModelOutput::Binary {
                positive_class_label,
                negative_class_label,
                score_threshold,
                ..
            } => Derived::BinaryLabel {
                positive: positive_class_label.clone(),
                negative: negative_class_label.clone(),
                threshold: *score_threshold,
            },
            ModelOutput::Multiclass { class_labels, .. } => Derived::ArgmaxLabel {
                labels: class_labels.clone(),
            },
            ModelOutput::Ranking { .. } => Derived::Rank,
            ModelOutput::Regression { .. } => Derived::None,
        };
        let arrow = Arc::new(Schema::new(
            columns
                .iter()
                .map(|c| Field::new(&c.name, c.ty.arrow(), true))
                .collect::<Vec<_>>(),
        ));
        TableLayout {
            n_features: schema.feature_types.len(),
            n_scores: schema.model_prediction_output.score_columns().len(),
            derived,
            feature_orders: schema.feature_orders.clone(),
            model_version: model_version.to_string(),
            columns,
            arrow,
        }
    }

    /// Builds the layout of a validated configuration.
    pub fn from_config(c: &Config) -> Self {
        Self::new(&c.inference_schema, &c.model_version)
    }

    /// Index of the first score column.
    pub fn first_score(&self) -> usize {
        FIRST_FEATURE + self.n_features
    }

    /// Index of the derived column, if any.
    pub fn derived_index(&self) -> Option<usize> {
        (!matches!(self.derived, Derived::None)).then(|| self.columns.len() - 1)
    }
}

/// Table label holding the model identity the table belongs to: the first 32 hex digits of the
/// SHA-256 of `<project> NUL <model>`. Merlin's table id is not injective (`fraud-team`/`model`
/// and `fraud`/`team-model` both give `prediction_log_fraud_team_model`), so the publisher
/// records whose table it created and refuses to write into a table labelled for another model.
pub const IDENTITY_LABEL: &str = "observation-publisher-identity";
/// Table label with the Merlin project (informational, rewritten to BigQuery's label rules).
pub const PROJECT_LABEL: &str = "merlin_project";
/// Table label with the Merlin model (informational, rewritten to BigQuery's label rules).
pub const MODEL_LABEL: &str = "merlin_model";

/// `text` as a BigQuery label value: lower case, characters other than letters, digits, `_`
/// and `-` replaced by `_`, at most 63 characters.
pub fn label_value(text: &str) -> String {
    text.to_lowercase()
        .chars()
        .map(|c| {
            if c.is_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .take(63)
        .collect()
}

/// The labels the publisher puts on a model's table.
pub fn table_labels(project: &str, model: &str) -> Value {
    json!({
        IDENTITY_LABEL: table_identity(project, model),
        PROJECT_LABEL: label_value(project),
        MODEL_LABEL: label_value(model),
    })
}

/// The optional source-position columns (`kafka_columns: true`), appended after the table's
/// own columns.
pub const KAFKA_COLUMNS: [&str; 2] = ["_kafka_partition", "_kafka_offset"];

/// The BigQuery REST `Table` resource for the model's table: reference, schema (all NULLABLE),
/// DAY partitioning on `request_timestamp` with expiration from `ttl_days`, and the labels
/// naming the model it belongs to ([`table_labels`]).
pub fn bigquery_table_resource(
    layout: &TableLayout,
    project: &str,
    model: &str,
    sink: &BigQuerySink,
) -> Value {
    let mut fields: Vec<Value> = layout
        .columns
        .iter()
        .map(|c| json!({"name": c.name, "type": c.ty.bigquery_name(), "mode": "NULLABLE"}))
        .collect();
    if sink.kafka_columns {
        for name in KAFKA_COLUMNS {
            fields.push(json!({"name": name, "type": "INTEGER", "mode": "NULLABLE"}));
        }
    }
    json!({
        "tableReference": {
            "projectId": sink.project,
            "datasetId": sink.dataset,
            "tableId": table_id(project, model),
        },
        "schema": { "fields": fields },
        "timePartitioning": {
            "type": "DAY",
            "field": "request_timestamp",
            "expirationMs": (sink.ttl_days * 86_400_000).to_string(),
        },
        "labels": table_labels(project, model),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_ids_follow_merlin() {
        assert_eq!(
            table_id("project-1", "model.1"),
            "prediction_log_project_1_model_1"
        );
    }

    #[test]
    fn colliding_table_ids_get_different_identities() {
        assert_eq!(
            table_id("fraud-team", "model"),
            table_id("fraud", "team-model")
        );
        assert_eq!(table_id("a.b", "m"), table_id("a-b", "m"));
        assert_ne!(
            table_identity("fraud-team", "model"),
            table_identity("fraud", "team-model")
        );
        assert_ne!(table_identity("a.b", "m"), table_identity("a-b", "m"));
        assert_eq!(table_identity("p", "m").len(), 32);
        assert_eq!(label_value("Città Model/1"), "città_model_1");
        assert_eq!(label_value(&"x".repeat(80)).len(), 63);
    }
}
