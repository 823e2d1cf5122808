//! `bootstrap apply`: claim the revision, server-side apply the version's objects, wait for the
//! rollout.

use super::checksum::{ChecksumKey, KEY_ITEM};
use super::error::{is_not_found, BootstrapError};
use super::manifest::{build, scaled_object_resource, FIELD_MANAGER};
use super::owner::check;
use super::poll::{pause_until, Backoff};
use super::revision::{claim, release, ClaimOutcome};
use super::rollout::{assess, deployed_revision, Rollout};
use super::spec::Spec;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Secret, ServiceAccount};
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams};
use kube::Client;
use serde::Serialize;
use std::time::Duration;
use tokio::time::Instant;

/// How `apply` waits.
#[derive(Debug, Clone, Copy)]
pub struct ApplyOptions {
    /// Bound on the whole command: waiting for an older rollout, then for ours.
    pub wait: Duration,
    /// Pauses between polls.
    pub backoff: Backoff,
}

/// What `apply` achieved.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "result", rename_all = "snake_case")]
pub enum ApplyOutcome {
    /// The revision is rolled out.
    Running {
        /// Our revision.
        revision: u64,
        /// Ready replicas.
        ready_replicas: i32,
    },
    /// A newer revision is deployed or being applied; nothing was written.
    Superseded {
        /// That revision.
        by: u64,
    },
    /// The rollout failed.
    Failed {
        /// Our revision.
        revision: u64,
        /// Why, e.g. `ProgressDeadlineExceeded: …`.
        reason: String,
    },
    /// The rollout did not finish before `--wait` expired.
    TimedOut {
        /// Our revision.
        revision: u64,
        /// Where it stood.
        state: String,
    },
}

impl ApplyOutcome {
    /// Process exit code: 0 running or superseded, 1 failed or timed out.
    pub fn exit_code(&self) -> u8 {
        match self {
            ApplyOutcome::Running { .. } | ApplyOutcome::Superseded { .. } => super::error::EXIT_OK,
            ApplyOutcome::Failed { .. } | ApplyOutcome::TimedOut { .. } => {
                super::error::EXIT_FAILED
            }
        }
    }
}

impl std::fmt::Display for ApplyOutcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ApplyOutcome::Running {
                revision,
                ready_replicas,
            } => {
                write!(
                    f,
                    "running: revision {revision} rolled out ({ready_replicas} ready)"
                )
            }
            ApplyOutcome::Superseded { by } => {
                write!(f, "superseded by revision {by}; nothing applied")
            }
            ApplyOutcome::Failed { revision, reason } => {
                write!(f, "failed: revision {revision}: {reason}")
            }
            ApplyOutcome::TimedOut { revision, state } => {
                write!(
                    f,
                    "failed: revision {revision} did not roll out in time ({state})"
                )
            }
        }
    }
}

/// A random id for this invocation (the marker's holder).
fn invocation_id() -> String {
    format!("{:016x}", fastrand::u64(..))
}

/// Applies one revision of one model version and waits for its rollout.
pub async fn apply(
    client: &Client,
    spec: &Spec,
    opts: ApplyOptions,
) -> Result<ApplyOutcome, BootstrapError> {
    let deadline = Instant::now() + opts.wait;
    let spec = &super::owner::resolve(client, spec).await?;
    let holder = invocation_id();
    let claimed = match claim(client, spec, &holder, deadline, opts.backoff).await? {
        ClaimOutcome::Superseded(by) => return Ok(ApplyOutcome::Superseded { by }),
        ClaimOutcome::Claimed(c) => c,
    };
    write_objects(client, spec).await?;
    if !release(client, spec, &claimed).await? {
        tracing::warn!(
            "the claim on revision {} lapsed while writing; a newer invocation took over",
            spec.revision
        );
    }
    wait_for_rollout(client, spec, deadline, opts.backoff).await
}

/// The checksum key of an existing config Secret, or a new one when there is none (first
/// apply, a Secret written before the key existed, or a key that does not parse).
fn checksum_key(existing: Option<&Secret>) -> Result<ChecksumKey, BootstrapError> {
    let stored = existing
        .and_then(|s| s.data.as_ref())
        .and_then(|d| d.get(KEY_ITEM));
    if let Some(key) = stored.and_then(|v| ChecksumKey::parse(&v.0)) {
        return Ok(key);
    }
    if stored.is_some() {
        tracing::warn!("the config Secret's {KEY_ITEM} is not 64 hex digits; generating a new one (the pods roll once)");
    }
    Ok(ChecksumKey::generate()?)
}

/// Server-side applies ServiceAccount, Secret, Deployment and the optional ScaledObject (or
/// removes a ScaledObject left from a revision that had autoscaling). Every object already under
/// one of these names must carry this version's identity labels ([`super::owner::check`]). The
/// Secret's checksum key is kept across applies ([`super::checksum`]).
pub async fn write_objects(client: &Client, spec: &Spec) -> Result<(), BootstrapError> {
    let ns = &spec.namespace;
    let pp = PatchParams::apply(FIELD_MANAGER).force();
    let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), ns);
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), ns);
    let scaled: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), ns, &scaled_object_resource());
    check(&sas, "ServiceAccount", &spec.names.workload, spec).await?;
    let secret = check(&secrets, "Secret", &spec.names.config_secret, spec).await?;
    let m = build(spec, &checksum_key(secret.as_ref())?);
    check(&deployments, "Deployment", &spec.names.workload, spec).await?;
    match check(&scaled, "ScaledObject", &spec.names.workload, spec).await {
        // KEDA not installed: the resource itself is unknown.
        Err(BootstrapError::Kube { source, .. }) if is_not_found(&source) => {}
        other => {
            other?;
        }
    }
    sas.patch(&spec.names.workload, &pp, &Patch::Apply(&m.service_account))
        .await
        .map_err(|e| {
            BootstrapError::kube(
                format!("apply ServiceAccount {ns}/{}", spec.names.workload),
                e,
            )
        })?;
    secrets
        .patch(&spec.names.config_secret, &pp, &Patch::Apply(&m.secret))
        .await
        .map_err(|e| {
            BootstrapError::kube(format!("apply Secret {ns}/{}", spec.names.config_secret), e)
        })?;
    deployments
        .patch(&spec.names.workload, &pp, &Patch::Apply(&m.deployment))
        .await
        .map_err(|e| {
            BootstrapError::kube(format!("apply Deployment {ns}/{}", spec.names.workload), e)
        })?;
    match &m.scaled_object {
        Some(so) => {
            scaled
                .patch(&spec.names.workload, &pp, &Patch::Apply(so))
                .await
                .map_err(|e| {
                    BootstrapError::kube(
                        format!(
                            "apply ScaledObject {ns}/{} (is KEDA installed?)",
                            spec.names.workload
                        ),
                        e,
                    )
                })?;
        }
        None => match scaled
            .delete(&spec.names.workload, &DeleteParams::default())
            .await
        {
            Ok(_) => tracing::info!(
                "removed ScaledObject {ns}/{}: autoscaling is off",
                spec.names.workload
            ),
            // Gone already, or KEDA not installed (the resource itself is unknown).
            Err(e) if is_not_found(&e) => {}
            Err(e) => {
                return Err(BootstrapError::kube(
                    format!("delete ScaledObject {ns}/{}", spec.names.workload),
                    e,
                ))
            }
        },
    }
    Ok(())
}

/// Polls the Deployment until the rollout of `spec.revision` completes or fails, a newer
/// revision replaces it, or `deadline` passes.
pub async fn wait_for_rollout(
    client: &Client,
    spec: &Spec,
    deadline: Instant,
    backoff: Backoff,
) -> Result<ApplyOutcome, BootstrapError> {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &spec.namespace);
    let mut pauses = backoff.pauses();
    loop {
        let d = deployments
            .get_opt(&spec.names.workload)
            .await
            .map_err(|e| {
                BootstrapError::kube(
                    format!("read Deployment {}/{}", spec.namespace, spec.names.workload),
                    e,
                )
            })?;
        let state = match &d {
            None => "the Deployment does not exist (deleted meanwhile?)".to_string(),
            Some(d) => {
                let have = deployed_revision(d);
                if have > spec.revision {
                    return Ok(ApplyOutcome::Superseded { by: have });
                }
                match assess(d, Some(spec.revision)) {
                    Rollout::Complete => {
                        let ready = d
                            .status
                            .as_ref()
                            .and_then(|s| s.ready_replicas)
                            .unwrap_or(0);
                        return Ok(ApplyOutcome::Running {
                            revision: spec.revision,
                            ready_replicas: ready,
                        });
                    }
                    Rollout::Failed(reason) => {
                        return Ok(ApplyOutcome::Failed {
                            revision: spec.revision,
                            reason,
                        })
                    }
                    Rollout::Progressing(why) => why,
                }
            }
        };
        tracing::info!("rollout of revision {}: {state}", spec.revision);
        let pause = pauses.next().unwrap_or(backoff.max);
        if !pause_until(deadline, pause).await {
            return Ok(ApplyOutcome::TimedOut {
                revision: spec.revision,
                state,
            });
        }
    }
}
