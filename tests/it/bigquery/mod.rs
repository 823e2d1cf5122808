//! BigQuery sink tests against the local emulator (`scripts/bigquery start`; REST and gRPC
//! addresses from `BQ_REST` / `BQ_GRPC`, defaults 127.0.0.1:19050 / :19060, project
//! `test-proj`), plus a fault-injecting gRPC proxy for what the emulator cannot show.
//!
//! Every test uses its own dataset and small tables: the emulator copies the whole table on each
//! append. The tests take turns ([`serial`]): the emulator shares one DuckDB connection between
//! concurrent requests and then fails some of them ("Attempting to execute an unsuccessful or
//! closed pending query result"), which real BigQuery does not do.

mod append;
mod connections;
mod e2e;
mod exactly_once;
mod faults;
mod hold;
mod live;
mod pipelined;
mod proxy;
pub(crate) mod reuse;
mod slow_ack;
mod tables;
mod window_day;

use arrow_array::RecordBatch;
use observation_publisher::config::{BigQuerySink, Config, Needs};
use observation_publisher::decode::Decoder;
use observation_publisher::gen::{GenOptions, Generator};
use observation_publisher::sink::bigquery::table::{QueryResult, RestOptions};
use observation_publisher::sink::bigquery::{
    StorageClient, TableManager, TableRef, TableSpec, WriterOptions,
};
use observation_publisher::table::TableLayout;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

pub(crate) const PROJECT: &str = "test-proj";

/// Held for the length of a test that talks to the emulator.
pub(crate) async fn serial() -> tokio::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::OnceLock<tokio::sync::Mutex<()>> = std::sync::OnceLock::new();
    LOCK.get_or_init(|| tokio::sync::Mutex::new(()))
        .lock()
        .await
}

pub(crate) fn rest_url() -> String {
    let base = std::env::var("BQ_REST").unwrap_or_else(|_| "http://127.0.0.1:19050".into());
    format!("{}/bigquery/v2", base.trim_end_matches('/'))
}

pub(crate) fn grpc_url() -> String {
    std::env::var("BQ_GRPC").unwrap_or_else(|_| "http://127.0.0.1:19060".into())
}

/// A dataset name no other test (or run) uses.
pub(crate) fn fresh_name(test: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!(
        "it_{test}_{}_{}_{nanos:x}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

pub(crate) const FEATURES: &str =
    "amount: float64\n    merchant_id: string\n    num_txn_24h: int64\n    is_foreign: boolean";

/// A publisher configuration writing to `dataset` on the emulator, with `features` (YAML lines
/// under `feature_types`, 4-space indented) and extra sink keys.
pub(crate) fn config(dataset: &str, features: &str, extra_sink: &str) -> (Config, BigQuerySink) {
    let yaml = format!(
        r#"
project: it
model_id: fraud
model_version: "1"
inference_schema:
  session_id_column: session_id
  row_id_column: row_id
  model_prediction_output:
    output_class: BinaryClassificationOutput
    prediction_score_column: prediction_score
    positive_class_label: fraud
    negative_class_label: legit
    score_threshold: 0.5
  feature_types:
    {features}
observation_sinks:
- type: BIGQUERY
  config:
    project: {PROJECT}
    dataset: {dataset}
    ttl_days: 14
    storage_endpoint: {grpc}
    rest_base_url: {rest}
    auth: none
    emulator_compat: true
{extra_sink}
"#,
        grpc = grpc_url(),
        rest = rest_url(),
    );
    let v: serde_yaml_ng::Value = serde_yaml_ng::from_str(&yaml).expect("test yaml");
    let (c, _) = Config::from_value(&v, Needs::SCHEMA).unwrap_or_else(|p| panic!("{p}"));
    let sink = c.bigquery().expect("a BIGQUERY sink").clone();
    (c, sink)
}

pub(crate) fn manager() -> TableManager {
    TableManager::new(RestOptions {
        base_url: rest_url(),
        credentials: None,
        emulator_compat: true,
        timeout: Duration::from_secs(60),
    })
    .expect("REST client")
}

pub(crate) fn storage(endpoint: &str) -> StorageClient {
    StorageClient::new(endpoint, None).expect("gRPC client")
}

/// Writer options for tests: quick retries, small in-flight budget.
pub(crate) fn test_writer_options() -> WriterOptions {
    WriterOptions {
        max_request_bytes: 9_000_000,
        max_inflight_bytes: 32 << 20,
        backoff_initial: Duration::from_millis(20),
        backoff_max: Duration::from_millis(300),
        fatal_retry_interval: Duration::from_millis(200),
        unhealthy_after: 2,
        drain_timeout: Duration::from_secs(10),
        response_timeout: Duration::from_secs(60),
        partition_window: None,
        idle_close: None,
    }
}

/// A fresh dataset with the configured model's table created in it.
pub(crate) struct Fixture {
    pub(crate) config: Config,
    pub(crate) spec: TableSpec,
    pub(crate) tables: TableManager,
    pub(crate) layout: Arc<TableLayout>,
    _serial: tokio::sync::MutexGuard<'static, ()>,
}

impl Fixture {
    pub(crate) async fn new(test: &str) -> Fixture {
        Self::with(test, FEATURES, "").await
    }

    pub(crate) async fn with(test: &str, features: &str, extra_sink: &str) -> Fixture {
        let serial = serial().await;
        let dataset = fresh_name(test);
        let (config, sink) = config(&dataset, features, extra_sink);
        let _ = &sink;
        let tables = manager();
        tables
            .create_dataset(PROJECT, &dataset)
            .await
            .expect("emulator reachable (scripts/bigquery start)");
        let spec = TableSpec::from_config(&config, &sink).expect("spec");
        let report = tables.ensure_table(&spec).await.expect("table created");
        assert!(report.created);
        let layout = Arc::new(TableLayout::from_config(&config));
        Fixture {
            config,
            spec,
            tables,
            layout,
            _serial: serial,
        }
    }

    pub(crate) fn table(&self) -> &TableRef {
        &self.spec.table
    }

    pub(crate) async fn query(&self, sql: &str) -> QueryResult {
        let sql = sql.replace("{t}", &format!("`{}`", self.table().dotted()));
        self.tables
            .query(PROJECT, &sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
    }

    /// `(COUNT(*), COUNT(DISTINCT session_id, row_id))`.
    pub(crate) async fn counts(&self) -> (u64, u64) {
        let q = self
            .query("SELECT COUNT(*), COUNT(DISTINCT CONCAT(session_id, '/', row_id)) FROM {t}")
            .await;
        let n = |i: usize| {
            q.rows[0][i]
                .as_deref()
                .unwrap_or("0")
                .parse::<u64>()
                .expect("a count")
        };
        (n(0), n(1))
    }

    /// `n` decoded generated logs (`rows` rows each) as one batch.
    pub(crate) fn batch(&self, seed: u64, n: u64, rows: u32) -> RecordBatch {
        batch_for(&self.layout, &self.config, seed, n, rows)
    }
}

pub(crate) fn batch_for(
    layout: &Arc<TableLayout>,
    config: &Config,
    seed: u64,
    n: u64,
    rows: u32,
) -> RecordBatch {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or(0);
    let mut g = Generator::new(
        &config.inference_schema,
        GenOptions {
            rows_per_log: rows,
            seed,
            malformed_ratio: 0.0,
            start_micros: now,
            model: ("it".into(), "fraud".into(), "1".into()),
        },
    );
    let mut d = Decoder::new(Arc::clone(layout));
    for _ in 0..n {
        let log = g.next_log();
        d.decode(&log.bytes).expect("generated logs decode");
    }
    d.finish()
}
