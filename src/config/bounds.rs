//! Sane ranges for every duration and size in the configuration, checked at validation.
//!
//! A value outside its range is a configuration problem (exit 2) naming the key, the range and
//! the value, never a panic later: a duration added to an `Instant` (`batching.linger`,
//! `consumer.drain_timeout`, …) would overflow, a size could ask for more memory than exists.
//! Each section reads its keys with [`Obj::duration_in`] / [`Obj::bytes_in`] and one of the
//! ranges below; a new section reuses them (or declares its own range here, next to its
//! siblings, so the README table and `docs/reliability.md` can list them in one place).

use super::value::{Obj, Problems};
use std::ops::RangeInclusive;
use std::time::Duration;

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;
const TIB: u64 = 1 << 40;

/// BigQuery's own cap on one serialized AppendRows request: "10 MB", which Google's Java client
/// reads as 10,000,000 bytes.
pub const MAX_APPEND_REQUEST_BYTES: u64 = 10_000_000;
/// Largest `connections` of a BIGQUERY sink.
pub const MAX_CONNECTIONS: u32 = 16;
const MS: Duration = Duration::from_millis(1);
const SEC: Duration = Duration::from_secs(1);
const HOUR: Duration = Duration::from_secs(3600);
const DAY: Duration = Duration::from_secs(86_400);

/// The largest string data one Arrow column of a batch may hold (`i32` offsets): a batch plus
/// one log must stay at or below it (`batching.max_bytes + batching.max_log_bytes`).
pub const ARROW_STRING_LIMIT: u64 = i32::MAX as u64;

/// `batching.linger`: 1 ms to 1 h.
pub(crate) const LINGER: RangeInclusive<Duration> = MS..=HOUR;
/// `batching.max_bytes` and `batching.max_log_bytes`: 1 KiB to 1 GiB (and their sum at most
/// [`ARROW_STRING_LIMIT`]).
pub(crate) const BATCH_OR_LOG_BYTES: RangeInclusive<u64> = KIB..=GIB;
/// `batching.max_inflight_bytes`: 1 KiB to 64 GiB (and at least `batching.max_bytes`).
pub(crate) const INFLIGHT_BYTES: RangeInclusive<u64> = KIB..=(64 * GIB);
/// `batching.max_frame_bytes`: 1 KiB to 4 GiB.
pub(crate) const FRAME_BYTES: RangeInclusive<u64> = KIB..=(4 * GIB);
/// `batching.max_rows` (a count): 1 to 2^32 − 1 (a batch's row indexes are `u32`).
pub(crate) const MAX_ROWS: RangeInclusive<u64> = 1..=(u32::MAX as u64);
/// `dead_letter.max_message_bytes`: a claim check (4 KiB of payload and bounded headers) must
/// fit, and librdkafka refuses a `message.max.bytes` over 1,000,000,000.
pub(crate) const DLQ_MESSAGE_BYTES: RangeInclusive<u64> = (16 * KIB)..=(512 * MIB);
/// `local_sink.rotate_bytes`: 1 KiB to 1024 GiB.
pub(crate) const ROTATE_BYTES: RangeInclusive<u64> = KIB..=TIB;
/// `local_sink.rotate_interval`: 1 s to 1 day.
pub(crate) const ROTATE_INTERVAL: RangeInclusive<Duration> = SEC..=DAY;
/// `server.header_read_timeout` and `server.idle_timeout`: 1 ms to 1 h.
pub(crate) const HTTP_TIMEOUT: RangeInclusive<Duration> = MS..=HOUR;
/// `server.max_connections` (a count): 1 to 65,536.
pub(crate) const HTTP_CONNECTIONS: RangeInclusive<u64> = 1..=65_536;
/// `consumer.max_message_bytes`: 1 KiB to 1 GiB (a fetch response must fit librdkafka's
/// `receive.message.max.bytes`, at most 2,147,483,647).
pub(crate) const MESSAGE_BYTES: RangeInclusive<u64> = KIB..=GIB;
/// `consumer.drain_timeout`: 0 (do not wait) to 1 h.
pub(crate) const DRAIN_TIMEOUT: RangeInclusive<Duration> = Duration::ZERO..=HOUR;
/// `logging.progress_interval`: 0 (no progress line) to 1 day.
pub(crate) const PROGRESS_INTERVAL: RangeInclusive<Duration> = Duration::ZERO..=DAY;
/// `consumer.commit_interval`: 1 ms to 1 h.
pub(crate) const COMMIT_INTERVAL: RangeInclusive<Duration> = MS..=HOUR;
/// `consumer.session_timeout`: librdkafka's own range for `session.timeout.ms`, 1 ms to 1 h.
pub(crate) const SESSION_TIMEOUT: RangeInclusive<Duration> = MS..=HOUR;
/// A BIGQUERY sink's `max_request_bytes`: 64 KiB to BigQuery's AppendRows cap (10 MB).
pub(crate) const APPEND_REQUEST_BYTES: RangeInclusive<u64> = (64 * KIB)..=MAX_APPEND_REQUEST_BYTES;
/// A BIGQUERY sink's `max_inflight_bytes`: 64 KiB to 64 GiB (and at least `max_request_bytes`).
pub(crate) const SINK_INFLIGHT_BYTES: RangeInclusive<u64> = (64 * KIB)..=(64 * GIB);

/// A BIGQUERY sink's `connections` (the most AppendRows connections to the `_default` stream):
/// 1 to 16.
pub(crate) const APPEND_CONNECTIONS: RangeInclusive<u64> = 1..=(MAX_CONNECTIONS as u64);
/// An ARIZE sink's `request_timeout` and `connect_timeout`: 1 ms to 1 h.
pub(crate) const ARIZE_TIMEOUT: RangeInclusive<Duration> = MS..=HOUR;
/// An ARIZE sink's `max_request_bytes`: 64 KiB to 1 GiB.
pub(crate) const ARIZE_REQUEST_BYTES: RangeInclusive<u64> = (64 * KIB)..=GIB;
/// A MAXCOMPUTE sink's `interval` (how often staged rows are moved into the target): 1 s to 1 day.
pub(crate) const MAXCOMPUTE_INTERVAL: RangeInclusive<Duration> = SEC..=DAY;
/// A MAXCOMPUTE sink's `move_timeout` (how long a move runs before it is reported): 10 s to 1
/// week. Below 10 s an ordinary `INSERT` waiting for a slot would be reported; a week is past
/// any interval (at most a day) times three.
pub(crate) const MAXCOMPUTE_MOVE_TIMEOUT: RangeInclusive<Duration> =
    Duration::from_secs(10)..=Duration::from_secs(7 * 86_400);

/// Records a problem at `path` unless `value` lies in `range`, the numbers written by `show`.
fn check<T: PartialOrd + Copy>(
    path: &str,
    value: T,
    range: &RangeInclusive<T>,
    show: fn(T) -> String,
    problems: &mut Problems,
) -> bool {
    let ok = range.contains(&value);
    if !ok {
        problems.push(
            path,
            format_args!(
                "must be from {} to {}, found {}",
                show(*range.start()),
                show(*range.end()),
                show(value)
            ),
        );
    }
    ok
}

/// Records a problem at `path` unless the duration `value` lies in `range`.
pub(crate) fn check_duration(
    path: &str,
    value: Duration,
    range: &RangeInclusive<Duration>,
    problems: &mut Problems,
) -> bool {
    check(path, value, range, fmt_duration, problems)
}

/// Records a problem at `path` unless the byte size `value` lies in `range`.
pub(crate) fn check_bytes(
    path: &str,
    value: u64,
    range: &RangeInclusive<u64>,
    problems: &mut Problems,
) -> bool {
    check(path, value, range, fmt_bytes, problems)
}

/// Records a problem at `path` unless the count `value` lies in `range`.
pub(crate) fn check_count(
    path: &str,
    value: u64,
    range: &RangeInclusive<u64>,
    problems: &mut Problems,
) -> bool {
    check(path, value, range, |n| n.to_string(), problems)
}

/// A duration as the config accepts it back (`1h`, `500ms`, `0s`).
pub(crate) fn fmt_duration(d: Duration) -> String {
    if d.is_zero() {
        "0s".into()
    } else {
        humantime::format_duration(d).to_string()
    }
}

/// A size in the largest binary unit that divides it exactly and the parser reads back
/// (`1GiB`, `1536KiB`, `1000B`).
pub(crate) fn fmt_bytes(v: u64) -> String {
    for (unit, size) in [("GiB", GIB), ("MiB", MIB), ("KiB", KIB)] {
        if v >= size && v.is_multiple_of(size) {
            return format!("{}{unit}", v / size);
        }
    }
    format!("{v}B")
}

impl Obj<'_> {
    /// A duration within `range` (`default` when absent). Out of range: a problem naming the
    /// key and the range, and the default is returned so validation can go on.
    pub(crate) fn duration_in(
        &mut self,
        key: &'static str,
        default: Duration,
        range: &RangeInclusive<Duration>,
        problems: &mut Problems,
    ) -> Duration {
        match self.duration(key, problems) {
            Some(d) if check_duration(&self.path_of(key), d, range, problems) => d,
            Some(_) | None => default,
        }
    }

    /// A byte size within `range` (`default` when absent). Out of range: a problem naming the
    /// key and the range, and the default is returned so validation can go on.
    pub(crate) fn bytes_in(
        &mut self,
        key: &'static str,
        default: u64,
        range: &RangeInclusive<u64>,
        problems: &mut Problems,
    ) -> u64 {
        match self.bytes(key, problems) {
            Some(v) if check_bytes(&self.path_of(key), v, range, problems) => v,
            Some(_) | None => default,
        }
    }

    /// A count within `range` (`default` when absent); as [`Obj::bytes_in`].
    pub(crate) fn count_in(
        &mut self,
        key: &'static str,
        default: u64,
        range: &RangeInclusive<u64>,
        problems: &mut Problems,
    ) -> u64 {
        match self.u64(key, problems) {
            Some(v) if check_count(&self.path_of(key), v, range, problems) => v,
            Some(_) | None => default,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn out_of_range_values_name_key_range_and_value() {
        let mut p = Problems::default();
        assert!(!check_duration(
            "batching.linger",
            Duration::from_secs(u64::MAX),
            &LINGER,
            &mut p
        ));
        assert!(!check_bytes(
            "batching.max_bytes",
            2 * GIB,
            &BATCH_OR_LOG_BYTES,
            &mut p
        ));
        assert!(check_bytes(
            "batching.max_bytes",
            GIB,
            &BATCH_OR_LOG_BYTES,
            &mut p
        ));
        assert!(check_duration(
            "consumer.drain_timeout",
            Duration::ZERO,
            &DRAIN_TIMEOUT,
            &mut p
        ));
        assert_eq!(
            p.0,
            vec![
                "batching.linger: must be from 1ms to 1h, found 584542046090years 7months 15days 17h 5m 3s"
                    .to_string(),
                "batching.max_bytes: must be from 1KiB to 1GiB, found 2GiB".to_string(),
            ]
        );
    }

    #[test]
    fn every_duration_range_fits_an_instant_addition() {
        // The point of the ranges: `Instant::now() + d` never overflows for an accepted value.
        let now = std::time::Instant::now();
        for r in [
            LINGER,
            ROTATE_INTERVAL,
            HTTP_TIMEOUT,
            DRAIN_TIMEOUT,
            COMMIT_INTERVAL,
            PROGRESS_INTERVAL,
            SESSION_TIMEOUT,
            MAXCOMPUTE_INTERVAL,
            MAXCOMPUTE_MOVE_TIMEOUT,
        ] {
            assert!(r.start() <= r.end());
            assert!(now.checked_add(*r.end()).is_some());
            // librdkafka takes its timeouts as i32 milliseconds.
            assert!(r.end().as_millis() <= i32::MAX as u128);
        }
    }

    #[test]
    fn sizes_format_in_exact_units() {
        assert_eq!(fmt_bytes(1 << 30), "1GiB");
        assert_eq!(fmt_bytes(1536 << 10), "1536KiB");
        assert_eq!(fmt_bytes(1000), "1000B");
        assert_eq!(fmt_bytes(0), "0B");
        assert_eq!(fmt_duration(Duration::ZERO), "0s");
    }
}
