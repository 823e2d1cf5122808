//! What the Arize sink sends, decided once from the configuration: the `public.Schema`
//! protobuf (model constants and column roles) and the columns of the Arrow body, in the order
//! arize 7.10.2 sends them for Merlin's DataFrame. Pure: no I/O.
//!
//! Merlin's DataFrame holds, in order: the features, the score column, the session id, the row
//! id, `request_timestamp`, `model_version`, the derived column (`_prediction_label` or `_rank`)
//! and `_prediction_id`; the SDK keeps only the columns its schema names, in DataFrame order
//! (`_remove_extraneous_columns`). So the body is: features, score, session id (ranking only:
//! the group id), `request_timestamp`, `_prediction_label` (binary) or `_rank` (ranking),
//! `_prediction_id`.

use crate::config::{
    ColumnType, Config, InferenceSchema, ModelOutput, PREDICTION_LABEL_COLUMN, RANK_COLUMN,
};
use crate::table::FIRST_FEATURE;

/// The prost types of `proto/arize/schema.proto` (Arize's `public.Schema`, the fields we send).
#[allow(missing_docs, clippy::all, unreachable_pub)]
pub mod pb {
    include!(concat!(env!("OUT_DIR"), "/arize.public.rs"));
}

/// Name of the prediction id column the sink adds (`<session id>_<row id>`), as Merlin does.
pub const PREDICTION_ID_COLUMN: &str = "_prediction_id";
/// The timestamp column.
pub const TIMESTAMP_COLUMN: &str = "request_timestamp";

/// Arize's model type for the configured output class (the SDK's mapping of Merlin's choice).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArizeModelType {
    /// Merlin's BinaryClassificationOutput → `BINARY_CLASSIFICATION` → `SCORE_CATEGORICAL`.
    ScoreCategorical,
    /// Merlin's RegressionOutput → `REGRESSION` → `NUMERIC`.
    Numeric,
    /// Merlin's RankingOutput → `RANKING`.
    Ranking,
}

/// Where a body column comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// A column of the batch (index into the table layout), sent as is.
    Batch(usize),
    /// The batch's `request_timestamp` (microseconds, UTC), sent as `timestamp[ns]` without a
    /// time zone.
    Timestamp,
    /// `<session id>_<row id>`.
    PredictionId,
}

/// One column of the Arrow body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BodyColumn {
    /// Name in the body.
    pub name: String,
    /// Where its values come from.
    pub source: Source,
}

/// Everything the sink sends that depends only on the configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// The model type.
    pub model_type: ArizeModelType,
    /// The body's columns, in order.
    pub columns: Vec<BodyColumn>,
    /// Batch column of the session id (the ranking group id).
    pub session_col: usize,
    /// Batch column of the row id.
    pub row_id_col: usize,
    /// Batch column of the score.
    pub score_col: usize,
    /// Batch column of the derived column (`_prediction_label` or `_rank`), if any.
    pub derived_col: Option<usize>,
    /// The serialized `public.Schema`.
    pub schema: pb::Schema,
}

/// Why the configuration cannot be sent to Arize.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Unsupported(pub String);

/// Arize's model type for an output class; `Err` for multiclass (Merlin has no mapping).
pub fn model_type(out: &ModelOutput) -> Result<ArizeModelType, Unsupported> {
    match out {
        ModelOutput::Binary { .. } => Ok(ArizeModelType::ScoreCategorical),
        ModelOutput::Regression { .. } => Ok(ArizeModelType::Numeric),
        ModelOutput::Ranking { .. } => Ok(ArizeModelType::Ranking),
        ModelOutput::Multiclass { .. } => Err(Unsupported(
            out.arize_unsupported().unwrap_or_default().into(),
        )),
    }
}

impl Plan {
    /// The plan for a validated configuration.
    pub fn new(cfg: &Config) -> Result<Self, Unsupported> {
        Self::for_schema(
            &cfg.inference_schema,
            &format!("{}-{}", cfg.project, cfg.model_id),
            &cfg.model_version,
        )
    }

    /// The plan for `schema`, Arize model id `model_id` (Merlin: `<project>-<model_id>`).
    pub fn for_schema(
        schema: &InferenceSchema,
        model_id: &str,
        model_version: &str,
    ) -> Result<Self, Unsupported> {
        use pb::schema::{ArrowSchema, Constants, Environment, ModelType};
        let out = &schema.model_prediction_output;
        let model_type = model_type(out)?;
        let columns = schema.columns();
        let n_features = schema.feature_types.len();
        let score_col = FIRST_FEATURE + n_features;
        let score_name = columns[score_col].name.clone();
        let derived_col = (columns.len() > score_col + 1).then_some(score_col + 1);
        debug_assert!(derived_col.is_none_or(|d| matches!(
            columns[d].name.as_str(),
            PREDICTION_LABEL_COLUMN | RANK_COLUMN
        )));
        debug_assert_eq!(columns[2].ty, ColumnType::Timestamp);

        let mut body: Vec<BodyColumn> = (FIRST_FEATURE..score_col)
            .map(|i| BodyColumn {
                name: columns[i].name.clone(),
                source: Source::Batch(i),
            })
            .collect();
        body.push(BodyColumn {
            name: score_name.clone(),
            source: Source::Batch(score_col),
        });
        if model_type == ArizeModelType::Ranking {
            body.push(BodyColumn {
                name: schema.session_id_column.clone(),
                source: Source::Batch(0),
            });
        }
        body.push(BodyColumn {
            name: TIMESTAMP_COLUMN.into(),
            source: Source::Timestamp,
        });
        if let Some(d) = derived_col {
            body.push(BodyColumn {
                name: columns[d].name.clone(),
                source: Source::Batch(d),
            });
        }
        body.push(BodyColumn {
            name: PREDICTION_ID_COLUMN.into(),
            source: Source::PredictionId,
        });

        let mut arrow = ArrowSchema {
            prediction_id_column_name: PREDICTION_ID_COLUMN.into(),
            feature_column_names: schema
                .feature_types
                .iter()
                .map(|(n, _)| n.clone())
                .collect(),
            timestamp_column_name: TIMESTAMP_COLUMN.into(),
            ..Default::default()
        };
        let pb_type = match model_type {
            ArizeModelType::ScoreCategorical => {
                arrow.prediction_label_column_name = PREDICTION_LABEL_COLUMN.into();
                arrow.prediction_score_column_name = score_name;
                ModelType::ScoreCategorical
            }
            ArizeModelType::Numeric => {
                // The SDK sends a numeric model's score as its prediction label (legacy form).
                arrow.prediction_label_column_name = score_name;
                ModelType::Numeric
            }
            ArizeModelType::Ranking => {
                arrow.prediction_score_column_name = score_name;
                arrow.prediction_group_id_column_name = schema.session_id_column.clone();
                arrow.rank_column_name = RANK_COLUMN.into();
                ModelType::Ranking
            }
        };
        let pb_schema = pb::Schema {
            constants: Some(Constants {
                model_id: model_id.into(),
                model_version: model_version.into(),
                batch_id: String::new(),
                environment: Environment::Production as i32,
                model_type: pb_type as i32,
            }),
            arrow_schema: Some(arrow),
        };
        Ok(Plan {
            model_type,
            columns: body,
            session_col: 0,
            row_id_col: 1,
            score_col,
            derived_col,
            schema: pb_schema,
        })
    }

    /// Where the schema travels, as arize 7.10.2's `_post_file` decides: the `schema` header
    /// while its base64 is at most [`MAX_HEADER_SCHEMA`] bytes, else only the Arrow metadata.
    pub fn schema_carrier(&self) -> SchemaCarrier {
        carrier_of(self.schema_base64())
    }

    /// The schema as the `schema` header and the `arize-schema` metadata carry it: base64
    /// (standard alphabet, padded) of the serialized message.
    pub fn schema_base64(&self) -> String {
        use base64::Engine as _;
        use prost::Message as _;
        base64::engine::general_purpose::STANDARD.encode(self.schema.encode_to_vec())
    }
}

/// Longest base64 schema the SDK sends as the `schema` header (`len(base64_schema) <= 63000`
/// in arize 7.10.2's `pandas/logger.py`); a longer one goes in the Arrow metadata only, where
/// HTTP servers' header limits cannot refuse it.
pub const MAX_HEADER_SCHEMA: usize = 63_000;

/// Where a request carries the base64 schema: exactly one of the two places.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SchemaCarrier {
    /// The `schema` header (the body's Arrow schema has no `arize-schema` metadata).
    Header(String),
    /// The body's Arrow schema metadata `arize-schema` (no `schema` header).
    Metadata(String),
}

/// The carrier of a base64 schema by its length (pure).
pub fn carrier_of(base64: String) -> SchemaCarrier {
    if base64.len() <= MAX_HEADER_SCHEMA {
        SchemaCarrier::Header(base64)
    } else {
        SchemaCarrier::Metadata(base64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::FeatureType;

    fn schema(out: ModelOutput) -> InferenceSchema {
        InferenceSchema {
            feature_types: vec![
                ("b".into(), FeatureType::Float64),
                ("a".into(), FeatureType::String),
            ],
            model_prediction_output: out,
            session_id_column: "sid".into(),
            row_id_column: "rid".into(),
            feature_orders: vec![],
        }
    }

    fn names(p: &Plan) -> Vec<&str> {
        p.columns.iter().map(|c| c.name.as_str()).collect()
    }

    #[test]
    fn binary_sends_label_and_score_as_score_categorical() {
        let p = Plan::for_schema(
            &schema(ModelOutput::Binary {
                prediction_score_column: "s".into(),
                actual_score_column: None,
                positive_class_label: "yes".into(),
                negative_class_label: "no".into(),
                score_threshold: 0.5,
            }),
            "proj-model",
            "7",
        )
        .unwrap();
        assert_eq!(
            names(&p),
            [
                "b",
                "a",
                "s",
                "request_timestamp",
                "_prediction_label",
                "_prediction_id"
            ]
        );
        let c = p.schema.constants.as_ref().unwrap();
        assert_eq!(
            (c.model_id.as_str(), c.model_version.as_str()),
            ("proj-model", "7")
        );
        assert_eq!(c.environment, pb::schema::Environment::Production as i32);
        assert_eq!(c.model_type, pb::schema::ModelType::ScoreCategorical as i32);
        let a = p.schema.arrow_schema.as_ref().unwrap();
        assert_eq!(a.prediction_label_column_name, "_prediction_label");
        assert_eq!(a.prediction_score_column_name, "s");
        assert_eq!(a.feature_column_names, ["b", "a"]);
        assert_eq!(a.prediction_id_column_name, "_prediction_id");
        assert_eq!(a.timestamp_column_name, "request_timestamp");
        assert_eq!(p.derived_col, Some(7));
    }

    #[test]
    fn regression_sends_the_score_as_prediction_label() {
        let p = Plan::for_schema(
            &schema(ModelOutput::Regression {
                prediction_score_column: "y".into(),
                actual_score_column: None,
            }),
            "m",
            "1",
        )
        .unwrap();
        assert_eq!(
            names(&p),
            ["b", "a", "y", "request_timestamp", "_prediction_id"]
        );
        let a = p.schema.arrow_schema.as_ref().unwrap();
        assert_eq!(a.prediction_label_column_name, "y");
        assert_eq!(a.prediction_score_column_name, "");
        assert_eq!(
            p.schema.constants.as_ref().unwrap().model_type,
            pb::schema::ModelType::Numeric as i32
        );
        assert_eq!(p.derived_col, None);
    }

    #[test]
    fn ranking_groups_by_session_id() {
        let p = Plan::for_schema(
            &schema(ModelOutput::Ranking {
                rank_score_column: "rs".into(),
                relevance_score_column: None,
            }),
            "m",
            "1",
        )
        .unwrap();
        assert_eq!(
            names(&p),
            [
                "b",
                "a",
                "rs",
                "sid",
                "request_timestamp",
                "_rank",
                "_prediction_id"
            ]
        );
        let a = p.schema.arrow_schema.as_ref().unwrap();
        assert_eq!(a.prediction_group_id_column_name, "sid");
        assert_eq!(a.rank_column_name, "_rank");
        assert_eq!(a.prediction_score_column_name, "rs");
    }

    #[test]
    fn multiclass_is_refused() {
        let e = Plan::for_schema(
            &schema(ModelOutput::Multiclass {
                prediction_score_columns: vec!["p0".into(), "p1".into()],
                class_labels: vec!["a".into(), "b".into()],
            }),
            "m",
            "1",
        )
        .unwrap_err();
        assert!(e.0.contains("MulticlassClassificationOutput"), "{e}");
    }

    #[test]
    fn the_schema_rides_in_the_header_up_to_63000_base64_bytes_then_in_the_metadata() {
        let at = |n: usize| carrier_of("A".repeat(n));
        assert_eq!(at(0), SchemaCarrier::Header(String::new()));
        assert!(matches!(at(MAX_HEADER_SCHEMA), SchemaCarrier::Header(h) if h.len() == 63_000));
        assert!(
            matches!(at(MAX_HEADER_SCHEMA + 1), SchemaCarrier::Metadata(m) if m.len() == 63_001)
        );
    }
}
