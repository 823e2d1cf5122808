//! Every command that prints ends as standard tools do when its reader goes away early
//! (`… | head`): quietly, exit 0. A real write error (a full disk) still exits 1.

use crate::common::{bin, generated, repo_config, stderr};
use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};

fn config(name: &str) -> String {
    repo_config(name).to_str().unwrap().to_string()
}

fn example_spec() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("deploy/example-spec.yaml")
        .to_str()
        .unwrap()
        .to_string()
}

/// Runs `args` with stdout on a pipe whose reader takes `keep` bytes and then closes it (0: the
/// reader is closed before the command starts). Returns (exit code, stderr).
fn with_reader_gone(args: &[&str], keep: usize) -> (Option<i32>, String) {
    let (mut reader, writer) = std::io::pipe().unwrap();
    let mut cmd: Command = bin();
    cmd.args(args)
        .env_remove("OBS_PUBLISHER_CONFIG")
        .stdout(writer)
        .stderr(Stdio::piped());
    if keep == 0 {
        drop(reader);
        let o = cmd.output().unwrap();
        return (o.status.code(), stderr(&o));
    }
    let child = cmd.spawn().unwrap();
    drop(cmd); // the parent's copy of the pipe's writing end
    let mut got = vec![0u8; keep];
    reader.read_exact(&mut got).unwrap();
    drop(reader);
    let o = child.wait_with_output().unwrap();
    (o.status.code(), stderr(&o))
}

fn assert_quiet_exit_0(what: &str, (code, err): (Option<i32>, String)) {
    assert_eq!(code, Some(0), "{what}: exit code {code:?}, stderr:\n{err}");
    assert!(
        !err.contains("panicked") && !err.contains("write error") && !err.contains("Broken pipe"),
        "{what} must end quietly, stderr:\n{err}"
    );
}

#[test]
fn printing_commands_end_quietly_when_stdout_is_closed() {
    let local = config("local.yaml");
    let merlin = config("merlin-binary.yaml");
    let spec = example_spec();
    assert_quiet_exit_0("schema", with_reader_gone(&["schema", "-c", &merlin], 0));
    assert_quiet_exit_0(
        "check-config",
        with_reader_gone(&["check-config", "-c", &local], 0),
    );
    assert_quiet_exit_0(
        "bootstrap apply --dry-run",
        with_reader_gone(&["bootstrap", "apply", "--dry-run", "--spec", &spec], 0),
    );
}

#[test]
fn streaming_commands_stop_quietly_when_the_reader_leaves_early() {
    let dir = tempfile::tempdir().unwrap();
    let local = config("local.yaml");
    let logs = generated(dir.path(), 20000, &[]);
    // Far more output than a pipe buffers, so the commands are still writing when `head` leaves.
    assert_quiet_exit_0(
        "gen -o - | head",
        with_reader_gone(&["gen", "-c", &local, "-n", "20000", "-o", "-"], 4096),
    );
    for format in ["jsonl", "arrow", "parquet"] {
        let args = [
            "convert",
            "-c",
            &local,
            "-i",
            logs.to_str().unwrap(),
            "-o",
            "-",
            "-f",
            format,
        ];
        let keep = if format == "parquet" { 0 } else { 4096 };
        assert_quiet_exit_0(
            &format!("convert -f {format} | head"),
            with_reader_gone(&args, keep),
        );
    }
}

#[test]
fn a_full_disk_is_still_a_failure() {
    let dir = tempfile::tempdir().unwrap();
    let local = config("local.yaml");
    let logs = generated(dir.path(), 3000, &[]);
    let full = || {
        std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .unwrap()
    };
    let cases: [&[&str]; 4] = [
        &["schema", "-c", &config("merlin-binary.yaml")],
        &["check-config", "-c", &local],
        &["gen", "-c", &local, "-n", "3000", "-o", "-"],
        &[
            "convert",
            "-c",
            &local,
            "-i",
            logs.to_str().unwrap(),
            "-o",
            "-",
        ],
    ];
    for args in cases {
        let o = bin()
            .args(args)
            .env_remove("OBS_PUBLISHER_CONFIG")
            .stdout(full())
            .output()
            .unwrap();
        assert_eq!(
            o.status.code(),
            Some(1),
            "{args:?} into /dev/full: {}",
            stderr(&o)
        );
        assert!(
            stderr(&o).contains("write error"),
            "{args:?}: {}",
            stderr(&o)
        );
    }
    // A file output on a full disk too.
    let o = crate::common::run(&[
        "convert",
        "-c",
        &local,
        "-i",
        logs.to_str().unwrap(),
        "-o",
        "/dev/full",
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
}
