//! Names the config carries into BigQuery, Kafka and Kubernetes: accepted where every command
//! can use them, refused with the rule where the destination would refuse them.

use super::*;

/// A Merlin-shaped config with `features` (YAML under `feature_types`, 4-space indented) and
/// the given project, model, topic, group and dataset.
pub(super) fn named(
    project: &str,
    model: &str,
    features: &str,
    topic: &str,
    group: &str,
    dataset: &str,
) -> String {
    format!(
        r#"
project: "{project}"
model_id: "{model}"
model_version: "1"
inference_schema:
  feature_types:
    {features}
  model_prediction_output: {{output_class: RegressionOutput, prediction_score_column: score}}
observation_source:
  type: KAFKA
  config: {{topic: "{topic}", group_id: "{group}", bootstrap_servers: "k:9092"}}
observation_sinks:
- type: BIGQUERY
  config: {{project: gcp-project, dataset: "{dataset}", ttl_days: 14}}
"#
    )
}

#[test]
fn flexible_column_names_are_accepted_by_every_command() {
    let y = named(
        "sample",
        "credit-model",
        "città: string\n    naïve café: float64\n    1st-score%: int64\n    价格: float64",
        "t",
        "g",
        "mlobs",
    );
    for needs in [Needs::CONVERT, Needs::SCHEMA, Needs::RUN] {
        let (c, _) = parse(&y, needs).unwrap_or_else(|p| panic!("{p}"));
        assert_eq!(c.inference_schema.feature_types[0].0, "città");
    }
}

#[test]
fn column_names_bigquery_refuses_exit_2_with_the_rule() {
    let y = named(
        "sample",
        "m",
        "a.b: string\n    _PARTITIONTIME: int64\n    __root__x: int64\n    f(x): float64\n    \"ok\": string",
        "t",
        "g",
        "mlobs",
    );
    let text = parse(&y, Needs::CONVERT).unwrap_err().to_string();
    for expected in [
        "inference_schema.feature_types.a.b: '.' (U+002E) is not allowed in a BigQuery column name",
        "inference_schema.feature_types._PARTITIONTIME: BigQuery reserves column names starting with _PARTITION",
        "inference_schema.feature_types.__root__x: BigQuery reserves column names starting with __ROOT__",
        "inference_schema.feature_types.f(x): '(' (U+0028) is not allowed",
    ] {
        assert!(text.contains(expected), "missing {expected:?} in:\n{text}");
    }
    assert!(!text.contains("feature_types.ok"), "{text}");
}

#[test]
fn unicode_names_differing_only_in_case_are_duplicates() {
    let y = named("p", "m", "CITTÀ: string\n    città: string", "t", "g", "d");
    let text = parse(&y, Needs::CONVERT).unwrap_err().to_string();
    assert!(
        text.contains("feature \"città\" differs only in case from feature \"CITTÀ\""),
        "{text}"
    );
}

#[test]
fn table_dataset_topic_and_group_are_checked_where_they_are_used() {
    let y = named(
        "sam/ple",
        "credit model",
        "x: int64",
        "bad topic/..",
        "",
        "ml-obs",
    );
    let text = parse(&y, Needs::RUN).unwrap_err().to_string();
    for expected in [
        "project, model_id: they make the BigQuery table id \"prediction_log_sam/ple_credit model\": '/' (U+002F) is not allowed in a BigQuery table id",
        "observation_sinks[0].config.dataset: \"ml-obs\": '-' (U+002D) is not allowed in a BigQuery dataset id",
        "observation_source.config.topic: \"bad topic/..\": ' ' (U+0020) is not allowed in a Kafka topic name",
        "observation_source.config.group_id: a Kafka consumer group id must not be empty",
    ] {
        assert!(text.contains(expected), "missing {expected:?} in:\n{text}");
    }
    // `schema` checks the table id and dataset, not the Kafka names.
    let text = parse(&y, Needs::SCHEMA).unwrap_err().to_string();
    assert!(text.contains("BigQuery table id"), "{text}");
    assert!(!text.contains("topic"), "{text}");
    // `convert` touches neither BigQuery nor Kafka.
    parse(&y, Needs::CONVERT).unwrap();

    // Spaces and Unicode letters are fine in a table id; any group id is fine in Kafka.
    let y = named(
        "città",
        "credit model",
        "x: int64",
        "ok.topic_1-a",
        "any group/ü",
        "mlobs",
    );
    parse(&y, Needs::RUN).unwrap_or_else(|p| panic!("{p}"));
    for topic in [".", "..", &"t".repeat(250)] {
        let y = named("p", "m", "x: int64", topic, "g", "d");
        let text = parse(&y, Needs::RUN).unwrap_err().to_string();
        assert!(text.contains("observation_source.config.topic"), "{text}");
    }
}

#[test]
fn a_dead_letter_topic_is_checked_too() {
    let y = named("p", "m", "x: int64", "t", "g", "d")
        + "dead_letter: {target: kafka, topic: \"dl q\"}\n";
    let text = parse(&y, Needs::RUN).unwrap_err().to_string();
    assert!(
        text.contains("dead_letter.topic: dead-letter topic \"dl q\""),
        "{text}"
    );
    let y = named("p", "m", "x: int64", &"t".repeat(249), "g", "d");
    let text = parse(&y, Needs::RUN).unwrap_err().to_string();
    assert!(
        text.contains("-dlq\": a Kafka topic name has at most 249"),
        "{text}"
    );
}
