//! The runtime's delivery guarantees, one scenario per test.

use super::*;
use std::collections::BTreeSet;

const LIMIT: Duration = Duration::from_secs(90);

fn distinct(rows: &[(String, String)]) -> BTreeSet<(String, String)> {
    rows.iter().cloned().collect()
}

#[test]
fn valid_rows_land_malformed_logs_are_dead_lettered_and_offsets_committed() {
    let dir = tempfile::tempdir().unwrap();
    let topic = unique("rt-basic");
    create_topic(&topic, 3);
    let logs = logs(2000, 11, 0.01);
    let bad = logs.iter().filter(|l| l.1).count();
    assert!(bad > 5);
    produce(&topic, &logs);
    let s = Setup::new(dir.path(), "a", &topic, &unique("g"), "");
    let child = s.start();
    let want = expected_rows(&logs, 11);
    assert!(wait_for(LIMIT, || s.rows().len() >= want.len()
        && s.dead_letters() >= bad));
    assert!(
        wait_for(LIMIT, || committed_total(&topic, &s.group, 3)
            == logs.len() as i64),
        "every offset committed"
    );
    let (status, body) = s.get("/readyz").expect("http");
    assert_eq!(status, 200, "{body}");
    // The progress line (every second here) tells the same story.
    let progress = format!(
        "since start: 2,000 consumed, {} acknowledged, {bad} dead-lettered",
        indicatif::HumanCount((logs.len() - bad) as u64)
    );
    assert!(
        wait_for(LIMIT, || s.log_count(&progress) > 0
            && s.log_count("; lag 0 messages;") > 0),
        "{progress}:\n{}",
        s.log_tail()
    );
    let (_, metrics) = s.get("/metrics").expect("http");
    assert!(
        metrics.contains("total_prediction_logs_processed_total{"),
        "{metrics}"
    );
    assert!(
        metrics.contains("\nprocess_resident_memory_bytes ")
            && metrics.contains("\nprocess_cpu_seconds_total "),
        "the standard process series: {metrics}"
    );
    assert!(
        counted(
            &metrics,
            "observation_publisher_dead_letters_total{kind=\"decode\""
        ),
        "{metrics}"
    );
    assert_eq!(stop(child), Some(0));
    let rows = s.rows();
    assert_eq!(distinct(&rows), want, "exactly the valid rows");
    assert_eq!(rows.len(), want.len(), "no duplicates without failures");
    assert_eq!(
        s.dead_letters(),
        bad,
        "every malformed log dead-lettered once"
    );
}

#[test]
fn kafka_dead_letter_topic_gets_original_bytes_and_headers() {
    let dir = tempfile::tempdir().unwrap();
    let topic = unique("rt-dlq");
    create_topic(&topic, 1);
    let mut logs = logs(50, 3, 0.0);
    logs[10] = (b"\x0a\x03abc\xff garbage".to_vec(), true);
    produce(&topic, &logs);
    let s = Setup::new(dir.path(), "a", &topic, &unique("g"), "");
    // Switch the dead-letter target to Kafka (default topic <topic>-dlq).
    let cfg = std::fs::read_to_string(&s.config).unwrap().replace(
        &format!(
            "dead_letter:\n  target: file\n  path: {}\n",
            s.dir.join("dead.bin").display()
        ),
        "",
    );
    std::fs::write(&s.config, cfg).unwrap();
    let child = s.start();
    assert!(wait_for(LIMIT, || committed_total(&topic, &s.group, 1) == 50));
    assert_eq!(stop(child), Some(0));
    let got = super::dlq::read_all(&format!("{topic}-dlq"), 1)
        .into_iter()
        .next();
    let (payload, headers) = got.expect("a dead letter in the DLQ topic");
    assert_eq!(payload, logs[10].0, "original bytes");
    assert_eq!(headers["x-error-kind"], "decode");
    assert_eq!(headers["x-source-topic"], topic);
    assert_eq!(headers["x-source-partition"], "0");
    assert_eq!(headers["x-source-offset"], "10");
    assert!(!headers["x-error-code"].is_empty() && !headers["x-error-message"].is_empty());
    assert_eq!(s.rows().len(), 49);
}

#[test]
fn sigkill_mid_stream_then_restart_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let topic = unique("rt-kill");
    create_topic(&topic, 3);
    let logs = logs(20_000, 5, 0.0);
    produce(&topic, &logs);
    let s = Setup::new(dir.path(), "a", &topic, &unique("g"), "");
    let child = s.start();
    assert!(
        wait_for(LIMIT, || !s.rows().is_empty()),
        "some rows landed before the kill"
    );
    signal(&child, "-KILL");
    let _ = { child }.wait();
    let before = s.rows().len();
    let child = s.start();
    let want = expected_rows(&logs, 5);
    assert!(wait_for(LIMIT * 2, || committed_total(&topic, &s.group, 3)
        == logs.len() as i64));
    assert_eq!(stop(child), Some(0));
    let rows = s.rows();
    assert_eq!(distinct(&rows), want, "no row lost across SIGKILL");
    let duplicates = rows.len() - want.len();
    eprintln!("sigkill: {before} rows before the kill, {duplicates} duplicates from the unacknowledged window");
    assert!(
        duplicates < logs.len(),
        "duplicates only from the window that was in flight"
    );
}

#[test]
fn sigterm_drains_commits_and_exits_0_and_restart_reads_nothing_again() {
    let dir = tempfile::tempdir().unwrap();
    let topic = unique("rt-term");
    create_topic(&topic, 2);
    let logs = logs(5000, 8, 0.0);
    produce(&topic, &logs);
    let s = Setup::new(dir.path(), "a", &topic, &unique("g"), "");
    let child = s.start();
    assert!(wait_for(LIMIT, || !s.rows().is_empty()));
    let code = stop(child);
    assert_eq!(
        code,
        Some(0),
        "SIGTERM: drained, exit 0; logs:\n{}",
        s.log_tail()
    );
    let after_first = s.rows().len() as i64;
    assert_eq!(
        committed_total(&topic, &s.group, 2),
        after_first,
        "everything written was committed, nothing more"
    );
    let child = s.start();
    // The second run holds its partitions (and so its SIGTERM handler) before it is stopped:
    // the first run may already have committed everything.
    assert!(wait_for(LIMIT, || s.log_count("partitions assigned") >= 2
        && committed_total(&topic, &s.group, 2) == 5000));
    let code = stop(child);
    assert_eq!(code, Some(0), "second run's exit; logs:\n{}", s.log_tail());
    let rows = s.rows();
    assert_eq!(rows.len(), 5000, "a clean drain leaves no duplicates");
    assert_eq!(distinct(&rows), expected_rows(&logs, 8));
}

#[test]
fn a_failing_sink_blocks_commits_until_it_recovers() {
    let dir = tempfile::tempdir().unwrap();
    let topic = unique("rt-sinkfail");
    create_topic(&topic, 1);
    let first = logs(300, 21, 0.0);
    let s = Setup::new(dir.path(), "a", &topic, &unique("g"), "");
    let child = s.start();
    produce(&topic, &first[..100]);
    assert!(wait_for(LIMIT, || committed_total(&topic, &s.group, 1) == 100));
    // Break the sink: its directory becomes a regular file (writes fail with ENOTDIR/EEXIST).
    let rows_dir = s.dir.join("rows");
    let parked = s.dir.join("rows-parked");
    std::fs::rename(&rows_dir, &parked).unwrap();
    std::fs::write(&rows_dir, b"not a directory").unwrap();
    produce(&topic, &first[100..]);
    assert!(
        wait_for(LIMIT, || s.get("/metrics").is_some_and(|(_, m)| counted(
            &m,
            "observation_publisher_sink_errors_total{"
        ))),
        "the sink failed and was retried"
    );
    assert_eq!(
        committed_total(&topic, &s.group, 1),
        100,
        "nothing committed while the sink fails"
    );
    assert_eq!(
        s.get("/readyz").map(|r| r.0),
        Some(503),
        "not ready while the sink fails"
    );
    std::fs::remove_file(&rows_dir).unwrap();
    std::fs::rename(&parked, &rows_dir).unwrap();
    assert!(
        wait_for(LIMIT, || committed_total(&topic, &s.group, 1) == 300),
        "all committed after recovery"
    );
    assert_eq!(stop(child), Some(0));
    assert_eq!(distinct(&s.rows()), expected_rows(&first, 21));
}

#[test]
fn two_publishers_in_one_group_lose_nothing_when_one_stops() {
    let dir = tempfile::tempdir().unwrap();
    let topic = unique("rt-group");
    create_topic(&topic, 4);
    let all = logs(6000, 31, 0.0);
    let group = unique("g");
    let a = Setup::new(dir.path(), "a", &topic, &group, "");
    let b = Setup::new(dir.path(), "b", &topic, &group, "");
    let ca = a.start();
    let cb = b.start();
    produce(&topic, &all[..3000]);
    assert!(wait_for(LIMIT, || a.rows().len() + b.rows().len() >= 3000));
    assert_eq!(stop(cb), Some(0), "b leaves the group cleanly");
    produce(&topic, &all[3000..]);
    assert!(
        wait_for(LIMIT * 2, || committed_total(&topic, &a.group, 4) == 6000),
        "a took over b's partitions: {} of 6000 committed; a's log ends:\n{}",
        committed_total(&topic, &a.group, 4),
        a.log_tail()
    );
    assert_eq!(stop(ca), Some(0));
    let mut rows = a.rows();
    rows.extend(b.rows());
    assert_eq!(
        distinct(&rows),
        expected_rows(&all, 31),
        "no row lost across the rebalance"
    );
}

#[test]
fn a_single_log_on_a_quiet_topic_is_flushed_by_linger() {
    let dir = tempfile::tempdir().unwrap();
    let topic = unique("rt-quiet");
    create_topic(&topic, 1);
    let s = Setup::new(dir.path(), "a", &topic, &unique("g"), "");
    let child = s.start();
    assert!(
        wait_for(LIMIT, || s.get("/readyz").is_some_and(|r| r.0 == 200)),
        "ready on an empty topic"
    );
    let one = logs(1, 41, 0.0);
    produce(&topic, &one);
    // No more traffic, no shutdown: only the linger timer can flush it.
    assert!(
        wait_for(LIMIT, || s.rows().len() == 1),
        "the lone row landed while the process kept running"
    );
    assert!(wait_for(LIMIT, || committed_total(&topic, &s.group, 1) == 1));
    assert_eq!(stop(child), Some(0));
}

#[test]
fn a_missing_topic_is_not_ready_then_consumed_once_created() {
    let dir = tempfile::tempdir().unwrap();
    let topic = unique("rt-missing");
    let s = Setup::new(dir.path(), "a", &topic, &unique("g"), "");
    let child = s.start();
    assert!(
        wait_for(LIMIT, || s.get("/healthz").is_some_and(|r| r.0 == 200)),
        "alive"
    );
    let r = s.get("/readyz").expect("http");
    assert_eq!(r.0, 503, "not ready without the topic: {}", r.1);
    create_topic(&topic, 1);
    let l = logs(10, 51, 0.0);
    produce(&topic, &l);
    assert!(
        wait_for(LIMIT, || s.rows().len() == 10),
        "consumed once the topic exists"
    );
    assert_eq!(stop(child), Some(0));
}

#[test]
fn a_down_sink_pauses_intake_within_the_inflight_budget() {
    let dir = tempfile::tempdir().unwrap();
    let topic = unique("rt-budget");
    create_topic(&topic, 2);
    let s = Setup::new(dir.path(), "a", &topic, &unique("g"), "");
    // A small budget: two 64 KiB batches in flight at most.
    let cfg = std::fs::read_to_string(&s.config)
        .unwrap()
        .replace("batching:\n  linger: 300ms\n  max_rows: 500\n", "batching:\n  linger: 300ms\n  max_rows: 500\n  max_bytes: 64KiB\n  max_inflight_bytes: 128KiB\n");
    std::fs::write(&s.config, cfg).unwrap();
    let child = s.start();
    assert!(wait_for(LIMIT, || s
        .get("/readyz")
        .is_some_and(|r| r.0 == 200)));
    // Take the sink down: its directory becomes a regular file.
    let rows_dir = s.dir.join("rows");
    std::fs::remove_dir_all(&rows_dir).unwrap();
    std::fs::write(&rows_dir, b"the sink is down").unwrap();
    let all = logs(4000, 81, 0.0);
    produce(&topic, &all);
    let metric = |name: &str| -> f64 {
        s.get("/metrics")
            .map(|(_, m)| {
                m.lines()
                    .filter(|l| l.starts_with(name))
                    .filter_map(|l| l.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()))
                    .sum()
            })
            .unwrap_or(0.0)
    };
    assert!(
        wait_for(LIMIT, || metric("observation_publisher_paused_partitions")
            > 0.0),
        "intake paused while the sink is down"
    );
    let inflight = metric("observation_publisher_inflight_bytes");
    assert!(
        inflight <= (128 + 64) as f64 * 1024.0,
        "in-flight bytes stay within the budget (+ one batch): {inflight}"
    );
    assert!(
        metric("observation_publisher_messages_consumed_total") < 4000.0,
        "not everything was read ahead"
    );
    assert_eq!(committed_total(&topic, &s.group, 2), 0);
    std::fs::remove_file(&rows_dir).unwrap();
    std::fs::create_dir_all(&rows_dir).unwrap();
    assert!(
        wait_for(LIMIT, || committed_total(&topic, &s.group, 2) == 4000),
        "resumed and caught up"
    );
    assert_eq!(stop(child), Some(0));
    assert_eq!(distinct(&s.rows()), expected_rows(&all, 81));
}

#[test]
fn start_from_a_time_skips_what_was_logged_before_it() {
    let dir = tempfile::tempdir().unwrap();
    let topic = unique("rt-time");
    create_topic(&topic, 1);
    let all = logs(400, 91, 0.0);
    produce(&topic, &all[..200]);
    // Kafka timestamps are the produce times: everything after this instant is "new".
    std::thread::sleep(Duration::from_millis(1500));
    let cut = std::time::SystemTime::now();
    std::thread::sleep(Duration::from_millis(500));
    produce(&topic, &all[200..]);
    let s = Setup::new(dir.path(), "a", &topic, &unique("g"), "");
    let when = humantime::format_rfc3339_millis(cut).to_string();
    let cfg = std::fs::read_to_string(&s.config).unwrap().replace(
        "consumer:\n",
        &format!("consumer:\n  start_from: \"{when}\"\n"),
    );
    std::fs::write(&s.config, cfg).unwrap();
    let child = s.start();
    assert!(wait_for(LIMIT, || s.rows().len() >= 200));
    assert!(
        wait_for(LIMIT, || committed_total(&topic, &s.group, 1) == 400),
        "committed to the end"
    );
    assert_eq!(stop(child), Some(0));
    let want: BTreeSet<_> = expected_rows(&all, 91)
        .into_iter()
        .filter(|(sid, _)| {
            sid.rsplit('-')
                .next()
                .and_then(|i| i.parse::<usize>().ok())
                .is_some_and(|i| i >= 200)
        })
        .collect();
    assert_eq!(
        distinct(&s.rows()),
        want,
        "only the logs produced after the start time"
    );
}
