//! Dead letters: logs the decoder rejected (and, with the BigQuery sink, rows BigQuery rejected)
//! go to a dead-letter target with their reason. Nothing is dropped silently: the source offset
//! of a dead-lettered log is committed only after the target acknowledged the write, which the
//! target reports through an [`Outcome`] callback.
//!
//! Targets:
//! - [`kafka::KafkaTarget`]: a Kafka topic (default `<topic>-dlq`); value = the original bytes,
//!   same key; headers `x-error-kind`, `x-error-code`, `x-error-message`, `x-source-topic`,
//!   `x-source-partition`, `x-source-offset`.
//! - [`file::FileTarget`]: a local file in the length-delimited framing (replayable with
//!   `convert` or `run --replay`) plus a `<path>.reasons.jsonl` sidecar, one JSON line per
//!   message; acknowledged after `fsync`.

pub mod file;
pub mod kafka;

use std::sync::Arc;

/// What kind of rejection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The log could not be decoded into rows.
    Decode,
    /// The sink rejected a row.
    Row,
}

impl Kind {
    /// Header value of `x-error-kind`.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Decode => "decode",
            Kind::Row => "row",
        }
    }
}

/// One rejected message, with where it came from and why.
#[derive(Debug, Clone)]
pub struct DeadLetter {
    /// Source topic.
    pub topic: String,
    /// Source partition.
    pub partition: i32,
    /// Source offset.
    pub offset: i64,
    /// The assignment epoch of the partition when the letter was made (see
    /// `pipeline::ledger`): a letter from an earlier assignment holds no offset of the current one.
    pub epoch: u64,
    /// Original key, if any.
    pub key: Option<Vec<u8>>,
    /// Original bytes (or, for a row, the row as JSON).
    pub payload: Vec<u8>,
    /// Kind.
    pub kind: Kind,
    /// Bounded error code (e.g. `shape_mismatch`).
    pub code: &'static str,
    /// Precise reason.
    pub message: String,
    /// Write a claim check instead of the payload (set by the pipeline after the target
    /// refused the whole letter as too large; a target may also decide so itself).
    pub claim_check: bool,
}

impl DeadLetter {
    /// The letter for a log that could not be decoded (its epoch is the ledger's to set).
    pub fn undecodable(
        topic: &str,
        partition: i32,
        offset: i64,
        key: Option<&[u8]>,
        payload: &[u8],
        code: &'static str,
        message: String,
    ) -> Self {
        DeadLetter {
            topic: topic.to_owned(),
            partition,
            offset,
            epoch: 0,
            key: key.map(<[u8]>::to_vec),
            payload: payload.to_vec(),
            kind: Kind::Decode,
            code,
            message,
            claim_check: false,
        }
    }

    /// The memory this letter holds until it is written: its payload, key, message and topic,
    /// plus the struct itself (so that even empty letters count). This is what the pipeline
    /// counts against `batching.max_inflight_bytes` while the letter waits for its write.
    pub fn held_bytes(&self) -> usize {
        std::mem::size_of::<Self>()
            + self.payload.len()
            + self.key.as_ref().map_or(0, Vec::len)
            + self.message.len()
            + self.topic.len()
    }
}

/// The result of one dead-letter write, reported asynchronously.
#[derive(Debug)]
pub enum Outcome {
    /// Durably written: the source offset may be committed.
    Written {
        /// Source partition.
        partition: i32,
        /// Source offset.
        offset: i64,
        /// The letter's assignment epoch.
        epoch: u64,
        /// The letter's [`DeadLetter::held_bytes`], released from the in-flight budget.
        bytes: usize,
        /// Written as a claim check (the payload not copied): the payload's size.
        claim_check: Option<usize>,
    },
    /// Not written: the caller must send it again (as a claim check if it was too large);
    /// nothing past it is committed meanwhile.
    Failed {
        /// The dead letter, to be re-sent.
        letter: Box<DeadLetter>,
        /// What kind of failure (decides how it is sent again).
        failure: Failure,
        /// Why.
        error: String,
    },
}

/// Why a dead-letter write failed, which decides what the pipeline does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// The letter can never fit the target: send it again as a claim check, at once.
    TooLarge,
    /// The target cannot work until an operator acts (no permission, a missing topic that
    /// cannot be created, refused credentials): retried slowly; the partition stays
    /// uncommitted, loudly (metric, error log, `/readyz` unready).
    NeedsOperator,
    /// Anything else (a broker down, a full disk, a timeout): retried soon.
    Transient,
}

impl Failure {
    /// Every failure class.
    pub const ALL: [Failure; 3] = [
        Failure::TooLarge,
        Failure::NeedsOperator,
        Failure::Transient,
    ];

    /// `"false"` for a failure only an operator can cure (it is retried, slowly, but retrying
    /// alone cannot make it succeed), else `"true"`: the metrics' `retryable` label.
    pub fn retryable(self) -> &'static str {
        if self == Failure::NeedsOperator {
            "false"
        } else {
            "true"
        }
    }

    /// Bounded code for metrics and logs.
    pub fn code(self) -> &'static str {
        match self {
            Failure::TooLarge => "too_large",
            Failure::NeedsOperator => "needs_operator",
            Failure::Transient => "transient",
        }
    }

    /// How long to wait before sending the letter again.
    pub fn retry_after(self) -> std::time::Duration {
        match self {
            Failure::TooLarge => std::time::Duration::ZERO,
            Failure::NeedsOperator => std::time::Duration::from_secs(10),
            Failure::Transient => std::time::Duration::from_secs(1),
        }
    }
}

/// Receives outcomes (called from the target's own thread).
pub type OutcomeFn = Arc<dyn Fn(Outcome) + Send + Sync>;

/// A dead-letter target.
pub trait Target: Send {
    /// Starts writing `letter`; the outcome arrives through the target's [`OutcomeFn`].
    fn send(&mut self, letter: DeadLetter);
    /// Whether the target is usable (e.g. the DLQ topic exists or could be created).
    fn is_ready(&self) -> bool;
    /// Waits (bounded) until every sent letter has an outcome.
    fn flush(&mut self, timeout: std::time::Duration);
}
