//! The spec's `monitoring` block: whether bootstrap writes a PodMonitor, and how it scrapes.

use crate::config::{Obj, Problems};
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
pub(crate) fn read_monitoring(
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prometheus_durations() {
        for ok in ["30s", "1m30s", "0", "1h", "500ms", "1y2w3d4h5m6s7ms"] {
            assert!(is_prometheus_duration(ok), "{ok}");
        }
        for bad in ["", "30", "s", "1.5s", "30S", "1s1m", "5mm", "-1s", "1ms1s"] {
            assert!(!is_prometheus_duration(bad), "{bad}");
        }
    }
}
