//! Polling with exponential backoff under a deadline (rollouts, older revisions, drains).

use std::time::Duration;
use tokio::time::Instant;

/// Exponential backoff between polls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// First pause.
    pub initial: Duration,
    /// Longest pause.
    pub max: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            initial: Duration::from_millis(500),
            max: Duration::from_secs(10),
        }
    }
}

impl Backoff {
    /// The pauses, doubling from `initial` up to `max`.
    pub(crate) fn pauses(self) -> impl Iterator<Item = Duration> {
        let max = self.max.max(self.initial);
        std::iter::successors(Some(self.initial), move |d| Some((*d * 2).min(max)))
    }
}

/// Sleeps for `pause`, but never past `deadline`. Returns false when the deadline has passed
/// (the caller then gives up).
pub(crate) async fn pause_until(deadline: Instant, pause: Duration) -> bool {
    let now = Instant::now();
    if now >= deadline {
        return false;
    }
    tokio::time::sleep_until((now + pause).min(deadline)).await;
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pauses_double_up_to_the_max() {
        let b = Backoff {
            initial: Duration::from_millis(100),
            max: Duration::from_millis(350),
        };
        let p: Vec<_> = b.pauses().take(4).map(|d| d.as_millis()).collect();
        assert_eq!(p, vec![100, 200, 350, 350]);
    }
}
