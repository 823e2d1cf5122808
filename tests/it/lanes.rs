//! One sink never stalls another: the real binary with Parquet (the local sink), BIGQUERY (the
//! emulator), ARIZE pointed at a server that holds every request until the test releases it, and
//! MAXCOMPUTE (the fake) whose move's INSERT answers Running for a while. While Arize hangs and
//! the move is held, Parquet and BigQuery keep writing batch after batch until the in-flight
//! budget is full (intake pauses, in-flight bytes stay within the budget and one batch), nothing
//! commits (commits wait for every sink); once Arize answers and the move ends, every offset
//! commits and each log is in each destination once.

use crate::bigquery::{fresh_name, grpc_url, manager, rest_url, serial, PROJECT};
use crate::http_capture::{Reply, Server};
use crate::maxcompute::fake::{http, Fake, ACCESS_ID, DATASET, SECRET};
use crate::runtime::{
    committed_total, create_topic, expected_rows, logs_at, produce, stop, unique, wait_for, Setup,
};
use observation_publisher::sink::maxcompute::ddl::table_name;
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(120);
const MAX_ROWS: usize = 500;

/// `(COUNT(*), COUNT(DISTINCT session_id, row_id))` of the model's table (0, 0 before it exists).
async fn bigquery_counts(dataset: &str) -> (u64, u64) {
    let sql = format!(
        "SELECT COUNT(*), COUNT(DISTINCT CONCAT(session_id, '/', row_id)) FROM `{PROJECT}.{dataset}.prediction_log_demo_fraud_detector`"
    );
    match manager().query(PROJECT, &sql).await {
        Ok(q) => {
            let n = |i: usize| {
                q.rows[0][i]
                    .as_deref()
                    .unwrap_or("0")
                    .parse::<u64>()
                    .unwrap_or(0)
            };
            (n(0), n(1))
        }
        Err(_) => (0, 0),
    }
}

fn metric(s: &Setup, name: &str) -> f64 {
    s.get("/metrics")
        .map(|(_, m)| {
            m.lines()
                .filter(|l| l.starts_with(name))
                .filter_map(|l| l.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()))
                .sum()
        })
        .unwrap_or(0.0)
}

/// INSERT instances the fake still answers Running for.
fn held_inserts(fake: &Fake) -> usize {
    fake.instances()
        .iter()
        .filter(|i| {
            i["sql"]
                .as_str()
                .is_some_and(|q| q.to_ascii_lowercase().contains("insert"))
                && i["running"].as_i64().is_some_and(|r| r > 0)
        })
        .count()
}

#[test]
fn a_hung_arize_and_a_held_maxcompute_move_delay_only_their_own_acknowledgements() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let _serial = rt.block_on(serial());
    let dataset = fresh_name("lanes");
    rt.block_on(manager().create_dataset(PROJECT, &dataset))
        .expect("emulator reachable");
    let maxcompute = Fake::start();
    let released = Arc::new(AtomicBool::new(false));
    let arize = Server::answering(Reply::Held(Arc::clone(&released)));

    let dir = tempfile::tempdir().unwrap();
    let topic = unique("lanes");
    create_topic(&topic, 1);
    let extra = format!(
        "observation_sinks:\n\
         - type: BIGQUERY\n  config:\n    project: {PROJECT}\n    dataset: {dataset}\n    ttl_days: 14\n\
         \x20   storage_endpoint: {}\n    rest_base_url: {}\n    auth: none\n    emulator_compat: true\n\
         - type: ARIZE\n  config:\n    api_key: k\n    space_key: s\n    uri: {}\n    request_timeout: 10m\n\
         - type: MAXCOMPUTE\n  config:\n    project: {}\n    dataset: {DATASET}\n    ttl_days: 0\n    access_key_id: {ACCESS_ID}\n    access_key_secret: {SECRET}\n    access_url: http://127.0.0.1:{}/api\n    interval: 1s\n",
        grpc_url(),
        rest_url(),
        arize.uri(),
        crate::maxcompute::fake::PROJECT,
        maxcompute.port,
    );
    let s = Setup::new(dir.path(), "l", &topic, &unique("g"), &extra);
    // A small budget: about eight 64 KiB batches in flight.
    let budget = 512 * 1024;
    let cfg = std::fs::read_to_string(&s.config).unwrap().replace(
        "batching:\n  linger: 300ms\n  max_rows: 500\n",
        &format!(
            "batching:\n  linger: 300ms\n  max_rows: {MAX_ROWS}\n  max_bytes: 64KiB\n  max_inflight_bytes: {budget}\n"
        ),
    );
    std::fs::write(&s.config, cfg).unwrap();
    let child = s.start();
    assert!(
        wait_for(LIMIT, || s.get("/readyz").is_some_and(|r| r.0 == 200)),
        "ready\n{}",
        s.log_tail()
    );
    // The first move's INSERT answers Running to its first 30 polls (about 30 s at the
    // client's 1 s poll interval: ample for the other sinks to fill the budget meanwhile, even
    // on a busy machine).
    let (status, _) = http(
        maxcompute.port,
        "POST",
        "/__fake/instance_faults",
        &[],
        br#"{"match": "^insert", "running_polls": 30}"#,
    );
    assert_eq!(status, 200);
    let n = 6000;
    // Recent request times: inside the BigQuery table's partition range and Arize's window.
    let hour_ago = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_micros() as i64
        - 3_600_000_000;
    let input = logs_at(n, 57, 0.0, hour_ago);
    produce(&topic, &input);

    // Arize holds its first request; the other sinks go on until the budget is full.
    assert!(
        wait_for(LIMIT, || arize.count() >= 1),
        "Arize was sent a request\n{}",
        s.log_tail()
    );
    assert!(
        wait_for(LIMIT, || metric(
            &s,
            "observation_publisher_paused_partitions"
        ) > 0.0),
        "intake pauses once the budget is full\n{}",
        s.log_tail()
    );
    assert!(
        wait_for(LIMIT, || held_inserts(&maxcompute) > 0),
        "a MaxCompute move is held\n{}",
        s.log_tail()
    );
    let parquet = s.rows().len();
    let (bq, _) = rt.block_on(bigquery_counts(&dataset));
    assert!(
        parquet >= 3 * MAX_ROWS && bq >= 3 * MAX_ROWS as u64,
        "Parquet ({parquet}) and BigQuery ({bq}) wrote several batches while Arize hung\n{}",
        s.log_tail()
    );
    assert!(parquet < n, "not everything was read ahead: {parquet}");
    let inflight = metric(&s, "observation_publisher_inflight_bytes");
    assert!(
        inflight <= (budget + 64 * 1024) as f64,
        "in-flight bytes stay within the budget and one batch: {inflight}"
    );
    assert_eq!(
        arize.count(),
        1,
        "Arize takes one request at a time: its own lane waits"
    );
    assert_eq!(
        committed_total(&topic, &s.group, 1),
        0,
        "commits wait for every sink"
    );
    assert!(
        held_inserts(&maxcompute) > 0,
        "the MaxCompute move was still held while the others wrote"
    );

    // Arize answers: everything is written and committed.
    released.store(true, Ordering::SeqCst);
    assert!(
        wait_for(LIMIT, || committed_total(&topic, &s.group, 1) == n as i64),
        "every offset commits once Arize answers\n{}",
        s.log_tail()
    );
    assert_eq!(stop(child), Some(0));
    let want: BTreeSet<(String, String)> = expected_rows(&input, 57);
    let rows = s.rows();
    assert_eq!(rows.len(), n, "Parquet wrote each row once");
    assert_eq!(rows.into_iter().collect::<BTreeSet<_>>(), want);
    assert_eq!(rt.block_on(bigquery_counts(&dataset)), (n as u64, n as u64));
    let key = format!(
        "{}.{DATASET}.{}",
        crate::maxcompute::fake::PROJECT,
        table_name("demo", "fraud-detector")
    );
    let sessions: Vec<String> = maxcompute.dump("tables")[&key]["rows"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|r| r["session_id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(sessions.len(), n, "MaxCompute holds each row once");
    assert_eq!(
        sessions.into_iter().collect::<BTreeSet<_>>(),
        want.iter().map(|(session, _)| session.clone()).collect()
    );
}
