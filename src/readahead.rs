//! A `BufRead` whose buffers are filled by a thread of its own, for `run --replay`.
//!
//! Why: on the Kafka path librdkafka's broker thread does the socket reads and their copies,
//! and the pipeline thread only decodes. A replay read its file on the pipeline thread, whose
//! CPU is what bounds a replay's rate on two cores; the `read(2)` copies
//! were about a tenth of it. Here a reader thread fills a fixed set of cache-line-aligned
//! buffers ([`crate::readbuf`] says why aligned) and hands them over whole; the consumer hands
//! each one back when it has consumed it. Memory is the buffers, allocated up front: nothing
//! grows with the file.

use crate::readbuf::AlignedBuf;
use std::io::{self, BufRead, Read};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};

/// One buffer and how much of it is filled.
struct Buffer {
    buf: AlignedBuf,
    len: usize,
}

impl Buffer {
    fn new(cap: usize) -> Self {
        Buffer {
            buf: AlignedBuf::new(cap),
            len: 0,
        }
    }

    fn filled(&self) -> &[u8] {
        &self.buf.get()[..self.len]
    }

    /// One read from `r` into the buffer (as `BufReader` does: a pipe hands over what it has
    /// at once, not when a whole buffer has arrived). `Ok(0)` at the end of the input.
    fn fill(&mut self, r: &mut impl Read) -> io::Result<usize> {
        self.len = 0;
        loop {
            match r.read(self.buf.get_mut()) {
                Ok(n) => {
                    self.len = n;
                    return Ok(n);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }
}

/// What the reader thread sends: a filled buffer (empty at the end of the input), or the error
/// that stopped it.
type Filled = Result<Buffer, io::Error>;

/// A buffered reader of a source read ahead by its own thread, `buffers` buffers of `cap`
/// bytes each (both at least 1; at most `buffers × cap` bytes are held). Dropping it stops the
/// thread at its next handover.
pub struct ReadAhead {
    full: Receiver<Filled>,
    empty: SyncSender<Buffer>,
    /// The buffer being consumed; an empty one is the end of the input.
    current: Option<Buffer>,
    pos: usize,
    /// The source failed (the error was returned once; later calls say so again).
    failed: bool,
}

impl ReadAhead {
    /// Starts the reader thread on `inner`.
    pub fn new<R: Read + Send + 'static>(inner: R, cap: usize, buffers: usize) -> io::Result<Self> {
        let (cap, buffers) = (cap.max(1), buffers.max(1));
        let (full_tx, full) = sync_channel::<Filled>(buffers);
        let (empty, empty_rx) = sync_channel::<Buffer>(buffers);
        for _ in 0..buffers {
            // Cannot fail: the channel has room for every buffer and its receiver is alive.
            let _ = empty.send(Buffer::new(cap));
        }
        std::thread::Builder::new()
            .name("replay-read".into())
            .spawn(move || fill_loop(inner, &empty_rx, &full_tx))?;
        Ok(ReadAhead {
            full,
            empty,
            current: None,
            pos: 0,
            failed: false,
        })
    }
}

/// The reader thread: fills each free buffer in turn and sends it; stops after the end of the
/// input, an error, or when the consumer is gone.
fn fill_loop(mut inner: impl Read, empty: &Receiver<Buffer>, full: &SyncSender<Filled>) {
    while let Ok(mut b) = empty.recv() {
        match b.fill(&mut inner) {
            // The end: an empty buffer says so.
            Ok(0) => {
                let _ = full.send(Ok(b));
                return;
            }
            Ok(_) => {
                if full.send(Ok(b)).is_err() {
                    return;
                }
            }
            Err(e) => {
                let _ = full.send(Err(e));
                return;
            }
        }
    }
}

impl Read for ReadAhead {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        crate::readbuf::read_through_buffer(self, out)
    }
}

impl BufRead for ReadAhead {
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        if self.failed {
            return Err(io::Error::other("the replay input failed earlier"));
        }
        // Past the end stays at the end: the empty buffer that marks it is never replaced.
        let used_up = self
            .current
            .as_ref()
            .is_none_or(|b| b.len > 0 && self.pos == b.len);
        if used_up {
            if let Some(b) = self.current.take() {
                // The thread may have stopped already (end of input): then the buffer is freed.
                let _ = self.empty.send(b);
            }
            self.pos = 0;
            match self.full.recv() {
                Ok(Ok(b)) => self.current = Some(b),
                Ok(Err(e)) => {
                    self.failed = true;
                    return Err(e);
                }
                Err(_) => {
                    self.failed = true;
                    return Err(io::Error::other("the replay reader thread stopped"));
                }
            }
        }
        Ok(self
            .current
            .as_ref()
            .map_or(&[][..], |b| &b.filled()[self.pos..]))
    }

    fn consume(&mut self, amt: usize) {
        let len = self.current.as_ref().map_or(0, |b| b.len);
        self.pos = (self.pos + amt).min(len);
    }
}

#[cfg(test)]
mod tests;
