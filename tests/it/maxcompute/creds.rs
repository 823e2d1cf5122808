//! MaxCompute without keys: Alibaba's default credential chain (src/auth/alibaba) against fake STS
//! and ECS metadata endpoints over real HTTP (tests/it/http_capture.rs), with Alibaba's
//! credentials SDK (`alibabacloud-credentials`, creds_oracle.py) sending its requests to the same
//! fakes with the same inputs; pyodps's `StsAccount` as the oracle of a request signed with a
//! temporary key; the client refreshing keys ahead of expiry and never sending a request with an
//! expired one; `check-config` naming the source.

use super::{oracle, python, VERSIONS};
use crate::common::bin;
use crate::http_capture::{Captured, Reply, Server};
use observation_publisher::auth::alibaba::{EcsRole, Provider, Source};
use observation_publisher::sink::maxcompute::client::{Client, ClientOptions, Keys};
use observation_publisher::sink::maxcompute::error::Class;
use observation_publisher::sink::maxcompute::sign::{
    auth_headers, Credentials, RequestToSign, STS_TOKEN_HEADER,
};
use serde_json::{json, Value as Json};
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

const ROLE: &str = "acs:ram::1234567890:role/observation-publisher";
const OIDC_PROVIDER: &str = "acs:ram::1234567890:oidc-provider/ack-rrsa-c0ffee";

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn iso(t: SystemTime) -> String {
    humantime::format_rfc3339_seconds(t).to_string()
}

/// STS's answer to AssumeRoleWithOIDC.
fn sts_answer(n: u32, expires: SystemTime) -> Reply {
    let body = json!({
        "RequestId": format!("req-{n}"),
        "AssumedRoleUser": {"Arn": ROLE, "AssumedRoleId": "3001:publisher"},
        "Credentials": {
            "AccessKeyId": format!("STS.key{n}"),
            "AccessKeySecret": format!("secret-{n}"),
            "SecurityToken": format!("sts-token-{n}"),
            "Expiration": iso(expires),
        },
    });
    Reply::Body(
        200,
        vec![("content-type", "application/json".into())],
        body.to_string().into_bytes(),
    )
}

/// The parameters of a request: its query, and its form body when it has one.
fn params(c: &Captured) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let url = reqwest::Url::parse(&format!("http://fake{}", c.path)).unwrap();
    out.extend(
        url.query_pairs()
            .map(|(k, v)| (k.into_owned(), v.into_owned())),
    );
    if c.header("content-type") == Some("application/x-www-form-urlencoded") {
        let body = String::from_utf8(c.body.clone()).unwrap();
        let form = reqwest::Url::parse(&format!("http://fake/?{body}")).unwrap();
        out.extend(
            form.query_pairs()
                .map(|(k, v)| (k.into_owned(), v.into_owned())),
        );
    }
    out
}

/// Runs the credentials SDK (`mode` rrsa or ecs against `url`) with `env`; returns its key.
fn sdk(mode: &str, url: &str, env: &[(&str, String)]) -> Json {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/maxcompute/creds_oracle.py");
    let mut cmd = Command::new(python("creds"));
    cmd.arg(script).args([mode, url]);
    for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("ALIBABA_CLOUD_")) {
        cmd.env_remove(k);
    }
    let out = cmd.envs(env.iter().map(|(k, v)| (k, v))).output().unwrap();
    assert!(
        out.status.success(),
        "creds_oracle.py {mode} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn lookup<'a>(env: &'a [(&'a str, String)]) -> impl Fn(&str) -> Option<String> + 'a {
    move |k| env.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone())
}

fn rrsa_env(token_file: &Path) -> Vec<(&'static str, String)> {
    vec![
        ("ALIBABA_CLOUD_ROLE_ARN", ROLE.into()),
        ("ALIBABA_CLOUD_OIDC_PROVIDER_ARN", OIDC_PROVIDER.into()),
        (
            "ALIBABA_CLOUD_OIDC_TOKEN_FILE",
            token_file.display().to_string(),
        ),
        ("ALIBABA_CLOUD_ROLE_SESSION_NAME", "publisher-pod-0".into()),
    ]
}

fn timestamp_is_now(t: &str) {
    let at = humantime::parse_rfc3339(t).unwrap_or_else(|e| panic!("Timestamp {t:?}: {e}"));
    let skew = SystemTime::now()
        .duration_since(at)
        .unwrap_or_else(|e| e.duration());
    assert!(skew < Duration::from_secs(60), "Timestamp {t} is not now");
}

#[test]
fn assume_role_with_oidc_sends_what_the_credentials_sdk_sends() {
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, "eyJhbGciOiJSUzI1NiJ9.oidc-token-1.sig").unwrap();
    let env = rrsa_env(&token_file);
    let sts = Server::start();
    let url = format!("http://127.0.0.1:{}", sts.port);
    let expires = SystemTime::now() + Duration::from_secs(3600);
    sts.script([sts_answer(1, expires), sts_answer(1, expires)]);

    let theirs = sdk("rrsa", &url, &env);
    let their_req = sts.take();
    let source = Source::resolve(None, Some(&url), &lookup(&env)).unwrap();
    let ours = rt().block_on(Provider::new(source).unwrap().key()).unwrap();
    let our_req = sts.take();
    assert_eq!((their_req.len(), our_req.len()), (1, 1));
    let (mut theirs_p, mut ours_p) = (params(&their_req[0]), params(&our_req[0]));
    for p in [&mut theirs_p, &mut ours_p] {
        timestamp_is_now(&p.remove("Timestamp").expect("Timestamp"));
    }
    assert_eq!(ours_p, theirs_p, "AssumeRoleWithOIDC parameters");
    assert_eq!(theirs_p["Action"], "AssumeRoleWithOIDC");
    assert_eq!(
        theirs_p["OIDCToken"],
        "eyJhbGciOiJSUzI1NiJ9.oidc-token-1.sig"
    );
    assert_eq!(theirs_p["DurationSeconds"], "3600");
    // Ours carries the token in a POST's form body, never in the URL a proxy logs.
    assert_eq!(their_req[0].method, "GET");
    assert_eq!(our_req[0].method, "POST");
    assert!(
        !our_req[0].path.contains("oidc-token"),
        "{}",
        our_req[0].path
    );
    assert!(our_req[0].path.starts_with("/?"), "{}", our_req[0].path);
    // The same key, expiring when STS says.
    assert_eq!(
        (ours.id.as_str(), ours.secret(), ours.security_token()),
        (
            theirs["id"].as_str().unwrap(),
            theirs["secret"].as_str().unwrap(),
            theirs["token"].as_str()
        )
    );
    let exp = ours
        .expires
        .unwrap()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap();
    assert_eq!(exp.as_secs(), theirs["expiration"].as_u64().unwrap());
}

/// The metadata requests as (method, path, ttl header, token header).
fn metadata_calls(reqs: &[Captured]) -> Vec<(String, String, Option<String>, Option<String>)> {
    reqs.iter()
        .map(|r| {
            let h = |n: &str| r.header(n).map(str::to_owned);
            (
                r.method.clone(),
                r.path.clone(),
                h("x-aliyun-ecs-metadata-token-ttl-seconds"),
                h("x-aliyun-ecs-metadata-token"),
            )
        })
        .collect()
}

/// Environment variables given to both clients.
type Env = Vec<(&'static str, String)>;

fn text(s: &str) -> Reply {
    Reply::Body(200, Vec::new(), s.as_bytes().to_vec())
}

fn ecs_document(expires: SystemTime) -> Reply {
    let body = json!({
        "AccessKeyId": "STS.ecs-key", "AccessKeySecret": "ecs-secret",
        "SecurityToken": "ecs-token", "Expiration": iso(expires),
        "LastUpdated": iso(SystemTime::now()), "Code": "Success",
    });
    text(&body.to_string())
}

#[test]
fn the_ecs_role_is_asked_of_the_metadata_server_as_the_credentials_sdk_asks() {
    let expires = SystemTime::now() + Duration::from_secs(6 * 3600);
    // IMDSv2, the role's name asked from the server; then a configured role whose server gives
    // no token (IMDSv1).
    let cases: [(Env, Vec<Reply>); 2] = [
        (
            vec![],
            vec![
                text("md-token-1"),
                text("node-role"),
                text("md-token-2"),
                ecs_document(expires),
            ],
        ),
        (
            vec![("ALIBABA_CLOUD_ECS_METADATA", "given-role".to_string())],
            vec![Reply::Status(403, Vec::new()), ecs_document(expires)],
        ),
    ];
    for (env, replies) in cases {
        let md = Server::start();
        let url = format!("http://127.0.0.1:{}", md.port);
        md.script(replies.clone());
        let theirs = sdk("ecs", &url, &env);
        let their_calls = metadata_calls(&md.take());
        md.script(replies);
        let Source::EcsRole(role) = Source::resolve(None, None, &lookup(&env)).unwrap() else {
            panic!("ECS role expected")
        };
        let source = Source::EcsRole(EcsRole {
            metadata: url.clone(),
            ..role
        });
        let ours = rt().block_on(Provider::new(source).unwrap().key()).unwrap();
        let our_calls = metadata_calls(&md.take());
        assert_eq!(our_calls, their_calls, "metadata requests, env {env:?}");
        assert!(their_calls
            .last()
            .unwrap()
            .1
            .starts_with("/latest/meta-data/ram/security-credentials/"));
        assert_eq!(ours.id, theirs["id"].as_str().unwrap());
        assert_eq!(ours.security_token(), theirs["token"].as_str());
    }
}

#[test]
fn a_temporary_key_signs_and_sends_its_token_as_pyodps_sts_account() {
    let spec = json!({"requests": [
        {"access_id": "STS.NUAbc123", "secret": "tmp/Secret+Key=", "sts_token": "CAIS+token/with=chars",
         "endpoint": "http://127.0.0.1:1/api", "method": "GET", "path": "/projects/p/tables/t",
         "params": [["curr_project", "p"], ["curr_schema", "d"]],
         "headers": [["Date", "Tue, 01 Dec 2026 21:00:00 GMT"]]},
        {"access_id": "STS.NUAbc123", "secret": "tmp/Secret+Key=", "sts_token": "CAIS+token/with=chars",
         "endpoint": "http://127.0.0.1:2", "method": "POST", "path": "/projects/p/schemas/d/tables/t",
         "actions": ["uploads"], "params": [["curr_project", "p"]],
         "headers": [["Date", "Tue, 01 Dec 2026 21:00:00 GMT"], ["x-odps-tunnel-version", "6"]]},
    ]});
    for version in VERSIONS {
        let answer = oracle(version, false, "sign", &spec);
        for (input, g) in spec["requests"]
            .as_array()
            .unwrap()
            .iter()
            .zip(answer["requests"].as_array().unwrap())
        {
            let sent: Vec<(String, String)> = super::signed_headers(g);
            let theirs = |name: &str| {
                sent.iter()
                    .find(|(k, _)| k.eq_ignore_ascii_case(name))
                    .map(|(_, v)| v.clone())
            };
            // The request as our client signs it: its own headers, not pyodps's extras.
            let ours_in: Vec<(&str, &str)> = sent
                .iter()
                .filter(|(k, _)| {
                    !k.eq_ignore_ascii_case(STS_TOKEN_HEADER) && !k.starts_with("x-pyodps")
                })
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect();
            let creds = Credentials::temporary(
                input["access_id"].as_str().unwrap(),
                input["secret"].as_str().unwrap(),
                input["sts_token"].as_str().unwrap(),
            );
            let ours = auth_headers(
                &creds,
                &RequestToSign {
                    method: input["method"].as_str().unwrap(),
                    target: g["target"].as_str().unwrap(),
                    headers: &ours_in,
                },
            );
            let want = vec![
                (
                    "Authorization",
                    g["authorization"].as_str().unwrap().to_string(),
                ),
                (
                    STS_TOKEN_HEADER,
                    theirs(STS_TOKEN_HEADER).expect("pyodps sends the token"),
                ),
            ];
            assert_eq!(
                ours, want,
                "pyodps {version}: {} {}",
                input["method"], g["target"]
            );
        }
    }
}

fn client_of(mc: &Server, provider: Arc<Provider>) -> Client {
    Client::new(
        ClientOptions {
            endpoint: format!("http://127.0.0.1:{}", mc.port),
            project: "p".into(),
            dataset: "d".into(),
            tunnel_endpoint: None,
            request_timeout: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(5),
            max_poll_interval: Duration::from_millis(200),
            max_instance_wait: Duration::from_secs(10),
        },
        Keys::Provider(provider),
    )
    .unwrap()
}

/// MaxCompute's answer to a table lookup of a missing table (the client's `Ok(None)`).
fn no_such_table() -> Reply {
    Reply::Body(
        404,
        Vec::new(),
        b"<Error><Code>NoSuchObject</Code><Message>no table</Message></Error>".to_vec(),
    )
}

/// Checks that `req` was signed by STS key `n` (as our signer signs with it) and carries its token.
fn signed_by(req: &Captured, n: u32) {
    let date = req.header("date").expect("Date");
    let creds = Credentials::temporary(
        format!("STS.key{n}"),
        format!("secret-{n}"),
        format!("sts-token-{n}"),
    );
    let want = auth_headers(
        &creds,
        &RequestToSign {
            method: &req.method,
            target: &req.path,
            headers: &[("Date", date)],
        },
    );
    assert_eq!(
        req.header("authorization"),
        Some(want[0].1.as_str()),
        "signed by key {n}"
    );
    assert_eq!(
        req.header(STS_TOKEN_HEADER),
        Some(format!("sts-token-{n}").as_str())
    );
}

#[test]
fn the_client_refreshes_rrsa_keys_ahead_of_expiry_and_never_sends_an_expired_one() {
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, "oidc-1").unwrap();
    let env = rrsa_env(&token_file);
    let sts = Server::answering(Reply::Status(503, Vec::new()));
    let sts_url = format!("http://127.0.0.1:{}", sts.port);
    let mc = Server::answering(no_such_table());
    let now = SystemTime::now();
    // Key 1 has four minutes left (its refresh is due at once), key 2 an hour.
    sts.script([
        sts_answer(1, now + Duration::from_secs(240)),
        sts_answer(2, now + Duration::from_secs(3600)),
    ]);
    let provider = |env: &[(&str, String)]| {
        Arc::new(
            Provider::new(Source::resolve(None, Some(&sts_url), &lookup(env)).unwrap()).unwrap(),
        )
    };
    let client = client_of(&mc, provider(&env));
    let rt = rt();
    assert!(rt.block_on(client.table("t")).unwrap().is_none());
    signed_by(&mc.take()[0], 1);
    // The kubelet rotated the token: the refresh reads the file again.
    std::fs::write(&token_file, "oidc-2").unwrap();
    rt.block_on(client.table("t")).unwrap();
    signed_by(&mc.take()[0], 2);
    let asked: Vec<String> = sts
        .take()
        .iter()
        .map(|r| params(r)["OIDCToken"].clone())
        .collect();
    assert_eq!(asked, ["oidc-1", "oidc-2"]);
    // A fresh key is not fetched again.
    rt.block_on(client.table("t")).unwrap();
    signed_by(&mc.take()[0], 2);
    assert_eq!(sts.count(), 0);

    // Key 3 has 63 s left: refresh due, usable for two or three seconds more.
    sts.script([sts_answer(3, SystemTime::now() + Duration::from_secs(63))]);
    let client = client_of(&mc, provider(&env));
    rt.block_on(client.table("t")).unwrap();
    signed_by(&mc.take()[0], 3);
    // STS is down (503): the refresh fails, the still-usable key is used.
    rt.block_on(client.table("t")).unwrap();
    signed_by(&mc.take()[0], 3);
    assert_eq!(sts.take().len(), 2, "one fetch, one failed refresh");
    // Once the key is within a minute of expiry, nothing goes out: a retryable failure.
    std::thread::sleep(Duration::from_secs(4));
    let e = rt.block_on(client.table("t")).unwrap_err();
    assert_eq!(e.class, Class::Retry, "{e}");
    assert!(e.error.is_retryable());
    let m = e.error.message();
    assert!(
        m.contains("no usable access key")
            && m.contains("HTTP 503")
            && m.contains("STS is unavailable")
            && m.contains(ROLE),
        "{m}"
    );
    assert_eq!(mc.count(), 0, "no request with an expired key");
    assert!(sts.count() >= 1, "the refresh was tried again");

    // A key STS answers already expired (a skewed clock) is never used.
    sts.script([sts_answer(4, SystemTime::now() - Duration::from_secs(5))]);
    let client = client_of(&mc, provider(&env));
    let e = rt.block_on(client.table("t")).unwrap_err();
    assert_eq!(e.class, Class::Retry, "{e}");
    assert!(e.error.message().contains("time sync"), "{e}");
    assert_eq!(mc.count(), 0);

    // STS refusing the role (a trust policy without this provider) is said so, with its code.
    let refused = json!({"RequestId": "r-9", "Code": "AuthenticationFail.NoPermission", "Message": "no trust"});
    sts.script([Reply::Body(
        403,
        Vec::new(),
        refused.to_string().into_bytes(),
    )]);
    let client = client_of(&mc, provider(&env));
    let m = rt.block_on(client.table("t")).unwrap_err().to_string();
    assert!(
        m.contains("HTTP 403 AuthenticationFail.NoPermission: no trust (RequestId r-9)"),
        "{m}"
    );
    assert!(
        m.contains(&format!("trust policy names OIDC provider {OIDC_PROVIDER}")),
        "{m}"
    );
}

#[test]
fn check_config_names_the_credential_source_and_never_a_secret() {
    let dir = tempfile::tempdir().unwrap();
    let base = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("config/merlin-binary.yaml"),
    )
    .unwrap();
    let config = |keys: &str| {
        let sink = format!(
            "- type: MAXCOMPUTE\n  config: {{project: p, dataset: d, access_url: 'https://mc.example/api'{keys}}}\nobservation_source:"
        );
        let f = dir.path().join(format!("c{}.yaml", keys.len()));
        std::fs::write(&f, base.replacen("observation_source:", &sink, 1)).unwrap();
        f
    };
    let check = |f: &Path, env: &[(&str, &str)]| {
        let mut cmd = bin();
        for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("ALIBABA_CLOUD_")) {
            cmd.env_remove(k);
        }
        let o = cmd
            .args(["check-config", "-c"])
            .arg(f)
            .envs(env.iter().copied())
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let (out, err) = (
            String::from_utf8_lossy(&o.stdout).into_owned(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        );
        for secret in ["env-secret-value", "env-token-value", "cfg-secret-value"] {
            assert!(!out.contains(secret) && !err.contains(secret), "{out}{err}");
        }
        (out, err)
    };
    let line = "# MAXCOMPUTE credentials (observation_sinks[1]): ";
    let keyless = config("");
    let (out, _) = check(
        &keyless,
        &[
            ("ALIBABA_CLOUD_ROLE_ARN", ROLE),
            ("ALIBABA_CLOUD_OIDC_PROVIDER_ARN", OIDC_PROVIDER),
            (
                "ALIBABA_CLOUD_OIDC_TOKEN_FILE",
                "/var/run/secrets/ack.alibabacloud.com/rrsa-tokens/token",
            ),
            ("ALIBABA_CLOUD_STS_REGION", "cn-hangzhou"),
        ],
    );
    assert!(
        out.contains(&format!("{line}RRSA: AssumeRoleWithOIDC for role {ROLE}")),
        "{out}"
    );
    assert!(
        out.contains("at https://sts.cn-hangzhou.aliyuncs.com"),
        "{out}"
    );
    let (out, _) = check(
        &keyless,
        &[
            ("ALIBABA_CLOUD_ACCESS_KEY_ID", "LTAIenv"),
            ("ALIBABA_CLOUD_ACCESS_KEY_SECRET", "env-secret-value"),
            ("ALIBABA_CLOUD_SECURITY_TOKEN", "env-token-value"),
        ],
    );
    assert!(out.contains(&format!("{line}environment: ALIBABA_CLOUD_ACCESS_KEY_ID/_SECRET with ALIBABA_CLOUD_SECURITY_TOKEN")), "{out}");
    let (out, _) = check(&keyless, &[]);
    assert!(out.contains(&format!("{line}ECS RAM role")), "{out}");
    let (out, _) = check(
        &config(", access_key_id: LTAIcfg, access_key_secret: cfg-secret-value"),
        &[],
    );
    assert!(out.contains(&format!("{line}static keys")), "{out}");
    // Half of RRSA: `run` would refuse it; check-config says so.
    let (out, err) = check(&keyless, &[("ALIBABA_CLOUD_ROLE_ARN", ROLE)]);
    assert!(
        out.contains(&format!("{line}none: RRSA is half set up")),
        "{out}"
    );
    assert!(
        err.contains("ALIBABA_CLOUD_OIDC_PROVIDER_ARN, ALIBABA_CLOUD_OIDC_TOKEN_FILE missing"),
        "{err}"
    );
}
