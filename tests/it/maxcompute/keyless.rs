//! A keyless `run` into MaxCompute: the binary started as users start it (`run --config`), a
//! MAXCOMPUTE sink without `access_key_id`/`access_key_secret`, RRSA's three variables set as
//! ACK's pod-identity webhook sets them and `sts_endpoint` naming the fake STS (fake_sts.py),
//! whose temporary keys the fake MaxCompute accepts only with their security token and before
//! their expiry.
//!
//! - [`rrsa_keys_are_refreshed_during_a_run_and_every_row_lands`]: keys refreshed while logs
//!   flow, the rotated token file read at each refresh, one key expiring during the run and never
//!   used after, every row in the target.
//! - [`sts_down_at_start_is_unready_naming_it_and_rows_land_once_it_answers`]: STS unreachable,
//!   then refusing, at start: the process stays up, `/readyz` names the STS endpoint and the
//!   cause; once STS answers, every row lands.

use super::fake::{Fake, DATASET, PROJECT};
use super::sink::{key, table_rows, target, LIMIT};
use crate::common::{bin, Reaped};
use crate::runtime::{committed_total, create_topic, logs, produce, stop, unique, wait_for, Setup};
use serde_json::{json, Value as Json};
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const ROLE: &str = "acs:ram::1234567890:role/observation-publisher";
const OIDC_PROVIDER: &str = "acs:ram::1234567890:oidc-provider/ack-rrsa-c0ffee";
/// Life of the keys the fake STS issues after the first: our refresh rule refreshes a key at 80%
/// of its life but no later than 5 minutes before its expiry, so 320 s gives a refresh 20 s
/// after each fetch (a life of 300 s or less would be refreshed at every request, one of 60 s or
/// less never used: it is within `USABLE_MARGIN` of expiry when it arrives).
const LIFE: u64 = 320;
/// Life of the first key: usable for its first 5 s (a key within a minute of expiry is not
/// used), expired 65 s after it was issued, while the run goes on.
const FIRST_LIFE: u64 = 65;

fn sink_yaml(fake: &Fake) -> String {
    format!(
        "observation_sinks:\n- type: MAXCOMPUTE\n  config:\n    project: {PROJECT}\n    dataset: {DATASET}\n    ttl_days: 0\n    access_url: http://127.0.0.1:{}/api\n    sts_endpoint: http://127.0.0.1:{}\n    interval: 1s\n",
        fake.port, fake.sts_port
    )
}

/// Replaces the token file at once, as the kubelet swaps a projected token (a reader never sees
/// half a file).
fn write_token(file: &Path, token: &str) {
    let tmp = file.with_extension("new");
    std::fs::write(&tmp, token).unwrap();
    std::fs::rename(&tmp, file).unwrap();
}

/// `run --config` as pod `pod-k` with RRSA's variables and no other Alibaba variable.
fn start(s: &Setup, token_file: &Path) -> Reaped {
    let mut cmd = bin();
    for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("ALIBABA_CLOUD_")) {
        cmd.env_remove(k);
    }
    let log = std::fs::File::create(s.dir.join(format!("log-{}.txt", unique("run")))).unwrap();
    Reaped(
        cmd.args(["run", "--config", s.config.to_str().unwrap()])
            .env("POD_NAME", "pod-k")
            .env("HOSTNAME", "pod-k")
            .env("ALIBABA_CLOUD_ROLE_ARN", ROLE)
            .env("ALIBABA_CLOUD_OIDC_PROVIDER_ARN", OIDC_PROVIDER)
            .env("ALIBABA_CLOUD_OIDC_TOKEN_FILE", token_file)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap(),
    )
}

fn calls(fake: &Fake) -> Vec<Json> {
    fake.sts_state()["calls"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// The fake STS's state without its keys' secrets: what a failure message shows.
fn summary(state: &Json) -> String {
    let keys: Vec<String> = state["keys"]
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(id, k)| {
                    format!("{id}: {} requests, expires {}", k["requests"], k["expires"])
                })
                .collect()
        })
        .unwrap_or_default();
    let tokens: Vec<&Json> = state["calls"]
        .as_array()
        .map(|c| c.iter().map(|c| &c["oidc_token"]).collect())
        .unwrap_or_default();
    format!(
        "STS calls' tokens {tokens:?}; keys {keys:?}; expired_refusals {}, token_refusals {}",
        state["expired_refusals"], state["token_refusals"]
    )
}

fn now_s() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

#[test]
fn rrsa_keys_are_refreshed_during_a_run_and_every_row_lands() {
    let fake = Fake::start();
    fake.sts(json!({"mode": "up", "life": LIFE, "lives": [FIRST_LIFE]}));
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("token");
    write_token(&token_file, "oidc-token-1");
    let topic = unique("mc-keyless");
    create_topic(&topic, 1);
    let s = Setup::new(dir.path(), "a", &topic, &unique("g"), &sink_yaml(&fake));
    let mut child = start(&s, &token_file);

    // The first key is due for refresh at once (its life is under 5 minutes): the start-up's
    // second request fetches the second key, with the same token.
    assert!(
        wait_for(LIMIT, || calls(&fake).len() >= 2),
        "two keys fetched at start\n{}",
        s.log_tail()
    );
    let first_expires = fake.sts_state()["keys"]["STS.fake1"]["expires"]
        .as_f64()
        .unwrap();
    write_token(&token_file, "oidc-token-2");
    let all = logs(400, 0x4b, 0.0);
    let mut produced = 0;
    // Logs flow in small rounds until `done`, so requests go out across the keys' refreshes.
    let mut feed = |done: &dyn Fn() -> bool| {
        let end = Instant::now() + LIMIT;
        while !done() && Instant::now() < end && produced < all.len() {
            produce(&topic, &all[produced..produced + 10]);
            produced += 10;
            std::thread::sleep(Duration::from_secs(2));
        }
    };
    feed(&|| calls(&fake).len() >= 3);
    write_token(&token_file, "oidc-token-3");
    // Until a fourth key, and past the first key's expiry.
    feed(&|| calls(&fake).len() >= 4 && now_s() > first_expires + 3.0);
    let n = produced as i64;
    let committed = wait_for(LIMIT, || committed_total(&topic, &s.group, 1) == n);
    let state = fake.sts_state();
    let running = child.try_wait().unwrap().is_none();
    let code = stop(child);
    // No request went out with an expired key or without its token, though the first key
    // expired during the run (requests went out after it, below).
    assert_eq!(
        state["expired_refusals"],
        0,
        "{}\n{}",
        summary(&state),
        s.log_tail()
    );
    assert_eq!(
        state["token_refusals"],
        0,
        "{}\n{}",
        summary(&state),
        s.log_tail()
    );
    assert!(running, "still running\n{}", s.log_tail());
    assert_eq!(code, Some(0), "{}", s.log_tail());
    assert!(
        committed,
        "every offset commits\n{}\n{}",
        summary(&state),
        s.log_tail()
    );
    let keys = state["keys"].as_object().unwrap();
    let last_use = keys
        .values()
        .filter_map(|k| k["last_use"].as_f64())
        .fold(0.0, f64::max);
    assert!(
        last_use > first_expires,
        "a request after the first key expired: {}",
        summary(&state)
    );
    let used = keys
        .values()
        .filter(|k| k["requests"].as_u64() > Some(0))
        .count();
    assert!(
        used >= 3,
        "requests signed with more than one key: {}",
        summary(&state)
    );
    // Every MaxCompute request was signed with a key STS issued, and accepted.
    let log = fake.dump("log");
    let log = log.as_array().unwrap();
    assert!(!log.is_empty());
    for e in log {
        assert!(
            e["signature_ok"] == true && e["key"].as_str().is_some_and(|k| keys.contains_key(k)),
            "{e}"
        );
    }

    // Every call was our AssumeRoleWithOIDC, with the token file as it was at that refresh.
    let calls = state["calls"].as_array().unwrap();
    for c in calls {
        assert_eq!(
            (
                &c["method"],
                &c["action"],
                &c["role_arn"],
                &c["provider_arn"],
                &c["session"]
            ),
            (
                &json!("POST"),
                &json!("AssumeRoleWithOIDC"),
                &json!(ROLE),
                &json!(OIDC_PROVIDER),
                &json!("observation-publisher-pod-k")
            ),
            "{c}"
        );
    }
    let tokens: Vec<&str> = calls
        .iter()
        .map(|c| c["oidc_token"].as_str().unwrap())
        .collect();
    assert_eq!(
        &tokens[..4],
        [
            "oidc-token-1",
            "oidc-token-1",
            "oidc-token-2",
            "oidc-token-3"
        ],
        "{tokens:?}"
    );
    assert!(
        tokens[4..].iter().all(|t| *t == "oidc-token-3"),
        "{tokens:?}"
    );

    let (rows, count) = table_rows(&fake, &key(DATASET, &target()));
    assert_eq!((rows.len(), count), (produced, produced), "every row once");
    assert!(
        s.log_count("MaxCompute credentials") > 0,
        "{}",
        s.log_tail()
    );
    for k in keys.values() {
        for secret in [&k["secret"], &k["token"]] {
            assert_eq!(s.log_count(secret.as_str().unwrap()), 0, "never printed");
        }
    }
    assert_eq!(
        s.log_count("oidc-token-"),
        0,
        "the OIDC token is never printed"
    );
}

#[test]
fn sts_down_at_start_is_unready_naming_it_and_rows_land_once_it_answers() {
    let fake = Fake::start();
    fake.sts(json!({"mode": "closed", "life": 3600}));
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("token");
    write_token(&token_file, "oidc-token-1");
    let topic = unique("mc-sts-down");
    create_topic(&topic, 1);
    let s = Setup::new(dir.path(), "a", &topic, &unique("g"), &sink_yaml(&fake));
    let mut child = start(&s, &token_file);
    let all = logs(30, 0x4c, 0.0);
    produce(&topic, &all);
    let sts = format!(
        "AssumeRoleWithOIDC for role {ROLE} at http://127.0.0.1:{}",
        fake.sts_port
    );
    // Waits until `/readyz` answers 503 naming the STS endpoint and `cause`: whether it did,
    // and what it said last.
    let unready_with = |cause: &str| {
        let mut said = String::new();
        let ok = wait_for(LIMIT, || {
            said = s
                .get("/readyz")
                .map(|(code, body)| format!("{code} {body}"))
                .unwrap_or_default();
            said.starts_with("503 ") && said.contains(&sts) && said.contains(cause)
        });
        (ok, said)
    };

    // Unreachable: not ready, the endpoint and the cause named; alive.
    let (ok, said) = unready_with("no answer");
    assert!(ok, "{said}\n{}", s.log_tail());
    assert!(
        said.contains("MaxCompute not available at start-up"),
        "{said}"
    );
    assert!(child.try_wait().unwrap().is_none(), "{}", s.log_tail());
    assert_eq!(s.get("/healthz").map(|(c, _)| c), Some(200));

    // Refusing: its answer named.
    fake.sts(json!({"mode": "refuse"}));
    let (ok, said) = unready_with("HTTP 503 ServiceUnavailable");
    assert!(ok, "{said}\n{}", s.log_tail());
    assert!(child.try_wait().unwrap().is_none(), "{}", s.log_tail());
    assert_eq!(
        fake.dump("log").as_array().map(Vec::len),
        Some(0),
        "nothing sent to MaxCompute"
    );

    // STS answers: the sink starts, every row lands, ready.
    fake.sts(json!({"mode": "up"}));
    let n = all.len() as i64;
    let committed = wait_for(LIMIT, || committed_total(&topic, &s.group, 1) == n);
    let ready = wait_for(LIMIT, || s.get("/readyz").is_some_and(|(c, _)| c == 200));
    assert_eq!(stop(child), Some(0), "{}", s.log_tail());
    assert!(committed && ready, "{}", s.log_tail());
    let (rows, count) = table_rows(&fake, &key(DATASET, &target()));
    assert_eq!(
        (rows.len(), count),
        (all.len(), all.len()),
        "every row once"
    );
    let state = fake.sts_state();
    let refused = |status: u64| {
        state["calls"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["refused"] == status)
            .count()
    };
    assert!(refused(503) >= 1, "{}", summary(&state));
    assert_eq!(state["expired_refusals"], 0, "{}", summary(&state));
}
