//! `convert`'s input file read through a memory map, one window at a time.
//!
//! Why: reading the input with `read(2)` makes the kernel copy every byte from the page cache
//! into the reader's buffer. For `convert -f arrow` of a million 1-row logs (658 MB, in the page
//! cache) that copy was 0.06–0.07 s of system time in 0.37 s of CPU; through a map the decoder
//! reads the page cache's own pages, and the process takes 0.33 s (docs/performance.md,
//! "Ninth pass"). It is the crate's one `unsafe` block.
//!
//! Why windows: a map of the whole file would leave every page read in the process's resident
//! set (clean file pages the kernel can drop, but RSS is what operators watch). A window of
//! [`WINDOW`] bytes is mapped at a time, and the next one is mapped from the first unread byte
//! once fewer than a sixteenth of it are left, so a frame that fits in that sixteenth (1 MiB) is
//! always whole in the window; a larger one is read across windows by the frame reader's
//! general path, as across a read buffer.
//!
//! Only regular files are mapped; `-` (stdin), pipes and devices are read
//! ([`MappedReader::open`] says which).
//!
//! # The caveat of every memory-mapped reader
//! The bytes behind a map change if another process rewrites the file in place while it is
//! read; Rust's rules assume the bytes behind a `&[u8]` do not (what `memmap2` marks its `map`
//! `unsafe` for). `convert` reads files written before it runs, or still being appended to:
//! appended bytes lie past the mapped length, and are mapped once the reader gets there (the
//! file's size is looked up again at each window and at the end). A file truncated while a
//! window of it is mapped raises `SIGBUS` when the reader touches a page past the new end: the
//! process dies by that signal (status 135 from a shell), never with exit 0. `read(2)` would
//! have ended the input early there instead.

use memmap2::{Advice, Mmap, MmapOptions};
use std::fs::File;
use std::io::{self, BufRead, Read};

/// Bytes of the file mapped at a time.
pub const WINDOW: usize = 16 << 20;

/// Windows start at file offsets that are multiples of this (the size of a huge page), so that
/// the page cache's large folios can be mapped whole: windows at any page offset cost 0.36 s
/// per million logs, aligned ones 0.33 s (docs/performance.md, "Ninth pass").
pub const WINDOW_ALIGN: usize = 2 << 20;

/// A `BufRead` over a regular file through a window of it mapped into memory.
pub struct MappedReader {
    file: File,
    /// The window (`None` when it is empty: a file of 0 bytes, or the end).
    map: Option<Mmap>,
    /// The file offset of the window's first byte.
    start: u64,
    /// Bytes of the window consumed.
    pos: usize,
    /// The file's size when it was last looked up.
    size: u64,
    /// Bytes mapped at a time.
    window: usize,
    /// Windows start at multiples of this.
    align: u64,
    /// The next window is mapped once fewer bytes than this are left in this one.
    ahead: usize,
    /// Whether the window reaches the file's end as last looked up.
    at_end: bool,
}

impl MappedReader {
    /// A reader of `file` through windows of [`WINDOW`] bytes; `None` when `file` is not a
    /// regular file (it is then read as a stream).
    pub fn open(file: File) -> io::Result<Option<Self>> {
        Self::with_window(file, WINDOW, WINDOW_ALIGN)
    }

    /// [`MappedReader::open`] with windows of `window` bytes (at least 2) that start at
    /// multiples of `align` (at most half a window: a window mapped for the next byte then
    /// has at least half of it ahead).
    fn with_window(file: File, window: usize, align: usize) -> io::Result<Option<Self>> {
        let meta = file.metadata()?;
        if !meta.is_file() {
            return Ok(None);
        }
        let window = window.max(2);
        let align = align.clamp(1, window / 2) as u64;
        let mut r = MappedReader {
            file,
            map: None,
            start: 0,
            pos: 0,
            size: meta.len(),
            window,
            align,
            ahead: (window / 16).max(1),
            at_end: false,
        };
        r.map_at(0)?;
        Ok(Some(r))
    }

    /// Maps the window that holds file offset `at` (from the multiple of `align` at or before
    /// it, up to the file's size as last looked up) and consumes up to `at`; unmaps the window
    /// before.
    fn map_at(&mut self, at: u64) -> io::Result<()> {
        self.map = None;
        let start = at - at % self.align;
        self.start = start;
        self.pos = (at - start) as usize;
        let left = self.size.saturating_sub(start);
        let len = usize::try_from(left).unwrap_or(usize::MAX).min(self.window);
        self.at_end = len as u64 == left;
        // A file cut below `at` since its size was looked up: nothing is left to consume.
        self.pos = self.pos.min(len);
        if len == 0 {
            return Ok(());
        }
        #[allow(unsafe_code)] // The crate's one exception (Cargo.toml's `[lints]`).
        // SAFETY: the map is read-only and private, over `len` bytes the file had when its size
        // was last looked up, and lives only as long as this reader. What it cannot rule out is
        // another process changing the file meanwhile: a truncation kills this process with
        // SIGBUS when a page past the new end is read (an exit by signal, never 0); bytes
        // rewritten in place would be seen changed. The module docs state both; `convert`'s
        // inputs are files written before it runs or appended to, which neither touches.
        let map = unsafe { MmapOptions::new().offset(start).len(len).map(&self.file)? };
        // The decoder reads each byte once, front to back: read ahead, drop behind.
        let _ = map.advise(Advice::Sequential);
        self.map = Some(map);
        Ok(())
    }

    fn window(&self) -> &[u8] {
        self.map.as_deref().unwrap_or(&[])
    }
}

impl BufRead for MappedReader {
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        let len = self.window().len();
        let rest = len - self.pos;
        // Near the window's end: map the next one from here. At the file's end as last seen,
        // look at its size again only once everything is consumed (a file still appended to).
        if rest < self.ahead && (rest == 0 || !self.at_end) {
            self.size = self.file.metadata()?.len();
            let end = self.start + len as u64;
            if self.size > end {
                self.map_at(self.start + self.pos as u64)?;
            } else {
                self.at_end = true;
            }
        }
        Ok(&self.window()[self.pos..])
    }

    fn consume(&mut self, n: usize) {
        self.pos = (self.pos + n).min(self.window().len());
    }
}

impl Read for MappedReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let avail = self.fill_buf()?;
        let n = avail.len().min(buf.len());
        buf[..n].copy_from_slice(&avail[..n]);
        self.consume(n);
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framing::{write_frame, FrameReader};
    use proptest::prelude::*;
    use std::io::Write;

    fn file_with(bytes: &[u8]) -> tempfile::NamedTempFile {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(bytes).unwrap();
        f.flush().unwrap();
        f
    }

    fn frames(r: impl BufRead) -> Vec<(u64, Vec<u8>)> {
        let mut reader = FrameReader::new(r);
        let mut buf = Vec::new();
        let mut out = Vec::new();
        while let Some(o) = reader.next_with(&mut buf, |o, f| (o, f.to_vec())).unwrap() {
            out.push(o);
        }
        out
    }

    fn mapped(f: &tempfile::NamedTempFile, window: usize, align: usize) -> MappedReader {
        MappedReader::with_window(f.reopen().unwrap(), window, align)
            .unwrap()
            .expect("a regular file is mapped")
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Frames of any size read through windows of any size (frames straddling windows,
        /// larger than a window, a window's tail shorter than a length prefix) come out as
        /// from the bytes in memory, with the same offsets.
        #[test]
        fn frames_read_through_windows_are_the_frames_of_the_bytes(
            sizes in proptest::collection::vec(0usize..3000, 0..40),
            window in 2usize..10_000,
            align in prop_oneof![Just(1usize), Just(4096), 1usize..5000],
        ) {
            let mut bytes = Vec::new();
            for (i, n) in sizes.iter().enumerate() {
                write_frame(&mut bytes, &vec![i as u8; *n]).unwrap();
            }
            let f = file_with(&bytes);
            prop_assert_eq!(frames(mapped(&f, window, align)), frames(&bytes[..]));
        }
    }

    #[test]
    fn read_returns_the_file_whole_across_windows() {
        let bytes: Vec<u8> = (0..100_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let f = file_with(&bytes);
        let mut got = Vec::new();
        mapped(&f, 4096 + 17, 1000).read_to_end(&mut got).unwrap();
        assert_eq!(got, bytes);
    }

    #[test]
    fn an_empty_file_is_at_its_end() {
        let f = file_with(b"");
        assert!(mapped(&f, WINDOW, WINDOW_ALIGN)
            .fill_buf()
            .unwrap()
            .is_empty());
    }

    #[test]
    fn bytes_appended_after_the_end_was_reached_are_read() {
        let mut f = file_with(b"");
        let mut bytes = Vec::new();
        write_frame(&mut bytes, b"first").unwrap();
        f.write_all(&bytes).unwrap();
        f.flush().unwrap();
        let mut r = FrameReader::new(mapped(&f, 4096, 1024));
        let mut buf = Vec::new();
        assert_eq!(r.next_into(&mut buf).unwrap(), Some(0));
        assert_eq!(buf, b"first");
        assert_eq!(r.next_into(&mut buf).unwrap(), None);
        let mut more = Vec::new();
        write_frame(&mut more, &vec![9u8; 10_000]).unwrap();
        f.write_all(&more).unwrap();
        f.flush().unwrap();
        assert_eq!(r.next_into(&mut buf).unwrap(), Some(6));
        assert_eq!(buf, vec![9u8; 10_000]);
        assert_eq!(r.next_into(&mut buf).unwrap(), None);
    }

    #[test]
    fn devices_and_pipes_are_not_mapped() {
        let null = File::open("/dev/null").unwrap();
        assert!(MappedReader::open(null).unwrap().is_none());
    }
}
