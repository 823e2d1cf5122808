//! The standard `process_*` series (CPU seconds, resident and virtual memory, open and maximum
//! file descriptors, threads, start time), as every Prometheus client library exports them,
//! so the usual dashboards and alerts on them work unchanged. Read from the operating system
//! at each scrape, by the `metrics-process` crate.

use std::sync::LazyLock;

static COLLECTOR: LazyLock<metrics_process::Collector> =
    LazyLock::new(metrics_process::Collector::default);

/// Describes the series to the current recorder.
pub fn describe() {
    COLLECTOR.describe();
}

/// Reads the process's figures into the series (call before rendering).
pub fn collect() {
    COLLECTOR.collect();
}
