//! A crash is never a clean exit: every panic, on any thread or task of `run` (the pipeline
//! thread, the sink task, the dead-letter writer, the HTTP server, a BigQuery driver), is
//! recorded in [`Health::crash`] (`/healthz` answers 503 naming it from then on) and starts a
//! shutdown; the process then drains what it can and exits [`EXIT_CRASHED`].
//!
//! A panic hook is the one place that sees every panic, whoever catches it afterwards (tokio
//! turns a task's panic into a `JoinError` that nobody might look at), so it is process-global
//! by necessity; it is installed once, by `run`, and replaces the default hook: a panic
//! message may quote a value of the configuration (a secret inside a formatted error), and the
//! default hook prints it raw. This one prints the message scrubbed as log lines are
//! ([`crate::telemetry::scrub`]), then the backtrace when `RUST_BACKTRACE` asks for it, and
//! `/healthz` serves the same scrubbed text.

use crate::server::Health;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// Exit code of a run in which something panicked (Rust's own code for a panicking `main`).
pub(crate) const EXIT_CRASHED: u8 = 101;
/// Exit code of a run that stopped before every row read was acknowledged (an unfinished drain,
/// or an input it could not read to its end).
pub(crate) const EXIT_UNFINISHED: u8 = 1;

/// Installs the hook: every later panic is recorded in `health` and cancels `shutdown`.
pub(crate) fn install(health: Arc<Health>, shutdown: CancellationToken) {
    std::panic::set_hook(Box::new(move |info| {
        let thread = std::thread::current();
        let what = describe(thread.name().unwrap_or("unnamed"), info);
        let what = crate::telemetry::scrub(&what).into_owned();
        print_to_stderr(&what);
        tracing::error!(crash = %what, "panic: stopping, the process will exit non-zero");
        health.crash(what);
        shutdown.cancel();
    }));
}

/// What the default hook prints, from the scrubbed description: the message, then the
/// backtrace (`RUST_BACKTRACE`) or the note on how to get one.
fn print_to_stderr(what: &str) {
    use std::backtrace::{Backtrace, BacktraceStatus};
    use std::io::Write;
    let backtrace = Backtrace::capture();
    let tail = match backtrace.status() {
        BacktraceStatus::Captured => format!("stack backtrace:\n{backtrace}"),
        _ => "note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace\n"
            .to_string(),
    };
    // One write, so that the lines of two panics do not interleave.
    let _ = std::io::stderr()
        .lock()
        .write_all(format!("{what}\n{tail}").as_bytes());
}

/// "thread 'pipeline' panicked at src/x.rs:1:2: message".
fn describe(thread: &str, info: &std::panic::PanicHookInfo<'_>) -> String {
    let payload = info.payload();
    let msg = payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(no message)");
    match info.location() {
        Some(l) => format!("thread '{thread}' panicked at {l}: {msg}"),
        None => format!("thread '{thread}' panicked: {msg}"),
    }
}

/// How a run ended, from what its parts report: the exit code to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Everything read was acknowledged and nothing crashed: exit 0.
    Clean,
    /// Not everything read was acknowledged (drain deadline passed, input unreadable): exit 1.
    Unfinished,
    /// Something panicked: exit 101.
    Crashed,
}

impl Outcome {
    /// `drained`: the pipeline thread finished and reported every row acknowledged;
    /// `crashes`: how many panics were recorded (a panicking pipeline thread counts there too).
    pub(crate) fn of(drained: bool, crashes: usize) -> Self {
        if crashes > 0 {
            Outcome::Crashed
        } else if drained {
            Outcome::Clean
        } else {
            Outcome::Unfinished
        }
    }

    /// The process exit code.
    pub(crate) fn code(self) -> u8 {
        match self {
            Outcome::Clean => 0,
            Outcome::Unfinished => EXIT_UNFINISHED,
            Outcome::Crashed => EXIT_CRASHED,
        }
    }
}

/// Test-only fault injection (debug builds only, so never in a release image): with
/// `OBS_PUBLISHER_FAULT=panic_in_sink_task` the sink task panics on its first batch. The
/// integration tests use it to prove a crashed sink task ends the process non-zero.
pub(crate) fn injected(point: &str) -> bool {
    cfg!(debug_assertions) && std::env::var("OBS_PUBLISHER_FAULT").is_ok_and(|v| v == point)
}

/// Test-only: `OBS_PUBLISHER_FAULT_MESSAGE`, appended to an injected panic's message (debug
/// builds only), so that a test can make a panic quote a secret of the configuration.
pub(crate) fn injected_message() -> String {
    match std::env::var("OBS_PUBLISHER_FAULT_MESSAGE") {
        Ok(m) if cfg!(debug_assertions) => format!(": {m}"),
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_clean_drain_without_crashes_exits_zero() {
        assert_eq!(Outcome::of(true, 0).code(), 0);
        assert_eq!(Outcome::of(false, 0).code(), 1);
        assert_eq!(Outcome::of(true, 1).code(), 101);
        assert_eq!(Outcome::of(false, 2).code(), 101);
    }
}
