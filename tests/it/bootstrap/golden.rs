//! `apply --dry-run` output against golden files in `tests/golden/` (reviewed by eye). Set
//! `UPDATE_GOLDEN=1` to rewrite them after an intended change, then review the diff.

use observation_publisher::bootstrap::checksum::ChecksumKey;
use observation_publisher::bootstrap::manifest::{build, render_yaml};
use observation_publisher::bootstrap::Spec;
use std::path::PathBuf;
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

pub(crate) fn check_golden(name: &str, actual: &str) {
    let path = root().join("tests/golden").join(name);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (run with UPDATE_GOLDEN=1)", path.display()));
    if expected != actual {
        let first = expected
            .lines()
            .zip(actual.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(0);
        panic!(
            "{} differs from the dry-run output at line {}:\n  golden: {:?}\n  actual: {:?}",
            path.display(),
            first + 1,
            expected.lines().nth(first),
            actual.lines().nth(first)
        );
    }
}

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_observation-publisher"))
}

/// `bootstrap apply --dry-run --spec SPEC`, which must exit 0.
fn dry_run_ok(spec: impl AsRef<std::ffi::OsStr>) -> std::process::Output {
    let out = bin()
        .args(["bootstrap", "apply", "--dry-run", "--spec"])
        .arg(spec)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

#[test]
fn example_spec_dry_run_matches_golden() {
    let out = dry_run_ok(root().join("deploy/example-spec.yaml"));
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(stdout.contains("config.yaml: <redacted>"));
    check_golden("example-spec.dry-run.yaml", &stdout);
    // Order: ServiceAccount, Secret, Deployment, then the budget (two replicas).
    let kinds: Vec<&str> = stdout.lines().filter(|l| l.starts_with("kind: ")).collect();
    assert_eq!(
        kinds,
        [
            "kind: ServiceAccount",
            "kind: Secret",
            "kind: Deployment",
            "kind: PodDisruptionBudget"
        ]
    );
}

#[test]
fn key_secret_and_autoscaling_dry_run_matches_golden() {
    let text = std::fs::read_to_string(root().join("deploy/example-spec.yaml"))
        .unwrap()
        .replace(
            "  # key_secret: {name: mlobs-publisher-key, key: service-account.json}",
            "  key_secret: {name: mlobs-publisher-key, key: service-account.json}",
        )
        .replace("# autoscaling: {", "autoscaling: {");
    let (spec, _) = Spec::parse(&text).unwrap_or_else(|p| panic!("{p}"));
    let yaml = render_yaml(&build(&spec, &ChecksumKey::DryRun), true).unwrap();
    assert!(yaml.contains("GOOGLE_APPLICATION_CREDENTIALS"));
    assert!(yaml.contains("kind: ScaledObject"));
    assert!(
        yaml.contains("bootstrap_servers: kafka.example:9092"),
        "--show-secrets shows the config"
    );
    check_golden("key-secret-autoscaling.dry-run.yaml", &yaml);
}

/// Autoscaling on a SASL_SSL cluster and a PodMonitor, as `--dry-run` prints them: the
/// credentials appear only as redacted `keda-*` items of the Secret.
#[test]
fn secured_autoscaling_and_pod_monitor_dry_run_matches_golden() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("spec.yaml");
    let text = std::fs::read_to_string(root().join("deploy/example-spec.yaml"))
        .unwrap()
        .replace("# autoscaling: {", "autoscaling: {")
        .replace("# monitoring: {", "monitoring: {")
        .replace(
            "        auto.offset.reset: earliest\n",
            "        auto.offset.reset: earliest\n        security.protocol: SASL_SSL\n        sasl.mechanisms: PLAIN\n        sasl.username: publisher\n        sasl.password: very-secret\n",
        );
    assert!(text.contains("very-secret") && text.contains("\nmonitoring: {"));
    std::fs::write(&path, &text).unwrap();
    let out = dry_run_ok(&path);
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(!stdout.contains("very-secret"));
    assert!(stdout.contains("keda-password: <redacted>"));
    let mut custom = 0;
    for doc in stdout.split("\n---\n") {
        let obj: serde_json::Value = serde_yaml_ng::from_str(doc).unwrap();
        let plural = format!("{}s", obj["kind"].as_str().unwrap().to_lowercase());
        if super::crd::is_custom(&plural) {
            assert_eq!(super::crd::validate(&plural, &obj), Vec::<String>::new());
            custom += 1;
        }
    }
    assert_eq!(custom, 3, "TriggerAuthentication, ScaledObject, PodMonitor");
    check_golden("secured-autoscaling-pod-monitor.dry-run.yaml", &stdout);
}

#[test]
fn invalid_spec_exits_2_with_every_problem() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.yaml");
    std::fs::write(
        &path,
        "project: p\nmodel: m\nrevision: 0\nreplicas: 0\nnamespace: Bad\n",
    )
    .unwrap();
    let out = bin()
        .args(["bootstrap", "apply", "--dry-run", "--spec"])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    for needle in [
        "version: required",
        "revision:",
        "replicas:",
        "namespace:",
        "image: required",
        "config: required",
    ] {
        assert!(err.contains(needle), "missing {needle:?} in {err}");
    }
}

#[test]
fn usage_errors_exit_2() {
    let out = bin()
        .args(["bootstrap", "apply", "--show-secrets", "--spec", "x.yaml"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "--show-secrets needs --dry-run");
    let out = bin()
        .args([
            "bootstrap",
            "delete",
            "--spec",
            "x.yaml",
            "--drain",
            "--drain-timeout",
            "soon",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "bad duration");
}

#[test]
fn an_unreachable_cluster_exits_1() {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    // A cluster on a closed local port: connection refused.
    std::fs::write(
        &kubeconfig,
        "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'http://127.0.0.1:9'}}]\n\
         users: [{name: u, user: {}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n",
    )
    .unwrap();
    let out = bin()
        .args(["bootstrap", "status", "--spec"])
        .arg(root().join("deploy/example-spec.yaml"))
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("retryable"));
}

#[test]
fn a_file_dead_letter_target_on_an_empty_dir_exits_2_saying_why() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("spec.yaml");
    let text = std::fs::read_to_string(root().join("deploy/example-spec.yaml"))
        .unwrap()
        .replace(
            "  consumer:\n",
            "  dead_letter: {target: file, path: dead.bin}\n  consumer:\n",
        );
    assert!(text.contains("dead.bin"));
    std::fs::write(&path, &text).unwrap();
    let out = bin()
        .args(["bootstrap", "apply", "--dry-run", "--spec"])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("config.dead_letter.path: dead.bin would be on an emptyDir"),
        "{err}"
    );
    // Named persistent volume, path on it: accepted.
    std::fs::write(
        &path,
        text.replace("path: dead.bin", "path: /mnt/pv/dead.bin")
            .replace(
                "namespace: mlobs\n",
                "namespace: mlobs\nstorage: {persistent: {claim: pub-data, mount_path: /mnt/pv}}\n",
            ),
    )
    .unwrap();
    let out = dry_run_ok(&path);
    let yaml = String::from_utf8_lossy(&out.stdout);
    assert!(
        yaml.contains("claimName: pub-data") && yaml.contains("mountPath: /mnt/pv"),
        "{yaml}"
    );
}

/// A spec kept in git with no secret in it: the Kafka password and the Arize keys come from
/// existing Secrets, and neither the version's Secret (shown with `--show-secrets`) nor any
/// other object carries them; the Deployment reads them into the environment, KEDA reads the
/// password from the same Secret.
#[test]
fn a_spec_with_credentials_from_existing_secrets_dry_run_matches_golden() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("spec.yaml");
    let example = std::fs::read_to_string(root().join("deploy/example-spec.yaml")).unwrap();
    let text = example
        .replace("# autoscaling: {", "autoscaling: {")
        .replace(
            "  gcp_service_account: mlobs-publisher@gcp-project.iam.gserviceaccount.com\n",
            "  gcp_workload_identity: direct\n",
        )
        .replace(
            "        auto.offset.reset: earliest\n",
            "        auto.offset.reset: earliest\n        security.protocol: SASL_SSL\n        sasl.mechanisms: SCRAM-SHA-512\n        sasl.username: {secretKeyRef: {name: kafka-credentials, key: username}}\n        sasl.password: {secretKeyRef: {name: kafka-credentials, key: password}}\n",
        )
        .replace(
            "      ttl_days: 14\n",
            "      ttl_days: 14\n  - type: ARIZE\n    config:\n      api_key: {secretKeyRef: {name: arize, key: api-key}}\n      space_key: {secretKeyRef: {name: arize, key: space-key}}\n",
        );
    let refs = |t: &str| t.matches("secretKeyRef").count();
    assert_eq!(refs(&text), refs(&example) + 4, "the spec was changed");
    std::fs::write(&path, &text).unwrap();
    let out = bin()
        .args([
            "bootstrap",
            "apply",
            "--dry-run",
            "--show-secrets",
            "--spec",
        ])
        .arg(&path)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        !stderr.contains("identity:"),
        "direct Workload Identity: {stderr}"
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    for absent in [
        "keda-",
        "sasl.password",
        "api_key",
        "space_key",
        "secretKeyRef:kafka",
        "secretKeyRef:arize",
    ] {
        assert!(!stdout.contains(absent), "{absent} in\n{stdout}");
    }
    assert!(stdout.contains(
        "name: OBS_PUBLISHER__OBSERVATION_SOURCE__CONFIG__ADDITIONAL_CONSUMER_CONFIG__SASL.PASSWORD"
    ));
    for doc in stdout.split("\n---\n") {
        let obj: serde_json::Value = serde_yaml_ng::from_str(doc).unwrap();
        let plural = format!("{}s", obj["kind"].as_str().unwrap().to_lowercase());
        if super::crd::is_custom(&plural) {
            assert_eq!(super::crd::validate(&plural, &obj), Vec::<String>::new());
        }
    }
    check_golden("secret-refs.dry-run.yaml", &stdout);
}
