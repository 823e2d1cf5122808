//! The chaos suite's harness (`scripts/chaos` builds and runs it): a steady load of logs with
//! unique ids into a multi-partition topic, two publishers in one consumer group writing to the
//! BigQuery emulator, and a schedule of faults while the load runs — SIGKILLs and restarts, a
//! scale-down and up, BigQuery unreachable, gRPC faults on AppendRows, a Kafka connection cut.
//! At the end it waits for lag 0, counts every row, and prints one table. The exit code is 1
//! if anything was lost, a malformed log is missing from the dead-letter topic, a publisher
//! exited on its own, offsets advanced while the sink was down, RSS passed its limit, or (in
//! exactly_once mode) a row landed twice.
//!
//! at_least_once runs against tansu (started by `scripts/chaos`), reached through a TCP proxy
//! that tansu advertises, so the proxy can cut the publishers off. exactly_once runs against
//! librdkafka's mock cluster hosted in this process (tansu drops commit metadata), and the Kafka
//! cut takes its broker down.

mod audit;
mod broker;
mod fleet;
mod load;
mod report;
mod schedule;
mod tcp_proxy;

#[allow(dead_code)]
#[path = "../../tests/it/bigquery/proxy.rs"]
mod grpc_proxy;

use broker::{free_port, socket, Broker};
use clap::Parser;
use grpc_proxy::{Fault, Proxy, Script};
use observation_publisher::config::{Config, Needs};
use observation_publisher::sink::bigquery::table::RestOptions;
use observation_publisher::sink::bigquery::{TableManager, TableSpec};
use rdkafka::mocking::MockCluster;
use schedule::{Action, Step};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tcp_proxy::TcpProxy;

const PROJECT: &str = "test-proj";

/// Fault-injection run over the whole pipeline (see the crate docs).
#[derive(Parser)]
struct Args {
    /// How long the load runs, in minutes (faults are spread over it).
    #[arg(long, default_value_t = 10.0)]
    minutes: f64,
    /// Delivery mode of the publishers.
    #[arg(long, default_value = "at_least_once", value_parser = ["at_least_once", "exactly_once"])]
    delivery: String,
    /// The observation-publisher binary.
    #[arg(long)]
    bin: PathBuf,
    /// Where run directories (config, publisher logs, report) go.
    #[arg(long, default_value = "target/chaos")]
    work: PathBuf,
    /// Logs per second.
    #[arg(long, default_value_t = 150)]
    rate: u32,
    /// Partitions of the topic.
    #[arg(long, default_value_t = 4)]
    partitions: i32,
    /// tansu's listener (at_least_once); tansu must advertise `--kafka-proxy`.
    #[arg(long, default_value = "127.0.0.1:19392")]
    kafka: SocketAddr,
    /// Where the Kafka proxy listens.
    #[arg(long, default_value = "127.0.0.1:19393")]
    kafka_proxy: SocketAddr,
    /// The emulator's REST base URL.
    #[arg(long, env = "BQ_REST", default_value = "http://127.0.0.1:19050")]
    bq_rest: String,
    /// The emulator's gRPC URL.
    #[arg(long, env = "BQ_GRPC", default_value = "http://127.0.0.1:19060")]
    bq_grpc: String,
    /// Largest RSS a publisher may reach, MiB.
    #[arg(long, default_value_t = 256)]
    max_rss_mib: u64,
}

/// The publishers' configuration: the demo model, this run's topic, group and dataset, BigQuery
/// through the cuttable proxies, dead letters to `<topic>-dlq`.
fn publisher_yaml(
    bootstrap: &str,
    topic: &str,
    group: &str,
    dataset: &str,
    sink: (SocketAddr, SocketAddr),
    exactly_once: bool,
) -> Result<String, String> {
    let base = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/config/local.yaml"))
        .map_err(|e| format!("config/local.yaml: {e}"))?;
    let mut y: String = base
        .lines()
        .take_while(|l| !l.starts_with("observation_source:"))
        .map(|l| format!("{l}\n"))
        .collect();
    let (grpc, rest) = sink;
    // The mock cluster enforces Kafka's minimum session timeout; tansu takes less.
    let session = if exactly_once { "6s" } else { "2s" };
    let delivery = if exactly_once {
        "exactly_once"
    } else {
        "at_least_once"
    };
    let _ = write!(
        y,
        "observation_source:\n  type: KAFKA\n  config:\n    topic: {topic}\n    bootstrap_servers: {bootstrap}\n    group_id: {group}\n\
         observation_sinks:\n- type: BIGQUERY\n  config:\n    project: {PROJECT}\n    dataset: {dataset}\n    ttl_days: 14\n\
         \x20   storage_endpoint: http://{grpc}\n    rest_base_url: http://{rest}/bigquery/v2\n    auth: none\n    emulator_compat: true\n\
         dead_letter:\n  target: kafka\n  topic: {topic}-dlq\nbatching:\n  linger: 500ms\n\
         consumer:\n  session_timeout: {session}\n  commit_interval: 1s\n  drain_timeout: 20s\n\
         logging:\n  format: json\ndelivery: {delivery}\n"
    );
    Ok(y)
}

async fn run(args: Args) -> Result<bool, String> {
    let exactly_once = args.delivery == "exactly_once";
    let id = format!("{:x}", load::now_micros() / 1000);
    let dir = std::path::absolute(args.work.join(format!("{}-{id}", args.delivery)))
        .map_err(|e| e.to_string())?;
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let topic = format!("chaos-{id}");
    let dlq = format!("{topic}-dlq");
    let group = format!("chaos-{id}");
    let dataset = format!("chaos_{id}");
    let load_for = Duration::from_secs_f64(args.minutes * 60.0);

    let broker = if exactly_once {
        Broker::Mock(MockCluster::new(1).map_err(|e| format!("mock cluster: {e}"))?)
    } else {
        Broker::Tansu(
            TcpProxy::start(args.kafka_proxy, args.kafka)
                .await
                .map_err(|e| format!("kafka proxy on {}: {e}", args.kafka_proxy))?,
        )
    };
    let bootstrap = broker.bootstrap();
    broker
        .create_topics(&[&topic, &dlq], args.partitions)
        .await?;

    let rest = format!("{}/bigquery/v2", args.bq_rest.trim_end_matches('/'));
    let tables = TableManager::new(RestOptions {
        base_url: rest,
        credentials: None,
        emulator_compat: true,
        timeout: Duration::from_secs(120),
    })
    .map_err(|e| e.to_string())?;
    tables
        .create_dataset(PROJECT, &dataset)
        .await
        .map_err(|e| format!("emulator at {}: {e}", args.bq_rest))?;
    let faults = Proxy::start(
        "127.0.0.1:0".parse().map_err(|e| format!("{e}"))?,
        &args.bq_grpc,
        Script::default(),
    )
    .await;
    let any: SocketAddr = "127.0.0.1:0".parse().map_err(|e| format!("{e}"))?;
    let grpc_cut = TcpProxy::start(any, faults.addr)
        .await
        .map_err(|e| e.to_string())?;
    let rest_cut = TcpProxy::start(any, socket(&args.bq_rest)?)
        .await
        .map_err(|e| e.to_string())?;

    let yaml = publisher_yaml(
        &bootstrap,
        &topic,
        &group,
        &dataset,
        (grpc_cut.addr, rest_cut.addr),
        exactly_once,
    )?;
    let config_path = dir.join("config.yaml");
    std::fs::write(&config_path, &yaml).map_err(|e| e.to_string())?;
    let v: serde_yaml_ng::Value = serde_yaml_ng::from_str(&yaml).map_err(|e| e.to_string())?;
    let (config, _) = Config::from_value(&v, Needs::RUN).map_err(|p| p.to_string())?;
    // The group the publishers join: by default one of the model version's own, named from
    // the configured one.
    let group = config.consumer_group().ok_or("no observation_source")?;
    let sink = config.bigquery().ok_or("no BIGQUERY sink")?.clone();
    let table = TableSpec::from_config(&config, &sink)
        .map_err(|e| e.to_string())?
        .table
        .dotted();

    let mut fleet = fleet::Fleet::new(&args.bin, &config_path, &dir, [free_port()?, free_port()?]);
    for i in 0..2 {
        fleet
            .start(i)
            .map_err(|e| format!("start publisher: {e}"))?;
    }
    let ready_by = Instant::now() + Duration::from_secs(90);
    while !(fleet.ready(0) && fleet.ready(1)) {
        if Instant::now() > ready_by {
            return Err(format!(
                "publishers not ready after 90 s; logs in {}",
                dir.display()
            ));
        }
        fleet.poll();
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    println!(
        "chaos: {} — {:.1} min of load at {} logs/s into {} partitions, 2 publishers; run dir {}",
        args.delivery,
        args.minutes,
        args.rate,
        args.partitions,
        dir.display()
    );

    let ledger = Arc::new(Mutex::new(load::Ledger::default()));
    let load = load::Load {
        bootstrap: bootstrap.clone(),
        topic: topic.clone(),
        schema: config.inference_schema.clone(),
        seed: u64::from_str_radix(&id, 16).unwrap_or(1),
        rate: args.rate,
        duration: load_for,
        malformed_ratio: 0.01,
    };
    let l2 = Arc::clone(&ledger);
    let producer = std::thread::spawn(move || load::run(load, l2, Duration::from_secs(300)));
    let started = Instant::now();

    let settle = Duration::from_secs(4);
    let mut outage = report::Outage::default();
    let mut journal = String::new();
    let mut problems: Vec<String> = Vec::new();
    let mut replay_window = 0i64;
    // Everything produced but not committed may be delivered again after a kill or a cut: the
    // bound on the at_least_once duplicates that fault can cause.
    let note_window =
        |journal: &mut String, total: &mut i64, problems: &mut Vec<String>| -> Result<(), String> {
            let end = ledger.lock().map_err(|_| "ledger")?.end.clone();
            match audit::committed(&bootstrap, &topic, &group, args.partitions) {
                Ok(c) => {
                    let w = end
                        .iter()
                        .map(|(p, e)| (e - c.get(p).copied().unwrap_or(0)).max(0))
                        .sum::<i64>();
                    *total += w;
                    let _ = writeln!(journal, "            ({w} produced but not committed)");
                }
                Err(e) => problems.push(format!("offsets unreadable at a fault: {e}")),
            }
            Ok(())
        };
    // Refused rows: at_least_once dead-letters them (the audit finds them in the DLQ);
    // exactly_once stops the partition's writer and sends them again on a new connection.
    let burst = || {
        vec![
            Fault::Unavailable,
            Fault::DropStream,
            Fault::RowErrors(vec![0]),
            Fault::ForwardThenDrop,
            Fault::InBand(tonic::Code::Unavailable),
        ]
    };
    for Step { at, action } in schedule::plan(load_for, settle) {
        while started.elapsed() < at {
            tokio::time::sleep(Duration::from_millis(250)).await;
            tick(&mut fleet, &mut outage);
        }
        let t = started.elapsed().as_secs_f64();
        let _ = writeln!(journal, "  {t:7.1}s  {action:?}");
        println!("chaos: {t:7.1}s  {action:?}");
        match action {
            Action::Kill(i) => {
                note_window(&mut journal, &mut replay_window, &mut problems)?;
                fleet.kill(i);
            }
            Action::Start(i) => fleet
                .start(i)
                .map_err(|e| format!("start publisher: {e}"))?,
            Action::Stop(i) => {
                if let Some(c) = fleet.stop(i, Duration::from_secs(40)).filter(|c| *c != 0) {
                    problems.push(format!("publisher {i} exited with {c} after SIGTERM"));
                }
            }
            Action::GrpcFaults => faults.inject(burst()),
            Action::SinkDown => {
                grpc_cut.cut();
                rest_cut.cut();
                outage.active = true;
                outage.started = Some(Instant::now());
                for (i, s) in fleet.slots.iter().enumerate() {
                    outage.rss_at_start[i] = s.rss_kib;
                    outage.rss_max[i] = s.rss_kib;
                }
            }
            Action::SinkSnapshot => {
                outage.offsets_at_snapshot = Some(audit::committed(
                    &bootstrap,
                    &topic,
                    &group,
                    args.partitions,
                )?);
            }
            Action::SinkUp => {
                let now = audit::committed(&bootstrap, &topic, &group, args.partitions)?;
                if let Some(before) = &outage.offsets_at_snapshot {
                    for (p, o) in &now {
                        if before.get(p).is_none_or(|b| b != o) {
                            outage
                                .advanced
                                .push(format!("partition {p}: {:?} → {o}", before.get(p)));
                        }
                    }
                }
                outage.active = false;
                outage.length = outage.started.map(|s| s.elapsed()).unwrap_or_default();
                grpc_cut.restore();
                rest_cut.restore();
            }
            Action::KafkaDown => {
                // Members expire during the cut: what they hold unacknowledged is replayed.
                note_window(&mut journal, &mut replay_window, &mut problems)?;
                broker.cut();
            }
            Action::KafkaUp => broker.restore(),
        }
    }
    while !producer.is_finished() {
        tokio::time::sleep(Duration::from_millis(250)).await;
        tick(&mut fleet, &mut outage);
    }
    producer
        .join()
        .map_err(|_| "the load generator panicked")??;
    let produced_for = started.elapsed();

    // Lag 0: every partition's committed offset at the end of what was produced.
    let end = ledger.lock().map_err(|_| "ledger")?.end.clone();
    let drain_by = Instant::now() + Duration::from_secs(300);
    let mut last = BTreeMap::new();
    let drained = loop {
        tick(&mut fleet, &mut outage);
        last = audit::committed(&bootstrap, &topic, &group, args.partitions).unwrap_or(last);
        if end.iter().all(|(p, e)| last.get(p) == Some(e)) {
            break true;
        }
        if Instant::now() > drain_by {
            break false;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    };
    let lag_at = started.elapsed();
    if !drained {
        problems.push(format!(
            "lag not 0 after 5 minutes: committed {last:?}, produced up to {end:?}"
        ));
    }
    for i in 0..2 {
        tick(&mut fleet, &mut outage);
        if let Some(c) = fleet.stop(i, Duration::from_secs(40)).filter(|c| *c != 0) {
            problems.push(format!(
                "publisher {i} exited with {c} after the final SIGTERM"
            ));
        }
    }

    let (b2, d2) = (bootstrap.clone(), dlq.clone());
    let dead = tokio::task::spawn_blocking(move || audit::dead_letters(&b2, &d2))
        .await
        .map_err(|e| e.to_string())??;
    let landed = audit::landed(&tables, PROJECT, &table).await?;
    let (valid_payloads, malformed_payloads) = {
        let mut l = ledger.lock().map_err(|_| "ledger")?;
        (
            Arc::new(l.valid_payloads()),
            std::mem::take(&mut l.malformed_payloads),
        )
    };
    let acknowledged_malformed = malformed_payloads.len();
    let (b3, t3, n) = (bootstrap.clone(), topic.clone(), args.partitions);
    let v3 = Arc::clone(&valid_payloads);
    let (malformed, found) = tokio::task::spawn_blocking(move || {
        audit::positions_of(&b3, &t3, n, &v3, &malformed_payloads)
    })
    .await
    .map_err(|e| e.to_string())??;
    let l = ledger.lock().map_err(|_| "ledger")?;
    let acknowledged = audit::Acknowledged {
        valid: &valid_payloads,
        at: &l.at,
    };
    let t = audit::tally(&l.valid, &malformed, &landed, &dead, &acknowledged);
    let misreported = l
        .malformed_positions()
        .symmetric_difference(&malformed)
        .count();

    let summary = report::Summary {
        delivery: &args.delivery,
        minutes: args.minutes,
        rate: args.rate,
        partitions: args.partitions,
        produced_for,
        lag_at,
        journal: &journal,
        replay_window,
        proxy: (faults.requests(), faults.forwarded()),
        failed_deliveries: l.failed,
        misreported,
        malformed_altered: acknowledged_malformed - found,
        max_rss_mib: args.max_rss_mib,
        exactly_once,
    };
    let out = report::render(&summary, &t, &dead, &fleet, &outage, &mut problems);
    print!("\n{out}");
    let _ = std::fs::write(dir.join("report.txt"), &out);
    Ok(problems.is_empty())
}

/// Samples the fleet; during the sink outage, keeps the largest RSS.
fn tick(fleet: &mut fleet::Fleet, outage: &mut report::Outage) {
    fleet.poll();
    if outage.active {
        for (i, s) in fleet.slots.iter().enumerate() {
            outage.rss_max[i] = outage.rss_max[i].max(s.rss_kib);
        }
    }
}

#[tokio::main(worker_threads = 2)]
async fn main() -> ExitCode {
    match run(Args::parse()).await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("chaos: {e}");
            ExitCode::from(2)
        }
    }
}
