//! Row checks made before sending, so BigQuery never has to refuse a row (pure).
//!
//! A row whose partitioning timestamp lies in a partition that has already expired (older than
//! the table's partition expiration) or too far in the future is refused by BigQuery; the writer
//! reports such rows as rejected with [`super::RejectReason::OutsidePartitionRange`] and never
//! sends them. NULL timestamps are kept (BigQuery files them under the `__NULL__` partition).

use arrow_array::cast::AsArray;
use arrow_array::types::TimestampMicrosecondType;
use arrow_array::{Array, RecordBatch};
use arrow_schema::{DataType, TimeUnit};
use std::time::Duration;

/// Why a row outside the [`PartitionWindow`] is refused (its dead letter's message).
pub const OUTSIDE_MESSAGE: &str = "request_timestamp is outside the table's partition range (older than the partition expiration, or more than a year ahead)";

/// The accepted range of the partitioning column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionWindow {
    /// Index of the TIMESTAMP column the table is partitioned on.
    pub column: usize,
    /// The table's partition expiration (`ttl_days`): older rows are refused.
    pub max_age: Duration,
    /// How far ahead of now a row may be.
    pub max_future: Duration,
}

impl PartitionWindow {
    /// The window of a table partitioned on column `column` with `ttl_days` expiration; rows
    /// may be up to a year ahead.
    pub fn for_ttl_days(column: usize, ttl_days: u64) -> Self {
        PartitionWindow {
            column,
            max_age: Duration::from_secs(ttl_days.saturating_mul(86_400)),
            max_future: Duration::from_secs(365 * 86_400),
        }
    }

    /// Indexes of the rows outside the window at `now_micros` (microseconds since the epoch).
    /// A batch without a microsecond timestamp column at `column` has none.
    pub fn outside(&self, batch: &RecordBatch, now_micros: i64) -> Vec<usize> {
        let Some(col) = batch.columns().get(self.column) else {
            return Vec::new();
        };
        if !matches!(
            col.data_type(),
            DataType::Timestamp(TimeUnit::Microsecond, _)
        ) {
            return Vec::new();
        }
        let ts = col.as_primitive::<TimestampMicrosecondType>();
        // Partitions are whole UTC days: a row is kept while its day has not expired.
        const DAY: i64 = 86_400_000_000;
        let today = now_micros.div_euclid(DAY) * DAY;
        let oldest = today.saturating_sub(micros(self.max_age));
        let newest = now_micros.saturating_add(micros(self.max_future));
        (0..ts.len())
            .filter(|&i| ts.is_valid(i) && (ts.value(i) < oldest || ts.value(i) > newest))
            .collect()
    }
}

/// The rows of a batch of `rows` rows that are not in `outside` (ascending, as
/// [`PartitionWindow::outside`] returns them), in order: one pass, whatever their number.
pub fn kept(outside: &[usize], rows: usize) -> Vec<u32> {
    let mut out = vec![false; rows];
    for &i in outside {
        if let Some(o) = out.get_mut(i) {
            *o = true;
        }
    }
    (0..rows).filter(|&i| !out[i]).map(|i| i as u32).collect()
}

fn micros(d: Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}

const DAY_MICROS: i64 = 86_400_000_000;

/// The UTC day (days since the epoch) of `micros` (microseconds since the epoch).
pub fn day_of(micros: i64) -> i64 {
    micros.div_euclid(DAY_MICROS)
}

/// The first microsecond of UTC day `day`: the instant a window evaluated "at a day" uses
/// (the same oldest partition all day; the year ahead counted from the day's start).
pub fn day_start(day: i64) -> i64 {
    day.saturating_mul(DAY_MICROS)
}

/// Microseconds since the epoch now.
pub fn now_micros() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, micros)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::TimestampMicrosecondArray;
    use arrow_schema::{Field, Schema};
    use std::sync::Arc;

    const DAY: i64 = 86_400_000_000;

    fn batch(ts: Vec<Option<i64>>) -> RecordBatch {
        let schema = Schema::new(vec![Field::new(
            "request_timestamp",
            DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
            true,
        )]);
        let col = TimestampMicrosecondArray::from(ts).with_timezone("UTC");
        RecordBatch::try_new(Arc::new(schema), vec![Arc::new(col)]).unwrap()
    }

    #[test]
    fn expired_and_far_future_rows_are_outside() {
        let now = 20_000 * DAY + DAY / 2; // noon
        let w = PartitionWindow::for_ttl_days(0, 14);
        let b = batch(vec![
            Some(now),
            Some(now - 14 * DAY),              // the oldest partition still kept
            Some(20_000 * DAY - 14 * DAY - 1), // one microsecond before it
            None,
            Some(now + 364 * DAY),
            Some(now + 366 * DAY),
        ]);
        assert_eq!(w.outside(&b, now), [2, 5]);
    }

    #[test]
    fn kept_is_every_row_not_outside_in_order() {
        assert_eq!(kept(&[], 3), [0, 1, 2]);
        assert_eq!(kept(&[0, 2, 5], 6), [1, 3, 4]);
        assert_eq!(kept(&[0, 1], 2), [] as [u32; 0]);
        // An index past the batch (none is ever given) is ignored, not a panic.
        assert_eq!(kept(&[9], 2), [0, 1]);
    }

    #[test]
    fn other_columns_are_not_checked() {
        let w = PartitionWindow::for_ttl_days(3, 1);
        assert!(w.outside(&batch(vec![Some(0)]), 1 << 60).is_empty());
    }
}
