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
//! resources: {requests: {cpu: 100m, memory: 96Mi}, limits: {memory: 121Mi}}   # the defaults; memory limit: from the config
//! labels: {team: risk}
//! identity:
//!   gcp_service_account: publisher@gcp-project.iam.gserviceaccount.com  # or gcp_workload_identity: direct
//!   key_secret: publisher-key            # or {name: publisher-key, key: service-account.json}
//!   alibaba_ram_role: publisher-role     # ACK RRSA (pod-identity.alibabacloud.com/role-name)
//! autoscaling: {min_replicas: 1, max_replicas: 4, lag_threshold: 100000}   # optional (KEDA)
//! monitoring: {pod_monitor: true, interval: 30s, labels: {release: prom}}  # optional
//! config:                                # the run config, Merlin's shape
//!   inference_schema: {...}
//!   observation_sinks: [...]               # a credential may be {secretKeyRef: {name, key}}
//!   observation_source: {type: KAFKA, config: {bootstrap_servers: "kafka:9092"}}
//! ```
//!
//! `config` is completed before it is validated: `project`, `model_id` and `model_version` come
//! from the spec; the source type defaults to `KAFKA`, the topic to Merlin's
//! `caraml-<project>-<model>-<version>-prediction-log` and the consumer group to one per version.
//! The completed mapping must pass [`Config::from_value`] with [`Needs::RUN`]; it is what the
//! Secret carries as `config.yaml`. Every problem, in the spec and in the config, is reported at
//! once.

use super::kafka_auth::{kafka_auth, KafkaAuth};
use super::names::{is_dns_label, is_label_key, is_label_value, is_quantity, Names};
use super::storage::Storage;
pub use super::storage::{DATA_DIR, TMP_DIR};
use crate::config::{key_text, scalar_text, Config, Needs, Obj, Problems};
use serde_yaml_ng::{Mapping, Value};
use std::collections::BTreeMap;
use std::path::Path;

/// Default item of the key Secret holding the GCP service-account key (Merlin's name).
pub const DEFAULT_KEY_ITEM: &str = "service-account.json";
/// Label and annotation prefixes reserved for the objects bootstrap writes.
pub const RESERVED_LABEL_PREFIXES: &[&str] =
    &["app.kubernetes.io/", "observation-publisher.caraml.dev/"];

/// A validated publisher spec, with the completed run config. `Debug` shows the run config
/// with its secrets redacted.
#[derive(Clone)]
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
    /// PodMonitor settings (none by default).
    pub monitoring: Monitoring,
    /// emptyDir size limit and the optional persistent volume for local files.
    pub storage: Storage,
    /// The run config as written into the Secret (completed with defaults; credentials read
    /// from existing Secrets left out).
    pub run_config: Value,
    /// Credentials of the run config read from existing Secrets, passed as environment
    /// variables.
    pub secret_envs: Vec<SecretEnv>,
    /// The run config, validated.
    pub config: Config,
    /// Object names of this version.
    pub names: Names,
}

impl std::fmt::Debug for Spec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut run_config = self.run_config.clone();
        crate::config::redact(&mut run_config);
        f.debug_struct("Spec")
            .field("project", &self.project)
            .field("model", &self.model)
            .field("version", &self.version)
            .field("revision", &self.revision)
            .field("namespace", &self.namespace)
            .field("image", &self.image)
            .field("replicas", &self.replicas)
            .field("resources", &self.resources)
            .field("labels", &self.labels)
            .field("identity", &self.identity)
            .field("autoscaling", &self.autoscaling)
            .field("monitoring", &self.monitoring)
            .field("storage", &self.storage)
            .field("run_config", &run_config)
            .field("secret_envs", &self.secret_envs)
            .field("config", &self.config)
            .field("names", &self.names)
            .finish_non_exhaustive()
    }
}

/// Container resources.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Resources {
    /// Requests, by resource name.
    pub requests: BTreeMap<String, String>,
    /// Limits, by resource name.
    pub limits: BTreeMap<String, String>,
}

/// Default `autoscaling.lag_threshold`: KEDA reads lag from committed offsets, which trail a
/// healthy publisher by what arrived since its last commit (`consumer.commit_interval`, 5 s, plus
/// `batching.linger`, 1 s): about 6 s of logs at rest. One pod writes at least ~19,000 rows/s to
/// BigQuery (four connections at Google's guaranteed 1 MB/s each; docs/capacity.md), so its lag
/// at rest at that rate is ~114,000; 100,000 adds a pod only for lag the commit cadence does not
/// explain. A threshold of 1,000 ran six pods for a version at 1,000 logs/s that one pod carries
/// in under 1% of a core.
pub const DEFAULT_LAG_THRESHOLD: u64 = 100_000;

/// KEDA `ScaledObject` settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Autoscaling {
    /// Minimum replicas (≥ 1: a drained version is deleted, not scaled to zero).
    pub min_replicas: i32,
    /// Maximum replicas (≥ min).
    pub max_replicas: i32,
    /// Consumer lag per replica that triggers scaling out (default
    /// [`DEFAULT_LAG_THRESHOLD`]).
    pub lag_threshold: u64,
    /// How KEDA's scaler authenticates to Kafka (from the consumer config); `None` for a
    /// plaintext cluster.
    pub kafka_auth: Option<KafkaAuth>,
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
    "monitoring",
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
        if !root.is_mapping() {
            problems.push("", "the spec must be a YAML mapping");
            return Err(problems);
        }
        let p = &mut problems;
        let mut r = Obj::closed(Some(&root), "", SPEC_KEYS, p);
        let project = r.req_text("project", p);
        let model = r.req_text("model", p);
        let version = r.req_text("version", p);
        let revision = r.int_in("revision", 1, u64::MAX, p).unwrap_or(0);
        if !r.has("revision") {
            p.push("revision", "required (an integer ≥ 1; newer revisions win)");
        }
        let namespace = r.req_text("namespace", p);
        if !namespace.is_empty() && !is_dns_label(&namespace) {
            p.push(
                "namespace",
                format_args!("{namespace:?} is not a valid namespace name"),
            );
        }
        let image = r.req_text("image", p);
        if image.chars().any(char::is_whitespace) {
            p.push("image", "must not contain whitespace");
        }
        let image_pull_policy = r
            .text("image_pull_policy", p)
            .unwrap_or_else(|| "IfNotPresent".into());
        if !["Always", "IfNotPresent", "Never"].contains(&image_pull_policy.as_str()) {
            p.push(
                "image_pull_policy",
                "expected Always, IfNotPresent or Never",
            );
        }
        let replicas = r.int_in("replicas", 1, 1000, p).unwrap_or(1) as i32;
        let mut resources =
            read_resources(r.closed_obj("resources", &["requests", "limits"], p), p);
        cpu_defaults(&mut resources, &mut warnings);
        let labels = read_labels(r.get("labels"), p);
        let identity = read_identity(r.closed_obj("identity", IDENTITY_KEYS, p), p);
        let mut autoscaling = read_autoscaling(
            r.closed_obj(
                "autoscaling",
                &["min_replicas", "max_replicas", "lag_threshold"],
                p,
            ),
            replicas,
            p,
        );
        let monitoring = read_monitoring(
            r.closed_obj("monitoring", &["pod_monitor", "interval", "labels"], p),
            |v, p| read_labels_at("monitoring.labels", v, p),
            p,
        );
        let storage = Storage::read(r.get("storage"), p);
        let raw_config = r.get("config");

        let names = Names::new(&project, &model, &version);
        let run_config = complete_config(
            raw_config,
            &project,
            &model,
            &version,
            &mut problems,
            &mut warnings,
        );

        let mut run_config = run_config;
        let (secret_envs, checked) = match run_config.as_mut() {
            Some(rc) => {
                let (refs, checked) = take_secret_refs(rc, &mut problems);
                (refs, Some(checked))
            }
            None => (Vec::new(), None),
        };

        // Validate the completed run config exactly as `run` will (a credential read from a
        // Secret by its placeholder).
        let config = match &checked {
            Some(rc) if !project.is_empty() && !model.is_empty() && !version.is_empty() => {
                match Config::from_value(rc, Needs::RUN) {
                    Ok((c, w)) => {
                        warnings.extend(w.into_iter().map(|w| format!("config: {w}")));
                        memory_defaults(&mut resources, &c, &mut warnings);
                        if !identity.names_google() && uses_metadata_server(&c) {
                            warnings.push(metadata_server_warning(&namespace, &names.workload));
                        }
                        check_runtime_fit(&c, &mut problems);
                        storage.check_paths(&c, replicas, &mut problems, &mut warnings);
                        if let (Some(a), Some(src)) =
                            (autoscaling.as_mut(), c.observation_source.as_ref())
                        {
                            let d = kafka_auth(&src.additional_consumer_config);
                            let at = "config.observation_source.config.additional_consumer_config";
                            for w in d.warnings {
                                warnings.push(format!("autoscaling: {w}"));
                            }
                            for msg in d.problems {
                                problems.push(at, format_args!("{msg} (autoscaling is on)"));
                            }
                            a.kafka_auth = d.auth;
                            if let Some(auth) = a.kafka_auth.as_mut() {
                                for e in &secret_envs {
                                    auth.take_ref(&e.placeholder(), &e.secret);
                                }
                            }
                        }
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
                    monitoring,
                    storage,
                    run_config,
                    secret_envs,
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

/// Fills in the run config's identity, source type, topic and group (joined as it is:
/// `consumer.group: own`).
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
    // The group is this version's already: it is joined as it is, with incremental
    // rebalances, not made into a group per version a second time.
    let consumer = cfg
        .entry("consumer".into())
        .or_insert_with(|| Value::Mapping(Mapping::new()));
    if let Value::Mapping(c) = consumer {
        c.entry("group".into())
            .or_insert_with(|| Value::String("own".into()));
    }
    Some(Value::Mapping(cfg))
}

/// Whether a sink authenticates with Google's Application Default Credentials, which in a pod
/// with no key come from GKE's metadata server.
fn uses_metadata_server(c: &Config) -> bool {
    c.observation_sinks.iter().any(|s| {
        matches!(s, crate::config::SinkConfig::BigQuery(b) if b.auth == crate::config::BigQueryAuth::Adc)
    })
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

/// The memory a publisher holds at steady state under load, with a margin: the default memory
/// request. Measured on the release binary at the default budget with a BIGQUERY sink: glibc
/// keeps about 80 MiB after draining a backlog, 18.4 MiB idle, 54.7–56.1 MiB peak under a
/// stalled sink (docs/performance.md, "Footprint at the defaults").
pub const DEFAULT_MEMORY_REQUEST: &str = "96Mi";

/// The default CPU request: a steady 20,000 logs/s with threefold headroom. Measured
/// (docs/performance.md): an idle publisher uses 0.20% of a core (2m; "Footprint at the
/// defaults"), a log costs 1.37 µs of CPU through the BIGQUERY sink at full speed (release
/// build, 20-feature logs; same section), and about 3 µs above idle at a steady 765 logs/s into
/// the Parquet sink ("Soak": 0.4–0.5% of a core). 2m + 20,000/s × 3 × 1.37 µs = 84m. The
/// headroom is for what the local figures leave out (TLS to real brokers and to BigQuery, wider
/// logs) and for the higher cost per log at low rates. A backlog drains faster than that by
/// bursting above the request: see [`cpu_defaults`].
pub const DEFAULT_CPU_REQUEST: &str = "100m";

/// A CPU request the spec leaves out is [`DEFAULT_CPU_REQUEST`], unless the spec sets a CPU limit
/// (Kubernetes then requests the limit). No CPU limit is added: a limit is a CFS quota, and a
/// publisher catching up a backlog would be throttled for the rest of every 100 ms CFS period
/// once it used its quota, so lag would drain at the limit's pace while the node has idle
/// cores. A limit the spec sets is kept, with a warning saying so.
fn cpu_defaults(r: &mut Resources, warnings: &mut Vec<String>) {
    if let Some(limit) = r.limits.get("cpu") {
        warnings.push(format!(
            "resources.limits.cpu {limit}: the kernel throttles the publisher at this limit (CFS quota) even on an idle node, so a backlog drains no faster than the limit allows; leave the CPU limit out unless the namespace requires one"
        ));
        return;
    }
    r.requests
        .entry("cpu".into())
        .or_insert_with(|| DEFAULT_CPU_REQUEST.to_string());
}

/// A memory limit or request the spec leaves out comes from the configuration: the limit is the
/// memory formula's bound ([`crate::footprint`]), the request [`DEFAULT_MEMORY_REQUEST`] (at most
/// the limit). A limit the spec sets below the bound is kept, with a warning.
fn memory_defaults(r: &mut Resources, cfg: &crate::config::Config, warnings: &mut Vec<String>) {
    const MIB: u64 = 1 << 20;
    let bound = crate::footprint::Footprint::of(cfg, true).bound();
    let bound_mi = bound.div_ceil(MIB);
    let limit = r
        .limits
        .entry("memory".into())
        .or_insert_with(|| format!("{bound_mi}Mi"))
        .clone();
    if quantity_bytes(&limit).is_some_and(|b| b < bound) {
        warnings.push(format!(
            "resources.limits.memory {limit} is below the memory formula's bound for this config ({bound_mi}Mi, {bound} bytes; check-config prints its terms): the pod may be OOM-killed under a stalled sink"
        ));
    }
    let request = quantity_bytes(DEFAULT_MEMORY_REQUEST)
        .zip(quantity_bytes(&limit))
        .map_or(DEFAULT_MEMORY_REQUEST.to_string(), |(req, lim)| {
            if req <= lim {
                DEFAULT_MEMORY_REQUEST.to_string()
            } else {
                limit.clone()
            }
        });
    r.requests.entry("memory".into()).or_insert(request);
}

/// Bytes of a memory quantity with a binary or decimal suffix (`96Mi`, `1G`, `1000`), or `None`
/// for a form this does not read (the API server still accepts it).
fn quantity_bytes(q: &str) -> Option<u64> {
    let units: [(&str, u64); 8] = [
        ("Ki", 1 << 10),
        ("Mi", 1 << 20),
        ("Gi", 1 << 30),
        ("Ti", 1 << 40),
        ("k", 1_000),
        ("M", 1_000_000),
        ("G", 1_000_000_000),
        ("T", 1_000_000_000_000),
    ];
    for (suffix, mult) in units {
        if let Some(n) = q.strip_suffix(suffix) {
            return n.parse::<u64>().ok()?.checked_mul(mult);
        }
    }
    q.parse().ok()
}

/// `resources` as the spec writes them (CPU and memory defaults are added afterwards:
/// [`cpu_defaults`], [`memory_defaults`]).
fn read_resources(mut m: Obj<'_>, p: &mut Problems) -> Resources {
    let mut quantities = |key| {
        let q = m.closed_obj(key, &["cpu", "memory", "ephemeral-storage"], p);
        let mut out = BTreeMap::new();
        for (key, v) in q.entries() {
            match scalar_text(v) {
                Some(v) if is_quantity(&v) => {
                    out.insert(key, v);
                }
                _ => p.push(
                    &q.path_of(&key),
                    "must be a Kubernetes quantity such as 500m, 1, 512Mi or 1Gi",
                ),
            }
        }
        out
    };
    Resources {
        requests: quantities("requests"),
        limits: quantities("limits"),
    }
}

/// `labels`: any label keys but the reserved prefixes, valid label values.
fn read_labels(v: Option<&Value>, p: &mut Problems) -> BTreeMap<String, String> {
    read_labels_at("labels", v, p)
}

fn read_labels_at(at: &str, v: Option<&Value>, p: &mut Problems) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let m = match v {
        None | Some(Value::Null) => return out,
        Some(Value::Mapping(m)) => m,
        Some(_) => {
            p.push(at, "must be a mapping of label keys to values");
            return out;
        }
    };
    for (k, v) in m {
        let key = key_text(k);
        let path = format!("{at}.{key}");
        if !is_label_key(&key) {
            p.push(&path, "not a valid label key");
        } else if RESERVED_LABEL_PREFIXES.iter().any(|p| key.starts_with(p)) {
            p.push(
                &path,
                "reserved: bootstrap sets the labels under this prefix itself",
            );
        }
        match scalar_text(v) {
            Some(val) if is_label_value(&val) => {
                out.insert(key, val);
            }
            _ => p.push(&path, "not a valid label value (at most 63 of A-Z a-z 0-9 . _ -, alphanumeric at both ends)"),
        }
    }
    out
}

/// `autoscaling` (absent: none); `min_replicas` defaults to `replicas`.
fn read_autoscaling(mut m: Obj<'_>, replicas: i32, p: &mut Problems) -> Option<Autoscaling> {
    if m.is_absent() {
        return None;
    }
    let min = m
        .int_in("min_replicas", 1, 1000, p)
        .map_or(replicas, |n| n as i32);
    let max = match m.int_in("max_replicas", 1, 1000, p) {
        Some(n) => n as i32,
        None => {
            if !m.has("max_replicas") {
                p.push("autoscaling.max_replicas", "required");
            }
            min
        }
    };
    if max < min {
        p.push(
            "autoscaling.max_replicas",
            format_args!("must be at least min_replicas ({min})"),
        );
    }
    let lag_threshold =
        (m.int_in("lag_threshold", 1, u64::MAX, p)).unwrap_or(DEFAULT_LAG_THRESHOLD);
    Some(Autoscaling {
        min_replicas: min,
        max_replicas: max,
        lag_threshold,
        kafka_auth: None,
    })
}

mod identity;
mod monitoring;
mod secret_refs;

use secret_refs::take_secret_refs;
pub use secret_refs::{SecretEnv, SECRET_KEY_REF};

use identity::{metadata_server_warning, read_identity, IDENTITY_KEYS};
pub use identity::{Identity, KeySecret};

use monitoring::read_monitoring;
pub use monitoring::{is_prometheus_duration, Monitoring, DEFAULT_SCRAPE_INTERVAL};

#[cfg(test)]
pub(crate) mod tests;
