//! The Arize keys are shown in no channel: planted keys are looked for in `Debug` of the structs
//! that hold them, in the error of a refusal whose body echoes them, in a redirect's error, in
//! the running binary's log and in `check-config`'s output. A refusal's error says what the body
//! says (bounded), and a redirect is not followed.

use super::*;
use crate::common::run;
use crate::http_capture::{Reply, Server};
use crate::runtime::{committed_total, create_topic, logs, produce, stop, unique, wait_for, Setup};
use observation_publisher::sink::arize::client::ClientOptions;
use observation_publisher::sink::Sink;

const PLANTED_API: &str = "PLANTED-arize-api-7c1";
const PLANTED_SPACE: &str = "PLANTED-arize-space-9d2";

fn assert_clean(what: &str, text: &str) {
    assert!(!text.contains("PLANTED"), "{what} shows a key:\n{text}");
}

/// A refusal that echoes the keys, as a misbehaving proxy or a verbose error page might.
fn echoing_refusal() -> Reply {
    Reply::Body(
        400,
        vec![("content-type", "application/json".into())],
        format!(
            "{{\"error\": \"feature f_wide is not in the model's schema\", \"authorization\": \"{PLANTED_API}\", \"space\": \"{PLANTED_SPACE}\"}}"
        )
        .into_bytes(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn debug_and_errors_show_no_key_and_a_redirect_is_not_followed() {
    let server = Server::start();
    let mut cfg_a = arize_cfg(&server.uri(), 8 << 20);
    cfg_a.api_key = PLANTED_API.into();
    cfg_a.space_key = PLANTED_SPACE.into();
    assert_clean(
        "Debug of the ARIZE sink config",
        &format!("{cfg_a:?} {cfg_a:#?}"),
    );
    let opts = ClientOptions {
        uri: server.uri(),
        api_key: PLANTED_API.into(),
        space_key: PLANTED_SPACE.into(),
        space_id: String::new(),
        request_timeout: Duration::from_secs(5),
        connect_timeout: Duration::from_secs(5),
    };
    assert_clean("Debug of ClientOptions", &format!("{opts:?} {opts:#?}"));

    let cfg = Model::Binary.config();
    let mut s = ArizeSink::new(&cfg, &cfg_a).unwrap();
    let b = batch(
        &cfg,
        &[TestLog::new("sess-k", 3, 60_000_000, 1)],
        SystemTime::now(),
    );

    // A 400 whose body echoes the keys: the error says what the body says, keys scrubbed.
    server.script([echoing_refusal()]);
    let e = s.write(Arc::clone(&b)).await.unwrap_err();
    let msg = format!("{e} {e:?}");
    assert!(!e.is_retryable(), "{msg}");
    assert!(msg.contains("HTTP 400"), "{msg}");
    assert!(
        msg.contains("feature f_wide is not in the model's schema"),
        "{msg}"
    );
    assert_clean("the 400's error", &msg);
    assert_eq!(server.take().len(), 1);

    // A redirect (to a host that would receive the keys) is not followed: a needs-fix naming
    // where it points.
    for status in [301, 302, 307, 308] {
        server.script([Reply::Status(
            status,
            vec![(
                "location",
                "http://user:PLANTED-pw@elsewhere.example:9/v1/pandas_arrow".to_string(),
            )],
        )]);
        let e = s.write(Arc::clone(&b)).await.unwrap_err();
        let msg = format!("{e} {e:?}");
        assert!(!e.is_retryable(), "{msg}");
        assert!(
            msg.contains(&format!("HTTP {status}")) && msg.contains("elsewhere.example:9/v1"),
            "{msg}"
        );
        assert_clean("the redirect's error", &msg);
        let seen = server.take();
        assert_eq!(seen.len(), 1, "{status}: the redirect was followed");
        assert_eq!(seen[0].method, "POST");
    }
    // The answer that acknowledges is still counted.
    let report = s.write(b).await.unwrap();
    assert_eq!(report.rejected, []);
}

#[test]
fn the_running_binary_logs_a_refusals_reason_and_no_key() {
    let server = Server::start();
    server.script([echoing_refusal()]);
    let dir = tempfile::tempdir().unwrap();
    let topic = unique("arize-keys");
    create_topic(&topic, 1);
    let n = 30;
    let extra = format!(
        "observation_sinks:\n- type: ARIZE\n  config:\n    api_key: {PLANTED_API}\n    space_key: {PLANTED_SPACE}\n    uri: {}\n",
        server.uri()
    );
    let s = Setup::new(dir.path(), "k", &topic, &unique("g"), &extra);
    let o = run(&["check-config", "-c", s.config.to_str().unwrap()]);
    assert!(o.status.success());
    assert_clean(
        "check-config",
        &format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        ),
    );
    let child = s.start();
    produce(&topic, &logs(n, 41, 0.0));
    let limit = Duration::from_secs(90);
    assert!(
        wait_for(limit, || s
            .log_count("feature f_wide is not in the model's schema")
            > 0),
        "the refusal's reason is logged\n{}",
        s.log_tail()
    );
    // The needs-fix is retried; the server now acknowledges.
    assert!(
        wait_for(limit, || committed_total(&topic, &s.group, 1) == n as i64),
        "the retry is acknowledged and commits\n{}",
        s.log_tail()
    );
    assert_eq!(stop(child), Some(0));
    assert_eq!(s.log_count("PLANTED"), 0, "{}", s.log_tail());
}
