//! A crashed or unfinished run never exits 0, through the real binary:
//! a duration that would overflow is refused at validation (exit 2 naming key and range), a
//! panic in the sink task exits non-zero, a drain that runs out of time exits non-zero.

use crate::common::{repo_config, run, stderr};
use observation_publisher::framing::write_frame;

/// A length-delimited file of `n` generated logs for `config/local.yaml`.
pub(crate) fn replay_file(dir: &std::path::Path, n: usize) -> std::path::PathBuf {
    let cfg = crate::common::local_config();
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

/// A linger that overflows `Instant` is refused by `check-config` and `run`, naming the key and
/// its range; accepted, it panicked with "overflow when adding duration to instant" and the run
/// exited 0.
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

/// Both keys of the Arrow offset bound are named.
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

/// A panic in the sink task (injected: `OBS_PUBLISHER_FAULT`, debug builds only) ends the run
/// with exit 101 and says what crashed, instead of ignoring the panicked task and exiting 0.
#[test]
fn a_panic_in_the_sink_task_exits_non_zero() {
    let dir = tempfile::tempdir().unwrap();
    let input = replay_file(dir.path(), 3);
    let cfg = repo_config("local.yaml");
    let dl = format!("dead_letter.path={}", dir.path().join("dead.bin").display());
    let rows = format!("local_sink.path={}", dir.path().join("rows").display());
    let o = replay_with_one_second_drain(&cfg, &input, &dl, &rows)
        .env("OBS_PUBLISHER_FAULT", "panic_in_sink_task")
        .output()
        .unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(101), "{err}");
    assert!(
        err.contains("injected fault: panic_in_sink_task") && err.contains("stopped after a crash"),
        "{err}"
    );
}

/// A panic whose message quotes a secret of the configuration (injected) prints it nowhere:
/// the message on stderr and the crash line are scrubbed, as log lines are.
#[test]
fn a_panic_message_is_scrubbed_before_it_is_printed() {
    const SECRET: &str = "PLANTED-PANIC-SECRET";
    let dir = tempfile::tempdir().unwrap();
    let input = replay_file(dir.path(), 3);
    // An ARIZE sink (never reached: the sink task panics on its first batch) whose key the
    // panic quotes.
    let cfg = dir.path().join("config.yaml");
    let text = std::fs::read_to_string(repo_config("local.yaml")).unwrap();
    std::fs::write(
        &cfg,
        format!("{text}\nobservation_sinks:\n- type: ARIZE\n  config: {{api_key: {SECRET}, space_key: space-key, uri: 'http://127.0.0.1:9/v1'}}\n"),
    )
    .unwrap();
    let dl = format!("dead_letter.path={}", dir.path().join("dead.bin").display());
    let rows = format!("local_sink.path={}", dir.path().join("rows").display());
    let o = replay_with_one_second_drain(&cfg, &input, &dl, &rows)
        .env("OBS_PUBLISHER_FAULT", "panic_in_sink_task")
        .env(
            "OBS_PUBLISHER_FAULT_MESSAGE",
            format!("token {SECRET} in an error"),
        )
        .output()
        .unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(101), "{err}");
    assert!(
        err.contains("panicked at")
            && err.contains("injected fault: panic_in_sink_task: token <redacted> in an error"),
        "{err}"
    );
    assert!(!err.contains(SECRET), "{err}");
}

/// Asked to stop while its only sink cannot write (a file where the Parquet partition
/// directory must go), the run waits `consumer.drain_timeout` and exits 1: rows it read were
/// never acknowledged (not 0).
#[test]
fn an_unfinished_drain_exits_non_zero() {
    use std::io::BufRead;
    let dir = tempfile::tempdir().unwrap();
    let input = replay_file(dir.path(), 3);
    let rows = dir.path().join("rows");
    std::fs::create_dir_all(&rows).unwrap();
    // The generator's rows are from 2023-11-14 (UTC); block the days around it too.
    for day in [
        "dt=2023-11-13",
        "dt=2023-11-14",
        "dt=2023-11-15",
        "dt=__NULL__",
    ] {
        std::fs::write(rows.join(day), b"not a directory").unwrap();
    }
    let cfg = repo_config("local.yaml");
    let dl = format!("dead_letter.path={}", dir.path().join("dead.bin").display());
    let rows = format!("local_sink.path={}", rows.display());
    let mut child = replay_with_one_second_drain(&cfg, &input, &dl, &rows)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let err = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut all = String::new();
        for line in std::io::BufReader::new(err).lines().map_while(Result::ok) {
            if line.contains("sink write failed") || line.contains("sink refuses the batch") {
                let _ = tx.send(());
            }
            all.push_str(&line);
            all.push('\n');
        }
        all
    });
    // Generous: the first write fails within milliseconds.
    let failing = rx.recv_timeout(std::time::Duration::from_secs(60)).is_ok();
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let status = child.wait().unwrap();
    let log = reader.join().unwrap();
    assert!(failing, "the sink never failed:\n{log}");
    assert_eq!(status.code(), Some(1), "{log}");
    assert!(
        log.contains("stopped before every row was acknowledged"),
        "{log}"
    );
}

/// `run --replay input` on `cfg` with the dead letters and rows where `dl` and `rows` (`--set`
/// arguments) say, an ephemeral port, and a 1 s drain deadline.
fn replay_with_one_second_drain(
    cfg: &std::path::Path,
    input: &std::path::Path,
    dl: &str,
    rows: &str,
) -> std::process::Command {
    let mut c = crate::common::bin();
    c.args(["run", "-c"])
        .arg(cfg)
        .arg("--replay")
        .arg(input)
        .args(["--set", dl, "--set", rows])
        .args(["--set", "server.listen=127.0.0.1:0"])
        .args(["--set", "consumer.drain_timeout=1s"])
        .env_remove("OBS_PUBLISHER_CONFIG");
    c
}
