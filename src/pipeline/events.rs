//! What happens in the pipeline, one type per kind of event. Each event emits its metric and its
//! log line together (rate-limited where a flood is possible), so the two never drift apart and
//! a call site says what happened, not how it is reported. Metric names and labels are those of
//! [`crate::metrics::names`] (Merlin's dashboards and `deploy/grafana-dashboard.json` use them).

use crate::deadletter::Failure;
use crate::metrics::names;
use crate::sink::SinkError;
use std::time::{Duration, Instant};

/// Counters kept locally and published once per batch (telemetry is never per message).
#[derive(Default)]
pub(crate) struct Counts {
    pub(crate) messages: u64,
    pub(crate) bytes: u64,
    pub(crate) rows: u64,
}

/// Totals since start (for summaries).
#[derive(Default, Debug, Clone, Copy)]
pub(crate) struct Totals {
    pub(crate) messages: u64,
    pub(crate) rows: u64,
    pub(crate) dead_letters: u64,
}

/// Logs at most `burst` lines per window, then a summary of what was suppressed.
pub(crate) struct RateLimit {
    window: Instant,
    emitted: u32,
    suppressed: u64,
}

impl RateLimit {
    pub(crate) fn new() -> Self {
        RateLimit {
            window: Instant::now(),
            emitted: 0,
            suppressed: 0,
        }
    }

    /// Whether to log now (at most 10 lines per 10 s).
    pub(crate) fn allow(&mut self, now: Instant) -> bool {
        if now.duration_since(self.window) >= Duration::from_secs(10) {
            if self.suppressed > 0 {
                tracing::warn!(
                    suppressed = self.suppressed,
                    "log lines suppressed in the last window"
                );
            }
            self.window = now;
            self.emitted = 0;
            self.suppressed = 0;
        }
        if self.emitted < 10 {
            self.emitted += 1;
            true
        } else {
            self.suppressed += 1;
            false
        }
    }
}

/// The decoder rejected a log; it goes to the dead-letter target.
pub(crate) struct LogRejected<'a> {
    pub(crate) topic: &'a str,
    pub(crate) partition: i32,
    pub(crate) offset: i64,
    pub(crate) code: &'static str,
    pub(crate) reason: &'a str,
}

impl LogRejected<'_> {
    pub(crate) fn emit(&self, limit: &mut RateLimit, now: Instant) {
        metrics::counter!(names::DEAD_LETTERS, names::KIND => "decode", names::REASON => self.code)
            .increment(1);
        super::progress::COUNTERS.dead_lettered();
        if limit.allow(now) {
            tracing::warn!(topic = %self.topic, partition = self.partition, offset = self.offset,
                code = self.code, reason = %self.reason, "log rejected; dead-lettered");
        }
    }
}

/// A sink refused one row for good; it goes to the dead-letter target.
pub(crate) struct RowRejected<'a> {
    pub(crate) sink: &'static str,
    pub(crate) partition: i32,
    pub(crate) offset: i64,
    pub(crate) row: usize,
    pub(crate) code: &'static str,
    pub(crate) reason: &'a str,
}

impl RowRejected<'_> {
    pub(crate) fn emit(&self, limit: &mut RateLimit, now: Instant) {
        metrics::counter!(names::DEAD_LETTERS, names::KIND => "row", names::REASON => self.code)
            .increment(1);
        super::progress::COUNTERS.dead_lettered();
        if limit.allow(now) {
            tracing::warn!(sink = self.sink, partition = self.partition, offset = self.offset,
                row = self.row, code = self.code, reason = %self.reason,
                "row rejected by the sink; dead-lettered");
        }
    }
}

/// A dead-letter write failed. Too large: it is sent again at once as a claim check. Otherwise
/// it is sent again later and its offset stays uncommitted: soon for a transient failure, slowly
/// for one only an operator can fix (no permission, a missing topic that cannot be created).
pub(crate) struct DeadLetterFailed<'a> {
    pub(crate) topic: &'a str,
    pub(crate) partition: i32,
    pub(crate) offset: i64,
    pub(crate) failure: Failure,
    pub(crate) error: &'a str,
}

impl DeadLetterFailed<'_> {
    pub(crate) fn emit(&self, limit: &mut RateLimit, now: Instant) {
        metrics::counter!(names::DEAD_LETTER_WRITE_ERRORS,
            names::ERROR_CODE => self.failure.code(), names::RETRYABLE => self.failure.retryable())
        .increment(1);
        if !limit.allow(now) {
            return;
        }
        match self.failure {
            Failure::TooLarge => tracing::warn!(topic = %self.topic, partition = self.partition,
                offset = self.offset, error = %self.error,
                "dead letter too large for the target; writing a claim check instead"),
            Failure::NeedsOperator => tracing::error!(topic = %self.topic,
                partition = self.partition, offset = self.offset, error = %self.error,
                "dead-letter target unusable until an operator acts; the partition stays \
                 uncommitted from this offset and the letter is retried"),
            Failure::Transient => tracing::error!(topic = %self.topic, partition = self.partition,
                offset = self.offset, error = %self.error,
                "dead-letter write failed; retrying, nothing past it is committed"),
        }
    }
}

/// A dead letter too large for its target was written as a claim check: the payload is not
/// copied; it stays in the source topic at this position until its retention.
pub(crate) struct ClaimCheckWritten<'a> {
    pub(crate) topic: &'a str,
    pub(crate) partition: i32,
    pub(crate) offset: i64,
    pub(crate) original_bytes: usize,
}

impl ClaimCheckWritten<'_> {
    pub(crate) fn emit(&self, limit: &mut RateLimit, now: Instant) {
        metrics::counter!(names::DEAD_LETTER_CLAIM_CHECKS).increment(1);
        if limit.allow(now) {
            tracing::error!(topic = %self.topic, partition = self.partition, offset = self.offset,
                original_bytes = self.original_bytes,
                "dead letter written as a claim check: its payload was not copied; fetch it from \
                 the source topic at this partition and offset before its retention ends");
        }
    }
}

/// Bytes held by dead letters waiting for their write changed.
pub(crate) struct PendingLetters(pub(crate) usize);

impl PendingLetters {
    pub(crate) fn emit(&self) {
        metrics::gauge!(names::DEAD_LETTER_PENDING_BYTES).set(self.0 as f64);
    }
}

/// A batch left the batcher for the sinks. Carries the consumption counted since the last batch
/// (telemetry is per batch, never per message).
pub(crate) struct BatchFlushed {
    pub(crate) reason: &'static str,
    pub(crate) rows: usize,
    pub(crate) bytes: usize,
    pub(crate) messages: u64,
    pub(crate) input_bytes: u64,
    pub(crate) rows_decoded: u64,
    pub(crate) inflight_bytes: usize,
}

impl BatchFlushed {
    pub(crate) fn emit(&self) {
        metrics::histogram!(names::FLUSH_ROWS, names::REASON => self.reason)
            .record(self.rows as f64);
        metrics::histogram!(names::FLUSH_BYTES).record(self.bytes as f64);
        metrics::counter!(names::MESSAGES_CONSUMED).increment(self.messages);
        super::progress::COUNTERS.consumed(self.messages);
        metrics::counter!(names::BYTES_CONSUMED).increment(self.input_bytes);
        metrics::counter!(names::ROWS_DECODED).increment(self.rows_decoded);
        InflightBytes(self.inflight_bytes).emit();
        // At debug level: where intake stood against the consumer's own log lines (librdkafka's
        // `debug` lines come through the same thread, in order).
        tracing::debug!(
            reason = self.reason,
            rows = self.rows,
            messages = self.messages,
            "batch flushed"
        );
    }
}

/// Arrow bytes of unacknowledged batches changed.
pub(crate) struct InflightBytes(pub(crate) usize);

impl InflightBytes {
    pub(crate) fn emit(&self) {
        metrics::gauge!(names::INFLIGHT_BYTES).set(self.0 as f64);
    }
}

/// A sink write failed with an error that retrying may fix; it is retried after `wait`.
pub(crate) struct SinkRetrying<'a> {
    pub(crate) sink: &'static str,
    pub(crate) attempt: u32,
    pub(crate) wait: Duration,
    pub(crate) error: &'a SinkError,
}

impl SinkRetrying<'_> {
    pub(crate) fn emit(&self) {
        metrics::counter!(names::SINK_ERRORS, names::SINK => self.sink,
            names::ERROR_CODE => self.error.kind.code(), names::RETRYABLE => "true")
        .increment(1);
        tracing::warn!(sink = self.sink, attempt = self.attempt,
            wait_ms = self.wait.as_millis() as u64, error = %self.error, "sink write failed; retrying");
    }
}

/// A sink refuses a batch until an operator fixes the cause; it is tried again after `wait`.
pub(crate) struct SinkNeedsFix<'a> {
    pub(crate) sink: &'static str,
    pub(crate) wait: Duration,
    pub(crate) error: &'a SinkError,
}

impl SinkNeedsFix<'_> {
    pub(crate) fn emit(&self) {
        metrics::counter!(names::SINK_ERRORS, names::SINK => self.sink,
            names::ERROR_CODE => self.error.kind.code(), names::RETRYABLE => "false")
        .increment(1);
        tracing::error!(sink = self.sink, error = %self.error, wait_s = self.wait.as_secs(),
            "sink refuses the batch until the cause is fixed; it stays unacknowledged and is tried again");
    }
}

/// One sink has a batch.
pub(crate) struct SinkWrote {
    pub(crate) sink: &'static str,
    pub(crate) rows: usize,
    pub(crate) latency: Duration,
}

impl SinkWrote {
    pub(crate) fn emit(&self) {
        metrics::histogram!(names::SINK_LATENCY, names::SINK => self.sink)
            .record(self.latency.as_secs_f64());
        metrics::counter!(names::ROWS_WRITTEN, names::SINK => self.sink)
            .increment(self.rows as u64);
    }
}

/// Every sink has a batch: Merlin's two metrics, and the flush latency.
pub(crate) struct BatchAcknowledged<'a> {
    pub(crate) labels: &'a ModelLabels,
    pub(crate) messages: usize,
    /// Newest `request_timestamp` of the batch, in unix seconds.
    pub(crate) newest: Option<f64>,
    pub(crate) since_opened: Duration,
}

/// Merlin's metric labels.
#[derive(Clone)]
pub(crate) struct ModelLabels {
    pub(crate) model_id: String,
    pub(crate) model_version: String,
    pub(crate) project: String,
}

impl BatchAcknowledged<'_> {
    pub(crate) fn emit(&self) {
        let l = self.labels;
        metrics::histogram!(names::FLUSH_LATENCY).record(self.since_opened.as_secs_f64());
        metrics::counter!(names::PREDICTION_LOGS_PROCESSED, names::MODEL_ID => l.model_id.clone(),
            names::MODEL_VERSION => l.model_version.clone(), names::MERLIN_PROJECT => l.project.clone())
        .increment(self.messages as u64);
        super::progress::COUNTERS.acknowledged(self.messages as u64);
        if let Some(ts) = self.newest {
            metrics::gauge!(names::LAST_PROCESSED_TIMESTAMP, names::MODEL_ID => l.model_id.clone(),
                names::MODEL_VERSION => l.model_version.clone(), names::MERLIN_PROJECT => l.project.clone())
            .set(ts);
        }
    }
}

/// A revoke left this many messages uncommitted that a sink had already written, because
/// another sink had not acknowledged them: the next owner writes them again (duplicates by
/// design, docs/reliability.md).
pub(crate) struct RevokeLeftWritten(pub(crate) usize);

impl RevokeLeftWritten {
    pub(crate) fn emit(&self) {
        if self.0 > 0 {
            metrics::counter!(names::REVOKE_WRITTEN_UNCOMMITTED).increment(self.0 as u64);
            tracing::info!(messages = self.0, "a revoked partition's messages already written by a sink were left uncommitted (another sink had not acknowledged them); the next owner writes them again");
        }
    }
}

/// Offsets were committed (or the commit failed and is retried at the next interval).
pub(crate) enum Committed<'a> {
    Done,
    Failed(&'a rdkafka::error::KafkaError),
}

impl Committed<'_> {
    pub(crate) fn emit(&self) {
        match self {
            Committed::Done => {
                metrics::counter!(names::COMMITS).increment(1);
                super::progress::COUNTERS.committed();
            }
            Committed::Failed(e) => {
                metrics::counter!(names::COMMIT_FAILURES).increment(1);
                tracing::warn!(error = %e, "offset commit failed; retried at the next interval");
            }
        }
    }
}

/// Exactly-once: a partition held for its checkpoint (see `checkpoints.rs`).
pub(crate) enum CheckpointHeld<'a> {
    /// The read failed; the partition stays paused and the read is retried.
    Unread(i32, &'a str),
    /// The metadata does not parse; the partition stays stopped until revoked.
    Unparseable(i32, &'a str),
}

impl CheckpointHeld<'_> {
    pub(crate) fn emit(&self) {
        match self {
            CheckpointHeld::Unread(p, e) => {
                metrics::counter!(names::CHECKPOINT_PROBLEMS, names::REASON => "unread")
                    .increment(1);
                tracing::warn!(partition = p, error = %e, "exactly-once: cannot read the partition's checkpoint; it stays paused and the read is retried");
            }
            CheckpointHeld::Unparseable(p, why) => {
                metrics::counter!(names::CHECKPOINT_PROBLEMS, names::REASON => "unparseable")
                    .increment(1);
                tracing::error!(partition = p, error = %why, "exactly-once: the partition's checkpoint does not parse; the partition is stopped (paused until revoked) rather than started on a guess");
            }
        }
    }
}

/// Intake paused (`partitions` paused: the in-flight budget is used up) or resumed (0).
pub(crate) struct Intake {
    pub(crate) paused_partitions: usize,
    /// Whether this changes the state (a re-pause after a rebalance logs nothing).
    pub(crate) changed: bool,
    /// Arrow bytes of batches in flight.
    pub(crate) batch_bytes: usize,
    /// Bytes of dead letters waiting for their write.
    pub(crate) letter_bytes: usize,
    /// Bytes of the bookkeeping of messages not yet committable (staged rows' among them).
    pub(crate) bookkeeping_bytes: usize,
    /// Messages staged, waiting for their sink's move.
    pub(crate) staged_messages: usize,
}

impl Intake {
    /// What uses up the budget, in words: the largest of its parts.
    fn held_by(&self) -> &'static str {
        if self.bookkeeping_bytes >= self.batch_bytes.max(self.letter_bytes) {
            "the bookkeeping of messages not yet committable, mostly staged rows waiting for              their sink's move (moved early from half the budget on)"
        } else if self.batch_bytes >= self.letter_bytes {
            "batches waiting for the sinks"
        } else {
            "dead letters waiting for their write"
        }
    }

    pub(crate) fn emit(&self) {
        metrics::gauge!(names::PAUSED_PARTITIONS).set(self.paused_partitions as f64);
        PendingLetters(self.letter_bytes).emit();
        Bookkeeping(self.bookkeeping_bytes).emit();
        if self.changed {
            if self.paused_partitions > 0 {
                tracing::info!(
                    batch_bytes = self.batch_bytes,
                    letter_bytes = self.letter_bytes,
                    bookkeeping_bytes = self.bookkeeping_bytes,
                    staged_messages = self.staged_messages,
                    held_by = self.held_by(),
                    "in-flight budget used up: partitions paused"
                );
            } else {
                tracing::info!(
                    batch_bytes = self.batch_bytes,
                    letter_bytes = self.letter_bytes,
                    bookkeeping_bytes = self.bookkeeping_bytes,
                    "in-flight budget available: partitions resumed"
                );
            }
        }
    }
}

/// The bookkeeping of messages not yet committable changed.
pub(crate) struct Bookkeeping(pub(crate) usize);

impl Bookkeeping {
    pub(crate) fn emit(&self) {
        metrics::gauge!(names::BOOKKEEPING_BYTES).set(self.0 as f64);
    }
}

/// The bookkeeping of staged rows reached its share of the budget: the staging sinks are
/// asked to move now. Emitted once per crossing (the requests repeated while it stays over are
/// not).
pub(crate) struct EarlyMove {
    pub(crate) bookkeeping_bytes: usize,
    pub(crate) staged_messages: usize,
    pub(crate) budget: usize,
}

impl EarlyMove {
    pub(crate) fn emit(&self) {
        metrics::counter!(names::EARLY_MOVES).increment(1);
        tracing::info!(
            bookkeeping_bytes = self.bookkeeping_bytes,
            staged_messages = self.staged_messages,
            max_inflight_bytes = self.budget,
            "the bookkeeping of staged rows fills half of batching.max_inflight_bytes: staging \
             sinks move what they staged now, before their interval (intake is held at the \
             whole budget until a move frees it); to move less often, raise \
             batching.max_inflight_bytes or shorten the sink's interval"
        );
    }
}

/// Intake reached the in-flight budget and is held (not polling) until acknowledgements free it,
/// or paused after a second.
pub(crate) struct IntakeHeld;

impl IntakeHeld {
    pub(crate) fn emit(&self) {
        metrics::counter!(names::INTAKE_HOLDS).increment(1);
    }
}

/// librdkafka's statistics: how far a partition's committed offset is behind its high watermark.
pub(crate) struct ConsumerLag<'a> {
    pub(crate) topic: &'a str,
    pub(crate) partition: i32,
    pub(crate) lag: i64,
}

impl ConsumerLag<'_> {
    pub(crate) fn emit(&self) {
        metrics::gauge!(names::CONSUMER_LAG, names::TOPIC => self.topic.to_string(),
            names::PARTITION => self.partition.to_string())
        .set(self.lag as f64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Emits with a recorder of our own and returns the Prometheus text.
    fn render(emit: impl FnOnce()) -> String {
        let recorder = crate::metrics::prometheus_builder()
            .unwrap()
            .build_recorder();
        let handle = recorder.handle();
        metrics::with_local_recorder(&recorder, emit);
        handle.render()
    }

    #[test]
    fn each_event_keeps_its_metric_names_and_labels() {
        let text = render(|| {
            let mut limit = RateLimit::new();
            let now = Instant::now();
            for _ in 0..3 {
                LogRejected {
                    topic: "t",
                    partition: 1,
                    offset: 7,
                    code: "shape_mismatch",
                    reason: "r",
                }
                .emit(&mut limit, now);
            }
            let labels = ModelLabels {
                model_id: "m".into(),
                model_version: "2".into(),
                project: "p".into(),
            };
            BatchAcknowledged {
                labels: &labels,
                messages: 5,
                newest: Some(1.5e9),
                since_opened: Duration::from_millis(3),
            }
            .emit();
            Committed::Done.emit();
            RevokeLeftWritten(0).emit();
            RevokeLeftWritten(4).emit();
            RevokeLeftWritten(3).emit();
            Intake {
                paused_partitions: 3,
                changed: true,
                batch_bytes: 10,
                letter_bytes: 20,
                bookkeeping_bytes: 30,
                staged_messages: 2,
            }
            .emit();
            DeadLetterFailed {
                topic: "t",
                partition: 1,
                offset: 7,
                failure: Failure::NeedsOperator,
                error: "e",
            }
            .emit(&mut limit, now);
            ClaimCheckWritten {
                topic: "t",
                partition: 1,
                offset: 8,
                original_bytes: 5 << 20,
            }
            .emit(&mut limit, now);
        });
        let model = r#"{model_id="m",model_version="2",merlin_project="p"}"#;
        for line in [
            format!(
                r#"{}{{kind="decode",reason="shape_mismatch"}} 3"#,
                names::DEAD_LETTERS
            ),
            format!("{}{model} 5", names::PREDICTION_LOGS_PROCESSED),
            format!("{}{model} 1500000000", names::LAST_PROCESSED_TIMESTAMP),
            format!("{} 1", names::COMMITS),
            format!("{} 7", names::REVOKE_WRITTEN_UNCOMMITTED),
            format!("{} 3", names::PAUSED_PARTITIONS),
            format!("{} 20", names::DEAD_LETTER_PENDING_BYTES),
            format!("{} 30", names::BOOKKEEPING_BYTES),
            format!(
                r#"{}{{error_code="needs_operator",retryable="false"}} 1"#,
                names::DEAD_LETTER_WRITE_ERRORS
            ),
            format!("{} 1", names::DEAD_LETTER_CLAIM_CHECKS),
        ] {
            assert!(text.contains(&line), "{line} missing from:\n{text}");
        }
    }

    #[test]
    fn rate_limit_allows_ten_lines_per_window() {
        let mut limit = RateLimit::new();
        let t0 = Instant::now();
        let allowed = (0..25).filter(|_| limit.allow(t0)).count();
        assert_eq!(allowed, 10);
        assert!(limit.allow(t0 + Duration::from_secs(10)), "a new window");
    }
}
