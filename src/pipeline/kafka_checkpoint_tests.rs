//! The poll loop's pieces against a real coordinator: librdkafka's mock cluster (it keeps
//! commit metadata), with `OffsetFetch` failing on demand. Reading exactly-once checkpoints: a
//! failed read must be a `Retry`, never "no checkpoint" (which would start the partitions
//! fresh). Pauses across revokes, the revoke after the drain, a start that
//! cannot be read, and a burst over the in-flight budget.

use super::*;
use crate::pipeline::checkpoints::Start;
use crate::pipeline::start_from::other_group_reader;
use crate::pipeline::state::Event;
use crate::server::Health;
use rdkafka::config::{ClientConfig, FromClientConfigAndContext};
use rdkafka::consumer::CommitMode;
use rdkafka::mocking::MockCluster;
use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};
use rdkafka::Offset;

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

/// `n` messages (`m0`, `m1`, …) to partition 0 of `topic`.
fn produce(bootstrap: &str, topic: &str, n: usize) {
    use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
    let p: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .expect("producer");
    for i in 0..n {
        let payload = format!("m{i}");
        let record = BaseRecord::<(), _>::to(topic)
            .partition(0)
            .payload(&payload);
        p.send(record).map_err(|(e, _)| e).expect("send");
    }
    p.flush(Duration::from_secs(10)).expect("flush");
}

/// Partition 0 of `topic`, from its first message.
fn from_beginning(topic: &str) -> TopicPartitionList {
    let mut t = TopicPartitionList::new();
    t.add_partition_offset(topic, 0, Offset::Beginning).unwrap();
    t
}

/// A dead-letter target that takes letters and never answers.
struct Nowhere;

impl crate::deadletter::Target for Nowhere {
    fn send(&mut self, _: crate::deadletter::DeadLetter) {}
    fn is_ready(&self) -> bool {
        true
    }
    fn flush(&mut self, _: Duration) {}
}

/// An at-least-once listener of `topic` over a fresh state (`prepare`d, with the sender of its
/// events, in-flight budget `budget`), whose one sink never answers.
fn listener(
    topic: &str,
    budget: usize,
    revoke_timeout: Duration,
    start_from: Option<StartFrom>,
    other_group: Option<Arc<crate::pipeline::start_from::GroupReader>>,
    prepare: impl FnOnce(&mut State, &std::sync::mpsc::Sender<Event>),
) -> Listener {
    let (tx, rx) = std::sync::mpsc::channel();
    let (sink_tx, sink_rx) = tokio::sync::mpsc::channel(2);
    std::mem::forget(sink_rx);
    let mut st = State::new(
        topic.into(),
        1,
        crate::batch::Batcher::new(crate::batch::testing::layout(), Default::default()),
        Health::new(),
        rx,
        sink_tx,
        Box::new(Nowhere),
        budget,
        None,
    );
    prepare(&mut st, &tx);
    Listener {
        state: Arc::new(Mutex::new(st)),
        topic: topic.into(),
        revoke_timeout,
        start_from,
        other_group,
        exactly_once: false,
        revoke_hooks: Vec::new(),
    }
}

#[test]
fn each_read_outcome_is_a_distinct_start_and_a_failed_read_is_retried() {
    let cluster = MockCluster::new(1).expect("mock cluster");
    let topic = "eo-checkpoints";
    cluster.create_topic(topic, 4, 1).expect("topic");
    let c = consumer(&cluster.bootstrap_servers(), topic);
    // 0: a checkpoint; 1: nothing committed; 2: garbage metadata; 3: a commit without metadata.
    let group = Group::new(&c, topic);
    let garbage = "{\"not\":\"ours\"}";
    let points = [(0, 5, Some(CP)), (2, 7, Some(garbage)), (3, 9, None)];
    group.commit(points).expect("commit");

    let read = |t| checkpoints::read(&group, &[0, 1, 2, 3], t);
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
/// rebalance during a pause (and a whole-group rebalance is what every model's rollout
/// causes).
#[test]
fn a_partition_paused_when_revoked_delivers_when_assigned_again() {
    use rdkafka::consumer::ConsumerContext;
    let cluster = MockCluster::new(1).expect("mock cluster");
    let topic = "paused";
    cluster.create_topic(topic, 1, 1).expect("topic");
    produce(&cluster.bootstrap_servers(), topic, 5);
    let c = consumer(&cluster.bootstrap_servers(), topic);
    c.assign(&from_beginning(topic)).unwrap();
    // The loop's pause for the budget, then an eager revoke through the context's handler.
    c.pause(&c.assignment().unwrap()).unwrap();
    let mut revoked = c.assignment().unwrap();
    c.context().rebalance(
        &c,
        RDKafkaRespErr::RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS,
        &mut revoked,
    );
    assert_eq!(c.assignment().unwrap().count(), 0, "unassigned");
    c.assign(&from_beginning(topic)).unwrap();
    let end = Instant::now() + Duration::from_secs(15);
    let mut delivered = 0;
    while Instant::now() < end && delivered < 5 {
        if let Some(Ok(_)) = c.poll(Duration::from_millis(100)) {
            delivered += 1;
        }
    }
    assert_eq!(delivered, 5, "the partition came back paused");
}

/// After the final drain, the revoke of the consumer's close commits what is acknowledged (also
/// since the drain's own commit) and does not wait `revoke_timeout` again for a batch the drain gave up on (an
/// unfinished drain took `drain_timeout` + `revoke_timeout`, past the pod's grace period). The
/// revoke before the drain still waits (here: it is still waiting after 2 s of a 60 s timeout).
#[test]
fn the_revoke_after_the_drain_does_not_wait_again() {
    let cluster = MockCluster::new(1).expect("mock cluster");
    let topic = "drained";
    cluster.create_topic(topic, 1, 1).expect("topic");
    let revoke = |drained: bool, acked: bool| {
        let c = consumer(&cluster.bootstrap_servers(), topic);
        // The sink never answers (the batch stays unacknowledged), or its acknowledgement
        // arrives after the drain's last commit.
        let l = listener(
            topic,
            1 << 30,
            Duration::from_secs(60),
            None,
            None,
            |st, events| {
                st.assigned_with(&[0], &std::collections::HashMap::new());
                let log = crate::batch::testing::log("s", 1, 0, 1_700_000_000_000_000);
                st.take(0, 0, None, Some(&log), Instant::now());
                st.flush(Instant::now());
                st.drained = drained;
                if acked {
                    let (dead, checkpoints) = (Vec::new(), Vec::new());
                    let ack = Event::Acked {
                        id: 0,
                        sink: 0,
                        dead,
                        checkpoints,
                    };
                    events.send(ack).unwrap();
                }
            },
        );
        let (done_tx, done) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            l.revoking(&c, &[0]);
            let _ = done_tx.send(());
        });
        done
    };
    assert!(
        revoke(true, false)
            .recv_timeout(Duration::from_secs(30))
            .is_ok(),
        "the revoke after the drain waited for the batch the drain gave up on"
    );
    assert!(
        revoke(false, false)
            .recv_timeout(Duration::from_secs(2))
            .is_err(),
        "a revoke before the drain waits for the batch"
    );
    // What was acknowledged since the drain's commit is committed by the revoke.
    assert!(revoke(true, true)
        .recv_timeout(Duration::from_secs(30))
        .is_ok());
    let mut q = TopicPartitionList::new();
    q.add_partition(topic, 0);
    let committed = consumer(&cluster.bootstrap_servers(), topic)
        .committed_offsets(q, Duration::from_secs(10))
        .unwrap();
    assert_eq!(committed.elements()[0].offset(), Offset::Offset(1));
}

/// `start_from: group:<old>` on a new group whose committed offsets cannot be read at its first
/// assignment (the coordinator keeps loading): the partition is not started per
/// `auto.offset.reset` (it used to be: the whole topic was published again). It waits, paused,
/// and starts at the old group's offset once the read succeeds.
#[test]
fn a_start_that_cannot_be_read_waits_paused_then_starts_where_start_from_says() {
    let cluster = MockCluster::new(1).expect("mock cluster");
    let bootstrap = cluster.bootstrap_servers();
    let topic = "migrating";
    cluster.create_topic(topic, 1, 1).expect("topic");
    produce(&bootstrap, topic, 20);
    // The old publisher's group committed 15.
    let old: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &bootstrap)
        .set("group.id", "old")
        .create()
        .expect("old group");
    let mut at = TopicPartitionList::new();
    at.add_partition_offset(topic, 0, Offset::Offset(15))
        .unwrap();
    old.commit(&at, CommitMode::Sync).expect("commit");

    let sf = StartFrom::Group("old".into());
    let mut conn = ClientConfig::new();
    conn.set("bootstrap.servers", &bootstrap);
    let other = other_group_reader(Some(&sf), &conn, None).map(Arc::new);
    let mut cfg = ClientConfig::new();
    cfg.set("bootstrap.servers", &bootstrap)
        .set("group.id", "new")
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest");
    let c: BaseConsumer<SourceContext> = BaseConsumer::from_config_and_context(
        &cfg,
        SourceContext::new(topic.into(), Health::new(), Box::new(|_| {})),
    )
    .expect("consumer");
    let l = listener(
        topic,
        1 << 30,
        Duration::from_secs(1),
        Some(sf.clone()),
        other.clone(),
        |_, _| {},
    );
    // The coordinator keeps loading through the first assignment.
    cluster.request_errors(
        RDKafkaApiKey::OffsetFetch,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_COORDINATOR_LOAD_IN_PROGRESS; 500],
    );
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition(topic, 0);
    l.assigning(&c, &mut tpl);
    c.assign(&tpl).unwrap();
    l.assigned(&c, &[0]);
    assert!(State::lock(&l.state).pending_starts.is_unread(0), "pending");
    let first = |c: &BaseConsumer<SourceContext>, wait: Duration| {
        let end = Instant::now() + wait;
        while Instant::now() < end {
            if let Some(Ok(m)) = c.poll(Duration::from_millis(100)) {
                use rdkafka::Message;
                return Some(m.offset());
            }
        }
        None
    };
    assert_eq!(
        first(&c, Duration::from_secs(2)),
        None,
        "nothing read meanwhile"
    );
    cluster.clear_request_errors(RDKafkaApiKey::OffsetFetch);
    // As the poll loop does: read again every second (librdkafka positions the partition
    // itself first; it cannot be moved before).
    let settings = Settings {
        commit_interval: Duration::from_secs(1),
        start_from: Some(sf),
        other_group: other,
    };
    let group = Group::new(&c, topic);
    for _ in 0..30 {
        let mut st = State::lock(&l.state);
        st.housekeep(Instant::now(), &group, &settings);
        if !st.pending_starts.any_unread() {
            break;
        }
        drop(st);
        let _ = c.poll(Duration::from_secs(1));
    }
    assert!(
        !State::lock(&l.state).pending_starts.any_unread(),
        "started"
    );
    assert_eq!(
        first(&c, Duration::from_secs(15)),
        Some(15),
        "starts at the old group's offset"
    );
}

/// Over the in-flight budget, a burst of the poll loop takes one message and stops, whether or
/// not intake is paused already: while it is, a message comes from a partition assigned since
/// the pause, not paused yet (here: assigned, never paused), and the loop's housekeeping must
/// pause it before the next one. The burst used to stop only when intake was not paused, so
/// such a partition gave up to a whole burst (1,024 messages) over the budget.
#[test]
fn a_burst_over_the_budget_takes_one_message_and_stops() {
    let cluster = MockCluster::new(1).expect("mock cluster");
    let topic = "burst";
    cluster.create_topic(topic, 1, 1).expect("topic");
    produce(&cluster.bootstrap_servers(), topic, 300);
    let c = consumer(&cluster.bootstrap_servers(), topic);
    // Undecodable messages: each is a dead letter the target never acknowledges, held in the
    // budget of 1 byte, so the first message is over it.
    let l = listener(topic, 1, Duration::from_secs(1), None, None, |st, _| {
        st.assigned_with(&[0], &std::collections::HashMap::new());
    });
    c.assign(&from_beginning(topic)).unwrap();
    let take = |wait| burst(&c, &l.state, wait);
    for n in 1..=300u64 {
        let stopped = take(Duration::from_secs(10));
        assert!(stopped, "burst {n} stopped over the budget");
        assert_eq!(
            State::lock(&l.state).totals.messages,
            n,
            "one message per burst"
        );
    }
    assert!(State::lock(&l.state).over_budget());
    // Nothing was polled and dropped: the 300 taken are all there were, and nothing is left.
    assert!(!take(Duration::from_millis(500)), "nothing left");
    assert_eq!(State::lock(&l.state).totals.messages, 300);
}
