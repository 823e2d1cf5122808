//! Pipelined appends and the memory they add, against the stand-in
//! server of `slow_ack.rs` (every request acknowledged 100 ms after it arrived).
//!
//! The sink is driven the way the sink task drives it: batches (256 KiB, `batching.max_bytes`)
//! are submitted while the pipeline's in-flight accounting — the bytes of batches not yet
//! acknowledged, as the Ledger counts them — is under the budget (intake pauses at it), and the
//! acknowledgements are awaited concurrently. At every step the bytes the process holds for
//! them — batches counted by the pipeline plus the encoded requests the BigQuery writers hold
//! ([`BigQueryTableSink::pipelined_bytes`]) — stay within docs/reliability.md §1.2's bound for
//! them: `max_inflight_bytes` + one batch (the one that reaches the budget) +
//! `max(bigquery.max_inflight_bytes, connections × max_request_bytes)`.

use super::slow_ack::SlowAck;
use observation_publisher::batch::{Batch, Batcher};
use observation_publisher::config::Batching;
use observation_publisher::gen::{GenOptions, Generator};
use observation_publisher::sink::bigquery::BigQueryTableSink;
use observation_publisher::sink::bigquery::{Elastic, StorageClient, TableRef, WriterOptions};
use observation_publisher::sink::{Progress, Sink};
use observation_publisher::table::TableLayout;
use std::sync::Arc;
use std::time::Instant;

const MAX_BYTES: usize = 256 << 10;

fn batches(n: usize) -> (Vec<Arc<Batch>>, Arc<TableLayout>) {
    let schema = observation_publisher::gen::benchmark_schema(20);
    let layout = Arc::new(TableLayout::new(&schema, "1"));
    let mut g = Generator::new(
        &schema,
        GenOptions {
            rows_per_log: 1,
            seed: 7,
            malformed_ratio: 0.0,
            start_micros: 1_700_000_000_000_000,
            model: Default::default(),
        },
    );
    let mut b = Batcher::new(
        Arc::clone(&layout),
        Batching {
            max_bytes: MAX_BYTES,
            ..Batching::default()
        },
    );
    let (mut out, mut ready, mut offset) = (Vec::new(), Vec::new(), 0);
    while out.len() < n {
        b.push(0, offset, &g.next_log().bytes, Instant::now(), &mut ready)
            .expect("valid log");
        offset += 1;
        out.extend(ready.drain(..).map(Arc::new));
    }
    out.truncate(n);
    (out, layout)
}

/// Runs `n` batches through a sink with `connections` writers sharing `bq_inflight` bytes, the
/// pipeline's budget being `budget`. Returns (peak pipeline bytes + pipelined bytes, peak
/// pipelined bytes).
async fn run(
    all: &[Arc<Batch>],
    layout: &TableLayout,
    connections: usize,
    budget: usize,
    bq_inflight: usize,
) -> (usize, usize) {
    let server = SlowAck::start().await;
    let n = all.len();
    let client = StorageClient::new(&server.url, None).expect("client");
    let table = TableRef {
        project: "p".into(),
        dataset: "d".into(),
        table: "t".into(),
    };
    let opts = WriterOptions {
        max_request_bytes: 1 << 20,
        max_inflight_bytes: bq_inflight,
        ..WriterOptions::default()
    };
    let mut sink = BigQueryTableSink::on_default_stream(
        &client,
        &table,
        Arc::clone(&layout.arrow),
        opts,
        Elastic::new(connections),
    )
    .expect("sink");
    // One batch past the budget (intake pauses after it), weighed as the pipeline weighs it.
    let overshoot = all.iter().map(|b| b.held_bytes).max().unwrap_or(0);
    let bound = budget + overshoot + bq_inflight.max(connections << 20);
    let mut held = 0usize; // the pipeline's accounting: batches not yet acknowledged
    let (mut peak, mut peak_pipelined) = (0usize, 0usize);
    let mut acks = tokio::task::JoinSet::new();
    let mut sample = |held: usize, sink: &BigQueryTableSink| {
        let pipelined = sink.pipelined_bytes();
        let total = held + pipelined;
        assert!(
            total <= bound,
            "{connections} connection(s): {held} bytes of batches + {pipelined} bytes of \
             requests exceed {bound}"
        );
        peak = peak.max(total);
        peak_pipelined = peak_pipelined.max(pipelined);
    };
    for b in all {
        // Intake pauses at the budget, as the pipeline does.
        while held >= budget {
            let (bytes, r) = acks.join_next().await.expect("an ack").expect("joined");
            assert!(matches!(r, Ok(Progress::Written(_))));
            held -= bytes;
            sample(held, &sink);
        }
        held += b.held_bytes;
        let ack = sink.submit(Arc::clone(b)).await.expect("taken");
        let bytes = b.held_bytes;
        acks.spawn(async move { (bytes, ack.await) });
        sample(held, &sink);
    }
    while let Some(j) = acks.join_next().await {
        let (bytes, r) = j.expect("joined");
        assert!(matches!(r, Ok(Progress::Written(_))));
        held -= bytes;
        sample(held, &sink);
    }
    assert_eq!(held, 0);
    assert!(server.requests() >= n, "every batch reached the server");
    (peak, peak_pipelined)
}

#[tokio::test]
async fn pipelined_requests_stay_within_the_memory_formula_at_every_setting() {
    // Decoded once (the slow part of a debug build), sent at every setting.
    let (all, layout) = batches(96);
    for (connections, budget, bq_inflight) in [
        (1, 4 << 20, 2 << 20),
        (4, 4 << 20, 2 << 20),
        (4, 2 << 20, 8 << 20),
        (4, 16 << 20, 4 << 20),
        (8, 16 << 20, 64 << 20),
    ] {
        let (peak, pipelined) = run(&all, &layout, connections, budget, bq_inflight).await;
        // Several requests were in flight at once (the writers pipeline), or the bound was
        // never put to the test.
        assert!(
            pipelined > 2 * MAX_BYTES,
            "{connections} connection(s): at most {pipelined} bytes were ever in flight"
        );
        eprintln!(
            "connections {connections}, budget {budget}, bigquery.max_inflight_bytes \
             {bq_inflight}: peak {peak} bytes (requests {pipelined})"
        );
    }
}
