//! Bootstrap mode against a fake API server (real HTTP, kube-rs) and the real local Kafka broker.

mod apply;
mod canary;
mod collide;
mod crd;
mod drain;
pub(crate) mod fake_apiserver;
mod golden;
mod secured;
mod smoke;
mod upgrade;

use observation_publisher::bootstrap::apply::ApplyOptions;
use observation_publisher::bootstrap::poll::Backoff;
use observation_publisher::bootstrap::Spec;
use std::time::Duration;

/// Namespace used by the fake-server tests.
pub(crate) const NS: &str = "mlobs";

/// Broker address for the Kafka tests (`scripts/kafka start`).
pub(crate) fn kafka_bootstrap() -> String {
    std::env::var("KAFKA_BOOTSTRAP").unwrap_or_else(|_| "127.0.0.1:19092".into())
}

/// A spec for `model` version `version` at `revision`; `extra` is appended at the top level.
pub(crate) fn spec_text(
    project: &str,
    model: &str,
    version: &str,
    revision: u64,
    extra: &str,
) -> String {
    format!(
        r#"project: {project}
model: {model}
version: "{version}"
revision: {revision}
namespace: {NS}
image: registry.example/observation-publisher:test
{extra}
config:
  inference_schema:
    session_id_column: session_id
    row_id_column: row_id
    model_prediction_output:
      output_class: BinaryClassificationOutput
      prediction_score_column: prediction_score
      positive_class_label: fraud
      negative_class_label: non_fraud
    feature_types: {{amount: float64}}
  observation_sinks:
  - type: BIGQUERY
    config: {{project: gcp-project, dataset: mlobs, ttl_days: 14}}
  observation_source:
    config: {{bootstrap_servers: "{kafka}"}}
"#,
        kafka = kafka_bootstrap()
    )
}

/// A parsed spec (panics with the problems if invalid).
pub(crate) fn spec(project: &str, model: &str, version: &str, revision: u64, extra: &str) -> Spec {
    Spec::parse(&spec_text(project, model, version, revision, extra))
        .unwrap_or_else(|p| panic!("{p}"))
        .0
}

/// Fast polling, with a generous cap that only matters when something hangs.
pub(crate) fn opts() -> ApplyOptions {
    ApplyOptions {
        wait: Duration::from_secs(60),
        backoff: fast(),
    }
}

/// Short backoff for tests.
pub(crate) fn fast() -> Backoff {
    Backoff {
        initial: Duration::from_millis(5),
        max: Duration::from_millis(50),
    }
}
