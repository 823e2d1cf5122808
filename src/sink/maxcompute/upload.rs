//! Staging one batch: its rows encoded as Tunnel blocks in an upload session of its own on the
//! staging table, committed there. A block the Tunnel refuses is narrowed down to its rows by
//! halving ([`Narrowing`], pure): the rows refused alone become row letters, the others are
//! staged. An error before the commit leaves nothing in the staging table (an uncommitted
//! session is never applied), so the runtime can submit the batch again whole.

use super::mover::Epochs;
use crate::maxcompute::client::{CallError, Client};
use crate::maxcompute::encode::RecordEncoder;
use crate::maxcompute::error::Class;
use crate::maxcompute::record::BlockWriter;
use crate::sink::{RejectedRow, SinkError, SinkErrorKind};
use arrow_array::RecordBatch;
use std::ops::Range;

/// The row-range plan of one batch's blocks: the whole batch first; a refused range is split in
/// two until single rows, which are refused for good (pure).
#[derive(Debug)]
pub struct Narrowing {
    todo: Vec<Range<usize>>,
    refused: Vec<(usize, String)>,
}

impl Narrowing {
    /// The plan for `rows` rows.
    pub fn new(rows: usize) -> Self {
        Narrowing {
            todo: std::iter::once(0..rows).filter(|r| !r.is_empty()).collect(),
            refused: Vec::new(),
        }
    }

    /// The next range to upload as one block.
    pub fn next_block(&mut self) -> Option<Range<usize>> {
        self.todo.pop()
    }

    /// The service refused `range`'s block: halve it, or refuse its single row.
    pub fn refused(&mut self, range: Range<usize>, message: &str) {
        if range.len() <= 1 {
            self.refused.push((range.start, message.to_string()));
        } else {
            let mid = range.start + range.len() / 2;
            // Popped in row order: first half last in.
            self.todo.push(mid..range.end);
            self.todo.push(range.start..mid);
        }
    }

    /// The rows refused alone, in row order.
    pub fn into_refused(mut self) -> Vec<(usize, String)> {
        self.refused.sort_by_key(|r| r.0);
        self.refused
    }
}

/// What staging a batch gave: the epoch its rows wait in (`None` when no row was staged) and
/// the rows the service refused.
pub struct Staged {
    /// The mover epoch the rows were committed in.
    pub epoch: Option<u64>,
    /// Rows refused before staging (dead-lettered).
    pub rejected: Vec<RejectedRow>,
}

/// Uploads `records` into `staging` and commits the session, holding `epochs` for the commit
/// (a move's `INSERT … SELECT` and `TRUNCATE` never run between a commit and its epoch).
pub async fn stage(
    client: &Client,
    staging: &str,
    records: &RecordBatch,
    epochs: &tokio::sync::Mutex<Epochs>,
) -> Result<Staged, SinkError> {
    let session = client.create_upload(staging).await.map_err(|e| e.error)?;
    let encoder = RecordEncoder::new(&session.columns, records.schema()).map_err(|e| {
        SinkError::new(
            SinkErrorKind::Encode,
            false,
            format!("MaxCompute staging table {staging} does not fit the batch: {e}"),
        )
    })?;
    let mut plan = Narrowing::new(records.num_rows());
    let mut blocks = Vec::new();
    let mut next_id = 0u64;
    while let Some(range) = plan.next_block() {
        let mut block = BlockWriter::new();
        encoder.write(records, range.clone(), &mut block);
        let id = next_id;
        next_id += 1;
        match client
            .put_block(staging, &session.id, id, block.finish().into())
            .await
        {
            Ok(()) => blocks.push(id),
            Err(CallError {
                class: Class::RowsRefused,
                error,
            }) => plan.refused(range, error.message()),
            Err(e) => return Err(e.error),
        }
    }
    let rejected: Vec<RejectedRow> = plan
        .into_refused()
        .into_iter()
        .map(|(row, message)| RejectedRow {
            row,
            code: "maxcompute_refused",
            message,
        })
        .collect();
    if blocks.is_empty() {
        return Ok(Staged {
            epoch: None,
            rejected,
        });
    }
    let mut held = epochs.lock().await;
    if let Err(e) = client.commit_upload(staging, &session.id, &blocks).await {
        // The answer may be lost after the service applied the commit: a session it reports
        // closed is committed (pyodps's `Closed`); anything else is not, and the runtime
        // submits the batch again into a new session.
        let closed = client
            .upload_status(staging, &session.id)
            .await
            .is_ok_and(|s| s.status.eq_ignore_ascii_case("closed"));
        if !closed {
            return Err(e.error);
        }
    }
    Ok(Staged {
        epoch: Some(held.committed()),
        rejected,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs the plan against a service that refuses any block holding a row of `bad`; returns
    /// (blocks uploaded, rows refused).
    fn run(rows: usize, bad: &[usize]) -> (Vec<Range<usize>>, Vec<usize>) {
        let mut plan = Narrowing::new(rows);
        let mut ok = Vec::new();
        while let Some(r) = plan.next_block() {
            if bad.iter().any(|b| r.contains(b)) {
                plan.refused(r, "bad");
            } else {
                ok.push(r);
            }
        }
        (ok, plan.into_refused().into_iter().map(|r| r.0).collect())
    }

    #[test]
    fn a_clean_batch_is_one_block() {
        let (ok, refused) = run(10, &[]);
        assert_eq!((ok.len(), &ok[0], refused.len()), (1, &(0..10), 0));
        assert_eq!(run(0, &[]), (vec![], vec![]));
    }

    #[test]
    fn refused_blocks_narrow_to_exactly_the_bad_rows() {
        for (rows, bad) in [
            (1, vec![0]),
            (10, vec![3]),
            (10, vec![0, 9]),
            (7, vec![0, 1, 2, 3, 4, 5, 6]),
            (1000, vec![17, 500, 999]),
        ] {
            let (ok, refused) = run(rows, &bad);
            assert_eq!(refused, bad, "{rows} rows");
            let mut covered: Vec<usize> = ok.iter().flat_map(|r| r.clone()).collect();
            covered.sort_unstable();
            let want: Vec<usize> = (0..rows).filter(|r| !bad.contains(r)).collect();
            assert_eq!(covered, want, "every other row is staged exactly once");
        }
        // Few uploads for one bad row among many: about 2·log2(n).
        let (ok, _) = run(1 << 16, &[12_345]);
        assert!(ok.len() <= 17, "{}", ok.len());
    }
}
