//! A rebalance of a cooperative-sticky group costs only the partitions that move: while a
//! second publisher joins, the first keeps consuming the partitions it keeps through every
//! join round, and every row lands once.
//!
//! A member is in a join round from librdkafka's `init -> wait-join` until its
//! `wait-join -> …` (the broker holds the JoinGroup until every member rejoined; tansu for half
//! the session timeout). Those lines and the publisher's `batch flushed` lines are written by
//! the pipeline thread, in the order it serves them, so the batches flushed between the two are
//! intake that went on during the round. The commit interval is short, so a commit that held
//! the pipeline thread until the round ended would stop intake at the round's start.

use super::*;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

const LIMIT: Duration = Duration::from_secs(90);
/// Batches flushed inside one join round: at 50 ms of linger and a steady stream a round (up to
/// 3 s, less the wait for the member's next heartbeat) gave 12; a pipeline thread held by its
/// commit until the round ended gave 0 and 1 (the batches of the 20 ms before its commit).
const FLUSHES_PER_ROUND: usize = 5;

/// Cooperative-sticky with librdkafka's group debug lines; 6 s sessions (tansu holds each join
/// round 3 s), commits every 20 ms, batches every 50 ms, and the flushes in the log.
fn cooperative(s: &Setup) {
    crate::common::add_consumer_settings(
        &s.config,
        "      partition.assignment.strategy: cooperative-sticky\n      debug: cgrp\n",
    );
    let cfg = std::fs::read_to_string(&s.config)
        .unwrap()
        .replace("session_timeout: 2s", "session_timeout: 6s")
    .replace("commit_interval: 200ms", "commit_interval: 20ms")
    .replace("linger: 300ms", "linger: 50ms")
    .replace(
        "logging:\n  format: json\n",
        "logging:\n  format: json\n  level: info,observation_publisher::pipeline::events=debug,librdkafka=debug\n",
    );
    std::fs::write(&s.config, cfg).unwrap();
}

/// Produces `logs` in order, 20 every 40 ms, until `stop`; returns how many it produced.
fn stream(topic: String, logs: Vec<(Vec<u8>, bool)>, stop: Arc<AtomicBool>) -> usize {
    let p: ThreadedProducer<DefaultProducerContext> = ClientConfig::new()
        .set("bootstrap.servers", brokers())
        .set("linger.ms", "5")
        .create()
        .unwrap();
    let mut n = 0;
    while !stop.load(Ordering::Relaxed) && n < logs.len() {
        for (b, _) in &logs[n..(n + 20).min(logs.len())] {
            let mut rec = BaseRecord::<(), [u8]>::to(&topic).payload(&b[..]);
            while let Err((_, r)) = p.send(rec) {
                rec = r;
                std::thread::sleep(Duration::from_millis(5));
            }
            n += 1;
        }
        std::thread::sleep(Duration::from_millis(40));
    }
    p.flush(Duration::from_secs(30)).unwrap();
    n
}

/// The batches flushed inside each join round that began after the member first had
/// partitions, in `log` (rounds still open at its end are left out).
fn flushes_per_round(log: &str) -> Vec<usize> {
    let assigned = log
        .lines()
        .position(|l| l.contains("partitions assigned") && !l.contains("\"[]\""));
    let mut rounds = Vec::new();
    let mut open: Option<usize> = None;
    for l in log.lines().skip(assigned.map_or(usize::MAX, |i| i + 1)) {
        if l.contains("changed join state init -> wait-join") {
            open = Some(0);
        } else if l.contains("changed join state wait-join -> ") {
            rounds.extend(open.take());
        } else if l.contains("batch flushed") {
            if let Some(n) = open.as_mut() {
                *n += 1;
            }
        }
    }
    rounds
}

fn log_of(s: &Setup) -> String {
    let mut out = String::new();
    for e in std::fs::read_dir(&s.dir).into_iter().flatten().flatten() {
        if e.file_name().to_string_lossy().starts_with("log-") {
            out.push_str(&std::fs::read_to_string(e.path()).unwrap_or_default());
        }
    }
    out
}

#[test]
fn a_member_joining_a_cooperative_group_does_not_stop_the_others_intake() {
    let dir = tempfile::tempdir().unwrap();
    let topic = unique("rt-rebalance");
    create_topic(&topic, 6);
    let all = logs(30_000, 83, 0.0);
    let group = unique("g");
    let a = Setup::new(dir.path(), "a", &topic, &group, "");
    let b = Setup::new(dir.path(), "b", &topic, &group, "");
    cooperative(&a);
    cooperative(&b);
    let stop_producing = Arc::new(AtomicBool::new(false));
    let producer = {
        let (topic, logs, stop) = (topic.clone(), all.clone(), Arc::clone(&stop_producing));
        std::thread::spawn(move || stream(topic, logs, stop))
    };
    let ca = a.start();
    assert!(
        wait_for(LIMIT, || !a.rows().is_empty()),
        "a never wrote a row; its log ends:\n{}",
        a.log_tail()
    );
    let cb = b.start();
    assert!(
        wait_for(LIMIT, || !b.rows().is_empty()),
        "b never got partitions; the logs end:\n{}{}",
        a.log_tail(),
        b.log_tail()
    );
    // Every round so far was one of b's joining, and the stream still runs.
    let rounds = flushes_per_round(&log_of(&a));
    let produced = {
        stop_producing.store(true, Ordering::Relaxed);
        producer.join().unwrap()
    };
    assert!(
        !rounds.is_empty(),
        "a's log shows no join round after its assignment:\n{}",
        a.log_tail()
    );
    assert!(
        rounds.iter().all(|&n| n >= FLUSHES_PER_ROUND),
        "a's intake stopped while b joined: batches flushed per join round {rounds:?}"
    );
    assert!(wait_for(LIMIT, || a.rows().len() + b.rows().len() >= produced));
    assert_eq!(stop(cb), Some(0));
    assert_eq!(stop(ca), Some(0));
    let mut rows = a.rows();
    rows.extend(b.rows());
    assert_eq!(rows.len(), produced, "every row once, none twice");
    let want = expected_rows(&all[..produced], 83);
    assert_eq!(
        rows.into_iter().collect::<std::collections::BTreeSet<_>>(),
        want
    );
    assert_eq!(committed_total(&topic, &a.group, 6), produced as i64);
}
