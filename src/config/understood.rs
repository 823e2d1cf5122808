//! How the keys Merlin's control plane writes, but that change nothing or something else here,
//! are understood: `check-config` prints one line per key present in the file, with its effect
//! or why it has none. The wording is the documentation (README "Migrating from Merlin's
//! publisher" points here), so each line says what Merlin's publisher did with the key too.

use super::{Config, ModelOutput, SinkConfig, StartFrom};
use serde_yaml_ng::Value;

/// One key of the file and how it is understood.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Understood {
    /// Dotted path (`observation_sinks[0].config.ttl_days`).
    pub key: String,
    /// The value as written (YAML flow style, one line).
    pub value: String,
    /// Its effect, or why it has none.
    pub meaning: String,
}

/// The lines for every compatibility key present in `root` (the tree `cfg` was read from).
pub fn merlin_keys(root: &Value, cfg: &Config) -> Vec<Understood> {
    let mut out = Vec::new();
    let mut add = |key: String, v: Option<&Value>, meaning: String| {
        if let Some(v) = v {
            out.push(Understood {
                key,
                value: flow(v),
                meaning,
            });
        }
    };
    let schema = &root["inference_schema"];
    add(
        "inference_schema.tag_columns".into(),
        schema.get("tag_columns"),
        "no effect: no tag column is written (Merlin's publisher parses and ignores them too)"
            .into(),
    );
    add(
        "inference_schema.feature_orders".into(),
        schema.get("feature_orders"),
        if cfg.inference_schema.feature_orders.is_empty() {
            "empty: feature values are named by each feature table's own `columns`".into()
        } else {
            "names the feature table's values by position; wins over the table's `columns`".into()
        },
    );
    let out_path = "inference_schema.model_prediction_output";
    let output = &schema["model_prediction_output"];
    add(
        format!("{out_path}.prediction_label_column"),
        output.get("prediction_label_column"),
        "no effect: the derived label column is always `_prediction_label`, as in Merlin's table (Merlin's publisher ignores this key too)".into(),
    );
    for key in ["actual_score_column", "relevance_score_column"] {
        add(
            format!("{out_path}.{key}"),
            output.get(key),
            "no effect: prediction logs carry no ground truth, so no such column is written (Merlin's publisher never writes it either)".into(),
        );
    }
    if let ModelOutput::Binary {
        score_threshold, ..
    } = &cfg.inference_schema.model_prediction_output
    {
        let written = output.get("score_threshold");
        let meaning = match written {
            Some(Value::Null) => format!(
                "null means the default, {score_threshold}: `_prediction_label` is the positive label when the score is ≥ {score_threshold} (Merlin's publisher crashes on null)"
            ),
            _ => format!(
                "`_prediction_label` is the positive label when the score is ≥ {score_threshold}"
            ),
        };
        add(format!("{out_path}.score_threshold"), written, meaning);
    }

    let source = &root["observation_source"];
    let sc = &source["config"];
    add(
        "observation_source.config.batch_size".into(),
        sc.get("batch_size"),
        "no effect: Merlin's consume() batch size; this publisher streams messages and closes a batch at batching.max_rows, max_bytes or linger".into(),
    );
    add(
        "observation_source.config.poll_timeout_seconds".into(),
        sc.get("poll_timeout_seconds"),
        "no effect: the publisher polls continuously; batching.linger bounds how long rows wait"
            .into(),
    );
    add(
        "observation_source.buffer_capacity".into(),
        source.get("buffer_capacity"),
        "no effect: superseded by batching.max_rows / max_bytes".into(),
    );
    add(
        "observation_source.buffer_max_duration_seconds".into(),
        source.get("buffer_max_duration_seconds"),
        "no effect: superseded by batching.linger (which also fires on a quiet topic)".into(),
    );
    add(
        "observation_source.config.group_id".into(),
        sc.get("group_id"),
        match (cfg.consumer.group, cfg.consumer_group()) {
            (super::GroupMode::PerVersion, Some(g)) => format!(
                "names this version's own group, {g:?} (consumer.group: per_version), which starts where this group left each partition the first time; Merlin's publishers all join this one group, so every rollout rebalanced every model's publisher"
            ),
            (super::GroupMode::Shared, _) => "the group joined, shared with other models' publishers as in Merlin (consumer.group: shared): eager assignment, so every member's join or leave stops them all".into(),
            _ => "the group joined, this version's own (consumer.group: own)".into(),
        },
    );
    let reset = sc
        .get("additional_consumer_config")
        .and_then(|m| m.get("auto.offset.reset"));
    add(
        "observation_source.config.additional_consumer_config.auto.offset.reset".into(),
        reset,
        match &cfg.consumer.start_from {
            None if cfg.consumer.group == super::GroupMode::PerVersion => "where a partition starts that neither this version's group nor the configured group_id has committed (as in Merlin: `latest` skips what a new version logged before the publisher joined)".into(),
            None => "where the group starts on a partition it has no committed offset for (as in Merlin: `latest` skips what a new version logged before the publisher joined)".into(),
            Some(s) => format!(
                "ignored: consumer.start_from ({}) decides where a new group starts",
                start_from_text(s)
            ),
        },
    );

    if let Some(Value::Sequence(sinks)) = root.get("observation_sinks") {
        for (i, s) in sinks.iter().enumerate() {
            let c = &s["config"];
            let ty = s.get("type").and_then(Value::as_str).unwrap_or_default();
            let base = format!("observation_sinks[{i}].config");
            let sink = cfg.observation_sinks.get(i);
            match (ty, sink) {
                ("BIGQUERY", Some(SinkConfig::BigQuery(b))) => add(
                    format!("{base}.ttl_days"),
                    c.get("ttl_days"),
                    format!(
                        "partition expiration of the table: {} days (set when the table is created, and updated at start-up; Merlin sets it only at creation)",
                        b.ttl_days
                    ),
                ),
                ("MAXCOMPUTE", sink) => {
                    add(
                        format!("{base}.ttl_days"),
                        c.get("ttl_days"),
                        "no effect: no lifecycle is set on the target table (Merlin ignores it too)"
                            .into(),
                    );
                    // Checked by `run`, not here: Merlin's own fixture has the placeholder `url`.
                    let url_ok = matches!(sink, Some(SinkConfig::MaxCompute(m))
                        if super::check_access_url(&m.access_url).is_ok());
                    add(
                        format!("{base}.access_url"),
                        c.get("access_url"),
                        if url_ok {
                            "MaxCompute's control plane; the Tunnel endpoint is asked from it unless tunnel_endpoint is set".into()
                        } else {
                            format!("not an http(s):// URL: `run` exits 2 unless the environment replaces it (OBS_PUBLISHER__OBSERVATION_SINKS__{i}__CONFIG__ACCESS_URL)")
                        },
                    );
                }
                _ => {}
            }
            add(
                format!("{base}.retry"),
                c.get("retry"),
                "no effect: transient errors are always retried with backoff until they succeed, and nothing is committed meanwhile; rows a sink refuses for good are dead-lettered".into(),
            );
        }
    }
    out
}

/// The lines as YAML comments, appended to `check-config`'s output.
pub fn as_comments(lines: &[Understood]) -> String {
    if lines.is_empty() {
        return String::new();
    }
    let mut s = String::from("# How Merlin's keys in this file are understood:\n");
    for l in lines {
        s.push_str(&format!("#   {} = {}: {}\n", l.key, l.value, l.meaning));
    }
    s
}

fn start_from_text(s: &StartFrom) -> String {
    match s {
        StartFrom::Earliest => "earliest".into(),
        StartFrom::Latest => "latest".into(),
        StartFrom::Timestamp(ms) => format!("a time, {ms} ms"),
        StartFrom::Group(g) => format!("group:{g}"),
    }
}

/// A value on one line (`[tag]`, `null`, `100`, `""`).
fn flow(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::String(s) => format!("{s:?}"),
        Value::Sequence(items) => format!(
            "[{}]",
            items.iter().map(flow).collect::<Vec<_>>().join(", ")
        ),
        Value::Mapping(m) => format!(
            "{{{}}}",
            m.iter()
                .map(|(k, v)| format!("{}: {}", super::key_text(k), flow(v)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        other => serde_yaml_ng::to_string(other)
            .unwrap_or_default()
            .trim()
            .to_string(),
    }
}
