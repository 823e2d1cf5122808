//! File dead-letter target: length-delimited original bytes plus a JSON-lines reasons sidecar.
//! Writes happen on a dedicated thread; a letter is acknowledged only after both files are
//! `fsync`ed. A failed write is rolled back (files truncated to their previous length) and
//! reported as [`Outcome::Failed`] so the caller re-sends it.
//!
//! The files are opened by path for each group of letters (letters are rare, an open is cheap):
//! a file moved away by an operator is created again, and a target whose directory or disk was
//! broken recovers as soon as it is fixed, without a restart. They are opened once at start-up
//! too, so a path that cannot be written is a start-up error.

use super::{DeadLetter, Failure, Outcome, OutcomeFn, Target};
use crate::framing::write_frame;
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
    /// Opens (creating parent directories) `path` and its sidecar for appending.
    pub fn new(path: &Path, on_outcome: OutcomeFn) -> io::Result<Self> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        drop(open_files(path)?);
        let (tx, rx) = mpsc::channel::<DeadLetter>();
        let pending = Arc::new(AtomicUsize::new(0));
        let p2 = Arc::clone(&pending);
        let worker_path = path.to_path_buf();
        let worker = std::thread::Builder::new()
            .name("dead-letter-file".into())
            .spawn(move || writer_loop(rx, &worker_path, on_outcome, p2))?;
        Ok(FileTarget {
            tx: Some(tx),
            pending,
            worker: Some(worker),
        })
    }
}

/// Opens (creating) the data file and its sidecar for appending.
fn open_files(path: &Path) -> io::Result<(File, File)> {
    let open = |p: &Path| OpenOptions::new().create(true).append(true).open(p);
    Ok((open(path)?, open(&reasons_path(path))?))
}

fn write_all(path: &Path, letters: &[DeadLetter]) -> io::Result<()> {
    let (mut data, mut reasons) = open_files(path)?;
    let (data, reasons) = (&mut data, &mut reasons);
    let (d0, r0) = (data.metadata()?.len(), reasons.metadata()?.len());
    let result = (|| {
        // Frame by frame through small buffers: a payload larger than the buffer goes straight
        // to the file, so a group of letters is never copied into one buffer (that doubled the
        // memory the budget counts for them).
        let mut dbuf = io::BufWriter::with_capacity(64 << 10, &mut *data);
        let mut rbuf = io::BufWriter::with_capacity(64 << 10, &mut *reasons);
        for l in letters {
            write_frame(&mut dbuf, &l.payload)?;
            let line = serde_json::json!({
                "topic": l.topic, "partition": l.partition, "offset": l.offset,
                "kind": l.kind.as_str(), "code": l.code, "message": l.message,
            });
            serde_json::to_writer(&mut rbuf, &line)?;
            rbuf.write_all(b"\n")?;
        }
        dbuf.flush()?;
        rbuf.flush()?;
        drop((dbuf, rbuf));
        data.sync_data()?;
        reasons.sync_data()
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
    on: OutcomeFn,
    pending: Arc<AtomicUsize>,
) {
    while let Ok(first) = rx.recv() {
        // A claim check is the Kafka target's answer to a size limit; a file has none, so the
        // letter is written whole whatever its flag.
        let mut letters = vec![first];
        while let Ok(more) = rx.try_recv() {
            letters.push(more);
            if letters.len() >= 4096 {
                break;
            }
        }
        let n = letters.len();
        match write_all(path, &letters) {
            Ok(()) => {
                for l in letters {
                    on(Outcome::Written {
                        bytes: l.held_bytes(),
                        claim_check: None,
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

    #[test]
    fn letters_are_written_replayable_and_acknowledged() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("dlq/dead.bin");
        let acks = Arc::new(Mutex::new(Vec::new()));
        let a2 = Arc::clone(&acks);
        let mut t = FileTarget::new(&path, Arc::new(move |o| a2.lock().unwrap().push(o))).unwrap();
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
}
