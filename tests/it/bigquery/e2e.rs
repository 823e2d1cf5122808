//! The whole daemon into the emulator: real Kafka (tansu) → `run` → Storage Write → a query.

use super::*;
use crate::common::Reaped;
use crate::runtime::{
    committed_total, create_topic, free_port, http_get, signal, stop, unique, wait_for,
};
use prost::Message;
use std::process::Stdio;

const LIMIT: Duration = Duration::from_secs(120);

#[path = "e2e_checkpoints.rs"]
mod checkpoints;
#[path = "e2e_reuse.rs"]
mod reuse;

/// Logs timestamped within the table's partition range (now minus an hour); `bad` of them
/// malformed, and `old` of them dated a year back (outside the 14-day partition expiration).
fn logs(n: usize, seed: u64, bad: &[usize], old: &[usize]) -> Vec<Vec<u8>> {
    let v = observation_publisher::config::load_value(
        Some(&crate::common::repo_config("local.yaml")),
        Vec::new(),
        &[],
    )
    .unwrap();
    let (cfg, _) = Config::from_value(&v, Needs::CONVERT).unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_micros() as i64;
    let mut g = Generator::new(
        &cfg.inference_schema,
        GenOptions {
            rows_per_log: 1,
            seed,
            malformed_ratio: 0.0,
            start_micros: now - 3_600_000_000,
            model: ("demo".into(), "fraud-detector".into(), "1".into()),
        },
    );
    (0..n)
        .map(|i| {
            let mut l = g.valid_log(i as u64);
            if old.contains(&i) {
                if let Some(ts) = l.request_timestamp.as_mut() {
                    ts.seconds -= 365 * 86_400;
                }
            }
            if bad.contains(&i) {
                b"\x0a\x02hi\x52\x01".to_vec()
            } else {
                l.encode_to_vec()
            }
        })
        .collect()
}

fn produce(topic: &str, logs: &[Vec<u8>]) {
    let framed: Vec<(Vec<u8>, bool)> = logs.iter().map(|l| (l.clone(), false)).collect();
    crate::runtime::produce(topic, &framed);
}

struct Run {
    dir: std::path::PathBuf,
    config: std::path::PathBuf,
    port: u16,
    group: String,
}

impl Run {
    fn new(dir: &std::path::Path, topic: &str, dataset: &str) -> Run {
        Self::with(dir, topic, dataset, &crate::runtime::brokers(), "")
    }

    fn with(
        dir: &std::path::Path,
        topic: &str,
        dataset: &str,
        bootstrap: &str,
        extra: &str,
    ) -> Run {
        let base = std::fs::read_to_string(crate::common::repo_config("local.yaml")).unwrap();
        let base: String = base
            .lines()
            .take_while(|l| !l.starts_with("observation_source:"))
            .map(|l| format!("{l}\n"))
            .collect();
        let port = free_port();
        let group = unique("g");
        let yaml = format!(
            "{base}observation_source:\n  type: KAFKA\n  config:\n    topic: {topic}\n    bootstrap_servers: {}\n    group_id: {group}\n\
             observation_sinks:\n- type: BIGQUERY\n  config:\n    project: {PROJECT}\n    dataset: {dataset}\n    ttl_days: 14\n\
             \x20   storage_endpoint: {}\n    rest_base_url: {}\n    auth: none\n    emulator_compat: true\n\
             dead_letter:\n  target: file\n  path: {}\nbatching:\n  linger: 300ms\n  max_rows: 400\n\
             consumer:\n  session_timeout: 2s\n  commit_interval: 200ms\n  drain_timeout: 20s\nlogging:\n  format: json\n\
             server:\n  listen: 127.0.0.1:{port}\n{extra}",
            bootstrap,
            grpc_url(),
            rest_url(),
            dir.join("dead.bin").display(),
        );
        let config = dir.join("config.yaml");
        std::fs::write(&config, yaml).unwrap();
        let group = crate::common::consumer_group_of(&config);
        Run {
            dir: dir.to_path_buf(),
            config,
            port,
            group,
        }
    }

    fn start(&self) -> Reaped {
        Reaped(
            crate::common::bin()
                .args(["run", "-c", self.config.to_str().unwrap()])
                .stdout(Stdio::null())
                .stderr(
                    std::fs::File::create(self.dir.join(format!("{}.log", unique("run")))).unwrap(),
                )
                .spawn()
                .unwrap(),
        )
    }

    /// Every publisher log of this run (for failure messages).
    fn logs(&self) -> String {
        let mut out = String::new();
        for e in std::fs::read_dir(&self.dir).unwrap().flatten() {
            if e.path().extension().is_some_and(|x| x == "log") {
                out.push_str(&std::fs::read_to_string(e.path()).unwrap_or_default());
            }
        }
        out
    }

    fn dead_letter_reasons(&self) -> Vec<serde_json::Value> {
        std::fs::read_to_string(self.dir.join("dead.bin.reasons.jsonl"))
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}

/// `(COUNT(*), COUNT(DISTINCT session_id, row_id))` of the model's table (0, 0 before it exists).
async fn counts(dataset: &str) -> (u64, u64) {
    counts_in(dataset).await
}

async fn counts_in(dataset: &str) -> (u64, u64) {
    let sql = format!(
        "SELECT COUNT(*), COUNT(DISTINCT CONCAT(session_id, '/', row_id)) FROM `{PROJECT}.{dataset}.prediction_log_demo_fraud_detector`"
    );
    // The emulator, queried while appends land, now and then answers with a row short of a
    // cell: asked again, as a failed query would be, rather than read past its end.
    for _ in 0..5 {
        let Ok(q) = manager().query(PROJECT, &sql).await else {
            return (0, 0);
        };
        let Some(row) = q.rows.first().filter(|r| r.len() >= 2) else {
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            continue;
        };
        let n = |i: usize| row[i].as_deref().unwrap_or("0").parse::<u64>().unwrap_or(0);
        return (n(0), n(1));
    }
    (0, 0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_to_bigquery_lands_every_valid_row_and_dead_letters_the_rest_across_a_sigkill() {
    let _serial = serial().await;
    let dataset = fresh_name("e2e");
    manager()
        .create_dataset(PROJECT, &dataset)
        .await
        .expect("emulator reachable");
    let dir = tempfile::tempdir().unwrap();
    let topic = unique("bq-e2e");
    tokio::task::block_in_place(|| create_topic(&topic, 2));
    let all = logs(1200, 61, &[7, 500], &[100, 900]);
    let run = Run::new(dir.path(), &topic, &dataset);
    // With the source-position columns, so duplicates can be told apart.
    let cfg = std::fs::read_to_string(&run.config).unwrap().replace(
        "emulator_compat: true\n",
        "emulator_compat: true\n    kafka_columns: true\n",
    );
    std::fs::write(&run.config, cfg).unwrap();

    let child = run.start();
    tokio::task::block_in_place(|| produce(&topic, &all[..600]));
    // SIGKILL once rows have landed, then restart: at-least-once, so nothing may be missing.
    let mut seen = 0;
    for _ in 0..600 {
        seen = counts(&dataset).await.0;
        if seen > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(seen > 0, "rows reached BigQuery");
    signal(&child, "-KILL");
    let _ = { child }.wait();
    let child = run.start();
    tokio::task::block_in_place(|| produce(&topic, &all[600..]));
    let (group, t, port) = (run.group.clone(), topic.clone(), run.port);
    let done = tokio::task::spawn_blocking(move || {
        wait_for(LIMIT, || committed_total(&t, &group, 2) == 1200)
    })
    .await
    .unwrap();
    assert!(done, "every offset committed");
    assert_eq!(http_get(port, "/readyz").map(|r| r.0), Some(200));
    let code = tokio::task::spawn_blocking(move || stop(child))
        .await
        .unwrap();
    assert_eq!(code, Some(0));

    let (count, distinct) = counts(&dataset).await;
    assert_eq!(
        distinct, 1196,
        "every valid, in-range row landed (1200 - 2 malformed - 2 expired)"
    );
    assert!(count >= distinct);
    eprintln!(
        "bigquery e2e: {} duplicates from the killed window",
        count - distinct
    );
    let reasons = run.dead_letter_reasons();
    let decode: std::collections::BTreeSet<i64> = reasons
        .iter()
        .filter(|r| r["kind"] == "decode")
        .map(|r| r["offset"].as_i64().unwrap())
        .collect();
    let expired: std::collections::BTreeSet<(i64, i64)> = reasons
        .iter()
        .filter(|r| r["kind"] == "row" && r["code"] == "outside_partition_range")
        .map(|r| {
            (
                r["partition"].as_i64().unwrap(),
                r["offset"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        decode.len(),
        2,
        "both malformed logs dead-lettered: {reasons:?}"
    );
    assert_eq!(
        expired.len(),
        2,
        "both expired rows dead-lettered as rows: {reasons:?}"
    );
    // Values round-trip with their types.
    let q = manager()
        .query(
            PROJECT,
            &format!(
                "SELECT model_version, request_timestamp FROM `{PROJECT}.{dataset}.prediction_log_demo_fraud_detector` WHERE session_id = 'sess-3d-3'"
            ),
        )
        .await
        .unwrap();
    assert!(!q.rows.is_empty(), "{q:?}");
    assert_eq!(q.rows[0][0].as_deref(), Some("1"));
    // Every row carries its source position; positions are unique per distinct row.
    let q = manager()
        .query(
            PROJECT,
            &format!(
                "SELECT COUNTIF(_kafka_partition IS NULL OR _kafka_offset IS NULL), \
                 COUNT(DISTINCT CONCAT(CAST(_kafka_partition AS STRING), '/', CAST(_kafka_offset AS STRING))) \
                 FROM `{PROJECT}.{dataset}.prediction_log_demo_fraud_detector`"
            ),
        )
        .await
        .unwrap();
    assert_eq!(q.rows[0][0].as_deref(), Some("0"), "{q:?}");
    assert_eq!(q.rows[0][1].as_deref(), Some("1196"), "{q:?}");
}

/// An exactly_once run on librdkafka's mock cluster (it keeps commit metadata; tansu drops it):
/// a fresh dataset, a topic of `partitions`, `n` generated logs (not produced yet), and a
/// publisher configuration with batches of `max_rows` and commits every `commit_interval`.
struct ExactlyOnce {
    cluster: rdkafka::mocking::MockCluster<'static, rdkafka::producer::DefaultProducerContext>,
    bootstrap: String,
    topic: String,
    dataset: String,
    all: Vec<(Vec<u8>, bool)>,
    run: Run,
    _dir: tempfile::TempDir,
}

impl ExactlyOnce {
    async fn new(
        name: &str,
        partitions: i32,
        n: usize,
        seed: u64,
        max_rows: usize,
        commit_interval: &str,
        old: &[usize],
    ) -> ExactlyOnce {
        let dataset = fresh_name(name);
        manager()
            .create_dataset(PROJECT, &dataset)
            .await
            .expect("emulator reachable");
        let cluster = rdkafka::mocking::MockCluster::new(1).expect("mock cluster");
        let topic = unique(name);
        cluster.create_topic(&topic, partitions, 1).expect("topic");
        let bootstrap = cluster.bootstrap_servers();
        let all = logs(n, seed, &[], old)
            .into_iter()
            .map(|l| (l, false))
            .collect();
        let dir = tempfile::tempdir().unwrap();
        let run = Run::with(
            dir.path(),
            &topic,
            &dataset,
            &bootstrap,
            "delivery: exactly_once\n",
        );
        // The mock cluster enforces Kafka's minimum session timeout (6 s).
        let cfg = std::fs::read_to_string(&run.config)
            .unwrap()
            .replace("session_timeout: 2s", "session_timeout: 6s")
            .replace("max_rows: 400", &format!("max_rows: {max_rows}"))
            .replace(
                "commit_interval: 200ms",
                &format!("commit_interval: {commit_interval}"),
            );
        std::fs::write(&run.config, cfg).unwrap();
        ExactlyOnce {
            cluster,
            bootstrap,
            topic,
            dataset,
            all,
            run,
            _dir: dir,
        }
    }
}

/// Logs of the SIGKILL test dated a year back: outside the table's partition range, so refused
/// before the stream and dead-lettered; on both sides of the kill.
const OLD: [usize; 4] = [5, 333, 799, 1234];

/// Logs of the SIGKILL test whose row alone is over `max_request_bytes` (64 KiB there): a
/// session id of 100,000 bytes.
const LARGE: [usize; 2] = [444, 1111];

/// exactly_once on librdkafka's mock cluster (it keeps commit metadata; tansu drops it): a
/// SIGKILL mid-stream and a restart leave every row exactly once, and the rows BigQuery would
/// refuse, or that no request can carry, are dead-lettered without stopping the partition or
/// shifting the rows a resume skips. (Before the exactly-once sink refused them itself, the
/// writer dropped expired rows after the skip and the batch failed once the rest had landed:
/// retried every 30 s, it landed again each time and no offset was committed; a row over the
/// request size failed its batch every 30 s, for good.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exactly_once_survives_sigkill_without_duplicates() {
    let _serial = serial().await;
    // Small batches and a slow commit interval leave rows in BigQuery beyond the last
    // committed checkpoint at the kill, so the restart must skip exactly those.
    let ExactlyOnce {
        cluster,
        bootstrap,
        topic,
        dataset,
        all,
        run,
        _dir,
    } = ExactlyOnce::new("eo", 2, 1500, 62, 40, "1s", &OLD).await;
    let mut all = all;
    for i in LARGE {
        let mut log =
            observation_publisher::proto::PredictionLog::decode(all[i].0.as_slice()).unwrap();
        log.prediction_id = "s".repeat(100_000);
        all[i].0 = log.encode_to_vec();
    }
    let cfg = std::fs::read_to_string(&run.config).unwrap().replace(
        "emulator_compat: true\n",
        "emulator_compat: true\n    max_request_bytes: 65536\n",
    );
    std::fs::write(&run.config, cfg).unwrap();
    let child = run.start();
    // Produce in small steps so that rows keep arriving across commits.
    let producer = {
        let (b, t, logs) = (bootstrap.clone(), topic.clone(), all[..800].to_vec());
        tokio::task::spawn_blocking(move || {
            for chunk in logs.chunks(40) {
                crate::runtime::produce_at(&b, &t, chunk);
                std::thread::sleep(Duration::from_millis(100));
            }
        })
    };
    // Kill once a checkpoint has been committed, while rows keep arriving (no BigQuery query
    // meanwhile: the emulator mishandles queries concurrent with appends).
    let (b, t, g) = (bootstrap.clone(), topic.clone(), run.group.clone());
    let committed = tokio::task::spawn_blocking(move || {
        wait_for(LIMIT, || {
            crate::runtime::committed_at(&b, &t, &g, 2)
                .values()
                .sum::<i64>()
                > 0
        })
    })
    .await
    .unwrap();
    assert!(
        committed,
        "a first checkpoint was committed; publisher log:\n{}",
        run.logs()
    );
    signal(&child, "-KILL");
    let _ = { child }.wait();
    producer.await.unwrap();
    tokio::task::block_in_place(|| crate::runtime::produce_at(&bootstrap, &topic, &all[800..]));
    let child = run.start();
    let (group, t, b) = (run.group.clone(), topic.clone(), bootstrap.clone());
    let done = tokio::task::spawn_blocking(move || {
        wait_for(LIMIT, || {
            crate::runtime::committed_at(&b, &t, &group, 2)
                .values()
                .sum::<i64>()
                == 1500
        })
    })
    .await
    .unwrap();
    assert!(
        done,
        "every offset committed; publisher logs:\n{}",
        run.logs()
    );
    let code = tokio::task::spawn_blocking(move || stop(child))
        .await
        .unwrap();
    assert_eq!(code, Some(0));
    let (count, distinct) = counts_in(&dataset).await;
    let landing = (1500 - OLD.len() - LARGE.len()) as u64;
    assert_eq!(distinct, landing, "every row in range and in size landed");
    assert_eq!(count, landing, "and none twice, across the SIGKILL");
    let reasons = run.dead_letter_reasons();
    let refused = |code: &str| -> std::collections::BTreeSet<(i64, i64)> {
        reasons
            .iter()
            .filter(|r| r["kind"] == "row" && r["code"] == code)
            .map(|r| {
                (
                    r["partition"].as_i64().unwrap(),
                    r["offset"].as_i64().unwrap(),
                )
            })
            .collect()
    };
    assert_eq!(
        refused("outside_partition_range").len(),
        OLD.len(),
        "every expired row dead-lettered"
    );
    assert_eq!(
        refused("too_large").len(),
        LARGE.len(),
        "every row over the request size dead-lettered"
    );
    drop(cluster);
}

/// Rows this publisher process has written (its `rows_written_total`), if it answers.
fn rows_written(port: u16) -> Option<u64> {
    let (_, body) = crate::runtime::http_get(port, "/metrics")?;
    body.lines()
        .filter(|l| l.starts_with("observation_publisher_rows_written_total"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .map(|v| v as u64)
        .reduce(|a, b| a + b)
}

/// exactly_once: owners killed after writing to their new stream but before any ordinary
/// commit (the commit interval is an hour) must not hide that stream from the next owner — the
/// stream is recorded in the group's commit before its first row. Without that record the
/// second owner starts from nothing and writes the first owner's rows again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exactly_once_owners_killed_before_their_first_commit_leave_no_duplicates() {
    let _serial = serial().await;
    let ExactlyOnce {
        cluster,
        bootstrap,
        topic,
        dataset,
        all,
        run,
        _dir,
    } = ExactlyOnce::new("eo_first", 1, 900, 64, 100, "1h", &[]).await;
    // With the source-position columns: exactly_once writes them too.
    let cfg = std::fs::read_to_string(&run.config).unwrap().replace(
        "emulator_compat: true\n",
        "emulator_compat: true\n    kafka_columns: true\n",
    );
    std::fs::write(&run.config, cfg).unwrap();
    // Three owners in turn, each given 300 new logs; the first two are killed once they have
    // written everything so far, the third is stopped gracefully (its drain commits).
    for (i, chunk) in all.chunks(300).enumerate() {
        tokio::task::block_in_place(|| crate::runtime::produce_at(&bootstrap, &topic, chunk));
        let child = run.start();
        let want = 300 * (i as u64 + 1);
        let port = run.port;
        let written = tokio::task::spawn_blocking(move || {
            wait_for(LIMIT, || rows_written(port).is_some_and(|n| n >= want))
        })
        .await
        .unwrap();
        assert!(written, "owner {i} wrote its rows; logs:\n{}", run.logs());
        if i < 2 {
            signal(&child, "-KILL");
            let _ = { child }.wait();
        } else {
            let code = tokio::task::spawn_blocking(move || stop(child))
                .await
                .unwrap();
            assert_eq!(code, Some(0));
        }
    }
    let (count, distinct) = counts_in(&dataset).await;
    assert_eq!(distinct, 900, "every row landed");
    assert_eq!(
        count, 900,
        "and none twice, across two owners killed before their first commit"
    );
    let q = manager()
        .query(
            PROJECT,
            &format!(
                "SELECT COUNTIF(_kafka_offset IS NULL), COUNT(DISTINCT _kafka_offset) \
                 FROM `{PROJECT}.{dataset}.prediction_log_demo_fraud_detector`"
            ),
        )
        .await
        .unwrap();
    assert_eq!(q.rows[0][0].as_deref(), Some("0"), "{q:?}");
    assert_eq!(q.rows[0][1].as_deref(), Some("900"), "{q:?}");
    drop(cluster);
}

/// A TCP forwarder to the emulator's gRPC port that can be cut (every connection closed, new
/// ones refused) and restored on the same port: BigQuery unreachable, as the network shows it.
struct Link {
    addr: std::net::SocketAddr,
    upstream: String,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Link {
    async fn start() -> Link {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let upstream = grpc_url().trim_start_matches("http://").to_string();
        Link {
            addr: listener.local_addr().unwrap(),
            task: Some(tokio::spawn(Self::serve(listener, upstream.clone()))),
            upstream,
        }
    }

    async fn serve(listener: tokio::net::TcpListener, upstream: String) {
        let mut conns = tokio::task::JoinSet::new();
        while let Ok((mut client, _)) = listener.accept().await {
            let up = upstream.clone();
            conns.spawn(async move {
                if let Ok(mut server) = tokio::net::TcpStream::connect(&up).await {
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                }
            });
        }
    }

    fn cut(&mut self) {
        if let Some(t) = self.task.take() {
            t.abort(); // drops the listener and every connection with it
        }
    }

    async fn restore(&mut self) {
        let listener = tokio::net::TcpListener::bind(self.addr).await.unwrap();
        self.task = Some(tokio::spawn(Self::serve(listener, self.upstream.clone())));
    }
}

/// exactly_once: readiness follows the partitions' writers. With BigQuery unreachable
/// mid-stream, `/readyz` says so (503, "cannot reach its destination") while the writers retry;
/// once it is back the pod is ready again and every row lands once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exactly_once_is_unready_while_bigquery_is_unreachable() {
    let _serial = serial().await;
    let ExactlyOnce {
        cluster,
        bootstrap,
        topic,
        dataset,
        all,
        run,
        _dir,
    } = ExactlyOnce::new("eo_ready", 1, 400, 77, 50, "200ms", &[]).await;
    let mut link = Link::start().await;
    let cfg = std::fs::read_to_string(&run.config)
        .unwrap()
        .replace(&grpc_url(), &format!("http://{}", link.addr));
    std::fs::write(&run.config, cfg).unwrap();
    let (b, t) = (bootstrap.clone(), topic.clone());
    let first = all[..200].to_vec();
    tokio::task::spawn_blocking(move || crate::runtime::produce_at(&b, &t, &first))
        .await
        .unwrap();
    let child = run.start();
    let port = run.port;
    let ready = |want: u16, reason: &'static str| {
        tokio::task::spawn_blocking(move || {
            wait_for(LIMIT, || {
                crate::runtime::http_get(port, "/readyz")
                    .is_some_and(|(s, body)| s == want && body.contains(reason))
            })
        })
    };
    let landed = tokio::task::spawn_blocking(move || {
        wait_for(LIMIT, || rows_written(port).is_some_and(|n| n >= 200))
    });
    assert!(landed.await.unwrap(), "first rows; log:\n{}", run.logs());
    assert!(ready(200, "").await.unwrap(), "ready; log:\n{}", run.logs());

    link.cut();
    let (b, t) = (bootstrap.clone(), topic.clone());
    let rest = all[200..].to_vec();
    tokio::task::spawn_blocking(move || crate::runtime::produce_at(&b, &t, &rest))
        .await
        .unwrap();
    let unready = ready(503, "a sink cannot reach its destination")
        .await
        .unwrap();
    assert!(
        unready,
        "/readyz while BigQuery is unreachable: {:?}; log:\n{}",
        crate::runtime::http_get(port, "/readyz"),
        run.logs()
    );

    link.restore().await;
    assert!(
        ready(200, "").await.unwrap(),
        "ready again; log:\n{}",
        run.logs()
    );
    let (g, t, b) = (run.group.clone(), topic.clone(), bootstrap.clone());
    let done = tokio::task::spawn_blocking(move || {
        wait_for(LIMIT, || {
            crate::runtime::committed_at(&b, &t, &g, 1)
                .values()
                .sum::<i64>()
                == 400
        })
    });
    assert!(done.await.unwrap(), "all committed; log:\n{}", run.logs());
    let code = tokio::task::spawn_blocking(move || stop(child))
        .await
        .unwrap();
    assert_eq!(code, Some(0));
    assert_eq!(counts_in(&dataset).await, (400, 400), "every row once");
    drop(cluster);
}

/// A feature with a flexible (Unicode) column name goes through `gen`, Kafka, `run` and the
/// Storage Write API (Arrow field names are the column names) into the emulator's table.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_unicode_feature_name_lands_in_bigquery_end_to_end() {
    let _serial = serial().await;
    let dataset = fresh_name("unicode");
    manager()
        .create_dataset(PROJECT, &dataset)
        .await
        .expect("emulator reachable");
    let dir = tempfile::tempdir().unwrap();
    let topic = unique("bq-unicode");
    tokio::task::block_in_place(|| create_topic(&topic, 1));
    let run = Run::new(dir.path(), &topic, &dataset);
    let cfg = std::fs::read_to_string(&run.config).unwrap().replace(
        "    merchant_id: string\n",
        "    \"città d'origine\": string\n",
    );
    assert!(cfg.contains("città"));
    std::fs::write(&run.config, cfg).unwrap();
    let c = run.config.to_str().unwrap();
    for cmd in ["check-config", "schema"] {
        let o = crate::common::run(&[cmd, "-c", c]);
        assert_eq!(
            o.status.code(),
            Some(0),
            "{cmd}: {}",
            crate::common::stderr(&o)
        );
    }
    let logs = dir.path().join("logs.bin");
    let o = crate::common::run(&[
        "gen",
        "-c",
        c,
        "-n",
        "30",
        "--start-time",
        "now",
        "-o",
        logs.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", crate::common::stderr(&o));
    let o = crate::common::run(&[
        "produce",
        "--topic",
        &topic,
        "--brokers",
        &crate::runtime::brokers(),
        "--input",
        logs.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", crate::common::stderr(&o));

    let child = run.start();
    let (group, t) = (run.group.clone(), topic.clone());
    let done = tokio::task::spawn_blocking(move || {
        wait_for(LIMIT, || committed_total(&t, &group, 1) == 30)
    })
    .await
    .unwrap();
    let code = tokio::task::spawn_blocking(move || stop(child))
        .await
        .unwrap();
    assert!(done, "every offset committed: {}", run.logs());
    assert_eq!(code, Some(0), "{}", run.logs());

    let table = format!("`{PROJECT}.{dataset}.prediction_log_demo_fraud_detector`");
    let t = manager()
        .get_table(&observation_publisher::sink::bigquery::TableRef {
            project: PROJECT.into(),
            dataset: dataset.clone(),
            table: "prediction_log_demo_fraud_detector".into(),
        })
        .await
        .unwrap()
        .expect("table created");
    assert!(
        t["schema"]["fields"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["name"] == "città d'origine"),
        "{t}"
    );
    let q = manager()
        .query(
            PROJECT,
            &format!(
                "SELECT COUNT(*), COUNT(`città d'origine`), MIN(`città d'origine`) FROM {table}"
            ),
        )
        .await
        .unwrap();
    let row = &q.rows[0];
    assert_eq!(row[0].as_deref(), Some("30"));
    let non_null: u64 = row[1].as_deref().unwrap().parse().unwrap();
    assert!(non_null > 0, "the Unicode column holds values: {q:?}");
    assert!(row[2].as_deref().is_some_and(|v| !v.is_empty()), "{q:?}");
}

/// Merlin's table ids collide: (`demo-fraud`, `detector`) and (`demo`, `fraud-detector`) both
/// give `prediction_log_demo_fraud_detector`. `run` refuses to write into the other model's
/// table: exit 2, naming both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_refuses_a_table_labelled_for_another_model() {
    let _serial = serial().await;
    let dataset = fresh_name("owned");
    let tables = manager();
    tables.create_dataset(PROJECT, &dataset).await.unwrap();
    let (mut other, sink) = config(&dataset, FEATURES, "");
    other.project = "demo-fraud".into();
    other.model_id = "detector".into();
    let spec = TableSpec::from_config(&other, &sink).unwrap();
    assert_eq!(spec.table.table, "prediction_log_demo_fraud_detector");
    assert!(tables.ensure_table(&spec).await.unwrap().created);

    let dir = tempfile::tempdir().unwrap();
    let topic = unique("bq-owned");
    tokio::task::block_in_place(|| create_topic(&topic, 1));
    let run = Run::new(dir.path(), &topic, &dataset);
    let mut child = run.start();
    let code = tokio::task::spawn_blocking(move || {
        let end = std::time::Instant::now() + LIMIT;
        loop {
            if let Some(s) = child.try_wait().unwrap() {
                return s.code();
            }
            if std::time::Instant::now() > end {
                let _ = child.kill();
                return None;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    })
    .await
    .unwrap();
    let logs = run.logs();
    assert_eq!(code, Some(2), "{logs}");
    for both in [
        "\\\"demo-fraud\\\"",
        "\\\"detector\\\"",
        "\\\"demo\\\"",
        "\\\"fraud-detector\\\"",
    ] {
        assert!(logs.contains(both), "{both} in {logs}");
    }
}
