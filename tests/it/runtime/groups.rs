//! Which group `run` joins and how: Merlin's shared group left for one of the version's own
//! (adopting the shared group's positions), KIP-848's consumer protocol on librdkafka's mock
//! cluster, and a broker that does not serve it.

use super::*;
use crate::common::consumer_group_of;
use std::collections::BTreeSet;

const LIMIT: Duration = Duration::from_secs(60);

/// Rows whose session id ends in an index at or past `from`.
fn from_index(rows: BTreeSet<(String, String)>, from: usize) -> BTreeSet<(String, String)> {
    let index = |s: &str| s.rsplit('-').next().and_then(|i| i.parse::<usize>().ok());
    rows.into_iter()
        .filter(|(s, _)| index(s).is_some_and(|i| i >= from))
        .collect()
}

/// Sets `key: value` in a Setup's `consumer:` section.
fn consumer_key(s: &mut Setup, line: &str) {
    let cfg = std::fs::read_to_string(&s.config).unwrap();
    let cfg = cfg.replace("consumer:\n", &format!("consumer:\n  {line}\n"));
    std::fs::write(&s.config, cfg).unwrap();
    s.group = consumer_group_of(&s.config);
}

/// Adds librdkafka settings to a Setup's `observation_source`.
fn consumer_settings(s: &Setup, lines: &str) {
    crate::common::add_consumer_settings(&s.config, lines);
}

#[test]
fn merlins_shared_group_is_left_for_the_versions_own_without_skipping_or_republishing() {
    let dir = tempfile::tempdir().unwrap();
    let topic = unique("rt-migrate");
    create_topic(&topic, 2);
    let all = logs(2000, 71, 0.0);
    produce_to(&topic, 0, &all[..600]);
    produce_to(&topic, 1, &all[600..1200]);
    // Merlin's publisher: the shared group, which consumed and committed the first 1200.
    let shared = unique("merlin");
    let mut old = Setup::new(dir.path(), "old", &topic, &shared, "");
    consumer_key(&mut old, "group: shared");
    assert_eq!(
        old.group, shared,
        "consumer.group: shared joins the group as configured"
    );
    let c = old.start();
    assert!(
        wait_for(LIMIT, || committed_total(&topic, &shared, 2) == 1200),
        "the shared group committed {} of 1200; its publisher's log ends:\n{}",
        committed_total(&topic, &shared, 2),
        old.log_tail()
    );
    assert_eq!(stop(c), Some(0));
    // Partition 1 gets nothing new: the version's group must still commit where it starts.
    produce_to(&topic, 0, &all[1200..]);
    // The same configuration as Merlin writes it, consumer.group at its default.
    let new = Setup::new(dir.path(), "new", &topic, &shared, "");
    assert!(
        new.group.starts_with(&format!("{shared}.")) && new.group.ends_with(".1"),
        "a group of the version's own, named from the configured one: {}",
        new.group
    );
    let c = new.start();
    assert!(
        wait_for(LIMIT, || committed_total(&topic, &new.group, 2) == 2000),
        "the version's group committed {} of 2000; its publisher's log ends:\n{}",
        committed_total(&topic, &new.group, 2),
        new.log_tail()
    );
    assert_eq!(stop(c), Some(0));
    let rows = new.rows();
    assert_eq!(
        rows.len(),
        800,
        "only what the shared group had not published"
    );
    assert_eq!(distinct(&rows), from_index(expected_rows(&all, 71), 1200));
    assert_eq!(
        committed_total(&topic, &shared, 2),
        1200,
        "the shared group is only read, never committed to"
    );
}

fn distinct(rows: &[(String, String)]) -> BTreeSet<(String, String)> {
    rows.iter().cloned().collect()
}

#[test]
fn kip848_members_share_a_topic_on_a_broker_that_serves_it() {
    let cluster = rdkafka::mocking::MockCluster::new(1).expect("mock cluster");
    let bootstrap = cluster.bootstrap_servers();
    let topic = unique("rt-kip848");
    cluster.create_topic(&topic, 4, 1).expect("topic");
    let dir = tempfile::tempdir().unwrap();
    let group = unique("g");
    let all = logs(1200, 81, 0.0);
    let [a, b] = ["a", "b"].map(|name| {
        let s = Setup::at(&bootstrap, dir.path(), name, &topic, &group, "");
        consumer_settings(&s, "      group.protocol: consumer\n");
        s
    });
    let ca = a.start();
    produce_at(&bootstrap, &topic, &all[..600]);
    assert!(
        wait_for(LIMIT, || committed_at(&bootstrap, &topic, &a.group, 4)
            .values()
            .sum::<i64>()
            == 600),
        "a consumed alone; its log ends:\n{}",
        a.log_tail()
    );
    let cb = b.start();
    assert!(
        wait_for(LIMIT, || b.has_partitions()
            && b.get("/readyz").is_some_and(|r| r.0 == 200)),
        "b joined; its log ends:\n{}",
        b.log_tail()
    );
    produce_spread(&bootstrap, &topic, 4, &all[600..]);
    assert!(
        wait_for(LIMIT, || committed_at(&bootstrap, &topic, &a.group, 4)
            .values()
            .sum::<i64>()
            == 1200),
        "every offset committed; logs end:\n{}\n{}",
        a.log_tail(),
        b.log_tail()
    );
    assert_eq!(stop(cb), Some(0), "{}", b.log_tail());
    assert_eq!(stop(ca), Some(0), "{}", a.log_tail());
    let (ra, rb) = (a.rows(), b.rows());
    assert!(
        !rb.is_empty(),
        "the broker gave b partitions of its own; logs end:\n{}\n{}",
        a.log_tail(),
        b.log_tail()
    );
    let mut rows = ra;
    rows.extend(rb);
    assert_eq!(rows.len(), 1200, "no row twice");
    assert_eq!(distinct(&rows), expected_rows(&all, 81));
}

#[test]
fn a_broker_without_kip848_makes_the_publisher_unready_saying_so() {
    // The local broker (tansu) serves only the classic group protocol.
    let dir = tempfile::tempdir().unwrap();
    let topic = unique("rt-nokip848");
    create_topic(&topic, 1);
    let s = Setup::new(dir.path(), "a", &topic, &unique("g"), "");
    consumer_settings(&s, "      group.protocol: consumer\n");
    let c = s.start();
    let said = wait_for(LIMIT, || {
        s.get("/readyz")
            .is_some_and(|(code, body)| code == 503 && body.contains("group.protocol: consumer"))
    });
    assert!(said, "{:?}\n{}", s.get("/readyz"), s.log_tail());
    assert_eq!(
        s.log_count("does not serve group.protocol: consumer"),
        1,
        "said once"
    );
    assert_eq!(stop(c), Some(0), "{}", s.log_tail());
}

#[test]
fn static_membership_without_a_pod_name_exits_2_saying_what_to_set() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = Setup::new(dir.path(), "a", &unique("rt-static"), &unique("g"), "");
    consumer_key(&mut s, "static_membership: true");
    let o = crate::common::bin()
        .args(["run", "-c", s.config.to_str().unwrap()])
        .env_remove("POD_NAME")
        .env_remove("HOSTNAME")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("POD_NAME") && err.contains("static_membership"),
        "{err}"
    );
}
