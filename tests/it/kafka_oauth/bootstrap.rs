//! bootstrap's Kafka look-ups (the partition count `apply` compares with the replicas, the
//! lag of `status` and `delete --drain`) under OAUTHBEARER: the look-up client gets its token
//! from the spec's own `sasl.oauthbearer.*` settings, through the checking front, with a client
//! secret the spec reads from a Secret read by bootstrap from the fake API server.

use super::sasl_proxy::SaslProxy;
use super::{checking_front, idp, CLIENT, SECRET};
use crate::bootstrap::fake_apiserver::{object_path, FakeApiServer, Rollouts};
use crate::bootstrap::{fast, opts, spec_text, NS};
use crate::runtime::{brokers, create_topic, logs, produce};
use axum::http::Method;
use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use observation_publisher::bootstrap::apply::apply;
use observation_publisher::bootstrap::delete::{delete, DrainOptions};
use observation_publisher::bootstrap::kafka::{lag, partition_count};
use observation_publisher::bootstrap::poll::Backoff;
use observation_publisher::bootstrap::status::status;
use observation_publisher::bootstrap::Spec;
use observation_publisher::config::KafkaSource;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::{Offset, TopicPartitionList};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const TIMEOUT: Duration = Duration::from_secs(20);

/// A spec reading its topic at `servers`, with `consumer` as additional_consumer_config; a
/// fresh model, so a fresh topic and group.
fn spec(servers: &str, consumer: &[(&str, String)]) -> Spec {
    let model = format!("oauth-{:06x}", fastrand::u32(..) & 0xff_ffff);
    let mut source = format!("    config:\n      bootstrap_servers: {servers:?}\n");
    if !consumer.is_empty() {
        source.push_str("      additional_consumer_config:\n");
        for (k, v) in consumer {
            source.push_str(&format!("        {k}: {v}\n"));
        }
    }
    let text = spec_text("sample", &model, "1", 1, "").replace(
        &format!("    config: {{bootstrap_servers: \"{}\"}}\n", brokers()),
        &source,
    );
    assert!(text.contains("additional_consumer_config") || consumer.is_empty());
    Spec::parse(&text).unwrap_or_else(|p| panic!("{p}")).0
}

fn oidc(endpoint: &str, secret: String) -> Vec<(&'static str, String)> {
    vec![
        ("security.protocol", "SASL_PLAINTEXT".into()),
        ("sasl.mechanisms", "OAUTHBEARER".into()),
        ("sasl.oauthbearer.method", "oidc".into()),
        (
            "sasl.oauthbearer.token.endpoint.url",
            format!("{endpoint:?}"),
        ),
        ("sasl.oauthbearer.client.id", CLIENT.into()),
        ("sasl.oauthbearer.client.secret.file", secret),
    ]
}

#[test]
fn partition_count_and_lag_get_a_token_from_the_specs_oauthbearer_settings() {
    let dir = tempfile::tempdir().unwrap();
    let idp = idp(Arc::new(Mutex::new(SECRET.into())), 3600);
    let front = checking_front();
    let secret = dir.path().join("client-secret");
    std::fs::write(&secret, SECRET).unwrap();
    let s = spec(
        &front.addr,
        &oidc(&idp.url, format!("{:?}", secret.display().to_string())),
    );
    create_topic(s.topic(), 2);
    produce(s.topic(), &logs(20, 5, 0.0));
    let through_front = s.config.observation_source.clone().unwrap();
    // The same look-ups straight at the broker, without a token: what the front must not change.
    let plain = spec(&brokers(), &[]).config.observation_source.unwrap();
    let plain = observation_publisher::config::KafkaSource {
        topic: through_front.topic.clone(),
        group_id: through_front.group_id.clone(),
        ..plain
    };

    assert_eq!(partition_count(&through_front, TIMEOUT).unwrap(), 2);
    let got = lag(&through_front, TIMEOUT).unwrap_or_else(|e| {
        panic!(
            "lag through the front: {e}\n{:?}",
            front.seen.lock().unwrap()
        )
    });
    assert_eq!(got, lag(&plain, TIMEOUT).unwrap());
    assert!(got.total > 0, "{got:?}");
    every_connection_in_as(&front, "svc-publisher");
    assert!(!idp.requests().is_empty());
}

/// The OIDC settings with the client secret read from key `secret` of the Secret
/// `kafka-client` in the spec's namespace: a spec that holds no secret.
fn oidc_from_secret(endpoint: &str) -> Vec<(&'static str, String)> {
    let mut consumer = oidc(endpoint, String::new());
    consumer.pop();
    consumer.push((
        "sasl.oauthbearer.client.secret",
        "{secretKeyRef: {name: kafka-client, key: secret}}".into(),
    ));
    consumer
}

/// A Secret as the API server answers it: the values base64 in `data`.
fn secret_object(name: &str, items: &[(&str, &str)]) -> serde_json::Value {
    let data: serde_json::Map<String, serde_json::Value> = (items.iter())
        .map(|(k, v)| (k.to_string(), B64.encode(v).into()))
        .collect();
    serde_json::json!({
        "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
        "metadata": {"name": name, "namespace": NS}, "data": data,
    })
}

/// Commits `offset` on every partition of `source`'s topic for its group, straight at the
/// broker, as the publisher would once its sinks acknowledged.
fn commit_all(source: &KafkaSource, offsets: &[(i32, i64)]) {
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers())
        .set("group.id", &source.group_id)
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    for (p, o) in offsets {
        tpl.add_partition_offset(&source.topic, *p, Offset::Offset(*o))
            .unwrap();
    }
    c.commit(&tpl, CommitMode::Sync).unwrap();
}

#[test]
fn status_and_delete_drain_authenticate_with_a_client_secret_read_from_the_secret_the_spec_names() {
    let idp = idp(Arc::new(Mutex::new(SECRET.into())), 3600);
    let front = checking_front();
    let s = spec(&front.addr, &oidc_from_secret(&idp.url));
    create_topic(s.topic(), 2);
    produce(s.topic(), &logs(20, 5, 0.0));
    let source = s.config.observation_source.clone().unwrap();
    // The lag read straight from the broker, without a token.
    let plain = KafkaSource {
        bootstrap_servers: brokers(),
        additional_consumer_config: Vec::new(),
        ..source.clone()
    };
    let want = lag(&plain, TIMEOUT).unwrap();
    assert!(want.total > 0, "{want:?}");

    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let fake = FakeApiServer::start(Rollouts::Complete).await;
        fake.put(
            NS,
            "secrets",
            "kafka-client",
            secret_object("kafka-client", &[("secret", SECRET)]),
        );
        let c = fake.client();
        apply(&c, &s, opts()).await.unwrap();
        // Neither the manifests nor the version's Secret carry the value.
        for (plural, name) in [
            ("deployments", &s.names.workload),
            ("secrets", &s.names.config_secret),
        ] {
            let text = fake.get(NS, plural, name).unwrap().to_string();
            assert!(
                !text.contains(SECRET) && !text.contains(&B64.encode(SECRET)),
                "{plural}: {text}"
            );
        }

        let r = status(&c, &s, Some(TIMEOUT)).await.unwrap();
        assert_eq!(
            r.consumer_lag.as_ref(),
            Some(&want),
            "{:?}",
            r.consumer_lag_error
        );
        let read_secret = object_path(NS, "secrets", "kafka-client");
        assert!(
            fake.requests()
                .iter()
                .any(|q| q.method == Method::GET && q.path == read_secret),
            "the Secret was read in the spec's namespace"
        );

        let accepted = front.seen.lock().unwrap().accepted.len();
        // apply removes objects its spec does not yield (a stale ScaledObject, if any).
        let deletes = || {
            (fake.requests().iter())
                .filter(|q| q.method == Method::DELETE)
                .count()
        };
        let deletes_before = deletes();
        let drain = DrainOptions {
            timeout: Duration::from_secs(30),
            backoff: Backoff {
                initial: Duration::from_millis(20),
                max: Duration::from_millis(200),
            },
        };
        let task = tokio::spawn({
            let (c, s) = (c.clone(), s.clone());
            async move { delete(&c, &s, Some(drain)).await }
        });
        // The drain's own look-up authenticates, finds lag and deletes nothing yet.
        while front.seen.lock().unwrap().accepted.len() == accepted {
            assert!(!task.is_finished(), "{:?}", task.await);
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(!task.is_finished());
        assert_eq!(deletes(), deletes_before);

        // The publisher catches up: the drain completes and the version's objects go.
        let ends: Vec<(i32, i64)> = want
            .partitions
            .iter()
            .map(|p| (p.partition, p.high))
            .collect();
        commit_all(&source, &ends);
        let report = task.await.unwrap().unwrap();
        assert_eq!(report.drained.map(|l| l.total), Some(0));
        assert!(fake.get(NS, "deployments", &s.names.workload).is_none());
    });
    every_connection_in_as(&front, "svc-publisher");
    assert!(!idp.requests().is_empty());
}

#[test]
fn a_missing_secret_or_key_or_a_forbidden_read_stops_the_look_ups_at_once_naming_it() {
    let idp = idp(Arc::new(Mutex::new(SECRET.into())), 3600);
    let front = checking_front();
    let s = spec(&front.addr, &oidc_from_secret(&idp.url));
    create_topic(s.topic(), 1);
    let named = [
        "additional_consumer_config.sasl.oauthbearer.client.secret",
        "key \"secret\" of Secret mlobs/kafka-client",
    ];
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let fake = FakeApiServer::start(Rollouts::Complete).await;
        let c = fake.client();
        let drain = DrainOptions {
            timeout: TIMEOUT,
            backoff: fast(),
        };
        // No such Secret: status says why there is no lag; delete --drain fails, deleting nothing.
        let r = status(&c, &s, Some(TIMEOUT)).await.unwrap();
        let why = r.consumer_lag_error.unwrap_or_default();
        for part in named.iter().chain(&["does not exist; create it"]) {
            assert!(why.contains(part), "{part:?} not in {why}");
        }
        let e = delete(&c, &s, Some(drain)).await.unwrap_err();
        assert!(e.to_string().contains("does not exist; create it"), "{e}");
        assert!(!e.is_retryable() && e.exit_code() == 1, "{e:?}");

        // The Secret without the key.
        fake.put(
            NS,
            "secrets",
            "kafka-client",
            secret_object("kafka-client", &[("password", SECRET)]),
        );
        let e = delete(&c, &s, Some(drain)).await.unwrap_err().to_string();
        for part in named
            .iter()
            .chain(&["no key \"secret\" (its keys: password)"])
        {
            assert!(e.contains(part), "{part:?} not in {e}");
        }
        assert!(!e.contains(SECRET), "{e}");

        // A role without `get` on secrets.
        fake.forbid(NS, "secrets", "kafka-client");
        let e = delete(&c, &s, Some(drain)).await.unwrap_err().to_string();
        for part in named
            .iter()
            .chain(&["grant bootstrap's role `get` on secrets in namespace mlobs"])
        {
            assert!(e.contains(part), "{part:?} not in {e}");
        }

        // Not retried until the drain's timeout: the Secret was read once per command (status
        // and three deletes), and nothing was deleted or asked of Kafka.
        let secret_reads = fake
            .requests()
            .iter()
            .filter(|q| q.method == Method::GET && q.path.ends_with("/secrets/kafka-client"))
            .count();
        assert_eq!(secret_reads, 4, "{:#?}", fake.requests());
        assert!(fake.requests().iter().all(|q| q.method != Method::DELETE));
    });
    assert!(idp.requests().is_empty());
    assert!(front.seen.lock().unwrap().accepted.is_empty());
}

/// Every connection through `front` authenticated, as `principal`, and none was refused.
fn every_connection_in_as(front: &SaslProxy, principal: &str) {
    let seen = front.seen.lock().unwrap();
    assert!(
        !seen.accepted.is_empty() && seen.accepted.iter().all(|p| p == principal),
        "{seen:?}"
    );
    assert!(
        seen.refused.is_empty() && seen.unauthenticated.is_empty(),
        "{seen:?}"
    );
}
