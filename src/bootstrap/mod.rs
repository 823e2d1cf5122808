//! Bootstrap mode: one publisher per model version on Kubernetes.
//!
//! Merlin keeps one publisher per *model*; during a canary only one version is observed and at
//! cut-over the old topic's unconsumed logs are abandoned. Here every model version gets its own
//! ServiceAccount, Secret (`config.yaml`), Deployment and consumer group, so v1 and v2 run side by
//! side and v1 can be drained before it is removed.
//!
//! # Layout (one file, one job)
//! - [`spec`]: the publisher spec and its validation (all problems at once).
//! - [`names`]: DNS-1123 object names carrying the identity hash; label values.
//! - [`owner`]: identity labels checked before writes and deletes; adopting older objects.
//! - [`meta`]: identity labels, the revision annotation and the label keys every object carries.
//! - [`manifest`]: pure builders of the objects; `--dry-run` prints them.
//! - [`kafka_auth`]: how KEDA's Kafka scaler authenticates, from the consumer's settings (pure).
//! - [`keda`]: the ScaledObject and the TriggerAuthentication (pure).
//! - [`monitor`]: the optional PodMonitor and the PodDisruptionBudget (pure).
//! - [`checksum`]: the keyed `config-checksum` annotation (HMAC-SHA256, key in the Secret).
//! - [`revision`]: the revision rules on a marker ConfigMap with optimistic concurrency.
//! - [`storage`]: emptyDir size limits; local files only on a named persistent volume.
//! - [`rollout`]: whether a Deployment has rolled out (pure).
//! - [`strategy`]: rolling, or `Recreate` when a revision changes the group's protocol (pure).
//! - [`apply`], [`delete`], [`status`]: the three commands against the API server.
//! - [`kafka`]: partition count and consumer lag.
//! - [`secret_lookup`]: the Kafka credentials a spec reads from Secrets, read for those look-ups.
//! - [`poll`]: backoff under a deadline.
//! - [`error`]: errors, retry hints and exit codes.
//! - [`cli`]: clap arguments and the glue.

pub mod apply;
pub mod checksum;
pub mod cli;
pub mod delete;
pub mod error;
pub mod kafka;
pub mod kafka_auth;
pub mod keda;
pub mod manifest;
pub mod meta;
pub mod monitor;
pub mod names;
pub mod owner;
pub mod poll;
pub mod revision;
pub mod rollout;
pub mod secret_lookup;
pub mod spec;
pub mod status;
pub mod storage;
pub mod strategy;

pub use cli::BootstrapArgs;
pub use error::BootstrapError;
pub use spec::Spec;

use std::process::ExitCode;

/// Runs a bootstrap command (see [`cli`]) and returns its exit code.
pub async fn run(args: BootstrapArgs) -> ExitCode {
    // Progress lines ("waiting: …", "rollout …") go to stderr; RUST_LOG overrides the level.
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("observation_publisher=info"));
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(filter)
        .with_target(false)
        .try_init();
    cli::execute(args).await
}
