use super::*;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::BaseConsumer;

fn pairs(kv: &[(&str, &str)]) -> Vec<(String, String)> {
    kv.iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

const OIDC: &[(&str, &str)] = &[
    ("security.protocol", "SASL_SSL"),
    ("sasl.mechanisms", "OAUTHBEARER"),
    ("sasl.oauthbearer.method", "oidc"),
    (
        "sasl.oauthbearer.token.endpoint.url",
        "https://idp.example/token",
    ),
    ("sasl.oauthbearer.client.id", "publisher"),
    (
        "sasl.oauthbearer.client.secret.file",
        "/var/run/secrets/kafka/secret",
    ),
    ("sasl.oauthbearer.scope", "kafka"),
];

fn without(base: &[(&str, &str)], key: &str) -> Vec<(String, String)> {
    pairs(base).into_iter().filter(|(k, _)| k != key).collect()
}

#[test]
fn oidc_settings_are_read_under_librdkafkas_names_and_each_gap_is_named() {
    let m = method(&pairs(OIDC)).unwrap().unwrap();
    let Method::Oidc(o) = &m else { panic!("{m:?}") };
    assert_eq!(o.endpoint, "https://idp.example/token");
    assert_eq!(o.client_id, "publisher");
    assert_eq!(
        o.secret,
        Secret::File("/var/run/secrets/kafka/secret".into())
    );
    assert_eq!(o.scope.as_deref(), Some("kafka"));
    assert_eq!(o.sub_claim, "sub");
    for k in [
        "sasl.oauthbearer.token.endpoint.url",
        "sasl.oauthbearer.client.id",
        "sasl.oauthbearer.client.secret.file",
        "security.protocol",
    ] {
        let e = method(&without(OIDC, k)).unwrap_err();
        assert!(e.contains(k), "{k}: {e}");
    }
    let mut both = pairs(OIDC);
    both.push(("sasl.oauthbearer.client.secret".into(), "s3cr3t".into()));
    let e = method(&both).unwrap_err();
    assert!(e.contains("not both") && !e.contains("s3cr3t"), "{e}");
    let mut ext = pairs(OIDC);
    ext.push(("sasl.oauthbearer.extensions".into(), "a=b".into()));
    assert!(method(&ext).unwrap_err().contains("extensions"));
    let mut plain = pairs(OIDC);
    plain.push(("sasl.mechanisms".into(), "PLAIN".into()));
    assert!(method(&plain).unwrap_err().contains("OAUTHBEARER"));
    let mut odd = pairs(OIDC);
    odd.push(("sasl.oauthbearer.method".into(), "aws".into()));
    assert!(method(&odd).unwrap_err().contains("google"));
    // The literal secret is accepted and never shown.
    let mut lit = without(OIDC, "sasl.oauthbearer.client.secret.file");
    lit.push(("sasl.oauthbearer.client.secret".into(), "s3cr3t".into()));
    let m = method(&lit).unwrap().unwrap();
    assert!(!format!("{m:?}").contains("s3cr3t"));
    // No method of ours: nothing to do.
    assert_eq!(
        method(&pairs(&[("security.protocol", "SASL_SSL")])),
        Ok(None)
    );
    let g = pairs(&[
        ("security.protocol", "SASL_SSL"),
        ("sasl.oauthbearer.method", "google"),
    ]);
    assert_eq!(method(&g), Ok(Some(Method::Google)));
}

#[test]
fn librdkafka_gets_none_of_the_keys_it_refuses_here_and_accepts_the_rest() {
    let all = pairs(OIDC);
    let m = method(&all).unwrap();
    let mut raw = ClientConfig::new();
    for (k, v) in &all {
        raw.set(k, v);
    }
    assert!(
        raw.create::<BaseConsumer>().is_err(),
        "this build's librdkafka refuses its own OIDC keys"
    );
    let given = librdkafka_pairs(&all, m.as_ref());
    assert!(given
        .iter()
        .all(|(k, _)| !k.starts_with("sasl.oauthbearer.")));
    assert!(given.contains(&("sasl.mechanisms".into(), "OAUTHBEARER".into())));
    let mut c = ClientConfig::new();
    for (k, v) in &given {
        c.set(k, v);
    }
    c.create::<BaseConsumer>()
        .expect("librdkafka accepts what it is given");
    // Without a method of ours, everything passes as it is.
    let other = pairs(&[
        ("security.protocol", "SASL_SSL"),
        ("sasl.oauthbearer.config", "x"),
    ]);
    assert_eq!(librdkafka_pairs(&other, None), other);
}

fn b64d(s: &str) -> Vec<u8> {
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(s)
        .unwrap()
}

#[test]
fn googles_token_is_managed_kafkas_three_part_form() {
    let now = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    let exp = now + Duration::from_secs(3599);
    let t = google_token("ya29.a0Af-_x", "pub@p.iam.gserviceaccount.com", exp, now);
    let parts: Vec<&str> = t.value.split('.').collect();
    assert_eq!(parts.len(), 3, "{}", t.value);
    assert!(!t.value.contains('='), "unpadded base64url");
    let header: serde_json::Value = serde_json::from_slice(&b64d(parts[0])).unwrap();
    assert_eq!(
        header,
        serde_json::json!({"typ": "JWT", "alg": "GOOG_OAUTH2_TOKEN"})
    );
    let claims: serde_json::Value = serde_json::from_slice(&b64d(parts[1])).unwrap();
    assert_eq!(
        claims,
        serde_json::json!({
            "exp": 1_700_003_599u64, "iat": 1_700_000_000u64, "iss": "Google",
            "scope": "kafka", "sub": "pub@p.iam.gserviceaccount.com"
        })
    );
    assert_eq!(b64d(parts[2]), b"ya29.a0Af-_x");
    assert_eq!(t.principal, "pub@p.iam.gserviceaccount.com");
    assert_eq!(t.expires, exp);
}

fn jwt(claims: serde_json::Value) -> String {
    let b = |s: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s);
    format!("{}.{}.sig", b(r#"{"alg":"RS256"}"#), b(&claims.to_string()))
}

#[test]
fn a_token_answer_gives_lifetime_and_principal() {
    let now = UNIX_EPOCH + Duration::from_secs(1_000);
    let j = jwt(serde_json::json!({"sub": "svc-1", "azp": "other", "exp": 5_000}));
    let body = serde_json::json!({"access_token": j, "expires_in": 300, "token_type": "Bearer"});
    let t = parse_token_response(&body.to_string(), "sub", "cid", now).unwrap();
    assert_eq!(t.value, j);
    assert_eq!(t.principal, "svc-1");
    assert_eq!(t.expires, now + Duration::from_secs(300));
    // The configured claim names the principal; the JWT's exp when expires_in is missing.
    let body = serde_json::json!({"access_token": j});
    let t = parse_token_response(&body.to_string(), "azp", "cid", now).unwrap();
    assert_eq!(t.principal, "other");
    assert_eq!(t.expires, UNIX_EPOCH + Duration::from_secs(5_000));
    // An opaque token: the client id, and expires_in is needed.
    let body = serde_json::json!({"access_token": "opaque", "expires_in": 60});
    let t = parse_token_response(&body.to_string(), "sub", "cid", now).unwrap();
    assert_eq!(t.principal, "cid");
    let e = parse_token_response(r#"{"access_token":"opaque"}"#, "sub", "cid", now).unwrap_err();
    assert!(e.contains("expires_in"), "{e}");
    let e = parse_token_response(r#"{"error":"invalid_client"}"#, "sub", "cid", now).unwrap_err();
    assert!(e.contains("access_token"), "{e}");
}

#[test]
fn the_principal_is_the_service_account_the_credentials_act_as() {
    let key = serde_json::json!({"type": "service_account", "client_email": "a@p.iam.gserviceaccount.com"});
    assert_eq!(email_of_file(&key).unwrap(), "a@p.iam.gserviceaccount.com");
    let wif = serde_json::json!({"type": "external_account",
        "service_account_impersonation_url": "https://iamcredentials.googleapis.com/v1/projects/-/serviceAccounts/b@p.iam.gserviceaccount.com:generateAccessToken"});
    assert_eq!(email_of_file(&wif).unwrap(), "b@p.iam.gserviceaccount.com");
    let user = serde_json::json!({"type": "authorized_user", "refresh_token": "r"});
    assert!(email_of_file(&user)
        .unwrap_err()
        .contains("service account"));
}

#[test]
fn the_form_is_librdkafkas_client_credentials_form() {
    assert_eq!(form_body(None), "grant_type=client_credentials");
    assert_eq!(
        form_body(Some("kafka write:all")),
        "grant_type=client_credentials&scope=kafka%20write%3Aall"
    );
}

#[test]
fn librdkafkas_unsecured_token_is_taken_over_only_where_librdkafka_would_make_it() {
    let unsecured = [
        ("security.protocol", "SASL_PLAINTEXT"),
        ("sasl.mechanisms", "OAUTHBEARER"),
        ("enable.sasl.oauthbearer.unsecure.jwt", "true"),
        ("sasl.oauthbearer.config", "principal=alice lifeSeconds=60"),
    ];
    let m = method(&pairs(&unsecured)).unwrap().unwrap();
    let Method::Unsecured(u) = &m else {
        panic!("{m:?}")
    };
    assert_eq!((u.principal.as_str(), u.life_seconds), ("alice", 60));
    let given = librdkafka_pairs(&pairs(&unsecured), Some(&m));
    assert!(
        given
            .iter()
            .all(|(k, _)| k != "enable.sasl.oauthbearer.unsecure.jwt"
                && !k.starts_with("sasl.oauthbearer.")),
        "one maker of tokens: {given:?}"
    );
    // Not OAUTHBEARER over SASL, or not switched on: librdkafka gets the keys as they are.
    for leave in [
        ("security.protocol", "PLAINTEXT"),
        ("sasl.mechanisms", "PLAIN"),
        ("enable.sasl.oauthbearer.unsecure.jwt", "false"),
    ] {
        let mut p = without(&unsecured, leave.0);
        p.push((leave.0.into(), leave.1.into()));
        assert_eq!(
            method(&p).map(|m| m.is_some()).ok(),
            Some(false),
            "{leave:?}"
        );
    }
    // A config librdkafka would refuse is refused, naming the key.
    let mut bad = without(&unsecured, "sasl.oauthbearer.config");
    bad.push(("sasl.oauthbearer.config".into(), "scope=a".into()));
    let e = method(&bad).unwrap_err();
    assert!(
        e.starts_with("additional_consumer_config.sasl.oauthbearer.config: no principal="),
        "{e}"
    );
}
