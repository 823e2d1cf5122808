//! `bootstrap apply`: claim the revision, server-side apply the version's objects, wait for the
//! rollout.

use super::checksum::{ChecksumKey, KEY_ITEM};
use super::error::{is_not_found, BootstrapError};
use super::keda::{scaled_object_resource, trigger_authentication_resource};
use super::manifest::{build, FIELD_MANAGER};
use super::monitor::pod_monitor_resource;
use super::owner::check;
use super::poll::{pause_until, Backoff};
use super::revision::{claim, release, ClaimOutcome};
use super::rollout::{assess, deployed_revision, Rollout};
use super::spec::Spec;
use super::strategy::{membership, running_in, strategy, Strategy};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Secret, ServiceAccount};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, Patch, PatchParams};
use kube::{Client, Resource};
use serde::de::DeserializeOwned;
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

/// An object the spec may or may not yield: `kind` and the API to reach it, and what must be
/// installed for its resource to exist.
struct Optional<'a, K: Resource> {
    api: Api<K>,
    kind: &'static str,
    needs: &'static str,
    object: Option<&'a K>,
}

impl<K> Optional<'_, K>
where
    K: Resource + Clone + Serialize + DeserializeOwned + std::fmt::Debug,
{
    /// Ownership check before anything is written. A resource that does not exist at all (its
    /// CRD is not installed) holds nothing to check.
    async fn check(&self, spec: &Spec) -> Result<(), BootstrapError> {
        match check(&self.api, self.kind, &spec.names.workload, spec).await {
            Err(BootstrapError::Kube { source, .. }) if is_not_found(&source) => Ok(()),
            other => other.map(drop),
        }
    }

    /// Applies the object, or removes one a previous revision wrote.
    async fn write(&self, spec: &Spec, pp: &PatchParams) -> Result<(), BootstrapError> {
        let (ns, name, kind) = (&spec.namespace, &spec.names.workload, self.kind);
        match self.object {
            Some(o) => {
                self.api
                    .patch(name, pp, &Patch::Apply(o))
                    .await
                    .map_err(|e| {
                        BootstrapError::kube(
                            format!("apply {kind} {ns}/{name} (is {} installed?)", self.needs),
                            e,
                        )
                    })?;
            }
            None => match self.api.delete(name, &DeleteParams::default()).await {
                Ok(_) => {
                    tracing::info!("removed {kind} {ns}/{name}: the spec no longer asks for it")
                }
                // Gone already, or the resource itself is unknown (CRD not installed).
                Err(e) if is_not_found(&e) => {}
                Err(e) => {
                    return Err(BootstrapError::kube(
                        format!("delete {kind} {ns}/{name}"),
                        e,
                    ))
                }
            },
        }
        Ok(())
    }
}

/// Server-side applies ServiceAccount, Secret and Deployment, then the optional objects
/// (PodDisruptionBudget, KEDA's TriggerAuthentication and ScaledObject, PodMonitor), removing
/// optional ones a previous revision wrote and this one does not. Every object already under one
/// of these names must carry this version's identity labels ([`super::owner::check`]), checked
/// before anything is written. The Secret's checksum key is kept across applies
/// ([`super::checksum`]). The Deployment is replaced all at once, not rolled, when the pods it
/// runs (per the config Secret found) and this revision's would speak different assignment
/// protocols in one consumer group ([`super::strategy`]).
pub async fn write_objects(client: &Client, spec: &Spec) -> Result<(), BootstrapError> {
    let ns = &spec.namespace;
    let pp = PatchParams::apply(FIELD_MANAGER).force();
    let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), ns);
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), ns);
    check(&sas, "ServiceAccount", &spec.names.workload, spec).await?;
    let secret = check(&secrets, "Secret", &spec.names.config_secret, spec).await?;
    let mut m = build(spec, &checksum_key(secret.as_ref())?);
    let running = check(&deployments, "Deployment", &spec.names.workload, spec).await?;
    let before = running.and(secret.as_ref()).and_then(running_in);
    let how = strategy(before.as_ref(), membership(&spec.config).as_ref());
    if let Strategy::Recreate(why) = &how {
        tracing::warn!(
            "revision {} replaces the pods of Deployment {ns}/{} all at once (strategy Recreate): {why}",
            spec.revision,
            spec.names.workload
        );
    }
    how.set(&mut m.deployment);
    let dynamic = |r: &ApiResource| Api::<DynamicObject>::namespaced_with(client.clone(), ns, r);
    let pdb = Optional {
        api: Api::<PodDisruptionBudget>::namespaced(client.clone(), ns),
        kind: "PodDisruptionBudget",
        needs: "policy/v1",
        object: m.disruption_budget.as_ref(),
    };
    let keda = [
        Optional {
            api: dynamic(&trigger_authentication_resource()),
            kind: "TriggerAuthentication",
            needs: "KEDA",
            object: m.trigger_authentication.as_ref(),
        },
        Optional {
            api: dynamic(&scaled_object_resource()),
            kind: "ScaledObject",
            needs: "KEDA",
            object: m.scaled_object.as_ref(),
        },
        Optional {
            api: dynamic(&pod_monitor_resource()),
            kind: "PodMonitor",
            needs: "the Prometheus Operator",
            object: m.pod_monitor.as_ref(),
        },
    ];
    pdb.check(spec).await?;
    for o in &keda {
        o.check(spec).await?;
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
    pdb.write(spec, &pp).await?;
    // The ScaledObject names the TriggerAuthentication: applied after it, removed before it.
    let [auth, scaled, monitor] = &keda;
    if scaled.object.is_none() {
        scaled.write(spec, &pp).await?;
        auth.write(spec, &pp).await?;
    } else {
        auth.write(spec, &pp).await?;
        scaled.write(spec, &pp).await?;
    }
    monitor.write(spec, &pp).await
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
