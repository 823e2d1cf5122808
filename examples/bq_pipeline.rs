//! Rows per second into one BigQuery table through the sink seam, against a stand-in AppendRows
//! server that acknowledges every request itself 100 ms after it arrives (pipelined: it answers
//! in order, each request 100 ms after its arrival), with `batching.max_bytes=256KiB` batches of
//! the 20-feature bench schema.
//!
//! - `before`: one connection, and each batch waits for its acknowledgement before the next is
//!   written (what `BigQueryTableSink::write` and the one-job-at-a-time sink task did).
//! - `after N`: `connections: N`, every batch submitted as soon as the sink takes it and the
//!   acknowledgements awaited concurrently (what the sink task does now), within the default
//!   64 MiB `max_inflight_bytes`.
//!
//! `cargo run --example bq_pipeline` prints the median of 3 runs of each, side by side.
use observation_publisher::batch::{Batch, Batcher};
use observation_publisher::config::Batching;
use observation_publisher::gen::{GenOptions, Generator};
use observation_publisher::sink::bigquery::BigQueryTableSink;
use observation_publisher::sink::bigquery::{Elastic, StorageClient, TableRef, WriterOptions};
use observation_publisher::sink::{Progress, Sink};
use observation_publisher::table::TableLayout;
use std::sync::Arc;
use std::time::Instant;

#[path = "../tests/it/bigquery/slow_ack.rs"]
mod slow_ack;

fn batches(n: usize) -> (Vec<Arc<Batch>>, Arc<TableLayout>) {
    let schema = observation_publisher::gen::benchmark_schema(20);
    let layout = Arc::new(TableLayout::new(&schema, "1"));
    let mut g = Generator::new(
        &schema,
        GenOptions {
            rows_per_log: 1,
            seed: 1,
            malformed_ratio: 0.0,
            start_micros: 1_700_000_000_000_000,
            model: Default::default(),
        },
    );
    let mut b = Batcher::new(
        Arc::clone(&layout),
        Batching {
            max_bytes: 256 << 10,
            ..Batching::default()
        },
    );
    let mut out = Vec::new();
    let mut ready = Vec::new();
    let mut offset = 0;
    while out.len() < n {
        b.push(0, offset, &g.next_log().bytes, Instant::now(), &mut ready)
            .expect("valid log");
        offset += 1;
        out.extend(ready.drain(..).map(Arc::new));
    }
    out.truncate(n);
    (out, layout)
}

async fn sink(url: &str, layout: &TableLayout, connections: usize) -> BigQueryTableSink {
    let client = StorageClient::new(url, None).expect("client");
    let table = TableRef {
        project: "p".into(),
        dataset: "d".into(),
        table: "t".into(),
    };
    BigQueryTableSink::on_default_stream(
        &client,
        &table,
        Arc::clone(&layout.arrow),
        WriterOptions::default(),
        Elastic::new(connections),
    )
    .expect("sink")
}

/// One batch at a time, each waiting for its acknowledgement.
async fn before(url: &str, batches: &[Arc<Batch>], layout: &TableLayout) -> f64 {
    let mut s = sink(url, layout, 1).await;
    s.write(Arc::clone(&batches[0])).await.expect("warm-up");
    let started = Instant::now();
    let mut rows = 0;
    for b in &batches[1..] {
        s.write(Arc::clone(b)).await.expect("written");
        rows += b.rows();
    }
    rows as f64 / started.elapsed().as_secs_f64()
}

/// Every batch submitted as soon as the sink takes it; acknowledgements awaited concurrently.
async fn after(url: &str, batches: &[Arc<Batch>], layout: &TableLayout, connections: usize) -> f64 {
    let mut s = sink(url, layout, connections).await;
    // Warm up with a backlog (64 batches submitted at once), so that every connection a backlog
    // opens is open and primed before the clock starts.
    let mut warm = tokio::task::JoinSet::new();
    for _ in 0..64 {
        warm.spawn(s.submit(Arc::clone(&batches[0])).await.expect("taken"));
    }
    while let Some(a) = warm.join_next().await {
        assert!(matches!(a.expect("joined"), Ok(Progress::Written(_))));
    }
    let started = Instant::now();
    let mut acks = tokio::task::JoinSet::new();
    let mut rows = 0;
    for b in &batches[1..] {
        let ack = s.submit(Arc::clone(b)).await.expect("taken");
        acks.spawn(ack);
        rows += b.rows();
    }
    while let Some(a) = acks.join_next().await {
        assert!(matches!(a.expect("joined"), Ok(Progress::Written(_))));
    }
    rows as f64 / started.elapsed().as_secs_f64()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

#[tokio::main]
async fn main() {
    let server = slow_ack::SlowAck::start().await;
    let url = server.url.clone();
    let (all, layout) = batches(401);
    let rows_per_batch = all.iter().map(|b| b.rows()).sum::<usize>() / all.len();
    println!(
        "batches of {} rows ({} KiB of Arrow), acknowledged 100 ms after arrival",
        rows_per_batch,
        all[0].bytes >> 10
    );
    let mut base = Vec::new();
    for _ in 0..3 {
        base.push(before(&url, &all[..41], &layout).await);
    }
    let base = median(base);
    println!("before (1 connection, one batch at a time): {base:>9.0} rows/s");
    for connections in [1, 2, 4, 8] {
        let mut runs = Vec::new();
        for _ in 0..3 {
            runs.push(after(&url, &all, &layout, connections).await);
        }
        let r = median(runs);
        println!(
            "after  ({connections} connection(s), pipelined):        {r:>9.0} rows/s  ({:.1}x)",
            r / base
        );
    }
}
