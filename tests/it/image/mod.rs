//! The container image as users run it. The image is built once per test run from the binary
//! under test (`scripts/image build --binary …`, on the local distroless-equivalent base), then
//! started with podman exactly as a pod spec says: [`deployment`] runs the Deployment that
//! `bootstrap apply --dry-run --show-secrets` generates, [`merlin`] runs the Deployment Merlin's
//! control plane creates (`python -m publisher +environment=config`). [`run_args`] turns a pod
//! spec into podman flags field by field and panics on a field it cannot honour.
//!
//! What still differs from a cluster: podman's seccomp profile instead of RuntimeDefault, host
//! networking instead of pod networking, one image layer for the base, and the Secret's files are
//! plain files (a kubelet uses symlinks into a `..data` directory).

mod deployment;
mod merlin;

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

/// `podman run` arguments for the pod's one container, derived field by field from the pod spec,
/// plus `extra_env` (test-only endpoints). Secret volumes are filled from `secrets` (by name) and
/// materialised under `dir`, like emptyDirs. Panics on a field it cannot honour, so a new
/// manifest feature is noticed here rather than silently dropped. Without a security context
/// the image's own user runs it, as on a cluster.
fn run_args(
    pod: &PodSpec,
    secrets: &[Secret],
    dir: &Path,
    name: &str,
    extra_env: &[(&str, String)],
) -> Vec<String> {
    assert_eq!(pod.containers.len(), 1, "one container per publisher pod");
    let c: &Container = &pod.containers[0];
    let psc = pod.security_context.clone().unwrap_or_default();
    let csc = c.security_context.clone().unwrap_or_default();
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
    let user = csc.run_as_user.or(psc.run_as_user);
    let group = csc.run_as_group.or(psc.run_as_group);
    match (user, group) {
        (Some(u), Some(g)) => a.extend(["--user".into(), format!("{u}:{g}")]),
        (Some(u), None) => a.extend(["--user".into(), u.to_string()]),
        (None, None) => {}
        (None, Some(_)) => panic!("runAsGroup without runAsUser"),
    }
    if csc.run_as_non_root.or(psc.run_as_non_root) == Some(true) {
        assert_ne!(user, Some(0), "runAsNonRoot with user 0");
    }
    let fs_group = psc.fs_group;
    if let Some(g) = fs_group {
        a.extend(["--group-add".into(), g.to_string()]);
    }
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
    for (k, v) in extra_env {
        a.extend(["-e".into(), format!("{k}={v}")]);
    }
    // Files a kubelet writes are root's, group fsGroup when the pod has one.
    let owner_group = fs_group.map_or(0, |g| g as u32);
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
            let secret = secrets
                .iter()
                .find(|x| x.metadata.name == s.secret_name)
                .unwrap_or_else(|| panic!("the Secret {:?} the volume names", s.secret_name));
            // Kubernetes' default defaultMode is 0644.
            let mode = s.default_mode.unwrap_or(0o644) as u32;
            let mut files: Vec<(String, Vec<u8>)> = Vec::new();
            for (k, v) in secret.string_data.clone().unwrap_or_default() {
                files.push((k, v.into_bytes()));
            }
            for (k, v) in secret.data.clone().unwrap_or_default() {
                files.push((k, v.0));
            }
            assert!(!files.is_empty(), "the Secret {:?} has data", s.secret_name);
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
            for (key, value) in files {
                let path = match &items {
                    None => key.clone(),
                    Some(items) => match items.iter().find(|(k, _)| *k == key) {
                        Some((_, p)) => p.clone(),
                        None => continue,
                    },
                };
                let f = host.join(&path);
                std::fs::write(&f, value).unwrap();
                chown(&f, Some(0), Some(owner_group)).unwrap();
                std::fs::set_permissions(&f, std::fs::Permissions::from_mode(mode)).unwrap();
            }
            std::fs::set_permissions(&host, std::fs::Permissions::from_mode(0o755)).unwrap();
        } else if vol.empty_dir.is_some() {
            // An emptyDir belongs to the pod's fsGroup (setgid), like kubelet makes it.
            let g = fs_group.expect("an emptyDir in a pod without fsGroup") as u32;
            chown(&host, Some(0), Some(g)).unwrap();
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
    if let Some(command) = &c.command {
        a.extend([
            "--entrypoint".into(),
            serde_json::to_string(command).unwrap(),
        ]);
    }
    a.push(c.image.clone().expect("image"));
    a.extend(c.args.clone().unwrap_or_default());
    a
}

/// Builds the image once per test run from the binary under test (the two image tests share
/// it); later callers get the first outcome.
fn build_image() {
    static BUILT: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    let r = BUILT.get_or_init(|| {
        let build = Command::new(repo_path("scripts/image"))
            .args([
                "build",
                "--binary",
                env!("CARGO_BIN_EXE_observation-publisher"),
            ])
            .env("IMAGE", IMAGE)
            .output()
            .unwrap();
        if build.status.success() {
            Ok(())
        } else {
            Err(format!(
                "scripts/image build: {}\n{}",
                String::from_utf8_lossy(&build.stdout),
                stderr(&build)
            ))
        }
    });
    if let Err(e) = r {
        panic!("{e}");
    }
}

/// The container's state: (running, exit code).
fn state(name: &str) -> (bool, String) {
    let o = podman(&[
        "inspect",
        name,
        "--format",
        "{{.State.Running}} {{.State.ExitCode}}",
    ]);
    let text = String::from_utf8_lossy(&o.stdout).trim().to_string();
    let (running, code) = text.split_once(' ').unwrap_or(("false", ""));
    (running == "true", code.to_string())
}

/// The container's log.
fn logs_of(name: &str) -> String {
    let o = podman(&["logs", name]);
    format!("{}{}", String::from_utf8_lossy(&o.stdout), stderr(&o))
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

/// Counts the messages of every partition of `topic` from the start (no consumer group), and
/// the dead letters among them by `x-error-kind`.
struct TopicCounter {
    consumer: BaseConsumer,
    count: usize,
    /// (x-error-kind, payload) of every message.
    letters: Vec<(String, Vec<u8>)>,
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
        Some(TopicCounter {
            consumer,
            count: 0,
            letters: Vec::new(),
        })
    }

    fn poll(&mut self) -> usize {
        use rdkafka::message::{Headers, Message};
        while let Some(m) = self.consumer.poll(Duration::from_millis(200)) {
            let m = m.unwrap();
            self.count += 1;
            let kind = m
                .headers()
                .and_then(|h| h.iter().find(|x| x.key == "x-error-kind"))
                .and_then(|x| x.value)
                .map(|v| String::from_utf8_lossy(v).into_owned())
                .unwrap_or_default();
            self.letters
                .push((kind, m.payload().unwrap_or_default().to_vec()));
        }
        self.count
    }

    /// Letters of one `x-error-kind` (`decode`, `row`, …) seen so far whose payload contains
    /// `containing`.
    fn of_kind(&self, kind: &str, containing: &str) -> usize {
        let needle = containing.as_bytes();
        self.letters
            .iter()
            .filter(|(k, p)| {
                k == kind && (needle.is_empty() || p.windows(needle.len()).any(|w| w == needle))
            })
            .count()
    }
}
