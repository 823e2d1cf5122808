//! File dead-letter target: length-delimited original bytes plus a JSON-lines reasons sidecar.
//! Writes happen on a dedicated thread; a letter is acknowledged only after both files are
//! `fsync`ed. A failed write is rolled back (files truncated to their previous length) and
//! reported as [`Outcome::Failed`] so the caller re-sends it.
//!
//! The files are opened by path for each group of letters (letters are rare, an open is cheap):
//! a file moved away by an operator is created again, and a target whose directory or disk was
//! broken recovers as soon as it is fixed, without a restart. They are opened once at start-up
//! too, so a path that cannot be written is a start-up error.
//!
//! Every frame the target writes can be read back by `run --replay` at the same settings: a
//! letter whose payload is over `batching.max_frame_bytes` (the largest frame replay and
//! `convert` accept) is written as a **claim check**, as the Kafka target does over its size
//! limit: the frame holds the first [`CLAIM_CHECK_PREFIX_BYTES`] of the payload (at most the
//! frame limit) and the reasons line says so (`claim_check` with the original size and SHA-256;
//! the payload stays in the source topic at `partition` / `offset`).

use super::kafka::CLAIM_CHECK_PREFIX_BYTES;
use super::{DeadLetter, Failure, Outcome, OutcomeFn, Target};
use crate::framing::{write_frame, FrameError, FrameReader};
use sha2::{Digest, Sha256};
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The sidecar path for a dead-letter file: `<path>.reasons.jsonl`.
pub fn reasons_path(path: &Path) -> PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push(".reasons.jsonl");
    PathBuf::from(p)
}

/// Appends dead letters to a file.
pub struct FileTarget {
    tx: Option<mpsc::Sender<DeadLetter>>,
    pending: Arc<AtomicUsize>,
    worker: Option<std::thread::JoinHandle<()>>,
}

impl FileTarget {
    /// Opens (creating parent directories) `path` and its sidecar for appending; letters over
    /// `max_frame` bytes (`batching.max_frame_bytes`) are written as claim checks.
    pub fn new(path: &Path, max_frame: usize, on_outcome: OutcomeFn) -> io::Result<Self> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        cut_torn_tails(path)?;
        drop(open_files(path)?);
        let (tx, rx) = mpsc::channel::<DeadLetter>();
        let pending = Arc::new(AtomicUsize::new(0));
        let p2 = Arc::clone(&pending);
        let worker_path = path.to_path_buf();
        let worker = std::thread::Builder::new()
            .name("dead-letter-file".into())
            .spawn(move || writer_loop(rx, &worker_path, max_frame, on_outcome, p2))?;
        Ok(FileTarget {
            tx: Some(tx),
            pending,
            worker: Some(worker),
        })
    }
}

/// Cuts off what a process killed part-way through a group left at the end of the files: a
/// frame whose bytes do not all follow its length prefix, and a reasons line without its
/// newline. Letters appended after such a tail could not be read back (`run --replay` and
/// `convert` stop at the torn frame), though acknowledged. Those cut letters were never
/// acknowledged (both files are synced first), so they are sent again. Errors of this process's
/// own writes are rolled back where they happen; only a kill leaves a torn tail.
fn cut_torn_tails(path: &Path) -> io::Result<()> {
    cut_to(path, whole_frames_len)?;
    cut_to(&reasons_path(path), whole_lines_len)
}

/// Cuts the file at `path` (if it exists) to the length `whole` finds whole in it.
fn cut_to(path: &Path, whole: fn(&Path, u64) -> io::Result<u64>) -> io::Result<()> {
    let len = match std::fs::metadata(path) {
        Ok(m) => m.len(),
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    let keep = whole(path, len)?;
    if keep < len {
        tracing::warn!(
            file = %path.display(),
            bytes = len - keep,
            "cutting a dead letter a killed process left half-written"
        );
        let f = OpenOptions::new().write(true).open(path)?;
        f.set_len(keep)?;
        f.sync_all()?;
    }
    Ok(())
}

/// The length of the data file's whole frames: where the frame the file ends inside starts
/// (its payload or its length prefix cut short), else `len`. An invalid prefix with a whole
/// prefix's worth of bytes after it is not a torn tail: nothing is cut.
fn whole_frames_len(path: &Path, len: u64) -> io::Result<u64> {
    /// The longest length prefix: a varint of 64 bits.
    const MAX_PREFIX: u64 = 10;
    let file = io::BufReader::with_capacity(64 << 10, File::open(path)?);
    let mut frames = FrameReader::new(file);
    loop {
        match frames.skip() {
            Ok(Some(_)) => {}
            Ok(None) => return Ok(len),
            Err(FrameError::Truncated { offset, .. }) => return Ok(offset),
            Err(FrameError::BadPrefix { offset }) if len - offset < MAX_PREFIX => {
                return Ok(offset)
            }
            Err(FrameError::BadPrefix { .. } | FrameError::TooLarge { .. }) => return Ok(len),
            Err(FrameError::Io(e)) => return Err(e),
        }
    }
}

/// The length of the reasons file up to and including its last newline.
fn whole_lines_len(path: &Path, len: u64) -> io::Result<u64> {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = File::open(path)?;
    let mut end = len;
    let mut chunk = vec![0u8; 64 << 10];
    while end > 0 {
        let start = end.saturating_sub(chunk.len() as u64);
        let n = (end - start) as usize;
        f.seek(SeekFrom::Start(start))?;
        f.read_exact(&mut chunk[..n])?;
        if let Some(i) = chunk[..n].iter().rposition(|&b| b == b'\n') {
            return Ok(start + i as u64 + 1);
        }
        end = start;
    }
    Ok(0)
}

/// Opens (creating) the data file and its sidecar for appending.
fn open_files(path: &Path) -> io::Result<(File, File)> {
    let open = |p: &Path| OpenOptions::new().create(true).append(true).open(p);
    Ok((open(path)?, open(&reasons_path(path))?))
}

/// The frame written for `letter`: its payload, or a claim check's prefix when the payload is
/// over `max_frame` (then also the payload's size).
pub fn frame_of(letter: &DeadLetter, max_frame: usize) -> (&[u8], Option<usize>) {
    if letter.payload.len() <= max_frame {
        return (&letter.payload, None);
    }
    let prefix = CLAIM_CHECK_PREFIX_BYTES.min(max_frame);
    (&letter.payload[..prefix], Some(letter.payload.len()))
}

/// Writes `letters` frame by frame through 64 KiB buffers into `data` and their reasons lines
/// into `reasons`; returns, per letter, the payload size when it was written as a claim check.
/// A payload larger than the buffer goes straight to the writer, so a group of letters is never
/// copied into one buffer (that doubled the memory the budget counts for them).
fn write_letters<D: Write, R: Write>(
    data: D,
    reasons: R,
    letters: &[DeadLetter],
    max_frame: usize,
) -> io::Result<Vec<Option<usize>>> {
    let mut dbuf = io::BufWriter::with_capacity(64 << 10, data);
    let mut rbuf = io::BufWriter::with_capacity(64 << 10, reasons);
    let mut claim_checks = Vec::with_capacity(letters.len());
    for l in letters {
        let (frame, claim_check) = frame_of(l, max_frame);
        write_frame(&mut dbuf, frame)?;
        let mut line = serde_json::json!({
            "topic": l.topic, "partition": l.partition, "offset": l.offset,
            "kind": l.kind.as_str(), "code": l.code, "message": l.message,
        });
        if let Some(size) = claim_check {
            let sha: String = Sha256::digest(&l.payload)
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect();
            line["claim_check"] = serde_json::json!({
                "original_size": size, "original_sha256": sha, "frame_bytes": frame.len(),
                "reason": format!(
                    "payload of {size} bytes over batching.max_frame_bytes ({max_frame}); the frame \
                     holds its first {} bytes, the payload stays in the source topic at \
                     partition / offset", frame.len()
                ),
            });
        }
        serde_json::to_writer(&mut rbuf, &line)?;
        rbuf.write_all(b"\n")?;
        claim_checks.push(claim_check);
    }
    dbuf.flush()?;
    rbuf.flush()?;
    Ok(claim_checks)
}

fn write_all(
    path: &Path,
    letters: &[DeadLetter],
    max_frame: usize,
) -> io::Result<Vec<Option<usize>>> {
    let (mut data, mut reasons) = open_files(path)?;
    let (data, reasons) = (&mut data, &mut reasons);
    let (d0, r0) = (data.metadata()?.len(), reasons.metadata()?.len());
    let result = (|| {
        let claim_checks = write_letters(&mut *data, &mut *reasons, letters, max_frame)?;
        data.sync_data()?;
        reasons.sync_data()?;
        Ok(claim_checks)
    })();
    if result.is_err() {
        // Best effort: never leave a half-written frame that would break replay.
        let _ = data.set_len(d0);
        let _ = reasons.set_len(r0);
    }
    result
}

fn writer_loop(
    rx: mpsc::Receiver<DeadLetter>,
    path: &Path,
    max_frame: usize,
    on: OutcomeFn,
    pending: Arc<AtomicUsize>,
) {
    while let Ok(first) = rx.recv() {
        // The pipeline's claim-check flag answers the Kafka target's refusals; here only the
        // frame limit decides (`frame_of`).
        let mut letters = vec![first];
        while let Ok(more) = rx.try_recv() {
            letters.push(more);
            if letters.len() >= 4096 {
                break;
            }
        }
        let n = letters.len();
        match write_all(path, &letters, max_frame) {
            Ok(claim_checks) => {
                for (l, claim_check) in letters.into_iter().zip(claim_checks) {
                    on(Outcome::Written {
                        bytes: l.held_bytes(),
                        claim_check,
                        partition: l.partition,
                        offset: l.offset,
                        epoch: l.epoch,
                    });
                }
            }
            Err(e) => {
                for l in letters {
                    on(Outcome::Failed {
                        letter: Box::new(l),
                        failure: Failure::Transient,
                        error: e.to_string(),
                    });
                }
            }
        }
        pending.fetch_sub(n, Ordering::AcqRel);
    }
}

impl Target for FileTarget {
    fn send(&mut self, letter: DeadLetter) {
        self.pending.fetch_add(1, Ordering::AcqRel);
        if let Some(tx) = &self.tx {
            if let Err(mpsc::SendError(l)) = tx.send(letter) {
                self.pending.fetch_sub(1, Ordering::AcqRel);
                tracing::error!(
                    partition = l.partition,
                    offset = l.offset,
                    "dead-letter writer stopped"
                );
            }
        }
    }

    fn is_ready(&self) -> bool {
        self.worker.as_ref().is_some_and(|w| !w.is_finished())
    }

    fn flush(&mut self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        while self.pending.load(Ordering::Acquire) > 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for FileTarget {
    fn drop(&mut self) {
        self.tx.take();
        if let Some(w) = self.worker.take() {
            let _ = w.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::deadletter::Kind;
    use crate::framing::FrameReader;
    use std::sync::Mutex;

    /// A target on `path` whose outcomes are recorded.
    fn recording(path: &Path, max_frame: usize) -> (FileTarget, Arc<Mutex<Vec<Outcome>>>) {
        let acks = Arc::new(Mutex::new(Vec::new()));
        let a2 = Arc::clone(&acks);
        let t = FileTarget::new(
            path,
            max_frame,
            Arc::new(move |o| a2.lock().unwrap().push(o)),
        )
        .unwrap();
        (t, acks)
    }

    #[test]
    fn letters_are_written_replayable_and_acknowledged() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("dlq/dead.bin");
        let (mut t, acks) = recording(&path, 1 << 20);
        for i in 0..3 {
            t.send(DeadLetter {
                topic: "t".into(),
                partition: 1,
                offset: 10 + i,
                epoch: 0,
                key: None,
                payload: vec![i as u8; 5],
                kind: Kind::Decode,
                code: "shape_mismatch",
                message: format!("reason {i}"),
                claim_check: false,
            });
        }
        t.flush(Duration::from_secs(10));
        let acked: Vec<i64> = acks
            .lock()
            .unwrap()
            .iter()
            .map(|o| match o {
                Outcome::Written { offset, .. } => *offset,
                Outcome::Failed { error, .. } => panic!("{error}"),
            })
            .collect();
        assert_eq!(acked, [10, 11, 12]);
        let mut r = FrameReader::new(std::io::BufReader::new(File::open(&path).unwrap()));
        let mut buf = Vec::new();
        let mut n = 0;
        while r.next_into(&mut buf).unwrap().is_some() {
            assert_eq!(buf, vec![n as u8; 5]);
            n += 1;
        }
        assert_eq!(n, 3);
        let reasons = std::fs::read_to_string(reasons_path(&path)).unwrap();
        assert_eq!(reasons.lines().count(), 3);
        assert!(
            reasons.contains("\"offset\":12") && reasons.contains("reason 2"),
            "{reasons}"
        );
    }

    fn letter(offset: i64, payload: Vec<u8>) -> DeadLetter {
        DeadLetter {
            topic: "t".into(),
            partition: 0,
            offset,
            epoch: 0,
            key: None,
            payload,
            kind: Kind::Decode,
            code: "too_large",
            message: "m".into(),
            claim_check: false,
        }
    }

    /// A letter over the frame limit is claim-checked: written whole, it would stop
    /// `run --replay` at the same settings.
    #[test]
    fn a_letter_over_the_frame_limit_is_claim_checked_so_every_frame_replays() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("dead.bin");
        let max_frame = 8 << 10;
        let (mut t, acks) = recording(&path, max_frame);
        let big: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        t.send(letter(1, vec![1; 10]));
        t.send(letter(2, big.clone()));
        t.send(letter(3, vec![3; max_frame]));
        t.flush(Duration::from_secs(10));
        let checks: Vec<(i64, Option<usize>)> = acks
            .lock()
            .unwrap()
            .iter()
            .map(|o| match o {
                Outcome::Written {
                    offset,
                    claim_check,
                    ..
                } => (*offset, *claim_check),
                Outcome::Failed { error, .. } => panic!("{error}"),
            })
            .collect();
        assert_eq!(checks, [(1, None), (2, Some(100_000)), (3, None)]);
        // Read as `run --replay` reads it, with the same frame limit: every frame.
        let mut r = FrameReader::new(std::io::BufReader::new(File::open(&path).unwrap()))
            .with_max_frame(max_frame);
        let mut frames = Vec::new();
        let mut buf = Vec::new();
        while r.next_into(&mut buf).unwrap().is_some() {
            frames.push(buf.clone());
        }
        assert_eq!(frames.len(), 3);
        assert_eq!(frames[1], big[..CLAIM_CHECK_PREFIX_BYTES]);
        assert_eq!(frames[2].len(), max_frame);
        let reasons = std::fs::read_to_string(reasons_path(&path)).unwrap();
        let lines: Vec<serde_json::Value> = reasons
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 3, "one reasons line per frame");
        assert_eq!(lines[1]["offset"], 2);
        assert_eq!(lines[1]["claim_check"]["original_size"], 100_000);
        let sha: String = Sha256::digest(&big)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(lines[1]["claim_check"]["original_sha256"], sha.as_str());
        assert!(lines[0].get("claim_check").is_none());
        // A frame limit under the claim check's usual prefix bounds the prefix too.
        let l = letter(4, big);
        assert_eq!(frame_of(&l, 1024).0.len(), 1024);
    }

    /// Records the largest single write the writer under the buffers receives.
    struct Largest<'a>(&'a mut Vec<u8>, usize);
    impl Write for Largest<'_> {
        fn write(&mut self, b: &[u8]) -> io::Result<usize> {
            self.1 = self.1.max(b.len());
            self.0.extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    /// A group of letters is written frame by frame, never copied
    /// into one buffer first (that held each payload twice while the budget counted it once).
    /// Observed through the writer: no single write is larger than the 64 KiB buffer or the
    /// largest payload, while the group is several times that.
    #[test]
    fn a_group_of_letters_is_written_frame_by_frame_not_copied_into_one_buffer() {
        let mut letters: Vec<DeadLetter> = (0..200).map(|i| letter(i, vec![7; 1000])).collect();
        letters.push(letter(200, vec![9; 200_000]));
        letters.extend((201..400).map(|i| letter(i, vec![8; 1000])));
        let total: usize = letters.iter().map(|l| l.payload.len()).sum();
        let (mut data, mut reasons) = (Vec::new(), Vec::new());
        let mut d = Largest(&mut data, 0);
        let mut r = Largest(&mut reasons, 0);
        let checks = write_letters(&mut d, &mut r, &letters, 64 << 20).unwrap();
        let (largest_data, largest_reasons) = (d.1, r.1);
        assert!(checks.iter().all(Option::is_none));
        assert!(total > 500_000);
        assert!(
            largest_data <= 200_000,
            "a write of {largest_data} bytes: the group was buffered"
        );
        assert!(largest_reasons <= 64 << 10, "{largest_reasons}");
        // And the bytes are the frames, in order.
        let mut fr = FrameReader::new(&data[..]);
        let mut buf = Vec::new();
        for l in &letters {
            assert!(fr.next_into(&mut buf).unwrap().is_some());
            assert_eq!(buf, l.payload);
        }
        assert!(fr.next_into(&mut buf).unwrap().is_none());
        assert_eq!(String::from_utf8(reasons).unwrap().lines().count(), 400);
    }

    /// A previous run killed while writing: a frame cut part-way (in its payload, or in its
    /// prefix) and a reasons line without its newline. The torn tails are cut at start-up, so
    /// the letters written after them can be read back, one reasons line each.
    #[test]
    fn torn_tails_a_killed_run_left_are_cut_before_letters_are_appended() {
        for cut in [1, 2, 11] {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("dead.bin");
            let mut data = Vec::new();
            write_frame(&mut data, &[1u8; 3]).unwrap();
            let whole = data.len();
            write_frame(&mut data, &[5u8; 200]).unwrap(); // a two-byte prefix
            data.truncate(whole + cut);
            std::fs::write(&path, &data).unwrap();
            std::fs::write(reasons_path(&path), "{\"offset\":1}\n{\"offs").unwrap();
            let (mut t, acks) = recording(&path, 1 << 20);
            t.send(letter(7, vec![7; 5]));
            t.flush(Duration::from_secs(10));
            assert!(matches!(acks.lock().unwrap()[0], Outcome::Written { .. }));
            let mut r = FrameReader::new(std::io::BufReader::new(File::open(&path).unwrap()));
            let mut buf = Vec::new();
            let mut frames = Vec::new();
            while r
                .next_into(&mut buf)
                .unwrap_or_else(|e| panic!("cut {cut}: the letters cannot be read back: {e}"))
                .is_some()
            {
                frames.push(buf.clone());
            }
            assert_eq!(frames, [vec![1u8; 3], vec![7u8; 5]], "cut {cut}");
            let reasons = std::fs::read_to_string(reasons_path(&path)).unwrap();
            let lines: Vec<&str> = reasons.lines().collect();
            assert_eq!(lines.len(), 2, "{reasons}");
            assert_eq!(lines[0], "{\"offset\":1}");
            assert!(lines[1].contains("\"offset\":7"), "{reasons}");
        }
    }

    /// Whole files are left as they are (and a prefix no writer writes is not a torn tail).
    #[test]
    fn whole_files_are_not_cut() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("dead.bin");
        let mut data = Vec::new();
        for n in [0usize, 1, 127, 128, 70_000] {
            write_frame(&mut data, &vec![3u8; n]).unwrap();
        }
        std::fs::write(&path, &data).unwrap();
        std::fs::write(reasons_path(&path), "a\nb\n").unwrap();
        cut_torn_tails(&path).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), data);
        assert_eq!(
            std::fs::read_to_string(reasons_path(&path)).unwrap(),
            "a\nb\n"
        );
        let odd = [data.clone(), vec![0xff; 11]].concat();
        std::fs::write(&path, &odd).unwrap();
        cut_torn_tails(&path).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), odd);
    }
}
