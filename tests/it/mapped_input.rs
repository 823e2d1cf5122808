//! `convert` reads a regular input file through a memory map (`src/mapped.rs`) and anything
//! else as a stream: both give the same output, and a file cut short while it is mapped kills
//! the process by a signal instead of letting it exit 0.

use crate::common::{bin, repo_config, run, stderr};
use std::io::Read;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Stdio};

/// `n` generated logs (seed 7) for config/local.yaml in `dir/logs.bin`.
fn generated(dir: &Path, n: u32) -> std::path::PathBuf {
    let logs = dir.join("logs.bin");
    let cfg = repo_config("local.yaml");
    let o = run(&[
        "gen",
        "-c",
        cfg.to_str().unwrap(),
        "-n",
        &n.to_string(),
        "--seed",
        "7",
        "--malformed-ratio",
        "0.01",
        "-o",
        logs.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    logs
}

fn convert(input: &str) -> Command {
    let mut cmd = bin();
    cmd.args(["convert", "-c"])
        .arg(repo_config("local.yaml"))
        .args(["-f", "arrow", "-i", input, "-o", "-"])
        .env_remove("OBS_PUBLISHER_CONFIG");
    cmd
}

#[test]
fn a_mapped_file_and_the_same_bytes_on_stdin_convert_alike() {
    let dir = tempfile::tempdir().unwrap();
    let logs = generated(dir.path(), 20_000);
    let mapped = convert(logs.to_str().unwrap()).output().unwrap();
    assert!(mapped.status.success(), "{}", stderr(&mapped));
    let piped = convert("-")
        .stdin(std::fs::File::open(&logs).unwrap())
        .output()
        .unwrap();
    assert!(piped.status.success(), "{}", stderr(&piped));
    assert!(
        mapped.stdout.len() > 1_000_000,
        "{} bytes",
        mapped.stdout.len()
    );
    assert!(mapped.stdout == piped.stdout, "the two outputs differ");
    // Both read every log and skipped the same malformed ones.
    assert_eq!(stderr(&mapped), stderr(&piped));
    assert!(
        stderr(&mapped).contains("20000 logs read"),
        "{}",
        stderr(&mapped)
    );
}

#[test]
fn a_file_cut_short_while_mapped_kills_convert_by_a_signal() {
    let dir = tempfile::tempdir().unwrap();
    let logs = generated(dir.path(), 40_000);
    let (mut reader, writer) = std::io::pipe().unwrap();
    let mut cmd = convert(logs.to_str().unwrap());
    cmd.stdout(writer).stderr(Stdio::piped());
    let child = cmd.spawn().unwrap();
    drop(cmd); // the parent's copy of the pipe's writing end
               // The first byte arrives once the first batch (8,192 of 40,000 logs) is being written;
               // the rest of that batch does not fit in the pipe, so `convert` waits in the write with
               // its window of the file mapped.
    let mut first = [0u8; 1];
    reader.read_exact(&mut first).unwrap();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&logs)
        .unwrap()
        .set_len(0)
        .unwrap();
    let mut rest = Vec::new();
    reader.read_to_end(&mut rest).unwrap();
    let o = child.wait_with_output().unwrap();
    assert!(!o.status.success(), "{}", stderr(&o));
    assert_eq!(
        o.status.signal(),
        Some(7),
        "SIGBUS; {:?}: {}",
        o.status,
        stderr(&o)
    );
}
