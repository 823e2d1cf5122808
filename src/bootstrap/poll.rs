//! Polling with exponential backoff under a deadline (rollouts, older revisions, drains).

use std::time::Duration;
use tokio::time::Instant;

pub use crate::backoff::Backoff;

/// The bootstrap commands' polling pace: from 500 ms up to 10 s.
pub fn polling() -> Backoff {
    Backoff {
        initial: Duration::from_millis(500),
        max: Duration::from_secs(10),
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
