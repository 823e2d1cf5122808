//! `delete --drain` against the real local Kafka broker (`scripts/kafka start`; address from
//! `KAFKA_BOOTSTRAP`). Each test uses a fresh topic and group. Every record is produced as its
//! own batch, because the test broker (tansu) under-reports the high watermark when the last
//! batch of a partition holds several records; the tests check the watermark they rely on.

use super::fake_apiserver::{FakeApiServer, Rollouts};
use super::{fast, kafka_bootstrap, opts, spec, NS};
use axum::http::Method;
use observation_publisher::bootstrap::apply::apply;
use observation_publisher::bootstrap::delete::{delete, DrainOptions};
use observation_publisher::bootstrap::error::BootstrapError;
use observation_publisher::bootstrap::kafka::lag_async;
use observation_publisher::bootstrap::poll::Backoff;
use observation_publisher::bootstrap::Spec;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{Offset, TopicPartitionList};
use std::time::Duration;

const PARTITIONS: i32 = 2;
const PER_PARTITION: i64 = 3;

/// Creates the spec's topic and writes `PER_PARTITION` single-record batches to each partition.
async fn fill_topic(s: &Spec) {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", kafka_bootstrap())
        .create()
        .expect("admin client");
    let res = admin
        .create_topics(
            &[NewTopic::new(
                s.topic(),
                PARTITIONS,
                TopicReplication::Fixed(1),
            )],
            &AdminOptions::new(),
        )
        .await
        .unwrap_or_else(|e| panic!("is the broker running (scripts/kafka start)? {e}"));
    for r in res {
        r.unwrap_or_else(|(t, e)| panic!("create topic {t}: {e:?}"));
    }
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", kafka_bootstrap())
        .set("linger.ms", "0")
        .set("batch.num.messages", "1")
        .create()
        .expect("producer");
    for p in 0..PARTITIONS {
        for i in 0..PER_PARTITION {
            let payload = format!("log {p}-{i}");
            // Awaiting each delivery keeps every record in its own batch.
            producer
                .send(
                    FutureRecord::<(), _>::to(s.topic())
                        .partition(p)
                        .payload(&payload),
                    Duration::from_secs(10),
                )
                .await
                .unwrap_or_else(|(e, _)| panic!("produce: {e}"));
        }
    }
}

/// Commits `offset` for `partition` in the spec's group, as the publisher would after its sinks
/// acknowledged.
fn commit(s: &Spec, partition: i32, offset: i64) {
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", kafka_bootstrap())
        .set("group.id", s.group_id())
        .set("enable.auto.commit", "false")
        .set("session.timeout.ms", "2000")
        .set("heartbeat.interval.ms", "500")
        .create()
        .expect("consumer");
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(s.topic(), partition, Offset::Offset(offset))
        .expect("tpl");
    c.commit(&tpl, CommitMode::Sync).expect("commit");
}

fn unique_version() -> String {
    format!("d{:08x}", fastrand::u32(..))
}

fn deletes(fake: &FakeApiServer) -> usize {
    fake.requests()
        .iter()
        .filter(|r| r.method == Method::DELETE)
        .count()
}

#[tokio::test]
async fn delete_drain_waits_until_the_group_has_no_lag() {
    let fake = FakeApiServer::start(Rollouts::Complete).await;
    let c = fake.client();
    let v1 = spec("sample", "credit-model", &unique_version(), 1, "");
    apply(&c, &v1, opts()).await.unwrap();
    fill_topic(&v1).await;
    let deletes_before = deletes(&fake); // apply removes a stale ScaledObject, if any
    let source = v1.config.observation_source.clone().unwrap();

    // Honesty check: the broker reports the true high watermarks.
    let lag = lag_async(&source, Duration::from_secs(10)).await.unwrap();
    assert_eq!(lag.partitions.len(), PARTITIONS as usize);
    assert!(
        lag.partitions
            .iter()
            .all(|p| p.high == PER_PARTITION && p.committed.is_none()),
        "{lag:?}"
    );
    assert_eq!(lag.total, PER_PARTITION * i64::from(PARTITIONS));

    let drain = DrainOptions {
        timeout: Duration::from_secs(120),
        backoff: Backoff {
            initial: Duration::from_millis(20),
            max: Duration::from_millis(200),
        },
    };
    let task = tokio::spawn({
        let (c, v1) = (c.clone(), v1.clone());
        async move { delete(&c, &v1, Some(drain)).await }
    });

    // The publisher catches up one partition: still lag on the other, so nothing is deleted.
    commit(&v1, 0, PER_PARTITION);
    let lag = lag_async(&source, Duration::from_secs(10)).await.unwrap();
    assert_eq!(lag.total, PER_PARTITION, "{lag:?}");
    let lag = lag_async(&source, Duration::from_secs(10)).await.unwrap();
    assert_eq!(lag.total, PER_PARTITION, "{lag:?}");
    assert!(
        !task.is_finished(),
        "delete returned while the group still lagged"
    );
    assert_eq!(deletes(&fake), deletes_before);
    assert!(fake.get(NS, "deployments", &v1.names.workload).is_some());

    // It catches up the rest: the drain completes and v1's objects go.
    commit(&v1, 1, PER_PARTITION);
    let report = task.await.unwrap().unwrap();
    assert_eq!(report.drained.as_ref().map(|l| l.total), Some(0));
    assert!(
        report
            .deleted
            .contains(&format!("Deployment/{}", v1.names.workload)),
        "{report:?}"
    );
    assert!(fake.get(NS, "deployments", &v1.names.workload).is_none());
    assert!(fake.get(NS, "secrets", &v1.names.config_secret).is_none());
    assert!(fake
        .get(NS, "serviceaccounts", &v1.names.workload)
        .is_none());
}

#[tokio::test]
async fn delete_drain_times_out_and_deletes_nothing_while_lag_remains() {
    let fake = FakeApiServer::start(Rollouts::Complete).await;
    let c = fake.client();
    let v1 = spec("sample", "credit-model", &unique_version(), 1, "");
    apply(&c, &v1, opts()).await.unwrap();
    fill_topic(&v1).await;
    let deletes_before = deletes(&fake);
    commit(&v1, 0, 1); // partly consumed: lag 2 on p0, 3 on p1

    let err = delete(
        &c,
        &v1,
        Some(DrainOptions {
            timeout: Duration::from_millis(500),
            backoff: fast(),
        }),
    )
    .await
    .unwrap_err();
    match &err {
        BootstrapError::DrainTimeout { lag, group, .. } => {
            assert_eq!(*lag, 2 * PER_PARTITION - 1);
            assert_eq!(group, v1.group_id());
        }
        other => panic!("{other}"),
    }
    assert_eq!(err.exit_code(), 1);
    assert!(err.to_string().contains("nothing was deleted"), "{err}");
    assert_eq!(deletes(&fake), deletes_before);
    for (plural, name) in [
        ("deployments", &v1.names.workload),
        ("secrets", &v1.names.config_secret),
        ("serviceaccounts", &v1.names.workload),
    ] {
        assert!(fake.get(NS, plural, name).is_some(), "{plural} was deleted");
    }
}
