//! The container image as a Deployment runs it. The image is built from the binary under test
//! (`scripts/image build --binary …`, on the local distroless-equivalent base), then started with
//! podman **exactly as the Deployment from `bootstrap apply --dry-run --show-secrets` specifies**:
//! user, group and fsGroup, read-only root filesystem, dropped capabilities, no privilege
//! escalation, every volume (the config Secret's files at their mount path and mode, emptyDirs),
//! working directory, environment, command and args are all read from the generated manifest,
//! none copied by hand. It runs against the local broker, the Kafka dead-letter target and the
//! BIGQUERY sink on the emulator (what a production Deployment uses), and must: answer its probes
//! with 200, land every produced log as a table row or a dead letter, and end with exit code 0
//! when stopped within `terminationGracePeriodSeconds`.
//!
//! What still differs from a cluster: podman's seccomp profile instead of RuntimeDefault, host
//! networking instead of pod networking, one image layer for the base, and the Secret's files are
//! plain files (a kubelet uses symlinks into a `..data` directory).

use crate::bigquery::{fresh_name, grpc_url, manager, rest_url, serial, PROJECT};
use crate::common::{bin, repo_config, stderr};
use crate::runtime::{brokers, create_topic, free_port, http_get, logs, produce, unique, wait_for};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Container, PodSpec, Secret};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
use std::os::unix::fs::{chown, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

const IMAGE: &str = "localhost/observation-publisher:it";

fn podman(args: &[&str]) -> Output {
    Command::new("podman")
        .args(args)
        .env("CONTAINERS_CONF", repo_path("target/image/containers.conf"))
        .output()
        .expect("podman runs (scripts/image installs it)")
}

fn repo_path(p: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(p)
}

/// Removes the container however the test ends.
struct Container_(String);
impl Drop for Container_ {
    fn drop(&mut self) {
        let _ = podman(&["rm", "-f", "-t", "0", &self.0]);
    }
}

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

/// `podman run` arguments for the pod's one container, derived field by field from the pod spec.
/// Volumes are materialised under `dir`. Panics on a field it cannot honour, so a new manifest
/// feature is noticed here rather than silently dropped.
fn run_args(pod: &PodSpec, secret: &Secret, dir: &Path, name: &str) -> Vec<String> {
    assert_eq!(pod.containers.len(), 1, "one container per publisher pod");
    let c: &Container = &pod.containers[0];
    let psc = pod.security_context.clone().unwrap_or_default();
    let csc = c.security_context.clone().unwrap_or_default();
    let user = csc.run_as_user.or(psc.run_as_user).expect("runAsUser");
    let group = csc.run_as_group.or(psc.run_as_group).expect("runAsGroup");
    let fs_group = psc.fs_group.expect("fsGroup");
    if csc.run_as_non_root.or(psc.run_as_non_root) == Some(true) {
        assert_ne!(user, 0, "runAsNonRoot with user 0");
    }
    let mut a: Vec<String> = [
        "run",
        "-d",
        "--name",
        name,
        "--network",
        "host",
        "--pull",
        "never",
    ]
    .map(String::from)
    .to_vec();
    a.extend(["--user".into(), format!("{user}:{group}")]);
    a.extend(["--group-add".into(), fs_group.to_string()]);
    if csc.read_only_root_filesystem == Some(true) {
        a.extend(["--read-only".into(), "--read-only-tmpfs=false".into()]);
    }
    if let Some(caps) = &csc.capabilities {
        for d in caps.drop.iter().flatten() {
            a.extend(["--cap-drop".into(), d.clone()]);
        }
        for d in caps.add.iter().flatten() {
            a.extend(["--cap-add".into(), d.clone()]);
        }
    }
    if csc.allow_privilege_escalation == Some(false) {
        a.extend(["--security-opt".into(), "no-new-privileges".into()]);
    }
    if let Some(w) = &c.working_dir {
        a.extend(["-w".into(), w.clone()]);
    }
    for e in c.env.iter().flatten() {
        assert!(e.value_from.is_none(), "env {} from a reference", e.name);
        a.extend([
            "-e".into(),
            format!("{}={}", e.name, e.value.clone().unwrap_or_default()),
        ]);
    }
    for m in c.volume_mounts.iter().flatten() {
        let vol = pod
            .volumes
            .iter()
            .flatten()
            .find(|v| v.name == m.name)
            .unwrap_or_else(|| panic!("volume {} is mounted but not declared", m.name));
        let host = dir.join(&vol.name);
        std::fs::create_dir_all(&host).unwrap();
        if let Some(s) = &vol.secret {
            assert_eq!(
                s.secret_name.as_deref(),
                secret.metadata.name.as_deref(),
                "the volume names the generated Secret"
            );
            let mode = s.default_mode.expect("defaultMode") as u32;
            let data = secret.string_data.clone().unwrap_or_default();
            assert!(!data.is_empty(), "the Secret carries the config");
            // `items` projects only the listed keys (at their paths); without it, every key.
            let items: Option<Vec<(String, String)>> = s.items.as_ref().map(|items| {
                items
                    .iter()
                    .map(|i| {
                        assert!(i.mode.is_none(), "a per-item mode this test cannot honour");
                        (i.key.clone(), i.path.clone())
                    })
                    .collect()
            });
            for (key, value) in data {
                let path = match &items {
                    None => key.clone(),
                    Some(items) => match items.iter().find(|(k, _)| *k == key) {
                        Some((_, p)) => p.clone(),
                        None => continue,
                    },
                };
                let f = host.join(&path);
                std::fs::write(&f, value).unwrap();
                chown(&f, Some(0), Some(fs_group as u32)).unwrap();
                std::fs::set_permissions(&f, std::fs::Permissions::from_mode(mode)).unwrap();
            }
        } else if vol.empty_dir.is_some() {
            // An emptyDir belongs to the pod's fsGroup (setgid), like kubelet makes it.
            chown(&host, Some(0), Some(fs_group as u32)).unwrap();
            std::fs::set_permissions(&host, std::fs::Permissions::from_mode(0o2770)).unwrap();
        } else {
            panic!("volume {} is of a kind this test cannot run", vol.name);
        }
        let ro = if m.read_only == Some(true) { ":ro" } else { "" };
        a.extend([
            "-v".into(),
            format!("{}:{}{ro}", host.display(), m.mount_path),
        ]);
    }
    let command = c.command.clone().expect("command");
    a.extend([
        "--entrypoint".into(),
        serde_json::to_string(&command).unwrap(),
    ]);
    a.push(c.image.clone().expect("image"));
    a.extend(c.args.clone().unwrap_or_default());
    a
}

/// The port a probe's `httpGet` names (by number or by the container port's name).
fn probe_port(c: &Container, probe: &k8s_openapi::api::core::v1::Probe) -> (u16, String) {
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    let get = probe.http_get.as_ref().expect("an httpGet probe");
    let port = match &get.port {
        IntOrString::Int(p) => *p,
        IntOrString::String(name) => {
            c.ports
                .iter()
                .flatten()
                .find(|p| p.name.as_deref() == Some(name))
                .expect("the probe's named port")
                .container_port
        }
    };
    (
        u16::try_from(port).unwrap(),
        get.path.clone().unwrap_or_default(),
    )
}

/// Counts the messages of every partition of `topic` from the start (no consumer group).
struct TopicCounter {
    consumer: BaseConsumer,
    count: usize,
}

impl TopicCounter {
    /// None while the topic has no partitions yet.
    fn new(topic: &str) -> Option<Self> {
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", brokers())
            .set("group.id", unique("image-count"))
            .set("enable.auto.commit", "false")
            .create()
            .unwrap();
        let md = consumer
            .fetch_metadata(Some(topic), Duration::from_secs(10))
            .unwrap();
        let partitions = md.topics().first()?.partitions();
        if partitions.is_empty() {
            return None;
        }
        let mut tpl = TopicPartitionList::new();
        for p in partitions {
            tpl.add_partition_offset(topic, p.id(), Offset::Beginning)
                .unwrap();
        }
        consumer.assign(&tpl).unwrap();
        Some(TopicCounter { consumer, count: 0 })
    }

    fn poll(&mut self) -> usize {
        while let Some(m) = self.consumer.poll(Duration::from_millis(200)) {
            m.unwrap();
            self.count += 1;
        }
        self.count
    }
}

#[test]
fn the_image_runs_as_the_generated_deployment_specifies() {
    let build = Command::new(repo_path("scripts/image"))
        .args([
            "build",
            "--binary",
            env!("CARGO_BIN_EXE_observation-publisher"),
        ])
        .env("IMAGE", IMAGE)
        .output()
        .unwrap();
    assert!(
        build.status.success(),
        "scripts/image build: {}\n{}",
        String::from_utf8_lossy(&build.stdout),
        stderr(&build)
    );

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
    let name = unique("publisher");
    let args = run_args(&pod, &secret, dir.path(), &name);

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
