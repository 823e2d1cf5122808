//! `bootstrap status`: what exists for one model version, as JSON.

use super::error::{is_not_found, BootstrapError};
use super::kafka::{lag_async, Lag};
use super::keda::{scaled_object_resource, trigger_authentication_resource};
use super::monitor::pod_monitor_resource;
use super::revision::{Marker, Phase};
use super::rollout::{assess, deployed_revision, Rollout};
use super::secret_lookup::lookup_source;
use super::spec::Spec;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Secret, ServiceAccount};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::Client;
use serde::Serialize;
use std::time::Duration;

/// Which objects exist.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Objects {
    /// ServiceAccount.
    pub service_account: bool,
    /// Config Secret.
    pub secret: bool,
    /// Deployment.
    pub deployment: bool,
    /// KEDA ScaledObject (false also when KEDA is not installed).
    pub scaled_object: bool,
    /// KEDA TriggerAuthentication (the scaler's Kafka credentials).
    pub trigger_authentication: bool,
    /// Prometheus Operator PodMonitor (false also when the operator is not installed).
    pub pod_monitor: bool,
    /// PodDisruptionBudget.
    pub disruption_budget: bool,
    /// Revision marker.
    pub revision_marker: bool,
}

/// Replica counts of the Deployment.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Replicas {
    /// Desired.
    pub desired: i32,
    /// Ready.
    pub ready: i32,
    /// Updated to the current template.
    pub updated: i32,
    /// Available.
    pub available: i32,
}

/// The status report.
#[derive(Debug, Clone, Serialize)]
pub struct StatusReport {
    /// Namespace.
    pub namespace: String,
    /// Deployment (and ServiceAccount) name.
    pub name: String,
    /// Which objects exist.
    pub objects: Objects,
    /// The Deployment's revision annotation.
    pub deployed_revision: Option<u64>,
    /// Highest revision claimed in the marker.
    pub claimed_revision: Option<u64>,
    /// Whether the claimed revision's objects are still being written.
    pub applying: bool,
    /// `running` | `progressing` | `failed` | `absent`.
    pub rollout: String,
    /// Detail of the rollout state.
    pub reason: Option<String>,
    /// Replica counts.
    pub replicas: Option<Replicas>,
    /// Consumer lag, when Kafka was reachable.
    pub consumer_lag: Option<Lag>,
    /// Why the lag is missing.
    pub consumer_lag_error: Option<String>,
}

fn kube_err(what: &str) -> impl FnOnce(kube::Error) -> BootstrapError + '_ {
    move |e| BootstrapError::kube(format!("read {what}"), e)
}

/// Reads the version's state. `kafka_timeout` = `None` skips the lag query.
pub async fn status(
    client: &Client,
    spec: &Spec,
    kafka_timeout: Option<Duration>,
) -> Result<StatusReport, BootstrapError> {
    let spec = &super::owner::resolve(client, spec).await?;
    let ns = &spec.namespace;
    let n = &spec.names;
    let ours = |m: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta| {
        super::owner::is_ours(spec, m)
    };
    let sa = Api::<ServiceAccount>::namespaced(client.clone(), ns)
        .get_opt(&n.workload)
        .await
        .map_err(kube_err("ServiceAccount"))?;
    let secret = Api::<Secret>::namespaced(client.clone(), ns)
        .get_opt(&n.config_secret)
        .await
        .map_err(kube_err("Secret"))?;
    let dep = Api::<Deployment>::namespaced(client.clone(), ns)
        .get_opt(&n.workload)
        .await
        .map_err(kube_err("Deployment"))?;
    let marker = Api::<ConfigMap>::namespaced(client.clone(), ns)
        .get_opt(&n.marker)
        .await
        .map_err(kube_err("ConfigMap"))?;
    let custom = |r: ApiResource, kind: &'static str| async move {
        match Api::<DynamicObject>::namespaced_with(client.clone(), ns, &r)
            .get_opt(&n.workload)
            .await
        {
            Ok(o) => Ok(o
                .filter(|o| super::owner::is_ours(spec, &o.metadata))
                .is_some()),
            // The resource itself is unknown: its CRD is not installed.
            Err(e) if is_not_found(&e) => Ok(false),
            Err(e) => Err(kube_err(kind)(e)),
        }
    };
    let scaled = custom(scaled_object_resource(), "ScaledObject").await?;
    let trigger_authentication =
        custom(trigger_authentication_resource(), "TriggerAuthentication").await?;
    let pod_monitor = custom(pod_monitor_resource(), "PodMonitor").await?;
    let disruption_budget = Api::<PodDisruptionBudget>::namespaced(client.clone(), ns)
        .get_opt(&n.workload)
        .await
        .map_err(kube_err("PodDisruptionBudget"))?
        .is_some_and(|o| super::owner::is_ours(spec, &o.metadata));
    // Objects under these names but labelled for another version are not this version's.
    let sa = sa.filter(|o| ours(&o.metadata));
    let secret = secret.filter(|o| ours(&o.metadata));
    let dep = dep.filter(|o| ours(&o.metadata));
    let marker = marker.filter(|o| ours(&o.metadata));
    let marker = marker.as_ref().map(Marker::from_config_map);
    let (rollout, reason) = match dep.as_ref().map(|d| assess(d, None)) {
        None => ("absent", None),
        Some(Rollout::Complete) => ("running", None),
        Some(Rollout::Progressing(r)) => ("progressing", Some(r)),
        Some(Rollout::Failed(r)) => ("failed", Some(r)),
    };
    let replicas = dep.as_ref().map(|d| {
        let s = d.status.clone().unwrap_or_default();
        Replicas {
            desired: d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1),
            ready: s.ready_replicas.unwrap_or(0),
            updated: s.updated_replicas.unwrap_or(0),
            available: s.available_replicas.unwrap_or(0),
        }
    });
    let not_queried = || (None, Some("not queried".to_string()));
    let (consumer_lag, consumer_lag_error) = match kafka_timeout {
        Some(t) => match lookup_source(client, spec).await {
            Ok(Some(src)) => match lag_async(&src, t).await {
                Ok(l) => (Some(l), None),
                Err(e) => (None, Some(e.to_string())),
            },
            Ok(None) => not_queried(),
            Err(e) => (None, Some(e.to_string())),
        },
        None => not_queried(),
    };
    Ok(StatusReport {
        namespace: ns.clone(),
        name: n.workload.clone(),
        objects: Objects {
            service_account: sa.is_some(),
            secret: secret.is_some(),
            deployment: dep.is_some(),
            scaled_object: scaled,
            trigger_authentication,
            pod_monitor,
            disruption_budget,
            revision_marker: marker.is_some(),
        },
        deployed_revision: dep.as_ref().map(deployed_revision),
        claimed_revision: marker.as_ref().map(|m| m.revision),
        applying: marker.as_ref().is_some_and(|m| m.phase == Phase::Applying),
        rollout: rollout.to_string(),
        reason,
        replicas,
        consumer_lag,
        consumer_lag_error,
    })
}
