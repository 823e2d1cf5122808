//! Hostile input through the real binary: crafted logs that decode to far more than
//! their size are dead-lettered as `too_large` (`convert` and `run --replay`), a frame prefix
//! over `batching.max_frame_bytes` stops the input before it is read, and a smoke run of the
//! stable mutation fuzzer (`examples/fuzz`, the same harness `scripts/fuzz` runs).

use crate::common::{local_config, repo_config, run, stderr};
use observation_publisher::framing::write_frame;
use observation_publisher::table::TableLayout;
use std::sync::Arc;

#[path = "../../examples/fuzz/crafted.rs"]
#[allow(dead_code)]
pub(crate) mod crafted;
#[path = "../../examples/fuzz/harness.rs"]
#[allow(dead_code)]
mod harness;

/// A length-delimited file: two good logs around a crafted one (10 KiB id × 200 rows ≈ 2 MB
/// decoded from ≈ 14 KB).
fn hostile_file(dir: &std::path::Path) -> std::path::PathBuf {
    let layout = TableLayout::from_config(&local_config());
    let good = crafted::amplifying(&layout, 3, 8, 0);
    let bad = crafted::amplifying(&layout, 200, 10 << 10, 0);
    let mut out = Vec::new();
    for log in [&good, &bad, &good] {
        write_frame(&mut out, log).unwrap();
    }
    let path = dir.join("hostile.bin");
    std::fs::write(&path, out).unwrap();
    path
}

#[test]
fn convert_rejects_a_log_over_max_log_bytes_and_keeps_the_others() {
    let dir = tempfile::tempdir().unwrap();
    let input = hostile_file(dir.path());
    let cfg = repo_config("local.yaml");
    let out = dir.path().join("rows.jsonl");
    let args = |extra: &'static [&'static str]| {
        let mut a = vec![
            "convert".to_string(),
            "-c".into(),
            cfg.to_str().unwrap().into(),
            "-i".into(),
            input.to_str().unwrap().into(),
            "-o".into(),
            out.to_str().unwrap().into(),
            "--set".into(),
            "batching.max_log_bytes=1MiB".into(),
        ];
        a.extend(extra.iter().map(|s| s.to_string()));
        a
    };
    let a = args(&[]);
    let o = run(&a.iter().map(String::as_str).collect::<Vec<_>>());
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains("log 1 at byte ")
            && err.contains(
                "too_large: the log would take up to 2" // ≈ 2 MB, the figure is named
            )
            && err.contains("over the per-log limit of 1048576 bytes (batching.max_log_bytes)"),
        "{err}"
    );
    assert!(
        err.contains("3 logs read, 6 rows written, 1 bad logs skipped"),
        "{err}"
    );
    let strict = args(&["--strict"]);
    let o = run(&strict.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
}

#[test]
fn a_frame_over_max_frame_bytes_stops_convert_before_it_is_read() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("huge.bin");
    std::fs::write(&input, crafted::huge_frame(2 << 20)).unwrap();
    let cfg = repo_config("local.yaml");
    let o = run(&[
        "convert",
        "-c",
        cfg.to_str().unwrap(),
        "-i",
        input.to_str().unwrap(),
        "-o",
        dir.path().join("rows.jsonl").to_str().unwrap(),
        "--set",
        "batching.max_frame_bytes=1MiB",
    ]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains(
            "frame at byte 0 declares 1099511627776 bytes, over the limit of 1048576 bytes (batching.max_frame_bytes)"
        ),
        "{err}"
    );
}

#[test]
fn run_replay_dead_letters_a_log_over_max_log_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let input = hostile_file(dir.path());
    let dl = dir.path().join("dead.bin");
    let rows = dir.path().join("rows");
    let cfg = repo_config("local.yaml");
    let o = run(&[
        "run",
        "-c",
        cfg.to_str().unwrap(),
        "--replay",
        input.to_str().unwrap(),
        "--set",
        "batching.max_log_bytes=1MiB",
        "--set",
        &format!("dead_letter.path={}", dl.display()),
        "--set",
        &format!("local_sink.path={}", rows.display()),
        "--set",
        "server.listen=127.0.0.1:0",
    ]);
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    let summary: serde_json::Value =
        serde_json::from_slice(o.stdout.trim_ascii()).expect("summary line");
    assert_eq!(summary["rows"], 6, "{summary}");
    assert_eq!(summary["dead_letters"], 1, "{summary}");
    let reasons =
        std::fs::read_to_string(observation_publisher::deadletter::file::reasons_path(&dl))
            .unwrap();
    assert!(
        reasons.contains("too_large") && reasons.contains("batching.max_log_bytes"),
        "{reasons}"
    );
}

#[test]
fn fuzz_smoke_run_finds_no_panic_and_no_silent_rejection() {
    let cfg = local_config();
    let layout = Arc::new(TableLayout::from_config(&cfg));
    let mut seeds = crafted::seeds(&layout);
    let mut g = observation_publisher::gen::Generator::new(
        &cfg.inference_schema,
        observation_publisher::gen::GenOptions {
            rows_per_log: 3,
            seed: 11,
            malformed_ratio: 0.1,
            start_micros: 1_700_000_000_000_000,
            model: Default::default(),
        },
    );
    seeds.extend((0..32).map(|_| g.next_log().bytes));
    let mut h = harness::Harness::new(layout, 1 << 20, seeds, 11, 1);
    h.run(3_000);
    let s = &h.stats;
    assert!(s.ok(), "{s:?}");
    assert_eq!(s.inputs, 3_000);
    assert!(
        s.accepted > 0 && s.batches > 0 && s.written == s.batches,
        "{s:?}"
    );
    assert!(
        s.rejected.len() >= 3,
        "mutations reach several reasons: {s:?}"
    );
}
