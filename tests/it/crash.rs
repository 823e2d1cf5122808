//! A crashed or unfinished run never exits 0 (issue 17, item 4), through the real binary:
//! a duration that would overflow is refused at validation (exit 2 naming key and range), a
//! panic in the sink task exits non-zero, a drain that runs out of time exits non-zero.

use crate::common::{repo_config, run, stderr};
use observation_publisher::framing::write_frame;

/// A length-delimited file of `n` generated logs for `config/local.yaml`.
pub(crate) fn replay_file(dir: &std::path::Path, n: usize) -> std::path::PathBuf {
    use observation_publisher::config::{load_value, Config, Needs};
    let v = load_value(Some(&repo_config("local.yaml")), Vec::new(), &[]).unwrap();
    let cfg = Config::from_value(&v, Needs::CONVERT).unwrap().0;
    let mut g = observation_publisher::gen::Generator::new(
        &cfg.inference_schema,
        observation_publisher::gen::GenOptions {
            rows_per_log: 3,
            seed: 17,
            malformed_ratio: 0.0,
            start_micros: 1_700_000_000_000_000,
            model: Default::default(),
        },
    );
    let mut out = Vec::new();
    for _ in 0..n {
        write_frame(&mut out, &g.next_log().bytes).unwrap();
    }
    let path = dir.join("logs.bin");
    std::fs::write(&path, out).unwrap();
    path
}

/// `run --replay` with `config/local.yaml`, its outputs under `dir`, and `sets` on top.
fn replay(dir: &std::path::Path, input: &std::path::Path, sets: &[&str]) -> std::process::Output {
    let cfg = repo_config("local.yaml");
    let dl = format!("dead_letter.path={}", dir.join("dead.bin").display());
    let rows = format!("local_sink.path={}", dir.join("rows").display());
    let mut args = vec![
        "run",
        "-c",
        cfg.to_str().unwrap(),
        "--replay",
        input.to_str().unwrap(),
        "--set",
        &dl,
        "--set",
        &rows,
        "--set",
        "server.listen=127.0.0.1:0",
    ];
    for s in sets {
        args.extend(["--set", s]);
    }
    run(&args)
}

/// The issue's reproduction: this linger passed `check-config`, panicked with "overflow when
/// adding duration to instant" and exited 0.
#[test]
fn an_overflowing_linger_is_refused_naming_key_and_range() {
    let dir = tempfile::tempdir().unwrap();
    let input = replay_file(dir.path(), 2);
    let o = replay(
        dir.path(),
        &input,
        &["batching.linger=18446744073709551615s"],
    );
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("batching.linger: must be from 1ms to 1h"),
        "{err}"
    );
    let cfg = repo_config("local.yaml");
    let o = run(&[
        "check-config",
        "-c",
        cfg.to_str().unwrap(),
        "--set",
        "batching.linger=18446744073709551615s",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
}

/// Both keys of the Arrow offset bound are named (item 6).
#[test]
fn a_batch_and_log_limit_over_the_arrow_offset_limit_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let input = replay_file(dir.path(), 2);
    let o = replay(
        dir.path(),
        &input,
        &[
            "batching.max_bytes=1GiB",
            "batching.max_log_bytes=1GiB",
            "batching.max_inflight_bytes=4GiB",
        ],
    );
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("batching.max_bytes + batching.max_log_bytes must be at most 2147483647"),
        "{err}"
    );
}
