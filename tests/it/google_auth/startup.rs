//! The binary's start-up with ADC: a malformed credentials file is a configuration error (exit
//! 2, naming the file and the variable); a metadata server that does not answer yet keeps the
//! process up and unready, retrying, until a token comes.

use crate::bigquery::{fresh_name, grpc_url, manager, rest_url, serial, PROJECT};
use crate::common::{bin, Reaped};
use crate::http_capture::{Reply, Server};
use crate::runtime::{brokers, create_topic, free_port, http_get, stop, unique, wait_for};
use serde_json::json;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

/// A configuration with one BIGQUERY sink on the emulator, authenticating with ADC.
fn config(dir: &Path, dataset: &str, port: u16) -> std::path::PathBuf {
    let topic = unique("adc-topic");
    create_topic(&topic, 1);
    let base = std::fs::read_to_string(crate::common::repo_config("local.yaml")).unwrap();
    let base: String = base
        .lines()
        .take_while(|l| !l.starts_with("observation_source:"))
        .map(|l| format!("{l}\n"))
        .collect();
    let yaml = format!(
        "{base}observation_source:\n  type: KAFKA\n  config:\n    topic: {}\n    bootstrap_servers: {}\n    group_id: {}\n\
         observation_sinks:\n- type: BIGQUERY\n  config:\n    project: {PROJECT}\n    dataset: {dataset}\n    ttl_days: 14\n\
         \x20   storage_endpoint: {}\n    rest_base_url: {}\n    auth: adc\n    emulator_compat: true\n\
         dead_letter:\n  target: file\n  path: {}\nlogging:\n  format: json\nserver:\n  listen: 127.0.0.1:{port}\n",
        topic,
        brokers(),
        unique("adc-group"),
        grpc_url(),
        rest_url(),
        dir.join("dead.bin").display(),
    );
    let path = dir.join("config.yaml");
    std::fs::write(&path, yaml).unwrap();
    path
}

/// `run` with no gcloud credentials file and `env`; stderr goes to `dir/run.log`.
fn start(dir: &Path, cfg: &Path, env: &[(&str, String)]) -> Reaped {
    let empty = dir.join("no-gcloud");
    std::fs::create_dir_all(&empty).unwrap();
    let mut cmd = bin();
    cmd.args(["run", "-c", cfg.to_str().unwrap()])
        .env_remove("GOOGLE_APPLICATION_CREDENTIALS")
        .env_remove("OBS_PUBLISHER_CONFIG")
        .env("CLOUDSDK_CONFIG", &empty)
        .env("HOME", dir)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("run.log")).unwrap());
    for (k, v) in env {
        cmd.env(k, v);
    }
    Reaped(cmd.spawn().unwrap())
}

#[test]
fn a_malformed_credentials_file_exits_2_naming_the_file_and_the_variable() {
    let dir = tempfile::tempdir().unwrap();
    let creds = dir.path().join("wif.json");
    std::fs::write(
        &creds,
        json!({"type": "external_account", "audience": "a"}).to_string(),
    )
    .unwrap();
    let cfg = config(dir.path(), "unused", free_port());
    let mut child = start(
        dir.path(),
        &cfg,
        &[(
            "GOOGLE_APPLICATION_CREDENTIALS",
            creds.display().to_string(),
        )],
    );
    let mut code = None;
    assert!(wait_for(Duration::from_secs(60), || {
        code = child.try_wait().unwrap().map(|s| s.code());
        code.is_some()
    }));
    let log = std::fs::read_to_string(dir.path().join("run.log")).unwrap();
    assert_eq!(code, Some(Some(2)), "{log}");
    assert!(log.contains(&creds.display().to_string()), "{log}");
    assert!(log.contains("GOOGLE_APPLICATION_CREDENTIALS"), "{log}");
    assert!(log.contains("credential_source"), "{log}");
}

#[test]
fn a_metadata_server_that_does_not_answer_yet_leaves_the_pod_unready_not_exited() {
    let dataset = fresh_name("adc_metadata");
    let rt = tokio::runtime::Runtime::new().unwrap();
    // Held to the end: the emulator serves one test at a time.
    let _serial = rt.block_on(async {
        let serial = serial().await;
        let m = manager();
        m.create_dataset(PROJECT, &dataset)
            .await
            .expect("emulator reachable");
        serial
    });
    let metadata = Server::answering(Reply::Drop);
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let cfg = config(dir.path(), &dataset, port);
    let host = format!("127.0.0.1:{}", metadata.port);
    let mut child = start(dir.path(), &cfg, &[("GCE_METADATA_HOST", host)]);
    let log = || std::fs::read_to_string(dir.path().join("run.log")).unwrap_or_default();
    let mut body = String::new();
    let unready = wait_for(Duration::from_secs(60), || {
        body = http_get(port, "/readyz")
            .map(|(c, b)| format!("{c} {b}"))
            .unwrap_or_default();
        body.starts_with("503") && metadata.count() >= 2
    });
    assert!(unready, "{body}\n{}", log());
    assert!(child.try_wait().unwrap().is_none(), "exited:\n{}", log());
    assert!(log().contains("metadata server"), "{}", log());
    let seen = metadata.seen();
    assert!(seen[0].path.starts_with(
        "/computeMetadata/v1/instance/service-accounts/default/token?scopes=https%3A%2F%2Fwww.googleapis.com%2Fauth%2Fbigquery"
    ), "{:?}", seen[0].path);
    assert_eq!(seen[0].header("metadata-flavor"), Some("Google"));

    // The metadata server comes up: the sink starts and the pod becomes ready.
    let token = json!({"access_token": "md-1", "expires_in": 3600, "token_type": "Bearer"});
    metadata.script((0..1000).map(|_| {
        Reply::Body(
            200,
            vec![("content-type", "application/json".into())],
            token.to_string().into_bytes(),
        )
    }));
    let ready = wait_for(Duration::from_secs(90), || {
        http_get(port, "/readyz").is_some_and(|(c, _)| c == 200)
    });
    assert!(ready, "{}", log());
    assert_eq!(stop(child), Some(0), "{}", log());
}
