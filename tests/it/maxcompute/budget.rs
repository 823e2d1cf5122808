//! Staged rows' bookkeeping against the in-flight budget, in the binary through the fake with
//! the real broker: with an interval the test never reaches and a small
//! `batching.max_inflight_bytes`, the bookkeeping of staged rows fills half the budget, the
//! sink moves early, intake pauses at the whole budget while that move is held, and resumes
//! once it finishes; every log lands once and commits.

use super::fake::{Fake, DATASET};
use super::sink::{key, sink_yaml, staging_of, start, table_rows, target, LIMIT};
use crate::runtime::{committed_total, create_topic, logs, produce, unique, wait_for, Setup};
use serde_json::json;

#[test]
fn staged_rows_bookkeeping_holds_intake_and_moves_early() {
    let fake = Fake::start();
    let dir = tempfile::tempdir().unwrap();
    let topic = unique("mc-budget");
    create_topic(&topic, 1);
    let s = Setup::new(
        dir.path(),
        "a",
        &topic,
        &unique("g"),
        &sink_yaml(&fake, "1h"),
    );
    // A budget a few hundred staged logs' bookkeeping fills, with batches of a few dozen.
    let config = std::fs::read_to_string(&s.config).unwrap().replace(
        "batching:\n  linger: 300ms\n  max_rows: 500\n",
        "batching:\n  linger: 300ms\n  max_rows: 500\n  max_bytes: 8KiB\n  max_inflight_bytes: 64KiB\n",
    );
    std::fs::write(&s.config, config).unwrap();
    let child = start(&s, "pod-budget");
    assert!(
        wait_for(LIMIT, || staging_of(&fake, "pod-budget").is_some()),
        "{}",
        s.log_tail()
    );
    let staging = staging_of(&fake, "pod-budget").unwrap();
    // The first move's INSERT stays Running until released: only an early move can start it
    // (the interval is an hour), and while it runs the bookkeeping fills the budget.
    fake.arm_instance(json!({"match": "^insert", "defer": true}));
    let all = logs(3000, 55, 0.0);
    produce(&topic, &all);
    let held = wait_for(LIMIT, || fake.instances().iter().any(|i| i["held"] == true));
    assert!(held, "an early move started\n{}", s.log_tail());
    assert!(
        wait_for(LIMIT, || s.log_count("in-flight budget used up") >= 1),
        "intake paused while the move is held\n{}",
        s.log_tail()
    );
    assert_eq!(s.log_count("bookkeeping of staged rows fills half"), 1);
    let staged = fake.dump("tables")[&staging]["rows"]
        .as_array()
        .map_or(0, |r| r.len());
    assert!(staged < all.len(), "intake held: {staged} staged");
    assert_eq!(committed_total(&topic, &s.group, 1), 0, "nothing moved yet");
    let metrics = s.get("/metrics").map(|(_, m)| m).unwrap_or_default();
    let bookkeeping = metrics
        .lines()
        .find_map(|l| l.strip_prefix("observation_publisher_bookkeeping_bytes "))
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap_or(0.0);
    assert!(bookkeeping >= 32.0 * 1024.0, "{bookkeeping}\n{metrics}");

    fake.release();
    // Early moves carry intake through the whole topic, an hour before the interval.
    assert!(
        wait_for(LIMIT, || committed_total(&topic, &s.group, 1) >= 2000),
        "{}",
        s.log_tail()
    );
    assert!(s.log_count("in-flight budget available: partitions resumed") >= 1);
    // Every log read: moved, or staged under half the budget (left for the stop's move).
    let rows = |t: &str| {
        fake.dump("tables")[t]["rows"]
            .as_array()
            .map_or(0, |r| r.len())
    };
    let target_key = key(DATASET, &target());
    assert!(
        wait_for(LIMIT, || rows(&target_key) + rows(&staging) == all.len()),
        "{}",
        s.log_tail()
    );
    let code = child.stop();
    assert_eq!(code, Some(0), "{}", s.log_tail());
    let mut committed = 0;
    let all_committed = wait_for(LIMIT, || {
        committed = committed_total(&topic, &s.group, 1);
        committed == all.len() as i64
    });
    assert!(all_committed, "{committed} committed\n{}", s.log_tail());
    let (rows, count) = table_rows(&fake, &key(DATASET, &target()));
    assert_eq!(
        (rows.len(), count),
        (all.len(), all.len()),
        "each log exactly once in the target"
    );
}
