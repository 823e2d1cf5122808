//! Faults the emulator cannot produce, injected by the proxy: nothing lost, nothing duplicated,
//! refused rows reported, health reported, no panic.

use super::proxy::{Fault, Proxy, Script};
use super::*;
use arrow_array::cast::AsArray;
use observation_publisher::sink::bigquery::{AppendWriter, RejectReason};
use std::collections::HashSet;
use tonic::Code;

fn any_port() -> std::net::SocketAddr {
    "127.0.0.1:0".parse().expect("address")
}

/// A writer for the fixture's table, appending at `url`.
fn writer(f: &Fixture, url: &str, opts: WriterOptions) -> AppendWriter {
    AppendWriter::start(storage(url), f.table(), Arc::clone(&f.layout.arrow), opts).expect("writer")
}

/// Appends `n` batches of 5 sessions × 2 rows (seeds from `first_seed`) without waiting, then
/// waits for each to be acknowledged with all 10 rows, within 60 s each (before any drain or
/// response timeout of the tests would rescue a stuck connection).
async fn append_and_ack(w: &AppendWriter, f: &Fixture, first_seed: u64, n: u64) {
    let mut pending = Vec::new();
    for s in 0..n {
        pending.push(
            w.append(f.batch(first_seed + s, 5, 2))
                .await
                .expect("append"),
        );
    }
    for p in pending {
        let out = tokio::time::timeout(Duration::from_secs(60), p)
            .await
            .expect("every batch resolves in time")
            .expect("acked");
        assert_eq!(out.appended, 10);
    }
}

#[tokio::test]
async fn unavailable_dropped_streams_and_row_errors_lose_nothing() {
    let f = Fixture::new("faults").await;
    let mut script = Script::default();
    script.at.insert(3, Fault::Unavailable);
    script.at.insert(6, Fault::DropStream);
    script.at.insert(9, Fault::RowErrors(vec![0, 2]));
    script.at.insert(12, Fault::InBand(Code::Unavailable));
    script.at.insert(14, Fault::InBand(Code::Internal));
    script.at.insert(16, Fault::InBand(Code::ResourceExhausted));
    let proxy = Proxy::start(any_port(), &grpc_url(), script).await;
    let w = writer(&f, &proxy.url(), test_writer_options());

    let batches: Vec<RecordBatch> = (0..14u64).map(|s| f.batch(200 + s, 10, 2)).collect();
    let total: usize = batches.iter().map(RecordBatch::num_rows).sum();
    let mut pending = Vec::new();
    for b in &batches {
        pending.push(w.append(b.clone()).await.expect("append"));
    }
    let mut rejected_keys = HashSet::new();
    let mut appended = 0;
    for (b, p) in batches.iter().zip(pending) {
        let out = tokio::time::timeout(Duration::from_secs(120), p)
            .await
            .expect("every batch resolves")
            .expect("acknowledged");
        assert_eq!(
            out.appended + out.rejected.len(),
            b.num_rows(),
            "every row accounted for"
        );
        appended += out.appended;
        for r in &out.rejected {
            assert_eq!(r.reason, RejectReason::RowError);
            assert!(r.message.contains("injected"), "{r:?}");
            let key = (
                b.column(0).as_string::<i32>().value(r.index).to_string(),
                b.column(1).as_string::<i32>().value(r.index).to_string(),
            );
            assert!(rejected_keys.insert(key), "a row reported twice");
        }
    }
    assert_eq!(
        rejected_keys.len(),
        2,
        "the two rows named in row_errors, and only them"
    );
    assert_eq!(appended, total - 2);
    assert_eq!(
        proxy.unused_faults(),
        0,
        "every scripted fault was injected"
    );
    // The two RPC-level faults force new connections; in-band ones may share one drain.
    assert!(
        proxy.opens() >= 3,
        "reconnected after the faults ({} opens)",
        proxy.opens()
    );
    assert!(w.is_healthy());
    assert!(w.close(Duration::from_secs(30)).await);

    let expected = (total - 2) as u64;
    assert_eq!(
        f.counts().await,
        (expected, expected),
        "no row lost, none duplicated"
    );
    for (s, r) in &rejected_keys {
        let q = f
            .query(&format!(
                "SELECT COUNT(*) FROM {{t}} WHERE session_id = '{s}' AND row_id = '{r}'"
            ))
            .await;
        assert_eq!(
            q.scalar(),
            Some("0"),
            "rejected row ({s}, {r}) was not written"
        );
    }
}

#[tokio::test]
async fn an_unreachable_endpoint_acks_nothing_and_recovers() {
    let f = Fixture::new("unreachable").await;
    // A port nobody listens on (yet).
    let addr = std::net::TcpListener::bind(any_port())
        .and_then(|l| l.local_addr())
        .expect("free port");
    let w = writer(&f, &format!("http://{addr}"), test_writer_options());
    let mut health = w.health();
    let mut pending = w.append(f.batch(300, 10, 3)).await.expect("append");
    tokio::time::timeout(Duration::from_secs(60), health.wait_for(|h| !*h))
        .await
        .expect("unhealthy while unreachable")
        .expect("health channel");
    assert!(
        tokio::time::timeout(Duration::from_millis(300), &mut pending)
            .await
            .is_err(),
        "nothing acknowledged while BigQuery is unreachable"
    );

    // BigQuery comes back on that address.
    let proxy = Proxy::start(addr, &grpc_url(), Script::default()).await;
    let out = tokio::time::timeout(Duration::from_secs(60), pending)
        .await
        .expect("recovers")
        .expect("acknowledged");
    assert_eq!(out.appended, 30);
    tokio::time::timeout(Duration::from_secs(10), health.wait_for(|h| *h))
        .await
        .expect("healthy again")
        .expect("health channel");
    assert!(w.close(Duration::from_secs(30)).await);
    assert!(proxy.forwarded() >= 1);
    assert_eq!(f.counts().await, (30, 30));
}

#[tokio::test]
async fn permission_denied_is_unhealthy_and_never_acknowledged() {
    let f = Fixture::new("denied").await;
    let script = Script {
        refuse_open: [
            Code::PermissionDenied,
            Code::PermissionDenied,
            Code::Unauthenticated,
        ]
        .into(),
        ..Default::default()
    };
    let proxy = Proxy::start(any_port(), &grpc_url(), script).await;
    let opts = WriterOptions {
        unhealthy_after: 100,
        ..test_writer_options()
    };
    let w = writer(&f, &proxy.url(), opts);
    let mut health = w.health();
    let pending = w.append(f.batch(400, 5, 2)).await.expect("append");
    tokio::time::timeout(Duration::from_secs(30), health.wait_for(|h| !*h))
        .await
        .expect("a permission error makes the writer unhealthy at once")
        .expect("health channel");
    let out = tokio::time::timeout(Duration::from_secs(60), pending)
        .await
        .expect("retried slowly until allowed")
        .expect("acknowledged");
    assert_eq!(out.appended, 10);
    assert!(
        proxy.opens() >= 4,
        "three refusals, then the accepted connection"
    );
    assert!(w.is_healthy());
    assert!(w.close(Duration::from_secs(30)).await);
    assert_eq!(f.counts().await, (10, 10));
}

#[tokio::test]
async fn in_band_invalid_argument_bisects_instead_of_dropping() {
    // A data error without row_errors on a multi-row request: the writer must split it and
    // re-send the halves (here they succeed), never report rows that BigQuery did not name.
    let f = Fixture::new("bisect").await;
    let mut script = Script::default();
    script.at.insert(1, Fault::InBand(Code::InvalidArgument));
    let proxy = Proxy::start(any_port(), &grpc_url(), script).await;
    let w = writer(&f, &proxy.url(), test_writer_options());
    let out = w
        .append(f.batch(500, 8, 2))
        .await
        .expect("append")
        .await
        .expect("acknowledged");
    assert_eq!((out.appended, out.rejected.len()), (16, 0));
    assert_eq!(
        proxy.requests(),
        3,
        "the refused request, then its two halves"
    );
    assert!(w.close(Duration::from_secs(30)).await);
    assert_eq!(f.counts().await, (16, 16));
}

#[tokio::test]
async fn a_schema_mismatch_adds_the_columns_and_reconnects_without_restart() {
    // The table has the old model's columns; the writer already writes the new model's batches.
    let f = Fixture::new("mismatch").await;
    let features = format!("{FEATURES}\n    country: string");
    let (config2, sink2) = super::config(&f.spec.table.dataset, &features, "");
    let spec2 = TableSpec::from_config(&config2, &sink2).expect("spec");
    let layout2 = Arc::new(TableLayout::from_config(&config2));
    // The emulator silently drops unknown columns; the proxy answers like BigQuery instead.
    let mut script = Script::default();
    script.at.insert(1, Fault::SchemaMismatch);
    let proxy = Proxy::start(any_port(), &grpc_url(), script).await;
    let w = AppendWriter::start_evolving(
        storage(&proxy.url()),
        manager(),
        spec2,
        Arc::clone(&layout2.arrow),
        test_writer_options(),
    )
    .expect("writer");
    let out = w
        .append(batch_for(&layout2, &config2, 600, 10, 2))
        .await
        .expect("append")
        .await
        .expect("acknowledged");
    assert_eq!((out.appended, out.rejected.len()), (20, 0));
    assert_eq!(proxy.unused_faults(), 0);
    assert!(w.close(Duration::from_secs(30)).await);

    let t = f
        .tables
        .get_table(f.table())
        .await
        .expect("get")
        .expect("exists");
    let names: Vec<&str> = t["schema"]["fields"]
        .as_array()
        .expect("fields")
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect();
    assert!(names.contains(&"country"), "{names:?}");
    let q = f
        .query("SELECT COUNT(*), COUNTIF(country IS NOT NULL) FROM {t}")
        .await;
    assert_eq!(q.rows[0][0].as_deref(), Some("20"));
    let with_country: u64 = q.rows[0][1]
        .as_deref()
        .unwrap_or("0")
        .parse()
        .expect("count");
    assert!(
        with_country >= 17,
        "the new column is written after the reconnect ({with_country})"
    );
}

#[tokio::test]
async fn a_stalled_connection_is_abandoned_and_its_requests_resent() {
    let f = Fixture::new("stall").await;
    let mut script = Script::default();
    script.at.insert(2, Fault::Stall);
    let proxy = Proxy::start(any_port(), &grpc_url(), script).await;
    let opts = WriterOptions {
        response_timeout: Duration::from_millis(500),
        ..test_writer_options()
    };
    let w = writer(&f, &proxy.url(), opts);
    append_and_ack(&w, &f, 1_000, 4).await;
    assert_eq!(proxy.unused_faults(), 0);
    assert!(proxy.opens() >= 2, "the stalled connection was replaced");
    assert!(w.close(Duration::from_secs(30)).await);
    assert_eq!(f.counts().await, (40, 40));
}

#[tokio::test]
async fn in_flight_bytes_bound_appends_while_bigquery_is_down() {
    let f = Fixture::new("budget").await;
    let addr = std::net::TcpListener::bind(any_port())
        .and_then(|l| l.local_addr())
        .expect("free port");
    let first = f.batch(1_100, 10, 2);
    let size = observation_publisher::sink::bigquery::encode::batch_bytes(&first)
        .expect("ipc")
        .len();
    // Room for one batch only.
    let opts = WriterOptions {
        max_inflight_bytes: size + size / 2,
        ..test_writer_options()
    };
    let w = writer(&f, &format!("http://{addr}"), opts);
    let p1 = w.append(first).await.expect("admitted");
    let (p2, _proxy) = {
        let second = w.append(f.batch(1_101, 10, 2));
        tokio::pin!(second);
        assert!(
            tokio::time::timeout(Duration::from_millis(300), &mut second)
                .await
                .is_err(),
            "a second batch waits for room while the first is unacknowledged"
        );
        let proxy = Proxy::start(addr, &grpc_url(), Script::default()).await;
        let p2 = tokio::time::timeout(Duration::from_secs(60), second)
            .await
            .expect("room again")
            .expect("admitted");
        (p2, proxy)
    };
    for p in [p1, p2] {
        let out = tokio::time::timeout(Duration::from_secs(60), p)
            .await
            .expect("resolves")
            .expect("acked");
        assert_eq!(out.appended, 20);
    }
    assert!(w.close(Duration::from_secs(30)).await);
    assert_eq!(f.counts().await, (40, 40));
}

/// An in-band refusal of a connection's first request (the one carrying the writer schema),
/// with batches queued behind it, after a lost answer: the writer half-closes, the connection
/// ends, and a new one carries everything. The drain timeout is longer than the test waits, so
/// a connection that never ends fails the test instead of being rescued by the timeout.
#[tokio::test]
async fn an_in_band_refusal_of_a_first_request_reconnects_and_lands_everything() {
    let f = Fixture::new("firstrefused").await;
    let mut script = Script::default();
    script.at.insert(1, Fault::InBand(Code::Unavailable));
    script.at.insert(3, Fault::ForwardThenDrop);
    script.at.insert(4, Fault::InBand(Code::Unavailable));
    script.at.insert(6, Fault::DropStream);
    script.at.insert(7, Fault::InBand(Code::Unavailable));
    let proxy = Proxy::start(any_port(), &grpc_url(), script).await;
    let opts = WriterOptions {
        drain_timeout: Duration::from_secs(600),
        ..test_writer_options()
    };
    let w = writer(&f, &proxy.url(), opts);
    append_and_ack(&w, &f, 3_000, 8).await;
    assert_eq!(proxy.unused_faults(), 0);
    assert!(w.close(Duration::from_secs(30)).await);
    let (rows, distinct) = f.counts().await;
    assert_eq!(distinct, 80, "every row landed");
    assert!(rows >= 80);
}
