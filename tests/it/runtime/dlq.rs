//! Dead letters against the real broker: a letter too large for the dead-letter topic does not
//! stall its partition, and letters waiting for an unusable target are
//! bounded by the in-flight budget in bytes.

use super::*;
use rdkafka::message::{Headers, Message};
use sha2::{Digest, Sha256};

const LIMIT: Duration = Duration::from_secs(90);
/// The transient write-error counter's series in `/metrics`.
const TRANSIENT_WRITE_ERRORS: &str = "observation_publisher_dead_letter_write_errors_total{error_code=\"transient\",retryable=\"true\"}";

/// A malformed log of `n` bytes: wire type 7 does not exist.
fn malformed(n: usize, fill: u8) -> Vec<u8> {
    let mut b = vec![fill; n];
    b[0] = 0x0f;
    b
}

/// Sends `logs` with a producer that allows messages up to 16 MB (the broker takes them).
fn produce_large(topic: &str, logs: &[(Vec<u8>, bool)]) {
    let p: ThreadedProducer<DefaultProducerContext> = ClientConfig::new()
        .set("bootstrap.servers", brokers())
        .set("message.max.bytes", "16000000")
        .set("linger.ms", "5")
        .create()
        .unwrap();
    for (b, _) in logs {
        p.send(BaseRecord::<(), [u8]>::to(topic).payload(&b[..]))
            .map_err(|(e, _)| e)
            .unwrap();
    }
    p.flush(Duration::from_secs(30)).unwrap();
}

/// Every letter of `topic` (at least `want`), in source order.
pub(super) fn read_all(topic: &str, want: usize) -> Vec<(Vec<u8>, HashMap<String, String>)> {
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers())
        .set("group.id", unique("dlq-reader"))
        .set("session.timeout.ms", "2000")
        .set("auto.offset.reset", "earliest")
        .create()
        .unwrap();
    c.subscribe(&[topic]).unwrap();
    let mut got = Vec::new();
    wait_for(LIMIT, || {
        if let Some(Ok(m)) = c.poll(Duration::from_millis(200)) {
            let headers = m
                .headers()
                .map(|h| {
                    h.iter()
                        .map(|x| {
                            (
                                x.key.to_string(),
                                String::from_utf8_lossy(x.value.unwrap_or_default()).into_owned(),
                            )
                        })
                        .collect()
                })
                .unwrap_or_default();
            got.push((m.payload().unwrap_or_default().to_vec(), headers));
        }
        got.len() >= want
    });
    // A dead-letter topic with several partitions delivers its letters in any order across
    // them: return them in source order.
    let source = |h: &HashMap<String, String>, k: &str| {
        h.get(k).and_then(|v| v.parse::<i64>().ok()).unwrap_or(-1)
    };
    got.sort_by_key(|(_, h)| {
        (
            source(h, "x-source-partition"),
            source(h, "x-source-offset"),
        )
    });
    got
}

/// The value of an unlabelled metric in Prometheus text.
fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

#[test]
fn a_letter_over_the_dead_letter_limit_does_not_stall_its_partition() {
    let dir = tempfile::tempdir().unwrap();
    let topic = unique("rt-dlq-big");
    create_topic(&topic, 1);
    let mut logs = logs(30, 7, 0.0);
    // Over librdkafka's default message.max.bytes (1,000,000) but within the configured
    // 2 MiB: written whole. Over 2 MiB: a claim check. Good logs before, between and after.
    logs[10] = (malformed(1_500_000, b'a'), true);
    logs[20] = (malformed(3_000_000, b'b'), true);
    produce_large(&topic, &logs);
    let s = Setup::new(dir.path(), "a", &topic, &unique("g"), "");
    let cfg = std::fs::read_to_string(&s.config).unwrap().replace(
        &format!(
            "dead_letter:\n  target: file\n  path: {}\n",
            s.dir.join("dead.bin").display()
        ),
        "dead_letter:\n  target: kafka\n  max_message_bytes: 2MiB\n",
    );
    std::fs::write(&s.config, cfg).unwrap();
    let child = s.start();
    assert!(
        wait_for(LIMIT, || committed_total(&topic, &s.group, 1) == 30),
        "every offset committed, past both large letters:\n{}",
        s.log_tail()
    );
    let (_, metrics) = s.get("/metrics").expect("http");
    assert_eq!(
        metric(
            &metrics,
            "observation_publisher_dead_letter_claim_checks_total"
        ),
        Some(1.0),
        "{metrics}"
    );
    assert_eq!(stop(child), Some(0));
    assert_eq!(s.rows().len(), 28, "the good logs are rows");
    let letters = read_all(&format!("{topic}-dlq"), 2);
    assert_eq!(letters.len(), 2, "both letters in the dead-letter topic");
    let (whole, h) = &letters[0];
    assert_eq!(h["x-source-offset"], "10");
    assert_eq!(whole, &logs[10].0, "the 1.5 MB letter is written whole");
    assert!(!h.contains_key("x-error-truncated"));
    let (check, h) = &letters[1];
    assert_eq!(h["x-source-offset"], "20");
    assert_eq!(h["x-source-partition"], "0");
    assert_eq!(h["x-source-topic"], topic);
    assert_eq!(h["x-error-truncated"], "true");
    assert_eq!(h["x-original-size"], "3000000");
    let sha: String = Sha256::digest(&logs[20].0)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(h["x-original-sha256"], sha);
    assert_eq!(
        &check[..],
        &logs[20].0[..check.len()],
        "the claim check carries the payload's first bytes"
    );
    assert!(!check.is_empty() && check.len() <= 4096);
}

#[test]
fn letters_waiting_for_an_unusable_target_pause_intake_within_the_budget() {
    let dir = tempfile::tempdir().unwrap();
    let topic = unique("rt-dlq-budget");
    create_topic(&topic, 1);
    let s = Setup::new(dir.path(), "a", &topic, &unique("g"), "");
    let budget = 1usize << 20;
    let cfg = std::fs::read_to_string(&s.config).unwrap().replace(
        "batching:\n  linger: 300ms\n  max_rows: 500\n",
        &format!("batching:\n  linger: 300ms\n  max_rows: 500\n  max_bytes: 64KiB\n  max_inflight_bytes: {budget}\n"),
    );
    std::fs::write(&s.config, cfg).unwrap();
    let child = s.start();
    assert!(
        wait_for(LIMIT, || s.get("/readyz").is_some_and(|(c, _)| c == 200)),
        "ready:\n{}",
        s.log_tail()
    );
    // The target breaks: its file is replaced by a directory, so every write fails.
    let dead = s.dir.join("dead.bin");
    std::fs::remove_file(&dead).unwrap();
    std::fs::create_dir(&dead).unwrap();
    // 100 bad logs of 50 KB (5 MB of letters, five times the budget) among good ones.
    let letter = 50_000;
    let mut logs = logs(400, 9, 0.0);
    for (i, l) in logs.iter_mut().enumerate() {
        if i % 4 == 1 {
            *l = (malformed(letter, i as u8), true);
        }
    }
    let bad = logs.iter().filter(|l| l.1).count();
    produce(&topic, &logs);
    let mut paused = None;
    assert!(
        wait_for(LIMIT, || {
            let Some((_, m)) = s.get("/metrics") else {
                return false;
            };
            // Paused, and the write error already counted (the two are published separately).
            if metric(&m, "observation_publisher_paused_partitions") == Some(1.0)
                && m.contains(TRANSIENT_WRITE_ERRORS)
            {
                paused = Some(m);
            }
            paused.is_some()
        }),
        "intake pauses while letters cannot be written:\n{}",
        s.log_tail()
    );
    let m = paused.unwrap();
    let pending = metric(&m, "observation_publisher_dead_letter_pending_bytes").unwrap() as usize;
    eprintln!("paused with {pending} bytes of pending letters (budget {budget})");
    // Paused at the budget, passed by one message at most (a letter's payload plus its
    // reason, topic and the struct).
    assert!(
        pending >= budget / 2 && pending <= budget + letter + 1024,
        "pending letter bytes {pending} within the budget {budget} + one letter"
    );
    assert!(m.contains(TRANSIENT_WRITE_ERRORS));
    let (code, body) = s.get("/readyz").unwrap();
    assert_eq!(code, 503, "{body}");
    assert!(committed_total(&topic, &s.group, 1) < logs.len() as i64);
    // The target is fixed: everything lands, nothing is lost.
    std::fs::remove_dir(&dead).unwrap();
    assert!(
        wait_for(LIMIT, || committed_total(&topic, &s.group, 1)
            == logs.len() as i64),
        "every offset committed once the target is back:\n{}",
        s.log_tail()
    );
    assert_eq!(stop(child), Some(0));
    assert_eq!(
        s.dead_letters(),
        bad,
        "every bad log is a dead letter, once"
    );
    let rows: std::collections::BTreeSet<_> = s.rows().into_iter().collect();
    assert_eq!(rows, expected_rows(&logs, 9), "every good log is a row");
}
