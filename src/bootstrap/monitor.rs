//! The objects that keep a version observed and available: an optional Prometheus Operator
//! `PodMonitor`, and a `PodDisruptionBudget` when more than one pod may run. Pure builders plus
//! the spec's `monitoring` block.

use super::manifest::{meta, selector_labels, PORT_NAME};
use super::spec::Spec;
use crate::config::{Obj, Problems};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{ApiResource, DynamicObject};
use serde_json::json;
use std::collections::BTreeMap;

/// Default scrape interval of the PodMonitor.
pub const DEFAULT_SCRAPE_INTERVAL: &str = "30s";

/// The spec's `monitoring` block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Monitoring {
    /// Write a `PodMonitor` for the version (off by default: it needs the Prometheus Operator).
    pub pod_monitor: bool,
    /// Its scrape interval (Prometheus duration).
    pub interval: String,
    /// Extra labels on the PodMonitor, e.g. what the Prometheus' `podMonitorSelector` matches.
    pub labels: BTreeMap<String, String>,
}

impl Default for Monitoring {
    fn default() -> Self {
        Monitoring {
            pod_monitor: false,
            interval: DEFAULT_SCRAPE_INTERVAL.into(),
            labels: BTreeMap::new(),
        }
    }
}

/// Whether `d` is a duration as Prometheus (and the PodMonitor schema) reads it: `30s`, `1m30s`.
pub fn is_prometheus_duration(d: &str) -> bool {
    const UNITS: [&str; 7] = ["y", "w", "d", "h", "m", "s", "ms"];
    if d == "0" {
        return true;
    }
    let mut rest = d;
    let mut last_unit = None;
    while !rest.is_empty() {
        let digits = rest.chars().take_while(char::is_ascii_digit).count();
        if digits == 0 {
            return false;
        }
        rest = &rest[digits..];
        // "ms" before "m": the longest unit that matches.
        let Some(i) = (0..UNITS.len())
            .rev()
            .find(|&i| rest.starts_with(UNITS[i]) && !(UNITS[i] == "m" && rest.starts_with("ms")))
        else {
            return false;
        };
        if last_unit.is_some_and(|l| i <= l) {
            return false;
        }
        last_unit = Some(i);
        rest = &rest[UNITS[i].len()..];
    }
    last_unit.is_some()
}

/// Reads `monitoring` (absent: defaults). `read_labels` validates the label map.
pub(super) fn read_monitoring(
    mut m: Obj<'_>,
    read_labels: impl FnOnce(Option<&serde_yaml_ng::Value>, &mut Problems) -> BTreeMap<String, String>,
    p: &mut Problems,
) -> Monitoring {
    let mut out = Monitoring::default();
    if m.is_absent() {
        return out;
    }
    out.pod_monitor = m.bool("pod_monitor", p).unwrap_or(false);
    if let Some(i) = m.text("interval", p) {
        if is_prometheus_duration(&i) {
            out.interval = i;
        } else {
            p.push(
                "monitoring.interval",
                format_args!("{i:?} is not a Prometheus duration (e.g. 30s, 1m30s)"),
            );
        }
    }
    out.labels = read_labels(m.get("labels"), p);
    out
}

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
    fn prometheus_durations() {
        for ok in ["30s", "1m30s", "0", "1h", "500ms", "1y2w3d4h5m6s7ms"] {
            assert!(is_prometheus_duration(ok), "{ok}");
        }
        for bad in ["", "30", "s", "1.5s", "30S", "1s1m", "5mm", "-1s", "1ms1s"] {
            assert!(!is_prometheus_duration(bad), "{bad}");
        }
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
