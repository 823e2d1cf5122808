//! `run`: the daemon. Wires the stages and operates them.
//!
//! ```text
//! pipeline thread:  Kafka poll ─▶ decode into the batcher ─▶ batch ──(bounded channel)──▶ sink task
//!                        ▲            │ rejected                                        │ all sinks ok
//!                        │            ▼                                                 ▼
//!                  commit acked ◀─ tracker ◀──── dead-letter acks ◀── DLQ target   Event::Acked
//! tokio:            sink task, HTTP (/metrics /healthz /readyz), signals, metrics upkeep
//! ```
//!
//! The consumer, the decoder, the batcher and the offset tracker live on one thread: decoding
//! reads librdkafka's buffer in place (no copy, no per-message channel hop), and the rebalance
//! callback, which librdkafka runs inside `poll` on that same thread, sees a consistent state.
//! Batches cross to the sink task over a bounded channel; acknowledgements come back over a
//! channel and are applied before new input. Offsets are committed explicitly, only for the
//! contiguous acknowledged prefix, periodically, on revoke and on drain.
//!
//! Backpressure: when the Arrow bytes of unacknowledged batches reach
//! `batching.max_inflight_bytes`, every assigned partition is paused (the consumer keeps
//! polling, so it stays in its group) and resumed below half the budget; librdkafka's prefetch
//! is sized to a quarter of the budget. Memory stays flat while a sink is down.
//!
//! Shutdown (SIGTERM/SIGINT): stop intake, flush the open batch, wait for the sinks and the
//! dead-letter target, commit, leave the group, exit 0, all within `consumer.drain_timeout`.

mod kafka;
mod replay;
mod sinks;
mod state;

use crate::batch::Batcher;
use crate::config::{Config, DeadLetter as DeadLetterCfg, Delivery, SinkConfig};
use crate::deadletter::{self, OutcomeFn};
use crate::metrics::names;
use crate::server::{self, Health};
use crate::sink::bigquery::{BigQueryTableSink, StartError};
use crate::sink::exactly_once::{ExactlyOnceSink, PartitionStarts};
use crate::sink::parquet::ParquetSink;
use crate::sink::Sink;
use crate::source::{self, SourceContext};
use crate::table::TableLayout;
use rdkafka::config::FromClientConfigAndContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use state::{Event, State};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Exit code of a run that could not start (port in use, sink or dead-letter target unusable).
const EXIT_FAILURE: u8 = 1;
/// Exit code of a configuration the sinks refuse (e.g. a changed column type).
const EXIT_USAGE: u8 = 2;

/// Builds the configured sinks. BigQuery start-up (table creation or migration) is retried
/// while BigQuery is unreachable; a configuration problem (a changed column type, a missing
/// dataset) ends the process with exit code 2.
fn build_sinks(
    cfg: &Config,
    starts: Option<&PartitionStarts>,
    rt: &tokio::runtime::Runtime,
    health: &Health,
    shutdown: &CancellationToken,
) -> Result<Vec<Box<dyn Sink>>, (u8, String)> {
    let mut sinks: Vec<Box<dyn Sink>> = Vec::new();
    if let Some(local) = &cfg.local_sink {
        std::fs::create_dir_all(&local.path).map_err(|e| {
            (
                EXIT_FAILURE,
                format!("local_sink.path {}: {e}", local.path.display()),
            )
        })?;
        sinks.push(Box::new(ParquetSink::new(local.clone())));
    }
    for sink in &cfg.observation_sinks {
        let SinkConfig::BigQuery(bq) = sink else {
            continue;
        };
        let mut wait = Duration::from_secs(1);
        loop {
            let started: Result<Box<dyn Sink>, StartError> = match starts {
                Some(st) => rt
                    .block_on(ExactlyOnceSink::start(cfg, bq, Arc::clone(st)))
                    .map(|s| Box::new(s) as Box<dyn Sink>),
                None => rt
                    .block_on(BigQueryTableSink::start(cfg, bq))
                    .map(|s| Box::new(s) as Box<dyn Sink>),
            };
            match started {
                Ok(s) => {
                    sinks.push(s);
                    health.sinks_ok.store(true, Ordering::Relaxed);
                    break;
                }
                Err(StartError::Config(m)) => {
                    return Err((EXIT_USAGE, format!("BIGQUERY sink: {m}")))
                }
                Err(StartError::Unavailable(m)) => {
                    health.sinks_ok.store(false, Ordering::Relaxed);
                    tracing::warn!(error = %m, retry_in_s = wait.as_secs(), "BigQuery not available at start-up; retrying");
                    let stopped = rt.block_on(async {
                        tokio::select! {
                            () = shutdown.cancelled() => true,
                            () = tokio::time::sleep(wait) => false,
                        }
                    });
                    if stopped {
                        return Err((0, "stopped while waiting for BigQuery".into()));
                    }
                    wait = (wait * 2).min(Duration::from_secs(60));
                }
            }
        }
    }
    Ok(sinks)
}

/// Runs the publisher until SIGTERM/SIGINT (or, with `replay`, until the file is consumed).
pub fn run(cfg: Config, replay: Option<PathBuf>) -> ExitCode {
    crate::telemetry::init(cfg.logging.format, &cfg.logging.level, cfg.scrubber());
    tracing::info!(version = env!("CARGO_PKG_VERSION"), config = %cfg.to_redacted_yaml(), "starting");
    let handle = match crate::metrics::install() {
        Ok(h) => h,
        Err(e) => {
            tracing::error!(error = %e, "cannot install the metrics recorder");
            return ExitCode::from(EXIT_FAILURE);
        }
    };
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!(error = %e, "cannot start the async runtime");
            return ExitCode::from(EXIT_FAILURE);
        }
    };
    let health = Health::new();
    let shutdown = CancellationToken::new();
    let hard_stop = CancellationToken::new();
    rt.spawn(crate::shutdown::on_signal(shutdown.clone()));

    // HTTP: metrics and probes.
    let listener = match rt.block_on(tokio::net::TcpListener::bind(&cfg.server.listen)) {
        Ok(l) => l,
        Err(e) => {
            tracing::error!(listen = %cfg.server.listen, error = %e, "cannot listen");
            return ExitCode::from(EXIT_FAILURE);
        }
    };
    let h2 = handle.clone();
    rt.spawn(server::serve(
        listener,
        Arc::clone(&health),
        Arc::new(move || h2.render()),
        hard_stop.clone(),
        cfg.server.clone(),
    ));
    let upkeep = handle.clone();
    let stop = hard_stop.clone();
    rt.spawn(async move {
        loop {
            tokio::select! {
                () = stop.cancelled() => break,
                () = tokio::time::sleep(Duration::from_secs(5)) => upkeep.run_upkeep(),
            }
        }
    });

    // Sinks.
    let starts: Option<PartitionStarts> =
        (cfg.delivery == Delivery::ExactlyOnce).then(Default::default);
    if starts.is_some() && replay.is_some() {
        eprintln!("delivery: exactly_once needs Kafka (checkpoints live in the offset commits); --replay cannot use it");
        return ExitCode::from(EXIT_USAGE);
    }
    let sinks = match build_sinks(&cfg, starts.as_ref(), &rt, &health, &shutdown) {
        Ok(s) => s,
        Err((code, e)) => {
            tracing::error!(error = %e, "cannot start the sinks");
            eprintln!("{}", crate::telemetry::scrub(&e.to_string()));
            return ExitCode::from(code);
        }
    };
    // Readiness follows the sinks' own connection health (they retry inside a write).
    let watches: Vec<_> = sinks.iter().filter_map(|s| s.health()).collect();
    if !watches.is_empty() {
        let h = Arc::clone(&health);
        let stop = hard_stop.clone();
        rt.spawn(async move {
            loop {
                let ok = watches.iter().all(|w| *w.borrow());
                h.sink_streams_ok.store(ok, Ordering::Relaxed);
                tokio::select! {
                    () = stop.cancelled() => break,
                    () = tokio::time::sleep(Duration::from_millis(500)) => {}
                }
            }
        });
    }
    let (sink_tx, sink_rx) = tokio::sync::mpsc::channel(2);
    let (ev_tx, ev_rx) = mpsc::channel::<Event>();
    let labels = sinks::ModelLabels {
        model_id: cfg.model_id.clone(),
        model_version: cfg.model_version.clone(),
        project: cfg.project.clone(),
    };
    let sink_task = rt.spawn(sinks::run(
        sink_rx,
        sinks,
        ev_tx.clone(),
        Arc::clone(&health),
        hard_stop.clone(),
        labels,
        cfg.observation_source
            .as_ref()
            .map_or_else(|| "replay".to_string(), |s| s.topic.clone()),
    ));

    // Dead letters.
    let on_outcome: OutcomeFn = {
        let tx = Mutex::new(ev_tx);
        Arc::new(move |o| {
            if let Ok(tx) = tx.lock() {
                let _ = tx.send(Event::DeadLetter(o));
            }
        })
    };
    let topic = cfg
        .observation_source
        .as_ref()
        .map_or_else(|| "replay".to_string(), |s| s.topic.clone());
    let dlq: Result<Box<dyn deadletter::Target>, String> =
        match (&cfg.dead_letter, &cfg.observation_source, &replay) {
            (DeadLetterCfg::File { path }, _, _) => {
                deadletter::file::FileTarget::new(path, on_outcome)
                    .map(|t| Box::new(t) as Box<dyn deadletter::Target>)
                    .map_err(|e| format!("dead_letter.path {}: {e}", path.display()))
            }
            (DeadLetterCfg::Kafka { .. }, _, Some(r)) => {
                // Replaying a file: unless a file target is configured, keep dead letters beside it.
                let mut p = r.as_os_str().to_owned();
                p.push(".dlq");
                let path = PathBuf::from(p);
                tracing::info!(path = %path.display(), "replay: dead letters go to a file");
                deadletter::file::FileTarget::new(&path, on_outcome)
                    .map(|t| Box::new(t) as Box<dyn deadletter::Target>)
                    .map_err(|e| format!("{}: {e}", path.display()))
            }
            (DeadLetterCfg::Kafka { topic: t }, Some(src), None) => {
                let dlq_topic = t.clone().unwrap_or_else(|| format!("{}-dlq", src.topic));
                deadletter::kafka::KafkaTarget::new(
                    &source::connection_config(src),
                    dlq_topic,
                    on_outcome,
                )
                .map(|t| Box::new(t) as Box<dyn deadletter::Target>)
                .map_err(|e| format!("dead-letter producer: {e}"))
            }
            (DeadLetterCfg::Kafka { .. }, None, None) => {
                Err("observation_source is required".into())
            }
        };
    let dlq = match dlq {
        Ok(d) => d,
        Err(e) => {
            tracing::error!(error = %e, "cannot start the dead-letter target");
            return ExitCode::from(EXIT_FAILURE);
        }
    };
    health
        .dead_letter_ok
        .store(dlq.is_ready(), Ordering::Relaxed);

    let layout = Arc::new(TableLayout::from_config(&cfg));
    let batcher = Batcher::new(layout, cfg.batching.clone());
    let mut state = State::new(
        topic.clone(),
        batcher,
        Arc::clone(&health),
        ev_rx,
        sink_tx,
        dlq,
        cfg.batching.max_inflight_bytes,
    );
    if let Some(st) = &starts {
        state.set_starts(Arc::clone(st));
    }
    let state = Arc::new(Mutex::new(state));

    let drained = match replay {
        Some(path) => {
            health.joined.store(true, Ordering::Relaxed);
            health.topic_exists.store(true, Ordering::Relaxed);
            let (s, sd, d, max_frame) = (
                Arc::clone(&state),
                shutdown.clone(),
                cfg.consumer.drain_timeout,
                cfg.batching.max_frame_bytes,
            );
            std::thread::Builder::new()
                .name("pipeline".into())
                .spawn(move || replay::run(&path, s, sd, d, max_frame))
                .map(|t| t.join().unwrap_or(false))
                .unwrap_or(false)
        }
        None => {
            let src = cfg
                .observation_source
                .clone()
                .expect("validated: run needs observation_source");
            let lag_topic = src.topic.clone();
            let ctx = SourceContext::new(
                src.topic.clone(),
                Arc::clone(&health),
                Box::new(move |stats| {
                    if let Some(t) = stats.topics.get(&lag_topic) {
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
                                metrics::gauge!(names::CONSUMER_LAG, names::TOPIC => lag_topic.clone(), names::PARTITION => p.to_string())
                                    .set(lag as f64);
                            }
                        }
                    }
                }),
            );
            let consumer = match BaseConsumer::from_config_and_context(
                &source::consumer_config(&cfg, &src),
                ctx,
            ) {
                Ok(c) => c,
                Err(e) => {
                    tracing::error!(error = %e, "cannot create the Kafka consumer");
                    return ExitCode::from(EXIT_FAILURE);
                }
            };
            let generation = Arc::new(AtomicU64::new(0));
            let session = cfg.consumer.session_timeout;
            let revoke_timeout = cfg.consumer.drain_timeout.min(session / 2);
            consumer.context().set_listener(Arc::new(kafka::Listener {
                state: Arc::clone(&state),
                topic: src.topic.clone(),
                revoke_timeout,
                start_from: cfg.consumer.start_from.clone(),
                connection: source::connection_config(&src),
                generation: Arc::clone(&generation),
                exactly_once: starts.is_some(),
                pending_metadata: Mutex::new(Default::default()),
            }));
            let loop_cfg = kafka::KafkaLoop {
                topic: src.topic.clone(),
                commit_interval: cfg.consumer.commit_interval,
                drain_timeout: cfg.consumer.drain_timeout,
            };
            let (s, h, sd) = (Arc::clone(&state), Arc::clone(&health), shutdown.clone());
            std::thread::Builder::new()
                .name("pipeline".into())
                .spawn(move || kafka::run(consumer, s, h, generation, loop_cfg, sd))
                .map(|t| t.join().unwrap_or(false))
                .unwrap_or(false)
        }
    };
    hard_stop.cancel();
    let _ = rt.block_on(sink_task);
    rt.shutdown_timeout(Duration::from_secs(5));
    if !drained {
        tracing::warn!("stopped before every row was acknowledged; unacknowledged offsets were not committed and will be read again");
    }
    tracing::info!("stopped");
    ExitCode::SUCCESS
}
