//! The offline commands' progress line on stderr, shown only when stderr is a terminal: logs
//! done (of the total when known), logs per second, and the time left when the total (of logs,
//! or of the input's bytes) is known. `12,000 / 50,000 logs (24%), 53,285 logs/s, ETA 1s`.

use indicatif::{HumanBytes, HumanCount, ProgressBar, ProgressStyle};
use std::io::IsTerminal;
use std::time::{Duration, Instant};

/// What the work's size is known as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Total {
    /// Unknown (a pipe).
    Unknown,
    /// The number of logs (`gen -n`).
    Logs(u64),
    /// The input's length in bytes (a file).
    Bytes(u64),
}

/// The progress line for `logs` logs (and `bytes` bytes of input) done after `elapsed`.
pub fn line(logs: u64, bytes: u64, total: Total, elapsed: Duration) -> String {
    let secs = elapsed.as_secs_f64();
    let rate = if secs > 0.0 { logs as f64 / secs } else { 0.0 };
    let rate_text = format!("{} logs/s", HumanCount(rate.round() as u64));
    // Time left at the rate so far, in the unit the total is known in.
    let eta = |done: u64, of: u64| {
        if done == 0 || secs <= 0.0 {
            return String::new();
        }
        let left = of.saturating_sub(done) as f64 * secs / done as f64;
        format!(", ETA {}", short(Duration::from_secs_f64(left.ceil())))
    };
    let pct = |done: u64, of: u64| (done.min(of) * 100).checked_div(of).unwrap_or(100);
    match total {
        Total::Logs(of) => format!(
            "{} / {} logs ({}%), {rate_text}{}",
            HumanCount(logs),
            HumanCount(of),
            pct(logs, of),
            eta(logs, of)
        ),
        Total::Bytes(of) => format!(
            "{} logs, {rate_text}, {}% of {}{}",
            HumanCount(logs),
            pct(bytes, of),
            HumanBytes(of),
            eta(bytes, of)
        ),
        Total::Unknown => format!("{} logs, {rate_text}", HumanCount(logs)),
    }
}

/// A duration as a person reads a countdown: `45s`, `2m 5s`, `1h 3m`.
fn short(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m {}s", s / 60, s % 60),
        _ => format!("{}h {}m", s / 3600, (s % 3600) / 60),
    }
}

/// The progress line of one command run.
pub struct Progress {
    bar: ProgressBar,
    started: Instant,
    total: Total,
}

impl Progress {
    /// A line prefixed by `command`, drawn on stderr when it is a terminal (hidden otherwise, so
    /// a file or a pipe never holds it).
    pub fn new(command: &str, total: Total) -> Self {
        let bar = if std::io::stderr().is_terminal() {
            let bar = ProgressBar::new_spinner().with_style(
                ProgressStyle::with_template("{spinner} {prefix}: {msg}").expect("template"),
            );
            bar.set_prefix(command.to_string());
            bar.enable_steady_tick(Duration::from_millis(200));
            bar
        } else {
            ProgressBar::hidden()
        };
        Progress {
            bar,
            started: Instant::now(),
            total,
        }
    }

    /// Records `logs` logs and `bytes` bytes of input done.
    pub fn update(&self, logs: u64, bytes: u64) {
        if !self.bar.is_hidden() {
            self.bar
                .set_message(line(logs, bytes, self.total, self.started.elapsed()));
        }
    }

    /// Runs `f` (which prints to stderr) with the line out of its way.
    pub fn suspend<R>(&self, f: impl FnOnce() -> R) -> R {
        self.bar.suspend(f)
    }

    /// Removes the line.
    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_is_in_logs_with_the_total_and_the_time_left() {
        let s = Duration::from_secs;
        assert_eq!(
            line(12_000, 0, Total::Logs(50_000), s(1) / 4),
            "12,000 / 50,000 logs (24%), 48,000 logs/s, ETA 1s"
        );
        assert_eq!(
            line(10_000, 250 << 10, Total::Bytes(1000 << 10), s(10)),
            "10,000 logs, 1,000 logs/s, 25% of 1000.00 KiB, ETA 30s"
        );
        assert_eq!(
            line(1_000, 0, Total::Logs(1_000_000), s(2)),
            "1,000 / 1,000,000 logs (0%), 500 logs/s, ETA 33m 18s"
        );
        assert_eq!(
            line(5, 100, Total::Unknown, s(1)),
            "5 logs, 5 logs/s",
            "no total, no ETA"
        );
        assert_eq!(
            line(0, 0, Total::Logs(10), Duration::ZERO),
            "0 / 10 logs (0%), 0 logs/s",
            "nothing done yet: no ETA"
        );
        assert_eq!(short(s(3 * 3600 + 120)), "3h 2m");
    }
}
