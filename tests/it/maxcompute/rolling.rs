//! A rolling restart of three publishers in one consumer group under steady load, with the
//! MAXCOMPUTE sink (the fake) and the BIGQUERY sink (the emulator, at_least_once) side by side:
//! every rebalance revokes every partition (eager assignment), no process is killed, and every
//! log is in each target exactly once.

use super::fake::{Fake, DATASET};
use super::sink::{key, sink_yaml, start, table_rows, target, Running, LIMIT};
use crate::bigquery::{fresh_name, grpc_url, manager, rest_url, serial, PROJECT};
use crate::runtime::{committed_total, create_topic, logs_at, produce, unique, wait_for, Setup};
use std::time::Duration;

/// `(COUNT(*), COUNT(DISTINCT session_id))` of the model's BigQuery table.
async fn bq_counts(dataset: &str) -> (u64, u64) {
    let sql = format!(
        "SELECT COUNT(*), COUNT(DISTINCT session_id) FROM `{PROJECT}.{dataset}.prediction_log_demo_fraud_detector`"
    );
    let q = manager().query(PROJECT, &sql).await.expect("query");
    let n = |i: usize| {
        q.rows[0][i]
            .as_deref()
            .unwrap_or("0")
            .parse::<u64>()
            .unwrap()
    };
    (n(0), n(1))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_restart_of_three_publishers_writes_each_log_once_in_each_target() {
    let _serial = serial().await;
    let dataset = fresh_name("rolling");
    manager()
        .create_dataset(PROJECT, &dataset)
        .await
        .expect("emulator reachable");
    let fake = Fake::start();
    let dir = tempfile::tempdir().unwrap();
    let topic = unique("mc-rolling");
    let group = unique("g");
    tokio::task::block_in_place(|| create_topic(&topic, 3));
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_micros() as i64;
    // Within the BigQuery table's partition range (the last 14 days).
    let all = logs_at(900, 54, 0.0, now - 3_600_000_000);
    let sinks = format!(
        "{}- type: BIGQUERY\n  config:\n    project: {PROJECT}\n    dataset: {dataset}\n    ttl_days: 14\n\
         \x20   storage_endpoint: {}\n    rest_base_url: {}\n    auth: none\n    emulator_compat: true\n\
         delivery: at_least_once\n",
        sink_yaml(&fake, "2s"),
        grpc_url(),
        rest_url(),
    );
    let setups: Vec<Setup> = (0..3)
        .map(|i| Setup::new(dir.path(), &format!("p{i}"), &topic, &group, &sinks))
        .collect();
    let mut pods: Vec<Running> = setups
        .iter()
        .enumerate()
        .map(|(i, s)| start(s, &format!("pod-{i}")))
        .collect();

    // Steady load: 30 logs every 200 ms while the pods restart one after the other.
    let t = topic.clone();
    let load = all.clone();
    let producer = std::thread::spawn(move || {
        for chunk in load.chunks(30) {
            produce(&t, chunk);
            std::thread::sleep(Duration::from_millis(200));
        }
    });
    for (i, s) in setups.iter().enumerate() {
        tokio::time::sleep(Duration::from_secs(2)).await;
        let pod = pods.remove(i);
        let code = tokio::task::block_in_place(|| pod.stop());
        assert_eq!(code, Some(0), "pod-{i} stopped cleanly\n{}", s.log_tail());
        pods.insert(i, start(s, &format!("pod-{i}")));
    }
    producer.join().unwrap();
    let n = all.len() as i64;
    let group = &setups[0].group;
    let done =
        tokio::task::block_in_place(|| wait_for(LIMIT, || committed_total(&topic, group, 3) == n));
    let tails: String = setups.iter().map(|s| s.log_tail()).collect();
    assert!(done, "every offset committed\n{tails}");
    for (i, pod) in pods.into_iter().enumerate() {
        let code = tokio::task::block_in_place(|| pod.stop());
        assert_eq!(code, Some(0), "pod-{i}\n{}", setups[i].log_tail());
    }

    let (rows, count) = table_rows(&fake, &key(DATASET, &target()));
    assert_eq!(
        (rows.len(), count),
        (all.len(), all.len()),
        "MAXCOMPUTE: each log once\n{tails}"
    );
    let (count, distinct) = bq_counts(&dataset).await;
    assert_eq!(
        (count, distinct),
        (all.len() as u64, all.len() as u64),
        "BIGQUERY: each log once\n{tails}"
    );
}
