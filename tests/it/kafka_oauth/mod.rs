//! Kafka SASL/OAUTHBEARER with tokens the publisher supplies, against a broker front that
//! checks every token ([`sasl_proxy`]) and fake token services over real HTTP
//! ([`token_service`]): the client-credentials grant (secret from a file, read again at every
//! fetch) and Google's Application Default Credentials in Managed Kafka's token form.

mod bootstrap;
mod metadata;
mod sasl_proxy;
mod token_service;

use crate::common::{bin, Reaped};
use crate::runtime::{brokers, create_topic, logs, produce, unique, wait_for, Setup};
use base64::Engine;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use sasl_proxy::SaslProxy;
use serde_json::json;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use token_service::{now, sign, unb64, verify, TokenService};

const LIMIT: Duration = Duration::from_secs(90);
const CLIENT: &str = "publisher-client";
const SECRET: &str = "s3cr3t-1";
const KEY: &[u8] = b"the fake identity provider's signing key";

/// A setup reading `topic` through `proxy`, with `consumer` in additional_consumer_config
/// and dead letters to the Kafka topic `<topic>-dlq`.
fn setup(dir: &std::path::Path, proxy: &str, topic: &str, consumer: &[(&str, String)]) -> Setup {
    let group = unique("g");
    let s = Setup::at(proxy, dir, "a", topic, &group, "");
    let mut extra = String::from("    additional_consumer_config:\n");
    for (k, v) in consumer {
        extra.push_str(&format!("      {k}: {v:?}\n"));
    }
    let cfg = std::fs::read_to_string(&s.config)
        .unwrap()
        .replace(
            &format!("    group_id: {group}\n"),
            &format!("    group_id: {group}\n{extra}"),
        )
        .replace(
            &format!(
                "dead_letter:\n  target: file\n  path: {}\n",
                s.dir.join("dead.bin").display()
            ),
            "dead_letter:\n  target: kafka\n",
        );
    std::fs::write(&s.config, cfg).unwrap();
    s
}

/// `run` of `s`, its command changed by `with` (the environment), its log in
/// `log-<name>.txt` beside the setup's (where `log_tail` reads).
fn run_with(s: &Setup, name: &str, with: impl FnOnce(&mut std::process::Command)) -> Reaped {
    let mut c = bin();
    c.args(["run", "-c", s.config.to_str().unwrap()])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(s.dir.join(format!("log-{name}.txt"))).unwrap());
    with(&mut c);
    Reaped(c.spawn().unwrap())
}

fn oauth(method: &str) -> Vec<(&'static str, String)> {
    vec![
        ("security.protocol", "SASL_PLAINTEXT".into()),
        ("sasl.mechanisms", "OAUTHBEARER".into()),
        ("sasl.oauthbearer.method", method.into()),
    ]
}

/// Messages read from `topic` straight from the broker (by fetching: tansu's ListOffsets
/// answers too low for batched records), waiting up to `LIMIT` for `want` of them.
fn read_count(topic: &str, want: usize) -> usize {
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers())
        .set("group.id", unique("oauth-reader"))
        .set("session.timeout.ms", "2000")
        .set("auto.offset.reset", "earliest")
        .create()
        .unwrap();
    c.subscribe(&[topic]).unwrap();
    let mut n = 0;
    wait_for(LIMIT, || {
        if let Some(Ok(_)) = c.poll(Duration::from_millis(200)) {
            n += 1;
        }
        n >= want
    });
    n
}

/// The fake identity provider: a JWT for `sub` valid `ttl` seconds to a client presenting
/// `CLIENT` and the secret in `secret`, 401 to anyone else.
fn idp(secret: Arc<Mutex<String>>, ttl: u64) -> TokenService {
    TokenService::start(Arc::new(move |r| {
        let want = base64::engine::general_purpose::STANDARD
            .encode(format!("{CLIENT}:{}", secret.lock().unwrap()));
        if r.header("authorization") != Some(&format!("Basic {want}")) {
            return (401, json!({"error": "invalid_client"}).to_string());
        }
        let claims = json!({"sub": "svc-publisher", "iss": "fake-idp", "exp": now() + ttl});
        let body =
            json!({"access_token": sign(KEY, &claims), "token_type": "Bearer", "expires_in": ttl});
        (200, body.to_string())
    }))
}

fn checking_front() -> SaslProxy {
    SaslProxy::start(
        &brokers(),
        Arc::new(|t| verify(KEY, t).map(|c| c["sub"].as_str().unwrap_or_default().to_string())),
    )
}

#[test]
fn the_front_refuses_a_client_without_a_token() {
    let proxy = checking_front();
    let topic = unique("oauth-plain");
    create_topic(&topic, 1);
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &proxy.addr)
        .create()
        .unwrap();
    assert!(c
        .fetch_metadata(Some(&topic), Duration::from_secs(3))
        .is_err());
    assert!(!proxy.seen.lock().unwrap().unauthenticated.is_empty());
}

#[test]
fn client_credentials_from_a_secret_file_get_the_consumer_the_dead_letter_admin_and_producer_in_and_are_refreshed_before_expiry(
) {
    let dir = tempfile::tempdir().unwrap();
    let ttl = 6;
    let idp = idp(Arc::new(Mutex::new(SECRET.into())), ttl);
    let proxy = checking_front();
    let topic = unique("oauth-oidc");
    create_topic(&topic, 2);
    // The dead-letter topic is left for the publisher's admin client to create, through the
    // checking front.
    let sent = logs(300, 7, 0.05);
    let bad = sent.iter().filter(|(_, m)| *m).count();
    produce(&topic, &sent);
    let secret = dir.path().join("client-secret");
    std::fs::write(&secret, format!("{SECRET}\n")).unwrap();
    let mut consumer = oauth("oidc");
    consumer.extend([
        ("sasl.oauthbearer.token.endpoint.url", idp.url.clone()),
        ("sasl.oauthbearer.client.id", CLIENT.into()),
        (
            "sasl.oauthbearer.client.secret.file",
            secret.display().to_string(),
        ),
        ("sasl.oauthbearer.scope", "kafka.read kafka.write".into()),
    ]);
    let s = setup(dir.path(), &proxy.addr, &topic, &consumer);
    let _child = s.start();
    assert!(
        wait_for(LIMIT, || s.rows().len() == sent.len() - bad),
        "every good row written through the checking front:\n{}\n{:?}",
        s.log_tail(),
        proxy.seen.lock().unwrap()
    );
    assert_eq!(
        read_count(&format!("{topic}-dlq"), bad),
        bad,
        "every bad log dead-lettered through the checking front"
    );
    // Created by the admin client, not by the broker on the producer's first send (which
    // would hide an admin client without a token behind a successful delivery).
    assert_eq!(
        s.log_count("dead-letter topic"),
        0,
        "no dead-letter topic error:\n{}",
        s.log_tail()
    );
    {
        let seen = proxy.seen.lock().unwrap();
        assert!(
            seen.accepted.iter().all(|p| p == "svc-publisher"),
            "{seen:?}"
        );
        assert!(
            seen.refused.is_empty() && seen.unauthenticated.is_empty(),
            "{seen:?}"
        );
    }
    // The request librdkafka's own OIDC sends: a form POST, the client in basic auth.
    let first = idp.requests()[0].clone();
    assert_eq!(
        (first.method.as_str(), first.path.as_str()),
        ("POST", "/token")
    );
    assert_eq!(
        first.header("content-type"),
        Some("application/x-www-form-urlencoded")
    );
    assert_eq!(first.header("accept"), Some("application/json"));
    assert_eq!(
        first.body,
        "grant_type=client_credentials&scope=kafka.read%20kafka.write"
    );
    // librdkafka asks again before the token expires, and the clients go on with the new one.
    assert!(
        wait_for(Duration::from_secs(4 * ttl), || idp.requests().len() >= 3),
        "refreshed: {} token requests\n{}",
        idp.requests().len(),
        s.log_tail()
    );
    let (status, body) = s.get("/readyz").unwrap();
    assert_eq!(status, 200, "{body}");
}

#[test]
fn a_refused_client_secret_leaves_the_publisher_unready_saying_why_until_the_file_holds_the_right_one(
) {
    let dir = tempfile::tempdir().unwrap();
    let idp = idp(Arc::new(Mutex::new(SECRET.into())), 3600);
    let proxy = checking_front();
    let topic = unique("oauth-rotate");
    create_topic(&topic, 1);
    create_topic(&format!("{topic}-dlq"), 1);
    let sent = logs(50, 3, 0.0);
    produce(&topic, &sent);
    let secret = dir.path().join("client-secret");
    std::fs::write(&secret, "an-old-secret").unwrap();
    let mut consumer = oauth("oidc");
    consumer.extend([
        ("sasl.oauthbearer.token.endpoint.url", idp.url.clone()),
        ("sasl.oauthbearer.client.id", CLIENT.into()),
        (
            "sasl.oauthbearer.client.secret.file",
            secret.display().to_string(),
        ),
    ]);
    let s = setup(dir.path(), &proxy.addr, &topic, &consumer);
    let _child = s.start();
    let mut last = String::new();
    assert!(
        wait_for(LIMIT, || {
            last = s.get("/readyz").map(|(_, b)| b).unwrap_or_default();
            last.contains("OAUTHBEARER") && last.contains("401")
        }),
        "/readyz names the token failure: {last}\n{}",
        s.log_tail()
    );
    assert!(
        !last.contains(SECRET) && !last.contains("an-old-secret"),
        "{last}"
    );
    assert_eq!(s.rows().len(), 0);
    assert!(proxy.seen.lock().unwrap().accepted.is_empty());
    // The Secret is rotated: the file is read again at the next attempt.
    std::fs::write(&secret, SECRET).unwrap();
    assert!(
        wait_for(LIMIT, || s.rows().len() == sent.len()),
        "in once the file holds the right secret:\n{}",
        s.log_tail()
    );
    assert!(
        s.log_count(SECRET) == 0 && s.log_count("an-old-secret") == 0,
        "no secret in the log"
    );
}

const EMAIL: &str = "kafka-publisher@proj.iam.gserviceaccount.com";

/// Google's token endpoint for a service-account key: a JWT-bearer grant asking for the
/// cloud-platform scope, answered with an opaque access token it remembers.
fn google_token_endpoint(issued: Arc<Mutex<Vec<String>>>) -> TokenService {
    TokenService::start(Arc::new(move |r| {
        let form: std::collections::HashMap<&str, &str> = r
            .body
            .split('&')
            .filter_map(|kv| kv.split_once('='))
            .collect();
        let claims = form
            .get("assertion")
            .and_then(|a| a.split('.').nth(1))
            // gcp_auth pads its base64url, and the form percent-encodes the padding.
            .and_then(|c| unb64(c.replace("%3D", "").trim_end_matches('=')))
            .and_then(|c| serde_json::from_slice::<serde_json::Value>(&c).ok())
            .unwrap_or_default();
        if form.get("grant_type").copied()
            != Some("urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer")
            || claims["iss"] != EMAIL
            || claims["scope"] != "https://www.googleapis.com/auth/cloud-platform"
        {
            return (
                400,
                json!({"error": "invalid_grant", "got": r.body}).to_string(),
            );
        }
        let mut issued = issued.lock().unwrap();
        let token = format!("ya29.fake-{}", issued.len());
        issued.push(token.clone());
        (
            200,
            json!({"access_token": token, "expires_in": 3600, "token_type": "Bearer"}).to_string(),
        )
    }))
}

/// Managed Kafka's check of its token: header, claims, and an access token Google issued.
fn managed_kafka_check(token: &str, issued: &Mutex<Vec<String>>) -> Result<String, String> {
    let parts: Vec<&str> = token.split('.').collect();
    let [h, c, a] = parts[..] else {
        return Err(format!("{} parts", parts.len()));
    };
    let json = |p: &str| {
        unb64(p)
            .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
            .ok_or("not base64url JSON")
    };
    if json(h)? != json!({"typ": "JWT", "alg": "GOOG_OAUTH2_TOKEN"}) {
        return Err("header".into());
    }
    let claims = json(c)?;
    if claims["sub"] != EMAIL || claims["scope"] != "kafka" || claims["iss"] != "Google" {
        return Err(format!("claims {claims}"));
    }
    if claims["exp"].as_u64().unwrap_or(0) <= now() {
        return Err("expired".into());
    }
    let access = String::from_utf8(unb64(a).ok_or("access token not base64url")?)
        .map_err(|e| e.to_string())?;
    if !issued.lock().unwrap().contains(&access) {
        return Err(format!("access token {access:?} was not issued"));
    }
    Ok(EMAIL.into())
}

#[test]
fn googles_application_default_credentials_in_managed_kafkas_form_get_the_publisher_in() {
    let dir = tempfile::tempdir().unwrap();
    let issued = Arc::new(Mutex::new(Vec::new()));
    let google = google_token_endpoint(Arc::clone(&issued));
    let i2 = Arc::clone(&issued);
    let proxy = SaslProxy::start(&brokers(), Arc::new(move |t| managed_kafka_check(t, &i2)));
    let pem = std::process::Command::new("openssl")
        .args([
            "genpkey",
            "-algorithm",
            "RSA",
            "-pkeyopt",
            "rsa_keygen_bits:2048",
        ])
        .output()
        .expect("openssl");
    let key = json!({
        "type": "service_account", "project_id": "proj", "private_key_id": "k1",
        "private_key": String::from_utf8(pem.stdout).unwrap(), "client_email": EMAIL,
        "client_id": "1", "token_uri": google.url,
    });
    let key_file = dir.path().join("key.json");
    std::fs::write(&key_file, key.to_string()).unwrap();
    let topic = unique("oauth-google");
    create_topic(&topic, 1);
    create_topic(&format!("{topic}-dlq"), 1);
    let sent = logs(80, 11, 0.0);
    produce(&topic, &sent);
    let s = setup(dir.path(), &proxy.addr, &topic, &oauth("google"));
    let _child = run_with(&s, "google", |c| {
        c.env("GOOGLE_APPLICATION_CREDENTIALS", &key_file);
    });
    assert!(
        wait_for(LIMIT, || s.rows().len() == sent.len()),
        "rows through the checking front:\n{}\n{:?}\n{:?}",
        s.log_tail(),
        proxy.seen.lock().unwrap(),
        google.requests()
    );
    let seen = proxy.seen.lock().unwrap();
    assert!(
        !seen.accepted.is_empty() && seen.refused.is_empty(),
        "{seen:?}"
    );
}

#[test]
fn a_token_setting_the_publisher_refuses_stops_check_config_and_run_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut consumer = oauth("oidc");
    consumer.push(("sasl.oauthbearer.client.id", CLIENT.into()));
    consumer.push(("sasl.oauthbearer.client.secret", "do-not-print-me".into()));
    let s = setup(dir.path(), &brokers(), &unique("oauth-bad"), &consumer);
    for command in ["check-config", "run"] {
        let out = bin()
            .args([command, "-c", s.config.to_str().unwrap()])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{command}: {err}");
        assert!(
            err.contains("sasl.oauthbearer.token.endpoint.url: required"),
            "{command}: {err}"
        );
        assert!(!err.contains("do-not-print-me"), "{command}: {err}");
    }
    let ok = bin()
        .args(["check-config", "-c", s.config.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!String::from_utf8_lossy(&ok.stdout).contains("do-not-print-me"));
}

/// The partitions of `topic` as the broker itself lists them (0 when it does not exist).
fn partitions_of(topic: &str) -> usize {
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers())
        .create()
        .unwrap();
    c.fetch_metadata(Some(topic), Duration::from_secs(10))
        .ok()
        .and_then(|m| {
            m.topics()
                .iter()
                .find(|t| t.name() == topic && t.error().is_none())
                .map(|t| t.partitions().len())
        })
        .unwrap_or(0)
}

#[test]
fn produce_creates_its_topic_through_the_checking_front_with_a_client_credentials_token() {
    let dir = tempfile::tempdir().unwrap();
    let idp = idp(Arc::new(Mutex::new(SECRET.into())), 3600);
    let proxy = checking_front();
    let topic = unique("oauth-produce");
    let input = crate::common::generated(dir.path(), 20, &["--seed", "5"]);
    let secret = dir.path().join("client-secret");
    std::fs::write(&secret, SECRET).unwrap();
    let mut args = vec![
        "produce".to_string(),
        "--brokers".into(),
        proxy.addr.clone(),
        "--topic".into(),
        topic.clone(),
        "--partitions".into(),
        "3".into(),
        "-i".into(),
        input.display().to_string(),
    ];
    for (k, v) in [
        ("security.protocol", "SASL_PLAINTEXT".to_string()),
        ("sasl.mechanisms", "OAUTHBEARER".into()),
        ("sasl.oauthbearer.method", "oidc".into()),
        ("sasl.oauthbearer.token.endpoint.url", idp.url.clone()),
        ("sasl.oauthbearer.client.id", CLIENT.into()),
        (
            "sasl.oauthbearer.client.secret.file",
            secret.display().to_string(),
        ),
    ] {
        args.push("--producer-config".into());
        args.push(format!("{k}={v}"));
    }
    let out = bin().args(&args).stdout(Stdio::null()).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    // Created by the admin client as asked (a broker creating it on first produce would give
    // its default partition count instead).
    assert_eq!(partitions_of(&topic), 3, "{err}");
    assert_eq!(read_count(&topic, 20), 20);
    let seen = proxy.seen.lock().unwrap();
    assert!(
        seen.refused.is_empty() && seen.unauthenticated.is_empty(),
        "{seen:?}"
    );
    assert!(
        seen.accepted.len() >= 2,
        "the admin client and the producer: {seen:?}"
    );
}

/// The claims of an unsecured JWT, after checking its header and empty signature.
fn unsecured_claims(token: &str) -> Result<serde_json::Value, String> {
    let parts: Vec<&str> = token.split('.').collect();
    if parts.len() != 3
        || !parts[2].is_empty()
        || unb64(parts[0]).as_deref() != Some(br#"{"alg":"none"}"#.as_slice())
    {
        return Err(format!("not an unsecured JWT: {token}"));
    }
    let body = unb64(parts[1]).ok_or("claims not base64url")?;
    serde_json::from_slice(&body).map_err(|e| e.to_string())
}

#[test]
fn librdkafkas_unsecured_jwt_is_made_as_librdkafka_makes_it_and_kept_fresh() {
    let tokens = Arc::new(Mutex::new(Vec::<String>::new()));
    let kept = Arc::clone(&tokens);
    let proxy = SaslProxy::start(
        &brokers(),
        Arc::new(move |t| {
            kept.lock().unwrap().push(t.to_string());
            let c = unsecured_claims(t)?;
            if c["exp"].as_f64().unwrap_or(0.0) < now() as f64 {
                return Err("expired".into());
            }
            Ok(c["sub"].as_str().unwrap_or_default().to_string())
        }),
    );
    let life = 4;
    let config = format!("principal=alice scope=read,write lifeSeconds={life}");
    // The oracle: librdkafka's own token, from a client with rdkafka's default context.
    let topic = unique("oauth-unsecured");
    create_topic(&topic, 1);
    let oracle: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &proxy.addr)
        .set("security.protocol", "SASL_PLAINTEXT")
        .set("sasl.mechanisms", "OAUTHBEARER")
        .set("enable.sasl.oauthbearer.unsecure.jwt", "true")
        .set("sasl.oauthbearer.config", &config)
        .create()
        .unwrap();
    oracle
        .fetch_metadata(Some(&topic), Duration::from_secs(10))
        .unwrap();
    drop(oracle);
    let theirs = unsecured_claims(&tokens.lock().unwrap()[0]).unwrap();
    tokens.lock().unwrap().clear();

    let dir = tempfile::tempdir().unwrap();
    let sent = logs(40, 3, 0.0);
    produce(&topic, &sent);
    let mut consumer = vec![
        ("security.protocol", "SASL_PLAINTEXT".to_string()),
        ("sasl.mechanisms", "OAUTHBEARER".into()),
        ("enable.sasl.oauthbearer.unsecure.jwt", "true".into()),
        ("sasl.oauthbearer.config", config.clone()),
    ];
    // Short sessions, so that clients reconnect, and authenticate again, within the test.
    consumer.push(("connections.max.idle.ms", "3000".into()));
    let s = setup(dir.path(), &proxy.addr, &topic, &consumer);
    let _child = s.start();
    assert!(
        wait_for(LIMIT, || s.rows().len() == sent.len()),
        "rows through the checking front:\n{}",
        s.log_tail()
    );
    let ours = unsecured_claims(&tokens.lock().unwrap()[0]).unwrap();
    let keys = |c: &serde_json::Value| {
        let mut k: Vec<String> = c.as_object().unwrap().keys().cloned().collect();
        k.sort();
        k
    };
    assert_eq!(keys(&ours), keys(&theirs), "{ours} against {theirs}");
    for claim in ["sub", "scope"] {
        assert_eq!(
            ours[claim], theirs[claim],
            "{claim}: {ours} against {theirs}"
        );
    }
    let span = |c: &serde_json::Value| c["exp"].as_f64().unwrap() - c["iat"].as_f64().unwrap();
    assert_eq!(span(&ours), span(&theirs));
    // librdkafka asks for a new token at 80% of the first one's life: the publisher answers it
    // without a failure, and stays ready.
    std::thread::sleep(Duration::from_secs(3 * life));
    assert_eq!(
        s.log_count("OAUTHBEARER"),
        0,
        "no token failure:\n{}",
        s.log_tail()
    );
    let (status, body) = s.get("/readyz").unwrap();
    assert_eq!(status, 200, "{body}");
    let seen = proxy.seen.lock().unwrap();
    assert!(seen.refused.is_empty(), "{seen:?}");
}
