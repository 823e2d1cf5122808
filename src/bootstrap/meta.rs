//! What every object of a model version carries: its identity labels (the Deployment's
//! selector), the standard labels, the revision annotation, and the names bootstrap writes under.

use super::names::label_value;
use super::spec::Spec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use std::collections::BTreeMap;

/// Field manager of every server-side apply.
pub const FIELD_MANAGER: &str = "observation-publisher";
/// Annotation holding the spec revision, on every object and on the pod template.
pub const ANNOTATION_REVISION: &str = "observation-publisher.caraml.dev/revision";
/// Label keys of the version identity (also the Deployment selector).
pub const LABEL_PROJECT: &str = "observation-publisher.caraml.dev/project";
/// See [`LABEL_PROJECT`].
pub const LABEL_MODEL: &str = "observation-publisher.caraml.dev/model";
/// See [`LABEL_PROJECT`].
pub const LABEL_VERSION: &str = "observation-publisher.caraml.dev/model-version";
/// `app.kubernetes.io/name` value.
pub const APP_NAME: &str = "observation-publisher";
/// Name of the metrics/probe port (Merlin's, so existing monitors keep matching).
pub const PORT_NAME: &str = "prom-metric";

/// Labels that identify one model version; the Deployment selector.
pub fn selector_labels(spec: &Spec) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("app.kubernetes.io/name".to_string(), APP_NAME.to_string()),
        (LABEL_PROJECT.to_string(), label_value(&spec.project)),
        (LABEL_MODEL.to_string(), label_value(&spec.model)),
        (LABEL_VERSION.to_string(), label_value(&spec.version)),
    ])
}

/// Labels on every object and pod: the selector labels, the standard ones and the spec's own.
pub fn labels(spec: &Spec) -> BTreeMap<String, String> {
    let mut l = spec.labels.clone();
    l.extend(selector_labels(spec));
    l.insert(
        "app.kubernetes.io/instance".into(),
        spec.names.workload.clone(),
    );
    l.insert("app.kubernetes.io/component".into(), "worker".into());
    l.insert("app.kubernetes.io/managed-by".into(), FIELD_MANAGER.into());
    l
}

/// Metadata of an object named `name`: namespace, labels, the revision annotation and
/// `extra_annotations`.
pub(super) fn meta(spec: &Spec, name: &str, extra_annotations: &[(&str, String)]) -> ObjectMeta {
    let mut annotations =
        BTreeMap::from([(ANNOTATION_REVISION.to_string(), spec.revision.to_string())]);
    for (k, v) in extra_annotations {
        annotations.insert((*k).to_string(), v.clone());
    }
    ObjectMeta {
        name: Some(name.to_string()),
        namespace: Some(spec.namespace.clone()),
        labels: Some(labels(spec)),
        annotations: Some(annotations),
        ..ObjectMeta::default()
    }
}
