//! Our MaxCompute clients (src/sink/maxcompute/client.rs) against the fake endpoint, with the faults
//! it injects on request (`POST /__fake/faults`): each surfaces as the right class, and a retried
//! upload commits every row exactly once (checked in the fake's table, decoded by pyodps's
//! reader). One fake process for the whole test.

use super::encode::{batch, binary, rows};
use super::fake::{as_maps, columns, Fake, ACCESS_ID, DATASET, PROJECT, SECRET};
use bytes::Bytes;
use observation_publisher::sink::maxcompute::client::{CallError, Client, ClientOptions, Tunnel};
use observation_publisher::sink::maxcompute::ddl::{create_table_sql, SQL_SETTINGS};
use observation_publisher::sink::maxcompute::encode::RecordEncoder;
use observation_publisher::sink::maxcompute::error::Class;
use observation_publisher::sink::maxcompute::record::BlockWriter;
use observation_publisher::sink::maxcompute::sign::Credentials;
use observation_publisher::sink::SinkErrorKind;
use serde_json::{json, Value as Json};
use std::sync::Arc;
use std::time::Duration;

fn client(fake: &Fake, secret: &str, tunnel: Option<String>) -> Client {
    client_waiting(fake, secret, tunnel, Duration::from_secs(60))
}

fn client_waiting(fake: &Fake, secret: &str, tunnel: Option<String>, wait: Duration) -> Client {
    Client::new(
        ClientOptions {
            endpoint: format!("http://127.0.0.1:{}/api", fake.port),
            project: PROJECT.into(),
            dataset: DATASET.into(),
            tunnel_endpoint: tunnel,
            request_timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(5),
            max_poll_interval: Duration::from_millis(200),
            max_instance_wait: wait,
        },
        Credentials::new(ACCESS_ID, secret),
    )
    .unwrap()
}

fn expect(r: Result<impl std::fmt::Debug, CallError>, class: Class, kind: SinkErrorKind) -> String {
    let e = r.expect_err("the fault must surface");
    assert_eq!((e.class, e.error.kind), (class, kind), "{e}");
    assert_eq!(e.error.is_retryable(), class == Class::Retry, "{e}");
    e.error.message().to_string()
}

#[test]
fn clients_run_sql_and_upload_through_the_fake_and_classify_its_faults() {
    let fake = Fake::start();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let c = client(&fake, SECRET, None);
    let layout = binary();
    let all = columns(&layout);
    rt.block_on(async {
        // Table lookup and SQL: missing, created with Merlin's DDL, found with its columns.
        let model = "prediction_log_p_m";
        assert_eq!(c.table(model).await.unwrap(), None);
        c.run_sql(&create_table_sql(DATASET, model, &all), SQL_SETTINGS)
            .await
            .unwrap();
        assert_eq!(c.table(model).await.unwrap(), Some(all.clone()));
        let inst = fake.dump("instances");
        let last = inst.as_array().unwrap().last().unwrap();
        assert_eq!(last["settings"], json!({"odps.namespace.schema": "true"}));

        // A failed task: needs a fix, names the statement and the service's detail; the same
        // statement runs once the fault is gone.
        let table = "staging";
        let create = create_table_sql(DATASET, table, &all);
        let create = create
            .split("  auto partitioned")
            .next()
            .unwrap()
            .to_string();
        fake.arm(json!({"fail_instances": 1}));
        let m = expect(
            c.run_sql(&create, SQL_SETTINGS).await,
            Class::NeedsFix,
            SinkErrorKind::Rejected,
        );
        assert!(m.contains(&create) && m.contains("fault injected"), "{m}");
        c.run_sql(&create, SQL_SETTINGS).await.unwrap();
        // An instance still running: polled until it terminates; past the wait, a retryable
        // timeout.
        fake.arm(json!({"running_polls": 3}));
        let before = status_polls(&fake);
        c.run_sql("drop table if exists ds.nothing_here", SQL_SETTINGS)
            .await
            .unwrap();
        assert_eq!(status_polls(&fake), before + 4);
        let impatient = client_waiting(&fake, SECRET, None, Duration::ZERO);
        fake.arm(json!({"running_polls": 1}));
        let m = expect(
            impatient
                .run_sql("drop table if exists ds.nothing_here", SQL_SETTINGS)
                .await,
            Class::Retry,
            SinkErrorKind::Io,
        );
        assert!(m.contains("may still run"), "{m}");
        // A malformed statement: needs a fix, named with the service's error.
        let m = expect(
            c.run_sql("create tabel oops (a bigint)", SQL_SETTINGS)
                .await,
            Class::NeedsFix,
            SinkErrorKind::Rejected,
        );
        assert!(m.contains("create tabel oops"), "{m}");

        // Refused signatures (the fault, and a client with the wrong secret): needs a fix.
        fake.arm(json!({"refuse_signatures": 1}));
        let m = expect(
            c.table(table).await,
            Class::NeedsFix,
            SinkErrorKind::Rejected,
        );
        assert!(
            m.contains("SignatureNotMatch") && m.contains("access_key_secret"),
            "{m}"
        );
        let wrong = client(&fake, "not-the-secret", None);
        expect(
            wrong.table(table).await,
            Class::NeedsFix,
            SinkErrorKind::Rejected,
        );
        assert!(!m.contains(SECRET), "{m}");
        // Unavailable and throttled: retryable.
        fake.arm(json!({"unavailable": 1}));
        expect(
            c.table(table).await,
            Class::Retry,
            SinkErrorKind::Unavailable,
        );
        fake.arm(json!({"throttle": 1}));
        let m = expect(
            c.create_upload(Tunnel::table(table)).await,
            Class::Retry,
            SinkErrorKind::Unavailable,
        );
        assert!(m.contains("SlotExceeded"), "{m}");

        // Upload: two blocks; the first PUT's connection drops midway (retryable, nothing kept),
        // the block is re-sent under the same id, block 1 twice (the second replaces the first).
        let rows = rows();
        let half = rows.len() / 2;
        let session = c.create_upload(Tunnel::table(table)).await.unwrap();
        assert_eq!(session.status, "normal");
        let enc = RecordEncoder::new(&session.columns, Arc::clone(&layout.arrow)).unwrap();
        let b = batch(&layout, &rows);
        let block = |range: std::ops::Range<usize>| {
            let mut w = BlockWriter::new();
            enc.write(&b, range, &mut w);
            Bytes::from(w.finish())
        };
        let (first, second) = (block(0..half), block(half..rows.len()));
        fake.arm(json!({"drop_block_put": 1}));
        expect(
            c.put_block(Tunnel::table(table), &session.id, 0, first.clone())
                .await,
            Class::Retry,
            SinkErrorKind::Io,
        );
        assert_eq!(
            c.upload_status(Tunnel::table(table), &session.id)
                .await
                .unwrap()
                .blocks,
            Vec::<u64>::new()
        );
        // Committing without the block: retryable, nothing committed.
        expect(
            c.commit_upload(Tunnel::table(table), &session.id, &[0, 1])
                .await,
            Class::Retry,
            SinkErrorKind::Unavailable,
        );
        c.put_block(Tunnel::table(table), &session.id, 0, first.clone())
            .await
            .unwrap();
        c.put_block(Tunnel::table(table), &session.id, 1, second.clone())
            .await
            .unwrap();
        c.put_block(Tunnel::table(table), &session.id, 1, second.clone())
            .await
            .unwrap();
        let done = c
            .commit_upload(Tunnel::table(table), &session.id, &[0, 1])
            .await
            .unwrap();
        assert_eq!(done.status, "closed");
        let key = format!("{PROJECT}.{DATASET}.{table}");
        let expected = json!(as_maps(&layout, &rows));
        assert_eq!(fake.dump("tables")[&key]["rows"], expected);

        // A failed commit: retryable; a new session with the same blocks commits them once.
        let s1 = c.create_upload(Tunnel::table(table)).await.unwrap();
        c.put_block(Tunnel::table(table), &s1.id, 0, first.clone())
            .await
            .unwrap();
        c.put_block(Tunnel::table(table), &s1.id, 1, second.clone())
            .await
            .unwrap();
        fake.arm(json!({"fail_commit": 1}));
        expect(
            c.commit_upload(Tunnel::table(table), &s1.id, &[0, 1]).await,
            Class::Retry,
            SinkErrorKind::Unavailable,
        );
        let s2 = c.create_upload(Tunnel::table(table)).await.unwrap();
        c.put_block(Tunnel::table(table), &s2.id, 0, first)
            .await
            .unwrap();
        c.put_block(Tunnel::table(table), &s2.id, 1, second)
            .await
            .unwrap();
        c.commit_upload(Tunnel::table(table), &s2.id, &[0, 1])
            .await
            .unwrap();
        let twice: Vec<Json> = [
            expected.as_array().unwrap().clone(),
            expected.as_array().unwrap().clone(),
        ]
        .concat();
        assert_eq!(fake.dump("tables")[&key]["rows"], json!(twice));

        // A block the Tunnel cannot read: a row-level refusal, nothing kept.
        let s3 = c.create_upload(Tunnel::table(table)).await.unwrap();
        let mut garbage = block(0..1).to_vec();
        garbage.truncate(garbage.len() - 3);
        expect(
            c.put_block(Tunnel::table(table), &s3.id, 0, Bytes::from(garbage))
                .await,
            Class::RowsRefused,
            SinkErrorKind::Rejected,
        );

        // The configured Tunnel endpoint is used as is (no `?service` asked).
        let direct = client(
            &fake,
            SECRET,
            Some(format!("http://127.0.0.1:{}", fake.port)),
        );
        let before = service_asks(&fake);
        direct.create_upload(Tunnel::table(table)).await.unwrap();
        assert_eq!(service_asks(&fake), before);
    });
    // Block PUTs are chunked, as pyodps sends them, and every request was signed.
    let log = fake.dump("log");
    let log = log.as_array().unwrap();
    assert_eq!(log.iter().filter(|r| r.get("fault").is_some()).count(), 1);
    let puts: Vec<&Json> = log
        .iter()
        .filter(|r| r["method"] == "PUT" && r.get("fault").is_none())
        .collect();
    assert_eq!(puts.len(), 8, "{puts:?}");
    assert!(puts.iter().all(|r| r["chunked"] == true), "{puts:?}");
}

fn service_asks(fake: &Fake) -> usize {
    fake.dump("log")
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["path"].as_str().unwrap_or("").contains("tunnel?service"))
        .count()
}

/// `GET …/instances/{id}` without `?taskstatus` / `?result`, as logged by the fake.
fn status_polls(fake: &Fake) -> usize {
    fake.dump("log")
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| {
            let p = r["path"].as_str().unwrap_or("");
            r["method"] == "GET"
                && p.contains("/instances/")
                && !p.contains("taskstatus")
                && !p.contains("result")
        })
        .count()
}
