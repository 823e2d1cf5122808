//! Length-delimited streams of messages: each message is prefixed by its length as a protobuf
//! varint (the framing of `convert`, `gen`, `run --replay` and the file dead-letter target).
//!
//! The reader never trusts a length: a prefix over the reader's maximum frame size
//! (`batching.max_frame_bytes`) is an error before any of the frame is read, and below it the
//! buffer grows only as bytes actually arrive.

use std::io::{self, BufRead, Write};

/// Why the stream cannot continue.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// Reading failed.
    #[error("read error: {0}")]
    Io(#[from] io::Error),
    /// The length prefix is not a valid varint (or exceeds 64 bits).
    #[error("invalid length prefix at byte {offset}")]
    BadPrefix {
        /// Byte offset of the prefix.
        offset: u64,
    },
    /// The input ended inside a frame (a truncated frame, or a length larger than the rest).
    #[error("frame at byte {offset} declares {len} bytes but the input ends after {got}")]
    Truncated {
        /// Byte offset of the prefix.
        offset: u64,
        /// Declared length.
        len: u64,
        /// Bytes present.
        got: u64,
    },
    /// The length prefix declares more than the largest frame accepted.
    #[error("frame at byte {offset} declares {len} bytes, over the limit of {max} bytes (batching.max_frame_bytes)")]
    TooLarge {
        /// Byte offset of the prefix.
        offset: u64,
        /// Declared length.
        len: u64,
        /// The limit.
        max: u64,
    },
}

/// Reads frames one by one into a reused buffer.
pub struct FrameReader<R> {
    inner: R,
    pos: u64,
    /// Largest frame accepted.
    max_frame: u64,
}

/// Most bytes reserved ahead of actually reading them.
const CHUNK: usize = 1 << 20;

impl<R: BufRead> FrameReader<R> {
    /// Wraps a buffered reader; frames up to [`crate::config::DEFAULT_MAX_FRAME_BYTES`].
    pub fn new(inner: R) -> Self {
        FrameReader {
            inner,
            pos: 0,
            max_frame: crate::config::DEFAULT_MAX_FRAME_BYTES as u64,
        }
    }

    /// Sets the largest frame accepted (`batching.max_frame_bytes`).
    pub fn with_max_frame(mut self, max: usize) -> Self {
        self.max_frame = max as u64;
        self
    }

    /// Bytes consumed so far.
    pub fn position(&self) -> u64 {
        self.pos
    }

    /// The input's next bytes, as far as the reader has them, without consuming any (what
    /// [`looks_like`] reads before the first frame).
    pub fn peek(&mut self) -> io::Result<&[u8]> {
        self.inner.fill_buf()
    }

    /// Reads the next frame into `buf` (replacing its contents). Returns the byte offset of the
    /// frame's length prefix, or `None` at a clean end of input.
    pub fn next_into(&mut self, buf: &mut Vec<u8>) -> Result<Option<u64>, FrameError> {
        // Fast path: the prefix and the whole frame are already in the reader's buffer (the
        // usual case for logs far smaller than the buffer): one look, one copy, one consume.
        let offset = self.pos;
        let avail = self.inner.fill_buf()?;
        if let Some((len, n)) = short_prefix(avail) {
            if len <= self.max_frame && len <= (avail.len() - n) as u64 {
                let end = n + len as usize;
                buf.clear();
                buf.extend_from_slice(&avail[n..end]);
                self.inner.consume(end);
                self.pos += end as u64;
                return Ok(Some(offset));
            }
        }
        self.next_slow(buf)
    }

    /// Reads the next frame and hands it to `f` with the byte offset of its length prefix:
    /// straight from the reader's buffer when the whole frame is there (no copy), else read into
    /// `buf` first as [`FrameReader::next_into`] does. `None` at a clean end of input.
    pub fn next_with<T>(
        &mut self,
        buf: &mut Vec<u8>,
        f: impl FnOnce(u64, &[u8]) -> T,
    ) -> Result<Option<T>, FrameError> {
        let offset = self.pos;
        let avail = self.inner.fill_buf()?;
        if let Some((len, n)) = short_prefix(avail) {
            if len <= self.max_frame && len <= (avail.len() - n) as u64 {
                let end = n + len as usize;
                let out = f(offset, &avail[n..end]);
                self.inner.consume(end);
                self.pos += end as u64;
                return Ok(Some(out));
            }
        }
        Ok(self.next_slow(buf)?.map(|offset| f(offset, buf)))
    }

    /// [`FrameReader::next_into`] byte by byte: a prefix or a frame that straddles the
    /// reader's buffer, an error, or the end of input.
    #[inline(never)]
    fn next_slow(&mut self, buf: &mut Vec<u8>) -> Result<Option<u64>, FrameError> {
        let offset = self.pos;
        let Some(len) = self.prefix()? else {
            return Ok(None);
        };
        if len > self.max_frame {
            return Err(FrameError::TooLarge {
                offset,
                len,
                max: self.max_frame,
            });
        }
        buf.clear();
        let mut got: u64 = 0;
        while got < len {
            let want = (len - got).min(CHUNK as u64) as usize;
            let avail = self.inner.fill_buf()?;
            if avail.is_empty() {
                return Err(FrameError::Truncated { offset, len, got });
            }
            let n = avail.len().min(want);
            buf.extend_from_slice(&avail[..n]);
            self.inner.consume(n);
            got += n as u64;
            self.pos += n as u64;
        }
        Ok(Some(offset))
    }

    /// Reads a length prefix byte by byte: the declared length, `None` at a clean end of input.
    /// A prefix cut short by the end of input, or over 64 bits, is [`FrameError::BadPrefix`].
    fn prefix(&mut self) -> Result<Option<u64>, FrameError> {
        let offset = self.pos;
        let mut len: u64 = 0;
        let mut shift = 0u32;
        let mut first = true;
        loop {
            let byte = {
                let avail = self.inner.fill_buf()?;
                match avail.first() {
                    Some(b) => *b,
                    None if first => return Ok(None),
                    None => return Err(FrameError::BadPrefix { offset }),
                }
            };
            self.inner.consume(1);
            self.pos += 1;
            first = false;
            if shift >= 64 || (shift == 63 && byte > 1) {
                return Err(FrameError::BadPrefix { offset });
            }
            len |= u64::from(byte & 0x7f) << shift;
            shift += 7;
            if byte < 0x80 {
                return Ok(Some(len));
            }
        }
    }

    /// Steps over the next frame without keeping it (its bytes are consumed from the reader's
    /// buffer as they come, whatever the frame limit): the byte offset of its length prefix,
    /// `None` at a clean end of input; a frame the input ends inside is
    /// [`FrameError::Truncated`].
    pub fn skip(&mut self) -> Result<Option<u64>, FrameError> {
        let offset = self.pos;
        let Some(len) = self.prefix()? else {
            return Ok(None);
        };
        let mut got: u64 = 0;
        while got < len {
            let avail = self.inner.fill_buf()?;
            if avail.is_empty() {
                return Err(FrameError::Truncated { offset, len, got });
            }
            let n = avail
                .len()
                .min(usize::try_from(len - got).unwrap_or(usize::MAX));
            self.inner.consume(n);
            got += n as u64;
            self.pos += n as u64;
        }
        Ok(Some(offset))
    }
}

/// A length prefix of at most three bytes (frames under 2 MiB) at the start of `b`: (length,
/// prefix bytes). `None` for anything else (longer, truncated or invalid prefixes), which the
/// byte-by-byte path handles.
#[inline(always)]
fn short_prefix(b: &[u8]) -> Option<(u64, usize)> {
    let b0 = *b.first()?;
    if b0 < 0x80 {
        return Some((u64::from(b0), 1));
    }
    let b1 = *b.get(1)?;
    let low = u64::from(b0 & 0x7f);
    if b1 < 0x80 {
        return Some((low | u64::from(b1) << 7, 2));
    }
    let b2 = *b.get(2)?;
    (b2 < 0x80).then(|| (low | u64::from(b1 & 0x7f) << 7 | u64::from(b2) << 14, 3))
}

/// What the start of an input is when it is plainly not length-delimited: JSON lines (or a JSON
/// document), other text, or a file format a person may feed by mistake (Parquet, Arrow,
/// compressed). `None` when it may be frames.
///
/// A real stream's first byte is the first log's varint length: a log of 128 bytes to 16 KiB
/// starts with a byte over 0x7f that is not followed by a UTF-8 continuation byte, so its head
/// is never text, and a shorter log's nested lengths under 32 are control characters. Only
/// unusual streams could start like text, so the caller acts on this only once the first frame
/// failed: a stream that decodes is never refused.
pub fn looks_like(head: &[u8]) -> Option<&'static str> {
    const MAGIC: &[(&[u8], &str)] = &[
        (b"PAR1", "a Parquet file"),
        (b"ARROW1", "an Arrow IPC file"),
        (b"\x1f\x8b", "gzip-compressed data"),
        (b"\x28\xb5\x2f\xfd", "zstd-compressed data"),
    ];
    if let Some((_, what)) = MAGIC.iter().find(|(m, _)| head.starts_with(m)) {
        return Some(what);
    }
    // An Arrow IPC stream: the continuation marker, then its first message's length (little
    // endian, under 1 MiB). The marker alone is also a varint's start, of a length too large.
    if let [0xff, 0xff, 0xff, 0xff, _, _, len2, 0, ..] = head {
        if *len2 < 0x10 {
            return Some("an Arrow IPC stream");
        }
    }
    // Judged on at most 512 bytes; a multi-byte character cut at the end still counts as text.
    let window = &head[..head.len().min(512)];
    let text = match std::str::from_utf8(window) {
        Ok(t) => t,
        Err(e) if e.error_len().is_none() => {
            std::str::from_utf8(&window[..e.valid_up_to()]).expect("valid up to here")
        }
        Err(_) => return None,
    };
    let plain = |c: char| !c.is_control() || matches!(c, '\n' | '\r' | '\t');
    if text.is_empty() || !text.chars().all(plain) {
        return None;
    }
    match text.trim_start().as_bytes().first() {
        Some(b'{') => Some("JSON lines"),
        Some(b'[') => Some("JSON"),
        _ => Some("text"),
    }
}

/// Writes one frame.
pub fn write_frame<W: Write>(w: &mut W, msg: &[u8]) -> io::Result<()> {
    let mut prefix = [0u8; 10];
    let mut n = 0;
    let mut v = msg.len() as u64;
    loop {
        let b = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            prefix[n] = b;
            n += 1;
            break;
        }
        prefix[n] = b | 0x80;
        n += 1;
    }
    w.write_all(&prefix[..n])?;
    w.write_all(msg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_plainly_not_frames_is_named() {
        assert_eq!(
            looks_like(b"{\"session_id\":\"s1\",\"x\":1}\n{\"session_id\":\"s2\"}\n"),
            Some("JSON lines")
        );
        assert_eq!(looks_like(b"  [1, 2]"), Some("JSON"));
        assert_eq!(looks_like(b"session_id,row_id\ns1,r1\n"), Some("text"));
        assert_eq!(looks_like(b"PAR1\x15\x04"), Some("a Parquet file"));
        assert_eq!(
            looks_like(b"\x1f\x8b\x08\x00"),
            Some("gzip-compressed data")
        );
        assert_eq!(
            looks_like(b"\xff\xff\xff\xff\xf8\x00\x00\x00\x10"),
            Some("an Arrow IPC stream")
        );
        // A varint declaring a length too large to read is left to the frame reader.
        assert_eq!(
            looks_like(b"\xff\xff\xff\xff\xff\xff\xff\xff\x3f\x01"),
            None
        );
        // Text cut inside a multi-byte character at the end of the window is still text.
        let mut cut = "é".repeat(300).into_bytes();
        cut.truncate(511);
        assert_eq!(looks_like(&cut), Some("text"));
        // Frames: a varint over 0x7f starts the first log of 128 bytes or more.
        let mut framed = Vec::new();
        write_frame(&mut framed, &[0x0a; 300]).unwrap();
        assert_eq!(looks_like(&framed), None);
        assert_eq!(looks_like(b"\x05\x0a\x03abc"), None, "a control character");
        assert_eq!(looks_like(b""), None);
    }

    #[test]
    fn round_trip_and_offsets() {
        let mut out = Vec::new();
        let big = vec![7u8; 300];
        for m in [&b"a"[..], &b""[..], &big[..]] {
            write_frame(&mut out, m).unwrap();
        }
        let mut r = FrameReader::new(&out[..]);
        let mut buf = Vec::new();
        assert_eq!(r.next_into(&mut buf).unwrap(), Some(0));
        assert_eq!(buf, b"a");
        assert_eq!(r.next_into(&mut buf).unwrap(), Some(2));
        assert!(buf.is_empty());
        assert_eq!(r.next_into(&mut buf).unwrap(), Some(3));
        assert_eq!(buf, big);
        assert!(r.next_into(&mut buf).unwrap().is_none());
    }

    #[test]
    fn frames_straddling_the_read_buffer_read_the_same() {
        // Sizes around the 1-, 2- and 3-byte prefix bounds, read through buffers that hold a
        // whole frame (fast path), part of one (byte by byte) or a few bytes (both, mixed).
        let sizes = [0usize, 1, 5, 127, 128, 300, 16_383, 16_384, 20_000, 3];
        let msgs: Vec<Vec<u8>> = sizes
            .iter()
            .enumerate()
            .map(|(i, n)| (0..*n).map(|j| (i * 31 + j) as u8).collect())
            .collect();
        let mut out = Vec::new();
        let mut offsets = Vec::new();
        for m in &msgs {
            offsets.push(out.len() as u64);
            write_frame(&mut out, m).unwrap();
        }
        for cap in [1usize, 2, 3, 7, 200, 1 << 16] {
            let mut r = FrameReader::new(io::BufReader::with_capacity(cap, &out[..]));
            let mut buf = Vec::new();
            for (m, off) in msgs.iter().zip(&offsets) {
                assert_eq!(r.next_into(&mut buf).unwrap(), Some(*off), "capacity {cap}");
                assert_eq!(&buf, m, "capacity {cap}");
            }
            assert!(r.next_into(&mut buf).unwrap().is_none());
            assert_eq!(r.position(), out.len() as u64);
            // The same frames handed over in place (or through `buf` when they straddle).
            let mut r = FrameReader::new(io::BufReader::with_capacity(cap, &out[..]));
            for (m, off) in msgs.iter().zip(&offsets) {
                let got = r.next_with(&mut buf, |o, b| (o, b.to_vec())).unwrap();
                assert_eq!(got, Some((*off, m.clone())), "capacity {cap}");
            }
            assert!(r.next_with(&mut buf, |_, _| ()).unwrap().is_none());
            assert_eq!(r.position(), out.len() as u64);
        }
        // A limit below a frame that is wholly buffered is still enforced.
        let mut r = FrameReader::new(&out[..]).with_max_frame(200);
        let mut buf = Vec::new();
        for _ in 0..5 {
            assert!(r.next_into(&mut buf).unwrap().is_some());
        }
        assert!(matches!(
            r.next_into(&mut buf),
            Err(FrameError::TooLarge { len: 300, .. })
        ));
    }

    #[test]
    fn a_huge_length_is_never_allocated() {
        // Claims 2^62 bytes, has 3; even without a frame limit nothing is reserved ahead.
        let input = [
            0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x40, 1, 2, 3,
        ];
        let mut r = FrameReader::new(&input[..]).with_max_frame(usize::MAX);
        let mut buf = Vec::new();
        match r.next_into(&mut buf) {
            Err(FrameError::Truncated {
                offset: 0, got: 3, ..
            }) => {}
            other => panic!("{other:?}"),
        }
        assert!(buf.capacity() < 1 << 21);
    }

    #[test]
    fn a_frame_over_the_limit_is_refused_before_it_is_read() {
        // Claims 2^40 bytes and 3 MiB follow: refused at the prefix, not after reading them.
        let mut input = vec![0x80, 0x80, 0x80, 0x80, 0x80, 0x20];
        input.resize(input.len() + (3 << 20), 7);
        let mut r = FrameReader::new(&input[..]).with_max_frame(1 << 20);
        let mut buf = Vec::new();
        match r.next_into(&mut buf) {
            Err(FrameError::TooLarge {
                offset: 0,
                len,
                max,
            }) => assert_eq!((len, max), (1 << 40, 1 << 20)),
            other => panic!("{other:?}"),
        }
        assert_eq!(r.position(), 6, "nothing after the prefix was read");
        assert!(buf.capacity() < 1 << 20);
        // A frame of exactly the limit is accepted.
        let mut ok = Vec::new();
        write_frame(&mut ok, &vec![1u8; 1 << 20]).unwrap();
        let mut r = FrameReader::new(&ok[..]).with_max_frame(1 << 20);
        assert_eq!(r.next_into(&mut buf).unwrap(), Some(0));
        assert_eq!(buf.len(), 1 << 20);
    }

    #[test]
    fn bad_prefixes() {
        let mut buf = Vec::new();
        assert!(matches!(
            FrameReader::new(&[0xffu8; 12][..]).next_into(&mut buf),
            Err(FrameError::BadPrefix { .. })
        ));
        assert!(matches!(
            FrameReader::new(&[0x80u8][..]).next_into(&mut buf),
            Err(FrameError::BadPrefix { .. })
        ));
    }
}
