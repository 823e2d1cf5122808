//! The MAXCOMPUTE sink end to end: the real binary, the real broker,
//! the Parquet local sink beside it (the values every sink writes) and the fake MaxCompute
//! endpoint (pyodps's signer and reader as the authority). One fake process per test.
//!
//! - [`ours_and_merlins_path_write_the_same_rows_and_ddl`]: our target holds exactly the rows
//!   Parquet holds (NULLs kept, TIMESTAMP to the microsecond), Merlin's path (merlin_sink.py on
//!   pyodps 0.12.2) given the same rows writes the same rows with the same DDL; a clean stop
//!   leaves no staging table.
//! - [`faults_lose_nothing_and_commit_nothing_early`]: failing instances, refused signatures, a
//!   block PUT cut midway, a failed commit, 503 and throttling while logs flow: the committed
//!   offsets never run ahead of the target, every row lands exactly once; a publisher killed
//!   with rows staged leaves its staging table, the next start of the same pod drops it and the
//!   rows come again from Kafka.

use super::fake::{http, Fake, ACCESS_ID, DATASET, PROJECT, SECRET};
use crate::common::bin;
use crate::runtime::{
    committed_total, create_topic, logs, logs_at, produce, signal, stop, unique, wait_for, Setup,
};
use arrow_array::cast::AsArray;
use arrow_array::types::{Float64Type, Int64Type, TimestampMicrosecondType};
use arrow_array::Array;
use arrow_schema::DataType;
use observation_publisher::sink::maxcompute::ddl::table_name;
use serde_json::{json, Map, Value as Json};
use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::Duration;

pub(super) const LIMIT: Duration = Duration::from_secs(120);

pub(super) fn target() -> String {
    table_name("demo", "fraud-detector")
}

pub(super) fn key(dataset: &str, table: &str) -> String {
    format!("{PROJECT}.{dataset}.{table}")
}

pub(super) fn sink_yaml(fake: &Fake, interval: &str) -> String {
    format!(
        "observation_sinks:\n- type: MAXCOMPUTE\n  config:\n    project: {PROJECT}\n    dataset: {DATASET}\n    ttl_days: 0\n    access_key_id: {ACCESS_ID}\n    access_key_secret: {SECRET}\n    access_url: http://127.0.0.1:{}/api\n    interval: {interval}\n",
        fake.port
    )
}

/// A running publisher, killed if the test fails before stopping it.
pub(super) struct Running(Option<Child>);

impl Running {
    /// SIGTERM, and the exit code.
    pub(super) fn stop(mut self) -> Option<i32> {
        stop(crate::common::Reaped(self.0.take().expect("running")))
    }

    /// SIGKILL (a crash), waited for.
    pub(super) fn kill(mut self) {
        let mut child = self.0.take().expect("running");
        signal(&child, "-KILL");
        let _ = child.wait();
    }

    fn child(&mut self) -> &mut Child {
        self.0.as_mut().expect("running")
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// `run` as pod `pod` (the staging table's name comes from it).
/// A publisher as pod `pod` on `topic` with a fresh group and the 1 s mover, its files under
/// `dir/name`; returns it running and its setup.
pub(super) fn start_fresh(
    fake: &Fake,
    dir: &Path,
    name: &str,
    topic: &str,
    pod: &str,
) -> (Running, Setup) {
    let s = Setup::new(dir, name, topic, &unique("g"), &sink_yaml(fake, "1s"));
    (start(&s, pod), s)
}

/// [`start_fresh`], once the publisher `pod` has created its staging table.
pub(super) fn start_staged(fake: &Fake, dir: &Path, topic: &str, pod: &str) -> (Running, Setup) {
    let (child, s) = start_fresh(fake, dir, "a", topic, pod);
    assert!(
        wait_for(LIMIT, || staging_of(fake, pod).is_some()),
        "{}",
        s.log_tail()
    );
    (child, s)
}

pub(super) fn start(s: &Setup, pod: &str) -> Running {
    Running(Some(
        bin()
            .args(["run", "-c", s.config.to_str().unwrap()])
            .env("POD_NAME", pod)
            .stdout(Stdio::null())
            .stderr(
                std::fs::File::create(s.dir.join(format!("log-{}.txt", unique("run")))).unwrap(),
            )
            .spawn()
            .unwrap(),
    ))
}

/// Every Parquet row as the fake dumps rows: column → value (`{"us"}` timestamps, `{"f64"}`
/// doubles), keyed by session id; and the columns with their MaxCompute types.
fn parquet_maps(dir: &Path) -> (BTreeMap<String, Json>, Vec<(String, String)>) {
    let mut out = BTreeMap::new();
    let mut columns = Vec::new();
    for b in crate::runtime::parquet_batches(dir) {
        let schema = b.schema();
        columns = schema
            .fields()
            .iter()
            .map(|f| {
                let ty = match f.data_type() {
                    DataType::Utf8 => "STRING",
                    DataType::Int64 => "BIGINT",
                    DataType::Float64 => "DOUBLE",
                    DataType::Boolean => "BOOLEAN",
                    DataType::Timestamp(..) => "TIMESTAMP",
                    other => panic!("{other}"),
                };
                (f.name().clone(), ty.to_string())
            })
            .collect();
        for i in 0..b.num_rows() {
            let mut m = Map::new();
            for (c, f) in b.columns().iter().zip(schema.fields()) {
                let v = if c.is_null(i) {
                    Json::Null
                } else {
                    match f.data_type() {
                        DataType::Utf8 => json!(c.as_string::<i32>().value(i)),
                        DataType::Int64 => json!(c.as_primitive::<Int64Type>().value(i)),
                        DataType::Float64 => json!({
                            "f64": c.as_primitive::<Float64Type>().value(i).to_bits() as i64
                        }),
                        DataType::Boolean => json!(c.as_boolean().value(i)),
                        _ => json!({
                            "us": c.as_primitive::<TimestampMicrosecondType>().value(i)
                        }),
                    }
                };
                m.insert(f.name().to_lowercase(), v);
            }
            let session = m["session_id"].as_str().unwrap().to_string();
            out.insert(session, Json::Object(m));
        }
    }
    (out, columns)
}

/// A table's rows keyed by session id (the auto partition value taken out and checked), and
/// how many rows it holds.
pub(super) fn table_rows(fake: &Fake, key: &str) -> (BTreeMap<String, Json>, usize) {
    let tables = fake.dump("tables");
    let rows = tables[key]["rows"].as_array().cloned().unwrap_or_default();
    let n = rows.len();
    let mut out = BTreeMap::new();
    for r in rows {
        let mut r = r.as_object().unwrap().clone();
        let pt = r.remove("request_timestamp_pt").unwrap();
        let us = r["request_timestamp"]["us"].as_i64().unwrap();
        let day = utc_day(us);
        assert_eq!(pt, json!(day), "the auto partition is the row's day");
        out.insert(
            r["session_id"].as_str().unwrap().to_string(),
            Json::Object(r),
        );
    }
    (out, n)
}

/// The UTC day of a timestamp, `YYYY-MM-DD`.
fn utc_day(us: i64) -> String {
    let (y, m, d) = observation_publisher::output::civil_from_days(us.div_euclid(86_400_000_000));
    format!("{y:04}-{m:02}-{d:02}")
}

/// The staging table of pod `pod` in the fake (its name ends with its process's start stamp),
/// once it exists; the newest when earlier starts left theirs.
pub(super) fn staging_of(fake: &Fake, pod: &str) -> Option<String> {
    let prefix = key(
        DATASET,
        &format!("{}_stg_{}_", target(), pod.replace('-', "_")),
    );
    table_names(fake)
        .into_iter()
        .filter(|t| t.starts_with(&prefix))
        .max()
}

pub(super) fn table_names(fake: &Fake) -> Vec<String> {
    fake.dump("tables")
        .as_object()
        .unwrap()
        .keys()
        .cloned()
        .collect()
}

#[test]
fn ours_and_merlins_path_write_the_same_rows_and_ddl() {
    let fake = Fake::start();
    let dir = tempfile::tempdir().unwrap();
    let topic = unique("mc-same");
    create_topic(&topic, 1);
    // Whole-millisecond logs (Merlin's path keeps only milliseconds), then logs with
    // microseconds (ours keeps them).
    let whole = logs(120, 41, 0.0);
    let micro = logs_at(20, 42, 0.0, 1_764_000_000_000_123);
    let (child, s) = start_fresh(&fake, dir.path(), "a", &topic, "pod-a");
    produce(&topic, &whole);
    produce(&topic, &micro);
    let n = whole.len() + micro.len();
    let ok = wait_for(LIMIT, || committed_total(&topic, &s.group, 1) == n as i64);
    let code = child.stop();
    assert!(ok, "every offset commits\n{}", s.log_tail());
    assert_eq!(code, Some(0), "{}", s.log_tail());

    // Ours: exactly the rows Parquet holds (the values every sink writes), NULLs included.
    let (parquet, columns) = parquet_maps(&s.dir.join("rows"));
    assert_eq!(parquet.len(), n);
    let (ours, count) = table_rows(&fake, &key(DATASET, &target()));
    assert_eq!(count, n, "every row once");
    assert_eq!(ours, parquet);
    assert!(
        parquet
            .values()
            .any(|r| r.as_object().unwrap().values().any(Json::is_null)),
        "the generated logs have NULL features, kept"
    );
    // Microseconds kept.
    let with_us: Vec<i64> = ours
        .iter()
        .filter(|(k, _)| k.starts_with("sess-2a-"))
        .map(|(_, r)| r["request_timestamp"]["us"].as_i64().unwrap())
        .collect();
    assert_eq!(with_us.len(), micro.len());
    assert!(with_us.iter().all(|us| us % 1_000 == 123), "{with_us:?}");
    // A clean stop leaves only the target.
    assert_eq!(table_names(&fake), vec![key(DATASET, &target())]);
    let sql: Vec<String> = fake
        .dump("instances")
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["sql"].as_str().unwrap().to_string())
        .collect();
    assert!(
        sql.iter()
            .any(|q| q.starts_with("create table ds.prediction_log_demo_fraud_detector_stg_pod_a")),
        "{sql:?}"
    );

    // Merlin's path, given the same whole-millisecond rows without NULLs (it cannot carry
    // them), into the same table name in another dataset.
    let merlin_rows: Vec<&Json> = parquet
        .iter()
        .filter(|(k, r)| {
            k.starts_with("sess-29-") && !r.as_object().unwrap().values().any(Json::is_null)
        })
        .map(|(_, r)| r)
        .collect();
    assert!(merlin_rows.len() >= 60, "{}", merlin_rows.len());
    let spec = json!({
        "port": fake.port, "access_id": ACCESS_ID, "secret": SECRET,
        "project": PROJECT, "dataset": "merlin", "table": target(),
        "columns": columns,
        "rows": merlin_rows.iter().map(|r| {
            columns.iter().map(|(c, _)| r[c.to_lowercase()].clone()).collect::<Vec<_>>()
        }).collect::<Vec<_>>(),
    });
    super::pyodps_script("merlin_sink.py", &spec);
    let tables = fake.dump("tables");
    let (ours_ddl, merlin_ddl) = (
        tables[key(DATASET, &target())]["ddl"].as_str().unwrap(),
        tables[key("merlin", &target())]["ddl"].as_str().unwrap(),
    );
    assert_eq!(
        ours_ddl,
        merlin_ddl.replacen("merlin.", "ds.", 1),
        "same DDL"
    );
    let (merlin, count) = table_rows(&fake, &key("merlin", &target()));
    assert_eq!(count, merlin_rows.len());
    let ours_same: BTreeMap<String, Json> = ours
        .into_iter()
        .filter(|(k, _)| merlin.contains_key(k))
        .collect();
    assert_eq!(
        merlin, ours_same,
        "Merlin's path and ours wrote the same rows"
    );
}

/// Committed offset `c` (one partition) must not run ahead of the target: the first `c` logs'
/// sessions are all there.
fn check_not_ahead(fake: &Fake, s: &Setup, topic: &str, sessions: &[String]) -> usize {
    let c = committed_total(topic, &s.group, 1) as usize;
    let (rows, _) = table_rows(fake, &key(DATASET, &target()));
    for sess in &sessions[..c.min(sessions.len())] {
        assert!(
            rows.contains_key(sess),
            "offset {c} committed but {sess} is not in the target\n{}",
            s.log_tail()
        );
    }
    c
}

#[test]
fn faults_lose_nothing_and_commit_nothing_early() {
    let fake = Fake::start();
    let dir = tempfile::tempdir().unwrap();
    let topic = unique("mc-faults");
    create_topic(&topic, 1);
    let group = unique("g");
    let all = logs(300, 43, 0.0);
    let sessions: Vec<String> = (0..all.len()).map(|i| format!("sess-2b-{i}")).collect();
    let s = Setup::new(dir.path(), "a", &topic, &group, &sink_yaml(&fake, "1s"));
    let child = start(&s, "pod-f");
    produce(&topic, &all[..100]);
    assert!(
        wait_for(LIMIT, || check_not_ahead(&fake, &s, &topic, &sessions)
            == 100),
        "{}",
        s.log_tail()
    );

    // Every fault at once while the next logs flow; the commit never runs ahead.
    fake.arm(
        json!({"fail_instances": 2, "refuse_signatures": 1, "drop_block_put": 1,
               "fail_commit": 1, "unavailable": 2, "throttle": 2}),
    );
    produce(&topic, &all[100..200]);
    assert!(
        wait_for(LIMIT, || check_not_ahead(&fake, &s, &topic, &sessions)
            == 200),
        "{}",
        s.log_tail()
    );
    assert_eq!(child.stop(), Some(0), "{}", s.log_tail());
    let (rows, count) = table_rows(&fake, &key(DATASET, &target()));
    assert_eq!((rows.len(), count), (200, 200), "every row exactly once");
    assert_eq!(
        table_names(&fake),
        vec![key(DATASET, &target())],
        "no staging table left"
    );
    // Every armed fault fired (the counts are back to 0).
    let (status, left) = http(fake.port, "POST", "/__fake/faults", &[], b"{}");
    assert_eq!(status, 200);
    let left: Json = serde_json::from_slice(&left).unwrap();
    assert!(
        left.as_object().unwrap().values().all(|v| v == 0),
        "faults not used: {left}"
    );

    // A publisher killed with rows staged (an interval it never reaches) leaves its staging
    // table; the next start as the same pod drops it and reads the rows again from Kafka.
    let slow = Setup::new(dir.path(), "b", &topic, &group, &sink_yaml(&fake, "1h"));
    let child = start(&slow, "pod-f");
    produce(&topic, &all[200..]);
    let mut staging = String::new();
    let staged = wait_for(LIMIT, || {
        staging = staging_of(&fake, "pod-f").unwrap_or_default();
        fake.dump("tables")[&staging]["rows"]
            .as_array()
            .is_some_and(|r| r.len() == 100)
    });
    child.kill();
    assert!(staged, "rows staged\n{}", slow.log_tail());
    assert_eq!(
        committed_total(&topic, &slow.group, 1),
        200,
        "nothing of them committed"
    );
    assert!(
        table_names(&fake).contains(&staging),
        "the crash left its staging table"
    );

    let again = Setup::new(dir.path(), "c", &topic, &group, &sink_yaml(&fake, "1s"));
    let child = start(&again, "pod-f");
    assert!(
        wait_for(LIMIT, || check_not_ahead(&fake, &again, &topic, &sessions)
            == 300),
        "{}",
        again.log_tail()
    );
    assert_eq!(child.stop(), Some(0), "{}", again.log_tail());
    assert_eq!(
        again.log_count("\"dropped_left_by_earlier_start\":1"),
        1,
        "{}",
        again.log_tail()
    );
    for setup in [&s, &slow, &again] {
        assert_eq!(setup.log_count(SECRET), 0, "the secret is never printed");
    }
    assert!(
        s.log_count("access_key_secret") > 0,
        "the refused signature was reported, naming the key (not its value)\n{}",
        s.log_tail()
    );
    let (rows, count) = table_rows(&fake, &key(DATASET, &target()));
    assert_eq!(
        (rows.len(), count),
        (300, 300),
        "the dropped staging rows came again from Kafka, once"
    );
    assert_eq!(table_names(&fake), vec![key(DATASET, &target())]);
}

/// At start: a target lacking a model column gets it with `ALTER TABLE … ADD COLUMNS`; a column
/// whose type changed ends `run` with exit 2 naming the column (as BIGQUERY), before anything is
/// consumed.
/// A client of the fake, as the sink builds it.
fn client(fake: &Fake) -> observation_publisher::sink::maxcompute::client::Client {
    use observation_publisher::sink::maxcompute::client::{Client, ClientOptions};
    use observation_publisher::sink::maxcompute::sign::Credentials;
    Client::new(
        ClientOptions {
            endpoint: format!("http://127.0.0.1:{}/api", fake.port),
            project: PROJECT.into(),
            dataset: DATASET.into(),
            tunnel_endpoint: None,
            request_timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(5),
            max_poll_interval: Duration::from_millis(100),
            max_instance_wait: Duration::from_secs(60),
        },
        Credentials::new(ACCESS_ID, SECRET),
    )
    .unwrap()
}

/// The model's columns as the sink declares them.
fn model_columns() -> Vec<observation_publisher::sink::maxcompute::schema::TableColumn> {
    use observation_publisher::sink::maxcompute::schema::TableColumn;
    use observation_publisher::table::TableLayout;
    let cfg = crate::common::local_config();
    TableColumn::from_layout(&TableLayout::from_config(&cfg).columns)
}

/// Publishers of one model start together: one reads the target as missing, another creates it,
/// and the first one's CREATE then fails "already exists". That is no fault: the target is read
/// again and whatever it still lacks is added.
#[test]
fn a_target_created_by_another_instance_between_read_and_create_is_used() {
    use observation_publisher::sink::maxcompute::ddl::{create_table_sql, SQL_SETTINGS};
    use observation_publisher::sink::maxcompute::table::ensure_target;

    let fake = Fake::start();
    let model = model_columns();
    let client = client(&fake);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    // The other instance's table, an older one without the last column.
    rt.block_on(client.run_sql(
        &create_table_sql(DATASET, &target(), &model[..model.len() - 1]),
        SQL_SETTINGS,
    ))
    .unwrap();
    fake.arm(json!({"hide_tables": 1}));
    let outcome = rt.block_on(ensure_target(&client, DATASET, &target(), &model));
    assert_eq!(outcome.map_err(|e| e.to_string()), Ok("columns added"));
    let columns = fake.dump("tables")[key(DATASET, &target())]["columns"]
        .as_array()
        .map_or(0, |c| c.len());
    assert_eq!(columns, model.len());
    let failed: Vec<String> = fake
        .instances()
        .iter()
        .filter(|i| i["ok"] == false)
        .map(|i| i["result"].to_string())
        .collect();
    assert!(
        failed.len() == 1 && failed[0].contains("already exists"),
        "the raced CREATE ran and failed: {failed:?}"
    );

    // Read as missing once more, now complete: nothing left to do.
    fake.arm(json!({"hide_tables": 1}));
    let outcome = rt.block_on(ensure_target(&client, DATASET, &target(), &model));
    assert_eq!(
        outcome.map_err(|e| e.to_string()),
        Ok("changed by another instance")
    );
}

#[test]
fn start_adds_missing_columns_and_refuses_a_changed_type() {
    use observation_publisher::sink::maxcompute::ddl::{create_table_sql, SQL_SETTINGS};
    use observation_publisher::sink::maxcompute::schema::OdpsType;

    let fake = Fake::start();
    let model = model_columns();
    let client = client(&fake);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let sql = |q: String| rt.block_on(client.run_sql(&q, SQL_SETTINGS)).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let run = |name: &str| start_fresh(&fake, dir.path(), name, &unique("mc-start"), "pod-s");

    // An older table without the last column: it is added, the process runs.
    sql(create_table_sql(
        DATASET,
        &target(),
        &model[..model.len() - 1],
    ));
    let (child, s) = run("a");
    let added = wait_for(LIMIT, || {
        fake.dump("tables")[key(DATASET, &target())]["columns"]
            .as_array()
            .is_some_and(|c| c.len() == model.len())
    });
    assert_eq!(child.stop(), Some(0), "{}", s.log_tail());
    assert!(added, "{}", s.log_tail());
    let last = &model[model.len() - 1];
    let alter = format!(
        "alter table ds.{} add columns ( {} {} )",
        target(),
        last.name,
        last.ty
    );
    assert!(
        fake.dump("instances")
            .as_array()
            .unwrap()
            .iter()
            .any(|i| i["sql"] == alter.as_str()),
        "Merlin's alter statement: {alter}"
    );

    // A column whose type changed: exit 2 naming it.
    sql(format!("drop table ds.{}", target()));
    let mut changed = model.clone();
    let amount = changed.iter_mut().find(|c| c.name == "amount").unwrap();
    amount.ty = OdpsType::String;
    sql(create_table_sql(DATASET, &target(), &changed));
    let (mut child, s) = run("b");
    let end = std::time::Instant::now() + LIMIT;
    let code = loop {
        if let Some(st) = child.child().try_wait().unwrap() {
            break st.code();
        }
        if std::time::Instant::now() > end {
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(code, Some(2), "{}", s.log_tail());
    assert!(
        s.log_count(
            "column amount of MaxCompute table ds.prediction_log_demo_fraud_detector is STRING"
        ) > 0,
        "{}",
        s.log_tail()
    );
}

/// Rows the Tunnel refuses become row letters before anything is staged: the refused block is
/// narrowed down to them, every other row reaches the target, the letters are written, and every
/// offset commits.
#[test]
fn rows_the_tunnel_refuses_become_row_letters() {
    let fake = Fake::start();
    let refused = ["sess-2c-3", "sess-2c-17"];
    let (status, _) = http(
        fake.port,
        "POST",
        "/__fake/refuse_rows",
        &[],
        json!({"column": "session_id", "values": refused})
            .to_string()
            .as_bytes(),
    );
    assert_eq!(status, 200);
    let dir = tempfile::tempdir().unwrap();
    let topic = unique("mc-refused");
    create_topic(&topic, 1);
    let all = logs(40, 44, 0.0);
    let (child, s) = start_fresh(&fake, dir.path(), "a", &topic, "pod-r");
    produce(&topic, &all);
    let ok = wait_for(LIMIT, || {
        committed_total(&topic, &s.group, 1) == all.len() as i64
    });
    // A refused row is never durable in the sink, so it has no freshness there.
    let (_, scrape) = s.get("/metrics").expect("http");
    assert_eq!(child.stop(), Some(0), "{}", s.log_tail());
    assert!(ok, "every offset commits\n{}", s.log_tail());
    let fresh = format!(
        "observation_publisher_row_freshness_seconds_count{{sink=\"maxcompute\"}} {}",
        all.len() - refused.len()
    );
    assert!(scrape.lines().any(|l| l == fresh), "{fresh}\n{scrape}");
    let (rows, count) = table_rows(&fake, &key(DATASET, &target()));
    assert_eq!(count, all.len() - refused.len(), "{}", s.log_tail());
    for r in refused {
        assert!(!rows.contains_key(r), "{r} refused");
    }
    assert_eq!(s.dead_letters(), refused.len(), "one row letter each");
    assert_eq!(
        s.log_count("maxcompute_refused"),
        refused.len(),
        "{}",
        s.log_tail()
    );
    assert_eq!(table_names(&fake), vec![key(DATASET, &target())]);
}
