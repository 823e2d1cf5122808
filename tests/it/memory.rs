//! Memory counted as allocated, through the real binary: crafted logs that
//! take ~260 MB of builder capacity each before a late row rejects them, good logs between
//! them, then a good log followed by a valid ~260 MB log, replayed while every Parquet write
//! fails (a plain file sits where the partition folder must go, so the sink retries forever).
//! The publisher must pause its intake and its peak RSS must stay within the memory formula of
//! docs/reliability.md ("The memory formula"): `max_inflight_bytes` + `max_bytes` +
//! `max_log_bytes` + [`CONSTANT`] + the Parquet sink's two batches (no prefetch: `--replay`),
//! which is what the publisher exports as `observation_publisher_memory_bound_bytes`. The budget
//! and the per-log limit are set to 64 MiB and 256 MiB, so that a ~260 MB log is admitted.

use crate::common::{bin, local_config, repo_config};
use observation_publisher::framing::write_frame;
use observation_publisher::proto::PredictionLog;
use observation_publisher::table::TableLayout;
use std::io::{Read, Write};
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::hostile::crafted;

const MIB: u64 = 1 << 20;
/// The formula's constant: the process's own footprint (debug build: code, runtime threads,
/// metrics, the replay's three 1 MiB read-ahead buffers) and allocator slack, as measured and documented in
/// docs/reliability.md section 1.2.
const CONSTANT: u64 = 64 * MIB;
const BUDGET: u64 = 64 * MIB;
const MAX_BYTES: u64 = 8 * MIB;
const MAX_LOG_BYTES: u64 = 256 * MIB;

/// [`crafted::amplifying`] with its last row id a number: every count agrees and the size
/// bound admits it, so it is rejected only by the row loop, after its other rows were appended.
fn numeric_last_row_id(layout: &TableLayout, rows: usize, id_len: usize) -> Vec<u8> {
    use prost::Message;
    use prost_types::value::Kind;
    let mut log = PredictionLog::decode(crafted::amplifying(layout, rows, id_len, 0).as_slice())
        .expect("amplifying encodes a PredictionLog");
    let last = log
        .output
        .as_mut()
        .and_then(|o| o.prediction_results_table.as_mut())
        .and_then(|t| t.fields.get_mut("row_ids"))
        .and_then(|v| match &mut v.kind {
            Some(Kind::ListValue(l)) => l.values.last_mut(),
            _ => None,
        })
        .expect("amplifying writes row ids");
    last.kind = Some(Kind::NumberValue(7.0));
    log.encode_to_vec()
}

/// Peak resident set of a process (VmHWM), in bytes.
fn vm_hwm(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kb: u64 = s
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kb * 1024)
}

/// An unlabelled metric from `/metrics` on `port`.
fn metric(port: u16, name: &str) -> Option<f64> {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

#[test]
fn a_stalled_sink_pauses_intake_within_the_memory_formula() {
    let dir = tempfile::tempdir().unwrap();
    let layout = TableLayout::from_config(&local_config());
    // 2,600 rows × a 100 KB session id: ≈ 260 MB decoded from ≈ 160 KB, under the per-log
    // limit set below (256 MiB); the bad one's last row id is a number.
    let bad = numeric_last_row_id(&layout, 2_600, 100_000);
    let big = crafted::amplifying(&layout, 2_600, 100_000, 0);
    let good = crafted::amplifying(&layout, 3, 8, 0);
    let mut input = Vec::new();
    for _ in 0..12 {
        write_frame(&mut input, &bad).unwrap();
        write_frame(&mut input, &good).unwrap();
    }
    // A small log, then a valid large one that does not fit its batch.
    write_frame(&mut input, &good).unwrap();
    write_frame(&mut input, &big).unwrap();
    let replay = dir.path().join("input.bin");
    std::fs::write(&replay, input).unwrap();
    // Every Parquet write fails, retryably: the day folder of the logs' timestamp is a file.
    let rows = dir.path().join("rows");
    std::fs::create_dir_all(&rows).unwrap();
    std::fs::write(rows.join("dt=2023-11-14"), b"not a folder").unwrap();
    let port = crate::runtime::free_port();
    let log = std::fs::File::create(dir.path().join("stderr.log")).unwrap();
    let cfg = repo_config("local.yaml");
    let mut child = crate::common::Reaped(
        bin()
            .args(["run", "-c", cfg.to_str().unwrap(), "--replay"])
            .arg(&replay)
            .args(["--set", &format!("local_sink.path={}", rows.display())])
            .args([
                "--set",
                &format!("dead_letter.path={}", dir.path().join("dead.bin").display()),
            ])
            .args(["--set", &format!("server.listen=127.0.0.1:{port}")])
            .args(["--set", "logging.format=json"])
            .args(["--set", &format!("batching.max_inflight_bytes={BUDGET}")])
            .args(["--set", &format!("batching.max_bytes={MAX_BYTES}")])
            .args(["--set", &format!("batching.max_log_bytes={MAX_LOG_BYTES}")])
            .env_remove("OBS_PUBLISHER_CONFIG")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("binary starts"),
    );
    let pid = child.id();
    let limit = BUDGET + MAX_BYTES + MAX_LOG_BYTES + CONSTANT + 2 * MAX_BYTES;
    let give_up = Instant::now() + Duration::from_secs(300);
    let mut paused = false;
    let mut peak = 0;
    while Instant::now() < give_up {
        std::thread::sleep(Duration::from_millis(100));
        if child.try_wait().unwrap().is_some() {
            break;
        }
        peak = peak.max(vm_hwm(pid).unwrap_or(0));
        if peak > limit {
            break;
        }
        if metric(port, "observation_publisher_paused_partitions").is_some_and(|v| v >= 1.0) {
            paused = true;
            // Whatever was still being decoded when intake paused is in the high-water mark
            // once the pipeline waits; give it a moment to get there.
            std::thread::sleep(Duration::from_millis(500));
            peak = peak.max(vm_hwm(pid).unwrap_or(0));
            break;
        }
    }
    let inflight = metric(port, "observation_publisher_inflight_bytes");
    let exported = metric(port, "observation_publisher_memory_bound_bytes");
    eprintln!(
        "peak RSS {peak} bytes ({} MiB), formula {limit} bytes, paused {paused}, in flight {inflight:?}",
        peak / MIB
    );
    let _ = child.kill();
    let _ = child.wait();
    let err = std::fs::read_to_string(dir.path().join("stderr.log")).unwrap_or_default();
    let tail: String = err.lines().rev().take(5).collect::<Vec<_>>().join("\n");
    assert!(
        peak <= limit,
        "peak RSS {} MiB over the formula's {} MiB (in flight {inflight:?}); last lines:\n{tail}",
        peak / MIB,
        limit / MIB
    );
    assert!(
        paused,
        "intake never paused (peak RSS {} MiB, in flight {inflight:?}); last lines:\n{tail}",
        peak / MIB
    );
    // The in-flight figure counts what the batches hold: at least the large log's batch.
    assert!(
        inflight.is_some_and(|b| b >= 250e6),
        "in flight {inflight:?}"
    );
    assert_eq!(
        exported,
        Some(limit as f64),
        "the exported bound is the formula's"
    );
}
