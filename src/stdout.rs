//! Standard output as standard tools treat it: when the reader goes away early
//! (`convert … | head`), the command stops writing and ends quietly with exit 0; any other write
//! error (a full disk, a closed descriptor) is a failure, exit 1.
//!
//! Rust ignores `SIGPIPE`, so a write into a closed pipe returns `BrokenPipe` instead of killing
//! the process, and `println!` would panic on it (exit 101). Commands print through [`print`] or
//! write through a [`Watched`] writer, then ask [`Outcome`] what the error meant.

use std::io::{self, Write};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// True when `e` says the reading end of the pipe is closed.
pub fn is_closed_pipe(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::BrokenPipe
}

/// What a failed write to the command's output means for its exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Everything was written.
    Written,
    /// The reader went away: stop quietly, exit 0.
    ReaderGone,
    /// A real write error: report it, exit 1.
    Failed,
}

impl Outcome {
    /// Classifies the result of writing the output.
    pub fn of(result: &io::Result<()>) -> Self {
        match result {
            Ok(()) => Outcome::Written,
            Err(e) if is_closed_pipe(e) => Outcome::ReaderGone,
            Err(_) => Outcome::Failed,
        }
    }
}

/// Writes `text` to standard output and flushes it. Returns the exit code: 0 when written or
/// when the reader has gone; 1 (after a message naming `command` on stderr) on any other error.
pub fn print(command: &str, text: &str) -> ExitCode {
    let mut out = io::stdout().lock();
    let result = out.write_all(text.as_bytes()).and_then(|()| out.flush());
    exit_code(command, &result)
}

/// The exit code for the result of writing a command's output (see [`print`]).
pub fn exit_code(command: &str, result: &io::Result<()>) -> ExitCode {
    match (Outcome::of(result), result) {
        (Outcome::Failed, Err(e)) => {
            eprintln!("{command}: write error: {e}");
            ExitCode::FAILURE
        }
        _ => ExitCode::SUCCESS,
    }
}

/// A writer that remembers whether its reader closed the pipe, even when the error reaches the
/// caller wrapped in another library's error type (Arrow, Parquet).
pub struct Watched<W> {
    inner: W,
    gone: Arc<AtomicBool>,
}

impl<W: Write> Watched<W> {
    /// Wraps `inner`; the returned flag turns true once a write or flush met a closed pipe.
    pub fn new(inner: W) -> (Self, Arc<AtomicBool>) {
        let gone = Arc::new(AtomicBool::new(false));
        (
            Watched {
                inner,
                gone: Arc::clone(&gone),
            },
            gone,
        )
    }

    fn note<T>(&self, r: io::Result<T>) -> io::Result<T> {
        if let Err(e) = &r {
            if is_closed_pipe(e) {
                self.gone.store(true, Ordering::Relaxed);
            }
        }
        r
    }
}

impl<W: Write> Write for Watched<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let r = self.inner.write(buf);
        self.note(r)
    }

    fn flush(&mut self) -> io::Result<()> {
        let r = self.inner.flush();
        self.note(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A writer failing every call with `kind`.
    struct Failing(io::ErrorKind);
    impl Write for Failing {
        fn write(&mut self, _: &[u8]) -> io::Result<usize> {
            Err(io::Error::from(self.0))
        }
        fn flush(&mut self) -> io::Result<()> {
            Err(io::Error::from(self.0))
        }
    }

    #[test]
    fn closed_pipe_is_a_quiet_end_and_other_errors_fail() {
        assert_eq!(Outcome::of(&Ok(())), Outcome::Written);
        let pipe = Err(io::Error::from(io::ErrorKind::BrokenPipe));
        assert_eq!(Outcome::of(&pipe), Outcome::ReaderGone);
        let full = Err(io::Error::from(io::ErrorKind::StorageFull));
        assert_eq!(Outcome::of(&full), Outcome::Failed);
        assert_eq!(exit_code("t", &pipe), ExitCode::SUCCESS);
        assert_eq!(exit_code("t", &full), ExitCode::FAILURE);
    }

    #[test]
    fn watched_remembers_a_closed_pipe_only() {
        let (mut w, gone) = Watched::new(Failing(io::ErrorKind::StorageFull));
        assert!(w.write_all(b"x").is_err());
        assert!(!gone.load(Ordering::Relaxed));
        let (mut w, gone) = Watched::new(Failing(io::ErrorKind::BrokenPipe));
        assert!(w.flush().is_err());
        assert!(gone.load(Ordering::Relaxed));
    }
}
