//! The image as bootstrap's Deployment runs it: started with podman **exactly as the Deployment
//! from `bootstrap apply --dry-run --show-secrets` specifies** — user, group and fsGroup,
//! read-only root filesystem, dropped capabilities, no privilege escalation, every volume (the
//! config Secret's files at their mount path and mode, emptyDirs), working directory,
//! environment, command and args are all read from the generated manifest, none copied by hand.
//! It runs against the local broker, the Kafka dead-letter target and the BIGQUERY sink on the
//! emulator (what a production Deployment uses), and must: answer its probes with 200, land
//! every produced log as a table row or a dead letter, and end with exit code 0 when stopped
//! within `terminationGracePeriodSeconds`.

use super::*;

/// A spec that uses what a production Deployment uses: the broker, the Kafka dead-letter target,
/// the BIGQUERY sink (on the emulator). The schema is config/local.yaml's, which `logs` produces.
fn spec(topic: &str, group: &str, dataset: &str, port: u16) -> String {
    let local: serde_yaml_ng::Value =
        serde_yaml_ng::from_str(&std::fs::read_to_string(repo_config("local.yaml")).unwrap())
            .unwrap();
    let schema = serde_yaml_ng::to_string(&local["inference_schema"]).unwrap();
    let schema = schema
        .lines()
        .map(|l| format!("    {l}\n"))
        .collect::<String>();
    format!(
        r#"project: demo
model: fraud-detector
version: "1"
revision: 1
namespace: mlobs
image: {IMAGE}
replicas: 1
config:
  inference_schema:
{schema}  observation_sinks:
  - type: BIGQUERY
    config:
      project: {PROJECT}
      dataset: {dataset}
      ttl_days: 3650
      storage_endpoint: {grpc}
      rest_base_url: {rest}
      auth: none
      emulator_compat: true
  observation_source:
    type: KAFKA
    config:
      bootstrap_servers: {brokers}
      topic: {topic}
      group_id: {group}
      additional_consumer_config:
        auto.offset.reset: earliest
  consumer:
    session_timeout: 6s
  dead_letter:
    target: kafka
  batching:
    linger: 300ms
  server:
    listen: 0.0.0.0:{port}
"#,
        grpc = grpc_url(),
        rest = rest_url(),
        brokers = brokers(),
    )
}

/// The generated Secret and Deployment.
fn manifests(spec_path: &Path) -> (Secret, Deployment) {
    let o = bin()
        .args([
            "bootstrap",
            "apply",
            "--dry-run",
            "--show-secrets",
            "--spec",
        ])
        .arg(spec_path)
        .output()
        .unwrap();
    assert!(o.status.success(), "dry-run: {}", stderr(&o));
    let text = String::from_utf8(o.stdout).unwrap();
    let (mut secret, mut deployment) = (None, None);
    for doc in serde_yaml_ng::Deserializer::from_str(&text) {
        let v = <serde_yaml_ng::Value as serde::Deserialize>::deserialize(doc).unwrap();
        match v["kind"].as_str() {
            Some("Secret") => secret = Some(serde_yaml_ng::from_value(v).unwrap()),
            Some("Deployment") => deployment = Some(serde_yaml_ng::from_value(v).unwrap()),
            _ => {}
        }
    }
    (secret.expect("a Secret"), deployment.expect("a Deployment"))
}

#[test]
fn the_image_runs_as_the_generated_deployment_specifies() {
    build_image();

    let rt = tokio::runtime::Runtime::new().unwrap();
    let _emulator = rt.block_on(serial());
    let tables = manager();
    let dir = tempfile::tempdir().unwrap();
    let topic = unique("image");
    let (group, dataset, port) = (unique("image-group"), fresh_name("image"), free_port());
    // The publisher creates its table, not the dataset (an operator's job).
    rt.block_on(tables.create_dataset(PROJECT, &dataset))
        .expect("emulator reachable (scripts/bigquery start)");
    let spec_path = dir.path().join("spec.yaml");
    std::fs::write(&spec_path, spec(&topic, &group, &dataset, port)).unwrap();
    let (secret, deployment) = manifests(&spec_path);
    let pod = deployment
        .spec
        .as_ref()
        .and_then(|s| s.template.spec.clone())
        .expect("a pod template");
    // bootstrap's pods run as a fixed non-root user with an fsGroup for their volumes.
    let psc = pod
        .security_context
        .clone()
        .expect("a pod security context");
    let csc = pod.containers[0]
        .security_context
        .clone()
        .unwrap_or_default();
    assert!(csc.run_as_user.or(psc.run_as_user).is_some(), "runAsUser");
    assert!(
        csc.run_as_group.or(psc.run_as_group).is_some(),
        "runAsGroup"
    );
    assert!(psc.fs_group.is_some(), "fsGroup");
    let name = unique("publisher");
    let args = run_args(&pod, std::slice::from_ref(&secret), dir.path(), &name, &[]);

    // A few percent malformed: every log must end as a row or a dead letter.
    create_topic(&topic, 3);
    let produced = logs(300, 11, 0.04);
    let bad = produced.iter().filter(|(_, m)| *m).count();
    assert!(bad > 0, "some malformed logs");
    produce(&topic, &produced);

    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let started = podman(&args);
    assert!(
        started.status.success(),
        "podman {args:?}: {}",
        stderr(&started)
    );
    let container = Container_(name.clone());
    let logs_of = || {
        let o = podman(&["logs", &container.0]);
        format!("{}{}", String::from_utf8_lossy(&o.stdout), stderr(&o))
    };

    let c = &pod.containers[0];
    let (ready_port, ready_path) = probe_port(c, c.readiness_probe.as_ref().expect("readiness"));
    let (live_port, live_path) = probe_port(c, c.liveness_probe.as_ref().expect("liveness"));
    assert_eq!(ready_port, port, "the probes use the configured port");
    let answered = |p: u16, path: &str| http_get(p, path).map(|(s, _)| s) == Some(200);
    let running = || {
        let o = podman(&["inspect", &name, "--format", "{{.State.Running}}"]);
        String::from_utf8_lossy(&o.stdout).trim() == "true"
    };
    assert!(
        wait_for(Duration::from_secs(90), || answered(
            ready_port,
            &ready_path
        ) || !running()),
        "{ready_path} never answered 200; logs:\n{}",
        logs_of()
    );
    assert!(running(), "the container exited; logs:\n{}", logs_of());
    assert!(
        answered(live_port, &live_path),
        "{live_path}: {}",
        logs_of()
    );

    // Every log lands: rows in the table, the rest in the dead-letter topic.
    let table = {
        let cfg_file = dir.path().join("config").join("config.yaml");
        let o = bin()
            .args(["schema", "-c"])
            .arg(&cfg_file)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
        let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        doc["tableReference"]["tableId"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let rows = || {
        let sql = format!("SELECT COUNT(*) FROM `{PROJECT}.{dataset}.{table}`");
        rt.block_on(tables.query(PROJECT, &sql))
            .ok()
            .and_then(|q| q.rows.first()?.first()?.clone())
            .and_then(|n| n.parse::<usize>().ok())
            .unwrap_or(0)
    };
    let mut dlq: Option<TopicCounter> = None;
    let mut seen = (0, 0);
    let landed = wait_for(Duration::from_secs(120), || {
        if dlq.is_none() {
            // The dead-letter topic exists once the first letter is written.
            dlq = TopicCounter::new(&format!("{topic}-dlq"));
        }
        let letters = dlq.as_mut().map_or(0, TopicCounter::poll);
        seen = (rows(), letters);
        seen.0 + seen.1 >= produced.len()
    });
    assert!(
        landed,
        "rows + dead letters = {seen:?}, produced {}; logs:\n{}",
        produced.len(),
        logs_of()
    );
    assert_eq!(seen, (produced.len() - bad, bad), "rows, dead letters");

    // Stopped within the grace period, it drains, commits and exits 0 (137 would be a kill).
    let grace = pod
        .termination_grace_period_seconds
        .expect("a grace period");
    let stop = podman(&["stop", "-t", &grace.to_string(), &name]);
    assert!(stop.status.success(), "{}", stderr(&stop));
    let code = podman(&["inspect", &name, "--format", "{{.State.ExitCode}}"]);
    let code = String::from_utf8_lossy(&code.stdout).trim().to_string();
    assert_eq!(
        code,
        "0",
        "exit code after podman stop; logs:\n{}",
        logs_of()
    );
}
