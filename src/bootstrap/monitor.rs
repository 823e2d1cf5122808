//! The objects that keep a version observed and available: an optional Prometheus Operator
//! `PodMonitor` (settings: the spec's `monitoring` block) and a `PodDisruptionBudget` when more
//! than one pod may run. Pure builders.

use super::meta::{meta, selector_labels, PORT_NAME};
use super::spec::Spec;
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{ApiResource, DynamicObject};
use serde_json::json;
use std::collections::BTreeMap;

/// The Prometheus Operator's `PodMonitor` resource.
pub fn pod_monitor_resource() -> ApiResource {
    ApiResource {
        group: "monitoring.coreos.com".into(),
        version: "v1".into(),
        api_version: "monitoring.coreos.com/v1".into(),
        kind: "PodMonitor".into(),
        plural: "podmonitors".into(),
    }
}

/// The PodMonitor scraping the version's pods on their metrics port, when the spec asks for it.
pub fn pod_monitor(spec: &Spec) -> Option<DynamicObject> {
    let m = &spec.monitoring;
    if !m.pod_monitor {
        return None;
    }
    let mut obj = DynamicObject::new(&spec.names.workload, &pod_monitor_resource()).data(json!({
        "spec": {
            "selector": {"matchLabels": selector_labels(spec)},
            "podMetricsEndpoints": [{
                "port": PORT_NAME,
                "path": "/metrics",
                "interval": m.interval,
            }],
        }
    }));
    obj.metadata = meta(spec, &spec.names.workload, &[]);
    let labels = obj.metadata.labels.get_or_insert_with(BTreeMap::new);
    for (k, v) in &m.labels {
        labels.entry(k.clone()).or_insert_with(|| v.clone());
    }
    Some(obj)
}

/// The most pods the version may run: `replicas`, or KEDA's maximum.
pub fn max_pods(spec: &Spec) -> i32 {
    spec.autoscaling
        .as_ref()
        .map_or(spec.replicas, |a| a.max_replicas)
}

/// A `PodDisruptionBudget` allowing one pod down at a time, when more than one pod may run.
/// None for a single pod: a budget there can only delay a node drain, never keep intake up.
pub fn disruption_budget(spec: &Spec) -> Option<PodDisruptionBudget> {
    (max_pods(spec) > 1).then(|| PodDisruptionBudget {
        metadata: meta(spec, &spec.names.workload, &[]),
        spec: Some(PodDisruptionBudgetSpec {
            max_unavailable: Some(IntOrString::Int(1)),
            selector: Some(LabelSelector {
                match_labels: Some(selector_labels(spec)),
                ..LabelSelector::default()
            }),
            ..PodDisruptionBudgetSpec::default()
        }),
        status: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bootstrap::spec::tests::MINIMAL;

    fn spec(extra: &str) -> Spec {
        let text = MINIMAL.replace("namespace: mlobs", &format!("namespace: mlobs\n{extra}"));
        Spec::parse(&text).unwrap_or_else(|p| panic!("{p}")).0
    }

    #[test]
    fn a_budget_only_where_more_than_one_pod_may_run() {
        assert!(disruption_budget(&spec("replicas: 1")).is_none());
        let pdb = disruption_budget(&spec("replicas: 2")).unwrap();
        let s = pdb.spec.unwrap();
        assert_eq!(s.max_unavailable, Some(IntOrString::Int(1)));
        assert!(s.min_available.is_none());
        let one = spec("replicas: 1\nautoscaling: {min_replicas: 1, max_replicas: 1}");
        assert!(disruption_budget(&one).is_none());
        let scaled = spec("replicas: 1\nautoscaling: {min_replicas: 1, max_replicas: 3}");
        assert_eq!(
            disruption_budget(&scaled).unwrap().spec.unwrap().selector,
            Some(LabelSelector {
                match_labels: Some(selector_labels(&scaled)),
                ..LabelSelector::default()
            })
        );
    }

    #[test]
    fn the_pod_monitor_is_off_unless_asked_for() {
        assert!(pod_monitor(&spec("")).is_none());
        let s = spec("monitoring: {pod_monitor: true, interval: 15s, labels: {release: prom}}");
        let pm = pod_monitor(&s).unwrap();
        assert_eq!(pm.data["spec"]["podMetricsEndpoints"][0]["port"], PORT_NAME);
        assert_eq!(pm.data["spec"]["podMetricsEndpoints"][0]["interval"], "15s");
        assert_eq!(pm.metadata.labels.as_ref().unwrap()["release"], "prom");
        let bad = MINIMAL.replace(
            "namespace: mlobs",
            "namespace: mlobs\nmonitoring: {pod_monitor: yes please, interval: 30}",
        );
        let problems = Spec::parse(&bad).unwrap_err().to_string();
        assert!(problems.contains("monitoring.pod_monitor"), "{problems}");
        assert!(problems.contains("monitoring.interval"), "{problems}");
    }
}
