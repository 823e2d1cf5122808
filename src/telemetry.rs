//! Logging: tracing with JSON lines (default, for log collectors) or human-readable output, to
//! stderr, filtered by `logging.level` (a tracing filter such as `info` or
//! `observation_publisher=debug,info`), overridable by `RUST_LOG`.

use crate::config::LogFormat;
use tracing_subscriber::EnvFilter;

/// Installs the global subscriber once; later calls are ignored.
pub fn init(format: LogFormat, level: &str) {
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(level))
        .unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .try_init(),
        LogFormat::Pretty => builder.compact().try_init(),
    };
}
