use super::*;
use crate::deadletter::Kind;

fn letter(payload: usize, key: Option<usize>, message: usize) -> DeadLetter {
    DeadLetter {
        topic: "src".into(),
        partition: 2,
        offset: 41,
        epoch: 1,
        key: key.map(|n| vec![b'k'; n]),
        payload: (0..payload).map(|i| (i % 251) as u8).collect(),
        kind: Kind::Decode,
        code: "invalid_protobuf",
        message: "é".repeat(message),
        claim_check: false,
    }
}

fn header<'a>(r: &'a Record<'_>, name: &str) -> Option<&'a str> {
    r.headers
        .iter()
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.as_str())
}

fn total(r: &Record<'_>) -> usize {
    r.value.len()
        + r.key.map_or(0, <[u8]>::len)
        + r.headers
            .iter()
            .map(|(k, v)| k.len() + v.len())
            .sum::<usize>()
}

#[test]
fn a_letter_that_fits_is_written_whole_with_bounded_headers() {
    let l = letter(900_000, Some(10), 100_000); // a 200 KB reason
    let r = record(&l, 1 << 20);
    assert!(!r.claim_check);
    assert_eq!(r.value, &l.payload[..]);
    assert_eq!(r.key, l.key.as_deref());
    assert!(r
        .headers
        .iter()
        .all(|(_, v)| v.len() <= MAX_HEADER_VALUE_BYTES));
    let msg = header(&r, "x-error-message").unwrap();
    assert!(msg.len() > MAX_HEADER_VALUE_BYTES - 2 && l.message.starts_with(msg));
    assert_eq!(header(&r, "x-source-offset"), Some("41"));
    assert_eq!(header(&r, "x-error-truncated"), None);
    assert!(total(&r) <= 1 << 20);
}

#[test]
fn a_letter_over_the_limit_becomes_a_claim_check_that_fits() {
    let max = 1 << 20;
    let l = letter(3_000_000, Some(10_000), 10);
    let r = record(&l, max);
    assert!(r.claim_check);
    assert_eq!(r.value, &l.payload[..CLAIM_CHECK_PREFIX_BYTES]);
    assert_eq!(r.key, None, "a key over the prefix size is dropped");
    assert_eq!(header(&r, "x-original-key-size"), Some("10000"));
    assert_eq!(header(&r, "x-error-truncated"), Some("true"));
    assert_eq!(header(&r, "x-original-size"), Some("3000000"));
    let sha: String = Sha256::digest(&l.payload)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(header(&r, "x-original-sha256"), Some(sha.as_str()));
    assert_eq!(header(&r, "x-source-topic"), Some("src"));
    assert_eq!(header(&r, "x-source-partition"), Some("2"));
    assert_eq!(header(&r, "x-error-code"), Some("invalid_protobuf"));
    assert!(header(&r, "x-truncated-reason")
        .unwrap()
        .contains("max_message_bytes"));
    // The smallest allowed limit still holds a claim check with the longest headers.
    let l = letter(3_000_000, Some(100), 1_000_000);
    assert!(total(&record(&l, 16 << 10)) <= 16 << 10);
}

#[test]
fn a_letter_the_target_refused_as_too_large_becomes_a_claim_check() {
    let mut l = letter(500, None, 5);
    l.claim_check = true;
    let r = record(&l, 1 << 20);
    assert!(r.claim_check);
    assert_eq!(r.value.len(), 500, "a short payload is kept entirely");
    assert!(header(&r, "x-truncated-reason")
        .unwrap()
        .contains("refused"));
}

#[test]
fn failures_are_classified_by_what_fixes_them() {
    use RDKafkaErrorCode as C;
    let f = |c| classify(&KafkaError::MessageProduction(c));
    assert_eq!(f(C::MessageSizeTooLarge), Failure::TooLarge);
    assert_eq!(f(C::MessageBatchTooLarge), Failure::TooLarge);
    assert_eq!(f(C::TopicAuthorizationFailed), Failure::NeedsOperator);
    assert_eq!(f(C::UnknownTopicOrPartition), Failure::NeedsOperator);
    assert_eq!(f(C::UnknownTopic), Failure::NeedsOperator);
    assert_eq!(f(C::SaslAuthenticationFailed), Failure::NeedsOperator);
    assert_eq!(f(C::MessageTimedOut), Failure::Transient);
    assert_eq!(f(C::QueueFull), Failure::Transient);
    assert_eq!(f(C::BrokerTransportFailure), Failure::Transient);
    assert_eq!(classify(&KafkaError::Canceled), Failure::Transient);
}

/// A target whose topic could not be seen or created at start-up becomes ready once the topic
/// exists: by its own check again (every 200 ms in tests, 10 s in the daemon), without a letter
/// (`/readyz` stayed 503 for good), and by a delivered letter.
#[test]
fn a_target_whose_topic_was_missing_at_start_becomes_ready_once_it_exists() {
    use rdkafka::mocking::MockCluster;
    use std::time::Instant;
    let cluster = MockCluster::new(1).expect("mock cluster");
    let mut base = ClientConfig::new();
    base.set("bootstrap.servers", cluster.bootstrap_servers())
        .set("allow.auto.create.topics", "false");
    let (tx, rx) = std::sync::mpsc::channel();
    let tx = std::sync::Mutex::new(tx);
    let on: crate::deadletter::OutcomeFn = Arc::new(move |o| {
        let _ = tx.lock().unwrap().send(o);
    });
    let mut t = KafkaTarget::new(&base, "src-dlq".into(), 1 << 20, on, None).expect("producer");
    assert!(!t.is_ready(), "the topic is missing and cannot be created");
    std::thread::sleep(Duration::from_millis(600));
    assert!(!t.is_ready(), "still missing");
    cluster.create_topic("src-dlq", 1, 1).expect("topic");
    let end = Instant::now() + Duration::from_secs(30);
    while !t.is_ready() && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(t.is_ready(), "the topic exists: the target is usable");
    t.send(letter(10, None, 5));
    match rx
        .recv_timeout(Duration::from_secs(30))
        .expect("an outcome")
    {
        Outcome::Written { .. } => {}
        Outcome::Failed { error, .. } => panic!("{error}"),
    }
}
