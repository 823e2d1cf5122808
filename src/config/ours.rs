//! The publisher's own optional sections. Unlike Merlin's, they are strict: an unknown key is an
//! error, so a typo never silently falls back to a default.

use super::bounds;
use super::group::GroupMode;
use super::value::{Obj, Problems};
use serde::Serialize;
use std::path::PathBuf;
use std::time::Duration;

/// `batching`: when the batcher flushes, and how much may be in flight.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Batching {
    /// Flush when a batch holds this many rows.
    pub max_rows: usize,
    /// Flush when a batch's Arrow buffers reach this many bytes.
    pub max_bytes: usize,
    /// Flush at the latest this long after the first row entered the batch (timer-driven).
    #[serde(with = "humantime_serde_compat")]
    pub linger: Duration,
    /// Upper bound on bytes held between the consumer and the sink acknowledgement (batches and
    /// dead letters waiting for their write). When it is reached the partitions are paused.
    /// librdkafka's prefetch comes on top, sized to a quarter of it
    /// ([`crate::source::prefetch_split`]).
    pub max_inflight_bytes: usize,
    /// Largest decoded size of one log (an upper bound on its Arrow bytes, computed from its
    /// wire bytes before any row is appended). A log over it is rejected whole (`too_large`)
    /// and dead-lettered. One log larger than `max_bytes` but within this limit still makes a
    /// batch of its own.
    pub max_log_bytes: usize,
    /// Largest frame (length prefix) accepted from a length-delimited input (`convert`,
    /// `run --replay`): a larger prefix stops the input with an error before anything is read.
    pub max_frame_bytes: usize,
}

/// `batching.max_log_bytes` defaults to this many times `consumer.max_message_bytes`. A log
/// decodes to about its wire size plus, per row, the session id, the model version and each
/// column's fixed width; on the wire every row takes at least two bytes per feature and two per
/// list, so only rows nearly empty on the wire beside a long session id grow more than 16-fold
/// (docs/reliability.md, "The memory formula"). Such a log is dead-lettered as `too_large`, not
/// lost.
pub const LOG_BYTES_PER_MESSAGE_BYTE: usize = 16;
/// Default of `consumer.max_message_bytes`: the largest message a topic with Kafka's default
/// limits carries (`message.max.bytes` 1,048,588).
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 1_048_588;
/// Default of `batching.max_log_bytes` at the default `consumer.max_message_bytes`.
pub const DEFAULT_MAX_LOG_BYTES: usize = LOG_BYTES_PER_MESSAGE_BYTE * DEFAULT_MAX_MESSAGE_BYTES;
/// Default of `batching.max_frame_bytes`: 64 MiB (64× a default Kafka message).
pub const DEFAULT_MAX_FRAME_BYTES: usize = 64 << 20;

impl Default for Batching {
    fn default() -> Self {
        Batching {
            max_rows: 50_000,
            max_bytes: 8 << 20,
            linger: Duration::from_secs(1),
            max_inflight_bytes: 16 << 20,
            max_log_bytes: DEFAULT_MAX_LOG_BYTES,
            max_frame_bytes: DEFAULT_MAX_FRAME_BYTES,
        }
    }
}

/// Batches a full in-flight budget holds at least: a batch flushes at an eighth of
/// `max_inflight_bytes` when that is below `max_bytes`. With fewer, intake pauses while the sink
/// writes one or two batches and the consumer idles (at a 16 MiB budget, 8 MiB batches: two in
/// flight, the rate a third of the default budget's; docs/performance.md, "Batches per budget").
pub const BATCHES_IN_FLIGHT: usize = 8;

impl Batching {
    /// The size at which a batch flushes: `max_bytes`, but at most an eighth of
    /// `max_inflight_bytes` ([`BATCHES_IN_FLIGHT`]), so that several batches can be in flight
    /// whatever the budget.
    pub fn batch_bytes(&self) -> usize {
        self.max_bytes
            .min(self.max_inflight_bytes / BATCHES_IN_FLIGHT)
            .max(1)
    }

    /// Reads `batching`; `max_log_bytes` defaults to [`LOG_BYTES_PER_MESSAGE_BYTE`] ×
    /// `max_message_bytes` (the consumer's).
    pub(crate) fn read(mut o: Obj<'_>, max_message_bytes: usize, problems: &mut Problems) -> Self {
        let d = Batching {
            max_log_bytes: max_message_bytes
                .saturating_mul(LOG_BYTES_PER_MESSAGE_BYTE)
                .min(bounds::BATCH_OR_LOG_BYTES.end().to_owned() as usize),
            ..Self::default()
        };
        let b = Batching {
            max_rows: o.count_in("max_rows", d.max_rows as u64, &bounds::MAX_ROWS, problems)
                as usize,
            max_bytes: o.bytes_in(
                "max_bytes",
                d.max_bytes as u64,
                &bounds::BATCH_OR_LOG_BYTES,
                problems,
            ) as usize,
            linger: o.duration_in("linger", d.linger, &bounds::LINGER, problems),
            max_inflight_bytes: o.bytes_in(
                "max_inflight_bytes",
                d.max_inflight_bytes as u64,
                &bounds::INFLIGHT_BYTES,
                problems,
            ) as usize,
            max_log_bytes: o.bytes_in(
                "max_log_bytes",
                d.max_log_bytes as u64,
                &bounds::BATCH_OR_LOG_BYTES,
                problems,
            ) as usize,
            max_frame_bytes: o.bytes_in(
                "max_frame_bytes",
                d.max_frame_bytes as u64,
                &bounds::FRAME_BYTES,
                problems,
            ) as usize,
        };
        if b.max_inflight_bytes < b.max_bytes {
            problems.push(
                &o.path_of("max_inflight_bytes"),
                format_args!("must be at least batching.max_bytes ({})", b.max_bytes),
            );
        }
        // A batch below max_bytes plus one log of at most max_log_bytes must fit Arrow's i32
        // string offsets (docs/reliability.md, "No log refused for its batch").
        let sum = (b.max_bytes as u64).saturating_add(b.max_log_bytes as u64);
        if sum > bounds::ARROW_STRING_LIMIT {
            problems.push(
                &o.path_of("max_bytes"),
                format_args!(
                    "batching.max_bytes + batching.max_log_bytes must be at most {} bytes (2GiB - 1, Arrow's i32 string offsets), found {} + {} = {sum}",
                    bounds::ARROW_STRING_LIMIT,
                    b.max_bytes,
                    b.max_log_bytes
                ),
            );
        }
        o.deny_unknown(problems);
        b
    }
}

/// Default of `dead_letter.max_message_bytes`: 1 MiB, what a Kafka broker with default
/// settings accepts per message (`message.max.bytes` 1,048,588) once the topic is created with
/// its own `max.message.bytes`.
const DEFAULT_DLQ_MAX_MESSAGE_BYTES: usize = 1 << 20;

/// Where rejected logs go.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "target", rename_all = "snake_case")]
pub enum DeadLetter {
    /// A Kafka topic on the source cluster; `None` means `<source topic>-dlq`.
    Kafka {
        /// Topic name.
        topic: Option<String>,
        /// Largest letter (value + key + headers) written whole; a larger one is written as a
        /// claim check. The producer allows 64 KiB more for Kafka's framing, and a topic the
        /// publisher creates gets `max.message.bytes` = this + 64 KiB; an existing topic (or a
        /// broker whose limit is lower) that refuses a letter as too large gets a claim check.
        max_message_bytes: usize,
    },
    /// A local file in the length-delimited framing, with a `<path>.reasons.jsonl` sidecar.
    File {
        /// File path.
        path: PathBuf,
    },
}

impl Default for DeadLetter {
    fn default() -> Self {
        DeadLetter::Kafka {
            topic: None,
            max_message_bytes: DEFAULT_DLQ_MAX_MESSAGE_BYTES,
        }
    }
}

impl DeadLetter {
    /// Where `run` writes dead letters, for a person (`check-config`): `("topic", name, how it
    /// was chosen)` on the source's brokers (`None` without a source to name it from), or
    /// `("file", path, "")`.
    pub fn target(
        &self,
        source_topic: Option<&str>,
    ) -> Option<(&'static str, String, &'static str)> {
        match self {
            DeadLetter::Kafka { topic: Some(t), .. } => {
                Some(("topic", t.clone(), "on the source's brokers (dead_letter.topic)"))
            }
            DeadLetter::Kafka { topic: None, .. } => source_topic.map(|s| {
                (
                    "topic",
                    format!("{s}-dlq"),
                    "on the source's brokers: the source topic's name and -dlq (dead_letter.topic unset)",
                )
            }),
            DeadLetter::File { path } => Some(("file", path.display().to_string(), "")),
        }
    }

    pub(crate) fn read(mut o: Obj<'_>, problems: &mut Problems) -> Self {
        let target = o
            .string("target", problems)
            .unwrap_or_else(|| "kafka".into());
        let topic = o.string("topic", problems);
        let path = o.string("path", problems);
        let max_message_bytes = o.bytes("max_message_bytes", problems);
        let out = match target.as_str() {
            "kafka" => {
                if path.is_some() {
                    problems.push(&o.path_of("path"), "only valid with target: file");
                }
                let max_message_bytes = match max_message_bytes {
                    Some(v)
                        if bounds::check_bytes(
                            &o.path_of("max_message_bytes"),
                            v,
                            &bounds::DLQ_MESSAGE_BYTES,
                            problems,
                        ) =>
                    {
                        v as usize
                    }
                    _ => DEFAULT_DLQ_MAX_MESSAGE_BYTES,
                };
                DeadLetter::Kafka {
                    topic,
                    max_message_bytes,
                }
            }
            "file" => {
                if topic.is_some() {
                    problems.push(&o.path_of("topic"), "only valid with target: kafka");
                }
                if max_message_bytes.is_some() {
                    problems.push(
                        &o.path_of("max_message_bytes"),
                        "only valid with target: kafka",
                    );
                }
                match path {
                    Some(p) if !p.is_empty() => DeadLetter::File { path: p.into() },
                    _ => {
                        problems.push(&o.path_of("path"), "required with target: file");
                        DeadLetter::File {
                            path: PathBuf::new(),
                        }
                    }
                }
            }
            other => {
                problems.push(
                    &o.path_of("target"),
                    format_args!("unknown target {other:?}; expected kafka or file"),
                );
                DeadLetter::default()
            }
        };
        o.deny_unknown(problems);
        out
    }
}

/// `local_sink`: the embedded Parquet sink.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LocalSink {
    /// Directory under which `dt=YYYY-MM-DD/` folders are written.
    pub path: PathBuf,
    /// Start a new file after this many bytes.
    pub rotate_bytes: u64,
    /// Start a new file after this long.
    #[serde(with = "humantime_serde_compat")]
    pub rotate_interval: Duration,
}

impl LocalSink {
    pub(crate) fn read(mut o: Obj<'_>, problems: &mut Problems) -> Option<Self> {
        if o.is_absent() {
            return None;
        }
        let path = o.req_string("path", problems);
        let s = LocalSink {
            path: path.into(),
            rotate_bytes: o.bytes_in("rotate_bytes", 128 << 20, &bounds::ROTATE_BYTES, problems),
            rotate_interval: o.duration_in(
                "rotate_interval",
                Duration::from_secs(300),
                &bounds::ROTATE_INTERVAL,
                problems,
            ),
        };
        o.deny_unknown(problems);
        Some(s)
    }
}

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum LogFormat {
    /// One JSON object per line (the default; for log collectors).
    #[default]
    Json,
    /// Human-readable lines.
    Pretty,
}

/// `logging`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Logging {
    /// json | pretty.
    pub format: LogFormat,
    /// A tracing filter such as `info` or `observation_publisher=debug,info`.
    pub level: String,
    /// How often `run` logs a progress line (rates, lag, acknowledged, dead letters); zero:
    /// never.
    #[serde(with = "humantime_serde_compat")]
    pub progress_interval: Duration,
}

impl Default for Logging {
    fn default() -> Self {
        Logging {
            format: LogFormat::Json,
            level: "info".into(),
            progress_interval: Duration::from_secs(60),
        }
    }
}

impl Logging {
    pub(crate) fn read(mut o: Obj<'_>, problems: &mut Problems) -> Self {
        let format = match o.string("format", problems).as_deref() {
            None | Some("json") => LogFormat::Json,
            Some("pretty") => LogFormat::Pretty,
            Some(other) => {
                problems.push(
                    &o.path_of("format"),
                    format_args!("unknown log format {other:?}; expected json or pretty"),
                );
                LogFormat::Json
            }
        };
        let level = o.string("level", problems).unwrap_or_else(|| "info".into());
        if let Err(why) = check_level(&level) {
            problems.push(&o.path_of("level"), why);
        }
        let progress_interval = o.duration_in(
            "progress_interval",
            Logging::default().progress_interval,
            &bounds::PROGRESS_INTERVAL,
            problems,
        );
        o.deny_unknown(problems);
        Logging {
            format,
            level,
            progress_interval,
        }
    }
}

/// The levels a `logging.level` directive may end in (any case, as tracing reads them).
const LOG_LEVELS: &str = "error, warn, info, debug, trace or off";

/// Checks a `logging.level` filter: a level, or comma-separated directives that each end in
/// one (`info,observation_publisher::pipeline=debug`). tracing's filter reads a bare word that
/// is not a level as a target whose events are all shown, and nothing else: `verbose` would
/// silence every log, start-up and errors included, so it is refused here instead.
pub(crate) fn check_level(filter: &str) -> Result<(), String> {
    let is_level = |l: &str| {
        ["error", "warn", "info", "debug", "trace", "off"]
            .iter()
            .any(|x| x.eq_ignore_ascii_case(l.trim()))
    };
    let directives: Vec<&str> = (filter.split(',').map(str::trim))
        .filter(|d| !d.is_empty())
        .collect();
    if directives.is_empty() {
        return Err(format!("empty; expected a level ({LOG_LEVELS})"));
    }
    for d in directives {
        let level = d.rsplit_once('=').map_or(d, |(_, l)| l);
        if !is_level(level) {
            return Err(if d.contains('=') {
                format!(
                    "directive {d:?} does not end in a level; expected target=LEVEL with LEVEL one of {LOG_LEVELS}"
                )
            } else {
                format!(
                    "{d:?} is not a level; expected {LOG_LEVELS}, or directives such as info,observation_publisher::pipeline=debug"
                )
            });
        }
    }
    tracing_subscriber::EnvFilter::builder()
        .parse(filter)
        .map(drop)
        .map_err(|e| format!("not a log filter ({e}); expected a level ({LOG_LEVELS}) or directives such as info,observation_publisher::pipeline=debug"))
}

/// Delivery guarantee towards BigQuery.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Delivery {
    /// Default stream; offsets committed after the append is acknowledged; a crash can leave
    /// duplicates.
    #[default]
    AtLeastOnce,
    /// One committed write stream per partition with explicit row offsets.
    ExactlyOnce,
}

impl Delivery {
    pub(crate) fn parse(s: &str) -> Option<Self> {
        match s {
            "at_least_once" => Some(Self::AtLeastOnce),
            "exactly_once" => Some(Self::ExactlyOnce),
            _ => None,
        }
    }
}

/// `server`: the HTTP port for `/metrics`, `/healthz`, `/readyz`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Server {
    /// Listen address; defaults to `0.0.0.0:<prometheus_port>` (8000).
    pub listen: String,
    /// How long a client has to send a request's headers, counted from when the server starts
    /// waiting for them (a new connection, or the previous response on a kept-alive one); then
    /// the connection is closed.
    #[serde(with = "humantime_serde_compat")]
    pub header_read_timeout: Duration,
    /// A connection on which no byte moves either way for this long is closed (a client that
    /// stops reading a response, or stalls in a body).
    #[serde(with = "humantime_serde_compat")]
    pub idle_timeout: Duration,
    /// Connections open at once. A new client is always accepted; when the port is full the
    /// oldest idle connection (no request being handled) of the peer holding the most
    /// connections is closed for it (`src/server/slots.rs`).
    pub max_connections: usize,
    /// Connections open at once from one IP address; a new one closes that address's oldest
    /// idle connection.
    pub max_connections_per_peer: usize,
}

impl Server {
    /// Default `header_read_timeout`.
    pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
    /// Default `idle_timeout`.
    pub const IDLE_TIMEOUT: Duration = Duration::from_secs(60);
    /// Default `max_connections`.
    pub const MAX_CONNECTIONS: usize = 64;
    /// Default `max_connections_per_peer`.
    pub const MAX_CONNECTIONS_PER_PEER: usize = 16;

    pub(crate) fn read(mut o: Obj<'_>, prometheus_port: u64, problems: &mut Problems) -> Self {
        let listen = o
            .string("listen", problems)
            .unwrap_or_else(|| format!("0.0.0.0:{prometheus_port}"));
        if listen.parse::<std::net::SocketAddr>().is_err() {
            problems.push(
                &o.path_of("listen"),
                format_args!("{listen:?} is not an address such as 0.0.0.0:8000"),
            );
        }
        let s = Server {
            listen,
            header_read_timeout: o.duration_in(
                "header_read_timeout",
                Self::HEADER_READ_TIMEOUT,
                &bounds::HTTP_TIMEOUT,
                problems,
            ),
            idle_timeout: o.duration_in(
                "idle_timeout",
                Self::IDLE_TIMEOUT,
                &bounds::HTTP_TIMEOUT,
                problems,
            ),
            max_connections: o.count_in(
                "max_connections",
                Self::MAX_CONNECTIONS as u64,
                &bounds::HTTP_CONNECTIONS,
                problems,
            ) as usize,
            max_connections_per_peer: o.count_in(
                "max_connections_per_peer",
                Self::MAX_CONNECTIONS_PER_PEER as u64,
                &bounds::HTTP_CONNECTIONS,
                problems,
            ) as usize,
        };
        o.deny_unknown(problems);
        s
    }
}

/// Where a consumer group with no committed offsets starts reading.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StartFrom {
    /// The beginning of each partition (default: nothing a model logged is skipped).
    Earliest,
    /// The end of each partition.
    Latest,
    /// The first offset at or after this time (milliseconds since the epoch).
    Timestamp(i64),
    /// The committed offsets of another consumer group (migration from Merlin's publisher).
    Group(String),
}

/// `consumer`: the publisher's Kafka-side behaviour.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Consumer {
    /// Where a new group starts. An explicit `auto.offset.reset` in Merlin's
    /// `additional_consumer_config` is honoured when this is not set.
    pub start_from: Option<StartFrom>,
    /// How long a shutdown or a partition revocation may wait for in-flight rows to be
    /// acknowledged and committed.
    #[serde(with = "humantime_serde_compat")]
    pub drain_timeout: Duration,
    /// How often acknowledged offsets are committed while running.
    #[serde(with = "humantime_serde_compat")]
    pub commit_interval: Duration,
    /// librdkafka `session.timeout.ms`.
    #[serde(with = "humantime_serde_compat")]
    pub session_timeout: Duration,
    /// The largest Kafka message the topic may carry (its `max.message.bytes`): every fetch may
    /// hold one, and `batching.max_log_bytes` defaults to [`LOG_BYTES_PER_MESSAGE_BYTE`] × it.
    pub max_message_bytes: usize,
    /// How the configured `group_id` is used ([`super::group`]).
    pub group: GroupMode,
    /// Static membership: `group.instance.id` from the pod's name (`POD_NAME`, else
    /// `HOSTNAME`), so a restarted pod takes its partitions back without a rebalance.
    pub static_membership: bool,
}

impl Default for Consumer {
    fn default() -> Self {
        Consumer {
            start_from: None,
            drain_timeout: Duration::from_secs(30),
            commit_interval: Duration::from_secs(5),
            session_timeout: Duration::from_secs(30),
            max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
            group: GroupMode::default(),
            static_membership: false,
        }
    }
}

impl Consumer {
    pub(crate) fn read(mut o: Obj<'_>, problems: &mut Problems) -> Self {
        let d = Self::default();
        let start_from = o.string("start_from", problems).and_then(|s| match s.as_str() {
            "earliest" => Some(StartFrom::Earliest),
            "latest" => Some(StartFrom::Latest),
            _ => {
                if let Some(g) = s.strip_prefix("group:") {
                    if !g.is_empty() {
                        return Some(StartFrom::Group(g.to_string()));
                    }
                }
                match humantime::parse_rfc3339_weak(&s) {
                    Ok(t) => {
                        let ms = t.duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0);
                        Some(StartFrom::Timestamp(ms))
                    }
                    Err(_) => {
                        problems.push(
                            &o.path_of("start_from"),
                            format_args!("{s:?}: expected earliest, latest, an RFC 3339 time or group:<name>"),
                        );
                        None
                    }
                }
            }
        });
        let c = Consumer {
            start_from,
            drain_timeout: o.duration_in(
                "drain_timeout",
                d.drain_timeout,
                &bounds::DRAIN_TIMEOUT,
                problems,
            ),
            commit_interval: o.duration_in(
                "commit_interval",
                d.commit_interval,
                &bounds::COMMIT_INTERVAL,
                problems,
            ),
            session_timeout: o.duration_in(
                "session_timeout",
                d.session_timeout,
                &bounds::SESSION_TIMEOUT,
                problems,
            ),
            max_message_bytes: o.bytes_in(
                "max_message_bytes",
                d.max_message_bytes as u64,
                &bounds::MESSAGE_BYTES,
                problems,
            ) as usize,
            group: o.string("group", problems).map_or(d.group, |s| {
                GroupMode::parse(&s).unwrap_or_else(|| {
                    let expected = GroupMode::VALUES;
                    problems.push(
                        &o.path_of("group"),
                        format_args!("{s:?}: expected {expected}"),
                    );
                    d.group
                })
            }),
            static_membership: o
                .bool("static_membership", problems)
                .unwrap_or(d.static_membership),
        };
        o.deny_unknown(problems);
        c
    }
}

/// Serializes durations as humantime text (`1s`, `5m`) in `check-config` output.
pub(crate) mod humantime_serde_compat {
    use std::time::Duration;

    pub(crate) fn serialize<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&humantime::format_duration(*d).to_string())
    }
}
