//! The publisher spec: one YAML document per model version, read and validated in one pass.
//!
//! ```yaml
//! project: sample
//! model: credit-model
//! version: "3"
//! revision: 1
//! namespace: mlobs
//! image: registry.example/observation-publisher:0.1.0
//! replicas: 1
//! resources: {requests: {cpu: "1", memory: 512Mi}, limits: {memory: 1Gi}}
//! labels: {team: risk}
//! identity:
//!   gcp_service_account: publisher@gcp-project.iam.gserviceaccount.com
//!   key_secret: publisher-key            # or {name: publisher-key, key: service-account.json}
//! autoscaling: {min_replicas: 1, max_replicas: 4, lag_threshold: 1000}   # optional (KEDA)
//! config:                                # the run config, Merlin's shape
//!   inference_schema: {...}
//!   observation_sinks: [...]
//!   observation_source: {type: KAFKA, config: {bootstrap_servers: "kafka:9092"}}
//! ```
//!
//! `config` is completed before it is validated: `project`, `model_id` and `model_version` come
//! from the spec; the source type defaults to `KAFKA`, the topic to Merlin's
//! `caraml-<project>-<model>-<version>-prediction-log` and the consumer group to one per version.
//! The completed mapping must pass [`Config::from_value`] with [`Needs::RUN`]; it is what the
//! Secret carries as `config.yaml`. Every problem, in the spec and in the config, is reported at
//! once.

use super::names::{is_dns_label, is_dns_subdomain, is_label_key, is_label_value, Names};
use super::storage::Storage;
use crate::config::{Config, Needs, Problems};
use serde_yaml_ng::{Mapping, Value};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::path::Path;

/// Directory the publisher's working directory points at; an `emptyDir` is mounted there.
pub const DATA_DIR: &str = "/var/lib/observation-publisher";
/// Scratch directory; an `emptyDir` is mounted there.
pub const TMP_DIR: &str = "/tmp";
/// Default item of the key Secret holding the GCP service-account key (Merlin's name).
pub const DEFAULT_KEY_ITEM: &str = "service-account.json";
/// Label and annotation prefixes reserved for the objects bootstrap writes.
pub const RESERVED_LABEL_PREFIXES: &[&str] =
    &["app.kubernetes.io/", "observation-publisher.caraml.dev/"];

/// A validated publisher spec, with the completed run config.
#[derive(Debug, Clone)]
pub struct Spec {
    /// Merlin project.
    pub project: String,
    /// Merlin model name.
    pub model: String,
    /// Merlin model version (its id, as text).
    pub version: String,
    /// Revision of this spec; newer revisions win.
    pub revision: u64,
    /// Target namespace.
    pub namespace: String,
    /// Container image.
    pub image: String,
    /// `imagePullPolicy` (default `IfNotPresent`, as Merlin's).
    pub image_pull_policy: String,
    /// Replicas (≥ 1). With autoscaling, the Deployment leaves replicas to KEDA.
    pub replicas: i32,
    /// Resource requests and limits (`cpu`, `memory`, …) as Kubernetes quantities.
    pub resources: Resources,
    /// Extra labels put on every object and on the pods (not in the selector).
    pub labels: BTreeMap<String, String>,
    /// Who the publisher runs as.
    pub identity: Identity,
    /// KEDA autoscaling on consumer lag, when asked for.
    pub autoscaling: Option<Autoscaling>,
    /// emptyDir size limit and the optional persistent volume for local files.
    pub storage: Storage,
    /// The run config as written into the Secret (completed with defaults).
    pub run_config: Value,
    /// The run config, validated.
    pub config: Config,
    /// Object names of this version.
    pub names: Names,
}

/// Container resources.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Resources {
    /// Requests, by resource name.
    pub requests: BTreeMap<String, String>,
    /// Limits, by resource name.
    pub limits: BTreeMap<String, String>,
}

/// The identity of the publisher's pods.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Identity {
    /// GCP service-account email for workload identity (`iam.gke.io/gcp-service-account`).
    pub gcp_service_account: Option<String>,
    /// An existing Secret holding a GCP JSON key, mounted only when named.
    pub key_secret: Option<KeySecret>,
}

/// An existing Secret holding a GCP service-account key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeySecret {
    /// Secret name (in the target namespace).
    pub name: String,
    /// Item holding the JSON key (default `service-account.json`).
    pub key: String,
}

/// KEDA `ScaledObject` settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Autoscaling {
    /// Minimum replicas (≥ 1: a drained version is deleted, not scaled to zero).
    pub min_replicas: i32,
    /// Maximum replicas (≥ min).
    pub max_replicas: i32,
    /// Consumer lag per replica that triggers scaling out.
    pub lag_threshold: u64,
}

/// Spec-level keys.
const SPEC_KEYS: &[&str] = &[
    "project",
    "model",
    "version",
    "revision",
    "namespace",
    "image",
    "image_pull_policy",
    "replicas",
    "resources",
    "labels",
    "identity",
    "autoscaling",
    "storage",
    "config",
];

impl Spec {
    /// Reads a spec file. Every problem is returned at once.
    pub fn load(path: &Path) -> Result<(Spec, Vec<String>), Problems> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            let mut p = Problems::default();
            p.push("", format_args!("cannot read {}: {e}", path.display()));
            p
        })?;
        Spec::parse(&text)
    }

    /// Parses and validates a spec. Returns the spec and warnings, or every problem found.
    pub fn parse(text: &str) -> Result<(Spec, Vec<String>), Problems> {
        let mut problems = Problems::default();
        let mut warnings = Vec::new();
        let root: Value = match serde_yaml_ng::from_str(text) {
            Ok(v) => v,
            Err(e) => {
                problems.push("", format_args!("the spec is not valid YAML: {e}"));
                return Err(problems);
            }
        };
        let Value::Mapping(root) = root else {
            problems.push("", "the spec must be a YAML mapping");
            return Err(problems);
        };
        for k in root.keys() {
            match k.as_str() {
                Some(k) if SPEC_KEYS.contains(&k) => {}
                _ => problems.push(
                    &key_text(k),
                    format_args!("unknown key; expected one of {}", SPEC_KEYS.join(", ")),
                ),
            }
        }
        let mut r = Reader {
            problems: &mut problems,
        };
        let project = r.req_scalar(&root, "project", "project");
        let model = r.req_scalar(&root, "model", "model");
        let version = r.req_scalar(&root, "version", "version");
        let revision = r
            .int(&root, "revision", "revision", 1, u64::MAX)
            .unwrap_or(0);
        if root.get("revision").is_none() {
            r.problems
                .push("revision", "required (an integer ≥ 1; newer revisions win)");
        }
        let namespace = r.req_scalar(&root, "namespace", "namespace");
        if !namespace.is_empty() && !is_dns_label(&namespace) {
            r.problems.push(
                "namespace",
                format_args!("{namespace:?} is not a valid namespace name"),
            );
        }
        let image = r.req_scalar(&root, "image", "image");
        if image.chars().any(char::is_whitespace) {
            r.problems.push("image", "must not contain whitespace");
        }
        let image_pull_policy = r
            .scalar(&root, "image_pull_policy", "image_pull_policy")
            .unwrap_or_else(|| "IfNotPresent".into());
        if !["Always", "IfNotPresent", "Never"].contains(&image_pull_policy.as_str()) {
            r.problems.push(
                "image_pull_policy",
                "expected Always, IfNotPresent or Never",
            );
        }
        let replicas = r.int(&root, "replicas", "replicas", 1, 1000).unwrap_or(1) as i32;
        let resources = r.resources(root.get("resources"));
        let labels = r.labels(root.get("labels"));
        let identity = r.identity(root.get("identity"));
        if identity.gcp_service_account.is_none() && identity.key_secret.is_none() {
            warnings.push(
                "identity: neither gcp_service_account nor key_secret is set; the publisher will use the node's default credentials".into(),
            );
        }
        let autoscaling = r.autoscaling(root.get("autoscaling"), replicas);
        let storage = Storage::read(root.get("storage"), r.problems);

        let names = Names::new(&project, &model, &version);
        let run_config = complete_config(
            root.get("config"),
            &project,
            &model,
            &version,
            &mut problems,
            &mut warnings,
        );

        // Validate the completed run config exactly as `run` will.
        let config = match &run_config {
            Some(rc) if !project.is_empty() && !model.is_empty() && !version.is_empty() => {
                match Config::from_value(rc, Needs::RUN) {
                    Ok((c, w)) => {
                        warnings.extend(w.into_iter().map(|w| format!("config: {w}")));
                        check_runtime_fit(&c, &mut problems);
                        storage.check_paths(&c, replicas, &mut problems, &mut warnings);
                        Some(c)
                    }
                    Err(p) => {
                        for msg in p.0 {
                            problems.0.push(format!("config.{msg}"));
                        }
                        None
                    }
                }
            }
            _ => None,
        };
        match (config, run_config) {
            (Some(config), Some(run_config)) if problems.is_empty() => Ok((
                Spec {
                    project,
                    model,
                    version,
                    revision,
                    namespace,
                    image,
                    image_pull_policy,
                    replicas,
                    resources,
                    labels,
                    identity,
                    autoscaling,
                    storage,
                    run_config,
                    config,
                    names,
                },
                warnings,
            )),
            _ => Err(problems),
        }
    }

    /// The Kafka topic this version reads.
    pub fn topic(&self) -> &str {
        self.config
            .observation_source
            .as_ref()
            .map_or("", |s| s.topic.as_str())
    }

    /// Uses `group` as the consumer group (in the validated config and in `config.yaml`).
    pub fn set_group_id(&mut self, group: &str) {
        if let Some(src) = self.config.observation_source.as_mut() {
            src.group_id = group.to_string();
        }
        if let Some(Value::Mapping(sc)) = self
            .run_config
            .get_mut("observation_source")
            .and_then(|s| s.get_mut("config"))
        {
            sc.insert("group_id".into(), Value::String(group.to_string()));
        }
    }

    /// The consumer group of this version.
    pub fn group_id(&self) -> &str {
        self.config
            .observation_source
            .as_ref()
            .map_or("", |s| s.group_id.as_str())
    }

    /// `config.yaml` as written into the Secret.
    pub fn config_yaml(&self) -> String {
        // A mapping of strings, numbers and nested mappings always serializes.
        serde_yaml_ng::to_string(&self.run_config).unwrap_or_default()
    }

    /// SHA-256 (hex) of `config.yaml`; a change rolls the pods.
    pub fn config_checksum(&self) -> String {
        let d = Sha256::digest(self.config_yaml().as_bytes());
        d.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// The port the publisher serves `/metrics`, `/healthz` and `/readyz` on.
    pub fn metrics_port(&self) -> u16 {
        self.config
            .server
            .listen
            .parse::<std::net::SocketAddr>()
            .map_or(8000, |a| a.port())
    }

    /// `terminationGracePeriodSeconds`: the drain deadline plus 15 s for the final commit and
    /// stream close.
    pub fn termination_grace_seconds(&self) -> i64 {
        let drain = self.config.consumer.drain_timeout;
        let secs = drain.as_secs() + u64::from(drain.subsec_nanos() > 0);
        i64::try_from(secs).unwrap_or(i64::MAX - 15) + 15
    }
}

/// Merlin's topic name for a model version.
pub fn default_topic(project: &str, model: &str, version: &str) -> String {
    format!("caraml-{project}-{model}-{version}-prediction-log")
}

/// The consumer group of one model version (Merlin shares one group between all publishers):
/// `observation-publisher-<project>-<model>-<version>-<identity hash>`, injective like the object
/// names (see [`super::names`]).
pub fn default_group(project: &str, model: &str, version: &str) -> String {
    let hash = super::names::identity_hash(project, model, version);
    format!("observation-publisher-{project}-{model}-{version}-{hash}")
}

/// The default consumer group of the previous naming scheme (kept when an upgrade adopts a
/// running version, so its topic is not consumed again).
pub fn legacy_default_group(project: &str, model: &str, version: &str) -> String {
    format!("observation-publisher-{project}-{model}-{version}")
}

fn key_text(k: &Value) -> String {
    match k {
        Value::String(s) => s.clone(),
        other => serde_yaml_ng::to_string(other)
            .unwrap_or_default()
            .trim()
            .to_string(),
    }
}

/// Fills in the run config's identity, source type, topic and group.
fn complete_config(
    raw: Option<&Value>,
    project: &str,
    model: &str,
    version: &str,
    problems: &mut Problems,
    warnings: &mut Vec<String>,
) -> Option<Value> {
    let mut cfg = match raw {
        None => {
            problems.push(
                "config",
                "required: the publisher's run config (Merlin's shape)",
            );
            return None;
        }
        Some(Value::Mapping(m)) => m.clone(),
        Some(_) => {
            problems.push("config", "must be a mapping");
            return None;
        }
    };
    for (key, want) in [
        ("project", project),
        ("model_id", model),
        ("model_version", version),
    ] {
        match cfg.get(key) {
            None => {
                cfg.insert(key.into(), Value::String(want.into()));
            }
            Some(v) => {
                let got = scalar_text(v);
                if got.as_deref() != Some(want) {
                    problems.push(
                        &format!("config.{key}"),
                        format_args!("must equal the spec's value {want:?} (or be left out)"),
                    );
                }
            }
        }
    }
    let source = cfg
        .entry("observation_source".into())
        .or_insert_with(|| Value::Mapping(Mapping::new()));
    let Value::Mapping(source) = source else {
        problems.push("config.observation_source", "must be a mapping");
        return Some(Value::Mapping(cfg));
    };
    source
        .entry("type".into())
        .or_insert_with(|| Value::String("KAFKA".into()));
    let sc = source
        .entry("config".into())
        .or_insert_with(|| Value::Mapping(Mapping::new()));
    let Value::Mapping(sc) = sc else {
        problems.push("config.observation_source.config", "must be a mapping");
        return Some(Value::Mapping(cfg));
    };
    sc.entry("topic".into())
        .or_insert_with(|| Value::String(default_topic(project, model, version)));
    let group = default_group(project, model, version);
    match sc.get("group_id").and_then(scalar_text) {
        None => {
            sc.insert("group_id".into(), Value::String(group));
        }
        Some(g) if g != group => warnings.push(format!(
            "config.observation_source.config.group_id is {g:?}; make sure no other model version uses it (the default is {group:?})"
        )),
        Some(_) => {}
    }
    Some(Value::Mapping(cfg))
}

/// Problems that only show in a pod: a listener the probes cannot reach. (Local files:
/// [`Storage::check_paths`].)
fn check_runtime_fit(c: &Config, problems: &mut Problems) {
    if let Ok(addr) = c.server.listen.parse::<std::net::SocketAddr>() {
        if !addr.ip().is_unspecified() {
            problems.push(
                "config.server.listen",
                format_args!(
                    "{} is not reachable by the kubelet's probes or Prometheus; listen on 0.0.0.0",
                    c.server.listen
                ),
            );
        }
        if addr.port() == 0 {
            problems.push(
                "config.server.listen",
                "port 0 cannot be probed; use a fixed port such as 8000",
            );
        }
    }
}

fn scalar_text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// Reads typed values out of mappings, recording problems with their paths.
struct Reader<'p> {
    problems: &'p mut Problems,
}

impl Reader<'_> {
    fn scalar(&mut self, m: &Mapping, key: &str, path: &str) -> Option<String> {
        match m.get(key) {
            None | Some(Value::Null) => None,
            Some(v) => match scalar_text(v) {
                Some(s) => Some(s),
                None => {
                    self.problems.push(path, "must be a string");
                    None
                }
            },
        }
    }

    fn req_scalar(&mut self, m: &Mapping, key: &str, path: &str) -> String {
        match self.scalar(m, key, path) {
            Some(s) if !s.trim().is_empty() => s,
            Some(_) => {
                self.problems.push(path, "must not be empty");
                String::new()
            }
            None => {
                if m.get(key).is_none_or(Value::is_null) {
                    self.problems.push(path, "required");
                }
                String::new()
            }
        }
    }

    fn int(&mut self, m: &Mapping, key: &str, path: &str, min: u64, max: u64) -> Option<u64> {
        let v = m.get(key)?;
        match v.as_u64() {
            Some(n) if (min..=max).contains(&n) => Some(n),
            _ => {
                self.problems
                    .push(path, format_args!("must be an integer from {min} to {max}"));
                None
            }
        }
    }

    fn mapping<'v>(
        &mut self,
        v: Option<&'v Value>,
        path: &str,
        allowed: &[&str],
    ) -> Option<&'v Mapping> {
        match v {
            None | Some(Value::Null) => None,
            Some(Value::Mapping(m)) => {
                for k in m.keys() {
                    if !k.as_str().is_some_and(|k| allowed.contains(&k)) {
                        self.problems.push(
                            &format!("{path}.{}", key_text(k)),
                            format_args!("unknown key; expected one of {}", allowed.join(", ")),
                        );
                    }
                }
                Some(m)
            }
            Some(_) => {
                self.problems.push(path, "must be a mapping");
                None
            }
        }
    }

    fn quantities(&mut self, v: Option<&Value>, path: &str) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        let Some(m) = self.mapping(v, path, &["cpu", "memory", "ephemeral-storage"]) else {
            return out;
        };
        for (k, v) in m {
            let key = key_text(k);
            match scalar_text(v) {
                Some(q) if is_quantity(&q) => {
                    out.insert(key, q);
                }
                _ => self.problems.push(
                    &format!("{path}.{key}"),
                    "must be a Kubernetes quantity such as 500m, 1, 512Mi or 1Gi",
                ),
            }
        }
        out
    }

    fn resources(&mut self, v: Option<&Value>) -> Resources {
        let Some(m) = self.mapping(v, "resources", &["requests", "limits"]) else {
            return Resources {
                requests: [
                    ("cpu".to_string(), "1".to_string()),
                    ("memory".to_string(), "512Mi".to_string()),
                ]
                .into(),
                limits: [("memory".to_string(), "1Gi".to_string())].into(),
            };
        };
        Resources {
            requests: self.quantities(m.get("requests"), "resources.requests"),
            limits: self.quantities(m.get("limits"), "resources.limits"),
        }
    }

    fn labels(&mut self, v: Option<&Value>) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        let m = match v {
            None | Some(Value::Null) => return out,
            Some(Value::Mapping(m)) => m,
            Some(_) => {
                self.problems
                    .push("labels", "must be a mapping of label keys to values");
                return out;
            }
        };
        for (k, v) in m {
            let key = key_text(k);
            let path = format!("labels.{key}");
            if !is_label_key(&key) {
                self.problems.push(&path, "not a valid label key");
            } else if RESERVED_LABEL_PREFIXES.iter().any(|p| key.starts_with(p)) {
                self.problems.push(
                    &path,
                    "reserved: bootstrap sets the labels under this prefix itself",
                );
            }
            match scalar_text(v) {
                Some(val) if is_label_value(&val) => {
                    out.insert(key, val);
                }
                _ => self.problems.push(&path, "not a valid label value (at most 63 of A-Z a-z 0-9 . _ -, alphanumeric at both ends)"),
            }
        }
        out
    }

    fn identity(&mut self, v: Option<&Value>) -> Identity {
        let Some(m) = self.mapping(v, "identity", &["gcp_service_account", "key_secret"]) else {
            return Identity::default();
        };
        let gcp_service_account =
            self.scalar(m, "gcp_service_account", "identity.gcp_service_account");
        if let Some(e) = &gcp_service_account {
            let ok = e
                .split_once('@')
                .is_some_and(|(a, d)| !a.is_empty() && d.contains('.'))
                && !e.contains(char::is_whitespace);
            if !ok {
                self.problems.push(
                    "identity.gcp_service_account",
                    format_args!("{e:?} is not a service-account email"),
                );
            }
        }
        let key_secret = match m.get("key_secret") {
            None | Some(Value::Null) => None,
            Some(Value::Mapping(_)) => {
                let km = self.mapping(m.get("key_secret"), "identity.key_secret", &["name", "key"]);
                km.map(|km| {
                    let name = self.req_scalar(km, "name", "identity.key_secret.name");
                    let key = self
                        .scalar(km, "key", "identity.key_secret.key")
                        .unwrap_or_else(|| DEFAULT_KEY_ITEM.into());
                    KeySecret { name, key }
                })
            }
            Some(v) => match scalar_text(v) {
                Some(name) => Some(KeySecret {
                    name,
                    key: DEFAULT_KEY_ITEM.into(),
                }),
                None => {
                    self.problems.push(
                        "identity.key_secret",
                        "must be a Secret name or {name, key}",
                    );
                    None
                }
            },
        };
        if let Some(k) = &key_secret {
            if !is_dns_subdomain(&k.name) {
                self.problems.push(
                    "identity.key_secret.name",
                    format_args!("{:?} is not a valid Secret name", k.name),
                );
            }
            let ok = !k.key.is_empty()
                && k.key
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
            if !ok {
                self.problems.push(
                    "identity.key_secret.key",
                    format_args!("{:?} is not a valid Secret item name", k.key),
                );
            }
        }
        Identity {
            gcp_service_account,
            key_secret,
        }
    }

    fn autoscaling(&mut self, v: Option<&Value>, replicas: i32) -> Option<Autoscaling> {
        let m = self.mapping(
            v,
            "autoscaling",
            &["min_replicas", "max_replicas", "lag_threshold"],
        )?;
        let min = self
            .int(m, "min_replicas", "autoscaling.min_replicas", 1, 1000)
            .map_or(replicas, |n| n as i32);
        let max = match self.int(m, "max_replicas", "autoscaling.max_replicas", 1, 1000) {
            Some(n) => n as i32,
            None => {
                if m.get("max_replicas").is_none() {
                    self.problems.push("autoscaling.max_replicas", "required");
                }
                min
            }
        };
        if max < min {
            self.problems.push(
                "autoscaling.max_replicas",
                format_args!("must be at least min_replicas ({min})"),
            );
        }
        let lag_threshold = self
            .int(m, "lag_threshold", "autoscaling.lag_threshold", 1, u64::MAX)
            .unwrap_or(1000);
        Some(Autoscaling {
            min_replicas: min,
            max_replicas: max,
            lag_threshold,
        })
    }
}

/// Whether `q` looks like a Kubernetes quantity: a decimal number with an optional SI, binary or
/// exponent suffix.
pub fn is_quantity(q: &str) -> bool {
    let num_end = q
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-'))
        .unwrap_or(q.len());
    let (num, suffix) = q.split_at(num_end);
    let num = num.strip_prefix('+').unwrap_or(num);
    let digits_ok = !num.is_empty()
        && !num.starts_with('-')
        && num.chars().filter(|c| *c == '.').count() <= 1
        && num.chars().any(|c| c.is_ascii_digit())
        && num.chars().all(|c| c.is_ascii_digit() || c == '.');
    let suffix_ok = [
        "", "m", "k", "M", "G", "T", "P", "E", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei",
    ]
    .contains(&suffix)
        || suffix.strip_prefix(['e', 'E']).is_some_and(|e| {
            !e.is_empty()
                && e.trim_start_matches(['+', '-'])
                    .chars()
                    .all(|c| c.is_ascii_digit())
        });
    digits_ok && suffix_ok
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) const MINIMAL: &str = r#"
project: sample
model: credit-model
version: "3"
revision: 2
namespace: mlobs
image: registry.example/observation-publisher:0.1.0
config:
  inference_schema:
    session_id_column: session_id
    row_id_column: row_id
    model_prediction_output:
      output_class: BinaryClassificationOutput
      prediction_score_column: prediction_score
      prediction_label_column: prediction_label
      positive_class_label: fraud
      negative_class_label: non_fraud
    feature_types: {amount: float64}
  observation_sinks:
  - type: BIGQUERY
    config: {project: gcp-project, dataset: mlobs, ttl_days: 14}
  observation_source:
    config: {bootstrap_servers: "kafka:9092"}
"#;

    #[test]
    fn minimal_spec_gets_merlin_defaults() {
        let (s, warnings) = Spec::parse(MINIMAL).unwrap_or_else(|p| panic!("{p}"));
        assert_eq!(s.topic(), "caraml-sample-credit-model-3-prediction-log");
        let hash = crate::bootstrap::names::identity_hash("sample", "credit-model", "3");
        assert_eq!(
            s.group_id(),
            format!("observation-publisher-sample-credit-model-3-{hash}")
        );
        // Colliding identities (Merlin's topic names collide too) get separate groups.
        assert_ne!(
            default_group("fraud-team", "model", "2"),
            default_group("fraud", "team-model", "2")
        );
        assert_eq!(s.replicas, 1);
        assert_eq!(s.revision, 2);
        assert_eq!(s.metrics_port(), 8000);
        assert_eq!(s.termination_grace_seconds(), 45, "30 s drain + 15");
        assert!(
            warnings.iter().any(|w| w.contains("identity")),
            "{warnings:?}"
        );
        let yaml = s.config_yaml();
        assert!(
            yaml.contains("model_version: '3'") || yaml.contains("model_version: \"3\""),
            "{yaml}"
        );
        // The generated config passes the run config's own validation.
        let v: Value = serde_yaml_ng::from_str(&yaml).unwrap();
        Config::from_value(&v, Needs::RUN).unwrap();
    }

    #[test]
    fn all_problems_are_reported_at_once() {
        let bad = MINIMAL
            .replace("revision: 2", "revision: 0")
            .replace("namespace: mlobs", "namespace: Not_Valid\nreplicas: 0\nlabels: {app.kubernetes.io/name: x, ok: \"bad value\"}\nresources: {requests: {cpu: lots}}\nidentity: {gcp_service_account: nobody, key_secret: {name: Bad_Name}}\nsurprise: 1")
            .replace("bootstrap_servers: \"kafka:9092\"", "topic: t");
        let p = Spec::parse(&bad).unwrap_err();
        let text = p.to_string();
        for needle in [
            "revision:",
            "namespace:",
            "replicas:",
            "labels.app.kubernetes.io/name: reserved",
            "labels.ok:",
            "resources.requests.cpu:",
            "identity.gcp_service_account:",
            "identity.key_secret.name:",
            "surprise: unknown key",
            "config.observation_source.config.bootstrap_servers",
        ] {
            assert!(text.contains(needle), "missing {needle:?} in\n{text}");
        }
    }

    #[test]
    fn config_identity_must_match_the_spec() {
        let bad = MINIMAL.replace(
            "  inference_schema:",
            "  model_version: \"4\"\n  inference_schema:",
        );
        let text = Spec::parse(&bad).unwrap_err().to_string();
        assert!(text.contains("config.model_version: must equal"), "{text}");
    }

    #[test]
    fn local_files_must_be_on_a_persistent_volume() {
        let bad = MINIMAL.replace(
            "  observation_source:",
            "  dead_letter: {target: file, path: dlq/dead.bin}\n  local_sink: {path: /tmp/rows}\n  server: {listen: \"127.0.0.1:8000\"}\n  observation_source:",
        );
        let text = Spec::parse(&bad).unwrap_err().to_string();
        for key in ["config.dead_letter.path", "config.local_sink.path"] {
            assert!(
                text.contains(&format!("{key}: "))
                    && text.contains("would be on an emptyDir, which dies with its pod"),
                "{key}: {text}"
            );
        }
        assert!(
            text.contains("lost after its offsets were committed"),
            "{text}"
        );
        assert!(text.contains("config.server.listen"), "{text}");
        // On a persistent volume the spec names: accepted (relative paths are relative to the
        // working directory).
        let ok = bad
            .replace("  server: {listen: \"127.0.0.1:8000\"}\n", "")
            .replace("path: dlq/dead.bin", "path: persistent/dlq/dead.bin")
            .replace(
                "path: /tmp/rows",
                "path: /var/lib/observation-publisher/persistent/rows",
            )
            .replace(
                "namespace: mlobs",
                "namespace: mlobs\nstorage: {persistent: {claim: publisher-data}}",
            );
        let (s, _) = Spec::parse(&ok).unwrap_or_else(|p| panic!("{p}"));
        assert_eq!(s.storage.persistent.unwrap().claim, "publisher-data");
        let elsewhere = ok.replace("path: persistent/dlq/dead.bin", "path: dlq/dead.bin");
        let text = Spec::parse(&elsewhere).unwrap_err().to_string();
        assert!(
            text.contains("config.dead_letter.path: dlq/dead.bin is not on the persistent volume"),
            "{text}"
        );
    }

    #[test]
    fn key_secret_forms() {
        let s = MINIMAL.replace(
            "namespace: mlobs",
            "namespace: mlobs\nidentity: {key_secret: gcp-key}",
        );
        let (s, _) = Spec::parse(&s).unwrap();
        assert_eq!(
            s.identity.key_secret,
            Some(KeySecret {
                name: "gcp-key".into(),
                key: DEFAULT_KEY_ITEM.into()
            })
        );
        let s = MINIMAL.replace(
            "namespace: mlobs",
            "namespace: mlobs\nidentity: {key_secret: {name: gcp-key, key: key.json}}",
        );
        let (s, _) = Spec::parse(&s).unwrap();
        assert_eq!(s.identity.key_secret.unwrap().key, "key.json");
    }

    #[test]
    fn autoscaling_bounds() {
        let s = MINIMAL.replace(
            "namespace: mlobs",
            "namespace: mlobs\nautoscaling: {min_replicas: 3, max_replicas: 2}",
        );
        let text = Spec::parse(&s).unwrap_err().to_string();
        assert!(
            text.contains("autoscaling.max_replicas: must be at least"),
            "{text}"
        );
    }

    /// Pins the wording, paths and order of the spec's problems (operators and docs quote them).
    #[test]
    fn spec_problems_keep_their_wording() {
        let problems = |text: &str| Spec::parse(text).unwrap_err().0;
        let got = problems(
            "surprise: 1\nmodel: \"\"\nversion: [1]\nrevision: null\nnamespace: Not_Valid\nimage: a b\nimage_pull_policy: Sometimes\nreplicas: 0\nresources: {requests: {cpu: lots, gpu: 1}, limits: 3, other: x}\nlabels: {ok: \"bad value\", app.kubernetes.io/name: x}\nidentity: {gcp_service_account: nobody, key_secret: {name: Bad_Name, key: \"a b\", extra: 1}, who: 1}\nautoscaling: {min_replicas: 0, lag_threshold: x}\n",
        );
        let want = [
            "surprise: unknown key; expected one of project, model, version, revision, namespace, image, image_pull_policy, replicas, resources, labels, identity, autoscaling, storage, config",
            "project: required",
            "model: must not be empty",
            "version: must be a string",
            "revision: must be an integer from 1 to 18446744073709551615",
            "namespace: \"Not_Valid\" is not a valid namespace name",
            "image: must not contain whitespace",
            "image_pull_policy: expected Always, IfNotPresent or Never",
            "replicas: must be an integer from 1 to 1000",
            "resources.other: unknown key; expected one of requests, limits",
            "resources.requests.gpu: unknown key; expected one of cpu, memory, ephemeral-storage",
            "resources.requests.cpu: must be a Kubernetes quantity such as 500m, 1, 512Mi or 1Gi",
            "resources.limits: must be a mapping",
            "labels.ok: not a valid label value (at most 63 of A-Z a-z 0-9 . _ -, alphanumeric at both ends)",
            "labels.app.kubernetes.io/name: reserved: bootstrap sets the labels under this prefix itself",
            "identity.who: unknown key; expected one of gcp_service_account, key_secret",
            "identity.gcp_service_account: \"nobody\" is not a service-account email",
            "identity.key_secret.extra: unknown key; expected one of name, key",
            "identity.key_secret.name: \"Bad_Name\" is not a valid Secret name",
            "identity.key_secret.key: \"a b\" is not a valid Secret item name",
            "autoscaling.min_replicas: must be an integer from 1 to 1000",
            "autoscaling.max_replicas: required",
            "autoscaling.lag_threshold: must be an integer from 1 to 18446744073709551615",
            "config: required: the publisher's run config (Merlin's shape)",
        ];
        assert_eq!(got, want);
        let got = problems("[1]");
        assert_eq!(got, ["the spec must be a YAML mapping"]);
        let got = problems(
            "project: p\nmodel: m\nversion: 1\nrevision: 1\nnamespace: n\nimage: i\nresources: 1\nlabels: [a]\nidentity: {key_secret: [x]}\nautoscaling: {min_replicas: 3, max_replicas: 2}\nconfig: 1\n",
        );
        let want = [
            "resources: must be a mapping",
            "labels: must be a mapping of label keys to values",
            "identity.key_secret: must be a Secret name or {name, key}",
            "autoscaling.max_replicas: must be at least min_replicas (3)",
            "config: must be a mapping",
        ];
        assert_eq!(got, want);
    }

    #[test]
    fn quantities() {
        for ok in ["1", "500m", "0.5", "512Mi", "1Gi", "1e3", "2k"] {
            assert!(is_quantity(ok), "{ok}");
        }
        for bad in ["", "lots", "1.2.3", "-1", "1Gb", "Mi"] {
            assert!(!is_quantity(bad), "{bad}");
        }
    }
}
