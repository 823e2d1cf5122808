//! Whether a Deployment has rolled out: the rule of Merlin's worker (reference §7.3), pure.
//!
//! Finished means: `status.observedGeneration ≥ metadata.generation`; no `Progressing`
//! condition with reason `ProgressDeadlineExceeded` (that one is a failure); `updatedReplicas ≥
//! spec.replicas`; `replicas ≤ updatedReplicas`; `availableReplicas ≥ updatedReplicas`. The
//! strict variant also wants the revision annotation to be the expected revision.

use super::meta::ANNOTATION_REVISION;
use k8s_openapi::api::apps::v1::Deployment;
use serde::Serialize;

/// The state of a Deployment's rollout.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "state", content = "detail", rename_all = "snake_case")]
pub enum Rollout {
    /// Every replica runs the current template and is available.
    Complete,
    /// Still rolling out; why.
    Progressing(String),
    /// The rollout failed; the reason (e.g. `ProgressDeadlineExceeded: …`).
    Failed(String),
}

/// The revision annotation of an object's metadata, if present and numeric.
pub fn revision_of(
    annotations: Option<&std::collections::BTreeMap<String, String>>,
) -> Option<u64> {
    annotations?.get(ANNOTATION_REVISION)?.parse().ok()
}

/// The deployed revision of a Deployment (its annotation; 0 when missing).
pub fn deployed_revision(d: &Deployment) -> u64 {
    revision_of(d.metadata.annotations.as_ref()).unwrap_or(0)
}

/// Assesses a Deployment. With `expect_revision`, a Deployment carrying another revision is
/// still progressing (the strict variant).
pub fn assess(d: &Deployment, expect_revision: Option<u64>) -> Rollout {
    if let Some(want) = expect_revision {
        let have = deployed_revision(d);
        if have != want {
            return Rollout::Progressing(format!(
                "the Deployment carries revision {have}, not {want}"
            ));
        }
    }
    let generation = d.metadata.generation.unwrap_or(0);
    let status = d.status.clone().unwrap_or_default();
    if let Some(c) = status
        .conditions
        .as_deref()
        .unwrap_or_default()
        .iter()
        .find(|c| {
            c.type_ == "Progressing" && c.reason.as_deref() == Some("ProgressDeadlineExceeded")
        })
    {
        let msg = c.message.clone().unwrap_or_default();
        return Rollout::Failed(if msg.is_empty() {
            "ProgressDeadlineExceeded".into()
        } else {
            format!("ProgressDeadlineExceeded: {msg}")
        });
    }
    let observed = status.observed_generation.unwrap_or(0);
    if observed < generation {
        return Rollout::Progressing(format!(
            "waiting for the controller to observe generation {generation} (observed {observed})"
        ));
    }
    let desired = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    let updated = status.updated_replicas.unwrap_or(0);
    let replicas = status.replicas.unwrap_or(0);
    let available = status.available_replicas.unwrap_or(0);
    if updated < desired {
        return Rollout::Progressing(format!("{updated} of {desired} replicas updated"));
    }
    if replicas > updated {
        return Rollout::Progressing(format!(
            "{} old replica(s) pending termination",
            replicas - updated
        ));
    }
    if available < updated {
        return Rollout::Progressing(format!(
            "{available} of {updated} updated replicas available"
        ));
    }
    Rollout::Complete
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::{DeploymentCondition, DeploymentSpec, DeploymentStatus};
    use std::collections::BTreeMap;

    fn dep(generation: i64, replicas: i32, status: DeploymentStatus, revision: u64) -> Deployment {
        let mut d = Deployment {
            spec: Some(DeploymentSpec {
                replicas: Some(replicas),
                ..DeploymentSpec::default()
            }),
            status: Some(status),
            ..Deployment::default()
        };
        d.metadata.generation = Some(generation);
        d.metadata.annotations = Some(BTreeMap::from([(
            ANNOTATION_REVISION.to_string(),
            revision.to_string(),
        )]));
        d
    }

    fn st(observed: i64, updated: i32, replicas: i32, available: i32) -> DeploymentStatus {
        DeploymentStatus {
            observed_generation: Some(observed),
            updated_replicas: Some(updated),
            replicas: Some(replicas),
            available_replicas: Some(available),
            ..DeploymentStatus::default()
        }
    }

    #[test]
    fn the_rule() {
        assert_eq!(
            assess(&dep(2, 2, st(2, 2, 2, 2), 1), Some(1)),
            Rollout::Complete
        );
        assert!(matches!(
            assess(&dep(2, 2, st(1, 2, 2, 2), 1), None),
            Rollout::Progressing(_)
        ));
        assert!(matches!(
            assess(&dep(2, 2, st(2, 1, 2, 1), 1), None),
            Rollout::Progressing(_)
        ));
        assert!(matches!(
            assess(&dep(2, 2, st(2, 2, 3, 2), 1), None),
            Rollout::Progressing(_)
        ));
        assert!(matches!(
            assess(&dep(2, 2, st(2, 2, 2, 1), 1), None),
            Rollout::Progressing(_)
        ));
        assert!(matches!(
            assess(&dep(2, 2, st(2, 2, 2, 2), 1), Some(2)),
            Rollout::Progressing(_)
        ));
    }

    #[test]
    fn deadline_exceeded_is_a_failure() {
        let mut s = st(2, 0, 1, 0);
        s.conditions = Some(vec![DeploymentCondition {
            type_: "Progressing".into(),
            status: "False".into(),
            reason: Some("ProgressDeadlineExceeded".into()),
            message: Some("ReplicaSet x has timed out progressing.".into()),
            ..DeploymentCondition::default()
        }]);
        match assess(&dep(2, 1, s, 1), Some(1)) {
            Rollout::Failed(r) => assert!(r.starts_with("ProgressDeadlineExceeded"), "{r}"),
            other => panic!("{other:?}"),
        }
    }
}
