//! Arbitrary bytes into the decoder: it must never panic, and a rejected log must leave no rows.
#![no_main]

use libfuzzer_sys::fuzz_target;
use observation_publisher::config::{FeatureType, InferenceSchema, ModelOutput};
use observation_publisher::decode::Decoder;
use observation_publisher::table::TableLayout;
use std::sync::Arc;

fuzz_target!(|data: &[u8]| {
    let schema = InferenceSchema {
        feature_types: vec![
            ("a".into(), FeatureType::Int64),
            ("b".into(), FeatureType::Float64),
            ("c".into(), FeatureType::Boolean),
            ("d".into(), FeatureType::String),
        ],
        model_prediction_output: ModelOutput::Ranking { rank_score_column: "s".into(), relevance_score_column: None },
        session_id_column: "session_id".into(),
        row_id_column: "row_id".into(),
        feature_orders: vec![],
    };
    let mut d = Decoder::new(Arc::new(TableLayout::new(&schema, "1")));
    let before = d.rows();
    if d.decode(data).is_err() {
        assert_eq!(d.rows(), before);
    }
    let batch = d.finish();
    assert!(batch.num_rows() <= data.len());
});
