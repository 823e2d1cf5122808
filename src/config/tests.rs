use super::*;

mod feedback;
mod gen;
mod group;
mod logging;
mod names;
mod preflight;
use names::named;

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
        warnings.is_empty(),
        "every key Merlin writes is known (prediction_label_column, tag_columns, …): {warnings:?}"
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
fn maxcompute_sinks_are_accepted_for_run_with_merlins_access_url_as_written() {
    // Merlin's own fixture writes `access_url: url`; the pod's environment replaces it, so the
    // file as written passes; `run` checks the URL where the sink starts.
    for url in ["'http://u/api'", "url"] {
        let y = MERLIN.replace(
            "observation_source:",
            &format!("- type: MAXCOMPUTE\n  config: {{project: p, dataset: d, ttl_days: 0, access_key_id: k, access_key_secret: s, access_url: {url}}}\nobservation_source:"),
        );
        parse(&y, Needs::RUN).unwrap();
        parse(&y, Needs::SCHEMA).unwrap();
    }
    assert!(check_access_url("http://u/api").is_ok());
    let e = check_access_url("url").unwrap_err();
    assert!(e.to_string().contains("access_url \"url\""), "{e}");
}

#[test]
fn merlins_compatibility_keys_are_each_explained() {
    let v: Value = serde_yaml_ng::from_str(MERLIN).unwrap();
    let (c, _) = Config::from_value(&v, Needs::RUN).unwrap();
    let lines = super::merlin_keys(&v, &c);
    let keys: Vec<&str> = lines.iter().map(|l| l.key.as_str()).collect();
    for k in [
        "inference_schema.tag_columns",
        "inference_schema.feature_orders",
        "inference_schema.model_prediction_output.prediction_label_column",
        "inference_schema.model_prediction_output.actual_score_column",
        "inference_schema.model_prediction_output.score_threshold",
        "observation_source.config.batch_size",
        "observation_source.config.additional_consumer_config.auto.offset.reset",
        "observation_sinks[0].config.ttl_days",
    ] {
        assert!(keys.contains(&k), "{k} in {keys:?}");
    }
    let threshold = lines
        .iter()
        .find(|l| l.key.ends_with("score_threshold"))
        .unwrap();
    assert_eq!(threshold.value, "null");
    assert!(threshold.meaning.contains("0.5"), "{threshold:?}");
    // A key that is absent gets no line; a threshold that is set says its value.
    let y = MERLIN
        .replace("  tag_columns: null\n", "")
        .replace("score_threshold: null", "score_threshold: 0.7");
    let v: Value = serde_yaml_ng::from_str(&y).unwrap();
    let (c, _) = Config::from_value(&v, Needs::RUN).unwrap();
    let lines = super::merlin_keys(&v, &c);
    assert!(!lines.iter().any(|l| l.key.ends_with("tag_columns")));
    let threshold = lines
        .iter()
        .find(|l| l.key.ends_with("score_threshold"))
        .unwrap();
    assert!(threshold.meaning.contains("≥ 0.7"), "{threshold:?}");
    let text = super::as_comments(&lines);
    assert!(text.lines().all(|l| l.starts_with('#')), "{text}");
}

#[test]
fn arize_sinks_are_accepted_with_production_defaults() {
    let y = MERLIN.replace(
        "observation_source:",
        "- type: ARIZE\n  config: {api_key: k, space_key: s}\nobservation_source:",
    );
    let (c, _) = parse(&y, Needs::RUN).unwrap();
    let SinkConfig::Arize(a) = &c.observation_sinks[1] else {
        panic!("{:?}", c.observation_sinks)
    };
    assert_eq!((a.api_key.as_str(), a.space_key.as_str()), ("k", "s"));
    assert_eq!(a.uri, DEFAULT_ARIZE_URI);
    assert_eq!(a.request_timeout, DEFAULT_ARIZE_REQUEST_TIMEOUT);
    assert_eq!(a.connect_timeout, DEFAULT_ARIZE_CONNECT_TIMEOUT);
    assert_eq!(a.max_request_bytes, DEFAULT_ARIZE_MAX_REQUEST_BYTES);
    // Ours, set; and the keys never reach the printed configuration.
    let y = MERLIN.replace(
        "observation_source:",
        "- type: ARIZE\n  config: {api_key: ak-123456, space_key: sk-123456, uri: 'http://127.0.0.1:9/v1/', request_timeout: 5s, connect_timeout: 1s, max_request_bytes: 1MiB}\nobservation_source:",
    );
    let (c, _) = parse(&y, Needs::RUN).unwrap();
    let SinkConfig::Arize(a) = &c.observation_sinks[1] else {
        unreachable!()
    };
    assert_eq!(a.uri, "http://127.0.0.1:9/v1");
    assert_eq!(a.request_timeout, std::time::Duration::from_secs(5));
    assert_eq!(a.max_request_bytes, 1 << 20);
    let printed = c.to_redacted_yaml();
    assert!(
        !printed.contains("ak-123456") && !printed.contains("sk-123456"),
        "{printed}"
    );
    assert!(printed.contains("uri: http://127.0.0.1:9/v1"), "{printed}");
    // Bad values of ours.
    let y = MERLIN.replace(
        "observation_source:",
        "- type: ARIZE\n  config: {api_key: k, space_key: s, uri: 'api.arize.com', request_timeout: 0s, max_request_bytes: 1KiB}\nobservation_source:",
    );
    let text = parse(&y, Needs::RUN).unwrap_err().to_string();
    for expected in [
        "observation_sinks[1].config.uri: expected an http:// or https:// URL",
        "observation_sinks[1].config.request_timeout: must be from 1ms to 1h",
        "observation_sinks[1].config.max_request_bytes: must be from 64KiB to 1GiB",
    ] {
        assert!(text.contains(expected), "missing {expected:?} in:\n{text}");
    }
    // The space by its ID (Arize's current SDK), or by neither: a problem naming space_id.
    let arize = |keys: &str| {
        MERLIN.replace(
            "observation_source:",
            &format!("- type: ARIZE\n  config: {{api_key: k{keys}}}\nobservation_source:"),
        )
    };
    let (c, _) = parse(&arize(", space_id: U3BhY2U6MTIz"), Needs::RUN).unwrap();
    let SinkConfig::Arize(a) = &c.observation_sinks[1] else {
        unreachable!()
    };
    assert_eq!(
        (a.space_id.as_str(), a.space_key.as_str()),
        ("U3BhY2U6MTIz", "")
    );
    let text = parse(&arize(""), Needs::RUN).unwrap_err().to_string();
    assert!(
        text.contains("observation_sinks[1].config.space_id: required: the Arize space's ID"),
        "{text}"
    );
}

#[test]
fn arize_with_a_multiclass_model_is_a_config_problem() {
    let y = r#"
project: p
model_id: m
model_version: "1"
inference_schema:
  feature_types: {x: int64}
  model_prediction_output:
    output_class: MulticlassClassificationOutput
    prediction_score_columns: [p_a, p_b]
    class_labels: [a, b]
observation_sinks:
- type: ARIZE
  config: {api_key: k, space_key: s}
observation_source:
  type: KAFKA
  config: {topic: t, bootstrap_servers: b, group_id: g}
"#;
    let err = parse(y, Needs::RUN).unwrap_err();
    assert_eq!(err.0.len(), 1, "{err}");
    assert!(
        err.0[0].starts_with(
            "observation_sinks[0].type: MulticlassClassificationOutput cannot be sent to Arize"
        ),
        "{err}"
    );
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
    assert_eq!(b.connections, crate::config::DEFAULT_CONNECTIONS);
    assert!(
        !warnings.iter().any(|w| w.contains("storage_endpoint")),
        "{warnings:?}"
    );

    let y = MERLIN.replace(
        "ttl_days: 14",
        "ttl_days: 14\n    storage_endpoint: http://127.0.0.1:19060\n    rest_base_url: http://127.0.0.1:19050/bigquery/v2/\n    auth: none\n    max_request_bytes: 4MiB\n    max_inflight_bytes: 16MiB\n    clustering: [merchant_id]\n    emulator_compat: true\n    connections: 2",
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
    assert_eq!(b.connections, 2);
    assert!(
        !warnings.iter().any(|w| w.contains("emulator_compat")),
        "{warnings:?}"
    );

    let y = MERLIN.replace(
        "ttl_days: 14",
        "ttl_days: 14\n    storage_endpoint: grpc.example\n    auth: oauth\n    max_request_bytes: 11MiB\n    max_inflight_bytes: 1MiB\n    clustering: [amount, nope, a, b, c]\n    connections: 0",
    );
    let text = parse(&y, Needs::RUN).unwrap_err().to_string();
    for expected in [
        "storage_endpoint: expected an http:// or https:// URL",
        "auth: unknown auth mode \"oauth\"",
        "max_request_bytes: must be from 64KiB to 10000000B, found 11MiB",
        "max_inflight_bytes: must be at least max_request_bytes",
        "at most 4 clustering columns",
        "\"amount\" is a FLOAT column",
        "\"nope\" is not a column of the table",
        "connections: must be from 1 to 16, found 0",
    ] {
        assert!(text.contains(expected), "missing {expected:?} in:\n{text}");
    }
}

#[test]
fn per_log_and_frame_limits_have_defaults_and_bounds() {
    let c = parse(MERLIN, Needs::RUN).unwrap().0;
    assert_eq!(c.batching.max_log_bytes, 16 * 1_048_588);
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
        "batching.max_log_bytes: must be from 1KiB to 1GiB, found 2GiB",
        "batching.max_frame_bytes: must be from 1KiB to 4GiB, found 10B",
        "batching.max_bytes: must be from 1KiB to 1GiB, found 2GiB",
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
    assert_eq!(c.server.max_connections_per_peer, 16);
    let y = format!(
        "{MERLIN}\nserver: {{header_read_timeout: 0s, idle_timeout: 0s, max_connections: 0}}\n"
    );
    let text = parse(&y, Needs::RUN).unwrap_err().to_string();
    for expected in [
        "server.header_read_timeout: must be from 1ms to 1h, found 0s",
        "server.idle_timeout: must be from 1ms to 1h, found 0s",
        "server.max_connections: must be from 1 to 65536, found 0",
    ] {
        assert!(text.contains(expected), "missing {expected:?} in:\n{text}");
    }
}

#[test]
fn the_dead_letter_message_limit_has_a_default_and_bounds() {
    let base = named("p", "m", "x: int64", "t", "g", "d");
    let (cfg, _) = parse(&base, Needs::RUN).unwrap();
    assert_eq!(
        cfg.dead_letter,
        DeadLetter::Kafka {
            topic: None,
            max_message_bytes: 1 << 20
        }
    );
    let y = base.clone() + "dead_letter: {target: kafka, max_message_bytes: 8MiB}\n";
    let (cfg, _) = parse(&y, Needs::RUN).unwrap();
    assert_eq!(
        cfg.dead_letter,
        DeadLetter::Kafka {
            topic: None,
            max_message_bytes: 8 << 20
        }
    );
    for (extra, want) in [
        (
            "dead_letter: {target: kafka, max_message_bytes: 1KiB}\n",
            "dead_letter.max_message_bytes: must be from 16KiB to 512MiB, found 1KiB",
        ),
        (
            "dead_letter: {target: kafka, max_message_bytes: 1GiB}\n",
            "dead_letter.max_message_bytes: must be from 16KiB to 512MiB, found 1GiB",
        ),
        (
            "dead_letter: {target: file, path: /tmp/x, max_message_bytes: 1MiB}\n",
            "dead_letter.max_message_bytes: only valid with target: kafka",
        ),
    ] {
        let text = parse(&(base.clone() + extra), Needs::RUN)
            .unwrap_err()
            .to_string();
        assert!(text.contains(want), "{extra}: {text}");
    }
}

/// Every duration and size key of our sections and of a BIGQUERY sink, set far out of range, is
/// refused naming the key and its range (`batching.linger=18446744073709551615s`
/// passed validation and panicked at run time).
#[test]
fn every_duration_and_size_is_bounded() {
    let base = named("p", "m", "x: int64", "t", "g", "d");
    let huge = "18446744073709551615s";
    for (section, key, value, want) in [
        ("batching", "linger", huge, "must be from 1ms to 1h"),
        ("batching", "linger", "0s", "must be from 1ms to 1h"),
        ("batching", "max_rows", "0", "must be from 1 to 4294967295"),
        (
            "batching",
            "max_inflight_bytes",
            "100GiB",
            "must be from 1KiB to 64GiB",
        ),
        (
            "batching",
            "max_frame_bytes",
            "8GiB",
            "must be from 1KiB to 4GiB",
        ),
        (
            "local_sink",
            "rotate_bytes",
            "10",
            "must be from 1KiB to 1024GiB",
        ),
        (
            "local_sink",
            "rotate_interval",
            huge,
            "must be from 1s to 1day",
        ),
        (
            "server",
            "header_read_timeout",
            huge,
            "must be from 1ms to 1h",
        ),
        ("server", "idle_timeout", "2h", "must be from 1ms to 1h"),
        ("consumer", "drain_timeout", huge, "must be from 0s to 1h"),
        (
            "consumer",
            "commit_interval",
            "0s",
            "must be from 1ms to 1h",
        ),
        (
            "consumer",
            "session_timeout",
            "2h",
            "must be from 1ms to 1h",
        ),
    ] {
        let extra = if section == "local_sink" {
            format!("{section}: {{path: /tmp/x, {key}: {value}}}\n")
        } else {
            format!("{section}: {{{key}: {value}}}\n")
        };
        let text = parse(&(base.clone() + &extra), Needs::RUN)
            .unwrap_err()
            .to_string();
        let want = format!("{section}.{key}: {want}");
        assert!(text.contains(&want), "{extra}: missing {want:?} in {text}");
    }
}

#[test]
fn arize_timeouts_and_request_size_are_bounded() {
    for (key, value, want) in [
        (
            "request_timeout",
            "18446744073709551615s",
            "must be from 1ms to 1h",
        ),
        ("connect_timeout", "0s", "must be from 1ms to 1h"),
        ("max_request_bytes", "1KiB", "must be from 64KiB to 1GiB"),
    ] {
        let y = MERLIN.replace(
            "observation_source:",
            &format!(
                "- type: ARIZE\n  config: {{api_key: k, space_key: s, {key}: {value}}}\nobservation_source:"
            ),
        );
        let text = parse(&y, Needs::RUN).unwrap_err().to_string();
        let want = format!("observation_sinks[1].config.{key}: {want}");
        assert!(text.contains(&want), "missing {want:?} in {text}");
    }
}

/// A batch below `max_bytes` plus one log of `max_log_bytes` must fit Arrow's i32 offsets, so
/// no accepted log can be refused `too_large` because of the batch it lands in.
#[test]
fn max_bytes_plus_max_log_bytes_stays_under_the_arrow_offset_limit() {
    let base = named("p", "m", "x: int64", "t", "g", "d");
    let y = base.clone()
        + "batching: {max_bytes: 1GiB, max_log_bytes: 1GiB, max_inflight_bytes: 2GiB}\n";
    let text = parse(&y, Needs::RUN).unwrap_err().to_string();
    assert!(
        text.contains("batching.max_bytes: batching.max_bytes + batching.max_log_bytes must be at most 2147483647 bytes"),
        "{text}"
    );
    let y =
        base + "batching: {max_bytes: 1GiB, max_log_bytes: 1023MiB, max_inflight_bytes: 2GiB}\n";
    let c = parse(&y, Needs::RUN).unwrap().0;
    assert!(
        (c.batching.max_bytes + c.batching.max_log_bytes) as u64
            <= crate::config::ARROW_STRING_LIMIT
    );
}

#[test]
fn maxcompute_sink_reads_merlins_keys_and_ours_and_never_prints_the_keys() {
    let y = MERLIN.replace(
        "observation_source:",
        "- type: MAXCOMPUTE\n  config: {project: p, dataset: d, ttl_days: 3, access_key_id: LTAIkeyid1234, access_key_secret: sekrit-value-99, access_url: 'http://odps.example/api/', retry: {enabled: true, retry_attempts: 2, retry_interval_seconds: 5}, tunnel_endpoint: 'http://dt.example', interval: 5m, request_timeout: 20s, connect_timeout: 2s}\nobservation_source:",
    );
    let (c, warnings) = parse(&y, Needs::SCHEMA).unwrap();
    let m = c
        .observation_sinks
        .iter()
        .find_map(|s| match s {
            SinkConfig::MaxCompute(m) => Some(m.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!(m.access_url, "http://odps.example/api");
    assert_eq!(m.tunnel_endpoint.as_deref(), Some("http://dt.example"));
    assert_eq!(m.interval, std::time::Duration::from_secs(300));
    assert_eq!(
        m.move_timeout,
        std::time::Duration::from_secs(900),
        "three intervals when that is over 10 minutes"
    );
    assert_eq!(m.request_timeout, std::time::Duration::from_secs(20));
    assert_eq!(m.connect_timeout, std::time::Duration::from_secs(2));
    assert_eq!(
        (
            m.retry.enabled,
            m.retry.retry_attempts,
            m.retry.retry_interval_seconds
        ),
        (true, 2, 5)
    );
    assert!(warnings.is_empty(), "{warnings:?}");
    for printed in [format!("{m:?}"), format!("{c:?}"), c.to_redacted_yaml()] {
        assert!(!printed.contains("sekrit-value-99"), "{printed}");
        assert!(!printed.contains("LTAIkeyid1234"), "{printed}");
    }
    // Defaults, and bounds.
    let d = MERLIN.replace(
        "observation_source:",
        "- type: MAXCOMPUTE\n  config: {project: p, dataset: d, access_key_id: k, access_key_secret: s, access_url: 'https://odps.example/api'}\nobservation_source:",
    );
    let (c, _) = parse(&d, Needs::SCHEMA).unwrap();
    let Some(SinkConfig::MaxCompute(m)) = c.observation_sinks.last() else {
        panic!("no MAXCOMPUTE sink")
    };
    assert_eq!(m.interval, merlin::DEFAULT_MAXCOMPUTE_INTERVAL);
    assert_eq!(
        m.move_timeout,
        std::time::Duration::from_secs(600),
        "at least 10 minutes"
    );
    assert_eq!(m.tunnel_endpoint, None);
    let set = d.replace("access_url:", "move_timeout: 10s, access_url:");
    let Some(SinkConfig::MaxCompute(m)) = parse(&set, Needs::SCHEMA)
        .unwrap()
        .0
        .observation_sinks
        .pop()
    else {
        panic!("no MAXCOMPUTE sink")
    };
    assert_eq!(m.move_timeout, std::time::Duration::from_secs(10));
    let bad = MERLIN.replace(
        "observation_source:",
        "- type: MAXCOMPUTE\n  config: {project: p, dataset: d, access_key_id: k, access_key_secret: s, access_url: 'odps.example', interval: 10ms, request_timeout: 0s, move_timeout: 9s}\nobservation_source:",
    );
    let err = parse(&bad, Needs::SCHEMA).unwrap_err().to_string();
    for key in ["interval", "request_timeout", "move_timeout"] {
        assert!(err.contains(&format!("config.{key}")), "{key}: {err}");
    }
    // Merlin's own test config has `access_url: url`: kept as written (checked at `run`).
    assert!(!err.contains("config.access_url"), "{err}");
}

#[test]
fn maxcompute_keys_are_both_or_neither_and_sts_endpoint_is_a_url() {
    let mc = |keys: &str| {
        let y = MERLIN.replace("observation_source:", &format!("- type: MAXCOMPUTE\n  config: {{project: p, dataset: d, access_url: 'https://o.example/api'{keys}}}\nobservation_source:"));
        parse(&y, Needs::SCHEMA).map(|(c, _)| match c.observation_sinks.last() {
            Some(SinkConfig::MaxCompute(m)) => m.clone(),
            _ => panic!("no MAXCOMPUTE sink"),
        })
    };
    let m = mc("").expect("keyless: the default chain");
    assert!(m.access_key_id.is_none() && m.access_key_secret.is_none() && m.sts_endpoint.is_none());
    let m = mc(", access_key_id: '', access_key_secret: '', sts_endpoint: 'http://sts.vpc:80/'")
        .expect("empty keys count as absent");
    assert_eq!(m.access_key_id, None);
    assert_eq!(m.sts_endpoint.as_deref(), Some("http://sts.vpc:80"));
    let other = "required when the other";
    for (keys, says) in [
        (
            ", access_key_id: k",
            format!("config.access_key_secret: {other}"),
        ),
        (
            ", access_key_secret: s",
            format!("config.access_key_id: {other}"),
        ),
        (
            ", sts_endpoint: x",
            "config.sts_endpoint: expected an".into(),
        ),
    ] {
        let err = mc(keys).unwrap_err().to_string();
        assert!(err.contains(&says), "{err}");
    }
}

#[test]
fn a_batch_is_at_most_an_eighth_of_the_inflight_budget() {
    let d = Batching::default();
    assert_eq!(
        d.batch_bytes(),
        2 << 20,
        "the defaults agree (16 MiB / 8 = 2 MiB)"
    );
    let small = Batching {
        max_inflight_bytes: 16 << 20,
        ..Batching::default()
    };
    assert_eq!(small.batch_bytes(), 2 << 20);
    let large = Batching {
        max_inflight_bytes: 1 << 30,
        max_bytes: 4 << 20,
        ..Batching::default()
    };
    assert_eq!(large.batch_bytes(), 4 << 20, "max_bytes when it is smaller");
    let tiny = Batching {
        max_inflight_bytes: 3,
        ..Batching::default()
    };
    assert_eq!(tiny.batch_bytes(), 1);
}

#[test]
fn exactly_once_refuses_a_second_bigquery_sink_and_says_what_to_do() {
    let second = "- type: BIGQUERY\n  config: {project: p2, dataset: other, ttl_days: 7}\nobservation_source:";
    let two = MERLIN.replace("observation_source:", second);
    let err = parse(&format!("{two}delivery: exactly_once\n"), Needs::RUN).unwrap_err();
    let text = err.to_string();
    for expected in [
        "delivery: exactly_once allows one BIGQUERY sink per publisher, found 2 (observation_sinks[0], observation_sinks[1])",
        "resume from one checkpoint",
        "a second publisher with its own group_id",
    ] {
        assert!(text.contains(expected), "missing {expected:?} in:\n{text}");
    }
    // At least once, each sink commits nothing of its own: two tables are fine.
    parse(&format!("{two}delivery: at_least_once\n"), Needs::RUN).unwrap();
    // One exactly-once BigQuery sink beside another kind of sink is fine.
    let mc = "- type: MAXCOMPUTE\n  config: {project: p, dataset: d, ttl_days: 0, access_key_id: k, access_key_secret: s, access_url: url}\nobservation_source:";
    let mixed = MERLIN.replace("observation_source:", mc);
    parse(&format!("{mixed}delivery: exactly_once\n"), Needs::RUN).unwrap();
}
