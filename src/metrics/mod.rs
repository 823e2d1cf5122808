//! Metrics: names in [`names`], descriptions, histogram buckets, and the Prometheus recorder.
//!
//! Input: nothing but the process. Output: a [`PrometheusHandle`] whose `render()` is the
//! Prometheus text the runtime serves at `/metrics` on its own HTTP port (the exporter's
//! built-in listener is not used, so `/healthz` and `/readyz` share the port). Every histogram
//! has explicit buckets, so it is rendered as a true Prometheus histogram, not a summary.
//! Call [`describe`] once after installing, so every metric has its `# HELP` line and the
//! Merlin-compatible names appear in the order operators know.
//!
//! Call sites use the names from [`names`] only; emit once per batch, never per row.

pub mod names;
pub mod process;
pub mod quality;
#[cfg(test)]
mod rules;
pub mod startup;

use metrics_exporter_prometheus::{BuildError, Matcher, PrometheusBuilder, PrometheusHandle};
use names::MetricKind;

/// Buckets of [`names::FLUSH_ROWS`] (rows).
pub const FLUSH_ROWS_BUCKETS: &[f64] = &[
    1.0, 10.0, 100.0, 1_000.0, 5_000.0, 10_000.0, 25_000.0, 50_000.0, 100_000.0, 250_000.0,
];

/// Buckets of [`names::FLUSH_BYTES`] (bytes: 1 KiB … 64 MiB).
pub const FLUSH_BYTES_BUCKETS: &[f64] = &[
    1024.0,
    16_384.0,
    262_144.0,
    1_048_576.0,
    4_194_304.0,
    8_388_608.0,
    16_777_216.0,
    67_108_864.0,
];

/// Buckets of the latency histograms [`names::FLUSH_LATENCY`] and [`names::SINK_LATENCY`]
/// (seconds: 1 ms … 60 s).
pub const LATENCY_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

/// A Prometheus builder with the publisher's buckets and no HTTP listener. Exposed separately
/// from [`install`] so tests can build a local recorder.
pub fn prometheus_builder() -> Result<PrometheusBuilder, BuildError> {
    PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Full(names::FLUSH_ROWS.into()), FLUSH_ROWS_BUCKETS)?
        .set_buckets_for_metric(
            Matcher::Full(names::FLUSH_BYTES.into()),
            FLUSH_BYTES_BUCKETS,
        )?
        .set_buckets_for_metric(Matcher::Full(names::FLUSH_LATENCY.into()), LATENCY_BUCKETS)?
        .set_buckets_for_metric(Matcher::Full(names::SINK_LATENCY.into()), LATENCY_BUCKETS)?
        .set_buckets_for_metric(
            Matcher::Full(names::bigquery::APPEND_LATENCY_SECONDS.into()),
            LATENCY_BUCKETS,
        )?
        .set_buckets_for_metric(
            Matcher::Full(names::arize::REQUEST_SECONDS.into()),
            LATENCY_BUCKETS,
        )
}

/// Installs the Prometheus recorder as the process-wide `metrics` recorder, describes every
/// metric and sets `build_info` for `model`. Fails if a recorder is already installed. Call
/// [`PrometheusHandle::run_upkeep`] every few seconds (the exporter's own upkeep task belongs to
/// its listener, which is not used).
pub fn install(model: &Model<'_>) -> Result<PrometheusHandle, BuildError> {
    let handle = prometheus_builder()?.install_recorder()?;
    describe();
    process::describe();
    record_build_info(model);
    startup::register_zero_series();
    Ok(handle)
}

/// Describes every metric of [`names::ALL`] to the current recorder.
pub fn describe() {
    for (name, kind, help) in names::ALL {
        match kind {
            MetricKind::Counter => ::metrics::describe_counter!(*name, *help),
            MetricKind::Gauge => ::metrics::describe_gauge!(*name, *help),
            MetricKind::Histogram => ::metrics::describe_histogram!(*name, *help),
        }
    }
}

/// The model version a publisher process serves, as Merlin names it.
#[derive(Debug, Clone, Copy)]
pub struct Model<'a> {
    /// Merlin project.
    pub project: &'a str,
    /// Model id (the model name).
    pub model_id: &'a str,
    /// Model version.
    pub model_version: &'a str,
}

/// Sets [`names::BUILD_INFO`] to 1 with the crate version and `model`'s labels (Merlin's label
/// names, as on its own two series).
pub fn record_build_info(model: &Model<'_>) {
    ::metrics::gauge!(names::BUILD_INFO, names::VERSION => env!("CARGO_PKG_VERSION"),
        names::MERLIN_PROJECT => model.project.to_string(),
        names::MODEL_ID => model.model_id.to_string(),
        names::MODEL_VERSION => model.model_version.to_string())
    .set(1.0);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn names_are_unique_valid_and_counters_end_in_total() {
        let mut seen = BTreeSet::new();
        for (name, kind, help) in names::ALL {
            assert!(seen.insert(*name), "{name} listed twice");
            assert!(!help.is_empty());
            assert!(
                name.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'),
                "{name} is not a Prometheus name"
            );
            assert_eq!(
                *kind == MetricKind::Counter,
                name.ends_with("_total"),
                "{name}"
            );
            if *name != names::LAST_PROCESSED_TIMESTAMP && *name != names::PREDICTION_LOGS_PROCESSED
            {
                assert!(name.starts_with("observation_publisher_"), "{name}");
            }
        }
    }

    /// The "one source of truth" rule, enforced: no metric macro with a literal name and no
    /// metric-name literal anywhere in `src/` outside `metrics/` (whose tests spell rendered
    /// output). (A clippy `disallowed-macros`
    /// entry cannot tell `counter!(names::X)` from `counter!("x")`, so it is not used.)
    #[test]
    fn metric_names_are_spelled_only_in_names_rs() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut stack = vec![root.clone()];
        let mut checked = 0;
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    stack.push(path);
                    continue;
                }
                if path.extension().is_none_or(|e| e != "rs")
                    || path.starts_with(root.join("metrics"))
                {
                    continue;
                }
                checked += 1;
                let text = std::fs::read_to_string(&path).unwrap();
                for (n, line) in text.lines().enumerate() {
                    for bad in [
                        "counter!(\"",
                        "gauge!(\"",
                        "histogram!(\"",
                        "\"observation_publisher_",
                        "\"last_processed_timestamp",
                        "\"total_prediction_logs",
                    ] {
                        assert!(
                            !line.contains(bad),
                            "{}:{}: metric name spelled outside names.rs: {line}",
                            path.display(),
                            n + 1
                        );
                    }
                }
            }
        }
        assert!(checked > 10);
    }

    /// The dashboard and the alert rules name only metrics the publisher exposes (histogram
    /// series by their `_bucket`, `_sum`, `_count`).
    #[test]
    fn dashboard_and_alert_rules_use_known_metric_names() {
        let deploy = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy");
        let mut files = vec![deploy.join("grafana-dashboard.json")];
        for e in std::fs::read_dir(deploy.join("alerts")).unwrap() {
            let path = e.unwrap().path();
            if path.to_string_lossy().ends_with(".rules.yaml") {
                files.push(path);
            }
        }
        let mut used = 0;
        for f in &files {
            let text = std::fs::read_to_string(f).unwrap();
            for (i, _) in text.match_indices("observation_publisher_") {
                let name: String = text[i..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                let known = |n: &str| names::ALL.iter().any(|(m, _, _)| *m == n);
                let base = ["_bucket", "_sum", "_count"]
                    .iter()
                    .find_map(|s| name.strip_suffix(s).filter(|b| known(b)))
                    .unwrap_or(&name);
                assert!(known(base), "{}: unknown metric {name}", f.display());
                used += 1;
            }
        }
        assert!(used > 20, "{used}");
    }

    #[test]
    fn renders_merlin_names_and_true_histograms() {
        let recorder = prometheus_builder().unwrap().build_recorder();
        let handle = recorder.handle();
        ::metrics::with_local_recorder(&recorder, || {
            describe();
            record_build_info(&Model {
                project: "p",
                model_id: "m",
                model_version: "3",
            });
            let merlin = [
                (names::MODEL_ID, "m"),
                (names::MODEL_VERSION, "3"),
                (names::MERLIN_PROJECT, "p"),
            ];
            ::metrics::counter!(names::PREDICTION_LOGS_PROCESSED, &merlin).increment(5);
            ::metrics::gauge!(names::LAST_PROCESSED_TIMESTAMP, &merlin).set(1_709_294_400.0);
            ::metrics::histogram!(names::FLUSH_ROWS, names::REASON => "rows").record(50_000.0);
            ::metrics::histogram!(names::SINK_LATENCY, names::SINK => "local_parquet").record(0.02);
        });
        let text = handle.render();
        assert!(
            text.contains("# TYPE total_prediction_logs_processed_total counter"),
            "{text}"
        );
        assert!(
            text.contains(r#"total_prediction_logs_processed_total{model_id="m",model_version="3",merlin_project="p"} 5"#),
            "{text}"
        );
        assert!(
            text.contains("# TYPE last_processed_timestamp gauge"),
            "{text}"
        );
        assert!(
            text.contains("# TYPE observation_publisher_flush_rows histogram"),
            "{text}"
        );
        assert!(
            text.contains(r#"observation_publisher_flush_rows_bucket{reason="rows",le="50000"} 1"#),
            "{text}"
        );
        assert!(
            text.contains("# TYPE observation_publisher_sink_write_seconds histogram"),
            "{text}"
        );
        assert!(
            text.lines().any(
                |l| l.starts_with(r#"observation_publisher_build_info{version=""#)
                    && l.ends_with(r#"",merlin_project="p",model_id="m",model_version="3"} 1"#)
            ),
            "{text}"
        );
        assert!(
            text.contains("# HELP observation_publisher_flush_rows Rows per flushed batch"),
            "{text}"
        );
    }
}
