//! Configuration: Merlin's publisher YAML, unchanged, plus the publisher's own strict sections.
//!
//! # Sources and precedence (lowest first)
//! 1. built-in defaults;
//! 2. the YAML file (`--config`), keys at the top level or wrapped in `environment:` as Hydra
//!    writes them;
//! 3. environment variables `OBS_PUBLISHER__SECTION__KEY=value` (scalars; `__` nests, names are
//!    lower-cased: `OBS_PUBLISHER__BATCHING__MAX_ROWS=1000`);
//! 4. command-line flags (`--set section.key=value`, and the dedicated flags of each command).
//!
//! # Merlin's sections and ours
//! Merlin's keys (`project`, `model_id`, `model_version`, `inference_schema`,
//! `observation_source`, `observation_sinks`, `prometheus_port`) are read as Merlin's control
//! plane writes them: unknown keys are tolerated with a warning, enum names are upper case,
//! `model_version` may be a number (kept as its text), `score_threshold: null` means 0.5,
//! `feature_types` keeps its order. Our sections (`batching`, `dead_letter`, `local_sink`,
//! `consumer`, `server`, `logging`, `delivery`, `metrics`, `gen`) are strict: unknown keys are errors.
//!
//! # Validation
//! [`Config::from_value`] collects **every** problem and returns them together
//! ([`Problems`], exit code 2). Each command asks only for what it uses ([`Needs`]).
//! Secrets are never printed: [`Config::to_redacted_yaml`].

mod bounds;
mod feedback;
mod gen;
mod group;
mod load;
mod merlin;
mod origin;
mod ours;
pub mod preflight;
mod quality;
mod schema;
mod suggest;
mod understood;
mod value;

pub use bounds::{ARROW_STRING_LIMIT, MAX_APPEND_REQUEST_BYTES, MAX_CONNECTIONS};
pub use gen::{Dist, GenColumn, DEFAULT_NULLS};
pub use group::{kip848, per_version_name, Assignment, GroupMode, CLASSIC_ONLY_KEYS};
pub use load::{
    apply_env, apply_sets, load, load_layers, load_value, override_scrubber, redact,
    redact_collect, Loaded, ENV_PREFIX,
};
pub use merlin::{
    check_access_url, ArizeSink, BigQueryAuth, BigQuerySink, KafkaSource, MaxComputeSink,
    RetryConfig, SinkConfig, DEFAULT_ARIZE_CONNECT_TIMEOUT, DEFAULT_ARIZE_MAX_REQUEST_BYTES,
    DEFAULT_ARIZE_REQUEST_TIMEOUT, DEFAULT_ARIZE_URI, DEFAULT_CONNECTIONS,
    DEFAULT_MAX_INFLIGHT_BYTES, DEFAULT_MAX_REQUEST_BYTES, DEFAULT_REST_BASE_URL,
    DEFAULT_STORAGE_ENDPOINT, FORBIDDEN_CONSUMER_KEYS,
};
pub use merlin::{
    default_move_timeout, DEFAULT_MAXCOMPUTE_CONNECT_TIMEOUT, DEFAULT_MAXCOMPUTE_INTERVAL,
    DEFAULT_MAXCOMPUTE_REQUEST_TIMEOUT,
};
pub use origin::Origins;
pub use ours::{
    Batching, Consumer, DeadLetter, Delivery, LocalSink, LogFormat, Logging, Server, StartFrom,
    BATCHES_IN_FLIGHT, DEFAULT_MAX_FRAME_BYTES, DEFAULT_MAX_LOG_BYTES, DEFAULT_MAX_MESSAGE_BYTES,
    LOG_BYTES_PER_MESSAGE_BYTE,
};
pub use quality::{FeatureHistogram, MetricsConfig, MAX_BUCKETS};
pub use schema::{
    Column, ColumnType, FeatureType, InferenceSchema, ModelOutput, PREDICTION_LABEL_COLUMN,
    RANK_COLUMN,
};
pub use understood::{as_comments, merlin_keys, Understood};
pub use value::{parse_bytes, parse_duration, Problems};

use serde::Serialize;
use serde_yaml_ng::Value;
pub(crate) use value::{key_text, scalar_text, Obj};

/// What a command needs from the configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Needs {
    /// `observation_source` (Kafka).
    pub source: bool,
    /// At least one sink, all supported by `run`.
    pub sinks: bool,
    /// One BIGQUERY sink (`schema`).
    pub bigquery: bool,
}

impl Needs {
    /// `convert` and `gen`: project, model, version and inference schema only.
    pub const CONVERT: Needs = Needs {
        source: false,
        sinks: false,
        bigquery: false,
    };
    /// `schema`: plus one BIGQUERY sink.
    pub const SCHEMA: Needs = Needs {
        source: false,
        sinks: false,
        bigquery: true,
    };
    /// `run` and `check-config`: everything.
    pub const RUN: Needs = Needs {
        source: true,
        sinks: true,
        bigquery: false,
    };
}

/// The resolved configuration.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Config {
    /// Merlin project name.
    pub project: String,
    /// Merlin model name (Merlin calls it `model_id`).
    pub model_id: String,
    /// Merlin version id, as text; written to every row.
    pub model_version: String,
    /// The model's schema.
    pub inference_schema: InferenceSchema,
    /// Kafka source; `None` when the command does not need it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub observation_source: Option<KafkaSource>,
    /// Merlin sinks, in order.
    pub observation_sinks: Vec<SinkConfig>,
    /// Merlin's metrics port.
    pub prometheus_port: u64,
    /// Batching and in-flight limits.
    pub batching: Batching,
    /// Kafka-side behaviour: start position, drain deadline, commit interval.
    pub consumer: Consumer,
    /// Dead-letter target.
    pub dead_letter: DeadLetter,
    /// Embedded Parquet sink, when configured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub local_sink: Option<LocalSink>,
    /// HTTP listener.
    pub server: Server,
    /// Logging.
    pub logging: Logging,
    /// Delivery guarantee.
    pub delivery: Delivery,
    /// Optional quality metrics (off by default).
    pub metrics: MetricsConfig,
    /// `gen:` distributions per feature (only `gen` reads them).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub gen: Vec<GenColumn>,
}

impl Config {
    /// Builds the configuration from a layered YAML tree (see [`load_value`]), checking what
    /// `needs` asks for. Returns the config and the warnings (unknown keys in Merlin's sections),
    /// or every problem found.
    pub fn from_value(root: &Value, needs: Needs) -> Result<(Config, Vec<String>), Problems> {
        Config::read(root, needs).map(|(c, w)| (c, w.0))
    }

    /// Like [`Config::from_value`], the warnings with their key paths (for
    /// [`Problems::annotate`]). With a problem, the warnings (unknown keys in Merlin's
    /// sections) join the problems: a misspelt key is often why another one is missing.
    pub fn read(root: &Value, needs: Needs) -> Result<(Config, Problems), Problems> {
        let mut warnings = Problems::default();
        match Config::read_all(root, needs, &mut warnings) {
            Ok(c) => Ok((c, warnings)),
            Err(mut problems) => {
                feedback::hint_required(&mut problems, &warnings);
                problems.append(warnings);
                Err(problems)
            }
        }
    }

    fn read_all(root: &Value, needs: Needs, warnings: &mut Problems) -> Result<Config, Problems> {
        let mut problems = Problems::default();
        let mut o = Obj::new(Some(root), "", &mut problems);

        let project = o.req_string("project", &mut problems);
        let model_id = o.req_string("model_id", &mut problems);
        let model_version = o.req_string("model_version", &mut problems);
        let schema_obj = o.obj("inference_schema", &mut problems);
        let schema = InferenceSchema::read(schema_obj, &mut problems, warnings);

        let observation_source = if needs.source {
            let so = o.obj("observation_source", &mut problems);
            KafkaSource::read(so, &mut problems, warnings)
        } else {
            let _ = o.raw("observation_source");
            None
        };
        let sinks_raw = o.raw("observation_sinks");
        let observation_sinks = if needs.sinks || needs.bigquery {
            merlin::read_sinks(sinks_raw, "observation_sinks", &mut problems, warnings)
        } else {
            Vec::new()
        };
        let prometheus_port = o.u64("prometheus_port", &mut problems).unwrap_or(8000);
        if prometheus_port > u64::from(u16::MAX) {
            problems.push("prometheus_port", "must be a TCP port (0-65535)");
        }
        let consumer = Consumer::read(o.obj("consumer", &mut problems), &mut problems);
        let batching = Batching::read(
            o.obj("batching", &mut problems),
            consumer.max_message_bytes,
            &mut problems,
        );
        let dead_letter = DeadLetter::read(o.obj("dead_letter", &mut problems), &mut problems);
        let local_sink = LocalSink::read(o.obj("local_sink", &mut problems), &mut problems);
        let server = Server::read(
            o.obj("server", &mut problems),
            prometheus_port,
            &mut problems,
        );
        let logging = Logging::read(o.obj("logging", &mut problems), &mut problems);
        let delivery = match o.string("delivery", &mut problems) {
            None => Delivery::default(),
            Some(s) => Delivery::parse(&s).unwrap_or_else(|| {
                problems.push(
                    "delivery",
                    format_args!(
                        "unknown delivery mode {s:?}; expected at_least_once or exactly_once"
                    ),
                );
                Delivery::default()
            }),
        };
        let gen = gen::read(o.raw("gen"), schema.as_ref(), &mut problems);
        let metrics = MetricsConfig::read(
            o.obj("metrics", &mut problems),
            schema.as_ref(),
            &mut problems,
        );
        o.warn_unknown(warnings);

        if needs.sinks {
            if observation_sinks.is_empty() && local_sink.is_none() {
                problems.push(
                    "observation_sinks",
                    "no sink configured: add a BIGQUERY sink or a local_sink section",
                );
            }
            for (i, s) in observation_sinks.iter().enumerate() {
                match s {
                    SinkConfig::BigQuery(_) => {}
                    SinkConfig::Arize(_) => {
                        if let Some(why) = schema
                            .as_ref()
                            .and_then(|s| s.model_prediction_output.arize_unsupported())
                        {
                            problems.push(&format!("observation_sinks[{i}].type"), why);
                        }
                    }
                    // `access_url` is checked where the sink starts (`run`, exit 2): Merlin's
                    // own fixture has `access_url: url`, replaced in the pod by an environment
                    // variable, so `check-config` of the file as written accepts it.
                    SinkConfig::MaxCompute(_) => {}
                }
            }
        }
        if needs.sinks
            && delivery == Delivery::ExactlyOnce
            && !observation_sinks
                .iter()
                .any(|s| matches!(s, SinkConfig::BigQuery(_)))
        {
            problems.push("delivery", "exactly_once needs a BIGQUERY sink");
        }
        let bigquery_sinks: Vec<String> = observation_sinks
            .iter()
            .enumerate()
            .filter(|(_, s)| matches!(s, SinkConfig::BigQuery(_)))
            .map(|(i, _)| format!("observation_sinks[{i}]"))
            .collect();
        // A partition's commit metadata holds one stream position. Two exactly-once sinks
        // would both record theirs there; after a restart or rebalance both resume from the
        // one left, so one finalizes the other's stream: rows skipped (lost) or written twice.
        if needs.sinks && delivery == Delivery::ExactlyOnce && bigquery_sinks.len() > 1 {
            problems.push(
                "delivery",
                format_args!(
                    "exactly_once allows one BIGQUERY sink per publisher, found {} ({}): a \
                     partition's commit metadata holds one stream position, so after a restart \
                     or rebalance both sinks would resume from one checkpoint and lose or repeat \
                     rows; keep one BIGQUERY sink here and write the other table from a second \
                     publisher with its own group_id (or use delivery: at_least_once)",
                    bigquery_sinks.len(),
                    bigquery_sinks.join(", ")
                ),
            );
        }
        if needs.bigquery
            && !observation_sinks
                .iter()
                .any(|s| matches!(s, SinkConfig::BigQuery(_)))
        {
            problems.push(
                "observation_sinks",
                "no BIGQUERY sink configured (needed for the table schema)",
            );
        }
        if let Some(s) = &schema {
            validate_clustering(s, &observation_sinks, &mut problems);
        }
        for (key, v) in [("project", &project), ("model_id", &model_id)] {
            if v.chars().any(|c| c.is_control()) {
                problems.push(key, "must not contain control characters");
            }
        }
        validate_names(
            &project,
            &model_id,
            observation_source.as_ref(),
            &dead_letter,
            &observation_sinks,
            &mut problems,
        );
        if let Some(src) = &observation_source {
            group::check(src, &mut problems);
        }

        match schema {
            Some(inference_schema) if problems.is_empty() => Ok(Config {
                project,
                model_id,
                model_version,
                inference_schema,
                observation_source,
                observation_sinks,
                prometheus_port,
                batching,
                consumer,
                dead_letter,
                local_sink,
                server,
                logging,
                delivery,
                metrics,
                gen,
            }),
            _ => Err(problems),
        }
    }

    /// The first BIGQUERY sink, if any.
    pub fn bigquery(&self) -> Option<&BigQuerySink> {
        self.observation_sinks.iter().find_map(|s| match s {
            SinkConfig::BigQuery(b) => Some(b),
            _ => None,
        })
    }

    /// The resolved configuration as YAML, with every secret replaced by `"<redacted>"`
    /// ([`redact`]).
    pub fn to_redacted_yaml(&self) -> String {
        let mut v = serde_yaml_ng::to_value(self).expect("config serializes");
        redact(&mut v);
        serde_yaml_ng::to_string(&v).expect("yaml value serializes")
    }

    /// A scrubber for free text (log lines, errors) that hides every value
    /// [`Config::to_redacted_yaml`] hides.
    pub fn scrubber(&self) -> crate::redact::Scrubber {
        let mut v = serde_yaml_ng::to_value(self).expect("config serializes");
        let mut hidden = Vec::new();
        redact_collect(&mut v, &mut hidden);
        crate::redact::Scrubber::new(hidden)
    }
}

/// Names that end up in BigQuery and Kafka, checked against their rules ([`crate::naming`]):
/// the table id derived from project and model and the dataset of every BIGQUERY sink, the
/// source topic, the dead-letter topic and the consumer group.
fn validate_names(
    project: &str,
    model_id: &str,
    source: Option<&KafkaSource>,
    dead_letter: &DeadLetter,
    sinks: &[SinkConfig],
    problems: &mut Problems,
) {
    use crate::naming::{dataset_id_problem, group_problem, table_id_problem, topic_problem};
    let reported = |problems: &Problems, key: &str| problems.0.iter().any(|p| p.starts_with(key));
    for (i, sink) in sinks.iter().enumerate() {
        let SinkConfig::BigQuery(b) = sink else {
            continue;
        };
        let key = format!("observation_sinks[{i}].config.dataset");
        if let Some(why) = dataset_id_problem(&b.dataset) {
            if !reported(problems, &key) {
                problems.push(&key, format_args!("{:?}: {why}", b.dataset));
            }
        }
        if !project.is_empty() && !model_id.is_empty() {
            let table = crate::naming::table_id(project, model_id);
            if let Some(why) = table_id_problem(&table) {
                problems.push(
                    "project, model_id",
                    format_args!("they make the BigQuery table id {table:?}: {why}"),
                );
            }
        }
    }
    let Some(src) = source else {
        return;
    };
    let topic_key = "observation_source.config.topic";
    if let Some(why) = topic_problem(&src.topic) {
        if !reported(problems, topic_key) {
            problems.push(topic_key, format_args!("{:?}: {why}", src.topic));
        }
    }
    let group_key = "observation_source.config.group_id";
    if let Some(why) = group_problem(&src.group_id) {
        if !reported(problems, group_key) {
            problems.push(group_key, why);
        }
    }
    if let DeadLetter::Kafka { topic, .. } = dead_letter {
        let (key, dlq) = match topic {
            Some(t) => ("dead_letter.topic", t.clone()),
            None => (topic_key, format!("{}-dlq", src.topic)),
        };
        if topic.is_some() || topic_problem(&src.topic).is_none() {
            if let Some(why) = topic_problem(&dlq) {
                problems.push(key, format_args!("dead-letter topic {dlq:?}: {why}"));
            }
        }
    }
}

/// Names of the fixed (non-feature) columns, in table order.
pub fn fixed_columns(s: &InferenceSchema) -> [&str; 4] {
    [
        &s.session_id_column,
        &s.row_id_column,
        "request_timestamp",
        "model_version",
    ]
}

/// Checks column names: valid for BigQuery (flexible column names, see [`crate::naming`]), unique
/// regardless of case. `output` is `None` when the output class itself is invalid; the other
/// columns are still checked.
pub(crate) fn validate_columns(
    session_id_column: &str,
    row_id_column: &str,
    feature_types: &[(String, FeatureType)],
    output: Option<&ModelOutput>,
    problems: &mut Problems,
) {
    use crate::naming::column_name_problem;
    let mut all: Vec<(&str, String)> = Vec::new();
    for (key, name) in [
        ("inference_schema.session_id_column", session_id_column),
        ("inference_schema.row_id_column", row_id_column),
    ] {
        if let Some(why) = column_name_problem(name) {
            problems.push(key, format_args!("{name:?}: {why}"));
        }
    }
    for name in [
        session_id_column,
        row_id_column,
        "request_timestamp",
        "model_version",
    ] {
        all.push((name, format!("fixed column {name:?}")));
    }
    for (name, _) in feature_types {
        if let Some(why) = column_name_problem(name) {
            problems.push(&format!("inference_schema.feature_types.{name}"), why);
        }
        all.push((name, format!("feature {name:?}")));
    }
    let Some(out) = output else {
        return check_unique(&all, problems);
    };
    for c in out.score_columns() {
        if let Some(why) = column_name_problem(c) {
            problems.push(
                "inference_schema.model_prediction_output",
                format_args!("score column {c:?}: {why}"),
            );
        }
        all.push((c, format!("prediction column {c:?}")));
    }
    match out {
        ModelOutput::Binary { .. } | ModelOutput::Multiclass { .. } => all.push((
            PREDICTION_LABEL_COLUMN,
            format!("derived column {PREDICTION_LABEL_COLUMN:?}"),
        )),
        ModelOutput::Ranking { .. } => {
            all.push((RANK_COLUMN, format!("derived column {RANK_COLUMN:?}")))
        }
        ModelOutput::Regression { .. } => {}
    }
    check_unique(&all, problems);
}

/// Columns must be unique, and BigQuery compares names without regard to case.
fn check_unique(all: &[(&str, String)], problems: &mut Problems) {
    for i in 0..all.len() {
        for j in 0..i {
            if crate::naming::same_column(all[i].0, all[j].0) {
                let how = if all[i].0 == all[j].0 {
                    "is named like"
                } else {
                    "differs only in case from"
                };
                problems.push(
                    "inference_schema",
                    format_args!("{} {how} {}", all[i].1, all[j].1),
                );
            }
        }
    }
}

/// Clustering columns must be columns of the table and of a type BigQuery can cluster on.
fn validate_clustering(s: &InferenceSchema, sinks: &[SinkConfig], problems: &mut Problems) {
    let columns = s.columns();
    for (i, sink) in sinks.iter().enumerate() {
        let SinkConfig::BigQuery(b) = sink else {
            continue;
        };
        for name in &b.clustering {
            match columns
                .iter()
                .find(|c| crate::naming::same_column(&c.name, name))
            {
                None => problems.push(
                    &format!("observation_sinks[{i}].config.clustering"),
                    format_args!("{name:?} is not a column of the table"),
                ),
                Some(c) if c.ty == ColumnType::Float64 => problems.push(
                    &format!("observation_sinks[{i}].config.clustering"),
                    format_args!("{name:?} is a FLOAT column; BigQuery cannot cluster on FLOAT"),
                ),
                Some(_) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests;
