//! A batch turned into AppendRows requests under `max_request_bytes`, and the slicing of a
//! request the driver does when BigQuery refuses part of it.

use super::contract::{AppendOutcome, RejectReason, RejectedRow};
use crate::sink::bigquery::encode::{batch_bytes, oversized_message, split_to_fit};
use crate::sink::bigquery::validate::{kept, PartitionWindow, OUTSIDE_MESSAGE};
use arrow_array::{RecordBatch, UInt32Array};
use arrow_schema::ArrowError;
use bytes::Bytes;
use std::sync::Arc;
use tokio::sync::{oneshot, OwnedSemaphorePermit};
use tokio::time::Instant;

/// Maps a request's rows to the rows of the caller's batch.
#[derive(Debug, Clone)]
pub(super) enum RowMap {
    /// Row i is row `start + i`.
    Range(usize),
    /// Row i is row `v[i]`.
    Indexed(Arc<[u32]>),
}

impl RowMap {
    pub(super) fn get(&self, i: usize) -> usize {
        match self {
            RowMap::Range(start) => start + i,
            RowMap::Indexed(v) => v[i] as usize,
        }
    }

    pub(super) fn slice(&self, off: usize, len: usize) -> RowMap {
        match self {
            RowMap::Range(start) => RowMap::Range(start + off),
            RowMap::Indexed(v) => RowMap::Indexed(v[off..off + len].into()),
        }
    }
}

/// One request's worth of rows.
#[derive(Debug)]
pub(super) struct Req {
    pub(super) batch: u64,
    /// Position of the first row among the rows of its batch that are sent.
    pub(super) pos: usize,
    pub(super) rows: RowMap,
    pub(super) data: RecordBatch,
    pub(super) payload: Bytes,
    pub(super) sent_at: Option<Instant>,
    /// Sent as the schema-carrying first request of its connection.
    pub(super) with_schema: bool,
    /// Committed streams: the stream offset of the first row.
    pub(super) offset: Option<i64>,
    /// Position in send order (the offset on committed streams, admission order otherwise).
    pub(super) order: i64,
    /// Times sent.
    pub(super) attempts: u32,
}

impl Req {
    pub(super) fn n(&self) -> usize {
        self.data.num_rows()
    }

    /// Re-encodes the rows `[off, off+len)` as a new request.
    pub(super) fn slice(&self, off: usize, len: usize) -> Result<Req, ArrowError> {
        let data = self.data.slice(off, len);
        let payload = batch_bytes(&data)?;
        Ok(Req {
            batch: self.batch,
            pos: self.pos + off,
            rows: self.rows.slice(off, len),
            data,
            payload,
            sent_at: None,
            with_schema: false,
            offset: self.offset.map(|o| o + off as i64),
            order: self.order + if self.offset.is_some() { off as i64 } else { 0 },
            attempts: 0,
        })
    }

    /// Re-encodes the rows not in `drop` as a new request (None if none is left).
    pub(super) fn without(&self, drop: &[usize]) -> Result<Option<Req>, ArrowError> {
        let keep: Vec<u32> = (0..self.n())
            .filter(|i| !drop.contains(i))
            .map(|i| i as u32)
            .collect();
        if keep.is_empty() {
            return Ok(None);
        }
        let data =
            arrow_select::take::take_record_batch(&self.data, &UInt32Array::from(keep.clone()))?;
        let payload = batch_bytes(&data)?;
        let rows = RowMap::Indexed(
            keep.iter()
                .map(|&i| self.rows.get(i as usize) as u32)
                .collect(),
        );
        Ok(Some(Req {
            batch: self.batch,
            pos: self.pos,
            rows,
            data,
            payload,
            sent_at: None,
            with_schema: false,
            offset: self.offset,
            order: self.order,
            attempts: 0,
        }))
    }
}

/// A batch turned into requests: what [`super::AppendWriter::append`] hands to the driver.
#[derive(Debug)]
pub(super) struct Prepared {
    /// Rows in the caller's batch.
    pub(super) rows: usize,
    /// Rows to be sent (committed streams: the offsets they take).
    pub(super) written: usize,
    /// Encoded bytes of all requests.
    pub(super) bytes: usize,
    /// The requests, in row order, each under the payload budget.
    pub(super) reqs: Vec<Req>,
    /// Rows reported now and never sent (outside the partition range, or alone over the cap),
    /// by index in the caller's batch.
    pub(super) rejected: Vec<RejectedRow>,
    /// Index in the caller's batch of the first row alone over the cap.
    pub(super) first_oversized: Option<usize>,
}

/// Splits `batch` into requests whose payload stays under `payload_budget`. Rows outside
/// `window` (at `now_micros`) and rows alone over the budget are reported in
/// [`Prepared::rejected`] and not sent.
pub(super) fn prepare(
    batch: RecordBatch,
    window: Option<&PartitionWindow>,
    now_micros: i64,
    payload_budget: usize,
) -> Result<Prepared, ArrowError> {
    let rows = batch.num_rows();
    let mut rejected = Vec::new();
    // Rows BigQuery would refuse are reported now and never sent; `map` takes the rows
    // that remain back to their index in `batch`.
    let outside = match window {
        Some(w) => w.outside(&batch, now_micros),
        None => Vec::new(),
    };
    let (work, map): (RecordBatch, Option<Arc<[u32]>>) = if outside.is_empty() {
        (batch, None)
    } else {
        for &index in &outside {
            rejected.push(RejectedRow {
                index,
                reason: RejectReason::OutsidePartitionRange,
                message: OUTSIDE_MESSAGE.into(),
            });
        }
        let keep = kept(&outside, rows);
        let work = arrow_select::take::take_record_batch(&batch, &UInt32Array::from(keep.clone()))?;
        (work, Some(keep.into()))
    };
    let original = |i: usize| map.as_ref().map_or(i, |m| m[i] as usize);
    let written = work.num_rows();
    let split = split_to_fit(&work, payload_budget)?;
    let bytes: usize = split.pieces.iter().map(|p| p.payload.len()).sum();
    let first_oversized = split.oversized.first().map(|&i| original(i));
    rejected.extend(split.oversized.iter().map(|&i| RejectedRow {
        index: original(i),
        reason: RejectReason::TooLarge,
        message: oversized_message(payload_budget),
    }));
    let reqs = split
        .pieces
        .into_iter()
        .map(|p| Req {
            batch: 0,
            pos: p.offset,
            rows: match &map {
                None => RowMap::Range(p.offset),
                Some(m) => RowMap::Indexed(m[p.offset..p.offset + p.batch.num_rows()].into()),
            },
            data: p.batch,
            payload: p.payload,
            sent_at: None,
            with_schema: false,
            offset: None,
            order: 0,
            attempts: 0,
        })
        .collect();
    Ok(Prepared {
        rows,
        written,
        bytes,
        reqs,
        rejected,
        first_oversized,
    })
}

/// A batch as handed to the driver.
pub(super) struct Job {
    pub(super) rows: usize,
    /// Rows to be sent (committed streams: the offsets they take).
    pub(super) written: usize,
    pub(super) bytes: usize,
    pub(super) reqs: Vec<Req>,
    pub(super) rejected: Vec<RejectedRow>,
    pub(super) permit: OwnedSemaphorePermit,
    pub(super) done: oneshot::Sender<Result<AppendOutcome, String>>,
}

impl std::fmt::Debug for Job {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Job")
            .field("rows", &self.rows)
            .field("requests", &self.reqs.len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{Array, StringArray, TimestampMicrosecondArray};
    use arrow_schema::{DataType, Field, Schema, TimeUnit};
    use proptest::prelude::*;

    const NOW: i64 = 1_700_000_000_000_000;
    const DAY: i64 = 86_400_000_000;

    /// Where a row's partitioning timestamp lies.
    #[derive(Debug, Clone, Copy, PartialEq)]
    enum When {
        Inside,
        Expired,
        Null,
    }

    fn batch(rows: &[(When, usize)]) -> RecordBatch {
        let ts: TimestampMicrosecondArray = rows
            .iter()
            .map(|(w, _)| match w {
                When::Inside => Some(NOW - DAY),
                When::Expired => Some(NOW - 100 * DAY),
                When::Null => None,
            })
            .collect::<TimestampMicrosecondArray>()
            .with_timezone("UTC");
        let s: StringArray = rows
            .iter()
            .enumerate()
            .map(|(i, (_, len))| Some(format!("{i:04}{}", "x".repeat(*len))))
            .collect();
        let schema = Schema::new(vec![
            Field::new(
                "ts",
                DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
                true,
            ),
            Field::new("s", DataType::Utf8, false),
        ]);
        RecordBatch::try_new(Arc::new(schema), vec![Arc::new(ts), Arc::new(s)]).unwrap()
    }

    fn text(b: &RecordBatch, i: usize) -> String {
        b.column(1)
            .as_any()
            .downcast_ref::<StringArray>()
            .unwrap()
            .value(i)
            .to_string()
    }

    proptest! {
        /// Every request fits the budget; every row of the caller's batch is either in exactly
        /// one request, in row order, or reported (expired: outside the partition range; alone
        /// over the budget: too large); positions count the rows that are sent.
        #[test]
        fn requests_fit_and_every_row_is_sent_once_or_reported(
            rows in proptest::collection::vec(
                (prop_oneof![4 => Just(When::Inside), 1 => Just(When::Expired), 1 => Just(When::Null)], 0usize..3000),
                0..40,
            ),
            budget in 1200usize..6000,
        ) {
            let input = batch(&rows);
            let window = PartitionWindow::for_ttl_days(0, 30);
            let p = prepare(input.clone(), Some(&window), NOW, budget).unwrap();
            let expired: Vec<usize> =
                (0..rows.len()).filter(|&i| rows[i].0 == When::Expired).collect();
            prop_assert_eq!(p.rows, rows.len());
            prop_assert_eq!(p.written, rows.len() - expired.len());
            prop_assert_eq!(p.bytes, p.reqs.iter().map(|r| r.payload.len()).sum::<usize>());
            let mut seen = vec![0u32; rows.len()];
            let mut last_original = None;
            let mut sent_before = 0;
            for r in &p.reqs {
                prop_assert!(r.payload.len() <= budget, "{} > {budget}", r.payload.len());
                prop_assert!(r.n() > 0);
                for i in 0..r.n() {
                    let original = r.rows.get(i);
                    prop_assert!(last_original < Some(original), "rows in order");
                    last_original = Some(original);
                    seen[original] += 1;
                    prop_assert_eq!(text(&r.data, i), text(&input, original));
                }
                // `pos` counts the rows that are sent (oversized ones included: they take a
                // position, and on a committed stream refuse the batch).
                prop_assert!(r.pos >= sent_before);
                sent_before = r.pos + r.n();
            }
            let mut too_large = Vec::new();
            for rej in &p.rejected {
                seen[rej.index] += 1;
                match rej.reason {
                    RejectReason::OutsidePartitionRange => {
                        prop_assert!(expired.contains(&rej.index))
                    }
                    RejectReason::TooLarge => too_large.push(rej.index),
                    other => prop_assert!(false, "unexpected {other:?}"),
                }
            }
            prop_assert!(seen.iter().all(|&n| n == 1), "{seen:?}");
            prop_assert_eq!(p.first_oversized, too_large.iter().min().copied());
            prop_assert_eq!(
                p.rejected.iter().filter(|r| r.reason == RejectReason::OutsidePartitionRange).count(),
                expired.len()
            );
        }
    }

    #[test]
    fn without_a_window_nothing_is_rejected_and_one_small_batch_is_one_request() {
        let input = batch(&[(When::Expired, 1), (When::Inside, 1)]);
        let p = prepare(input, None, NOW, 10_000).unwrap();
        assert!(p.rejected.is_empty());
        assert_eq!(p.reqs.len(), 1);
        assert_eq!((p.reqs[0].pos, p.reqs[0].n(), p.written), (0, 2, 2));
    }

    #[test]
    fn row_maps_compose() {
        let r = RowMap::Range(10);
        assert_eq!(r.get(3), 13);
        assert_eq!(r.slice(2, 5).get(0), 12);
        let ix = RowMap::Indexed(vec![1u32, 4, 9, 16].into());
        assert_eq!(ix.slice(1, 2).get(1), 9);
    }
}
