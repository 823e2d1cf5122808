//! Staging one batch: its rows encoded as Tunnel blocks in an upload session of its own on the
//! staging table, committed there. A block the Tunnel refuses is narrowed down to its rows by
//! halving ([`Narrowing`], pure) within [`NARROWING_UPLOADS`]: the rows refused alone (and,
//! once the budget is spent, the ranges not split further) become row letters, the others are
//! staged. A session made stale by a change of its table ([`Class::NewSession`]) is replaced by
//! a new one holding the rows accepted so far. An error before the commit leaves nothing in the
//! staging table (an uncommitted session is never applied), so the runtime can submit the batch
//! again whole.

use super::mover::Epochs;
use super::table;
use crate::sink::maxcompute::client::{CallError, Client, Tunnel};
use crate::sink::maxcompute::encode::RecordEncoder;
use crate::sink::maxcompute::error::Class;
use crate::sink::maxcompute::record::BlockWriter;
use crate::sink::{RejectedRow, SinkError, SinkErrorKind};
use arrow_array::RecordBatch;
use std::ops::Range;

/// Block ids one upload session allows (0–19999).
pub const SESSION_BLOCK_IDS: u64 = 20_000;

/// Uploads one batch may spend narrowing refused blocks down to rows. Well within a session's
/// block ids; at about 0.1 s an upload, a batch refused whole is settled within minutes, not
/// the hours halving every row would take.
pub const NARROWING_UPLOADS: usize = 1_024;

/// The row-range plan of one batch's blocks (pure): the whole batch first; a refused range is
/// split in two until single rows, which are refused for good. The largest range waiting goes
/// first, so once [`NARROWING_UPLOADS`] is spent the ranges left (refused whole, with a reason
/// saying so) are the smallest: a batch the Tunnel refuses row by row is settled in a bounded
/// number of uploads, and never uses more block ids than a session allows. A range put back
/// after a stale session ([`Narrowing::again`]) was not refused: it is uploaded next, whatever
/// the budget, so only a refusal makes rows letters.
#[derive(Debug)]
pub struct Narrowing {
    /// Ranges waiting: (length, start, the refusal of the range they were split from).
    todo: std::collections::BinaryHeap<(usize, std::cmp::Reverse<usize>, Option<Refusal>)>,
    /// Ranges put back by [`Narrowing::again`], uploaded before anything else.
    retry: Vec<Range<usize>>,
    refused: Vec<(usize, String)>,
    uploads: usize,
    /// Uploads of ranges put back by [`Narrowing::again`] (not counted against the budget).
    again: usize,
    budget: usize,
}

/// A refused block: its row count and the service's message, which every part split from it
/// keeps, so a part left unsplit says why it is a letter.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Refusal {
    rows: usize,
    message: std::sync::Arc<str>,
}

impl Narrowing {
    /// The plan for `rows` rows.
    pub fn new(rows: usize) -> Self {
        Self::with_budget(rows, NARROWING_UPLOADS)
    }

    /// The plan for `rows` rows with `budget` uploads beyond the first.
    pub fn with_budget(rows: usize, budget: usize) -> Self {
        let mut todo = std::collections::BinaryHeap::new();
        if rows > 0 {
            todo.push((rows, std::cmp::Reverse(0), None));
        }
        Narrowing {
            todo,
            retry: Vec::new(),
            refused: Vec::new(),
            uploads: 0,
            again: 0,
            budget,
        }
    }

    /// The next range to upload as one block; `None` when done.
    pub fn next_block(&mut self) -> Option<Range<usize>> {
        if let Some(range) = self.retry.pop() {
            self.uploads += 1;
            return Some(range);
        }
        if self.uploads - self.again > self.budget {
            return None;
        }
        let (len, std::cmp::Reverse(start), _) = self.todo.pop()?;
        self.uploads += 1;
        Some(start..start + len)
    }

    /// `range` was not settled (its session went stale): try it again. The caller bounds how
    /// often (`RENEWALS`), so the uploads stay within a session's block ids.
    pub fn again(&mut self, range: Range<usize>) {
        self.again += 1;
        self.retry.push(range);
    }

    /// Uploads handed out so far.
    pub fn uploads(&self) -> usize {
        self.uploads
    }

    /// The service refused `range`'s block: halve it, or refuse its single row.
    pub fn refused(&mut self, range: Range<usize>, message: &str) {
        if range.len() <= 1 {
            self.refused.push((range.start, message.to_string()));
        } else {
            let why = Refusal {
                rows: range.len(),
                message: message.into(),
            };
            let mid = range.start + range.len() / 2;
            self.todo.push((
                mid - range.start,
                std::cmp::Reverse(range.start),
                Some(why.clone()),
            ));
            self.todo
                .push((range.end - mid, std::cmp::Reverse(mid), Some(why)));
        }
    }

    /// The rows refused, in row order: those refused alone, and, when the budget ran out, every
    /// row of a refused range not narrowed further (its reason says so).
    pub fn into_refused(mut self) -> Vec<(usize, String)> {
        let spent = self.uploads - self.again;
        for (len, std::cmp::Reverse(start), from) in std::mem::take(&mut self.todo).into_vec() {
            // Only a refused range is split, and a range put back after a stale session is
            // always uploaded again, and the whole batch is always uploaded first: every range
            // left has the refusal it came from. The other text only keeps a reason non-empty.
            let refusal = from.map_or_else(
                || "no block of them (they were never uploaded)".to_string(),
                |r| format!("a block of {} rows holding them ({})", r.rows, r.message),
            );
            let why = format!(
                "the Tunnel refused {refusal}; narrowing the batch down to the refused rows \
                 stopped after {spent} block uploads (the limit per batch, kept within one \
                 upload session's block ids), so these {len} rows were lettered together \
                 without being tried alone and may include rows the Tunnel takes: check the \
                 rows against the staging table's columns (nearly every row of the batch was \
                 refused), then replay this letter"
            );
            self.refused
                .extend((start..start + len).map(|row| (row, why.clone())));
        }
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

/// How many times one batch opens a new session because its session went stale
/// ([`Class::NewSession`]) before the error goes to the runtime (which submits the batch again).
const RENEWALS: usize = 3;

/// One batch's upload session: its epoch (the staging partition it writes), its id, the block
/// ids written, the next id.
struct Session {
    epoch: u64,
    partition: String,
    id: String,
    blocks: Vec<u64>,
    next_id: u64,
}

impl Session {
    fn at<'a>(&'a self, staging: &'a str) -> Tunnel<'a> {
        Tunnel {
            table: staging,
            partition: Some(&self.partition),
        }
    }
}

/// Opens a session on epoch `epoch`'s partition and writes the rows `accepted` so far (refused
/// nothing before) as its first block: a stale session's rows are written again in a new one,
/// the batch staying atomic.
async fn open(
    client: &Client,
    staging: &str,
    epoch: u64,
    encoder: &RecordEncoder,
    records: &RecordBatch,
    accepted: &[Range<usize>],
) -> Result<Session, CallError> {
    let partition = table::tunnel_partition(epoch);
    let id = client
        .create_upload(Tunnel {
            table: staging,
            partition: Some(&partition),
        })
        .await?
        .id;
    let mut s = Session {
        epoch,
        partition,
        id,
        blocks: Vec::new(),
        next_id: 0,
    };
    if !accepted.is_empty() {
        let mut block = BlockWriter::new();
        for r in accepted {
            encoder.write(records, r.clone(), &mut block);
        }
        client
            .put_block(s.at(staging), &s.id, 0, block.finish().into())
            .await?;
        s.blocks.push(0);
        s.next_id = 1;
    }
    Ok(s)
}

/// Uploads `records` into the current epoch's partition of `staging` and commits the session,
/// holding `epochs` for the commit (no move runs between a commit and the epoch it joins). A
/// session whose epoch a move took meanwhile is replaced, under that hold, by one of the
/// current epoch holding the rows accepted so far (its partition is moved, or dropped, or
/// about to be). A session made stale by a change of its table (`TableModified`) or by
/// replication (`DataVersionConflict`) is replaced at once by a new one holding those rows.
pub async fn stage(
    client: &Client,
    staging: &str,
    records: &RecordBatch,
    epochs: &tokio::sync::Mutex<Epochs>,
) -> Result<Staged, SinkError> {
    let epoch = epochs.lock().await.current();
    let partition = table::tunnel_partition(epoch);
    let first = client
        .create_upload(Tunnel {
            table: staging,
            partition: Some(&partition),
        })
        .await
        .map_err(|e| e.error)?;
    let encoder = RecordEncoder::new(&first.columns, records.schema()).map_err(|e| {
        SinkError::new(
            SinkErrorKind::Encode,
            false,
            format!("MaxCompute staging table {staging} does not fit the batch: {e}"),
        )
    })?;
    let mut session = Session {
        epoch,
        partition,
        id: first.id,
        blocks: Vec::new(),
        next_id: 0,
    };
    let mut renewals = 0usize;
    let mut plan = Narrowing::new(records.num_rows());
    let mut accepted: Vec<Range<usize>> = Vec::new();
    while let Some(range) = plan.next_block() {
        let mut block = BlockWriter::new();
        encoder.write(records, range.clone(), &mut block);
        let id = session.next_id;
        session.next_id += 1;
        match client
            .put_block(session.at(staging), &session.id, id, block.finish().into())
            .await
        {
            Ok(()) => {
                session.blocks.push(id);
                accepted.push(range);
            }
            Err(CallError {
                class: Class::RowsRefused,
                error,
            }) => plan.refused(range, error.message()),
            Err(e) if e.class == Class::NewSession && renewals < RENEWALS => {
                renewals += 1;
                tracing::info!(error = %e, "MaxCompute: upload session stale; writing its rows in a new one");
                plan.again(range);
                let now = epochs.lock().await.current();
                session = open(client, staging, now, &encoder, records, &accepted)
                    .await
                    .map_err(|e| e.error)?;
            }
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
    if accepted.is_empty() {
        return Ok(Staged {
            epoch: None,
            rejected,
        });
    }
    // A new session for the accepted rows in `epoch` (the old one's epoch was moved, or it
    // went stale).
    let (enc, acc) = (&encoder, &accepted);
    let reopen = move |epoch| async move {
        (open(client, staging, epoch, enc, records, acc).await).map_err(|e| e.error)
    };
    let mut held = epochs.lock().await;
    if session.epoch != held.current() {
        // A move took the session's epoch: its partition is moved (and dropped, or about to
        // be). With the hold, the current epoch's partition exists and no move starts before
        // this commit.
        tracing::debug!(
            from = session.epoch,
            to = held.current(),
            "MaxCompute: a move took the upload's epoch; writing its rows into the current one"
        );
        session = reopen(held.current()).await?;
    }
    loop {
        let Err(e) = client
            .commit_upload(session.at(staging), &session.id, &session.blocks)
            .await
        else {
            break;
        };
        if e.class == Class::NewSession && renewals < RENEWALS {
            // The table changed since the session opened: the epoch lock held now, no move
            // runs before the new session commits.
            renewals += 1;
            tracing::info!(error = %e, "MaxCompute: upload session stale at commit; writing its rows in a new one");
            session = reopen(held.current()).await?;
            continue;
        }
        // The answer may be lost after the service applied the commit: a session it reports
        // closed is committed (pyodps's `Closed`); anything else is not, and the runtime
        // submits the batch again into a new session.
        let closed = client
            .upload_status(session.at(staging), &session.id)
            .await
            .is_ok_and(|s| s.status.eq_ignore_ascii_case("closed"));
        if !closed {
            return Err(e.error);
        }
        break;
    }
    let joined = held.committed(session.epoch);
    Ok(Staged {
        epoch: joined,
        rejected,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    use proptest::prelude::*;

    /// Runs a plan with `budget` against a service that refuses any block holding a row of
    /// `bad`; returns (blocks accepted, rows refused, uploads).
    fn run_with(
        rows: usize,
        bad: &[usize],
        budget: usize,
    ) -> (Vec<Range<usize>>, Vec<usize>, usize) {
        let mut plan = Narrowing::with_budget(rows, budget);
        let mut ok = Vec::new();
        while let Some(r) = plan.next_block() {
            if bad.iter().any(|b| r.contains(b)) {
                plan.refused(r, "bad");
            } else {
                ok.push(r);
            }
        }
        let uploads = plan.uploads();
        (
            ok,
            plan.into_refused().into_iter().map(|r| r.0).collect(),
            uploads,
        )
    }

    fn run(rows: usize, bad: &[usize]) -> (Vec<Range<usize>>, Vec<usize>) {
        let (ok, refused, _) = run_with(rows, bad, NARROWING_UPLOADS);
        (ok, refused)
    }

    #[test]
    fn the_budget_stays_within_one_sessions_block_ids() {
        const { assert!((NARROWING_UPLOADS as u64) < SESSION_BLOCK_IDS - 1) };
    }

    #[test]
    fn a_batch_refused_row_by_row_is_settled_within_the_budget() {
        let all: Vec<usize> = (0..50_000).collect();
        let (ok, refused, uploads) = run_with(50_000, &all, NARROWING_UPLOADS);
        assert!(ok.is_empty());
        assert_eq!(refused, all, "every row refused");
        assert_eq!(uploads, NARROWING_UPLOADS + 1);
        // 5% refused: bounded too, every bad row among the refused, most good rows staged.
        let bad: Vec<usize> = (0..50_000).filter(|r| r % 20 == 7).collect();
        let (ok, refused, uploads) = run_with(50_000, &bad, NARROWING_UPLOADS);
        assert!(uploads <= NARROWING_UPLOADS + 1);
        assert!(bad.iter().all(|b| refused.binary_search(b).is_ok()));
        let staged: usize = ok.iter().map(|r| r.len()).sum();
        assert_eq!(staged + refused.len(), 50_000);
    }

    #[test]
    fn rows_put_back_after_a_stale_session_are_uploaded_again_even_with_the_budget_spent() {
        let mut plan = Narrowing::with_budget(8, 1);
        assert_eq!(plan.next_block(), Some(0..8));
        plan.refused(0..8, "InvalidRecord: row 5");
        assert_eq!(plan.next_block(), Some(0..4));
        plan.again(0..4);
        assert_eq!(plan.next_block(), Some(0..4), "tried again, not lettered");
        assert_eq!(
            plan.next_block(),
            None,
            "the budget of one narrowing upload is spent"
        );
        let refused = plan.into_refused();
        let rows: Vec<usize> = refused.iter().map(|r| r.0).collect();
        assert_eq!(
            rows,
            [4, 5, 6, 7],
            "only the part of a refused block left unsplit"
        );
        let why = &refused[0].1;
        for expected in [
            "the Tunnel refused a block of 8 rows holding them (InvalidRecord: row 5)",
            "narrowing the batch down to the refused rows stopped after 2 block uploads",
            "these 4 rows were lettered together without being tried alone",
            "check the rows against the staging table's columns",
            "then replay this letter",
        ] {
            assert!(why.contains(expected), "missing {expected:?} in {why:?}");
        }
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

    proptest! {
        /// Within any budget: uploads bounded by it, every row staged or refused exactly once,
        /// every bad row refused; a plan that finished within its budget refused exactly the bad
        /// rows.
        #[test]
        fn narrowing_is_bounded_and_exact_when_it_finishes(
            rows in 0usize..2_000,
            density in 0.0f64..1.0,
            seed in any::<u64>(),
            budget in 0usize..300,
        ) {
            let mut rng = fastrand::Rng::with_seed(seed);
            let bad: Vec<usize> = (0..rows).filter(|_| rng.f64() < density).collect();
            let (ok, refused, uploads) = run_with(rows, &bad, budget);
            prop_assert!(uploads <= budget + 1);
            let mut seen: Vec<usize> = ok.iter().flat_map(|r| r.clone()).chain(refused.iter().copied()).collect();
            seen.sort_unstable();
            prop_assert_eq!(seen, (0..rows).collect::<Vec<_>>());
            prop_assert!(bad.iter().all(|b| refused.binary_search(b).is_ok()));
            let mut plan = Narrowing::with_budget(rows, budget);
            let finished = loop {
                match plan.next_block() {
                    Some(r) if bad.iter().any(|b| r.contains(b)) => plan.refused(r, "bad"),
                    Some(_) => {}
                    None => break plan.todo.is_empty(),
                }
            };
            if finished {
                prop_assert_eq!(&refused, &bad);
            }
        }
    }
}
