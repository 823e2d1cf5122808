//! `convert` reads a regular input file through a memory map (`src/mapped.rs`) and anything
//! else as a stream: both give the same output, a named pipe is read as a stream, and a file
//! cut short while it is mapped kills the process by a signal instead of letting it exit 0.

use crate::common::{bin, repo_config, stderr};
use std::io::{Read, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// SIGBUS on Linux (x86-64 and arm64 alike).
const SIGBUS: i32 = 7;

/// `n` generated logs (seed 7, 1% malformed) for config/local.yaml in `dir/logs.bin`.
fn generated(dir: &Path, n: u32) -> std::path::PathBuf {
    crate::common::generated(dir, n, &["--seed", "7", "--malformed-ratio", "0.01"])
}

/// `convert` of `input` to Arrow on stdout, run by a shell that turns core dumps off first
/// (a SIGBUS would otherwise leave a core file behind where core dumps are on).
fn convert(input: &Path) -> Command {
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(r#"ulimit -c 0; exec "$0" convert -c "$1" -f arrow -i "$2" -o -"#)
        .arg(bin().get_program())
        .arg(repo_config("local.yaml"))
        .arg(input)
        .env_remove("OBS_PUBLISHER_CONFIG");
    cmd
}

/// Kills process `pid` unless `done` is set within `after` (a test that would hang fails).
fn watchdog(pid: u32, after: Duration) -> Arc<AtomicBool> {
    let done = Arc::new(AtomicBool::new(false));
    let d = Arc::clone(&done);
    std::thread::spawn(move || {
        std::thread::sleep(after);
        if !d.load(Ordering::Relaxed) {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
        }
    });
    done
}

#[test]
fn a_mapped_file_of_several_windows_and_the_same_bytes_on_stdin_convert_alike() {
    let dir = tempfile::tempdir().unwrap();
    let logs = generated(dir.path(), 80_000);
    // More than two 16 MiB windows: the reader maps three.
    assert!(std::fs::metadata(&logs).unwrap().len() > 32 << 20);
    let mapped = convert(&logs).output().unwrap();
    assert!(mapped.status.success(), "{}", stderr(&mapped));
    let piped = convert(Path::new("-"))
        .stdin(std::fs::File::open(&logs).unwrap())
        .output()
        .unwrap();
    assert!(piped.status.success(), "{}", stderr(&piped));
    assert!(
        mapped.stdout.len() > 5 << 20,
        "{} bytes",
        mapped.stdout.len()
    );
    assert!(mapped.stdout == piped.stdout, "the two outputs differ");
    // Both read every log and skipped the same malformed ones, at the same byte offsets.
    assert_eq!(stderr(&mapped), stderr(&piped));
    assert!(
        stderr(&mapped).contains("80000 logs read"),
        "{}",
        stderr(&mapped)
    );
}

#[test]
fn a_named_pipe_is_converted_as_a_stream() {
    let dir = tempfile::tempdir().unwrap();
    let logs = generated(dir.path(), 2_000);
    let bytes = std::fs::read(&logs).unwrap();
    let fifo = dir.path().join("fifo");
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    // A writer that writes everything as soon as the reader opens, then closes. (`convert`
    // opens the path once; reopening it to read it as a stream could lose what a quick writer
    // wrote and closed in between, a race of microseconds this test cannot force.)
    let w = {
        let fifo = fifo.clone();
        std::thread::spawn(move || {
            let mut f = std::fs::OpenOptions::new().write(true).open(fifo).unwrap();
            f.write_all(&bytes).unwrap();
        })
    };
    let child = convert(&fifo)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let done = watchdog(child.id(), Duration::from_secs(60));
    let o = child.wait_with_output().unwrap();
    done.store(true, Ordering::Relaxed);
    w.join().unwrap();
    assert!(o.status.success(), "{:?}: {}", o.status, stderr(&o));
    assert!(stderr(&o).contains("2000 logs read"), "{}", stderr(&o));
}

#[test]
fn a_file_cut_short_while_mapped_kills_convert_by_a_signal() {
    let dir = tempfile::tempdir().unwrap();
    let logs = generated(dir.path(), 40_000);
    let (mut reader, writer) = std::io::pipe().unwrap();
    let mut cmd = convert(&logs);
    cmd.stdout(writer).stderr(Stdio::piped());
    let child = cmd.spawn().unwrap();
    // The parent's copy of the pipe's writing end.
    drop(cmd);
    let done = watchdog(child.id(), Duration::from_secs(60));
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
    done.store(true, Ordering::Relaxed);
    assert!(!o.status.success(), "{}", stderr(&o));
    assert_eq!(
        o.status.signal(),
        Some(SIGBUS),
        "{:?}: {}",
        o.status,
        stderr(&o)
    );
}

/// `unsafe_code` is `deny`, not `forbid`, so that src/mapped.rs (the file map) and
/// src/auth/kafka_admin.rs (the admin client's OAUTHBEARER token) can each allow their one
/// block; any other `allow` would pass the compiler. This keeps them the only ones.
#[test]
fn the_only_unsafe_code_is_the_map_and_the_admin_clients_token() {
    let word = concat!("un", "safe");
    let patterns = [
        format!("{word} {{"),
        format!("{word} fn"),
        format!("{word} impl"),
        format!("{word}_code)"),
    ];
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    let mut dirs: Vec<_> = ["src", "tests", "benches", "examples"]
        .iter()
        .map(|d| root.join(d))
        .collect();
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                files.push(p);
            }
        }
    }
    assert!(files.len() > 50, "{} files", files.len());
    let mut found = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        for (i, line) in text.lines().enumerate() {
            if patterns.iter().any(|p| line.contains(p.as_str())) {
                found.push(format!(
                    "{}:{}",
                    f.strip_prefix(root).unwrap().display(),
                    i + 1
                ));
            }
        }
    }
    // In each file, the `allow` and the block it allows.
    for file in ["src/mapped.rs:", "src/auth/kafka_admin.rs:"] {
        let here = found.iter().filter(|f| f.starts_with(file)).count();
        assert_eq!(here, 2, "{file} {found:#?}");
    }
    assert_eq!(found.len(), 4, "{found:#?}");
}
