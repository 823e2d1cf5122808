//! Logging: tracing with JSON lines (default, for log collectors) or human-readable output, to
//! stderr, filtered by `logging.level` (a tracing filter such as `info` or
//! `observation_publisher=debug,info`), overridable by `RUST_LOG`.
//!
//! Every line goes through a [`Scrubber`] before it reaches stderr: the configuration's secret
//! values and any URL credentials are replaced by `<redacted>`, whatever printed them (our own
//! events, librdkafka's log lines forwarded through the `log` crate, librdkafka's configuration
//! errors, which quote the offending value).

use crate::config::LogFormat;
use crate::redact::Scrubber;
use std::io::{self, IsTerminal, Write};
use std::sync::OnceLock;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::EnvFilter;

/// The scrubber of the process's log output (set once, by [`init`]).
static SCRUBBER: OnceLock<Scrubber> = OnceLock::new();

/// `text` scrubbed as log lines are: for messages printed to stderr outside the log (a start-up
/// error repeated for the operator).
pub fn scrub(text: &str) -> std::borrow::Cow<'_, str> {
    match SCRUBBER.get() {
        Some(s) => s.scrub(text),
        None => crate::redact::strip_userinfo(text),
    }
}

/// stderr through the scrubber. The fmt layer writes each event with one `write_all` of the
/// whole formatted line, so a secret is never split between two writes.
struct ScrubbedStderr;

impl Write for ScrubbedStderr {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let text = String::from_utf8_lossy(buf);
        io::stderr().lock().write_all(scrub(&text).as_bytes())?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        io::stderr().flush()
    }
}

struct MakeScrubbed;

impl<'a> MakeWriter<'a> for MakeScrubbed {
    type Writer = ScrubbedStderr;

    fn make_writer(&'a self) -> Self::Writer {
        ScrubbedStderr
    }
}

/// Installs the global subscriber once, writing through `scrubber`; later calls are ignored.
pub fn init(format: LogFormat, level: &str, scrubber: Scrubber) {
    let _ = SCRUBBER.set(scrubber);
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(level))
        .unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(MakeScrubbed);
    let _ = match format {
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .try_init(),
        // Colour codes only for a person at a terminal: a file or a log collector would keep
        // them as `\x1b[2m` noise around every field.
        LogFormat::Pretty => builder
            .compact()
            .with_ansi(io::stderr().is_terminal())
            .try_init(),
    };
}
