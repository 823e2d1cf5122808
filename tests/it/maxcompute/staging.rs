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

use super::fake::{Fake, DATASET};
use super::moves::{statements, DROP_PARTITION};
use super::sink::{key, staging_of, start_fresh, table_rows, target, LIMIT};
use crate::runtime::{committed_total, create_topic, logs, produce, unique, wait_for};
use serde_json::json;

#[test]
fn a_moved_partition_is_dropped_once_through_failed_polls() {
    let fake = Fake::start();
    let dir = tempfile::tempdir().unwrap();
    let topic = unique("mc-drop-polls");
    create_topic(&topic, 1);
    let (child, s) = start_fresh(&fake, dir.path(), "a", &topic, "pod-polls");
    assert!(
        wait_for(LIMIT, || staging_of(&fake, "pod-polls").is_some()),
        "{}",
        s.log_tail()
    );
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
    assert!(
        s.log_count("polling the same instance again") >= 2,
        "{}",
        s.log_tail()
    );
    let (inserts, drops) = (
        statements(&fake, "^insert"),
        statements(&fake, DROP_PARTITION),
    );
    assert!(inserts >= 1);
    assert_eq!(drops, inserts, "one drop per move, never run again");
    let (rows, count) = table_rows(&fake, &key(DATASET, &target()));
    assert_eq!((rows.len(), count), (40, 40), "every row exactly once");
}

#[test]
fn a_late_drop_removes_only_its_own_epoch() {
    let fake = Fake::start();
    let dir = tempfile::tempdir().unwrap();
    let topic = unique("mc-late-drop");
    create_topic(&topic, 1);
    let (child, s) = start_fresh(&fake, dir.path(), "a", &topic, "pod-late");
    assert!(
        wait_for(LIMIT, || staging_of(&fake, "pod-late").is_some()),
        "{}",
        s.log_tail()
    );
    // The first move's drop is made but its answer lost, and it queues (runs at release).
    fake.arm_instance(
        json!({"match": "drop if exists partition", "lost_answer": true, "defer": true}),
    );
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
        statements(&fake, DROP_PARTITION),
        inserts + 1,
        "the drop whose answer was lost was submitted again"
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
