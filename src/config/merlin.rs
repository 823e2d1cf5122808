//! Merlin's own sections: `observation_source` (Kafka) and `observation_sinks`.
//!
//! These are read exactly as Merlin's control plane writes them: enum names upper case, unknown
//! keys tolerated with a warning, `additional_consumer_config` values as strings.

use super::value::{kind, Obj, Problems};
use serde::Serialize;
use serde_yaml_ng::Value;

/// `observation_source` with `type: KAFKA`. `Debug` shows the librdkafka values that hold no
/// secret and redacts the others, as `check-config` does.
#[derive(Clone, PartialEq, Serialize)]
pub struct KafkaSource {
    /// The topic holding this model version's prediction logs.
    pub topic: String,
    /// librdkafka `bootstrap.servers`.
    pub bootstrap_servers: String,
    /// Consumer group id.
    pub group_id: String,
    /// Merlin's `consume()` batch size; kept for compatibility, the publisher streams instead.
    pub batch_size: u64,
    /// Merlin's poll timeout in seconds; kept for compatibility.
    pub poll_timeout_seconds: f64,
    /// Extra librdkafka settings, copied verbatim after the publisher's defaults.
    #[serde(serialize_with = "super::value::ser_pairs")]
    pub additional_consumer_config: Vec<(String, String)>,
    /// Merlin's flush threshold in messages (superseded by `batching`).
    pub buffer_capacity: u64,
    /// Merlin's flush interval in seconds (superseded by `batching.linger`).
    pub buffer_max_duration_seconds: u64,
}

impl std::fmt::Debug for KafkaSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use crate::redact::{is_non_secret_consumer_key, strip_userinfo, REDACTED};
        let consumer: Vec<(&str, &str)> = (self.additional_consumer_config.iter())
            .map(|(k, v)| {
                let shown = if is_non_secret_consumer_key(k) {
                    v.as_str()
                } else {
                    REDACTED
                };
                (k.as_str(), shown)
            })
            .collect();
        f.debug_struct("KafkaSource")
            .field("topic", &self.topic)
            .field(
                "bootstrap_servers",
                &strip_userinfo(&self.bootstrap_servers),
            )
            .field("group_id", &self.group_id)
            .field("batch_size", &self.batch_size)
            .field("poll_timeout_seconds", &self.poll_timeout_seconds)
            .field("additional_consumer_config", &consumer)
            .field("buffer_capacity", &self.buffer_capacity)
            .field(
                "buffer_max_duration_seconds",
                &self.buffer_max_duration_seconds,
            )
            .finish()
    }
}

/// librdkafka keys that would break the publisher's delivery guarantees if overridden.
pub const FORBIDDEN_CONSUMER_KEYS: &[&str] =
    &["enable.auto.commit", "enable.auto.offset.store", "group.id"];

impl KafkaSource {
    pub(crate) fn read(
        mut o: Obj<'_>,
        problems: &mut Problems,
        warnings: &mut Problems,
    ) -> Option<Self> {
        if o.is_absent() {
            problems.push(o.path(), "required");
            return None;
        }
        let ty = o.req_string("type", problems);
        if !ty.is_empty() && ty != "KAFKA" {
            problems.push(
                &o.path_of("type"),
                format_args!(
                    "unsupported source type {ty:?}; the only source is KAFKA (upper case)"
                ),
            );
        }
        let buffer_capacity = o.u64("buffer_capacity", problems).unwrap_or(10);
        let buffer_max_duration_seconds =
            o.u64("buffer_max_duration_seconds", problems).unwrap_or(60);
        let mut c = o.obj("config", problems);
        if c.is_absent() {
            problems.push(c.path(), "required");
        }
        let topic = c.req_string("topic", problems);
        let bootstrap_servers = c.req_string("bootstrap_servers", problems);
        if bootstrap_servers.contains('@') {
            // The value is not echoed: it holds credentials.
            problems.push(
                &c.path_of("bootstrap_servers"),
                "holds credentials (user:password@host); librdkafka cannot use them there: set sasl.username and sasl.password (with security.protocol and sasl.mechanisms) in additional_consumer_config",
            );
        }
        let group_id = c.req_string("group_id", problems);
        let batch_size = c.u64("batch_size", problems).unwrap_or(100);
        let poll_timeout_seconds = c.f64("poll_timeout_seconds", problems).unwrap_or(1.0);
        let additional_consumer_config = c
            .string_map("additional_consumer_config", problems)
            .unwrap_or_default();
        for (k, _) in &additional_consumer_config {
            if FORBIDDEN_CONSUMER_KEYS.contains(&k.as_str()) {
                problems.push(
                    &format!("{}.{k}", c.path_of("additional_consumer_config")),
                    "may not be overridden: the publisher commits offsets itself, only after the sinks acknowledge",
                );
            }
        }
        c.warn_unknown(warnings);
        o.warn_unknown(warnings);
        Some(KafkaSource {
            topic,
            bootstrap_servers,
            group_id,
            batch_size,
            poll_timeout_seconds,
            additional_consumer_config,
            buffer_capacity,
            buffer_max_duration_seconds,
        })
    }
}

/// Merlin's retry block (kept for compatibility; the publisher always retries transient errors).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RetryConfig {
    /// Merlin: retry writes that return row errors.
    pub enabled: bool,
    /// Merlin: extra attempts.
    pub retry_attempts: u64,
    /// Merlin: sleep between attempts.
    pub retry_interval_seconds: u64,
}

/// A BIGQUERY sink. `Debug` cuts credentials out of its URLs.
#[derive(Clone, PartialEq, Serialize)]
pub struct BigQuerySink {
    /// GCP project holding the dataset.
    pub project: String,
    /// Dataset.
    pub dataset: String,
    /// Partition expiry in days.
    pub ttl_days: u64,
    /// Merlin's retry block.
    pub retry: RetryConfig,
    /// Ours: Storage Write API gRPC endpoint (`storage_endpoint`). `https://…` uses TLS (rustls
    /// with ring) and, with `auth: adc`, an OAuth bearer token; `http://…` is plain (emulator).
    pub storage_endpoint: String,
    /// Ours: BigQuery REST base URL up to and including `/bigquery/v2` (`rest_base_url`).
    pub rest_base_url: String,
    /// Ours: how requests are authenticated (`auth: adc | none`).
    pub auth: BigQueryAuth,
    /// Ours: upper bound of one serialized AppendRows request (`max_request_bytes`, default 4 MB,
    /// at most [`super::MAX_APPEND_REQUEST_BYTES`]).
    pub max_request_bytes: u64,
    /// Ours: upper bound of the bytes sent but not yet acknowledged (`max_inflight_bytes`).
    pub max_inflight_bytes: u64,
    /// Ours: clustering columns used when the table is created (at most 4, not FLOAT).
    pub clustering: Vec<String>,
    /// Ours: `emulator_compat: true` also alters the emulator's physical table with DDL when
    /// columns are added (the local emulator needs both `tables.patch` and `ALTER TABLE`).
    pub emulator_compat: bool,
    /// Ours: add `_kafka_partition` and `_kafka_offset` (INTEGER) to every row, so duplicates
    /// left by at-least-once delivery can be told apart and removed by source position.
    pub kafka_columns: bool,
    /// Ours: the most AppendRows connections to the table's `_default` stream (`connections`,
    /// default [`DEFAULT_CONNECTIONS`], 1 to [`super::MAX_CONNECTIONS`]). The sink opens one more
    /// only while every open one is full (a backlog) and closes them when idle, so an idle sink
    /// holds one, then none (`sink::bigquery::pool`); each pipelines its requests, together
    /// within `max_inflight_bytes`. Exactly-once ignores it (one COMMITTED stream per partition).
    pub connections: u32,
}

impl std::fmt::Debug for BigQuerySink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use crate::redact::strip_userinfo;
        f.debug_struct("BigQuerySink")
            .field("project", &self.project)
            .field("dataset", &self.dataset)
            .field("ttl_days", &self.ttl_days)
            .field("retry", &self.retry)
            .field("storage_endpoint", &strip_userinfo(&self.storage_endpoint))
            .field("rest_base_url", &strip_userinfo(&self.rest_base_url))
            .field("auth", &self.auth)
            .field("max_request_bytes", &self.max_request_bytes)
            .field("max_inflight_bytes", &self.max_inflight_bytes)
            .field("clustering", &self.clustering)
            .field("emulator_compat", &self.emulator_compat)
            .field("kafka_columns", &self.kafka_columns)
            .field("connections", &self.connections)
            .finish()
    }
}

/// Default `connections`, the most a backlog opens (chosen by measurement: docs/performance.md,
/// "Appends pipelined").
pub const DEFAULT_CONNECTIONS: u32 = 4;

/// Default `max_request_bytes`: 4 MB, twice a batch at the default in-flight budget (a larger
/// batch is split into several requests), and four connections' worth fit the default
/// `max_inflight_bytes`, so the pool's share of the memory formula stays 16 MiB.
pub const DEFAULT_MAX_REQUEST_BYTES: u64 = 4_000_000;
/// Default `max_inflight_bytes`: 16 MiB, as the pipeline's own budget.
pub const DEFAULT_MAX_INFLIGHT_BYTES: u64 = 16 << 20;
/// Default Storage Write API endpoint.
pub const DEFAULT_STORAGE_ENDPOINT: &str = "https://bigquerystorage.googleapis.com";
/// Default REST base URL.
pub const DEFAULT_REST_BASE_URL: &str = "https://bigquery.googleapis.com/bigquery/v2";

/// How the BigQuery sink authenticates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum BigQueryAuth {
    /// Application Default Credentials: `GOOGLE_APPLICATION_CREDENTIALS` (service-account key)
    /// or the GCE/GKE metadata server (workload identity).
    #[default]
    Adc,
    /// No credentials (the local emulator).
    None,
}

/// An ARIZE sink: Merlin's keys plus ours (all optional, with production defaults). `Debug`
/// shows the keys redacted.
#[derive(Clone, PartialEq, Serialize)]
pub struct ArizeSink {
    /// Arize API key (secret; sent as the `authorization` header).
    pub api_key: String,
    /// Arize space key (secret; sent as the `space` header). Empty when not set: Arize's
    /// current SDK deprecates it for [`ArizeSink::space_id`]; one of the two is required.
    pub space_key: String,
    /// Arize space ID (`space_id`; sent as the `arize-space-id` and `space_id` headers, as
    /// Arize's current SDK sends it). Empty when not set.
    pub space_id: String,
    /// Ours: the API base URI (`uri`); requests go to `{uri}/pandas_arrow`.
    pub uri: String,
    /// Ours: timeout of one request, sending and answer included (`request_timeout`).
    #[serde(with = "super::ours::humantime_serde_compat")]
    pub request_timeout: std::time::Duration,
    /// Ours: timeout of establishing a connection (`connect_timeout`).
    #[serde(with = "super::ours::humantime_serde_compat")]
    pub connect_timeout: std::time::Duration,
    /// Ours: upper bound of one request body (`max_request_bytes`); a batch whose accepted rows
    /// encode to more is sent as several requests.
    pub max_request_bytes: u64,
}

impl std::fmt::Debug for ArizeSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ArizeSink")
            .field("api_key", &crate::redact::REDACTED)
            .field("space_key", &crate::redact::REDACTED)
            .field("space_id", &self.space_id)
            .field("uri", &crate::redact::strip_userinfo(&self.uri))
            .field("request_timeout", &self.request_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("max_request_bytes", &self.max_request_bytes)
            .finish()
    }
}

/// Default Arize API base URI (the SDK's default).
pub const DEFAULT_ARIZE_URI: &str = "https://api.arize.com/v1";
/// Default `request_timeout` of the ARIZE sink.
pub const DEFAULT_ARIZE_REQUEST_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);
/// Default `connect_timeout` of the ARIZE sink.
pub const DEFAULT_ARIZE_CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);
/// Default `max_request_bytes` of the ARIZE sink: 8 MiB.
pub const DEFAULT_ARIZE_MAX_REQUEST_BYTES: u64 = 8 << 20;

/// A MAXCOMPUTE sink: Merlin's keys plus ours (`sink::maxcompute`). `Debug` redacts
/// the access key id and secret; `check-config` redacts them by key name.
#[derive(Clone, PartialEq, Serialize)]
pub struct MaxComputeSink {
    /// ODPS project.
    pub project: String,
    /// Dataset (schema).
    pub dataset: String,
    /// Ignored by Merlin too.
    pub ttl_days: u64,
    /// Access key id (secret); with `access_key_secret`, or neither: Alibaba's default
    /// credential chain (environment keys, RRSA, the ECS RAM role).
    pub access_key_id: Option<String>,
    /// Access key secret (secret).
    pub access_key_secret: Option<String>,
    /// Ours: the STS endpoint RRSA asks for keys (`sts_endpoint`, a URL); unset: the
    /// environment's where the sink starts (`ALIBABA_CLOUD_STS_ENDPOINT`, else from
    /// `ALIBABA_CLOUD_STS_REGION`), else Alibaba's public one.
    pub sts_endpoint: Option<String>,
    /// Endpoint of the control plane (`http(s)://host/api`).
    pub access_url: String,
    /// Merlin's retry block (read so it does not warn; the publisher always retries transient
    /// errors with its own backoff).
    pub retry: RetryConfig,
    /// Ours: the Tunnel endpoint (`tunnel_endpoint`); absent: asked from the project's
    /// `tunnel?service`.
    pub tunnel_endpoint: Option<String>,
    /// Ours: how often staged rows are moved into the model's table (`interval`): the offsets
    /// of a batch commit only after its move, so this bounds the commit latency.
    #[serde(with = "super::ours::humantime_serde_compat")]
    pub interval: std::time::Duration,
    /// Ours: how long one move may run before the sink reports it (`move_timeout`): `/readyz`
    /// answers 503 naming the instance, a metric counts it and one warning is logged. The move
    /// is not abandoned (its `INSERT` may still finish, and a second one could insert its rows
    /// twice). Default [`default_move_timeout`].
    #[serde(with = "super::ours::humantime_serde_compat")]
    pub move_timeout: std::time::Duration,
    /// Ours: timeout of one request (`request_timeout`).
    #[serde(with = "super::ours::humantime_serde_compat")]
    pub request_timeout: std::time::Duration,
    /// Ours: timeout of establishing a connection (`connect_timeout`).
    #[serde(with = "super::ours::humantime_serde_compat")]
    pub connect_timeout: std::time::Duration,
}

impl std::fmt::Debug for MaxComputeSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MaxComputeSink")
            .field("project", &self.project)
            .field("dataset", &self.dataset)
            .field("ttl_days", &self.ttl_days)
            .field("access_key_id", &crate::redact::REDACTED)
            .field("access_key_secret", &crate::redact::REDACTED)
            .field(
                "access_url",
                &crate::redact::strip_userinfo(&self.access_url),
            )
            .field("retry", &self.retry)
            .field(
                "tunnel_endpoint",
                &self
                    .tunnel_endpoint
                    .as_deref()
                    .map(crate::redact::strip_userinfo),
            )
            .field(
                "sts_endpoint",
                &self
                    .sts_endpoint
                    .as_deref()
                    .map(crate::redact::strip_userinfo),
            )
            .field("interval", &self.interval)
            .field("move_timeout", &self.move_timeout)
            .field("request_timeout", &self.request_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .finish()
    }
}

/// Default `interval` of the MAXCOMPUTE sink: one `INSERT … SELECT` a minute (docs/maxcompute.md).
pub const DEFAULT_MAXCOMPUTE_INTERVAL: std::time::Duration = std::time::Duration::from_secs(60);
/// Default `move_timeout` of the MAXCOMPUTE sink: three intervals, and at least 10 minutes. A
/// move normally takes seconds; one queued behind other jobs of the project's quota group can
/// take minutes, so a bound of a few intervals alone (3 s at `interval: 1s`) would report
/// ordinary queueing, while 10 minutes of nothing moved already costs 10 minutes of commit
/// latency. Three intervals keep a long `interval` from being reported for its own length.
pub fn default_move_timeout(interval: std::time::Duration) -> std::time::Duration {
    (3 * interval).max(std::time::Duration::from_secs(600))
}
/// Default `request_timeout` of the MAXCOMPUTE sink.
pub const DEFAULT_MAXCOMPUTE_REQUEST_TIMEOUT: std::time::Duration =
    std::time::Duration::from_secs(60);
/// Default `connect_timeout` of the MAXCOMPUTE sink.
pub const DEFAULT_MAXCOMPUTE_CONNECT_TIMEOUT: std::time::Duration =
    std::time::Duration::from_secs(10);

/// One entry of `observation_sinks`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", content = "config")]
pub enum SinkConfig {
    /// `type: BIGQUERY`.
    #[serde(rename = "BIGQUERY")]
    BigQuery(BigQuerySink),
    /// `type: ARIZE`.
    #[serde(rename = "ARIZE")]
    Arize(ArizeSink),
    /// `type: MAXCOMPUTE`.
    #[serde(rename = "MAXCOMPUTE")]
    MaxCompute(MaxComputeSink),
}

impl SinkConfig {
    /// Merlin's enum name of this sink.
    pub fn type_name(&self) -> &'static str {
        match self {
            SinkConfig::BigQuery(_) => "BIGQUERY",
            SinkConfig::Arize(_) => "ARIZE",
            SinkConfig::MaxCompute(_) => "MAXCOMPUTE",
        }
    }
}

pub(crate) fn read_sinks(
    v: Option<&Value>,
    path: &str,
    problems: &mut Problems,
    warnings: &mut Problems,
) -> Vec<SinkConfig> {
    let items = match v {
        None | Some(Value::Null) => return Vec::new(),
        Some(Value::Sequence(items)) => items,
        Some(other) => {
            problems.push(
                path,
                format_args!("expected a list of sinks, found {}", kind(other)),
            );
            return Vec::new();
        }
    };
    let mut out = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let ipath = format!("{path}[{i}]");
        let mut o = Obj::new(Some(item), &ipath, problems);
        let ty = o.req_string("type", problems);
        let mut c = o.obj("config", problems);
        let sink = match ty.as_str() {
            "BIGQUERY" => {
                let project = c.req_string("project", problems);
                let dataset = c.req_string("dataset", problems);
                let ttl_path = c.path_of("ttl_days");
                let ttl_days = c.u64("ttl_days", problems);
                if ttl_days.is_none() && !problems.0.iter().any(|p| p.starts_with(&ttl_path)) {
                    problems.push(&ttl_path, "required");
                }
                if ttl_days == Some(0) {
                    problems.push(&ttl_path, "must be at least 1");
                }
                let mut r = c.obj("retry", problems);
                let retry = RetryConfig {
                    enabled: r.bool("enabled", problems).unwrap_or(false),
                    retry_attempts: r.u64("retry_attempts", problems).unwrap_or(4),
                    retry_interval_seconds: r.u64("retry_interval_seconds", problems).unwrap_or(30),
                };
                r.warn_unknown(warnings);
                let ours = read_bigquery_options(&mut c, problems);
                Some(SinkConfig::BigQuery(BigQuerySink {
                    project,
                    dataset,
                    ttl_days: ttl_days.unwrap_or(0),
                    retry,
                    storage_endpoint: ours.storage_endpoint,
                    rest_base_url: ours.rest_base_url,
                    auth: ours.auth,
                    max_request_bytes: ours.max_request_bytes,
                    max_inflight_bytes: ours.max_inflight_bytes,
                    clustering: ours.clustering,
                    emulator_compat: ours.emulator_compat,
                    kafka_columns: ours.kafka_columns,
                    connections: ours.connections,
                }))
            }
            "ARIZE" => Some(SinkConfig::Arize(read_arize(&mut c, problems))),
            "MAXCOMPUTE" => Some(SinkConfig::MaxCompute(read_maxcompute(
                &mut c, problems, warnings,
            ))),
            "" => None,
            other => {
                let hint = if ["bigquery", "arize", "maxcompute"]
                    .contains(&other.to_ascii_lowercase().as_str())
                    && other != other.to_ascii_uppercase()
                {
                    format!(
                        "; sink types are upper case ({})",
                        other.to_ascii_uppercase()
                    )
                } else {
                    String::new()
                };
                problems.push(
                    &o.path_of("type"),
                    format_args!(
                        "unknown sink type {other:?}; expected BIGQUERY, ARIZE or MAXCOMPUTE{hint}"
                    ),
                );
                None
            }
        };
        if sink.is_some() {
            c.warn_unknown(warnings);
        }
        o.warn_unknown(warnings);
        out.extend(sink);
    }
    out
}

fn read_maxcompute(
    c: &mut Obj<'_>,
    problems: &mut Problems,
    warnings: &mut Problems,
) -> MaxComputeSink {
    use super::bounds::{HTTP_TIMEOUT, MAXCOMPUTE_INTERVAL, MAXCOMPUTE_MOVE_TIMEOUT};
    let project = c.req_string("project", problems);
    let dataset = c.req_string("dataset", problems);
    let ttl_days = c.u64("ttl_days", problems).unwrap_or(0);
    // Both or neither (empty counts as absent: a templated value left blank); neither means
    // Alibaba's default credential chain where the sink starts.
    let access_key_id = c
        .string("access_key_id", problems)
        .filter(|v| !v.is_empty());
    let access_key_secret = c
        .string("access_key_secret", problems)
        .filter(|v| !v.is_empty());
    for (key, set, other) in [
        ("access_key_id", &access_key_id, &access_key_secret),
        ("access_key_secret", &access_key_secret, &access_key_id),
    ] {
        if set.is_none() && other.is_some() {
            problems.push(
                &c.path_of(key),
                "required when the other access key is set (or remove both to use Alibaba's \
                 default credential chain: environment keys, RRSA, the ECS RAM role)",
            );
        }
    }
    let sts_endpoint = c
        .has("sts_endpoint")
        .then(|| url_option(c, "sts_endpoint", "", problems));
    // Merlin's value as written (its own test config has `access_url: url`, which the pod's
    // environment replaces, e.g. OBS_PUBLISHER__OBSERVATION_SINKS__1__CONFIG__ACCESS_URL):
    // `check-config` accepts the file as written; `run` checks the URL where the sink starts
    // (`check_access_url`, exit 2 with the key named).
    let access_url = c
        .req_string("access_url", problems)
        .trim_end_matches('/')
        .to_string();
    let mut r = c.obj("retry", problems);
    let retry = RetryConfig {
        enabled: r.bool("enabled", problems).unwrap_or(false),
        retry_attempts: r.u64("retry_attempts", problems).unwrap_or(4),
        retry_interval_seconds: r.u64("retry_interval_seconds", problems).unwrap_or(30),
    };
    r.warn_unknown(warnings);
    let tunnel_endpoint = c
        .has("tunnel_endpoint")
        .then(|| url_option(c, "tunnel_endpoint", "", problems));
    let interval = c.duration_in(
        "interval",
        DEFAULT_MAXCOMPUTE_INTERVAL,
        &MAXCOMPUTE_INTERVAL,
        problems,
    );
    let move_timeout = c.duration_in(
        "move_timeout",
        default_move_timeout(interval),
        &MAXCOMPUTE_MOVE_TIMEOUT,
        problems,
    );
    let request_timeout = c.duration_in(
        "request_timeout",
        DEFAULT_MAXCOMPUTE_REQUEST_TIMEOUT,
        &HTTP_TIMEOUT,
        problems,
    );
    let connect_timeout = c.duration_in(
        "connect_timeout",
        DEFAULT_MAXCOMPUTE_CONNECT_TIMEOUT,
        &HTTP_TIMEOUT,
        problems,
    );
    MaxComputeSink {
        project,
        dataset,
        ttl_days,
        access_key_id,
        access_key_secret,
        sts_endpoint,
        access_url,
        retry,
        tunnel_endpoint,
        interval,
        move_timeout,
        request_timeout,
        connect_timeout,
    }
}

fn read_arize(c: &mut Obj<'_>, problems: &mut Problems) -> ArizeSink {
    let api_key = c.req_string("api_key", problems);
    let space_key = c.string("space_key", problems).unwrap_or_default();
    let space_id = c.string("space_id", problems).unwrap_or_default();
    if space_key.is_empty() && space_id.is_empty() && !c.is_absent() {
        problems.push(
            &c.path_of("space_id"),
            "required: the Arize space's ID (from the space's settings page; the deprecated \
             space_key is accepted instead)",
        );
    }
    let uri = url_option(c, "uri", DEFAULT_ARIZE_URI, problems);
    use super::bounds::{ARIZE_REQUEST_BYTES, ARIZE_TIMEOUT};
    let request_timeout = c.duration_in(
        "request_timeout",
        DEFAULT_ARIZE_REQUEST_TIMEOUT,
        &ARIZE_TIMEOUT,
        problems,
    );
    let connect_timeout = c.duration_in(
        "connect_timeout",
        DEFAULT_ARIZE_CONNECT_TIMEOUT,
        &ARIZE_TIMEOUT,
        problems,
    );
    let max_request_bytes = c.bytes_in(
        "max_request_bytes",
        DEFAULT_ARIZE_MAX_REQUEST_BYTES,
        &ARIZE_REQUEST_BYTES,
        problems,
    );
    ArizeSink {
        api_key,
        space_key,
        space_id,
        uri,
        request_timeout,
        connect_timeout,
        max_request_bytes,
    }
}

/// Our additions to a BIGQUERY sink's `config` (all optional).
struct BigQueryOptions {
    storage_endpoint: String,
    rest_base_url: String,
    auth: BigQueryAuth,
    max_request_bytes: u64,
    max_inflight_bytes: u64,
    clustering: Vec<String>,
    emulator_compat: bool,
    kafka_columns: bool,
    connections: u32,
}

fn url_option(
    c: &mut Obj<'_>,
    key: &'static str,
    default: &str,
    problems: &mut Problems,
) -> String {
    let v = c
        .string(key, problems)
        .unwrap_or_else(|| default.to_string());
    let v = v.trim_end_matches('/').to_string();
    if !(v.starts_with("http://") || v.starts_with("https://")) || v.len() <= "https://".len() {
        problems.push(
            &c.path_of(key),
            format_args!(
                "expected an http:// or https:// URL, found {:?}",
                crate::redact::strip_userinfo(&v)
            ),
        );
    }
    v
}

fn read_bigquery_options(c: &mut Obj<'_>, problems: &mut Problems) -> BigQueryOptions {
    let storage_endpoint = url_option(c, "storage_endpoint", DEFAULT_STORAGE_ENDPOINT, problems);
    let rest_base_url = url_option(c, "rest_base_url", DEFAULT_REST_BASE_URL, problems);
    let auth = match c.string("auth", problems).as_deref() {
        None | Some("adc") => BigQueryAuth::Adc,
        Some("none") => BigQueryAuth::None,
        Some(other) => {
            problems.push(
                &c.path_of("auth"),
                format_args!("unknown auth mode {other:?}; expected adc or none"),
            );
            BigQueryAuth::Adc
        }
    };
    let max_request_bytes = c.bytes_in(
        "max_request_bytes",
        DEFAULT_MAX_REQUEST_BYTES,
        &super::bounds::APPEND_REQUEST_BYTES,
        problems,
    );
    let max_inflight_bytes = c.bytes_in(
        "max_inflight_bytes",
        DEFAULT_MAX_INFLIGHT_BYTES,
        &super::bounds::SINK_INFLIGHT_BYTES,
        problems,
    );
    if max_inflight_bytes < max_request_bytes {
        problems.push(
            &c.path_of("max_inflight_bytes"),
            format_args!("must be at least max_request_bytes ({max_request_bytes})"),
        );
    }
    let clustering = c.string_list("clustering", problems).unwrap_or_default();
    if clustering.len() > 4 {
        problems.push(
            &c.path_of("clustering"),
            format_args!(
                "BigQuery allows at most 4 clustering columns, found {}",
                clustering.len()
            ),
        );
    }
    for (i, a) in clustering.iter().enumerate() {
        if clustering[..i]
            .iter()
            .any(|b| crate::naming::same_column(b, a))
        {
            problems.push(
                &c.path_of("clustering"),
                format_args!("column {a:?} is listed twice"),
            );
        }
    }
    let emulator_compat = c.bool("emulator_compat", problems).unwrap_or(false);
    let kafka_columns = c.bool("kafka_columns", problems).unwrap_or(false);
    let connections = c.count_in(
        "connections",
        u64::from(DEFAULT_CONNECTIONS),
        &super::bounds::APPEND_CONNECTIONS,
        problems,
    ) as u32;
    BigQueryOptions {
        storage_endpoint,
        rest_base_url,
        auth,
        max_request_bytes,
        max_inflight_bytes,
        clustering,
        emulator_compat,
        kafka_columns,
        connections,
    }
}

/// Whether `access_url` is an http(s) URL of MaxCompute's endpoint, as `run` needs it. Not a
/// validation problem of the file: Merlin's own fixture has `access_url: url`, which
/// `check-config` accepts (an `OBS_PUBLISHER__OBSERVATION_SINKS__N__CONFIG__ACCESS_URL`
/// variable usually replaces it in the pod); the sink checks it where it starts (exit 2).
pub fn check_access_url(url: &str) -> Result<(), String> {
    let ok = reqwest::Url::parse(url)
        .is_ok_and(|u| matches!(u.scheme(), "http" | "https") && u.host().is_some());
    if ok {
        Ok(())
    } else {
        Err(format!(
            "access_url {:?} is not an http(s):// URL of MaxCompute's endpoint (e.g. \
             https://service.<region>.maxcompute.aliyun.com/api); set it in the file or with \
             OBS_PUBLISHER__OBSERVATION_SINKS__<index>__CONFIG__ACCESS_URL",
            crate::redact::strip_userinfo(url)
        ))
    }
}
