//! The image as Merlin's control plane runs it, with one change in Merlin's configuration: the
//! publisher image name. The pod is tests/fixtures/merlin-deployment.yaml (what Merlin's
//! deployer creates: `python -m publisher +environment=config`, no args, no workingDir, no
//! securityContext, no probes, port 8000, the config Secret at
//! /mlobs/observation-publisher/conf/environment, a service-account key Secret at /iam/<name>
//! with `GOOGLE_APPLICATION_CREDENTIALS` pointing at it), started by [`run_args`] as written.
//! The config is Merlin's deployment_test.go fixture, all three sinks (BIGQUERY + MAXCOMPUTE +
//! ARIZE), with this environment's values where Merlin's configuration supplies them (broker,
//! topic, group, BigQuery project, the datasets). Only the endpoints that do not exist here come
//! through `OBS_PUBLISHER__…` environment variables: BIGQUERY on the emulator, MAXCOMPUTE
//! (`observation_sinks.1`, whose `access_url: url` is Merlin's placeholder) on the fake
//! MaxCompute endpoint (tests/it/maxcompute/fake.py, host networking makes it reachable),
//! ARIZE (`observation_sinks.2`) on a local capturing server. The key file's `token_uri` is a
//! local token endpoint, so the BigQuery sink authenticates with the key Merlin mounts (ADC), as
//! in production.
//!
//! It must: become ready on port 8000, land every valid log in BigQuery, in Arize (rows Arize
//! would refuse as row letters) and in MaxCompute's table (moved at the default interval, or at
//! the stop at the latest), every malformed log in `<topic>-dlq`, serve Merlin's metric names,
//! and exit 0 on `podman stop` within Kubernetes' default grace period (30 s), leaving no
//! staging table.

use super::*;
use crate::http_capture::{Reply, Server};
use crate::maxcompute::fake::Fake;
use crate::merlin::fixture;
use arrow_array::cast::AsArray;
use observation_publisher::config::{load_value, Config, Needs};
use observation_publisher::gen::{GenOptions, Generator};

/// Merlin's port (fixed in its Go deployer and in the config's default `prometheus_port`).
const PORT: u16 = 8000;
/// Kubernetes' default `terminationGracePeriodSeconds` (Merlin's pod sets none).
const GRACE_SECONDS: u32 = 30;

/// Logs for the fixture's schema (featureA–D, binary output), `malformed` of them broken;
/// session ids `sess-<seed in hex>-<i>`.
fn fixture_logs(config: &Path, seed: u64, n: usize, malformed: f64) -> Vec<(Vec<u8>, bool)> {
    let v = load_value(Some(config), Vec::new(), &[]).unwrap();
    let (cfg, _) = Config::from_value(&v, Needs::CONVERT).unwrap();
    let mut g = Generator::new(
        &cfg.inference_schema,
        GenOptions {
            rows_per_log: 1,
            seed,
            malformed_ratio: malformed,
            start_micros: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_micros() as i64
                - 3_600_000_000,
            model: ("project-1".into(), "model-1".into(), "1".into()),
        },
    );
    (0..n)
        .map(|_| {
            let l = g.next_log();
            (l.bytes, l.malformed)
        })
        .collect()
}

/// A service-account key file whose `token_uri` is `token_uri` (a fresh RSA key, PKCS#8).
fn service_account_key(dir: &Path, token_uri: &str) -> String {
    let pem = dir.join("key.pem");
    let o = Command::new("openssl")
        .args([
            "genpkey",
            "-algorithm",
            "RSA",
            "-pkeyopt",
            "rsa_keygen_bits:2048",
            "-out",
        ])
        .arg(&pem)
        .output()
        .expect("openssl (Debian's ca-certificates depends on it)");
    assert!(o.status.success(), "openssl: {}", stderr(&o));
    serde_json::json!({
        "type": "service_account",
        "project_id": "bq-project",
        "private_key_id": "0123456789abcdef",
        "private_key": std::fs::read_to_string(&pem).unwrap(),
        "client_email": "mlobs-publisher@bq-project.iam.gserviceaccount.com",
        "client_id": "1",
        "token_uri": token_uri,
    })
    .to_string()
}

fn secret(name: &str, key: &str, value: String) -> Secret {
    Secret {
        metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        string_data: Some([(key.to_string(), value)].into()),
        ..Default::default()
    }
}

#[test]
fn the_image_runs_under_merlins_pod_spec_unchanged() {
    build_image();
    let listener_free = std::net::TcpListener::bind(("0.0.0.0", PORT)).is_ok();
    assert!(
        listener_free,
        "port {PORT} (Merlin's) is taken on this host"
    );

    let rt = tokio::runtime::Runtime::new().unwrap();
    let _emulator = rt.block_on(serial());
    let tables = manager();
    let dir = tempfile::tempdir().unwrap();
    let (topic, group, dataset) = (
        unique("merlin-image"),
        unique("merlin-group"),
        fresh_name("merlin"),
    );
    rt.block_on(tables.create_dataset(PROJECT, &dataset))
        .expect("emulator reachable (scripts/bigquery start)");

    // Merlin's config as its deployer writes it, with this environment's values.
    let config = fixture()
        .replace(
            "bootstrap_servers: broker-1",
            &format!("bootstrap_servers: {}", brokers()),
        )
        .replace("caraml-project-1-model-1-1-prediction-log", &topic)
        .replace("group_id: group-id", &format!("group_id: {group}"))
        .replace("project: bq-project", &format!("project: {PROJECT}"))
        .replace("dataset: dataset", &format!("dataset: {dataset}"));
    let config_file = dir.path().join("config.yaml");
    std::fs::write(&config_file, &config).unwrap();

    let token = Server::answering(Reply::Body(
        200,
        vec![("content-type", "application/json".into())],
        br#"{"access_token":"token-from-the-key","expires_in":3600,"token_type":"Bearer"}"#
            .to_vec(),
    ));
    let arize = Server::start();
    // The fixture's key pair (`key`, `secret`) is what the fake checks signatures with.
    let odps = Fake::start_with("key", "secret");
    let key = service_account_key(
        dir.path(),
        &format!("http://127.0.0.1:{}/token", token.port),
    );

    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/merlin-deployment.yaml"),
    )
    .unwrap();
    let deployment: Deployment = serde_yaml_ng::from_str(&text).unwrap();
    let mut pod = deployment.spec.unwrap().template.spec.unwrap();
    pod.containers[0].image = Some(IMAGE.into());
    let secrets = [
        secret("project-1-model-1-config", "config.yaml", config),
        secret("mlobs-sa-key", "service-account.json", key),
    ];
    let endpoints = [
        (
            "OBS_PUBLISHER__OBSERVATION_SINKS__0__CONFIG__STORAGE_ENDPOINT",
            grpc_url(),
        ),
        (
            "OBS_PUBLISHER__OBSERVATION_SINKS__0__CONFIG__REST_BASE_URL",
            rest_url(),
        ),
        (
            "OBS_PUBLISHER__OBSERVATION_SINKS__1__CONFIG__ACCESS_URL",
            format!("http://127.0.0.1:{}/api", odps.port),
        ),
        (
            "OBS_PUBLISHER__OBSERVATION_SINKS__2__CONFIG__URI",
            format!("http://127.0.0.1:{}/v1", arize.port),
        ),
    ];
    let name = unique("merlin-publisher");
    let args = run_args(&pod, &secrets, dir.path(), &name, &endpoints);
    create_topic(&topic, 3);

    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let started = podman(&args);
    assert!(
        started.status.success(),
        "podman {args:?}: {}",
        stderr(&started)
    );
    let _container = Container_(name.clone());
    let answered = |path: &str| http_get(PORT, path).map(|(s, _)| s) == Some(200);
    assert!(
        wait_for(Duration::from_secs(90), || answered("/readyz")
            || !state(&name).0),
        "/readyz never answered 200; logs:\n{}",
        logs_of(&name)
    );
    // Merlin's `auto.offset.reset: latest` skips what was logged before the publisher held its
    // partitions (as Merlin's does). Warm up with logs of another seed, one a second, until one
    // lands: from then on every partition has its position. Only the second seed's logs count.
    let table = "prediction_log_project_1_model_1";
    let bq_rows = |prefix: &str| {
        let sql = format!(
            "SELECT COUNT(*) FROM `{PROJECT}.{dataset}.{table}` WHERE session_id LIKE '{prefix}%'"
        );
        rt.block_on(tables.query(PROJECT, &sql))
            .ok()
            .and_then(|q| q.rows.first()?.first()?.clone())
            .and_then(|n| n.parse::<usize>().ok())
            .unwrap_or(0)
    };
    let warm = fixture_logs(&config_file, 0x99, 120, 0.0);
    let mut sent = 0;
    let warmed = wait_for(Duration::from_secs(120), || {
        if sent < warm.len() {
            produce(&topic, &warm[sent..=sent]);
            sent += 1;
        }
        std::thread::sleep(Duration::from_millis(900));
        bq_rows("sess-99-") > 0
    });
    assert!(warmed, "no warm-up log landed; logs:\n{}", logs_of(&name));
    let produced = fixture_logs(&config_file, 7, 200, 0.04);
    let bad = produced.iter().filter(|(_, m)| *m).count();
    assert!(bad > 0, "some malformed logs");
    produce(&topic, &produced);

    // Rows Arize received for the counted logs: each request's Arrow stream (checked against
    // its number-of-rows header), by `_prediction_id` = `<session id>_<row id>`.
    let arize_rows = || {
        let mut n = 0;
        for r in arize
            .seen()
            .iter()
            .filter(|r| r.path.ends_with("/pandas_arrow"))
        {
            let body = arrow_ipc::reader::StreamReader::try_new(r.body.as_slice(), None)
                .expect("an Arrow IPC stream");
            let mut rows = 0;
            for b in body {
                let b = b.unwrap();
                rows += b.num_rows();
                let ids = b
                    .column_by_name("_prediction_id")
                    .expect("_prediction_id")
                    .as_string::<i32>()
                    .clone();
                n += ids
                    .iter()
                    .flatten()
                    .filter(|id| id.starts_with("sess-7-"))
                    .count();
            }
            assert_eq!(r.header("number-of-rows"), Some(rows.to_string().as_str()));
        }
        n
    };
    // Rows of the counted logs in MaxCompute's table (moved once a minute, the default).
    let odps_target = format!("max-project.{dataset}.{table}");
    let odps_sessions = || -> Vec<String> {
        odps.dump("tables")[&odps_target]["rows"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|r| r["session_id"].as_str())
            .filter(|s| s.starts_with("sess-7-"))
            .map(String::from)
            .collect()
    };
    let mut dlq: Option<TopicCounter> = None;
    let mut seen = (0, 0, 0, 0, 0);
    let landed = wait_for(Duration::from_secs(120), || {
        if dlq.is_none() {
            dlq = TopicCounter::new(&format!("{topic}-dlq"));
        }
        if let Some(d) = dlq.as_mut() {
            d.poll();
        }
        let (decode, row) = dlq.as_ref().map_or((0, 0), |d| {
            (d.of_kind("decode", ""), d.of_kind("row", "\"sess-7-"))
        });
        seen = (
            bq_rows("sess-7-"),
            decode,
            arize_rows(),
            row,
            odps_sessions().len(),
        );
        seen.0 + seen.1 == produced.len() && seen.2 + seen.3 == seen.0 && seen.4 == seen.0
    });
    assert!(
        landed,
        "(BigQuery rows, log letters, Arize rows, Arize row letters, MaxCompute rows) = {seen:?}, produced {} ({bad} malformed); logs:\n{}",
        produced.len(),
        logs_of(&name)
    );
    assert_eq!(
        seen.1, bad,
        "every malformed log is a dead letter in <topic>-dlq"
    );

    // The BigQuery sink authenticated with the mounted key; Arize got Merlin's credentials.
    assert!(
        token
            .seen()
            .iter()
            .any(|r| r.method == "POST" && r.path == "/token"),
        "the key file's token_uri was used"
    );
    let first = arize
        .seen()
        .into_iter()
        .find(|r| r.path == "/v1/pandas_arrow");
    let first = first.expect("an Arize request");
    assert_eq!(first.header("authorization"), Some("api-key"));
    assert_eq!(first.header("space"), Some("space-key"));
    // Merlin's metrics count acknowledged batches: MaxCompute's acknowledgement follows its
    // rows by the staging table's TRUNCATE, so they are waited for.
    let mut metrics = String::new();
    wait_for(Duration::from_secs(30), || {
        metrics = http_get(PORT, "/metrics")
            .map(|(_, b)| b)
            .unwrap_or_default();
        metrics.contains("total_prediction_logs_processed_total")
    });
    for m in [
        "total_prediction_logs_processed_total",
        "last_processed_timestamp",
    ] {
        assert!(
            metrics.contains(m),
            "Merlin's metric {m} in /metrics ({} bytes):\n{}\nlogs:\n{}",
            metrics.len(),
            &metrics[..metrics.len().min(3000)],
            logs_of(&name)
        );
    }

    let stop = podman(&["stop", "-t", &GRACE_SECONDS.to_string(), &name]);
    assert!(stop.status.success(), "{}", stderr(&stop));
    let (_, code) = state(&name);
    assert_eq!(
        code,
        "0",
        "exit code after podman stop; logs:\n{}",
        logs_of(&name)
    );

    // MaxCompute: every BigQuery row once, and only the target is left (the staging table was
    // dropped at the stop).
    let tables_now = odps.dump("tables");
    let names: Vec<&String> = tables_now.as_object().unwrap().keys().collect();
    assert_eq!(names, vec![&odps_target], "no staging table left");
    let sessions = odps_sessions();
    let distinct: std::collections::BTreeSet<&String> = sessions.iter().collect();
    assert_eq!(
        (sessions.len(), distinct.len()),
        (seen.0, seen.0),
        "every BigQuery row in MaxCompute, once; logs:\n{}",
        logs_of(&name)
    );
}
