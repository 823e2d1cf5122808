//! The progress line: every `logging.progress_interval`, one log line saying what `run` did
//! since the last one (logs consumed and acknowledged by every sink, with their rates, dead
//! letters, commits) and where it stands (the consumer lag), so a person reading the log sees
//! a publisher at work, or stuck, without a dashboard.
//!
//! The counts are kept next to the metrics they mirror ([`super::events`]), in process-wide
//! atomics: the line is made from two snapshots ([`line`], pure).

use indicatif::HumanCount;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// What the progress line counts, since start.
pub(crate) struct Counters {
    consumed: AtomicU64,
    acknowledged: AtomicU64,
    dead_letters: AtomicU64,
    commits: AtomicU64,
    /// The consumer lag summed over the assigned partitions at the last statistics; -1 before.
    lag: AtomicI64,
}

/// The process's counters.
pub(crate) static COUNTERS: Counters = Counters {
    consumed: AtomicU64::new(0),
    acknowledged: AtomicU64::new(0),
    dead_letters: AtomicU64::new(0),
    commits: AtomicU64::new(0),
    lag: AtomicI64::new(-1),
};

impl Counters {
    pub(crate) fn consumed(&self, n: u64) {
        self.consumed.fetch_add(n, Ordering::Relaxed);
    }

    pub(crate) fn acknowledged(&self, n: u64) {
        self.acknowledged.fetch_add(n, Ordering::Relaxed);
    }

    pub(crate) fn dead_lettered(&self) {
        self.dead_letters.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn committed(&self) {
        self.commits.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn lag(&self, total: i64) {
        self.lag.store(total, Ordering::Relaxed);
    }

    fn snapshot(&self) -> Snapshot {
        let lag = self.lag.load(Ordering::Relaxed);
        Snapshot {
            consumed: self.consumed.load(Ordering::Relaxed),
            acknowledged: self.acknowledged.load(Ordering::Relaxed),
            dead_letters: self.dead_letters.load(Ordering::Relaxed),
            commits: self.commits.load(Ordering::Relaxed),
            lag: (lag >= 0).then_some(lag),
        }
    }
}

/// The counters at one instant.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Snapshot {
    pub(crate) consumed: u64,
    pub(crate) acknowledged: u64,
    pub(crate) dead_letters: u64,
    pub(crate) commits: u64,
    pub(crate) lag: Option<i64>,
}

/// The progress line from `before` to `after`, `elapsed` apart (pure).
pub(crate) fn line(before: &Snapshot, after: &Snapshot, elapsed: Duration) -> String {
    let secs = elapsed.as_secs_f64().max(1e-3);
    let delta = |a: u64, b: u64| a.saturating_sub(b);
    let rate = |n: u64| HumanCount((n as f64 / secs).round() as u64);
    let consumed = delta(after.consumed, before.consumed);
    let acknowledged = delta(after.acknowledged, before.acknowledged);
    let lag = match after.lag {
        Some(l) => format!("lag {} messages", HumanCount(l.max(0) as u64)),
        None => "lag not known yet".into(),
    };
    format!(
        "progress in the last {}: {} logs consumed ({}/s), {} acknowledged by every sink ({}/s), \
         {} dead-lettered, {} commits; {lag}; since start: {} consumed, {} acknowledged, {} \
         dead-lettered",
        humantime::format_duration(Duration::from_secs(elapsed.as_secs())),
        HumanCount(consumed),
        rate(consumed),
        HumanCount(acknowledged),
        rate(acknowledged),
        HumanCount(delta(after.dead_letters, before.dead_letters)),
        HumanCount(delta(after.commits, before.commits)),
        HumanCount(after.consumed),
        HumanCount(after.acknowledged),
        HumanCount(after.dead_letters),
    )
}

/// Logs the progress line every `every` until `stop` (never when `every` is zero).
pub(crate) async fn report(every: Duration, stop: CancellationToken) {
    if every.is_zero() {
        return;
    }
    let mut before = COUNTERS.snapshot();
    let mut at = tokio::time::Instant::now();
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(every) => {}
        }
        let (after, now) = (COUNTERS.snapshot(), tokio::time::Instant::now());
        let elapsed = now.duration_since(at);
        tracing::info!(
            consumed = after.consumed - before.consumed,
            acknowledged = after.acknowledged - before.acknowledged,
            dead_letters = after.dead_letters - before.dead_letters,
            lag = after.lag,
            "{}",
            line(&before, &after, elapsed)
        );
        (before, at) = (after, now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_gives_counts_rates_lag_and_totals() {
        let before = Snapshot {
            consumed: 1_000,
            acknowledged: 900,
            dead_letters: 1,
            commits: 3,
            lag: None,
        };
        let after = Snapshot {
            consumed: 3_197_100 + 1_000,
            acknowledged: 3_196_900,
            dead_letters: 4,
            commits: 15,
            lag: Some(12_000),
        };
        let l = line(&before, &after, Duration::from_secs(60));
        assert_eq!(
            l,
            "progress in the last 1m: 3,197,100 logs consumed (53,285/s), 3,196,000 acknowledged \
             by every sink (53,267/s), 3 dead-lettered, 12 commits; lag 12,000 messages; since \
             start: 3,198,100 consumed, 3,196,900 acknowledged, 4 dead-lettered"
        );
        let idle = line(&after, &after, Duration::from_secs(60));
        assert!(
            idle.contains(": 0 logs consumed (0/s), 0 acknowledged"),
            "{idle}"
        );
        assert!(line(&before, &before, Duration::from_secs(60)).contains("lag not known yet"));
    }
}
