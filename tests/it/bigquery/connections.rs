//! AppendRows connections: many open at once are all served, and the at-least-once sink's pool
//! holds as many as its backlog needs (one under light load, up to `connections` under a
//! backlog, none after idling).
//!
//! The emulator runs each RPC on a thread of a pool that defaults to min(32, cores + 4) threads
//! (6 on a 2-core machine) and an open AppendRows stream holds its thread, so without the pool
//! `scripts/bigquery` gives it, the seventh connection here is never answered (the chaos suite
//! saw a writer wait on one until its drain deadline). BigQuery has no such limit.

use super::proxy::{Proxy, Script};
use super::*;
use observation_publisher::batch::{Batch, FlushReason};
use observation_publisher::sink::bigquery::metrics::CONNECTIONS_OPEN;
use observation_publisher::sink::bigquery::{AppendWriter, BigQueryTableSink, Elastic};
use observation_publisher::sink::{Acknowledgement, Progress, Sink};

#[tokio::test]
async fn ten_connections_open_at_once_are_all_answered() {
    let f = Fixture::new("connections").await;
    let mut writers = Vec::new();
    for _ in 0..10 {
        writers.push(
            AppendWriter::start(
                storage(&grpc_url()),
                f.table(),
                Arc::clone(&f.layout.arrow),
                test_writer_options(),
            )
            .expect("writer"),
        );
    }
    // Every writer opens its connection and sends before any answer is awaited.
    let mut pending = Vec::new();
    for (i, w) in writers.iter().enumerate() {
        pending.push(
            w.append(f.batch(5_000 + i as u64, 3, 2))
                .await
                .expect("append"),
        );
    }
    for p in pending {
        let out = tokio::time::timeout(Duration::from_secs(60), p)
            .await
            .expect("every connection is answered")
            .expect("acked");
        assert_eq!(out.appended, 6);
    }
    for w in writers {
        assert!(w.close(Duration::from_secs(30)).await);
    }
    assert_eq!(f.counts().await, (60, 60));
}

/// A sink through the fault-injecting proxy (which counts the AppendRows calls it serves),
/// with a pool of at most 4 connections whose idle periods are 1 s (every connection but the
/// first) and 3 s (the first).
async fn elastic_sink(
    f: &Fixture,
    proxy: &Proxy,
) -> (
    BigQueryTableSink,
    observation_publisher::sink::bigquery::Elastic,
) {
    let pool = Elastic {
        max: 4,
        idle: Duration::from_secs(1),
        idle_last: Duration::from_secs(3),
    };
    // Each connection's share of the in-flight bytes is one request's worth, less than a batch
    // (400 rows): a connection holding a batch has no room for the next.
    let opts = WriterOptions {
        max_request_bytes: 16 << 10,
        max_inflight_bytes: 1,
        ..test_writer_options()
    };
    let sink = BigQueryTableSink::on_default_stream(
        &storage(&proxy.url()),
        f.table(),
        Arc::clone(&f.layout.arrow),
        opts,
        pool,
    )
    .expect("sink");
    (sink, pool)
}

/// `n` generated logs of 2 rows as a pipeline batch.
fn batch(f: &Fixture, seed: u64, n: u64) -> Arc<Batch> {
    let records = f.batch(seed, n, 2);
    Arc::new(Batch {
        bytes: records.get_array_memory_size(),
        held_bytes: records.get_array_memory_size(),
        records,
        offsets: Vec::new(),
        rows_by_source: Vec::new(),
        input_bytes: 0,
        messages: n as usize,
        reason: FlushReason::Rows,
        opened: None,
        epochs: Vec::new(),
    })
}

async fn written(ack: Acknowledgement) {
    let done = tokio::time::timeout(Duration::from_secs(60), ack)
        .await
        .expect("acknowledged in time")
        .expect("written");
    assert!(matches!(done, Progress::Written(r) if r.rejected.is_empty()));
}

/// Waits up to `within` for `cond`.
async fn eventually(within: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let until = tokio::time::Instant::now() + within;
    while !cond() {
        if tokio::time::Instant::now() > until {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    true
}

/// The open-connections gauge as the `/metrics` page renders it.
fn gauge(handle: &metrics_exporter_prometheus::PrometheusHandle) -> Option<f64> {
    let text = handle.render();
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{CONNECTIONS_OPEN} ")))
        .map(|v| v.parse().expect("a number"))
}

/// Light load uses one connection; a backlog opens more, up to the maximum and no further;
/// they close after idling, the last one later than the others; a batch after that opens one
/// again and is written; every row lands once. What the proxy serves, the sink's count and the
/// gauge agree at each step.
#[tokio::test]
async fn connections_follow_the_backlog_and_close_when_idle() {
    // The test's tasks all run on this thread, so the gauge is recorded here alone.
    let recorder = observation_publisher::metrics::prometheus_builder()
        .expect("prometheus")
        .build_recorder();
    let handle = recorder.handle();
    let _local = ::metrics::set_default_local_recorder(&recorder);
    let f = Fixture::new("elastic").await;
    let proxy = Proxy::start(
        "127.0.0.1:0".parse().expect("address"),
        &grpc_url(),
        Script::default(),
    )
    .await;
    let (mut sink, _) = elastic_sink(&f, &proxy).await;
    assert_eq!(proxy.live(), 0, "nothing is opened before the first batch");
    let mut rows = 0;

    // Light load: each batch is answered before the next comes; one connection carries it all.
    for seed in 0..6 {
        let ack = sink.submit(batch(&f, seed, 200)).await.expect("taken");
        written(ack).await;
        rows += 400;
    }
    assert_eq!(proxy.peak(), 1, "light load needs one connection");
    assert_eq!((proxy.live(), sink.connections_open()), (1, 1));
    assert_eq!(gauge(&handle), Some(1.0));

    // A backlog: batches submitted without waiting for their answers.
    let mut acks = Vec::new();
    for seed in 100..112 {
        acks.push(sink.submit(batch(&f, seed, 200)).await.expect("taken"));
        rows += 400;
    }
    assert_eq!(
        sink.connections_open(),
        4,
        "the backlog opened every connection"
    );
    assert_eq!(gauge(&handle), Some(4.0));
    for ack in acks {
        written(ack).await;
    }
    assert_eq!(proxy.peak(), 4, "up to the maximum, never more");

    // Idle: the extra connections close after 1 s, the last one after 3 s.
    assert!(
        eventually(Duration::from_secs(3), || proxy.live() <= 1).await,
        "{} connections still open 3 s after the backlog",
        proxy.live()
    );
    assert_eq!((proxy.live(), sink.connections_open()), (1, 1));
    assert_eq!(gauge(&handle), Some(1.0));
    assert!(
        eventually(Duration::from_secs(6), || proxy.live() == 0).await,
        "the last connection is still open after its idle period"
    );
    assert_eq!(sink.connections_open(), 0);
    assert_eq!(gauge(&handle), Some(0.0));

    // The next batch opens a connection again and is written.
    proxy.reset_peak();
    let ack = sink.submit(batch(&f, 200, 200)).await.expect("taken");
    written(ack).await;
    rows += 400;
    assert_eq!(proxy.peak(), 1);
    assert_eq!(sink.connections_open(), 1);

    assert_eq!(f.counts().await, (rows, rows), "every row once");
    assert_eq!(proxy.unused_faults(), 0);
}

/// A connection closed for idling that the server is slow to end does not hold up the next
/// batch: the writer drops it (nothing is unanswered on it) and opens another at once, instead
/// of waiting out the half-close's `drain_timeout`.
#[tokio::test]
async fn a_batch_does_not_wait_for_an_idle_connection_to_end() {
    let f = Fixture::new("idle_end").await;
    let script = Script {
        hold_after_half_close: true,
        ..Default::default()
    };
    let proxy = Proxy::start("127.0.0.1:0".parse().expect("address"), &grpc_url(), script).await;
    let pool = Elastic {
        max: 1,
        idle: Duration::from_millis(300),
        idle_last: Duration::from_millis(300),
    };
    let opts = WriterOptions {
        drain_timeout: Duration::from_secs(30),
        ..test_writer_options()
    };
    let mut sink = BigQueryTableSink::on_default_stream(
        &storage(&proxy.url()),
        f.table(),
        Arc::clone(&f.layout.arrow),
        opts,
        pool,
    )
    .expect("sink");
    written(sink.submit(batch(&f, 1, 5)).await.expect("taken")).await;
    // Long enough for the idle close (300 ms) to have half-closed the connection.
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    assert_eq!(
        proxy.live(),
        1,
        "the server has not ended the half-closed call"
    );
    let ack = sink.submit(batch(&f, 2, 5)).await.expect("taken");
    tokio::time::timeout(Duration::from_secs(5), written(ack))
        .await
        .expect("written without waiting for the old connection's end");
    assert_eq!(proxy.opens(), 2);
    assert_eq!(proxy.live(), 1, "the old call was dropped");
    assert_eq!(f.counts().await, (20, 20), "every row once");
}
