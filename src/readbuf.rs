//! A buffered reader whose buffer starts on a cache line, for the files the offline commands
//! read (`run --replay` reads ahead on a thread of its own into buffers aligned the same way:
//! [`crate::readahead`]).
//!
//! Why not `std::io::BufReader`: its buffer of 256 KiB or more comes from glibc's `mmap` path
//! and starts 16 bytes past a page boundary. `read(2)` fills it with the kernel's copy
//! (`rep movsb`), which on the AMD EPYC (Zen 3) machines this project is measured on is about
//! five times slower into a destination a few bytes past a 64-byte boundary than into an
//! aligned one: 658 MB from the page cache in 1 MiB reads cost 0.26–0.28 s of system time at
//! offsets 8 and 16 and 0.06–0.07 s at offset 0, 64 or 2,048 (docs/performance.md, "The read buffer's alignment").
//! On the `run --replay` pipeline thread that copy was a fifth of the CPU.

use std::io::{self, BufRead, Read};

/// The alignment of the buffer's start: one cache line.
pub(crate) const ALIGN: usize = 64;

/// `cap` bytes (at least 1) whose first starts on a 64-byte boundary.
pub(crate) struct AlignedBuf {
    /// `ALIGN` bytes longer than the capacity, so that an aligned start always fits.
    bytes: Vec<u8>,
    start: usize,
    cap: usize,
}

impl AlignedBuf {
    pub(crate) fn new(cap: usize) -> Self {
        let cap = cap.max(1);
        let bytes = vec![0u8; cap + ALIGN];
        let start = (ALIGN - bytes.as_ptr().addr() % ALIGN) % ALIGN;
        AlignedBuf { bytes, start, cap }
    }

    /// The aligned bytes.
    pub(crate) fn get(&self) -> &[u8] {
        &self.bytes[self.start..self.start + self.cap]
    }

    pub(crate) fn get_mut(&mut self) -> &mut [u8] {
        &mut self.bytes[self.start..self.start + self.cap]
    }
}

/// A `BufRead` over `R` with a buffer of a fixed capacity that starts on a 64-byte boundary.
/// Reads of at least the capacity into an empty buffer go straight to `R`, as `BufReader`'s do.
pub struct AlignedReader<R> {
    inner: R,
    buf: AlignedBuf,
    /// Consumed bytes of the buffer.
    pos: usize,
    /// Filled bytes of the buffer.
    filled: usize,
}

impl<R: Read> AlignedReader<R> {
    /// A reader of `inner` with a buffer of `cap` bytes (at least 1).
    pub fn with_capacity(cap: usize, inner: R) -> Self {
        AlignedReader {
            inner,
            buf: AlignedBuf::new(cap),
            pos: 0,
            filled: 0,
        }
    }
}

/// `Read::read` for a `BufRead` that holds its bytes itself: a copy out of `fill_buf`.
pub(crate) fn read_through_buffer<R: BufRead + ?Sized>(
    r: &mut R,
    out: &mut [u8],
) -> io::Result<usize> {
    let avail = r.fill_buf()?;
    let n = avail.len().min(out.len());
    out[..n].copy_from_slice(&avail[..n]);
    r.consume(n);
    Ok(n)
}

impl<R: Read> Read for AlignedReader<R> {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        if self.pos == self.filled && out.len() >= self.buf.cap {
            return self.inner.read(out);
        }
        read_through_buffer(self, out)
    }
}

impl<R: Read> BufRead for AlignedReader<R> {
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        if self.pos == self.filled {
            let n = self.inner.read(self.buf.get_mut())?;
            self.pos = 0;
            self.filled = n;
        }
        Ok(&self.buf.get()[self.pos..self.filled])
    }

    fn consume(&mut self, amt: usize) {
        self.pos = (self.pos + amt).min(self.filled);
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A source that hands out at most `chunk` bytes per read (as pipes and sockets do).
    struct Chunked<'a> {
        data: &'a [u8],
        chunk: usize,
    }

    impl Read for Chunked<'_> {
        fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
            let n = self.chunk.min(out.len()).min(self.data.len());
            out[..n].copy_from_slice(&self.data[..n]);
            self.data = &self.data[n..];
            Ok(n)
        }
    }

    #[test]
    fn every_fill_starts_on_a_cache_line() {
        let data: Vec<u8> = (0..10_000u32).map(|i| i as u8).collect();
        for cap in [1, 63, 64, 100, 4096] {
            let mut r = AlignedReader::with_capacity(
                cap,
                Chunked {
                    data: &data,
                    chunk: 1000,
                },
            );
            loop {
                let b = r.fill_buf().unwrap();
                if b.is_empty() {
                    break;
                }
                assert_eq!(b.as_ptr().addr() % ALIGN, 0, "capacity {cap}");
                let n = b.len();
                r.consume(n);
            }
        }
    }

    /// Reads all of `r` (a source of `total` bytes) through a mix of calls: per `(op, n)`,
    /// `read` into `n` bytes (op 0), `fill_buf` then `consume` of up to `n` (op 1), or
    /// `read_exact` of up to `n` (else); then `read_to_end`. Shared by the property tests of
    /// the readers built on [`AlignedBuf`].
    pub(crate) fn read_mixed(r: &mut impl BufRead, total: usize, ops: &[(u8, usize)]) -> Vec<u8> {
        let mut got = Vec::new();
        for &(op, n) in ops {
            match op {
                0 => {
                    let mut out = vec![0u8; n];
                    let k = r.read(&mut out).unwrap();
                    got.extend_from_slice(&out[..k]);
                }
                1 => {
                    let b = r.fill_buf().unwrap();
                    let k = n.min(b.len());
                    got.extend_from_slice(&b[..k]);
                    r.consume(k);
                }
                _ => {
                    let left = total - got.len();
                    let mut out = vec![0u8; n.min(left)];
                    r.read_exact(&mut out).unwrap();
                    got.extend_from_slice(&out);
                }
            }
        }
        r.read_to_end(&mut got).unwrap();
        got
    }

    proptest! {
        /// Any mix of `read`, `fill_buf` + partial `consume` and `read_exact` yields the
        /// source's bytes in order, exactly once.
        #[test]
        fn yields_the_source_bytes_in_order(
            data in proptest::collection::vec(any::<u8>(), 0..3000),
            cap in 1usize..300,
            chunk in 1usize..500,
            ops in proptest::collection::vec((0u8..3, 0usize..700), 1..200),
        ) {
            let mut r = AlignedReader::with_capacity(cap, Chunked { data: &data, chunk });
            let got = read_mixed(&mut r, data.len(), &ops);
            prop_assert_eq!(got, data);
        }
    }
}
