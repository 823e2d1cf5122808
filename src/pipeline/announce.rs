//! The start-up line: what `run` is about to do, on one line (brokers, topic, group and where
//! it starts, sinks, dead letters, the metrics address), so the first line of a pod's log
//! answers "what is this publisher wired to". The resolved configuration follows at debug.

use crate::config::{Config, DeadLetter, SinkConfig};

/// The sinks, as the start-up line names them (pure).
pub(crate) fn sinks(cfg: &Config) -> String {
    let mut out: Vec<String> = cfg
        .observation_sinks
        .iter()
        .map(|s| match s {
            SinkConfig::BigQuery(b) => format!("BIGQUERY {}.{}", b.project, b.dataset),
            SinkConfig::Arize(a) => format!("ARIZE {}", a.uri),
            SinkConfig::MaxCompute(m) => format!("MAXCOMPUTE {}.{}", m.project, m.dataset),
        })
        .collect();
    if let Some(l) = &cfg.local_sink {
        out.push(format!("Parquet files under {}", l.path.display()));
    }
    if out.is_empty() {
        "none".into()
    } else {
        out.join(", ")
    }
}

/// Where dead letters go, as the start-up line names it (pure).
pub(crate) fn dead_letters(cfg: &Config) -> String {
    match &cfg.dead_letter {
        DeadLetter::Kafka { topic, .. } => {
            let topic = topic
                .clone()
                .or_else(|| (cfg.observation_source.as_ref()).map(|s| format!("{}-dlq", s.topic)));
            format!("Kafka topic {}", topic.unwrap_or_else(|| "-".into()))
        }
        DeadLetter::File { path } => format!("file {}", path.display()),
    }
}

/// Logs the start-up line (and the configuration, secrets redacted, at debug).
pub(crate) fn starting(cfg: &Config, replay: Option<&std::path::Path>) {
    let (brokers, topic) = match (&cfg.observation_source, replay) {
        (_, Some(file)) => ("-".to_string(), format!("replay of {}", file.display())),
        (Some(s), None) => (s.bootstrap_servers.clone(), s.topic.clone()),
        (None, None) => ("-".into(), "-".into()),
    };
    let group = cfg.consumer_group().unwrap_or_else(|| "-".into());
    let (sinks, dead_letters) = (sinks(cfg), dead_letters(cfg));
    let metrics = format!("http://{}/metrics", cfg.server.listen);
    tracing::info!(
        version = env!("CARGO_PKG_VERSION"),
        brokers = %brokers,
        topic = %topic,
        group = %group,
        start = %cfg.start_text(),
        sinks = %sinks,
        dead_letters = %dead_letters,
        metrics = %metrics,
        delivery = ?cfg.delivery,
        "starting: {topic} on {brokers} in group {group} into {sinks}; dead letters to \
         {dead_letters}; metrics and probes at {metrics}"
    );
    tracing::debug!(config = %cfg.to_redacted_yaml(), "configuration (secrets redacted)");
}
