//! Over the in-flight budget the publisher first holds intake (it stops polling) and pauses the
//! partitions only when a hold lasts a second: a resume leaves librdkafka's fetcher idle until
//! its broker thread next wakes, up to a second, which a sink acknowledging in a round trip
//! would pay on every cycle. Here the BIGQUERY sink appends to the 100 ms stand-in
//! ([`SlowAck`]) with a budget a few batches wide, so intake reaches it again and again.

use super::slow_ack::SlowAck;
use super::*;
use crate::runtime::{
    committed_total, create_topic, free_port, http_get, logs, produce, stop, unique, wait_for,
};
use std::process::Stdio;

const LIMIT: Duration = Duration::from_secs(120);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sink_acknowledging_in_a_round_trip_holds_intake_without_pausing() {
    let dataset = fresh_name("hold");
    manager()
        .create_dataset(PROJECT, &dataset)
        .await
        .expect("emulator reachable");
    let server = SlowAck::start().await;
    let dir = tempfile::tempdir().unwrap();
    let topic = unique("bq-hold");
    tokio::task::block_in_place(|| create_topic(&topic, 2));
    let base = std::fs::read_to_string(crate::common::repo_config("local.yaml")).unwrap();
    let base: String = base
        .lines()
        .take_while(|l| !l.starts_with("observation_source:"))
        .map(|l| format!("{l}\n"))
        .collect();
    let port = free_port();
    let group = unique("g");
    let yaml = format!(
        "{base}observation_source:\n  type: KAFKA\n  config:\n    topic: {topic}\n    bootstrap_servers: {}\n    group_id: {group}\n\
         observation_sinks:\n- type: BIGQUERY\n  config:\n    project: {PROJECT}\n    dataset: {dataset}\n    ttl_days: 14\n\
         \x20   storage_endpoint: {}\n    rest_base_url: {}\n    auth: none\n    emulator_compat: true\n\
         \x20   max_request_bytes: 64KiB\n    max_inflight_bytes: 1MiB\n\
         dead_letter:\n  target: file\n  path: {}\nbatching:\n  linger: 50ms\n  max_inflight_bytes: 256KiB\n  max_bytes: 32KiB\n\
         consumer:\n  session_timeout: 6s\n  commit_interval: 200ms\nlogging:\n  format: json\n\
         server:\n  listen: 127.0.0.1:{port}\n",
        crate::runtime::brokers(),
        server.url,
        rest_url(),
        dir.path().join("dead.bin").display(),
    );
    let config = dir.path().join("config.yaml");
    std::fs::write(&config, yaml).unwrap();
    let group = crate::common::consumer_group_of(&config);
    let log = dir.path().join("run.log");
    let child = crate::common::Reaped(
        crate::common::bin()
            .args(["run", "-c", config.to_str().unwrap()])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap(),
    );
    let all = logs(3000, 71, 0.0);
    tokio::task::block_in_place(|| produce(&topic, &all));
    let (t, g) = (topic.clone(), group.clone());
    let done =
        tokio::task::spawn_blocking(move || wait_for(LIMIT, || committed_total(&t, &g, 2) == 3000))
            .await
            .unwrap();
    let metrics = http_get(port, "/metrics").map(|r| r.1).unwrap_or_default();
    let code = tokio::task::spawn_blocking(move || stop(child))
        .await
        .unwrap();
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(done, "every offset committed\n{text}");
    assert_eq!(code, Some(0), "{text}");
    let holds: f64 = metrics
        .lines()
        .find_map(|l| {
            l.strip_prefix("observation_publisher_intake_holds_total ")?
                .parse()
                .ok()
        })
        .unwrap_or(0.0);
    assert!(
        holds >= 3.0,
        "intake reached the budget and was held: {holds} holds\n{metrics}"
    );
    assert_eq!(
        text.matches("partitions paused").count(),
        0,
        "no hold lasted a second, so nothing was paused\n{text}"
    );
}
