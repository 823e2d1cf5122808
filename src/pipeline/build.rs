//! Building the publisher's parts from its configuration: sinks, dead-letter target, consumer.
//! Each returns [`NotStarted`] with the exit code it means.

use super::state::Event;
use crate::backoff::Backoff;
use crate::config::{Config, DeadLetter as DeadLetterCfg, KafkaSource, SinkConfig};
use crate::deadletter::{self, OutcomeFn};
use crate::server::Health;
use crate::sink::arize::ArizeSink;
use crate::sink::bigquery::exactly_once::{ExactlyOnceSink, PartitionStarts};
use crate::sink::bigquery::sink::BigQueryTableSink;
use crate::sink::maxcompute::MaxComputeSink;
use crate::sink::parquet::ParquetSink;
use crate::sink::Sink;
use crate::sink::StartError;
use crate::source::{self, SourceContext};
use rdkafka::config::FromClientConfigAndContext;
use rdkafka::consumer::BaseConsumer;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Why the publisher did not start, and the exit code that means.
#[derive(Debug)]
pub(super) enum NotStarted {
    /// A configuration the environment refuses (a changed column type, a table of another
    /// model, exactly-once with `--replay`): exit 2.
    Config(String),
    /// Something needed at start-up failed (a port in use, an unusable dead-letter target):
    /// exit 1.
    Failed(String),
    /// Asked to stop before it was running: exit 0.
    Stopped(&'static str),
}

impl NotStarted {
    /// Logs the reason (and prints it on stderr) and returns the exit code.
    pub(super) fn report(self) -> ExitCode {
        match self {
            NotStarted::Config(m) => {
                tracing::error!(error = %m, "cannot start");
                eprintln!("{}", crate::telemetry::scrub(&m));
                ExitCode::from(2)
            }
            NotStarted::Failed(m) => {
                tracing::error!(error = %m, "cannot start");
                eprintln!("{}", crate::telemetry::scrub(&m));
                ExitCode::from(1)
            }
            NotStarted::Stopped(when) => {
                tracing::info!(when, "stopped before starting");
                ExitCode::SUCCESS
            }
        }
    }
}

/// Builds the configured sinks, in the configuration's order (the local Parquet sink first).
/// BigQuery and MaxCompute start-up (table creation or migration) is retried
/// while the service is unreachable; a configuration problem (a changed column type, a missing
/// dataset, MaxCompute's `access_url` not a URL) ends the process with exit code 2.
pub(super) fn sinks(
    cfg: &Config,
    starts: Option<&PartitionStarts>,
    rt: &tokio::runtime::Runtime,
    health: &Health,
    shutdown: &CancellationToken,
) -> Result<Vec<Box<dyn Sink>>, NotStarted> {
    let mut sinks: Vec<Box<dyn Sink>> = Vec::new();
    if let Some(local) = &cfg.local_sink {
        std::fs::create_dir_all(&local.path).map_err(|e| {
            NotStarted::Failed(format!("local_sink.path {}: {e}", local.path.display()))
        })?;
        sinks.push(Box::new(ParquetSink::new(local.clone())));
    }
    for sink in &cfg.observation_sinks {
        let s: Box<dyn Sink> = match sink {
            SinkConfig::Arize(arize) => Box::new(
                ArizeSink::new(cfg, arize)
                    .map_err(|m| NotStarted::Config(format!("ARIZE sink: {m}")))?,
            ),
            SinkConfig::MaxCompute(mc) => {
                Box::new(start_retrying("MaxCompute", rt, health, shutdown, || {
                    MaxComputeSink::start(cfg, mc, shutdown.clone())
                })?)
            }
            SinkConfig::BigQuery(bq) => match starts {
                Some(st) => Box::new(start_retrying("BigQuery", rt, health, shutdown, || {
                    ExactlyOnceSink::start(cfg, bq, Arc::clone(st))
                })?),
                None => Box::new(start_retrying("BigQuery", rt, health, shutdown, || {
                    BigQueryTableSink::start(cfg, bq)
                })?),
            },
        };
        sinks.push(s);
    }
    Ok(sinks)
}

/// Starts a sink, retrying while its service is unavailable (doubling waits up to a minute,
/// unready meanwhile, ready again once started); a configuration problem ends the process with
/// exit code 2.
fn start_retrying<S, F, Fut>(
    name: &str,
    rt: &tokio::runtime::Runtime,
    health: &Health,
    shutdown: &CancellationToken,
    mut start: F,
) -> Result<S, NotStarted>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<S, StartError>>,
{
    let mut waits = Backoff {
        initial: Duration::from_secs(1),
        max: Duration::from_secs(60),
    }
    .pauses();
    loop {
        match rt.block_on(start()) {
            Ok(s) => {
                *health
                    .sink_problem
                    .lock()
                    .unwrap_or_else(|e| e.into_inner()) = None;
                health.sinks_ok.store(true, Ordering::Relaxed);
                return Ok(s);
            }
            Err(StartError::Config(m)) => {
                return Err(NotStarted::Config(format!(
                    "{} sink: {m}",
                    name.to_ascii_uppercase()
                )))
            }
            Err(StartError::Unavailable(m)) => {
                let wait = waits.next().unwrap_or(Duration::from_secs(60));
                *health
                    .sink_problem
                    .lock()
                    .unwrap_or_else(|e| e.into_inner()) =
                    Some(format!("{name} not available at start-up (retrying): {m}"));
                health.sinks_ok.store(false, Ordering::Relaxed);
                tracing::warn!(error = %m, retry_in_s = wait.as_secs(), "{name} not available at start-up; retrying");
                let stopped = rt.block_on(async {
                    tokio::select! {
                        () = shutdown.cancelled() => true,
                        () = tokio::time::sleep(wait) => false,
                    }
                });
                if stopped {
                    return Err(NotStarted::Stopped("while waiting for a sink's service"));
                }
            }
        }
    }
}

/// The dead-letter target; its outcomes come back as events on the pipeline's channel.
pub(super) fn dead_letters(
    cfg: &Config,
    replay: Option<&Path>,
    events: mpsc::Sender<Event>,
) -> Result<Box<dyn deadletter::Target>, NotStarted> {
    let on_outcome: OutcomeFn = {
        let tx = Mutex::new(events);
        Arc::new(move |o| {
            if let Ok(tx) = tx.lock() {
                let _ = tx.send(Event::DeadLetter(o));
            }
        })
    };
    let dlq: Result<Box<dyn deadletter::Target>, String> =
        match (&cfg.dead_letter, &cfg.observation_source, replay) {
            (DeadLetterCfg::File { path }, _, _) => {
                deadletter::file::FileTarget::new(path, cfg.batching.max_frame_bytes, on_outcome)
                    .map(|t| Box::new(t) as Box<dyn deadletter::Target>)
                    .map_err(|e| format!("dead_letter.path {}: {e}", path.display()))
            }
            (DeadLetterCfg::Kafka { .. }, _, Some(r)) => {
                // Replaying a file: unless a file target is configured, keep dead letters beside it.
                let mut p = r.as_os_str().to_owned();
                p.push(".dlq");
                let path = PathBuf::from(p);
                tracing::info!(path = %path.display(), "replay: dead letters go to a file");
                deadletter::file::FileTarget::new(&path, cfg.batching.max_frame_bytes, on_outcome)
                    .map(|t| Box::new(t) as Box<dyn deadletter::Target>)
                    .map_err(|e| format!("{}: {e}", path.display()))
            }
            (
                DeadLetterCfg::Kafka {
                    topic: t,
                    max_message_bytes,
                },
                Some(src),
                None,
            ) => {
                let dlq_topic = t.clone().unwrap_or_else(|| format!("{}-dlq", src.topic));
                source::tokens(src).and_then(|tokens| {
                    deadletter::kafka::KafkaTarget::new(
                        &source::connection_config(src),
                        dlq_topic,
                        *max_message_bytes,
                        on_outcome,
                        tokens,
                    )
                    .map(|t| Box::new(t) as Box<dyn deadletter::Target>)
                    .map_err(|e| format!("dead-letter producer: {e}"))
                })
            }
            (DeadLetterCfg::Kafka { .. }, None, None) => {
                Err("observation_source is required".into())
            }
        };
    dlq.map_err(NotStarted::Failed)
}

/// The Kafka consumer, with the lag gauge fed from librdkafka's statistics.
pub(super) fn consumer(
    cfg: &Config,
    src: &KafkaSource,
    health: &Arc<Health>,
) -> Result<BaseConsumer<SourceContext>, NotStarted> {
    let lag_topic = src.topic.clone();
    let ctx = SourceContext::new(
        src.topic.clone(),
        Arc::clone(health),
        Box::new(move |stats| {
            if let Some(t) = stats.topics.get(&lag_topic) {
                let mut total = 0;
                for (p, ps) in &t.partitions {
                    if *p < 0 || ps.hi_offset < 0 {
                        continue;
                    }
                    let lag = if ps.committed_offset >= 0 {
                        ps.hi_offset - ps.committed_offset
                    } else {
                        ps.consumer_lag
                    };
                    if lag >= 0 {
                        total += lag;
                        super::events::ConsumerLag {
                            topic: &lag_topic,
                            partition: *p,
                            lag,
                        }
                        .emit();
                    }
                }
                super::progress::COUNTERS.lag(total);
            }
        }),
    );
    let instance =
        source::instance_id(cfg, |k| std::env::var(k).ok()).map_err(NotStarted::Config)?;
    let settings = source::consumer_config(cfg, src, instance.as_deref());
    let tokens = source::tokens(src).map_err(NotStarted::Config)?;
    let ctx = ctx.watching_protocol(src).with_tokens(tokens);
    BaseConsumer::from_config_and_context(&settings, ctx)
        .map_err(|e| NotStarted::Failed(format!("cannot create the Kafka consumer: {e}")))
}
