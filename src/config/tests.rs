use super::*;

fn parse(yaml: &str, needs: Needs) -> Result<(Config, Vec<String>), Problems> {
    let v: Value = serde_yaml_ng::from_str(yaml).unwrap();
    let v = match v.get("environment") {
        Some(e) => e.clone(),
        None => v,
    };
    Config::from_value(&v, needs)
}

const MERLIN: &str = include_str!("../../config/merlin-binary.yaml");

#[test]
fn merlin_yaml_parses_unchanged() {
    let (c, warnings) = parse(MERLIN, Needs::RUN).unwrap();
    assert_eq!(c.model_version, "3");
    assert_eq!(c.model_id, "credit-model");
    let names: Vec<_> = c
        .inference_schema
        .feature_types
        .iter()
        .map(|(n, _)| n.as_str())
        .collect();
    assert_eq!(
        names,
        ["amount", "merchant_id", "num_txn_24h", "is_foreign"],
        "feature order kept"
    );
    match &c.inference_schema.model_prediction_output {
        ModelOutput::Binary {
            score_threshold, ..
        } => assert_eq!(*score_threshold, 0.5, "null threshold means 0.5"),
        other => panic!("unexpected {other:?}"),
    }
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("prediction_label_column")),
        "unknown Merlin keys are warned about: {warnings:?}"
    );
    let src = c.observation_source.clone().unwrap();
    assert_eq!(
        src.additional_consumer_config[1],
        ("fetch.min.bytes".into(), "1024000".into())
    );
    assert_eq!(c.bigquery().unwrap().ttl_days, 14);
}

#[test]
fn environment_wrapper_and_numeric_version() {
    let y = MERLIN.replace("model_version: \"3\"", "model_version: 3");
    let wrapped = format!(
        "environment:\n{}",
        y.lines().map(|l| format!("  {l}\n")).collect::<String>()
    );
    let (c, _) = parse(&wrapped, Needs::RUN).unwrap();
    assert_eq!(c.model_version, "3");
}

#[test]
fn every_problem_is_reported_at_once() {
    let y = r#"
project: p
model_id: m
inference_schema:
  feature_types:
    session_id: string
    Amount: float64
    amount: float64
    bad: decimal
  model_prediction_output:
    output_class: BinaryClassificationOutput
    prediction_score_column: score
    positive_class_label: a
observation_sinks:
- type: bigquery
  config: {project: x, dataset: y, ttl_days: 1}
observation_source:
  type: KAFKA
  config:
    topic: t
    group_id: g
    additional_consumer_config:
      enable.auto.commit: "true"
batching:
  max_rowz: 10
delivery: sometimes
"#;
    let err = parse(y, Needs::RUN).unwrap_err();
    let text = err.to_string();
    for expected in [
        "model_version: required",
        "feature \"session_id\" is named like fixed column \"session_id\"",
        "feature \"amount\" differs only in case from feature \"Amount\"",
        "inference_schema.feature_types.bad: unknown feature type",
        "negative_class_label: required",
        "sink types are upper case (BIGQUERY)",
        "observation_source.config.bootstrap_servers: required",
        "enable.auto.commit: may not be overridden",
        "batching.max_rowz: unknown key",
        "delivery: unknown delivery mode",
    ] {
        assert!(text.contains(expected), "missing {expected:?} in:\n{text}");
    }
    assert!(err.0.len() >= 10, "{text}");
}

#[test]
fn unsupported_sinks_are_errors_for_run_only() {
    let y = MERLIN.replace(
        "observation_source:",
        "- type: ARIZE\n  config: {api_key: k, space_key: s}\nobservation_source:",
    );
    let err = parse(&y, Needs::RUN).unwrap_err();
    assert!(err.to_string().contains("ARIZE is not supported"), "{err}");
    // `schema` needs only the BIGQUERY sink; ARIZE may stay.
    parse(&y, Needs::SCHEMA).unwrap();
}

#[test]
fn convert_needs_only_the_schema() {
    let y = r#"
project: p
model_id: m
model_version: "1"
inference_schema:
  feature_types: {x: int64}
  model_prediction_output: {output_class: RegressionOutput, prediction_score_column: y}
observation_source: {type: NOT_KAFKA}
"#;
    parse(y, Needs::CONVERT).unwrap();
    assert!(parse(y, Needs::RUN).is_err());
    let err = parse(y, Needs::SCHEMA).unwrap_err();
    assert!(err.to_string().contains("no BIGQUERY sink"), "{err}");
}

#[test]
fn multiclass_labels_must_match_columns() {
    let y = r#"
project: p
model_id: m
model_version: "1"
inference_schema:
  feature_types: {x: int64}
  model_prediction_output:
    output_class: MulticlassClassificationOutput
    prediction_score_columns: [p_a, p_b, p_c]
    class_labels: [a, b]
"#;
    let err = parse(y, Needs::CONVERT).unwrap_err();
    assert!(
        err.to_string()
            .contains("has 2 labels but prediction_score_columns has 3"),
        "{err}"
    );
}

#[test]
fn env_and_set_layering() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.yaml");
    std::fs::write(&path, MERLIN).unwrap();
    let env = vec![
        (
            "OBS_PUBLISHER__BATCHING__MAX_ROWS".to_string(),
            "1234".to_string(),
        ),
        ("OBS_PUBLISHER__MODEL_VERSION".to_string(), "7".to_string()),
        ("UNRELATED".to_string(), "x".to_string()),
    ];
    let sets = vec![
        "model_version=8".to_string(),
        "observation_sinks.0.config.ttl_days=30".to_string(),
    ];
    let v = load_value(Some(&path), env, &sets).unwrap();
    let (c, _) = Config::from_value(&v, Needs::RUN).unwrap();
    assert_eq!(c.batching.max_rows, 1234, "env applies");
    assert_eq!(c.model_version, "8", "flags win over env");
    assert_eq!(c.bigquery().unwrap().ttl_days, 30);
}

#[test]
fn secrets_are_redacted() {
    let y = MERLIN.replace(
        "      fetch.min.bytes: \"1024000\"",
        "      fetch.min.bytes: \"1024000\"\n      sasl.password: hunter2",
    ) + "";
    let (c, _) = parse(&y, Needs::RUN).unwrap();
    let out = c.to_redacted_yaml();
    assert!(!out.contains("hunter2"), "{out}");
    assert!(out.contains("sasl.password: <redacted>"), "{out}");
    // Every consumer value is a secret unless its key is a known non-secret one.
    let y = y.replace(
        "      fetch.min.bytes: \"1024000\"",
        "      fetch.min.bytes: \"1024000\"\n      sasl.oauthbearer.config: principal=p1",
    );
    let (c, _) = parse(&y, Needs::RUN).unwrap();
    let out = c.to_redacted_yaml();
    assert!(out.contains("sasl.oauthbearer.config: <redacted>"), "{out}");
    assert!(out.contains("fetch.min.bytes: '1024000'"), "{out}");
    assert_eq!(c.scrubber().scrub("a principal=p1 b"), "a <redacted> b");
}

#[test]
fn bigquery_options_are_known_and_validated() {
    let (c, warnings) = parse(MERLIN, Needs::RUN).unwrap();
    let b = c.bigquery().unwrap();
    assert_eq!(b.max_request_bytes, DEFAULT_MAX_REQUEST_BYTES);
    assert_eq!(b.storage_endpoint, DEFAULT_STORAGE_ENDPOINT);
    assert_eq!(b.auth, BigQueryAuth::Adc);
    assert!(
        !warnings.iter().any(|w| w.contains("storage_endpoint")),
        "{warnings:?}"
    );

    let y = MERLIN.replace(
        "ttl_days: 14",
        "ttl_days: 14\n    storage_endpoint: http://127.0.0.1:19060\n    rest_base_url: http://127.0.0.1:19050/bigquery/v2/\n    auth: none\n    max_request_bytes: 4MiB\n    max_inflight_bytes: 16MiB\n    clustering: [merchant_id]\n    emulator_compat: true",
    );
    let (c, warnings) = parse(&y, Needs::RUN).unwrap();
    let b = c.bigquery().unwrap();
    assert_eq!(
        b.rest_base_url, "http://127.0.0.1:19050/bigquery/v2",
        "trailing slash dropped"
    );
    assert_eq!(b.auth, BigQueryAuth::None);
    assert_eq!(
        (b.max_request_bytes, b.max_inflight_bytes),
        (4 << 20, 16 << 20)
    );
    assert_eq!(b.clustering, ["merchant_id"]);
    assert!(b.emulator_compat);
    assert!(
        !warnings.iter().any(|w| w.contains("emulator_compat")),
        "{warnings:?}"
    );

    let y = MERLIN.replace(
        "ttl_days: 14",
        "ttl_days: 14\n    storage_endpoint: grpc.example\n    auth: oauth\n    max_request_bytes: 11MiB\n    max_inflight_bytes: 1MiB\n    clustering: [amount, nope, a, b, c]",
    );
    let text = parse(&y, Needs::RUN).unwrap_err().to_string();
    for expected in [
        "storage_endpoint: expected an http:// or https:// URL",
        "auth: unknown auth mode \"oauth\"",
        "max_request_bytes: 11534336 exceeds BigQuery's AppendRows cap",
        "max_inflight_bytes: must be at least max_request_bytes",
        "at most 4 clustering columns",
        "\"amount\" is a FLOAT column",
        "\"nope\" is not a column of the table",
    ] {
        assert!(text.contains(expected), "missing {expected:?} in:\n{text}");
    }
}

#[test]
fn per_log_and_frame_limits_have_defaults_and_bounds() {
    let c = parse(MERLIN, Needs::RUN).unwrap().0;
    assert_eq!(c.batching.max_log_bytes, 256 << 20);
    assert_eq!(c.batching.max_frame_bytes, 64 << 20);
    let y = format!("{MERLIN}\nbatching: {{max_log_bytes: 32MiB, max_frame_bytes: 2MiB}}\n");
    let c = parse(&y, Needs::RUN).unwrap().0;
    assert_eq!(
        (c.batching.max_log_bytes, c.batching.max_frame_bytes),
        (32 << 20, 2 << 20)
    );
    let y = format!(
        "{MERLIN}\nbatching: {{max_log_bytes: 2GiB, max_frame_bytes: 10, max_bytes: 2GiB, max_inflight_bytes: 4GiB}}\n"
    );
    let text = parse(&y, Needs::RUN).unwrap_err().to_string();
    for expected in [
        "batching.max_log_bytes: must be between 1KiB and 1GiB",
        "batching.max_frame_bytes: must be at least 1KiB",
        "batching.max_bytes: must be at most 1GiB",
    ] {
        assert!(text.contains(expected), "missing {expected:?} in:\n{text}");
    }
}

#[test]
fn server_limits_have_defaults_and_are_validated() {
    let c = parse(MERLIN, Needs::RUN).unwrap().0;
    assert_eq!(
        c.server.header_read_timeout,
        std::time::Duration::from_secs(10)
    );
    assert_eq!(c.server.idle_timeout, std::time::Duration::from_secs(60));
    assert_eq!(c.server.max_connections, 64);
    let y = format!(
        "{MERLIN}\nserver: {{header_read_timeout: 0s, idle_timeout: 0s, max_connections: 0}}\n"
    );
    let text = parse(&y, Needs::RUN).unwrap_err().to_string();
    for expected in [
        "server.header_read_timeout: must be greater than 0",
        "server.idle_timeout: must be greater than 0",
        "server.max_connections: must be at least 1",
    ] {
        assert!(text.contains(expected), "missing {expected:?} in:\n{text}");
    }
}
