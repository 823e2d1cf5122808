//! decode+convert throughput: the hand-written walker (PredictionLog bytes → Arrow builders →
//! RecordBatch) next to a generic prost decode, and prost decode + the reference conversion, on
//! the same generated logs (20 features; 1 and 10 rows per log).
//!
//! Run: `cargo bench --bench decode` (numbers in docs/performance.md).

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use observation_publisher::config::InferenceSchema;
use observation_publisher::decode::{reference, Decoder};
use observation_publisher::gen::{GenOptions, Generator};
use observation_publisher::proto::PredictionLog;
use observation_publisher::table::TableLayout;
use prost::Message;
use std::hint::black_box;
use std::sync::Arc;

const LOGS: usize = 8192;

fn schema() -> InferenceSchema {
    observation_publisher::gen::benchmark_schema(20)
}

fn logs(rows_per_log: u32) -> Vec<Vec<u8>> {
    let mut g = Generator::new(
        &schema(),
        GenOptions {
            rows_per_log,
            seed: 42,
            malformed_ratio: 0.0,
            start_micros: 1_764_000_000_000_000,
            model: ("bench".into(), "model".into(), "1".into()),
        },
    );
    (0..LOGS).map(|_| g.next_log().bytes).collect()
}

fn bench(c: &mut Criterion) {
    let layout = Arc::new(TableLayout::new(&schema(), "1"));
    for rows_per_log in [1u32, 10] {
        let input = logs(rows_per_log);
        let bytes: usize = input.iter().map(Vec::len).sum();
        let rows = LOGS as u64 * u64::from(rows_per_log);
        let mut group = c.benchmark_group(format!("decode_{rows_per_log}_rows_per_log"));
        group.throughput(Throughput::Elements(rows));
        group.bench_function(BenchmarkId::new("walker_to_arrow", bytes), |b| {
            let mut d = Decoder::new(Arc::clone(&layout));
            b.iter(|| {
                for l in &input {
                    d.decode(l).expect("valid log");
                }
                black_box(d.finish());
            })
        });
        group.bench_function(BenchmarkId::new("prost_decode_only", bytes), |b| {
            b.iter(|| {
                for l in &input {
                    black_box(PredictionLog::decode(l.as_slice()).expect("valid log"));
                }
            })
        });
        group.bench_function(BenchmarkId::new("prost_reference_rows", bytes), |b| {
            b.iter(|| {
                for l in &input {
                    black_box(reference::convert(&layout, l).expect("valid log"));
                }
            })
        });
        group.finish();
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20).measurement_time(std::time::Duration::from_secs(4));
    targets = bench
}
criterion_main!(benches);
