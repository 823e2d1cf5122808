//! Capped exponential backoff, shared by the sink retries (with jitter) and the bootstrap
//! polls (without).

use std::time::Duration;

/// Capped exponential backoff.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// The first wait (its cap, with jitter).
    pub initial: Duration,
    /// The largest wait.
    pub max: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            initial: Duration::from_millis(100),
            max: Duration::from_secs(30),
        }
    }
}

impl Backoff {
    /// The wait after failed attempt `attempt` (0-based), for a jitter draw in `0.0..=1.0`
    /// (values outside are clamped): between half and all of `min(max, initial × 2^attempt)`.
    pub fn delay(&self, attempt: u32, jitter: f64) -> Duration {
        let cap = self
            .initial
            .saturating_mul(1u32 << attempt.min(31))
            .min(self.max);
        let half = cap / 2;
        half + (cap - half).mul_f64(jitter.clamp(0.0, 1.0))
    }

    /// The waits without jitter, doubling from `initial` up to `max`.
    pub fn pauses(self) -> impl Iterator<Item = Duration> {
        let max = self.max.max(self.initial);
        std::iter::successors(Some(self.initial), move |d| Some((*d * 2).min(max)))
    }
}
