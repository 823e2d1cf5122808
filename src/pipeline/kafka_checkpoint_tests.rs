//! Reading exactly-once checkpoints from a real coordinator: librdkafka's mock cluster (it keeps
//! commit metadata), with `OffsetFetch` failing on demand. A failed read must be a `Retry`,
//! never "no checkpoint" (before issue 17 it was, and the partitions started fresh).

use super::*;
use rdkafka::config::FromClientConfigAndContext;
use rdkafka::mocking::MockCluster;
use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};

const CP: &str = "obs-bq2:20:3:projects/p/datasets/d/tables/t/streams/s";

fn consumer(bootstrap: &str, topic: &str) -> BaseConsumer<SourceContext> {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", bootstrap)
        .set("group.id", "checkpoints")
        .set("enable.auto.commit", "false");
    BaseConsumer::from_config_and_context(
        &c,
        SourceContext::new(topic.into(), Health::new(), Box::new(|_| {})),
    )
    .expect("consumer")
}

#[test]
fn each_read_outcome_is_a_distinct_start_and_a_failed_read_is_retried() {
    let cluster = MockCluster::new(1).expect("mock cluster");
    let topic = "eo-checkpoints";
    cluster.create_topic(topic, 4, 1).expect("topic");
    let c = consumer(&cluster.bootstrap_servers(), topic);
    // 0: a checkpoint; 1: nothing committed; 2: garbage metadata; 3: a commit without metadata.
    let mut tpl = TopicPartitionList::new();
    add_offset(&mut tpl, topic, 0, 5, Some(CP.into())).unwrap();
    add_offset(&mut tpl, topic, 2, 7, Some("{\"not\":\"ours\"}".into())).unwrap();
    add_offset(&mut tpl, topic, 3, 9, None).unwrap();
    c.commit(&tpl, CommitMode::Sync).expect("commit");

    let read = |t| read_checkpoints_within(&c, topic, &[0, 1, 2, 3], t);
    let ok = read(Duration::from_secs(10));
    assert_eq!(ok[0], (0, Start::Resume(CP.into())));
    assert_eq!(ok[1], (1, Start::Fresh));
    assert!(matches!(&ok[2], (2, Start::Stop(_))), "{ok:?}");
    assert_eq!(ok[3], (3, Start::Fresh));

    // The coordinator keeps loading: every read in the window fails.
    cluster.request_errors(
        RDKafkaApiKey::OffsetFetch,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_COORDINATOR_LOAD_IN_PROGRESS; 500],
    );
    let failed = read(Duration::from_secs(2));
    assert_eq!(failed.len(), 4);
    for (p, s) in &failed {
        assert!(matches!(s, Start::Retry(_)), "partition {p}: {s:?}");
    }
    // Held, paused and unready, then started once a read succeeds.
    let mut held = checkpoints::HeldPartitions::default();
    let t0 = Instant::now();
    for (p, s) in &failed {
        assert!(!held.apply(*p, s, t0));
    }
    assert_eq!(held.counts(), (4, 0));
    cluster.clear_request_errors(RDKafkaApiKey::OffsetFetch);
    let again = read(Duration::from_secs(10));
    assert_eq!(again, ok, "the same decisions once the coordinator answers");
    for (p, s) in &again {
        held.apply(*p, s, t0 + checkpoints::RETRY_EVERY);
    }
    assert_eq!(
        held.counts(),
        (0, 1),
        "only the unparseable partition stays held"
    );
}

/// A partition paused (for the in-flight budget, or held for its checkpoint) when it is revoked
/// delivers again once assigned back. librdkafka keeps the application's pause across unassign
/// and assign; without the revoke handler clearing it, intake stopped for good after any
/// rebalance during a pause (found by review: a whole-group rebalance is what every model's
/// rollout causes).
#[test]
fn a_partition_paused_when_revoked_delivers_when_assigned_again() {
    use rdkafka::consumer::ConsumerContext;
    use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
    let cluster = MockCluster::new(1).expect("mock cluster");
    let topic = "paused";
    cluster.create_topic(topic, 1, 1).expect("topic");
    let p: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", cluster.bootstrap_servers())
        .create()
        .expect("producer");
    for i in 0..5 {
        p.send(
            BaseRecord::<(), _>::to(topic)
                .partition(0)
                .payload(&format!("m{i}")),
        )
        .map_err(|(e, _)| e)
        .expect("send");
    }
    p.flush(Duration::from_secs(10)).expect("flush");
    let from_start = || {
        let mut t = TopicPartitionList::new();
        t.add_partition_offset(topic, 0, Offset::Beginning).unwrap();
        t
    };
    let c = consumer(&cluster.bootstrap_servers(), topic);
    c.assign(&from_start()).unwrap();
    // The loop's pause for the budget, then an eager revoke through the context's handler.
    c.pause(&c.assignment().unwrap()).unwrap();
    let mut revoked = c.assignment().unwrap();
    c.context().rebalance(
        &c,
        RDKafkaRespErr::RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS,
        &mut revoked,
    );
    assert_eq!(c.assignment().unwrap().count(), 0, "unassigned");
    c.assign(&from_start()).unwrap();
    let end = Instant::now() + Duration::from_secs(15);
    let mut delivered = 0;
    while Instant::now() < end && delivered < 5 {
        if let Some(Ok(_)) = c.poll(Duration::from_millis(100)) {
            delivered += 1;
        }
    }
    assert_eq!(delivered, 5, "the partition came back paused");
}
