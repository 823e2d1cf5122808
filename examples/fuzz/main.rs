//! A mutation fuzzer for the decoder that runs on stable Rust (`cargo fuzz` needs nightly).
//!
//! ```text
//! scripts/fuzz [--inputs 10000000] [--seed 1] [--config config/local.yaml] [--write-every 64]
//!              [--max-log-bytes 4194304] [--crash-dir DIR]
//! cargo run --example fuzz -- craft DIR [--config config/local.yaml]
//! ```
//!
//! Seeds are `gen` logs of the configured schema (1, 3 and 20 rows per log, 10% deliberately
//! malformed) and small versions of the crafted hostile logs. Each input is mutated
//! (see `harness.rs`), decoded and converted into Arrow batches; every batch is validated and one
//! in `--write-every` goes through the JSON lines, Arrow IPC and Parquet writers. It checks: no
//! panic, no rejection without a reason, no rows left behind by a rejection. At the end it prints
//! one JSON line: inputs, accepted, rows, rejections by code, failures, seconds and the process's
//! peak RSS; it exits 1 if any check failed (the failing inputs go to `--crash-dir`).
//!
//! `craft DIR` writes the full-size crafted logs (one length-delimited frame each) and
//! `huge_frame.bin` (a 2^40 length prefix followed by 96 MiB) for the memory measurements in
//! docs/reliability.md.

mod crafted;
mod harness;

use observation_publisher::config::{load_value, Config, Needs};
use observation_publisher::framing::write_frame;
use observation_publisher::gen::{GenOptions, Generator};
use observation_publisher::table::TableLayout;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

fn arg<T: std::str::FromStr>(args: &[String], name: &str, default: T) -> T {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map(|v| {
            v.parse()
                .unwrap_or_else(|_| panic!("{name}: cannot parse {v:?}"))
        })
        .unwrap_or(default)
}

fn load(path: &str) -> Config {
    let value = load_value(Some(path.as_ref()), std::iter::empty(), &[]).unwrap_or_else(|p| {
        eprint!("{p}");
        std::process::exit(2)
    });
    match Config::from_value(&value, Needs::CONVERT) {
        Ok((c, _)) => c,
        Err(p) => {
            eprint!("{p}");
            std::process::exit(2)
        }
    }
}

/// Peak resident set size of this process in KiB (`VmHWM`), if the platform says.
fn peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let config: String = arg(&args, "--config", "config/local.yaml".to_string());
    let cfg = load(&config);
    let layout = Arc::new(TableLayout::from_config(&cfg));

    if args.first().map(String::as_str) == Some("craft") {
        let dir = PathBuf::from(args.get(1).expect("craft DIR"));
        std::fs::create_dir_all(&dir).expect("create DIR");
        for (name, log) in crafted::full_size(&layout) {
            let mut out = Vec::new();
            write_frame(&mut out, &log).expect("in memory");
            let path = dir.join(format!("{name}.bin"));
            std::fs::write(&path, &out).expect("write");
            eprintln!("{}: {} bytes", path.display(), out.len());
        }
        let path = dir.join("huge_frame.bin");
        std::fs::write(&path, crafted::huge_frame(96 << 20)).expect("write");
        eprintln!("{}: 2^40-byte prefix + 96 MiB", path.display());
        return ExitCode::SUCCESS;
    }

    let inputs: u64 = arg(&args, "--inputs", 1_000_000);
    let seed: u64 = arg(&args, "--seed", 1);
    let write_every: u64 = arg(&args, "--write-every", 64);
    // Small enough that mutations which multiply rows reach it (and its check is fuzzed too).
    let max_log_bytes: usize = arg(&args, "--max-log-bytes", 4 << 20);
    let crash_dir: Option<PathBuf> = args
        .iter()
        .position(|a| a == "--crash-dir")
        .and_then(|i| args.get(i + 1))
        .map(PathBuf::from);

    let mut seeds = crafted::seeds(&layout);
    for (k, rows) in [1u32, 3, 20].into_iter().enumerate() {
        let mut g = Generator::new(
            &cfg.inference_schema,
            GenOptions {
                rows_per_log: rows,
                seed: seed.wrapping_add(k as u64),
                malformed_ratio: 0.1,
                start_micros: 1_700_000_000_000_000,
                model: (
                    cfg.project.clone(),
                    cfg.model_id.clone(),
                    cfg.model_version.clone(),
                ),
            },
        );
        seeds.extend((0..64).map(|_| g.next_log().bytes));
    }
    // Panics are counted and their inputs kept; one line each is enough.
    std::panic::set_hook(Box::new(|info| eprintln!("panic: {info}")));

    let started = std::time::Instant::now();
    let mut h = harness::Harness::new(Arc::clone(&layout), max_log_bytes, seeds, seed, write_every);
    let step = 1_000_000u64;
    let mut done = 0u64;
    while done < inputs {
        let n = step.min(inputs - done);
        h.run(n);
        done += n;
        eprintln!(
            "{done} inputs, {:.0}s, {} failures",
            started.elapsed().as_secs_f64(),
            h.failures.len()
        );
    }
    let s = &h.stats;
    if let Some(dir) = &crash_dir {
        std::fs::create_dir_all(dir).expect("create --crash-dir");
        for (i, input) in h.failures.iter().enumerate() {
            std::fs::write(dir.join(format!("failure-{i}.bin")), input).expect("write");
        }
    }
    println!(
        "{}",
        serde_json::json!({
            "inputs": s.inputs,
            "accepted": s.accepted,
            "rows": s.rows,
            "rejected": s.rejected,
            "panics": s.panics,
            "rejections_without_reason": s.without_reason,
            "row_count_errors": s.row_count_errors,
            "batches": s.batches,
            "invalid_batches": s.invalid_batches,
            "batches_written_to_all_three_writers": s.written,
            "writer_errors": s.writer_errors,
            "seconds": (started.elapsed().as_secs_f64() * 10.0).round() / 10.0,
            "peak_rss_kib": peak_rss_kib(),
            "seed": seed,
            "max_log_bytes": max_log_bytes,
            "config": config,
        })
    );
    if s.ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
