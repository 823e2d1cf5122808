//! The MAXCOMPUTE sink's staging table under statements that answer unclearly or run late, in
//! the binary, through the fake with the real broker.
//!
//! - [`a_moved_partition_is_dropped_once_through_failed_polls`]: polls of the drop's instance
//!   fail with an answer the client cannot retry as such (404): the same instance is polled
//!   again, never a second drop.
//! - [`a_late_drop_removes_only_its_own_epoch`]: a drop whose submit was answered with a closed
//!   connection (the instance made, its id never seen) is submitted again; the first copy runs
//!   only after later rows were staged: it removes nothing of them, every row reaches the target
//!   once and no offset commits ahead of its row.
//! - [`closing_during_a_held_insert_keeps_the_staging_table_for_it`]: a stop while a move's
//!   `INSERT` is queued leaves the instance and the staging table alone; the `INSERT` later
//!   runs from the table; the next start of the pod drops it.

use super::fake::{Fake, DATASET};
use super::moves::{statements, DROP_PARTITION};
use super::sink::{key, sink_yaml, staging_of, start, start_staged, table_rows, target, LIMIT};
use crate::runtime::{committed_total, create_topic, logs, produce, unique, wait_for, Setup};
use serde_json::json;

/// The statement that empties moved rows from the staging table, whatever its form (the test
/// holds back the late copy of it; only a partition's drop keeps it from later rows).
const EMPTYING: &str = r"^alter table \S+ drop if exists partition|^truncate table";

#[test]
fn a_moved_partition_is_dropped_once_through_failed_polls() {
    let fake = Fake::start();
    let dir = tempfile::tempdir().unwrap();
    let topic = unique("mc-drop-polls");
    create_topic(&topic, 1);
    let (child, s) = start_staged(&fake, dir.path(), &topic, "pod-polls");
    // The first move's drop: its first two status polls answer 404 NoSuchObject.
    fake.arm_instance(json!({"match": "drop if exists partition", "missing_polls": 2}));
    let all = logs(40, 61, 0.0);
    produce(&topic, &all);
    assert!(
        wait_for(LIMIT, || committed_total(&topic, &s.group, 1)
            == all.len() as i64),
        "{}",
        s.log_tail()
    );
    assert_eq!(child.stop(), Some(0), "{}", s.log_tail());
    let (inserts, drops) = (
        statements(&fake, "^insert"),
        statements(&fake, DROP_PARTITION),
    );
    assert!(inserts >= 1);
    assert_eq!(drops, inserts, "one drop per move, never run again");
    let (rows, count) = table_rows(&fake, &key(DATASET, &target()));
    assert_eq!((rows.len(), count), (40, 40), "every row exactly once");
    assert!(
        s.log_count("polling the same instance again") >= 2,
        "{}",
        s.log_tail()
    );
}

#[test]
fn a_late_drop_removes_only_its_own_epoch() {
    let fake = Fake::start();
    let dir = tempfile::tempdir().unwrap();
    let topic = unique("mc-late-drop");
    create_topic(&topic, 1);
    let (child, s) = start_staged(&fake, dir.path(), &topic, "pod-late");
    // The statement that empties the first move's rows is made but its answer lost, and it
    // queues (runs at release).
    fake.arm_instance(json!({"match": EMPTYING, "lost_answer": true, "defer": true}));
    let all = logs(60, 62, 0.0);
    let sessions: Vec<String> = (0..all.len()).map(|i| format!("sess-3e-{i}")).collect();
    produce(&topic, &all[..30]);
    assert!(
        wait_for(LIMIT, || committed_total(&topic, &s.group, 1) == 30),
        "the move finished with the drop submitted again\n{}",
        s.log_tail()
    );
    let inserts = statements(&fake, "^insert");
    assert_eq!(
        statements(&fake, EMPTYING),
        inserts + 1,
        "the statement whose answer was lost was submitted again"
    );
    // The next logs are staged; their move's INSERT queues too, behind the late drop.
    fake.arm_instance(json!({"match": "^insert", "defer": true}));
    produce(&topic, &all[30..]);
    let staging = staging_of(&fake, "pod-late").unwrap();
    assert!(
        wait_for(LIMIT, || statements(&fake, "^insert") > inserts),
        "{}",
        s.log_tail()
    );
    let staged = fake.dump("tables")[&staging]["rows"]
        .as_array()
        .map_or(0, Vec::len);
    assert!(staged > 0, "later logs are staged");
    // The late drop runs first, then the INSERT.
    fake.release();
    assert!(
        wait_for(LIMIT, || committed_total(&topic, &s.group, 1) == 60),
        "{}",
        s.log_tail()
    );
    assert_eq!(child.stop(), Some(0), "{}", s.log_tail());
    let (rows, count) = table_rows(&fake, &key(DATASET, &target()));
    let missing: Vec<&String> = sessions.iter().filter(|k| !rows.contains_key(*k)).collect();
    assert!(
        missing.is_empty(),
        "committed but not in the target: {missing:?}"
    );
    assert_eq!(count, 60, "every row exactly once");
}

#[test]
fn closing_during_a_held_insert_keeps_the_staging_table_for_it() {
    let fake = Fake::start();
    let dir = tempfile::tempdir().unwrap();
    let topic = unique("mc-close-held");
    create_topic(&topic, 1);
    let group = unique("g");
    let s = Setup::new(dir.path(), "a", &topic, &group, &sink_yaml(&fake, "1s"));
    // A short drain: the stop gives up on the held move quickly.
    let yaml = std::fs::read_to_string(&s.config).unwrap();
    std::fs::write(
        &s.config,
        yaml.replace("drain_timeout: 20s", "drain_timeout: 3s"),
    )
    .unwrap();
    let child = start(&s, "pod-close");
    assert!(
        wait_for(LIMIT, || staging_of(&fake, "pod-close").is_some()),
        "{}",
        s.log_tail()
    );
    fake.arm_instance(json!({"match": "^insert", "defer": true}));
    let all = logs(20, 63, 0.0);
    produce(&topic, &all);
    assert!(
        wait_for(LIMIT, || statements(&fake, "^insert") == 1),
        "{}",
        s.log_tail()
    );
    let staging = staging_of(&fake, "pod-close").unwrap();
    assert_eq!(
        child.stop(),
        Some(1),
        "the drain did not finish\n{}",
        s.log_tail()
    );
    assert_eq!(committed_total(&topic, &s.group, 1), 0);
    assert_eq!(
        statements(&fake, r"^drop table"),
        0,
        "the staging table is not dropped under the INSERT"
    );
    let staged = fake.dump("tables")[&staging]["rows"]
        .as_array()
        .map_or(0, Vec::len);
    assert!(staged > 0, "the staging table is kept with its rows");
    assert_eq!(
        s.log_count("a move is still running at close"),
        1,
        "{}",
        s.log_tail()
    );
    // The queued INSERT runs after the process is gone, from the table it reads.
    fake.release();
    let insert = fake
        .instances()
        .into_iter()
        .find(|i| i["sql"].as_str().unwrap().starts_with("insert"))
        .unwrap();
    assert_eq!(insert["ok"], true, "{insert}");
    let (_, count) = table_rows(&fake, &key(DATASET, &target()));
    assert_eq!(count, staged);

    // The next start of the pod drops the table left and reads the uncommitted logs again:
    // their rows are in the target twice, the documented duplicate of a move left running.
    let again = Setup::new(dir.path(), "b", &topic, &group, &sink_yaml(&fake, "1s"));
    let child = start(&again, "pod-close");
    assert!(
        wait_for(LIMIT, || committed_total(&topic, &again.group, 1) == 20),
        "{}",
        again.log_tail()
    );
    assert_eq!(child.stop(), Some(0), "{}", again.log_tail());
    assert_eq!(
        again.log_count("\"dropped_left_by_earlier_start\":1"),
        1,
        "{}",
        again.log_tail()
    );
    assert_eq!(staging_of(&fake, "pod-close"), None, "{}", again.log_tail());
    let (rows, count) = table_rows(&fake, &key(DATASET, &target()));
    assert_eq!((rows.len(), count), (20, 20 + staged));
}
