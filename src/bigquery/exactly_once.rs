//! Exactly-once delivery: one COMMITTED write stream per Kafka partition, explicit row offsets,
//! and the stream's position kept in the Kafka offset commit's metadata.
//!
//! # Protocol (the runtime drives it; this module does the BigQuery side)
//! 1. On assignment of a partition, read the committed Kafka offset `O` and its metadata. If it
//!    holds a [`Checkpoint`] `{stream S, next_row R}`, call [`resume_partition`]: it **finalizes**
//!    `S`, which returns the final row count `N` of `S` and fences any previous owner (its
//!    appends now fail with FAILED_PRECONDITION, so it can acknowledge nothing more). Rows
//!    `[R, N)` of `S` came from messages at or after `O`: the runtime must drop exactly the first
//!    `N - R` rows it produces from `O` on ([`Resume::skip_rows`]). Then a new COMMITTED stream is
//!    created and written from offset 0 with [`AppendWriter::start_committed`].
//! 2. Every acknowledged batch reports [`AppendOutcome::stream_offsets`]; when the runtime commits
//!    Kafka offset `O'` (the message after the batch's last one), it stores
//!    `Checkpoint { stream, next_row: stream_offsets.end }` as that partition's metadata.
//!
//! # Guarantee and its limits
//! No row lands twice and none is lost, across crashes, restarts and rebalances, **provided**:
//! - the rows produced from a partition are a deterministic function of its messages (the same
//!   decoder and configuration on replay; rows that would be refused are dead-lettered *before*
//!   the writer — a refusal by BigQuery (`row_errors`, INVALID_ARGUMENT) stops the partition
//!   instead of dropping rows, and so does a row larger than a request may be);
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

/// Prefix of the metadata string (versioned).
const PREFIX: &str = "obs-bq1";

/// What is stored in a partition's Kafka offset commit metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoint {
    /// Full name of the COMMITTED write stream.
    pub stream: String,
    /// Rows of the stream that belong to messages before the committed Kafka offset.
    pub next_row: i64,
}

impl Checkpoint {
    /// `obs-bq1:<next_row>:<stream>`.
    pub fn to_metadata(&self) -> String {
        format!("{PREFIX}:{}:{}", self.next_row, self.stream)
    }

    /// Parses [`Self::to_metadata`]'s output; None for empty or foreign metadata.
    pub fn from_metadata(s: &str) -> Option<Self> {
        let rest = s.strip_prefix(PREFIX)?.strip_prefix(':')?;
        let (row, stream) = rest.split_once(':')?;
        let next_row: i64 = row.parse().ok().filter(|r| *r >= 0)?;
        (stream.contains("/streams/") && !stream.is_empty()).then(|| Checkpoint {
            stream: stream.to_string(),
            next_row,
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
        skip_rows = (row_count - cp.next_row) as u64;
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
        let cp = Checkpoint {
            stream: "projects/p/datasets/d/tables/t/streams/abc".into(),
            next_row: 1234,
        };
        assert_eq!(Checkpoint::from_metadata(&cp.to_metadata()), Some(cp));
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
        ] {
            assert_eq!(Checkpoint::from_metadata(m), None, "{m:?}");
        }
    }
}
