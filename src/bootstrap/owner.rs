//! Which objects are this version's.
//!
//! - Before any update or delete, the object found under a name is checked against the
//!   version's identity labels (project, model and version label values): an object labelled
//!   for another model version is never overwritten or deleted ([`check`]).
//! - Objects created under the previous naming scheme ([`Names::legacy`]), which two model
//!   identities could share, are found by those names and **adopted** when their identity labels
//!   are this version's ([`resolve`]): the running Deployment is updated in place (no second
//!   set of pods, the same ServiceAccount and so the same workload-identity binding), and the
//!   consumer group it uses is kept, so the topic is not consumed again from the start.
//!
//! Both need only `get` on the objects; nothing lists.

use super::error::BootstrapError;
use super::manifest::CONFIG_ITEM;
use super::meta::{selector_labels, LABEL_MODEL, LABEL_PROJECT, LABEL_VERSION};
use super::names::Names;
use super::spec::{default_group, legacy_default_group, Spec};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::Api;
use kube::{Client, Resource};

/// Whether `meta` carries this version's identity labels.
pub fn is_ours(spec: &Spec, meta: &ObjectMeta) -> bool {
    let want = selector_labels(spec);
    let have = meta.labels.as_ref();
    [LABEL_PROJECT, LABEL_MODEL, LABEL_VERSION].iter().all(|k| {
        have.and_then(|h| h.get(*k)).is_some() && have.and_then(|h| h.get(*k)) == want.get(*k)
    })
}

/// The identity an object's labels name, for messages.
pub fn owner(meta: &ObjectMeta) -> String {
    let l = meta.labels.clone().unwrap_or_default();
    let get = |k: &str| l.get(k).map_or("<none>".to_string(), |v| format!("{v:?}"));
    format!(
        "project {}, model {}, version {}",
        get(LABEL_PROJECT),
        get(LABEL_MODEL),
        get(LABEL_VERSION)
    )
}

/// This version's identity, as its labels spell it.
pub fn ours(spec: &Spec) -> String {
    let l = selector_labels(spec);
    format!(
        "project {:?}, model {:?}, version {:?}",
        l[LABEL_PROJECT], l[LABEL_MODEL], l[LABEL_VERSION]
    )
}

/// Reads `kind/name`; an object that exists but is labelled for another version is an error
/// ([`BootstrapError::NotOurs`]).
pub async fn check<K>(
    api: &Api<K>,
    kind: &str,
    name: &str,
    spec: &Spec,
) -> Result<Option<K>, BootstrapError>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let what = format!("{kind} {}/{name}", spec.namespace);
    match api
        .get_opt(name)
        .await
        .map_err(|e| BootstrapError::kube(format!("read {what}"), e))?
    {
        Some(obj) if !is_ours(spec, obj.meta()) => Err(BootstrapError::NotOurs {
            object: what,
            owner: owner(obj.meta()),
            ours: ours(spec),
        }),
        other => Ok(other),
    }
}

/// The consumer group in a config Secret's `config.yaml`.
fn group_in(secret: &Secret) -> Option<String> {
    let bytes = secret.data.as_ref()?.get(CONFIG_ITEM)?;
    let v: serde_yaml_ng::Value = serde_yaml_ng::from_slice(&bytes.0).ok()?;
    v.get("observation_source")?
        .get("config")?
        .get("group_id")?
        .as_str()
        .map(str::to_string)
}

/// The spec with the names (and consumer group) bootstrap must use in the cluster: the
/// version's own names, or the previous scheme's when a Deployment created with them carries
/// this version's identity labels (then also its consumer group, unless the spec names one).
pub async fn resolve(client: &Client, spec: &Spec) -> Result<Spec, BootstrapError> {
    let legacy = Names::legacy(&spec.project, &spec.model, &spec.version);
    if legacy == spec.names {
        return Ok(spec.clone());
    }
    let ns = &spec.namespace;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), ns);
    let read = |name: &str| format!("read Deployment {ns}/{name}");
    if deployments
        .get_opt(&spec.names.workload)
        .await
        .map_err(|e| BootstrapError::kube(read(&spec.names.workload), e))?
        .is_some()
    {
        return Ok(spec.clone());
    }
    let old = deployments
        .get_opt(&legacy.workload)
        .await
        .map_err(|e| BootstrapError::kube(read(&legacy.workload), e))?;
    match old {
        Some(d) if is_ours(spec, &d.metadata) => {}
        // Absent, or another identity's under the shared old name: ours get the new names.
        _ => return Ok(spec.clone()),
    }
    let mut adopted = spec.clone();
    adopted.names = legacy;
    if spec.group_id() == default_group(&spec.project, &spec.model, &spec.version) {
        let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
        let secret = secrets
            .get_opt(&adopted.names.config_secret)
            .await
            .map_err(|e| {
                BootstrapError::kube(
                    format!("read Secret {ns}/{}", adopted.names.config_secret),
                    e,
                )
            })?;
        let group = secret
            .filter(|s| is_ours(spec, &s.metadata))
            .as_ref()
            .and_then(group_in)
            .unwrap_or_else(|| legacy_default_group(&spec.project, &spec.model, &spec.version));
        adopted.set_group_id(&group);
    }
    tracing::info!(
        "adopting Deployment {ns}/{} (created before names carried the identity hash); consumer group {:?} is kept",
        adopted.names.workload,
        adopted.group_id()
    );
    Ok(adopted)
}
