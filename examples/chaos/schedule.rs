//! The fault schedule: what happens when, as fractions of the load's duration, so that a
//! two-minute run and a ten-minute run go through the same faults in the same order.

use std::time::Duration;

/// One thing the harness does to the system under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Action {
    /// SIGKILL publisher slot `n`.
    Kill(usize),
    /// Start publisher slot `n` (after a kill or a stop).
    Start(usize),
    /// SIGTERM publisher slot `n` and wait for its drain (scale down).
    Stop(usize),
    /// Make BigQuery unreachable (REST and gRPC proxies refuse).
    SinkDown,
    /// Note the committed offsets and RSS once the outage has settled.
    SinkSnapshot,
    /// Check that offsets did not advance, then make BigQuery reachable again.
    SinkUp,
    /// Cut every Kafka connection of the publishers.
    KafkaDown,
    /// Let them reconnect.
    KafkaUp,
    /// Queue a burst of gRPC faults on the next AppendRows requests.
    GrpcFaults,
}

/// One scheduled action.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Step {
    pub(crate) at: Duration,
    pub(crate) action: Action,
}

/// The schedule for a load of `load` length. `settle` is how long after the sink goes down the
/// offsets are noted (every acknowledgement from before the outage has been committed by then).
pub(crate) fn plan(load: Duration, settle: Duration) -> Vec<Step> {
    use Action::{
        GrpcFaults, KafkaDown, KafkaUp, Kill, SinkDown, SinkSnapshot, SinkUp, Start, Stop,
    };
    let restart = Duration::from_secs(3);
    let gap = Duration::from_secs(5);
    let at = |f: f64| load.mul_f64(f);
    let outage = load
        .mul_f64(0.1)
        .clamp(Duration::from_secs(20), Duration::from_secs(60));
    let cut = load
        .mul_f64(0.04)
        .clamp(Duration::from_secs(8), Duration::from_secs(20));
    // Phases do not overlap (a phase starts at its fraction of the load, or `gap` after the
    // previous one ended if that is later), so each effect can be told apart in the logs.
    let mut steps = Vec::new();
    let mut free = Duration::ZERO;
    let mut phase = |f: f64, len: Duration, what: &[(Duration, Action)]| {
        let start = at(f).max(free);
        for (offset, action) in what {
            steps.push((start + *offset, *action));
        }
        free = start + len + gap;
    };
    let z = Duration::ZERO;
    phase(0.08, restart, &[(z, Kill(0)), (restart, Start(0))]);
    phase(0.16, z, &[(z, GrpcFaults)]);
    phase(0.24, at(0.10), &[(z, Stop(1)), (at(0.10), Start(1))]);
    phase(0.42, restart, &[(z, Kill(1)), (restart, Start(1))]);
    phase(
        0.50,
        outage,
        &[(z, SinkDown), (settle, SinkSnapshot), (outage, SinkUp)],
    );
    phase(0.66, cut, &[(z, KafkaDown), (cut, KafkaUp)]);
    phase(0.76, restart, &[(z, Kill(0)), (restart, Start(0))]);
    phase(0.80, z, &[(z, GrpcFaults)]);
    phase(
        0.88,
        restart,
        &[
            (z, Kill(0)),
            (z, Kill(1)),
            (restart, Start(0)),
            (restart, Start(1)),
        ],
    );
    steps.sort_by_key(|s| s.0);
    steps
        .into_iter()
        .map(|(at, action)| Step { at, action })
        .collect()
}
