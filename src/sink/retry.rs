//! Retrying sink writes: a pure backoff schedule and the async loop around [`Sink::write`], for
//! callers that write one batch at a time (the pipeline's sink task pipelines submissions and
//! retries per sink itself, with the same schedule: `pipeline/sinks.rs`).
//!
//! Input: a sink, a batch, a [`Backoff`] and a cancellation token. Output: `Ok(())` once the sink
//! acknowledged the batch, [`RetryError::NeedsFix`] on the first non-retryable error, or
//! [`RetryError::Cancelled`] when the runtime gives up (drain deadline, shutdown). Retryable
//! errors are retried for ever: the process never exits on a transient error, and since nothing
//! is acknowledged meanwhile, no offset is committed past the failing batch.
//!
//! The schedule uses "equal jitter": attempt `n` waits between half and all of
//! `min(max, initial × 2ⁿ)`, so replicas that failed together do not retry in lockstep, yet the
//! wait still grows.

use super::{Sink, SinkError, WriteReport};
use crate::batch::Batch;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

pub use crate::backoff::Backoff;

/// Why [`write_with_retry`] stopped without an acknowledgement.
#[derive(Debug)]
pub enum RetryError {
    /// An error that retrying at once cannot fix (a permission, a schema, a refused batch): the
    /// sink needs its cause fixed first. The runtime keeps the batch unacknowledged and tries
    /// again slowly; it never drops it.
    NeedsFix(SinkError),
    /// Cancelled while waiting to retry; carries the last error, if any attempt was made.
    Cancelled(Option<SinkError>),
}

impl fmt::Display for RetryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RetryError::NeedsFix(e) => write!(f, "write failed until its cause is fixed: {e}"),
            RetryError::Cancelled(Some(e)) => write!(f, "cancelled while retrying after: {e}"),
            RetryError::Cancelled(None) => f.write_str("cancelled before the first attempt"),
        }
    }
}

impl std::error::Error for RetryError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            RetryError::NeedsFix(e) | RetryError::Cancelled(Some(e)) => Some(e),
            RetryError::Cancelled(None) => None,
        }
    }
}

/// Writes `batch` to `sink` until it is acknowledged, retrying retryable errors after
/// [`Backoff::delay`] (or after the error's [`SinkError::retry_after`], when the destination
/// said how long to wait). `on_retry(error, attempt, wait)` is called before each wait (log it,
/// count it). Cancellation is checked before each attempt and during each wait; an attempt in
/// progress is not interrupted, so a sink never sees a write dropped half-way.
pub async fn write_with_retry(
    sink: &mut dyn Sink,
    batch: &Arc<Batch>,
    backoff: Backoff,
    cancel: &CancellationToken,
    mut on_retry: impl FnMut(&SinkError, u32, Duration),
) -> Result<WriteReport, RetryError> {
    let mut last = None;
    let mut attempt: u32 = 0;
    loop {
        if cancel.is_cancelled() {
            return Err(RetryError::Cancelled(last));
        }
        match sink.write(Arc::clone(batch)).await {
            Ok(report) => return Ok(report),
            Err(e) if !e.is_retryable() => return Err(RetryError::NeedsFix(e)),
            Err(e) => {
                // The destination's own Retry-After wins over the backoff schedule.
                let wait = e
                    .retry_after()
                    .unwrap_or_else(|| backoff.delay(attempt, fastrand::f64()));
                on_retry(&e, attempt, wait);
                last = Some(e);
                attempt = attempt.saturating_add(1);
                tokio::select! {
                    () = cancel.cancelled() => return Err(RetryError::Cancelled(last)),
                    () = tokio::time::sleep(wait) => {}
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{SinkErrorKind, SubmitFuture};
    use super::*;
    use crate::batch::testing::{layout, log};
    use crate::batch::Batcher;
    use crate::config::Batching;
    use std::time::Instant;

    #[test]
    fn schedule_doubles_within_jitter_and_is_capped() {
        let b = Backoff {
            initial: Duration::from_millis(100),
            max: Duration::from_secs(5),
        };
        assert_eq!(b.delay(0, 0.0), Duration::from_millis(50));
        assert_eq!(b.delay(0, 1.0), Duration::from_millis(100));
        assert_eq!(b.delay(1, 0.0), Duration::from_millis(100));
        assert_eq!(b.delay(1, 1.0), Duration::from_millis(200));
        assert_eq!(b.delay(3, 0.5), Duration::from_millis(600));
        // 100ms × 2^6 = 6.4s > 5s: capped.
        assert_eq!(b.delay(6, 1.0), Duration::from_secs(5));
        assert_eq!(b.delay(6, 0.0), Duration::from_millis(2500));
        // No overflow for absurd attempt counts; jitter outside 0..=1 is clamped.
        assert_eq!(b.delay(u32::MAX, 7.0), Duration::from_secs(5));
        assert_eq!(b.delay(u32::MAX, -1.0), Duration::from_millis(2500));
    }

    #[test]
    fn schedule_is_monotonic_in_its_bounds() {
        let b = Backoff::default();
        let mut prev_hi = Duration::ZERO;
        for attempt in 0..40 {
            let (lo, hi) = (b.delay(attempt, 0.0), b.delay(attempt, 1.0));
            assert!(lo <= hi && hi <= b.max);
            assert!(hi >= prev_hi);
            prev_hi = hi;
        }
    }

    /// Fails with the scripted errors, then acknowledges.
    struct Scripted {
        errors: Vec<SinkError>,
        calls: usize,
    }

    impl Sink for Scripted {
        fn name(&self) -> &'static str {
            "scripted"
        }
        fn submit(&mut self, _batch: Arc<Batch>) -> SubmitFuture<'_> {
            self.calls += 1;
            let next = if self.errors.is_empty() {
                None
            } else {
                Some(self.errors.remove(0))
            };
            Box::pin(
                async move { next.map_or(Ok(super::super::written(WriteReport::default())), Err) },
            )
        }
    }

    fn batch() -> Arc<Batch> {
        let mut b = Batcher::new(layout(), Batching::default());
        let mut ready = Vec::new();
        b.push(0, 0, &log("s", 1, 1, 0), Instant::now(), &mut ready)
            .unwrap();
        Arc::new(b.flush().unwrap())
    }

    fn transient() -> SinkError {
        SinkError::io(
            "disk",
            std::io::Error::from(std::io::ErrorKind::StorageFull),
        )
    }

    #[tokio::test(start_paused = true)]
    async fn retries_transient_errors_until_acknowledged() {
        let mut sink = Scripted {
            errors: (0..20).map(|_| transient()).collect(),
            calls: 0,
        };
        let mut waits = Vec::new();
        let r = write_with_retry(
            &mut sink,
            &batch(),
            Backoff::default(),
            &CancellationToken::new(),
            |e, n, w| {
                assert!(e.is_retryable());
                waits.push((n, w));
            },
        )
        .await;
        assert!(r.is_ok());
        assert_eq!(sink.calls, 21);
        assert_eq!(waits.len(), 20);
        assert!(waits.iter().all(|(_, w)| *w <= Backoff::default().max));
    }

    #[tokio::test(start_paused = true)]
    async fn a_retry_after_from_the_destination_replaces_the_backoff() {
        let ask = Duration::from_secs(42);
        let mut sink = Scripted {
            errors: vec![transient().with_retry_after(ask), transient()],
            calls: 0,
        };
        let mut waits = Vec::new();
        let r = write_with_retry(
            &mut sink,
            &batch(),
            Backoff::default(),
            &CancellationToken::new(),
            |_, _, w| waits.push(w),
        )
        .await;
        assert!(r.is_ok());
        assert_eq!(waits[0], ask);
        assert!(waits[1] <= Backoff::default().max && waits[1] != ask);
    }

    #[tokio::test(start_paused = true)]
    async fn stops_at_an_error_retrying_cannot_fix() {
        let mut sink = Scripted {
            errors: vec![
                transient(),
                SinkError::new(SinkErrorKind::Rejected, false, "bad rows"),
            ],
            calls: 0,
        };
        let r = write_with_retry(
            &mut sink,
            &batch(),
            Backoff::default(),
            &CancellationToken::new(),
            |_, _, _| {},
        )
        .await;
        assert!(matches!(r, Err(RetryError::NeedsFix(e)) if e.kind == SinkErrorKind::Rejected));
        assert_eq!(sink.calls, 2);
    }

    #[tokio::test(start_paused = true)]
    async fn cancellation_ends_the_wait() {
        let mut sink = Scripted {
            errors: (0..1000).map(|_| transient()).collect(),
            calls: 0,
        };
        let cancel = CancellationToken::new();
        let c = cancel.clone();
        let r = write_with_retry(
            &mut sink,
            &batch(),
            Backoff::default(),
            &cancel,
            move |_, n, _| {
                if n == 3 {
                    c.cancel();
                }
            },
        )
        .await;
        assert!(matches!(r, Err(RetryError::Cancelled(Some(_)))));
        assert_eq!(sink.calls, 4);
        let cancelled = CancellationToken::new();
        cancelled.cancel();
        let r = write_with_retry(
            &mut sink,
            &batch(),
            Backoff::default(),
            &cancelled,
            |_, _, _| {},
        )
        .await;
        assert!(matches!(r, Err(RetryError::Cancelled(None))));
        assert_eq!(sink.calls, 4);
    }
}
