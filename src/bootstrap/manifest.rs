//! Pure builders for the objects of one model version: ServiceAccount, Secret, Deployment, and
//! the optional ones ([`super::keda`], [`super::monitor`]). No I/O; `--dry-run` prints exactly
//! these.

use super::checksum::{ChecksumKey, KEY_ITEM};
use super::keda::{scaled_object, trigger_authentication};
use super::meta::{labels, meta, selector_labels};
pub use super::meta::{
    ANNOTATION_REVISION, APP_NAME, FIELD_MANAGER, LABEL_MODEL, LABEL_PROJECT, LABEL_VERSION,
    PORT_NAME,
};
use super::monitor::{disruption_budget, pod_monitor};
use super::spec::Spec;
pub use super::storage::{CONFIG_DIR, DATA_DIR, KEY_DIR, TMP_DIR};
use k8s_openapi::api::apps::v1::{
    Deployment, DeploymentSpec, DeploymentStrategy, RollingUpdateDeployment,
};
use k8s_openapi::api::core::v1::{
    Capabilities, Container, ContainerPort, EmptyDirVolumeSource, EnvVar, EnvVarSource,
    HTTPGetAction, KeyToPath, PersistentVolumeClaimVolumeSource, PodSecurityContext, PodSpec,
    PodTemplateSpec, Probe, ResourceRequirements, SeccompProfile, Secret, SecretKeySelector,
    SecretVolumeSource, SecurityContext, ServiceAccount, Volume, VolumeMount,
};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::ByteString;
use kube::api::DynamicObject;
use std::collections::BTreeMap;

/// Pod-template annotation holding the keyed digest of `config.yaml` (see [`super::checksum`]).
pub const ANNOTATION_CONFIG_CHECKSUM: &str = "observation-publisher.caraml.dev/config-checksum";
/// Workload-identity annotation on the ServiceAccount.
pub const ANNOTATION_GCP_SA: &str = "iam.gke.io/gcp-service-account";
/// The ServiceAccount annotation naming the RAM role ACK's `ack-pod-identity-webhook` gives the
/// pods (RRSA); the webhook acts only in a namespace labelled
/// [`LABEL_ALIBABA_INJECTION`]`: "on"`.
pub const ANNOTATION_ALIBABA_ROLE: &str = "pod-identity.alibabacloud.com/role-name";
/// The namespace label that turns ACK's pod-identity webhook on (bootstrap does not own
/// namespaces: docs/bootstrap.md says to set it).
pub const LABEL_ALIBABA_INJECTION: &str = "pod-identity.alibabacloud.com/injection";
/// Item of the config Secret.
pub const CONFIG_ITEM: &str = "config.yaml";
/// Pod user and group: a fixed non-root id (the Dockerfile creates it).
pub const RUN_AS: i64 = 65532;
/// What a redacted Secret value is replaced with in `--dry-run` output.
pub const REDACTED: &str = "<redacted>";

/// The objects of one model version.
#[derive(Debug, Clone)]
pub struct Manifests {
    /// The pods' identity.
    pub service_account: ServiceAccount,
    /// `config.yaml`.
    pub secret: Secret,
    /// The publisher.
    pub deployment: Deployment,
    /// KEDA autoscaling, when the spec asks for it.
    pub scaled_object: Option<DynamicObject>,
    /// The scaler's Kafka credentials, when autoscaling needs them.
    pub trigger_authentication: Option<DynamicObject>,
    /// Prometheus Operator scraping, when the spec asks for it.
    pub pod_monitor: Option<DynamicObject>,
    /// One pod down at a time, when more than one may run.
    pub disruption_budget: Option<PodDisruptionBudget>,
}

/// Builds every object of the version; `key` is the config Secret's checksum key
/// ([`ChecksumKey::DryRun`] for `--dry-run`).
pub fn build(spec: &Spec, key: &ChecksumKey) -> Manifests {
    Manifests {
        service_account: service_account(spec),
        secret: config_secret(spec, key),
        deployment: deployment(spec, key),
        scaled_object: scaled_object(spec),
        trigger_authentication: trigger_authentication(spec),
        pod_monitor: pod_monitor(spec),
        disruption_budget: disruption_budget(spec),
    }
}

/// The ServiceAccount (workload-identity annotations when a Google service account or a RAM
/// role is named; no token mounted).
pub fn service_account(spec: &Spec) -> ServiceAccount {
    let id = &spec.identity;
    let extra: Vec<(&str, String)> = (id.gcp_service_account.iter())
        .map(|e| (ANNOTATION_GCP_SA, e.clone()))
        .chain(
            id.alibaba_ram_role
                .iter()
                .map(|r| (ANNOTATION_ALIBABA_ROLE, r.clone())),
        )
        .collect();
    ServiceAccount {
        metadata: meta(spec, &spec.names.workload, &extra),
        automount_service_account_token: Some(false),
        ..ServiceAccount::default()
    }
}

/// The Secret holding `config.yaml` and the key of its checksum annotation.
/// The pods mount only `config.yaml`; the other items are for `apply` (the checksum key) and
/// for KEDA's scaler (`keda-*`, its Kafka credentials, read through the TriggerAuthentication).
pub fn config_secret(spec: &Spec, key: &ChecksumKey) -> Secret {
    let mut data = BTreeMap::from([
        (
            CONFIG_ITEM.to_string(),
            ByteString(spec.config_yaml().into_bytes()),
        ),
        (KEY_ITEM.to_string(), ByteString(key.stored().into_bytes())),
    ]);
    if let Some(auth) = spec
        .autoscaling
        .as_ref()
        .and_then(|a| a.kafka_auth.as_ref())
    {
        for (k, v) in auth.secret_items() {
            data.insert(k, ByteString(v.as_bytes().to_vec()));
        }
    }
    Secret {
        metadata: meta(spec, &spec.names.config_secret, &[]),
        type_: Some("Opaque".into()),
        data: Some(data),
        ..Secret::default()
    }
}

fn quantities(m: &BTreeMap<String, String>) -> Option<BTreeMap<String, Quantity>> {
    (!m.is_empty()).then(|| {
        m.iter()
            .map(|(k, v)| (k.clone(), Quantity(v.clone())))
            .collect()
    })
}

fn probe(path: &str, initial_delay: i32, period: i32) -> Probe {
    Probe {
        http_get: Some(HTTPGetAction {
            path: Some(path.into()),
            port: IntOrString::String(PORT_NAME.into()),
            ..HTTPGetAction::default()
        }),
        initial_delay_seconds: Some(initial_delay),
        period_seconds: Some(period),
        timeout_seconds: Some(2),
        failure_threshold: Some(3),
        ..Probe::default()
    }
}

fn empty_dir(name: &str, size_limit: &str) -> Volume {
    Volume {
        name: name.into(),
        empty_dir: Some(EmptyDirVolumeSource {
            size_limit: Some(Quantity(size_limit.into())),
            ..EmptyDirVolumeSource::default()
        }),
        ..Volume::default()
    }
}

fn mount(name: &str, path: &str, read_only: bool) -> VolumeMount {
    VolumeMount {
        name: name.into(),
        mount_path: path.into(),
        read_only: read_only.then_some(true),
        ..VolumeMount::default()
    }
}

/// The publisher Deployment; `key` keys its `config-checksum` annotation.
pub fn deployment(spec: &Spec, key: &ChecksumKey) -> Deployment {
    let port = spec.metrics_port();
    let mut volumes = vec![
        Volume {
            name: "config".into(),
            secret: Some(SecretVolumeSource {
                secret_name: Some(spec.names.config_secret.clone()),
                // Only config.yaml: the checksum key is for `apply`, not for the pods.
                items: Some(vec![KeyToPath {
                    key: CONFIG_ITEM.into(),
                    path: CONFIG_ITEM.into(),
                    ..KeyToPath::default()
                }]),
                default_mode: Some(0o440),
                ..SecretVolumeSource::default()
            }),
            ..Volume::default()
        },
        empty_dir("data", &spec.storage.size_limit),
        empty_dir("tmp", &spec.storage.size_limit),
    ];
    let mut mounts = vec![
        mount("config", CONFIG_DIR, true),
        mount("data", DATA_DIR, false),
        mount("tmp", TMP_DIR, false),
    ];
    if let Some(p) = &spec.storage.persistent {
        volumes.push(Volume {
            name: "persistent".into(),
            persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                claim_name: p.claim.clone(),
                ..PersistentVolumeClaimVolumeSource::default()
            }),
            ..Volume::default()
        });
        mounts.push(mount("persistent", &p.mount_path.to_string_lossy(), false));
    }
    let mut env = Vec::new();
    if let Some(key) = &spec.identity.key_secret {
        volumes.push(Volume {
            name: "gcp-key".into(),
            secret: Some(SecretVolumeSource {
                secret_name: Some(key.name.clone()),
                default_mode: Some(0o440),
                ..SecretVolumeSource::default()
            }),
            ..Volume::default()
        });
        mounts.push(mount("gcp-key", KEY_DIR, true));
        env.push(EnvVar {
            name: "GOOGLE_APPLICATION_CREDENTIALS".into(),
            value: Some(format!("{KEY_DIR}/{}", key.key)),
            ..EnvVar::default()
        });
    }
    // Credentials read from existing Secrets: the configuration's environment layering puts
    // each back at its place in config.yaml.
    env.extend(spec.secret_envs.iter().map(|e| EnvVar {
        name: e.env.clone(),
        value_from: Some(EnvVarSource {
            secret_key_ref: Some(SecretKeySelector {
                name: e.secret.name.clone(),
                key: e.secret.key.clone(),
                optional: None,
            }),
            ..EnvVarSource::default()
        }),
        ..EnvVar::default()
    }));
    let container = Container {
        name: "publisher".into(),
        image: Some(spec.image.clone()),
        image_pull_policy: Some(spec.image_pull_policy.clone()),
        command: Some(vec!["observation-publisher".into()]),
        args: Some(vec![
            "run".into(),
            "--config".into(),
            format!("{CONFIG_DIR}/{CONFIG_ITEM}"),
        ]),
        working_dir: Some(DATA_DIR.into()),
        env: (!env.is_empty()).then_some(env),
        ports: Some(vec![ContainerPort {
            name: Some(PORT_NAME.into()),
            container_port: i32::from(port),
            protocol: Some("TCP".into()),
            ..ContainerPort::default()
        }]),
        liveness_probe: Some(probe("/healthz", 10, 10)),
        readiness_probe: Some(probe("/readyz", 5, 5)),
        resources: Some(ResourceRequirements {
            requests: quantities(&spec.resources.requests),
            limits: quantities(&spec.resources.limits),
            ..ResourceRequirements::default()
        }),
        security_context: Some(SecurityContext {
            allow_privilege_escalation: Some(false),
            read_only_root_filesystem: Some(true),
            run_as_non_root: Some(true),
            capabilities: Some(Capabilities {
                drop: Some(vec!["ALL".into()]),
                ..Capabilities::default()
            }),
            ..SecurityContext::default()
        }),
        volume_mounts: Some(mounts),
        ..Container::default()
    };
    let template_annotations = BTreeMap::from([
        ("prometheus.io/scrape".to_string(), "true".to_string()),
        ("prometheus.io/port".to_string(), port.to_string()),
        ("prometheus.io/path".to_string(), "/metrics".to_string()),
        (ANNOTATION_REVISION.to_string(), spec.revision.to_string()),
        (
            ANNOTATION_CONFIG_CHECKSUM.to_string(),
            key.annotation(&spec.config_yaml()),
        ),
    ]);
    Deployment {
        metadata: meta(spec, &spec.names.workload, &[]),
        spec: Some(DeploymentSpec {
            // With autoscaling, KEDA owns the replica count; applying one would fight it.
            replicas: spec.autoscaling.is_none().then_some(spec.replicas),
            revision_history_limit: Some(3),
            selector: LabelSelector {
                match_labels: Some(selector_labels(spec)),
                ..LabelSelector::default()
            },
            strategy: Some(DeploymentStrategy {
                type_: Some("RollingUpdate".into()),
                rolling_update: Some(RollingUpdateDeployment {
                    max_surge: Some(IntOrString::Int(1)),
                    max_unavailable: Some(IntOrString::Int(0)),
                }),
            }),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels(spec)),
                    annotations: Some(template_annotations),
                    ..ObjectMeta::default()
                }),
                spec: Some(PodSpec {
                    service_account_name: Some(spec.names.workload.clone()),
                    automount_service_account_token: Some(false),
                    termination_grace_period_seconds: Some(spec.termination_grace_seconds()),
                    security_context: Some(PodSecurityContext {
                        run_as_non_root: Some(true),
                        run_as_user: Some(RUN_AS),
                        run_as_group: Some(RUN_AS),
                        fs_group: Some(RUN_AS),
                        seccomp_profile: Some(SeccompProfile {
                            type_: "RuntimeDefault".into(),
                            ..SeccompProfile::default()
                        }),
                        ..PodSecurityContext::default()
                    }),
                    containers: vec![container],
                    volumes: Some(volumes),
                    ..PodSpec::default()
                }),
            },
            ..DeploymentSpec::default()
        }),
        status: None,
    }
}

/// The manifests as YAML documents separated by `---`, in the order ServiceAccount, Secret,
/// Deployment, then the optional ones (PodDisruptionBudget, TriggerAuthentication,
/// ScaledObject, PodMonitor). The Secret is shown with `stringData` so it can be read;
/// its values are replaced by [`REDACTED`] unless `show_secrets`.
pub fn render_yaml(m: &Manifests, show_secrets: bool) -> Result<String, serde_yaml_ng::Error> {
    let mut secret = serde_yaml_ng::to_value(&m.secret)?;
    if let serde_yaml_ng::Value::Mapping(map) = &mut secret {
        let data = map.remove("data");
        let mut string_data = serde_yaml_ng::Mapping::new();
        if let Some(d) = &m.secret.data {
            for (k, v) in d {
                let text = if show_secrets {
                    String::from_utf8_lossy(&v.0).into_owned()
                } else {
                    REDACTED.to_string()
                };
                string_data.insert(k.clone().into(), text.into());
            }
        }
        drop(data);
        map.insert(
            "stringData".into(),
            serde_yaml_ng::Value::Mapping(string_data),
        );
    }
    let mut docs = vec![
        serde_yaml_ng::to_string(&m.service_account)?,
        serde_yaml_ng::to_string(&secret)?,
        serde_yaml_ng::to_string(&m.deployment)?,
    ];
    if let Some(pdb) = &m.disruption_budget {
        docs.push(serde_yaml_ng::to_string(pdb)?);
    }
    for o in [&m.trigger_authentication, &m.scaled_object, &m.pod_monitor]
        .into_iter()
        .flatten()
    {
        docs.push(serde_yaml_ng::to_string(o)?);
    }
    Ok(docs.join("---\n"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bootstrap::spec::tests::MINIMAL;

    fn spec(extra: &str) -> Spec {
        let text = MINIMAL.replace("namespace: mlobs", &format!("namespace: mlobs\n{extra}"));
        Spec::parse(&text).unwrap_or_else(|p| panic!("{p}")).0
    }

    fn pod(d: &Deployment) -> &PodSpec {
        d.spec.as_ref().unwrap().template.spec.as_ref().unwrap()
    }

    #[test]
    fn key_secret_is_mounted_only_when_named() {
        let without = deployment(&spec(""), &ChecksumKey::DryRun);
        let p = pod(&without);
        assert!(p
            .volumes
            .as_ref()
            .unwrap()
            .iter()
            .all(|v| v.name != "gcp-key"));
        assert!(p.containers[0].env.is_none());

        let with = deployment(
            &spec("identity: {key_secret: gcp-key}"),
            &ChecksumKey::DryRun,
        );
        let p = pod(&with);
        let v = p
            .volumes
            .as_ref()
            .unwrap()
            .iter()
            .find(|v| v.name == "gcp-key")
            .unwrap();
        assert_eq!(
            v.secret.as_ref().unwrap().secret_name.as_deref(),
            Some("gcp-key")
        );
        let env = p.containers[0].env.as_ref().unwrap();
        assert_eq!(env[0].name, "GOOGLE_APPLICATION_CREDENTIALS");
        assert_eq!(
            env[0].value.as_deref(),
            Some("/var/run/secrets/gcp/service-account.json")
        );
    }

    #[test]
    fn the_service_account_asks_for_what_identity_names() {
        let annotations = |extra: &str| {
            service_account(&spec(extra))
                .metadata
                .annotations
                .unwrap_or_default()
        };
        let none = annotations("");
        assert!(
            !none.contains_key(ANNOTATION_GCP_SA) && !none.contains_key(ANNOTATION_ALIBABA_ROLE)
        );
        let both = annotations(
            "identity: {gcp_service_account: p@g.iam.gserviceaccount.com, alibaba_ram_role: mlobs-publisher}",
        );
        assert_eq!(both[ANNOTATION_GCP_SA], "p@g.iam.gserviceaccount.com");
        assert_eq!(both[ANNOTATION_ALIBABA_ROLE], "mlobs-publisher");
        // Direct Workload Identity: the ServiceAccount itself holds the roles, nothing to annotate.
        let direct = annotations("identity: {gcp_workload_identity: direct}");
        assert!(!direct.contains_key(ANNOTATION_GCP_SA));
    }

    #[test]
    fn deployment_is_hardened_and_probed() {
        let s = spec("");
        let d = deployment(&s, &ChecksumKey::DryRun);
        let p = pod(&d);
        assert_eq!(
            p.service_account_name.as_deref(),
            Some(s.names.workload.as_str())
        );
        assert!(s.names.workload.starts_with("sample-credit-model-3-"));
        assert_eq!(p.automount_service_account_token, Some(false));
        assert!(p.termination_grace_period_seconds.unwrap() > 30);
        let c = &p.containers[0];
        let sc = c.security_context.as_ref().unwrap();
        assert_eq!(sc.read_only_root_filesystem, Some(true));
        assert_eq!(
            sc.capabilities.as_ref().unwrap().drop.as_deref(),
            Some(&["ALL".to_string()][..])
        );
        assert_eq!(
            p.security_context
                .as_ref()
                .unwrap()
                .seccomp_profile
                .as_ref()
                .unwrap()
                .type_,
            "RuntimeDefault"
        );
        assert_eq!(
            c.ports.as_ref().unwrap()[0].name.as_deref(),
            Some(PORT_NAME)
        );
        assert_eq!(c.ports.as_ref().unwrap()[0].container_port, 8000);
        let live = c
            .liveness_probe
            .as_ref()
            .unwrap()
            .http_get
            .as_ref()
            .unwrap();
        assert_eq!(live.path.as_deref(), Some("/healthz"));
        let ready = c
            .readiness_probe
            .as_ref()
            .unwrap()
            .http_get
            .as_ref()
            .unwrap();
        assert_eq!(ready.path.as_deref(), Some("/readyz"));
        let sel = d
            .spec
            .as_ref()
            .unwrap()
            .selector
            .match_labels
            .as_ref()
            .unwrap();
        assert_eq!(sel.get(LABEL_PROJECT).map(String::as_str), Some("sample"));
        assert_eq!(sel.get(LABEL_VERSION).map(String::as_str), Some("3"));
    }

    #[test]
    fn empty_dirs_have_a_size_limit_and_a_named_claim_is_mounted() {
        let p = deployment(&spec(""), &ChecksumKey::DryRun);
        let vols = pod(&p).volumes.clone().unwrap();
        let limits: Vec<_> = vols
            .iter()
            .filter_map(|v| v.empty_dir.as_ref())
            .map(|e| e.size_limit.as_ref().map(|q| q.0.as_str()))
            .collect();
        assert_eq!(limits, [Some("1Gi"), Some("1Gi")]);
        assert!(vols.iter().all(|v| v.persistent_volume_claim.is_none()));

        let d = deployment(
            &spec("storage: {size_limit: 300Mi, persistent: {claim: pub-data, mount_path: /data}}"),
            &ChecksumKey::DryRun,
        );
        let p = pod(&d);
        let vols = p.volumes.as_ref().unwrap();
        assert!(vols
            .iter()
            .filter_map(|v| v.empty_dir.as_ref())
            .all(|e| e.size_limit == Some(Quantity("300Mi".into()))));
        let pv = vols.iter().find(|v| v.name == "persistent").unwrap();
        assert_eq!(
            pv.persistent_volume_claim.as_ref().unwrap().claim_name,
            "pub-data"
        );
        let m = p.containers[0].volume_mounts.as_ref().unwrap();
        assert!(m
            .iter()
            .any(|m| m.name == "persistent" && m.mount_path == "/data"));
    }

    fn checksum(d: &Deployment) -> String {
        d.spec
            .as_ref()
            .unwrap()
            .template
            .metadata
            .as_ref()
            .unwrap()
            .annotations
            .as_ref()
            .unwrap()[ANNOTATION_CONFIG_CHECKSUM]
            .clone()
    }

    #[test]
    fn config_change_changes_the_checksum_and_only_a_config_change() {
        let key = ChecksumKey::generate().unwrap();
        let a = deployment(&spec(""), &key);
        let text = MINIMAL.replace("ttl_days: 14", "ttl_days: 15");
        let b = deployment(&Spec::parse(&text).unwrap().0, &key);
        assert_ne!(checksum(&a), checksum(&b));
        assert_eq!(checksum(&a), checksum(&deployment(&spec(""), &key)));
    }

    #[test]
    fn the_secret_carries_the_key_and_the_pods_mount_only_config_yaml() {
        let key = ChecksumKey::generate().unwrap();
        let m = build(&spec(""), &key);
        let data = m.secret.data.as_ref().unwrap();
        assert_eq!(data[KEY_ITEM].0, key.stored().into_bytes());
        let vols = pod(&m.deployment).volumes.as_ref().unwrap();
        let config = vols.iter().find(|v| v.name == "config").unwrap();
        let items = config.secret.as_ref().unwrap().items.as_ref().unwrap();
        assert_eq!(items.len(), 1);
        assert_eq!(items[0].key, CONFIG_ITEM);
    }

    #[test]
    fn dry_run_prints_no_digest() {
        let m = build(&spec(""), &ChecksumKey::DryRun);
        assert_eq!(
            checksum(&m.deployment),
            crate::bootstrap::checksum::DRY_RUN_ANNOTATION
        );
    }

    #[test]
    fn autoscaling_emits_a_scaled_object_and_leaves_replicas_alone() {
        let s = spec("autoscaling: {min_replicas: 1, max_replicas: 4, lag_threshold: 500}");
        let m = build(&s, &ChecksumKey::DryRun);
        assert_eq!(m.deployment.spec.as_ref().unwrap().replicas, None);
        let so = m.scaled_object.unwrap();
        assert_eq!(so.data["spec"]["maxReplicaCount"], 4);
        assert_eq!(
            so.data["spec"]["triggers"][0]["metadata"]["consumerGroup"],
            s.group_id()
        );
        assert!(build(&spec(""), &ChecksumKey::DryRun)
            .scaled_object
            .is_none());
    }

    #[test]
    fn secrets_are_redacted_unless_asked() {
        let m = build(&spec(""), &ChecksumKey::DryRun);
        let hidden = render_yaml(&m, false).unwrap();
        assert!(hidden.contains("config.yaml: <redacted>"), "{hidden}");
        assert!(!hidden.contains("bootstrap_servers"), "{hidden}");
        let shown = render_yaml(&m, true).unwrap();
        assert!(shown.contains("bootstrap_servers"), "{shown}");
        assert_eq!(hidden.matches("---\n").count(), 2);
    }
}
