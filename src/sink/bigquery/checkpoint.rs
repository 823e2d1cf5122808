//! Exactly-once delivery: one COMMITTED write stream per Kafka partition, explicit row offsets,
//! and the stream's position kept in the Kafka offset commit's metadata.
//!
//! # Protocol (the runtime drives it; this module does the BigQuery side)
//! 1. On assignment of a partition, read the committed Kafka offset `O` and its metadata. If it
//!    holds a [`Checkpoint`] `{stream S, next_row R, carried C}`, call [`resume_partition`]: it
//!    **finalizes** `S`, which returns the final row count `N` of `S` and fences any previous
//!    owner (its appends now fail with FAILED_PRECONDITION, so it can acknowledge nothing more).
//!    Rows `[R, N)` of `S` came from messages at or after `O`, and so did `C` rows in streams
//!    finalized before `S`: the runtime must drop exactly the first `C + N - R` rows it produces
//!    from `O` on ([`Resume::skip_rows`]). Then a new COMMITTED stream `S'` is created.
//! 2. Before the first row goes into `S'`, the runtime commits the partition's first
//!    unacknowledged offset (`O`, or later when the logs from `O` on that precede the batch are
//!    already safe, i.e. dead letters written; never past one still being written) with
//!    `Checkpoint { S', next_row: 0, carried: C + N - R }` and waits for the broker's answer
//!    (`pipeline::Ledger::stream_opened` decides the offset). Only rowless logs lie between that
//!    offset and the batch, so the checkpoint holds there too.
//!    Without this, an owner that dies after writing to `S'` but before its first ordinary
//!    commit would leave `S'` unknown to the next owner, which would resume from `S` again and
//!    write `S'`'s rows a second time.
//!
//!    **Kept stream.** When the partition comes back to the process that wrote `S` last, and
//!    that process knows `S`'s exact length `L` (every append it made resolved, accepted), it
//!    keeps `S` instead: [`kept_stream_skip`] gives the same skip, `C + L - R`, and rows go on
//!    at row `L`. No registration is needed: the checkpoint already names `S`, so a crash leaves
//!    the next owner finalizing `S` and counting those rows. Only the process that created a
//!    stream appends to it, so the one way `S` can differ from what the process knows is that
//!    another owner finalized it (and died before recording its own stream). The first append
//!    at the explicit offset `L` is the fence: BigQuery refuses it on a finalized stream, or
//!    if the length differs, and until it is accepted nothing of the partition is acknowledged
//!    (a first batch with no row to append does not count as accepted), so the sink then takes
//!    step 1 as above, whose finalize returns the true length.
//! 3. Every acknowledged batch reports [`AppendOutcome::stream_offsets`](super::AppendOutcome::stream_offsets); when the runtime commits
//!    Kafka offset `O'` (the message after the batch's last one), it stores
//!    `Checkpoint { stream, next_row: stream_offsets.end, carried }` as that partition's
//!    metadata, `carried` being what is still to skip at `O'`.
//!
//! # Guarantee and its limits
//! No row lands twice and none is lost, across crashes, restarts and rebalances, **provided**:
//! - the rows produced from a partition are a deterministic function of its messages (the same
//!   decoder and configuration on replay; rows that would be refused are dead-lettered *before*
//!   the writer — a refusal by BigQuery (`row_errors`, INVALID_ARGUMENT) stops the partition
//!   instead of dropping rows, and so does a row larger than a request may be).
//!   The partition window (rows in expired partitions, or over a year ahead, are refused) is
//!   the one input that is not in the messages: it moves with the date. So each partition
//!   evaluates it at a *day* that every checkpoint carries, and that day changes only where a
//!   commit records the change before any row is evaluated at the new day: at the first
//!   batch of a new day whose first offset is the partition's first unacknowledged one (every
//!   earlier row acknowledged by every sink, the stream's length known, no replay pending), a
//!   registration commits that offset with `{stream, its length, 0, new day}`. Until then the
//!   old day holds, and a replay (any owner, any date) evaluates every row from the committed
//!   offset at the checkpoint's day, so it refuses exactly what the writer refused. (A row of
//!   the day that just expired, evaluated at the old day while the change waits, may still be
//!   refused by BigQuery, which stops the partition as any refusal does; its retry moves the
//!   day, since every earlier row is then acknowledged.);
//! - the Kafka commit carries the metadata (the local tansu broker drops it; librdkafka's
//!   MockCluster and real brokers keep it);
//! - BigQuery keeps the stream until resume: an unknown stream at resume is an error, never a
//!   guess.
//!
//! Within a stream: a request is re-sent unchanged (same offset, same rows) after a lost answer;
//! BigQuery's ALREADY_EXISTS then means that attempt landed and is counted as success — only for
//! such a re-send, since BigQuery checks where a request *starts* and would refuse a request
//! overlapping the stream's end whole. OUT_OF_RANGE is a gap: expected only behind a refused
//! request of the same connection (re-sent in order); otherwise the partition stops and nothing
//! is skipped.

use super::client::StorageClient;
use super::proto::{write_stream::Type as StreamType, WriteStream};
use super::TableRef;
use tonic::Status;

/// Prefix of the metadata string (versioned; `obs-bq2` had no `day`, `obs-bq1` no `carried`).
const PREFIX: &str = "obs-bq3";
const PREFIX_V2: &str = "obs-bq2";
const PREFIX_V1: &str = "obs-bq1";

/// What is stored in a partition's Kafka offset commit metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoint {
    /// Full name of the COMMITTED write stream.
    pub stream: String,
    /// Rows of the stream that belong to messages before the committed Kafka offset.
    pub next_row: i64,
    /// Rows of messages at or after the committed offset that are already in streams finalized
    /// before this one (they come first in the replay, before any row of `stream`).
    pub carried: u64,
    /// The day (UTC, days since the epoch) at which the partition window was evaluated for
    /// every row produced from the committed offset on: a replay refuses exactly the rows the
    /// writer refused, whatever the date at the replay. `None` in checkpoints written before
    /// the day was recorded (the replay then evaluates the window today).
    pub day: Option<i64>,
}

impl Checkpoint {
    /// `obs-bq3:<next_row>:<carried>:<day>:<stream>` (`day` empty when unknown).
    pub fn to_metadata(&self) -> String {
        let day = self.day.map(|d| d.to_string()).unwrap_or_default();
        format!(
            "{PREFIX}:{}:{}:{day}:{}",
            self.next_row, self.carried, self.stream
        )
    }

    /// Parses [`Self::to_metadata`]'s output (and the older `obs-bq2:<next_row>:<carried>:
    /// <stream>` and `obs-bq1:<next_row>:<stream>`); None for empty or foreign metadata.
    pub fn from_metadata(s: &str) -> Option<Self> {
        fn field(s: &str) -> Option<&str> {
            s.strip_prefix(':')
        }
        let (next_row, carried, day, stream) =
            if let Some(rest) = s.strip_prefix(PREFIX).and_then(field) {
                let (row, rest) = rest.split_once(':')?;
                let (carried, rest) = rest.split_once(':')?;
                let (day, stream) = rest.split_once(':')?;
                let day = match day {
                    "" => None,
                    d => Some(d.parse().ok()?),
                };
                (row, carried.parse().ok()?, day, stream)
            } else if let Some(rest) = s.strip_prefix(PREFIX_V2).and_then(field) {
                let (row, rest) = rest.split_once(':')?;
                let (carried, stream) = rest.split_once(':')?;
                (row, carried.parse().ok()?, None, stream)
            } else {
                let rest = s.strip_prefix(PREFIX_V1)?.strip_prefix(':')?;
                let (row, stream) = rest.split_once(':')?;
                (row, 0, None, stream)
            };
        let next_row: i64 = next_row.parse().ok().filter(|r| *r >= 0)?;
        stream.contains("/streams/").then(|| Checkpoint {
            stream: stream.to_string(),
            next_row,
            carried,
            day,
        })
    }
}

/// Where a partition resumes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resume {
    /// The new COMMITTED stream to write to (from offset 0).
    pub stream: String,
    /// Rows to drop from the start of the replay (already in the finalized stream).
    pub skip_rows: u64,
    /// The finalized previous stream and its final row count, if there was one.
    pub finalized: Option<(String, i64)>,
}

/// Resume failed; the partition must not be consumed.
#[derive(Debug, thiserror::Error)]
pub enum ExactlyOnceError {
    /// A BigQuery call failed.
    #[error("{op} failed: {status}")]
    Rpc {
        /// What was attempted.
        op: &'static str,
        /// The status.
        #[source]
        status: Status,
    },
    /// The checkpoint claims more rows than the stream holds.
    #[error(
        "stream {stream} holds {row_count} rows but the checkpoint says {next_row} were committed"
    )]
    Inconsistent {
        /// The stream.
        stream: String,
        /// Its final row count.
        row_count: i64,
        /// The checkpoint's row.
        next_row: i64,
    },
}

impl ExactlyOnceError {
    /// Retrying may help (transient BigQuery errors).
    pub fn is_retryable(&self) -> bool {
        match self {
            ExactlyOnceError::Rpc { status, .. } => {
                super::error::ErrorInfo::from_status(status).action() == super::error::Action::Retry
            }
            ExactlyOnceError::Inconsistent { .. } => false,
        }
    }
}

/// The rows to skip when a partition whose checkpoint `cp` was read at assignment keeps the
/// stream `stream`, which this process created and last appended to, and whose exact length it
/// knows (`len`: every append resolved, accepted). `None`: take the usual path (finalize, new
/// stream) — the checkpoint names another stream (another owner recorded its own), or claims
/// more rows than the stream holds.
///
/// Rows `[next_row, len)` of the stream came from messages at or after the committed offset,
/// and so did `carried` rows of streams before it: the same count a finalize would give, since
/// nobody else appends to the stream.
pub fn kept_stream_skip(cp: &Checkpoint, stream: &str, len: i64) -> Option<u64> {
    if cp.stream != stream || len < cp.next_row {
        return None;
    }
    Some(cp.carried + (len - cp.next_row) as u64)
}

/// Finalizes the checkpoint's stream (fencing its previous owner) and creates a new COMMITTED
/// stream for the partition. See the module docs.
pub async fn resume_partition(
    client: &StorageClient,
    table: &TableRef,
    prior: Option<&Checkpoint>,
) -> Result<Resume, ExactlyOnceError> {
    let mut skip_rows = 0;
    let mut finalized = None;
    if let Some(cp) = prior {
        let resp = client
            .finalize_write_stream(&cp.stream)
            .await
            .map_err(|status| ExactlyOnceError::Rpc {
                op: "FinalizeWriteStream",
                status,
            })?;
        let row_count = resp.row_count;
        if row_count < cp.next_row {
            return Err(ExactlyOnceError::Inconsistent {
                stream: cp.stream.clone(),
                row_count,
                next_row: cp.next_row,
            });
        }
        skip_rows = cp.carried + (row_count - cp.next_row) as u64;
        finalized = Some((cp.stream.clone(), row_count));
    }
    let stream = client
        .create_write_stream(
            &table.path(),
            WriteStream {
                r#type: StreamType::Committed as i32,
                ..Default::default()
            },
        )
        .await
        .map_err(|status| ExactlyOnceError::Rpc {
            op: "CreateWriteStream",
            status,
        })?;
    // CreateWriteStream is under a per-project quota: this counter says how fast we use it.
    metrics::counter!(super::metrics::STREAMS_CREATED_TOTAL).increment(1);
    Ok(Resume {
        stream: stream.name,
        skip_rows,
        finalized,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checkpoints_round_trip_through_metadata() {
        for day in [Some(20_433), None] {
            let cp = Checkpoint {
                stream: "projects/p/datasets/d/tables/t/streams/abc".into(),
                next_row: 1234,
                carried: 56,
                day,
            };
            assert_eq!(Checkpoint::from_metadata(&cp.to_metadata()), Some(cp));
        }
        assert_eq!(
            Checkpoint::from_metadata("obs-bq2:7:3:projects/p/datasets/d/tables/t/streams/s"),
            Some(Checkpoint {
                stream: "projects/p/datasets/d/tables/t/streams/s".into(),
                next_row: 7,
                carried: 3,
                day: None,
            })
        );
        assert_eq!(
            Checkpoint::from_metadata("obs-bq1:7:projects/p/datasets/d/tables/t/streams/s"),
            Some(Checkpoint {
                stream: "projects/p/datasets/d/tables/t/streams/s".into(),
                next_row: 7,
                carried: 0,
                day: None,
            })
        );
    }

    /// A partition's history in the model: `rows[i]` rows of message `i`; the stream `S` holds
    /// `before` rows of messages before the committed offset `o`, then the rows of messages
    /// `[o + a, o + a + b)`, while the rows of messages `[o, o + a)` are in streams before `S`
    /// (`carried`). A resume from `o` keeping `S` must drop exactly the rows of messages
    /// `[o, o + a + b)` from the replay (then every row is in BigQuery once), and only when the
    /// checkpoint names `S` and `S` holds at least its row.
    #[test]
    fn a_kept_stream_skips_exactly_the_replayed_rows_it_and_earlier_streams_hold() {
        use proptest::prelude::*;
        let cfg = ProptestConfig::with_cases(512);
        proptest!(cfg, |(rows in prop::collection::vec(0u64..4, 1..40),
                         o_frac in 0.0f64..1.0, a_frac in 0.0f64..1.0, b_frac in 0.0f64..1.0,
                         before in 0i64..50, other in any::<bool>(), short in 0i64..3)| {
            let n = rows.len();
            let o = (o_frac * n as f64) as usize;
            let a = (a_frac * (n - o) as f64) as usize;
            let b = (b_frac * (n - o - a) as f64) as usize;
            let sum = |r: std::ops::Range<usize>| rows[r].iter().sum::<u64>();
            let carried = sum(o..o + a);
            let len = before + sum(o + a..o + a + b) as i64;
            let s = "projects/p/datasets/d/tables/t/streams/s";
            let cp = Checkpoint { stream: s.into(), next_row: before, carried, day: Some(1) };
            let skip = kept_stream_skip(&cp, s, len);
            prop_assert_eq!(skip, Some(sum(o..o + a + b)));
            // The replay from `o`, minus the skip, is exactly the rows not yet written.
            let replay: Vec<usize> = (o..n).flat_map(|m| std::iter::repeat_n(m, rows[m] as usize)).collect();
            let rest = &replay[skip.unwrap_or(0) as usize..];
            prop_assert!(rest.iter().all(|m| *m >= o + a + b));
            prop_assert_eq!(rest.len() as u64, sum(o + a + b..n));
            // Another owner's stream, or a stream shorter than the checkpoint: the usual path.
            let theirs = "projects/p/datasets/d/tables/t/streams/theirs";
            prop_assert_eq!(kept_stream_skip(&cp, theirs, len), None);
            if other {
                let cp = Checkpoint { stream: theirs.into(), ..cp.clone() };
                prop_assert_eq!(kept_stream_skip(&cp, s, len), None);
            }
            prop_assert_eq!(kept_stream_skip(&cp, s, before - 1 - short), None);
        });
    }

    #[test]
    fn foreign_metadata_is_not_a_checkpoint() {
        for m in [
            "",
            "obs-bq1",
            "obs-bq1:x:projects/p/streams/s",
            "obs-bq1:-1:p/streams/s",
            "other:1:p/streams/s",
            "obs-bq1:5:",
            "obs-bq2:5:x:p/streams/s",
            "obs-bq2:5:p/streams/s",
            "obs-bq3:5:0:p/streams/s",
            "obs-bq3:5:0:x:p/streams/s",
        ] {
            assert_eq!(Checkpoint::from_metadata(m), None, "{m:?}");
        }
    }
}
