//! `run`: the daemon. Wires the stages and operates them.
//!
//! ```text
//! pipeline thread:  Kafka poll ─▶ decode into the batcher ─▶ batch ──(bounded channel)──▶ sink task
//!                        ▲            │ rejected                                        │ all sinks ok
//!                        │            ▼                                                 ▼
//!                  commit acked ◀─ ledger ◀───── dead-letter acks ◀── DLQ target   Event::Acked
//! tokio:            sink task, HTTP (/metrics /healthz /readyz), signals, metrics upkeep
//! ```
//!
//! The consumer, the decoder, the batcher and the ledger (`ledger.rs`: every commit decision)
//! live on one thread: decoding
//! reads librdkafka's buffer in place (no copy, no per-message channel hop), and the rebalance
//! callback, which librdkafka runs inside `poll` on that same thread, sees a consistent state.
//! Batches cross to the sink task over a bounded channel; acknowledgements come back over a
//! channel and are applied before new input. Offsets are committed explicitly, only for the
//! contiguous acknowledged prefix, periodically, on revoke and on drain; the periodic commits
//! (and exactly-once stream registrations) go through a committer thread, because a commit
//! waits for a pending rebalance round (`state/commits.rs`).
//!
//! Backpressure: when the Arrow bytes of unacknowledged batches, with dead letters waiting and
//! the bookkeeping of messages not yet committable (staged rows'), reach
//! `batching.max_inflight_bytes`, every assigned partition is paused (the consumer keeps
//! polling, so it stays in its group) and resumed below half the budget; librdkafka's prefetch
//! (its queue and one fetch response) is sized to a quarter of the budget. Memory stays flat
//! while a sink is down.
//!
//! Shutdown (SIGTERM/SIGINT): stop intake, flush the open batch, wait for the sinks and the
//! dead-letter target, commit, leave the group, exit 0, all within `consumer.drain_timeout`.
//! Exit 1 if the drain did not finish, 101 if anything panicked (`crash.rs`).

mod announce;
mod build;
mod checkpoints;
mod crash;
mod events;
mod intake;
mod kafka;
mod lanes;
mod ledger;
mod letters;
mod messages;
mod progress;
mod replay;
mod sinks;
mod start_from;
mod state;

use crate::batch::Batcher;
use crate::config::{Config, Delivery, KafkaSource};
use crate::server::{self, Health};
use crate::sink::bigquery::exactly_once::PartitionStarts;
use crate::sink::RevokeHook;
use crate::source::SourceContext;
use crate::table::TableLayout;
use build::NotStarted;
use rdkafka::consumer::{BaseConsumer, Consumer};
use state::{Event, State};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Runs the publisher until SIGTERM/SIGINT (or, with `replay`, until the file is consumed):
/// build every part, start the pipeline thread, join it.
pub fn run(cfg: Config, replay: Option<PathBuf>) -> ExitCode {
    crate::telemetry::init(cfg.logging.format, &cfg.logging.level, cfg.scrubber());
    announce::starting(&cfg, replay.as_deref());
    match Publisher::build(cfg, replay) {
        Ok(p) => p.start().join(),
        Err(e) => e.report(),
    }
}

/// Every part, built and connected, nothing consuming yet.
struct Publisher {
    cfg: Config,
    rt: tokio::runtime::Runtime,
    health: Arc<Health>,
    shutdown: CancellationToken,
    hard_stop: CancellationToken,
    state: Arc<Mutex<State>>,
    exactly_once: bool,
    sink_task: tokio::task::JoinHandle<()>,
    intake: Intake,
    /// The staging sinks' hooks, for the rebalance listener.
    revoke_hooks: Vec<RevokeHook>,
}

/// Where the pipeline thread reads logs from.
enum Intake {
    /// A length-delimited file (`run --replay`).
    Replay(PathBuf),
    /// The model version's topic; the sender is for the committer thread's answers.
    Kafka(
        Box<BaseConsumer<SourceContext>>,
        KafkaSource,
        mpsc::Sender<Event>,
    ),
}

/// The pipeline thread running; [`Running::join`] waits for it to drain.
struct Running {
    rt: tokio::runtime::Runtime,
    health: Arc<Health>,
    hard_stop: CancellationToken,
    sink_task: tokio::task::JoinHandle<()>,
    pipeline: std::io::Result<std::thread::JoinHandle<bool>>,
}

impl Publisher {
    fn build(cfg: Config, replay: Option<PathBuf>) -> Result<Publisher, NotStarted> {
        let handle = crate::metrics::install(&crate::metrics::Model {
            project: &cfg.project,
            model_id: &cfg.model_id,
            model_version: &cfg.model_version,
        })
        .map_err(|e| NotStarted::Failed(format!("cannot install the metrics recorder: {e}")))?;
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .map_err(|e| NotStarted::Failed(format!("cannot start the async runtime: {e}")))?;
        let health = Health::new();
        let shutdown = CancellationToken::new();
        let hard_stop = CancellationToken::new();
        crash::install(Arc::clone(&health), shutdown.clone());
        rt.spawn(crate::shutdown::on_signal(shutdown.clone()));

        // HTTP: metrics and probes.
        let listener = rt
            .block_on(tokio::net::TcpListener::bind(&cfg.server.listen))
            .map_err(|e| {
                NotStarted::Failed(format!("cannot listen on {}: {e}", cfg.server.listen))
            })?;
        let render = handle.clone();
        let readiness = Arc::clone(&health);
        rt.spawn(server::serve(
            listener,
            Arc::clone(&health),
            Arc::new(move || {
                crate::metrics::startup::resident_memory();
                crate::metrics::process::collect();
                crate::metrics::startup::ready(readiness.is_ready());
                render.render() + &crate::metrics::quality::render()
            }),
            hard_stop.clone(),
            cfg.server.clone(),
        ));
        let stop = hard_stop.clone();
        rt.spawn(async move {
            loop {
                tokio::select! {
                    () = stop.cancelled() => break,
                    () = tokio::time::sleep(Duration::from_secs(5)) => handle.run_upkeep(),
                }
            }
        });
        rt.spawn(progress::report(
            cfg.logging.progress_interval,
            hard_stop.clone(),
        ));

        // Sinks.
        let starts: Option<PartitionStarts> =
            (cfg.delivery == Delivery::ExactlyOnce).then(Default::default);
        if starts.is_some() && replay.is_some() {
            return Err(NotStarted::Config("delivery: exactly_once needs Kafka (checkpoints live in the offset commits); --replay cannot use it".into()));
        }
        let sinks = build::sinks(&cfg, starts.as_ref(), &rt, &health, &shutdown)?;
        let revoke_hooks: Vec<RevokeHook> = sinks.iter().filter_map(|s| s.revoke_hook()).collect();
        // Readiness follows the sinks' own connection health (they retry inside a write) and
        // what they report stuck.
        let watches: Vec<_> = sinks.iter().filter_map(|s| s.health()).collect();
        let stuck: Vec<_> = sinks.iter().filter_map(|s| s.stuck()).collect();
        if !watches.is_empty() || !stuck.is_empty() {
            let h = Arc::clone(&health);
            let stop = hard_stop.clone();
            rt.spawn(async move {
                loop {
                    let ok = watches.iter().all(|w| *w.borrow());
                    h.sink_streams_ok.store(ok, Ordering::Relaxed);
                    h.set_stuck(stuck.iter().filter_map(|w| w.borrow().clone()).collect());
                    tokio::select! {
                        () = stop.cancelled() => break,
                        () = tokio::time::sleep(Duration::from_millis(500)) => {}
                    }
                }
            });
        }
        let (sink_tx, sink_rx) = tokio::sync::mpsc::channel(2);
        let (ev_tx, ev_rx) = mpsc::channel::<Event>();
        if let Some(st) = &starts {
            // Exactly-once: new streams come to the pipeline as events on its channel.
            let tx = ev_tx.clone();
            let _ = st
                .registrar
                .set(Box::new(move |r| tx.send(Event::Register(r)).is_ok()));
        }
        let topic = cfg
            .observation_source
            .as_ref()
            .map_or_else(|| "replay".to_string(), |s| s.topic.clone());
        let sink_count = sinks.len();
        let sink_names: Vec<&'static str> = sinks.iter().map(|s| s.name()).collect();
        let sink_task = rt.spawn(sinks::run(
            sink_rx,
            sinks,
            ev_tx.clone(),
            Arc::clone(&health),
            hard_stop.clone(),
            events::ModelLabels {
                model_id: cfg.model_id.clone(),
                model_version: cfg.model_version.clone(),
                project: cfg.project.clone(),
            },
            topic.clone(),
        ));

        if let Some(src) = cfg.observation_source.as_ref().filter(|_| replay.is_none()) {
            // A setting the token source refuses is a configuration error (exit 2), whichever
            // Kafka client would have met it first.
            crate::source::tokens(src).map_err(build::NotStarted::Config)?;
        }
        let commit_events = ev_tx.clone();
        let dlq = build::dead_letters(&cfg, replay.as_deref(), ev_tx)?;
        health
            .dead_letter_ok
            .store(dlq.is_ready(), Ordering::Relaxed);
        let layout = Arc::new(TableLayout::from_config(&cfg));
        crate::metrics::quality::register(&layout, &sink_names, &cfg.metrics.feature_histograms);
        crate::metrics::startup::register_sink_series(
            &sink_names,
            &crate::sink::SinkErrorKind::ALL.map(|k| k.code()),
        );
        crate::metrics::startup::register_dead_letter_series(
            &crate::deadletter::Failure::ALL.map(|f| (f.code(), f.retryable())),
        );
        crate::metrics::startup::memory_bound(
            crate::footprint::Footprint::of(&cfg, replay.is_none()).bound(),
        );
        let batcher = Batcher::new(layout, cfg.batching.clone());
        let exactly_once = starts.is_some();
        let mut state = State::new(
            topic,
            sink_count,
            batcher,
            Arc::clone(&health),
            ev_rx,
            sink_tx,
            dlq,
            cfg.batching.max_inflight_bytes,
            starts,
        );
        // The same hooks move staged rows early when their bookkeeping fills half the budget.
        state.set_staging_hooks(revoke_hooks.clone());
        let intake = match (replay, &cfg.observation_source) {
            (Some(path), _) => Intake::Replay(path),
            (None, Some(src)) => {
                let consumer = Box::new(build::consumer(&cfg, src, &health)?);
                Intake::Kafka(consumer, src.clone(), commit_events)
            }
            (None, None) => {
                return Err(NotStarted::Config("observation_source is required".into()))
            }
        };
        Ok(Publisher {
            intake,
            cfg,
            rt,
            health,
            shutdown,
            hard_stop,
            state: Arc::new(Mutex::new(state)),
            exactly_once,
            sink_task,
            revoke_hooks,
        })
    }

    /// Starts the pipeline thread: the replay of a file, or the Kafka loop.
    fn start(self) -> Running {
        let Publisher {
            cfg,
            rt,
            health,
            shutdown,
            hard_stop,
            state,
            exactly_once,
            sink_task,
            intake,
            revoke_hooks,
        } = self;
        let thread = std::thread::Builder::new().name("pipeline".into());
        let drain = cfg.consumer.drain_timeout;
        let pipeline = match intake {
            Intake::Replay(path) => {
                health.joined.store(true, Ordering::Relaxed);
                health.topic_exists.store(true, Ordering::Relaxed);
                let max_frame = cfg.batching.max_frame_bytes;
                thread.spawn(move || replay::run(&path, state, shutdown, drain, max_frame))
            }
            Intake::Kafka(consumer, src, commit_events) => {
                let start = cfg.start_from();
                let tokens = crate::source::tokens(&src).ok().flatten();
                let other_group = start_from::other_group_reader(
                    start.as_ref(),
                    &crate::source::connection_config(&src),
                    tokens.as_ref(),
                )
                .map(Arc::new);
                consumer.context().set_listener(Arc::new(kafka::Listener {
                    state: Arc::clone(&state),
                    topic: src.topic.clone(),
                    revoke_timeout: drain.min(cfg.consumer.session_timeout / 2),
                    other_group: other_group.clone(),
                    start_from: start.clone(),
                    exactly_once,
                    revoke_hooks,
                }));
                let loop_cfg = kafka::KafkaLoop {
                    topic: src.topic,
                    drain_timeout: drain,
                    settings: state::Settings {
                        commit_interval: cfg.consumer.commit_interval,
                        other_group,
                        start_from: start,
                    },
                    commit_events,
                };
                thread.spawn(move || kafka::run(*consumer, state, loop_cfg, shutdown))
            }
        };
        Running {
            rt,
            health,
            hard_stop,
            sink_task,
            pipeline,
        }
    }
}

impl Running {
    /// Waits for the pipeline to drain, then stops the sink task and the runtime. Exit 0 only
    /// when everything read was acknowledged and nothing panicked ([`crash::Outcome`]).
    fn join(self) -> ExitCode {
        let drained = self
            .pipeline
            .map(|t| t.join().unwrap_or(false))
            .unwrap_or(false);
        self.hard_stop.cancel();
        let _ = self.rt.block_on(self.sink_task);
        self.rt.shutdown_timeout(Duration::from_secs(5));
        let crashes = self.health.crashes();
        let outcome = crash::Outcome::of(drained, crashes.len());
        match outcome {
            crash::Outcome::Clean => tracing::info!("stopped"),
            crash::Outcome::Unfinished => tracing::error!(
                exit_code = outcome.code(),
                "stopped before every row was acknowledged; unacknowledged offsets were not committed and will be read again"
            ),
            crash::Outcome::Crashed => tracing::error!(
                exit_code = outcome.code(),
                crashes = %crashes.join("; "),
                "stopped after a crash"
            ),
        }
        ExitCode::from(outcome.code())
    }
}
