use super::*;
use proptest::prelude::*;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// A source that hands out at most `chunk` bytes per read (as pipes do), then, if `fail` is
/// set, an error instead of the end.
struct Chunked {
    data: Vec<u8>,
    at: usize,
    chunk: usize,
    fail: bool,
    /// Set when the source is dropped (the reader thread has ended).
    dropped: Option<Arc<AtomicBool>>,
}

impl Read for Chunked {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        let n = self.chunk.min(out.len()).min(self.data.len() - self.at);
        if n == 0 && self.fail {
            return Err(io::Error::other("disk on fire"));
        }
        out[..n].copy_from_slice(&self.data[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

impl Drop for Chunked {
    fn drop(&mut self) {
        if let Some(d) = &self.dropped {
            d.store(true, Ordering::SeqCst);
        }
    }
}

fn source(data: &[u8], chunk: usize, fail: bool) -> Chunked {
    Chunked {
        data: data.to_vec(),
        at: 0,
        chunk,
        fail,
        dropped: None,
    }
}

#[test]
fn every_buffer_starts_on_a_cache_line() {
    let data: Vec<u8> = (0..10_000u32).map(|i| i as u8).collect();
    for cap in [1, 63, 64, 100, 4096] {
        let mut r = ReadAhead::new(source(&data, 1000, false), cap, 2).unwrap();
        let mut seen = 0;
        loop {
            let b = r.fill_buf().unwrap();
            if b.is_empty() {
                break;
            }
            assert_eq!(
                b.as_ptr().addr() % crate::readbuf::ALIGN,
                0,
                "capacity {cap}"
            );
            let n = b.len();
            seen += n;
            r.consume(n);
        }
        assert_eq!(seen, data.len());
    }
}

#[test]
fn an_error_comes_after_the_bytes_read_before_it_and_stays() {
    let data = b"0123456789".to_vec();
    let mut r = ReadAhead::new(source(&data, 3, true), 4, 2).unwrap();
    let mut got = Vec::new();
    let err = loop {
        match r.fill_buf() {
            Ok(b) => {
                assert!(!b.is_empty(), "the end reported instead of the error");
                got.extend_from_slice(b);
                let n = b.len();
                r.consume(n);
            }
            Err(e) => break e,
        }
    };
    assert_eq!(got, data);
    assert_eq!(err.to_string(), "disk on fire");
    assert!(
        r.fill_buf().is_err(),
        "a failed input must not look like a clean end"
    );
}

#[test]
fn dropping_the_reader_stops_its_thread() {
    let dropped = Arc::new(AtomicBool::new(false));
    let data = vec![7u8; 100_000];
    let mut src = source(&data, 64, false);
    src.dropped = Some(Arc::clone(&dropped));
    let mut r = ReadAhead::new(src, 128, 2).unwrap();
    // Take one buffer so the thread is mid-file, blocked on a full channel.
    assert!(!r.fill_buf().unwrap().is_empty());
    drop(r);
    // Liveness, not timing: the thread must end (and drop its source) at its next handover.
    for _ in 0..1000 {
        if dropped.load(Ordering::SeqCst) {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    panic!("the reader thread still holds its source 10 s after the reader was dropped");
}

/// A pipe: each read hands over one message sent to it, blocking until one comes; the end
/// when the sender is gone.
struct Pipe(std::sync::mpsc::Receiver<Vec<u8>>);

impl Read for Pipe {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        match self.0.recv() {
            Ok(m) => {
                out[..m.len()].copy_from_slice(&m);
                Ok(m.len())
            }
            Err(_) => Ok(0),
        }
    }
}

#[test]
fn a_short_read_is_handed_over_at_once() {
    // `run --replay /dev/stdin` behind a slow producer: what arrived must be decoded now, not
    // once a whole buffer has arrived.
    let (tx, rx) = std::sync::mpsc::channel();
    let (got_tx, got) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut r = ReadAhead::new(Pipe(rx), 1 << 20, 2).unwrap();
        let first = r.fill_buf().map(<[u8]>::to_vec);
        let _ = got_tx.send(first);
    });
    tx.send(b"abc".to_vec()).unwrap();
    // Liveness, not timing: the bytes must come while the pipe stays open.
    let first = got
        .recv_timeout(std::time::Duration::from_secs(10))
        .expect("3 bytes held back waiting for a full buffer");
    assert_eq!(first.unwrap(), b"abc");
    drop(tx);
}

proptest! {
    /// Any mix of `read`, `fill_buf` + partial `consume` and `read_exact` yields the source's
    /// bytes in order, exactly once, whatever the buffer size and count.
    #[test]
    fn yields_the_source_bytes_in_order(
        data in proptest::collection::vec(any::<u8>(), 0..3000),
        cap in 1usize..300,
        buffers in 1usize..4,
        chunk in 1usize..500,
        ops in proptest::collection::vec((0u8..3, 0usize..700), 1..100),
    ) {
        let mut r = ReadAhead::new(source(&data, chunk, false), cap, buffers).unwrap();
        let got = crate::readbuf::tests::read_mixed(&mut r, data.len(), &ops);
        prop_assert_eq!(got, data);
    }
}
