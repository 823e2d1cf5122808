//! The revision rules, arbitrated by a marker ConfigMap and the API server's optimistic
//! concurrency.
//!
//! Server-side apply is an upsert: two invocations applying revisions 3 and 4 would both
//! succeed, in either order. So before writing anything an invocation *claims* the version's
//! marker (`<base>-publisher-revision`):
//! - no marker: a plain **create** with our revision; `AlreadyExists` means another invocation
//!   won the race, so read again;
//! - a marker: decide ([`decide`]); to take it, **replace** it with the resourceVersion we read,
//!   so a concurrent change makes the write fail with `Conflict` and we read again.
//!
//! The marker holds the highest revision claimed (`revision`), whether its objects are being
//! written (`phase: applying`, by `holder`, until `expires`) or written (`phase: applied`). The
//! rules, from the seed's worker, without its database:
//! - an older revision than the marker's or the Deployment's is superseded (exit 0);
//! - while an older revision's rollout is in progress, or another invocation is writing
//!   objects, wait (poll with backoff, bounded by `--wait`);
//! - the same revision again is idempotent: it is re-applied, which changes nothing.

use super::error::BootstrapError;
use super::meta::{labels, ANNOTATION_REVISION};
use super::poll::{pause_until, Backoff};
use super::rollout::{assess, deployed_revision, Rollout};
use super::spec::Spec;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, PostParams};
use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};
use tokio::time::Instant;

/// How long an `applying` claim holds if its invocation dies before finishing.
pub const CLAIM_TTL: Duration = Duration::from_secs(120);

/// Phase of the marker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// An invocation is writing the objects of `revision`.
    Applying,
    /// The objects of `revision` are written.
    Applied,
}

/// The marker's content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Marker {
    /// Highest revision claimed.
    pub revision: u64,
    /// Phase.
    pub phase: Phase,
    /// Invocation id of the claimant.
    pub holder: String,
    /// When an `applying` claim lapses.
    pub expires: SystemTime,
}

impl Marker {
    /// Reads a marker ConfigMap; a malformed one reads as revision 0, applied.
    pub fn from_config_map(cm: &ConfigMap) -> Marker {
        let data = cm.data.clone().unwrap_or_default();
        Marker {
            revision: data
                .get("revision")
                .and_then(|r| r.parse().ok())
                .unwrap_or(0),
            phase: if data.get("phase").map(String::as_str) == Some("applying") {
                Phase::Applying
            } else {
                Phase::Applied
            },
            holder: data.get("holder").cloned().unwrap_or_default(),
            expires: data
                .get("expires")
                .and_then(|e| humantime::parse_rfc3339(e).ok())
                .unwrap_or(SystemTime::UNIX_EPOCH),
        }
    }

    fn data(&self) -> BTreeMap<String, String> {
        BTreeMap::from([
            ("revision".to_string(), self.revision.to_string()),
            (
                "phase".to_string(),
                if self.phase == Phase::Applying {
                    "applying"
                } else {
                    "applied"
                }
                .to_string(),
            ),
            ("holder".to_string(), self.holder.clone()),
            (
                "expires".to_string(),
                humantime::format_rfc3339_seconds(self.expires).to_string(),
            ),
        ])
    }
}

/// What to do about a marker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// A newer revision is deployed or being applied.
    Superseded(u64),
    /// Wait and look again; why.
    Wait(String),
    /// Claim the marker.
    Take,
}

/// The revision rules. `deployed` is the Deployment's revision annotation and rollout state.
pub fn decide(
    ours: u64,
    marker: &Marker,
    deployed: Option<(u64, &Rollout)>,
    me: &str,
    now: SystemTime,
) -> Decision {
    let newest = marker.revision.max(deployed.map_or(0, |(r, _)| r));
    if newest > ours {
        return Decision::Superseded(newest);
    }
    if marker.phase == Phase::Applying && marker.holder != me && marker.expires > now {
        return Decision::Wait(format!(
            "revision {} is being applied by another invocation",
            marker.revision
        ));
    }
    if let Some((rev, Rollout::Progressing(why))) = deployed {
        if rev < ours {
            return Decision::Wait(format!(
                "the rollout of revision {rev} is still in progress ({why})"
            ));
        }
    }
    Decision::Take
}

/// A claim on the marker, released once the objects are written.
#[derive(Debug, Clone)]
pub struct Claim {
    /// resourceVersion of the marker as we wrote it.
    pub resource_version: String,
    /// Our invocation id.
    pub holder: String,
}

/// Result of [`claim`].
#[derive(Debug)]
pub enum ClaimOutcome {
    /// Ours: write the objects, then [`release`].
    Claimed(Claim),
    /// A newer revision is deployed or being applied.
    Superseded(u64),
}

fn marker_object(spec: &Spec, m: &Marker, resource_version: Option<String>) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(spec.names.marker.clone()),
            namespace: Some(spec.namespace.clone()),
            labels: Some(labels(spec)),
            annotations: Some(BTreeMap::from([(
                ANNOTATION_REVISION.to_string(),
                m.revision.to_string(),
            )])),
            resource_version,
            ..ObjectMeta::default()
        },
        data: Some(m.data()),
        ..ConfigMap::default()
    }
}

fn is_reason(e: &kube::Error, f: fn(&kube::core::Status) -> bool) -> bool {
    matches!(e, kube::Error::Api(s) if f(s))
}

/// Claims the marker for `spec.revision`, waiting (bounded by `deadline`) while an older
/// rollout or another invocation's write is in progress.
pub async fn claim(
    client: &kube::Client,
    spec: &Spec,
    holder: &str,
    deadline: Instant,
    backoff: Backoff,
) -> Result<ClaimOutcome, BootstrapError> {
    let markers: Api<ConfigMap> = Api::namespaced(client.clone(), &spec.namespace);
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &spec.namespace);
    let what = format!("ConfigMap {}/{}", spec.namespace, spec.names.marker);
    let mut pauses = backoff.pauses();
    loop {
        let wanted = Marker {
            revision: spec.revision,
            phase: Phase::Applying,
            holder: holder.to_string(),
            expires: SystemTime::now() + CLAIM_TTL,
        };
        let current = markers
            .get_opt(&spec.names.marker)
            .await
            .map_err(|e| BootstrapError::kube(format!("read {what}"), e))?;
        let wait_reason = match current {
            None => {
                // Someone may have deleted the marker but left a newer Deployment.
                let dep = deployments
                    .get_opt(&spec.names.workload)
                    .await
                    .map_err(|e| BootstrapError::kube("read Deployment", e))?;
                let deployed = dep.as_ref().map(deployed_revision).unwrap_or(0);
                if deployed > spec.revision {
                    return Ok(ClaimOutcome::Superseded(deployed));
                }
                match markers
                    .create(&PostParams::default(), &marker_object(spec, &wanted, None))
                    .await
                {
                    Ok(cm) => {
                        return Ok(ClaimOutcome::Claimed(Claim {
                            resource_version: cm.metadata.resource_version.unwrap_or_default(),
                            holder: holder.to_string(),
                        }))
                    }
                    Err(e) if is_reason(&e, kube::core::Status::is_already_exists) => continue,
                    Err(e) => return Err(BootstrapError::kube(format!("create {what}"), e)),
                }
            }
            Some(cm) if !super::owner::is_ours(spec, &cm.metadata) => {
                return Err(BootstrapError::NotOurs {
                    object: what,
                    owner: super::owner::owner(&cm.metadata),
                    ours: super::owner::ours(spec),
                })
            }
            Some(cm) => {
                let marker = Marker::from_config_map(&cm);
                let dep = deployments
                    .get_opt(&spec.names.workload)
                    .await
                    .map_err(|e| BootstrapError::kube("read Deployment", e))?;
                let deployed = dep
                    .as_ref()
                    .map(|d| (deployed_revision(d), assess(d, None)));
                match decide(
                    spec.revision,
                    &marker,
                    deployed.as_ref().map(|(r, s)| (*r, s)),
                    holder,
                    SystemTime::now(),
                ) {
                    Decision::Superseded(n) => return Ok(ClaimOutcome::Superseded(n)),
                    Decision::Wait(why) => why,
                    Decision::Take => {
                        let rv = cm.metadata.resource_version.clone();
                        match markers
                            .replace(
                                &spec.names.marker,
                                &PostParams::default(),
                                &marker_object(spec, &wanted, rv),
                            )
                            .await
                        {
                            Ok(cm) => {
                                return Ok(ClaimOutcome::Claimed(Claim {
                                    resource_version: cm
                                        .metadata
                                        .resource_version
                                        .unwrap_or_default(),
                                    holder: holder.to_string(),
                                }))
                            }
                            Err(e) if is_reason(&e, kube::core::Status::is_conflict) => continue,
                            Err(e) if is_reason(&e, kube::core::Status::is_not_found) => continue,
                            Err(e) => {
                                return Err(BootstrapError::kube(format!("update {what}"), e))
                            }
                        }
                    }
                }
            }
        };
        tracing::info!("waiting: {wait_reason}");
        let pause = pauses.next().unwrap_or(backoff.max);
        if !pause_until(deadline, pause).await {
            return Err(BootstrapError::Timeout {
                what: format!("before applying revision {}: {wait_reason}", spec.revision),
            });
        }
    }
}

/// Marks the claimed revision's objects as written. Returns false when the claim was lost (it
/// lapsed and a newer invocation took the marker); that invocation's objects then win.
pub async fn release(
    client: &kube::Client,
    spec: &Spec,
    claim: &Claim,
) -> Result<bool, BootstrapError> {
    let markers: Api<ConfigMap> = Api::namespaced(client.clone(), &spec.namespace);
    let done = Marker {
        revision: spec.revision,
        phase: Phase::Applied,
        holder: claim.holder.clone(),
        expires: SystemTime::now(),
    };
    let obj = marker_object(spec, &done, Some(claim.resource_version.clone()));
    match markers
        .replace(&spec.names.marker, &PostParams::default(), &obj)
        .await
    {
        Ok(_) => Ok(true),
        Err(e)
            if is_reason(&e, kube::core::Status::is_conflict)
                || is_reason(&e, kube::core::Status::is_not_found) =>
        {
            Ok(false)
        }
        Err(e) => Err(BootstrapError::kube(
            format!("update ConfigMap {}/{}", spec.namespace, spec.names.marker),
            e,
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn marker(revision: u64, phase: Phase, holder: &str, expires_in: i64) -> Marker {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1000);
        let expires = if expires_in >= 0 {
            now + Duration::from_secs(expires_in as u64)
        } else {
            now - Duration::from_secs((-expires_in) as u64)
        };
        Marker {
            revision,
            phase,
            holder: holder.into(),
            expires,
        }
    }
    const NOW: Duration = Duration::from_secs(1000);

    fn d(ours: u64, m: &Marker, deployed: Option<(u64, &Rollout)>) -> Decision {
        decide(ours, m, deployed, "me", SystemTime::UNIX_EPOCH + NOW)
    }

    #[test]
    fn older_revisions_are_superseded() {
        let m = marker(5, Phase::Applied, "x", 0);
        assert_eq!(d(4, &m, None), Decision::Superseded(5));
        let m = marker(3, Phase::Applied, "x", 0);
        assert_eq!(
            d(4, &m, Some((6, &Rollout::Complete))),
            Decision::Superseded(6)
        );
    }

    #[test]
    fn wait_for_an_older_rollout_then_take() {
        let m = marker(3, Phase::Applied, "x", 0);
        assert!(matches!(
            d(4, &m, Some((3, &Rollout::Progressing("1 of 2".into())))),
            Decision::Wait(_)
        ));
        assert_eq!(d(4, &m, Some((3, &Rollout::Complete))), Decision::Take);
        assert_eq!(
            d(
                4,
                &m,
                Some((3, &Rollout::Failed("ProgressDeadlineExceeded".into())))
            ),
            Decision::Take
        );
    }

    #[test]
    fn same_revision_is_taken_again() {
        let m = marker(4, Phase::Applied, "x", 0);
        assert_eq!(
            d(4, &m, Some((4, &Rollout::Progressing("p".into())))),
            Decision::Take
        );
    }

    #[test]
    fn live_claims_of_others_are_waited_for_and_lapsed_ones_taken() {
        let m = marker(4, Phase::Applying, "other", 60);
        assert!(matches!(d(4, &m, None), Decision::Wait(_)));
        let m = marker(4, Phase::Applying, "other", -1);
        assert_eq!(d(4, &m, None), Decision::Take);
        let m = marker(4, Phase::Applying, "me", 60);
        assert_eq!(d(4, &m, None), Decision::Take);
    }

    #[test]
    fn marker_round_trip() {
        let m = marker(7, Phase::Applying, "h", 30);
        let cm = ConfigMap {
            data: Some(m.data()),
            ..ConfigMap::default()
        };
        assert_eq!(Marker::from_config_map(&cm), m);
    }
}
