use super::*;
use std::collections::HashMap;

fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let m: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    move |k| m.get(k).cloned()
}

const RRSA: &[(&str, &str)] = &[
    ("ALIBABA_CLOUD_ROLE_ARN", "acs:ram::123:role/publisher"),
    (
        "ALIBABA_CLOUD_OIDC_PROVIDER_ARN",
        "acs:ram::123:oidc-provider/ack",
    ),
    ("ALIBABA_CLOUD_OIDC_TOKEN_FILE", "/var/run/secrets/token"),
    ("HOSTNAME", "pub-7f9c/x"),
];

#[test]
fn configured_keys_win_over_every_environment_source() {
    let mut all = RRSA.to_vec();
    all.extend([
        ("ALIBABA_CLOUD_ACCESS_KEY_ID", "env-id"),
        ("ALIBABA_CLOUD_ACCESS_KEY_SECRET", "env-secret"),
    ]);
    let s = Source::resolve(Some(("cfg-id", "cfg-secret")), None, &env(&all)).unwrap();
    assert_eq!(
        s,
        Source::Static(AccessKey::new("cfg-id", "cfg-secret", None))
    );
}

#[test]
fn environment_keys_come_before_rrsa_and_carry_their_token() {
    let mut all = RRSA.to_vec();
    all.extend([
        ("ALIBABA_CLOUD_ACCESS_KEY_ID", "env-id"),
        ("ALIBABA_CLOUD_ACCESS_KEY_SECRET", "env-secret"),
        ("ALIBABA_CLOUD_SECURITY_TOKEN", "env-token"),
    ]);
    let s = Source::resolve(None, None, &env(&all)).unwrap();
    assert_eq!(
        s,
        Source::Environment(AccessKey::new(
            "env-id",
            "env-secret",
            Some("env-token".into())
        ))
    );
    assert!(s.describe().contains("ALIBABA_CLOUD_SECURITY_TOKEN"));
}

#[test]
fn rrsa_comes_from_the_webhooks_three_variables_with_the_default_sts() {
    let Source::Rrsa(r) = Source::resolve(None, None, &env(RRSA)).unwrap() else {
        panic!("RRSA expected")
    };
    assert_eq!(r.role_arn, "acs:ram::123:role/publisher");
    assert_eq!(r.oidc_provider_arn, "acs:ram::123:oidc-provider/ack");
    assert_eq!(r.token_file, PathBuf::from("/var/run/secrets/token"));
    assert_eq!(r.sts_endpoint, "https://sts.aliyuncs.com");
    assert_eq!(r.duration, Duration::from_secs(3600));
    // The pod's name, with characters STS refuses replaced.
    assert_eq!(r.session_name, "observation-publisher-pub-7f9c-x");
}

#[test]
fn sts_endpoint_follows_the_region_and_vpc_variables_unless_configured() {
    let mut e = RRSA.to_vec();
    e.push(("ALIBABA_CLOUD_STS_REGION", "cn-hangzhou"));
    let ep = |e: &[(&str, &str)], cfg: Option<&str>| match Source::resolve(None, cfg, &env(e)) {
        Ok(Source::Rrsa(r)) => r.sts_endpoint,
        other => panic!("{other:?}"),
    };
    assert_eq!(ep(&e, None), "https://sts.cn-hangzhou.aliyuncs.com");
    e.push(("ALIBABA_CLOUD_VPC_ENDPOINT_ENABLED", "true"));
    assert_eq!(ep(&e, None), "https://sts-vpc.cn-hangzhou.aliyuncs.com");
    assert_eq!(
        ep(&e, Some("http://sts.internal:8080/")),
        "http://sts.internal:8080"
    );
    // The webhook's own endpoint variable comes before the region.
    e.push((
        "ALIBABA_CLOUD_STS_ENDPOINT",
        "sts-vpc.cn-shanghai.aliyuncs.com",
    ));
    assert_eq!(ep(&e, None), "https://sts-vpc.cn-shanghai.aliyuncs.com");
    assert_eq!(ep(&e, Some("http://sts.internal")), "http://sts.internal");
    let mut e = RRSA.to_vec();
    e.push(("ALIBABA_CLOUD_ROLE_SESSION_NAME", "chosen"));
    e.push(("ALIBABA_CLOUD_VPC_ENDPOINT_ENABLED", "TRUE"));
    assert_eq!(ep(&e, None), "https://sts-vpc.aliyuncs.com");
    let Ok(Source::Rrsa(r)) = Source::resolve(None, None, &env(&e)) else {
        panic!()
    };
    assert_eq!(r.session_name, "chosen");
}

#[test]
fn half_set_sources_are_refused_naming_what_is_missing() {
    let e =
        Source::resolve(None, None, &env(&[("ALIBABA_CLOUD_ACCESS_KEY_ID", "id")])).unwrap_err();
    assert!(e.contains("ALIBABA_CLOUD_ACCESS_KEY_SECRET is not"), "{e}");
    let e = Source::resolve(None, None, &env(&RRSA[..2])).unwrap_err();
    assert!(e.contains("ALIBABA_CLOUD_OIDC_TOKEN_FILE missing"), "{e}");
    assert!(e.contains("pod-identity.alibabacloud.com/role-name"), "{e}");
    // Empty values count as unset.
    let mut blank = RRSA.to_vec();
    blank[2].1 = " ";
    assert!(Source::resolve(None, None, &env(&blank)).is_err());
}

#[test]
fn the_ecs_role_is_the_last_resort_unless_disabled() {
    let s = Source::resolve(None, None, &env(&[])).unwrap();
    assert_eq!(
        s,
        Source::EcsRole(EcsRole {
            role_name: None,
            metadata: "http://100.100.100.200".into(),
            imdsv1_disabled: false,
        })
    );
    let s = Source::resolve(
        None,
        None,
        &env(&[
            ("ALIBABA_CLOUD_ECS_METADATA", "node-role"),
            ("ALIBABA_CLOUD_IMDSV1_DISABLED", "true"),
        ]),
    )
    .unwrap();
    assert!(
        s.describe().contains("ECS RAM role node-role"),
        "{}",
        s.describe()
    );
    let e = Source::resolve(
        None,
        None,
        &env(&[("ALIBABA_CLOUD_ECS_METADATA_DISABLED", "true")]),
    )
    .unwrap_err();
    assert!(e.contains("no Alibaba Cloud credentials"), "{e}");
}

#[test]
fn descriptions_and_debug_never_show_a_secret_or_token() {
    let secrets = ["s3cr3t-value", "t0ken-value"];
    let key = AccessKey::new("AKID", secrets[0], Some(secrets[1].into()));
    let sources = [
        Source::Static(key.clone()),
        Source::Environment(key.clone()),
    ];
    for s in &sources {
        for shown in [s.describe(), format!("{s:?}"), format!("{key:?}")] {
            for secret in secrets {
                assert!(!shown.contains(secret), "{shown}");
            }
        }
    }
    let r = Source::resolve(None, None, &env(RRSA)).unwrap();
    assert!(r.describe().contains("RRSA"));
    assert!(r.describe().contains("acs:ram::123:role/publisher"));
}

#[test]
fn refresh_is_due_at_80_percent_or_5_minutes_before_expiry() {
    let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
    // One hour: 80% (48 min) comes before "5 min before" (55 min).
    assert_eq!(
        refresh_at(t0, t0 + Duration::from_secs(3600)),
        t0 + Duration::from_secs(2880)
    );
    // Ten minutes: 80% is 8 min, but 5 min before expiry is earlier.
    assert_eq!(
        refresh_at(t0, t0 + Duration::from_secs(600)),
        t0 + Duration::from_secs(300)
    );
    // Already expired: due now.
    assert!(refresh_at(t0, t0 - Duration::from_secs(5)) <= t0);
}

#[test]
fn a_key_within_a_minute_of_expiry_is_not_usable() {
    let now = SystemTime::now();
    let mut k = AccessKey::new("id", "s", Some("t".into()));
    assert!(usable(&k, now), "no expiry: usable");
    k.expires = Some(now + Duration::from_secs(61));
    assert!(usable(&k, now));
    k.expires = Some(now + Duration::from_secs(60));
    assert!(!usable(&k, now));
    k.expires = Some(now - Duration::from_secs(1));
    assert!(!usable(&k, now));
}
