//! bootstrap's Kafka look-ups (the partition count `apply` compares with the replicas, the
//! lag of `status` and `delete --drain`) under OAUTHBEARER: the look-up client gets its token
//! from the spec's own `sasl.oauthbearer.*` settings, through the checking front.

use super::{checking_front, idp, CLIENT, SECRET};
use crate::bootstrap::spec_text;
use crate::runtime::{brokers, create_topic, logs, produce};
use observation_publisher::bootstrap::kafka::{lag, partition_count};
use observation_publisher::bootstrap::Spec;
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
    let seen = front.seen.lock().unwrap();
    assert!(
        !seen.accepted.is_empty() && seen.accepted.iter().all(|p| p == "svc-publisher"),
        "{seen:?}"
    );
    assert!(
        seen.refused.is_empty() && seen.unauthenticated.is_empty(),
        "{seen:?}"
    );
    assert!(!idp.requests().is_empty());
}

#[test]
fn a_credential_read_from_a_secret_in_the_cluster_stops_the_look_ups_at_once_naming_it() {
    let idp = idp(Arc::new(Mutex::new(SECRET.into())), 3600);
    let front = checking_front();
    let mut consumer = oidc(&idp.url, String::new());
    consumer.pop();
    consumer.push((
        "sasl.oauthbearer.client.secret",
        "{secretKeyRef: {name: kafka-client, key: secret}}".into(),
    ));
    let s = spec(&front.addr, &consumer);
    create_topic(s.topic(), 1);
    let source = s.config.observation_source.clone().unwrap();
    let started = std::time::Instant::now();
    let e = partition_count(&source, TIMEOUT).unwrap_err().to_string();
    assert!(
        e.contains("sasl.oauthbearer.client.secret")
            && e.contains("kafka-client/secret")
            && e.contains("does not read"),
        "{e}"
    );
    assert!(lag(&source, TIMEOUT)
        .unwrap_err()
        .to_string()
        .contains("kafka-client/secret"));
    // Not the look-up's timeout: nothing was asked of the token endpoint or the broker.
    assert!(started.elapsed() < TIMEOUT / 2, "{:?}", started.elapsed());
    assert!(idp.requests().is_empty());
    assert!(front.seen.lock().unwrap().accepted.is_empty());
}
