//! `bootstrap delete`: optionally drain the version's consumer group, then remove the version's
//! objects. Idempotent: an object already gone counts as deleted.

use super::error::{is_not_found, BootstrapError};
use super::kafka::{wait_for_no_lag, Lag};
use super::keda::{scaled_object_resource, trigger_authentication_resource};
use super::monitor::pod_monitor_resource;
use super::owner::check;
use super::poll::Backoff;
use super::secret_lookup::lookup_source;
use super::spec::Spec;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Secret, ServiceAccount};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, DeleteParams, DynamicObject};
use kube::{Client, Resource};
use serde::Serialize;
use std::time::Duration;

/// `--drain` settings.
#[derive(Debug, Clone, Copy)]
pub struct DrainOptions {
    /// How long to wait for the lag to reach 0.
    pub timeout: Duration,
    /// Pauses between lag reads.
    pub backoff: Backoff,
}

/// What `delete` did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct DeleteReport {
    /// The lag read when the drain finished (0), when draining.
    pub drained: Option<Lag>,
    /// Objects deleted now, as `Kind/name`.
    pub deleted: Vec<String>,
    /// Objects that were already gone.
    pub already_gone: Vec<String>,
    /// Objects under this version's names that carry another version's identity labels; left
    /// alone.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub not_ours: Vec<String>,
}

async fn delete_one<K>(
    api: Api<K>,
    kind: &str,
    name: &str,
    spec: &Spec,
    report: &mut DeleteReport,
) -> Result<(), BootstrapError>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let what = format!("{kind}/{name}");
    match check(&api, kind, name, spec).await {
        Ok(None) => {
            report.already_gone.push(what);
            return Ok(());
        }
        Ok(Some(_)) => {}
        Err(BootstrapError::NotOurs { owner, .. }) => {
            tracing::warn!(
                "{kind} {}/{name} belongs to {owner}; left alone",
                spec.namespace
            );
            report.not_ours.push(what);
            return Ok(());
        }
        // The resource itself is unknown (its CRD is not installed).
        Err(BootstrapError::Kube { source, .. }) if is_not_found(&source) => {
            report.already_gone.push(what);
            return Ok(());
        }
        Err(e) => return Err(e),
    }
    // Background propagation: the Deployment's pods get SIGTERM and drain within their grace
    // period; the Secret they mounted stays readable to them meanwhile.
    match api.delete(name, &DeleteParams::background()).await {
        Ok(_) => report.deleted.push(what),
        Err(e) if is_not_found(&e) => report.already_gone.push(what),
        Err(e) => return Err(BootstrapError::kube(format!("delete {what}"), e)),
    }
    Ok(())
}

/// Deletes the version's objects: ScaledObject, TriggerAuthentication, PodMonitor,
/// PodDisruptionBudget, Deployment, Secret, ServiceAccount, then the revision marker — each only when it carries this version's identity labels (objects under
/// these names labelled for another version are reported in `not_ours` and left alone; objects
/// created under the previous naming scheme are found and deleted, see [`super::owner`]). With `drain`, first waits until the consumer group has no lag; if it never
/// gets there, returns [`BootstrapError::DrainTimeout`] and deletes nothing.
pub async fn delete(
    client: &Client,
    spec: &Spec,
    drain: Option<DrainOptions>,
) -> Result<DeleteReport, BootstrapError> {
    let mut report = DeleteReport::default();
    if let Some(d) = drain {
        // Read before the drain's retries: a missing Secret or key does not heal by waiting.
        let source = lookup_source(client, spec)
            .await?
            .ok_or_else(|| BootstrapError::Kafka("the spec's config has no Kafka source".into()))?;
        report.drained = Some(wait_for_no_lag(&source, d.timeout, d.backoff).await?);
    }
    let spec = &super::owner::resolve(client, spec).await?;
    let ns = &spec.namespace;
    let n = &spec.names;
    let dynamic = |r| Api::<DynamicObject>::namespaced_with(client.clone(), ns, &r);
    // The ScaledObject first: it scales the Deployment and names the TriggerAuthentication.
    for (api, kind) in [
        (dynamic(scaled_object_resource()), "ScaledObject"),
        (
            dynamic(trigger_authentication_resource()),
            "TriggerAuthentication",
        ),
        (dynamic(pod_monitor_resource()), "PodMonitor"),
    ] {
        delete_one(api, kind, &n.workload, spec, &mut report).await?;
    }
    delete_one(
        Api::<PodDisruptionBudget>::namespaced(client.clone(), ns),
        "PodDisruptionBudget",
        &n.workload,
        spec,
        &mut report,
    )
    .await?;
    delete_one(
        Api::<Deployment>::namespaced(client.clone(), ns),
        "Deployment",
        &n.workload,
        spec,
        &mut report,
    )
    .await?;
    delete_one(
        Api::<Secret>::namespaced(client.clone(), ns),
        "Secret",
        &n.config_secret,
        spec,
        &mut report,
    )
    .await?;
    delete_one(
        Api::<ServiceAccount>::namespaced(client.clone(), ns),
        "ServiceAccount",
        &n.workload,
        spec,
        &mut report,
    )
    .await?;
    delete_one(
        Api::<ConfigMap>::namespaced(client.clone(), ns),
        "ConfigMap",
        &n.marker,
        spec,
        &mut report,
    )
    .await?;
    Ok(report)
}
