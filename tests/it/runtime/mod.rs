//! `run` against the real local Kafka broker (tansu, started by `scripts/test`): every test
//! uses a fresh topic and consumer group, a 2 s session timeout, and asserts final counts, never
//! timings. Waits are bounded so a broken build fails instead of hanging.

pub(crate) mod alerts;
mod cases;
mod dlq;
mod explains;
mod groups;
mod quality;
mod rebalance;

use crate::common::{bin, Reaped};
use observation_publisher::framing::FrameReader;
use observation_publisher::gen::{GenOptions, Generator};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use rdkafka::{Offset, TopicPartitionList};
use std::collections::HashMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

pub(crate) fn brokers() -> String {
    std::env::var("KAFKA_BOOTSTRAP").unwrap_or_else(|_| "127.0.0.1:19092".into())
}

/// A unique name for this test run.
pub(crate) fn unique(prefix: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis();
    format!(
        "{prefix}-{}-{t}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

pub(crate) fn create_topic(topic: &str, partitions: i32) {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", brokers())
        .create()
        .unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let t = NewTopic::new(topic, partitions, TopicReplication::Fixed(1));
    let r = rt
        .block_on(admin.create_topics([&t], &AdminOptions::new()))
        .unwrap();
    assert!(r.iter().all(Result::is_ok), "{r:?}");
}

/// Generated logs for `config/local.yaml`'s schema; returns (bytes, malformed) per log.
pub(crate) fn logs(n: usize, seed: u64, malformed: f64) -> Vec<(Vec<u8>, bool)> {
    logs_at(n, seed, malformed, 1_764_000_000_000_000)
}

/// [`logs`] with request timestamps from `start_micros` on.
pub(crate) fn logs_at(
    n: usize,
    seed: u64,
    malformed: f64,
    start_micros: i64,
) -> Vec<(Vec<u8>, bool)> {
    let cfg = crate::common::local_config();
    let mut g = Generator::new(
        &cfg.inference_schema,
        GenOptions {
            rows_per_log: 1,
            seed,
            malformed_ratio: malformed,
            start_micros,
            model: ("demo".into(), "fraud-detector".into(), "1".into()),
        },
    );
    (0..n)
        .map(|_| {
            let l = g.next_log();
            (l.bytes, l.malformed)
        })
        .collect()
}

pub(crate) fn produce(topic: &str, logs: &[(Vec<u8>, bool)]) {
    produce_at(&brokers(), topic, logs);
}

pub(crate) fn produce_at(bootstrap: &str, topic: &str, logs: &[(Vec<u8>, bool)]) {
    send(bootstrap, topic, None, logs);
}

/// Produces `logs` round-robin over the first `partitions` partitions of `topic` at
/// `bootstrap`, so every partition gets some (a keyless producer's sticky partitioner may put
/// a quick burst into one).
pub(crate) fn produce_spread(
    bootstrap: &str,
    topic: &str,
    partitions: usize,
    logs: &[(Vec<u8>, bool)],
) {
    for p in 0..partitions {
        let mine: Vec<_> = logs.iter().skip(p).step_by(partitions).cloned().collect();
        send(bootstrap, topic, Some(p as i32), &mine);
    }
}

/// Produces `logs` into one partition of `topic`.
pub(crate) fn produce_to(topic: &str, partition: i32, logs: &[(Vec<u8>, bool)]) {
    send(&brokers(), topic, Some(partition), logs);
}

fn send(bootstrap: &str, topic: &str, partition: Option<i32>, logs: &[(Vec<u8>, bool)]) {
    let p: ThreadedProducer<DefaultProducerContext> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("linger.ms", "5")
        .create()
        .unwrap();
    for (b, _) in logs {
        let mut rec = BaseRecord::<(), [u8]>::to(topic).payload(&b[..]);
        if let Some(n) = partition {
            rec = rec.partition(n);
        }
        loop {
            match p.send(rec) {
                Ok(()) => break,
                Err((_, r)) => {
                    rec = r;
                    std::thread::sleep(Duration::from_millis(5));
                }
            }
        }
    }
    p.flush(Duration::from_secs(30)).unwrap();
}

/// A free loopback port (bound and released; a small race is acceptable in tests).
pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// One publisher's files and settings.
pub(crate) struct Setup {
    pub(crate) dir: PathBuf,
    /// The group `run` joins (by default one of this version's own, named from the
    /// configured `group_id`).
    pub(crate) group: String,
    pub(crate) port: u16,
    pub(crate) config: PathBuf,
}

impl Setup {
    /// Writes a config: local Parquet sink and file dead letters under `dir/<name>/`.
    pub(crate) fn new(dir: &Path, name: &str, topic: &str, group: &str, extra: &str) -> Setup {
        Setup::at(&brokers(), dir, name, topic, group, extra)
    }

    /// [`Setup::new`] against the brokers at `bootstrap`.
    pub(crate) fn at(
        bootstrap: &str,
        dir: &Path,
        name: &str,
        topic: &str,
        group: &str,
        extra: &str,
    ) -> Setup {
        let base = std::fs::read_to_string(crate::common::repo_config("local.yaml")).unwrap();
        let base: String = base
            .lines()
            .take_while(|l| !l.starts_with("observation_source:"))
            .map(|l| format!("{l}\n"))
            .collect();
        let port = free_port();
        let d = dir.join(name);
        std::fs::create_dir_all(&d).unwrap();
        let yaml = format!(
            "{base}observation_source:\n  type: KAFKA\n  config:\n    topic: {topic}\n    bootstrap_servers: {}\n    group_id: {group}\n\
             local_sink:\n  path: {}\ndead_letter:\n  target: file\n  path: {}\n\
             batching:\n  linger: 300ms\n  max_rows: 500\nconsumer:\n  session_timeout: 2s\n  commit_interval: 200ms\n  drain_timeout: 20s\n\
             logging:\n  format: json\n  progress_interval: 1s\nserver:\n  listen: 127.0.0.1:{port}\n{extra}",
            bootstrap,
            d.join("rows").display(),
            d.join("dead.bin").display(),
        );
        let config = d.join("config.yaml");
        std::fs::write(&config, yaml).unwrap();
        Setup {
            dir: d,
            group: crate::common::consumer_group_of(&config),
            port,
            config,
        }
    }

    pub(crate) fn start(&self) -> Reaped {
        Reaped(
            bin()
                .args(["run", "-c", self.config.to_str().unwrap()])
                .stdout(Stdio::null())
                .stderr(
                    std::fs::File::create(self.dir.join(format!("log-{}.txt", unique("run"))))
                        .unwrap(),
                )
                .spawn()
                .unwrap(),
        )
    }

    /// Every publisher log of this setup, all runs: (file name, text).
    fn logs(&self) -> Vec<(String, String)> {
        std::fs::read_dir(&self.dir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|name| name.starts_with("log-"))
            .map(|name| {
                let text = std::fs::read_to_string(self.dir.join(&name)).unwrap_or_default();
                (name, text)
            })
            .collect()
    }

    /// How many times `needle` appears in the publisher logs of this setup, all runs together.
    pub(crate) fn log_count(&self, needle: &str) -> usize {
        self.logs()
            .iter()
            .map(|(_, t)| t.matches(needle).count())
            .sum()
    }

    /// Whether any publisher log of this setup says partitions were assigned to it (an
    /// empty assignment, as a KIP-848 member gets first, does not count).
    pub(crate) fn has_partitions(&self) -> bool {
        self.logs().iter().any(|(_, t)| {
            t.lines()
                .any(|l| l.contains("partitions assigned") && !l.contains("\"[]\""))
        })
    }

    /// The last lines of every publisher log of this setup (for failure messages).
    pub(crate) fn log_tail(&self) -> String {
        let mut out = String::new();
        for (name, text) in self.logs() {
            let lines: Vec<&str> = text.lines().collect();
            out.push_str(&format!("--- {name}\n"));
            for l in &lines[lines.len().saturating_sub(15)..] {
                out.push_str(l);
                out.push('\n');
            }
        }
        out
    }

    /// (session_id, row_id) of every row in the Parquet files.
    pub(crate) fn rows(&self) -> Vec<(String, String)> {
        parquet_rows(&self.dir.join("rows"))
    }

    /// Number of dead letters in the file target.
    pub(crate) fn dead_letters(&self) -> usize {
        let Ok(f) = std::fs::File::open(self.dir.join("dead.bin")) else {
            return 0;
        };
        let mut r = FrameReader::new(std::io::BufReader::new(f));
        let mut buf = Vec::new();
        let mut n = 0;
        while let Ok(Some(_)) = r.next_into(&mut buf) {
            n += 1;
        }
        n
    }

    /// GETs a path on the publisher's HTTP port: (status, body).
    pub(crate) fn get(&self, path: &str) -> Option<(u16, String)> {
        http_get(self.port, path)
    }
}

pub(crate) fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    let status = out.split_whitespace().nth(1)?.parse().ok()?;
    let body = out
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Some((status, body))
}

/// Every record batch of every Parquet file under `dir` (searched recursively).
pub(crate) fn parquet_batches(dir: &Path) -> Vec<arrow_array::RecordBatch> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "parquet") {
                let r = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(
                    std::fs::File::open(&p).unwrap(),
                )
                .unwrap()
                .build()
                .unwrap();
                out.extend(r.map(Result::unwrap));
            }
        }
    }
    out
}

/// `(session_id, row_id)` of every Parquet row under `dir`.
pub(crate) fn parquet_rows(dir: &Path) -> Vec<(String, String)> {
    use arrow_array::cast::AsArray;
    let mut out = Vec::new();
    for b in parquet_batches(dir) {
        let s = b.column(0).as_string::<i32>();
        let rid = b.column(1).as_string::<i32>();
        for i in 0..b.num_rows() {
            out.push((s.value(i).to_string(), rid.value(i).to_string()));
        }
    }
    out
}

/// Committed offsets of `group` on `topic`, per partition (missing = nothing committed).
pub(crate) fn committed(topic: &str, group: &str, partitions: i32) -> HashMap<i32, i64> {
    committed_at(&brokers(), topic, group, partitions)
}

pub(crate) fn committed_at(
    bootstrap: &str,
    topic: &str,
    group: &str,
    partitions: i32,
) -> HashMap<i32, i64> {
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition(topic, p);
    }
    let got = c.committed_offsets(tpl, Duration::from_secs(10)).unwrap();
    got.elements()
        .iter()
        .filter_map(|e| match e.offset() {
            Offset::Offset(o) => Some((e.partition(), o)),
            _ => None,
        })
        .collect()
}

/// Sum of committed offsets = messages committed (offsets start at 0 and are contiguous here).
pub(crate) fn committed_total(topic: &str, group: &str, partitions: i32) -> i64 {
    committed(topic, group, partitions).values().sum()
}

/// Polls `cond` until it holds or `limit` passes; returns whether it held. The limit only keeps
/// a broken build from hanging; nothing asserts how fast it happened.
pub(crate) fn wait_for(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + limit;
    while Instant::now() < end {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    cond()
}

pub(crate) fn signal(child: &Child, sig: &str) {
    let ok = std::process::Command::new("kill")
        .args([sig, &child.id().to_string()])
        .status()
        .unwrap();
    assert!(ok.success());
}

/// SIGTERMs the child and returns its exit code.
pub(crate) fn stop(mut child: Reaped) -> Option<i32> {
    signal(&child, "-TERM");
    let end = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s.code();
        }
        if Instant::now() > end {
            let _ = child.kill();
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Session ids of the valid logs (one row each, row id "0").
pub(crate) fn expected_rows(
    logs: &[(Vec<u8>, bool)],
    seed: u64,
) -> std::collections::BTreeSet<(String, String)> {
    logs.iter()
        .enumerate()
        .filter(|(_, (_, bad))| !bad)
        .map(|(i, _)| (format!("sess-{seed:x}-{i}"), "0".to_string()))
        .collect()
}

/// Whether a series of `/metrics` text starting with `prefix` (a name, or a name and the start
/// of its labels) has a value other than 0: series the rules use exist at 0 from start-up.
pub(crate) fn counted(metrics: &str, prefix: &str) -> bool {
    metrics.lines().any(|l| {
        l.starts_with(prefix)
            && l.rsplit(' ')
                .next()
                .and_then(|v| v.parse::<f64>().ok())
                .is_some_and(|v| v != 0.0)
    })
}
