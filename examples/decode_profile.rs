//! Decodes generated logs in a loop, for profiling the walker (callgrind, perf):
//! `cargo build --release --example decode_profile && valgrind --tool=callgrind target/release/examples/decode_profile 20000`
use observation_publisher::decode::Decoder;
use observation_publisher::gen::{GenOptions, Generator};
use observation_publisher::table::TableLayout;
use std::sync::Arc;

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(100_000);
    let schema = observation_publisher::gen::benchmark_schema(20);
    let mut g = Generator::new(
        &schema,
        GenOptions {
            rows_per_log: 1,
            seed: 1,
            malformed_ratio: 0.0,
            start_micros: 0,
            model: Default::default(),
        },
    );
    let logs: Vec<Vec<u8>> = (0..4096).map(|_| g.next_log().bytes).collect();
    let mut d = Decoder::new(Arc::new(TableLayout::new(&schema, "1")));
    let start = std::time::Instant::now();
    let mut rows = 0usize;
    for i in 0..n {
        rows += d.decode(&logs[i % logs.len()]).expect("valid");
        if d.rows() >= 8192 {
            std::hint::black_box(d.finish());
        }
    }
    let secs = start.elapsed().as_secs_f64();
    eprintln!(
        "{rows} rows in {secs:.3}s = {:.0} rows/s",
        rows as f64 / secs
    );
}
