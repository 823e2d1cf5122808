//! The MAXCOMPUTE sink's moves in the binary, through the fake with the real broker.
//!
//! - [`a_move_inserts_once_through_poll_errors_and_upper_case_statuses`]: a 403
//!   `RequestTimeTooSkewed` while a move's `INSERT` runs and task statuses answered `SUCCESS`
//!   (upper-case, as pyodps compares them): one `INSERT` per move, every row once, the skew
//!   reported as clock skew and each poll error counted.
//! - [`a_revoke_duplicates_no_staged_row`]: pod A stages rows (an interval it does not reach),
//!   pod B joins the same group: A's revoke moves and commits them, each log is in the target
//!   once, both exit 0.
//! - [`a_move_past_move_timeout_is_unready_until_it_finishes`]: an `INSERT` instance held
//!   `Running` past `move_timeout: 10s` makes `/readyz` answer 503 naming MaxCompute and the
//!   instance, is counted and logged once, and is still polled: released, it finishes, the
//!   offsets commit and the process is ready again.
//! - [`a_session_stale_at_commit_is_replaced_at_once`]: `TableModified` at commit (a session
//!   opened before a move's `TRUNCATE`) is answered with a new session, not a failed write.

use super::fake::{Fake, DATASET};
use super::sink::{
    key, sink_yaml, staging_of, start, start_staged, table_names, table_rows, target, LIMIT,
};
use crate::runtime::{committed_total, create_topic, logs, produce, unique, wait_for, Setup};
use serde_json::json;
use std::time::Duration;

/// The value of the sample `name` (no labels) in Prometheus text, if present.
fn sample(metrics: &str, name: &str) -> Option<f64> {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
}

/// The statements the fake was given that match `pattern` (a regex, on the lower-cased text).
pub(super) fn statements(fake: &Fake, pattern: &str) -> usize {
    let re = regex::Regex::new(pattern).unwrap();
    fake.instances()
        .iter()
        .filter(|i| re.is_match(&i["sql"].as_str().unwrap().to_lowercase()))
        .count()
}

/// A moved partition's drop, as the mover writes it.
pub(super) const DROP_PARTITION: &str = r"^alter table \S+ drop if exists partition";

#[test]
fn a_move_inserts_once_through_poll_errors_and_upper_case_statuses() {
    let fake = Fake::start();
    let dir = tempfile::tempdir().unwrap();
    let topic = unique("mc-once");
    create_topic(&topic, 1);
    // Every instance answers its task status upper-case, the DDL at start included.
    fake.arm(json!({"upper_status": 1_000_000}));
    let (child, s) = start_staged(&fake, dir.path(), &topic, "pod-once");
    let all = logs(120, 51, 0.0);
    for (i, part) in all.chunks(60).enumerate() {
        // The next instance is the next move's INSERT: Running for a few polls, one of which
        // is answered 403 RequestTimeTooSkewed.
        fake.arm(json!({"running_polls": 3, "skewed_polls": 1}));
        produce(&topic, part);
        let want = (60 * (i + 1)) as i64;
        assert!(
            wait_for(LIMIT, || committed_total(&topic, &s.group, 1) == want),
            "{}",
            s.log_tail()
        );
    }
    let metrics = s.get("/metrics").map(|(_, m)| m).unwrap_or_default();
    let code = child.stop();
    assert_eq!(code, Some(0), "{}", s.log_tail());
    let poll_errors: f64 = metrics
        .lines()
        .find(|l| l.starts_with("observation_publisher_maxcompute_poll_errors_total"))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or(0.0);
    assert!(
        poll_errors >= 2.0,
        "both skewed polls counted
{metrics}"
    );
    let (rows, count) = table_rows(&fake, &key(DATASET, &target()));
    assert_eq!((rows.len(), count), (120, 120), "every row exactly once");
    let (inserts, drops) = (
        statements(&fake, "^insert"),
        statements(&fake, DROP_PARTITION),
    );
    assert!(inserts >= 2, "at least one move per produce: {inserts}");
    assert_eq!(inserts, drops, "one INSERT per move");
    assert!(
        s.log_count("clock skew") >= 2,
        "the skew is named\n{}",
        s.log_tail()
    );
    assert_eq!(s.log_count("check the MAXCOMPUTE sink's access_key_id"), 0);
}

#[test]
fn a_revoke_duplicates_no_staged_row() {
    let fake = Fake::start();
    let dir = tempfile::tempdir().unwrap();
    let topic = unique("mc-revoke");
    create_topic(&topic, 2);
    let group = unique("g");
    let all = logs(100, 52, 0.0);
    // An interval neither pod reaches while the test runs: only a revoke or a stop moves.
    let a = Setup::new(dir.path(), "a", &topic, &group, &sink_yaml(&fake, "1h"));
    let pod_a = start(&a, "pod-a");
    produce(&topic, &all);
    let staged = wait_for(LIMIT, || {
        let staging_a = staging_of(&fake, "pod-a").unwrap_or_default();
        fake.dump("tables")[&staging_a]["rows"]
            .as_array()
            .is_some_and(|r| r.len() == all.len())
    });
    assert!(staged, "pod A staged every log\n{}", a.log_tail());
    assert_eq!(committed_total(&topic, &a.group, 2), 0, "nothing moved yet");

    let b = Setup::new(dir.path(), "b", &topic, &group, &sink_yaml(&fake, "1h"));
    let pod_b = start(&b, "pod-b");
    // The rebalance revokes A's partitions: A moves what it staged and commits it.
    assert_eq!(a.group, b.group, "one group");
    let committed = wait_for(LIMIT, || {
        committed_total(&topic, &a.group, 2) == all.len() as i64
    });
    assert!(committed, "A's revoke committed\n{}", a.log_tail());
    assert_eq!(a.log_count("revoke deadline passed"), 0, "{}", a.log_tail());
    let (code_b, code_a) = (pod_b.stop(), pod_a.stop());
    assert_eq!(code_a, Some(0), "{}", a.log_tail());
    assert_eq!(code_b, Some(0), "{}", b.log_tail());
    let (rows, count) = table_rows(&fake, &key(DATASET, &target()));
    assert_eq!(
        (rows.len(), count),
        (all.len(), all.len()),
        "each log exactly once in the target"
    );
    assert_eq!(table_names(&fake), vec![key(DATASET, &target())]);
}

/// An upload session whose table a move truncated before its commit is refused with
/// `TableModified` (the fake, as the service does): the batch is written again in a new session
/// at once, not handed back to the runtime as a failed write.
#[test]
fn a_session_stale_at_commit_is_replaced_at_once() {
    let fake = Fake::start();
    let dir = tempfile::tempdir().unwrap();
    let topic = unique("mc-stale");
    create_topic(&topic, 1);
    let (child, s) = start_staged(&fake, dir.path(), &topic, "pod-stale");
    fake.arm(json!({"table_modified": 2}));
    let all = logs(80, 53, 0.0);
    produce(&topic, &all);
    assert!(
        wait_for(LIMIT, || committed_total(&topic, &s.group, 1)
            == all.len() as i64),
        "{}",
        s.log_tail()
    );
    let metrics = s.get("/metrics").map(|(_, m)| m).unwrap_or_default();
    let code = child.stop();
    assert_eq!(code, Some(0), "{}", s.log_tail());
    assert!(
        s.log_count("stale at commit") >= 2,
        "both stale commits replaced\n{}",
        s.log_tail()
    );
    let failed_writes: Vec<&str> = metrics
        .lines()
        .filter(|l| {
            l.starts_with("observation_publisher_sink_errors_total")
                && l.contains("sink=\"maxcompute\"")
                && !l.ends_with(" 0")
        })
        .collect();
    assert!(
        failed_writes.is_empty(),
        "no write failed: {failed_writes:?}"
    );
    assert!(metrics.contains("observation_publisher_"), "{metrics}");
    let (rows, count) = table_rows(&fake, &key(DATASET, &target()));
    assert_eq!((rows.len(), count), (80, 80), "every row exactly once");
}

#[test]
fn a_move_past_move_timeout_is_unready_until_it_finishes() {
    let fake = Fake::start();
    let dir = tempfile::tempdir().unwrap();
    let topic = unique("mc-overdue");
    create_topic(&topic, 1);
    let yaml = sink_yaml(&fake, "1s") + "    move_timeout: 10s\n";
    let s = Setup::new(dir.path(), "a", &topic, &unique("g"), &yaml);
    let child = start(&s, "pod-overdue");
    let ready = || s.get("/readyz").is_some_and(|(code, _)| code == 200);
    assert!(
        wait_for(LIMIT, || staging_of(&fake, "pod-overdue").is_some()
            && ready()),
        "{}",
        s.log_tail()
    );
    // The first move's INSERT stays Running (and inserts nothing) until released.
    fake.arm_instance(json!({"match": "^insert", "defer": true}));
    let all = logs(20, 54, 0.0);
    produce(&topic, &all);
    let mut held = String::new();
    assert!(
        wait_for(LIMIT, || {
            let found = fake.instances().into_iter().find(|i| i["held"] == true);
            held = found
                .map(|i| i["id"].as_str().unwrap().to_string())
                .unwrap_or_default();
            !held.is_empty()
        }),
        "{}",
        s.log_tail()
    );
    let mut body = String::new();
    let unready = wait_for(Duration::from_secs(30), || {
        body = s
            .get("/readyz")
            .map(|(code, b)| format!("{code} {b}"))
            .unwrap_or_default();
        body.starts_with("503") && body.contains(&held)
    });
    assert!(unready, "{body}\n{}", s.log_tail());
    assert!(
        body.contains("MaxCompute") && body.contains("move_timeout 10s"),
        "{body}"
    );
    // A few more seconds overdue: still one count, one warning.
    std::thread::sleep(Duration::from_secs(3));
    let metrics = s.get("/metrics").map(|(_, m)| m).unwrap_or_default();
    let overdue = "observation_publisher_maxcompute_moves_overdue_total";
    let age = "observation_publisher_maxcompute_move_age_seconds";
    assert_eq!(sample(&metrics, overdue), Some(1.0), "{metrics}");
    assert!(
        sample(&metrics, age).is_some_and(|a| a >= 12.0),
        "{metrics}"
    );
    assert_eq!(s.log_count("a move has run for"), 1, "{}", s.log_tail());
    assert_eq!(committed_total(&topic, &s.group, 1), 0, "nothing moved yet");

    fake.release();
    assert!(
        wait_for(LIMIT, || committed_total(&topic, &s.group, 1)
            == all.len() as i64
            && ready()),
        "{}",
        s.log_tail()
    );
    let metrics = s.get("/metrics").map(|(_, m)| m).unwrap_or_default();
    assert_eq!(sample(&metrics, overdue), Some(1.0), "{metrics}");
    assert_eq!(sample(&metrics, age), Some(0.0), "{metrics}");
    // Every MaxCompute series an alert rule names is exported by a MaxCompute publisher (the
    // alert rules' test checks the others against a publisher without one).
    let prefix = crate::runtime::alerts::MAXCOMPUTE_SERIES;
    let name = regex::Regex::new(&format!("{prefix}[a-z_]+")).unwrap();
    for entry in std::fs::read_dir("deploy/alerts").unwrap() {
        let path = entry.unwrap().path();
        if !path.to_string_lossy().ends_with(".yaml") {
            continue;
        }
        let rules = std::fs::read_to_string(&path).unwrap();
        for n in name.find_iter(&rules) {
            let exported = metrics
                .lines()
                .any(|l| l.split([' ', '{']).next() == Some(n.as_str()));
            assert!(
                exported,
                "{} is in an alert rule but not exported:\n{metrics}",
                n.as_str()
            );
        }
    }
    assert_eq!(child.stop(), Some(0), "{}", s.log_tail());
    let (rows, count) = table_rows(&fake, &key(DATASET, &target()));
    assert_eq!((rows.len(), count), (20, 20), "every row exactly once");
}
