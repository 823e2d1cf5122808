//! `convert`'s input file read through a memory map, one window at a time.
//!
//! Why: reading the input with `read(2)` makes the kernel copy every byte from the page cache
//! into the reader's buffer. For `convert -f arrow` of a million 1-row logs (658 MB, in the page
//! cache) that copy was 0.05–0.07 s of system time in 0.37 s of CPU; through a map the decoder
//! reads the page cache's own pages, and the process takes 8–9% less CPU (docs/performance.md,
//! "The input through a memory map"). It is the crate's one `unsafe` block.
//!
//! Why windows: a map of the whole file would leave every page read in the process's resident
//! set (clean file pages the kernel can drop, but RSS is what operators watch). A window of
//! [`WINDOW`] bytes is mapped at a time; once fewer than a sixteenth of it (1 MiB) are left, the
//! next one is mapped from the multiple of [`WINDOW_ALIGN`] at or before the first unread byte,
//! so a frame up to 1 MiB is always whole in the window; a larger one is read across windows by
//! the frame reader's general path, as across a read buffer.
//!
//! Only regular files that can be mapped are; `-` (stdin), pipes, devices, files whose size
//! reads 0 (procfs) and files the kernel refuses to map (some FUSE file systems) are read as a
//! stream, from the same open file ([`MappedReader::open`] hands it back).
//!
//! # What a map changes
//! - **A file that shrinks while it is read.** The reader looks the file's size up again at
//!   every window and at its end; a size below what it mapped is an error ("input shrank …"),
//!   and `convert` exits 1 as it did for a truncated frame. Between two look-ups the map serves
//!   what the kernel leaves: the rest of the page holding the new end reads as zeros (each zero
//!   byte an empty frame, reported as a bad log), and a page wholly past the new end kills the
//!   process with `SIGBUS` (status 135 from a shell). Either way the run does not exit 0.
//! - **A read error of the device** (EIO, a network file system's failure) while a page is
//!   brought in is `SIGBUS` too, where `read(2)` returned an error that `convert` reported
//!   ("unrecoverable input: …", exit 1): the process dies without its summary line and its
//!   output without its end (Arrow's end marker, Parquet's footer).
//! - **Bytes rewritten in place** while they are read break what Rust assumes of a `&[u8]` (that
//!   it does not change; the reason `memmap2` marks `map` `unsafe`): a string checked as UTF-8
//!   when it was decoded may not be by the time Arrow checks it again at the batch's end, which
//!   panics (exit 101). `convert` reads files written before it runs, or still being appended
//!   to: appended bytes lie past the mapped length and are mapped once the reader gets there.

use memmap2::{Advice, Mmap, MmapOptions};
use std::fs::File;
use std::io::{self, BufRead, Read};

/// Bytes of the file mapped at a time.
pub(crate) const WINDOW: usize = 16 << 20;

/// Windows start at file offsets that are multiples of this (the size of a huge page), so that
/// the page cache's large folios can be mapped whole: windows at any page offset lost half the
/// gain; aligned ones cost what one map of the whole file does (docs/performance.md, "The
/// input through a memory map").
pub(crate) const WINDOW_ALIGN: usize = 2 << 20;

/// A `BufRead` over a regular file through a window of it mapped into memory.
pub(crate) struct MappedReader {
    file: File,
    /// The window (`None` when it is empty: the end of the file).
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
}

impl MappedReader {
    /// A reader of `file` through windows of [`WINDOW`] bytes; `Err(file)`, the same open file
    /// back, when it is to be read as a stream instead (not a regular file, a size of 0, a map
    /// the kernel refuses): a named pipe must not be opened twice.
    pub(crate) fn open(file: File) -> Result<Self, File> {
        Self::with_window(file, WINDOW, WINDOW_ALIGN)
    }

    /// [`MappedReader::open`] with windows of `window` bytes (at least 2) that start at
    /// multiples of `align` (at most half a window: a window mapped for the next byte then
    /// has at least half of it ahead).
    fn with_window(file: File, window: usize, align: usize) -> Result<Self, File> {
        let size = match file.metadata() {
            Ok(m) if m.is_file() && m.len() > 0 => m.len(),
            _ => return Err(file),
        };
        let window = window.max(2);
        let mut r = MappedReader {
            file,
            map: None,
            start: 0,
            pos: 0,
            size,
            window,
            align: align.clamp(1, window / 2) as u64,
            ahead: (window / 16).max(1),
        };
        match r.map_at(0) {
            Ok(()) => Ok(r),
            Err(_) => Err(r.file),
        }
    }

    /// Maps the window that holds file offset `at` (from the multiple of `align` at or before
    /// it, up to the file's size as last looked up; `at` is within that size) and consumes up
    /// to `at`; unmaps the window before. On an error the reader is as it was.
    fn map_at(&mut self, at: u64) -> io::Result<()> {
        let start = at - at % self.align;
        let left = self.size.saturating_sub(start);
        let len = usize::try_from(left).unwrap_or(usize::MAX).min(self.window);
        let map = if len == 0 {
            None
        } else {
            #[allow(unsafe_code)] // The crate's one exception (Cargo.toml's `[lints]`).
            // SAFETY: a read-only map of `len` bytes the file had when its size was last looked
            // up, living only as long as this reader; the slices handed out borrow the reader,
            // so none outlives its window. What no code here can rule out is another process
            // changing the file meanwhile: a truncation, or a rewrite in place, whose effects the
            // module docs state (zeros, SIGBUS, a panic; never exit 0). (A shared map: a private
            // one measured 1% slower; a file system that refuses shared maps is read as a stream.)
            let map = unsafe { MmapOptions::new().offset(start).len(len).map(&self.file)? };
            // The decoder reads each byte once, front to back: read ahead, drop behind.
            let _ = map.advise(Advice::Sequential);
            Some(map)
        };
        self.map = map;
        self.start = start;
        self.pos = (at - start) as usize;
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
        let end = self.start + len as u64;
        // Near the window's end: map the next one. At the file's end as last seen, look at its
        // size again only once everything is consumed (a file still appended to).
        if rest < self.ahead && (rest == 0 || end < self.size) {
            self.size = self.file.metadata()?.len();
            if self.size < end {
                return Err(io::Error::other(format!(
                    "input shrank to {} bytes while read (a window reached byte {end})",
                    self.size
                )));
            }
            if self.size > end {
                self.map_at(self.start + self.pos as u64)?;
            }
        }
        Ok(&self.window()[self.pos..])
    }

    fn consume(&mut self, n: usize) {
        self.pos = (self.pos + n).min(self.window().len());
    }
}

impl Read for MappedReader {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        crate::readbuf::read_through_buffer(self, out)
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
            .expect("a regular file is mapped")
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Frames of any size read through windows of any size (frames straddling windows,
        /// larger than a window, a window's tail shorter than a length prefix) come out as
        /// from the bytes in memory, with the same offsets.
        #[test]
        fn frames_read_through_windows_are_the_frames_of_the_bytes(
            sizes in proptest::collection::vec(0usize..3000, 1..40),
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
    fn an_empty_file_and_devices_are_handed_back_to_be_read_as_streams() {
        let f = file_with(b"");
        assert!(MappedReader::open(f.reopen().unwrap()).is_err());
        let null = File::open("/dev/null").unwrap();
        assert!(MappedReader::open(null).is_err());
    }

    /// A file cut below what the window maps, in the window's last page (which then reads as
    /// zeros, not SIGBUS): the reader reports it at the window's end instead of ending as if
    /// the input were whole.
    #[test]
    fn a_file_that_shrinks_below_its_window_is_an_error() {
        let mut bytes = Vec::new();
        for i in 0..400u32 {
            write_frame(&mut bytes, &i.to_le_bytes().repeat(10)).unwrap();
        }
        assert!(bytes.len() > 16_000);
        let f = file_with(&bytes);
        let mut r = FrameReader::new(mapped(&f, 8192, 4096));
        let mut buf = Vec::new();
        assert_eq!(r.next_into(&mut buf).unwrap(), Some(0));
        // Into the window's last page: its rest (6,000 → 8,192) reads as zeros afterwards.
        f.as_file().set_len(6000).unwrap();
        let err = loop {
            match r.next_into(&mut buf) {
                Ok(Some(_)) => {}
                Ok(None) => panic!("the input ended as if whole"),
                Err(e) => break e,
            }
        };
        assert!(
            err.to_string().contains("input shrank to 6000 bytes"),
            "{err}"
        );
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
}
