//! Every metric name and label key the publisher exposes: the only place these strings appear.
//!
//! Merlin-compatible names come first, spelled exactly as Merlin's Python publisher exposes them
//! (dashboards and alerts keep working after a migration); the publisher's own metrics follow
//! `observation_publisher_<name>_<unit>[_total]`. Label values must be bounded: model
//! identifiers (one per process), sink names, error codes, flush reasons, partition numbers.

/// Merlin: unix seconds of the largest `request_timestamp` in the last flushed batch (event
/// time). Gauge; labels [`MODEL_ID`], [`MODEL_VERSION`], [`MERLIN_PROJECT`].
pub const LAST_PROCESSED_TIMESTAMP: &str = "last_processed_timestamp";
/// Merlin: PredictionLog messages flushed. Counter; labels [`MODEL_ID`], [`MODEL_VERSION`],
/// [`MERLIN_PROJECT`].
pub const PREDICTION_LOGS_PROCESSED: &str = "total_prediction_logs_processed_total";

/// Messages of a revoked partition whose rows a sink had written (for MaxCompute: moved into the
/// target) while another sink had not acknowledged them: left uncommitted, the next owner writes
/// them again, so they are duplicates in the sinks that had them. Counter.
pub const REVOKE_WRITTEN_UNCOMMITTED: &str =
    "observation_publisher_revoke_written_uncommitted_messages_total";
/// Kafka messages consumed. Counter.
pub const MESSAGES_CONSUMED: &str = "observation_publisher_messages_consumed_total";
/// Bytes of Kafka message values consumed. Counter.
pub const BYTES_CONSUMED: &str = "observation_publisher_consumed_bytes_total";
/// Rows decoded from consumed logs. Counter.
pub const ROWS_DECODED: &str = "observation_publisher_rows_decoded_total";
/// Rows a sink acknowledged as durable. Counter; label [`SINK`].
pub const ROWS_WRITTEN: &str = "observation_publisher_rows_written_total";
/// Logs (or rows) sent to the dead-letter target. Counter; labels [`KIND`] (`decode` | `row`),
/// [`REASON`] (the error code).
pub const DEAD_LETTERS: &str = "observation_publisher_dead_letters_total";
/// Bytes held by dead letters waiting for their write (counted against the in-flight budget
/// with the batches). Gauge.
pub const DEAD_LETTER_PENDING_BYTES: &str = "observation_publisher_dead_letter_pending_bytes";
/// Dead letters too large for the dead-letter target, written as a claim check (source
/// position, size, SHA-256 and the first KiBs of the payload) instead of whole. Counter.
pub const DEAD_LETTER_CLAIM_CHECKS: &str = "observation_publisher_dead_letter_claim_checks_total";
/// Failed dead-letter writes. Counter; labels [`ERROR_CODE`] (`too_large`, `needs_operator`,
/// `transient`), [`RETRYABLE`] (`false` for `needs_operator`: it is retried, slowly, but only an
/// operator can make it succeed).
pub const DEAD_LETTER_WRITE_ERRORS: &str = "observation_publisher_dead_letter_write_errors_total";
/// Failed sink write attempts. Counter; labels [`SINK`], [`ERROR_CODE`], [`RETRYABLE`].
pub const SINK_ERRORS: &str = "observation_publisher_sink_errors_total";
/// Rows per flushed batch. Histogram; label [`REASON`] (the flush reason).
pub const FLUSH_ROWS: &str = "observation_publisher_flush_rows";
/// Arrow bytes per flushed batch. Histogram.
pub const FLUSH_BYTES: &str = "observation_publisher_flush_bytes";
/// Seconds from the first message entering a batch to every sink acknowledging it. Histogram.
pub const FLUSH_LATENCY: &str = "observation_publisher_flush_latency_seconds";
/// Seconds one sink write attempt took. Histogram; label [`SINK`].
pub const SINK_LATENCY: &str = "observation_publisher_sink_write_seconds";
/// Bytes consumed but not yet acknowledged (the backpressure budget in use). Gauge.
pub const INFLIGHT_BYTES: &str = "observation_publisher_inflight_bytes";
/// The process's resident memory (`/proc/self/statm`), read at each scrape. Gauge.
pub const RESIDENT_MEMORY: &str = "observation_publisher_resident_memory_bytes";
/// The memory formula's bound for the running configuration ([`crate::footprint`]). Gauge.
pub const MEMORY_BOUND: &str = "observation_publisher_memory_bound_bytes";
/// Partitions paused by backpressure. Gauge.
pub const PAUSED_PARTITIONS: &str = "observation_publisher_paused_partitions";
/// Bytes of the pipeline's bookkeeping of messages not yet committable, as allocated: their
/// offsets, their batches' records and, for staged batches (whose bytes no longer count), what
/// is kept until the sink's move. Counted against the in-flight budget. Gauge.
pub const BOOKKEEPING_BYTES: &str = "observation_publisher_bookkeeping_bytes";
/// Times the bookkeeping of staged rows reached half the in-flight budget and the staging sinks
/// were asked to move at once instead of at their interval. Counter.
pub const EARLY_MOVES: &str = "observation_publisher_early_moves_total";
/// Times intake reached the in-flight budget and was held (not polling) until acknowledgements
/// freed it or the hold became a pause. Counter.
pub const INTAKE_HOLDS: &str = "observation_publisher_intake_holds_total";
/// Messages between the consumer's position and the high watermark. Gauge; labels [`TOPIC`],
/// [`PARTITION`].
pub const CONSUMER_LAG: &str = "observation_publisher_consumer_lag_messages";
/// Offset commits that succeeded. Counter.
pub const COMMITS: &str = "observation_publisher_commits_total";
/// Offset commits that failed. Counter.
pub const COMMIT_FAILURES: &str = "observation_publisher_commit_failures_total";
/// Exactly-once: assigned partitions held because their checkpoint could not be read (retried)
/// or does not parse (stopped). Counter, per occurrence; label [`REASON`] (`unread` |
/// `unparseable`).
pub const CHECKPOINT_PROBLEMS: &str = "observation_publisher_checkpoint_problems_total";
/// Seconds from a row's `request_timestamp` to its sink acknowledging it as durable (for
/// MaxCompute: moved into the table, not staged). Histogram, per row; label [`SINK`].
pub const ROW_FRESHNESS: &str = "observation_publisher_row_freshness_seconds";
/// NULL cells per declared feature column. Counter; label [`COLUMN`].
pub const FEATURE_NULLS: &str = "observation_publisher_feature_nulls_total";
/// Feature cells whose value had another kind than the column's type (coerced or rejected).
/// Counter; label [`COLUMN`].
pub const FEATURE_TYPE_MISMATCHES: &str = "observation_publisher_feature_type_mismatches_total";
/// Cells of features present in logs but not declared in the schema. Counter; label [`COLUMN`]
/// (at most [`crate::metrics::quality::MAX_NAMES`] values, the rest as
/// [`crate::metrics::quality::OTHER`]).
pub const UNDECLARED_FEATURES: &str = "observation_publisher_undeclared_features_total";
/// The model's score per row. Histogram; label [`CLASS`] (the score column, or the class label
/// for multiclass).
pub const PREDICTION_SCORE: &str = "observation_publisher_prediction_score";
/// A numeric feature's values, for the features `metrics.feature_histograms` names (with their
/// buckets; none by default). Histogram; label [`COLUMN`].
pub const FEATURE_VALUE: &str = "observation_publisher_feature_value";
/// Rows per derived prediction label. Counter; label [`LABEL`] (the configured labels).
pub const PREDICTION_LABELS: &str = "observation_publisher_prediction_labels_total";
/// Constant 1 with the build's version and the model version the process publishes for. Gauge;
/// labels [`VERSION`], [`MERLIN_PROJECT`], [`MODEL_ID`], [`MODEL_VERSION`]. Present from start,
/// so alert rules and the dashboard join other series to it by `namespace` and `pod` to group
/// them by model version, whatever the scrape configuration adds.
pub const BUILD_INFO: &str = "observation_publisher_build_info";
/// 1 while `/readyz` would answer 200, else 0; set at each scrape from the same conditions.
/// Gauge. Here so readiness alerts work without kube-state-metrics.
pub const READY: &str = "observation_publisher_ready";

/// Label: Merlin model id (the model name).
pub const MODEL_ID: &str = "model_id";
/// Label: Merlin model version.
pub const MODEL_VERSION: &str = "model_version";
/// Label: Merlin project.
pub const MERLIN_PROJECT: &str = "merlin_project";
/// Label: sink name.
pub const SINK: &str = "sink";
/// Label: dead-letter kind (`decode` | `row`).
pub const KIND: &str = "kind";
/// Label: an error code or a flush reason.
pub const REASON: &str = "reason";
/// Label: a sink error code.
pub const ERROR_CODE: &str = "error_code";
/// Label: `true` | `false`.
pub const RETRYABLE: &str = "retryable";
/// Label: Kafka topic.
pub const TOPIC: &str = "topic";
/// Label: Kafka partition number.
pub const PARTITION: &str = "partition";
/// Label: a feature column name.
pub const COLUMN: &str = "column";
/// Label: a score's class (the score column, or the class label for multiclass).
pub const CLASS: &str = "class";
/// Label: a derived prediction label.
pub const LABEL: &str = "label";
/// Label: crate version.
pub const VERSION: &str = "version";
/// Label: an HTTP status class (`2xx`, `401`, `403`, `413`, `429`, `4xx`, `5xx`, `other`) or
/// `timeout` / `connection` when no answer came.
pub const STATUS: &str = "status";

/// What kind of metric a name is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricKind {
    /// Monotonic counter.
    Counter,
    /// Gauge.
    Gauge,
    /// Histogram (with explicit buckets).
    Histogram,
}

/// Every metric: name, kind, help text.
pub const ALL: &[(&str, MetricKind, &str)] = &[
    (
        LAST_PROCESSED_TIMESTAMP,
        MetricKind::Gauge,
        "Unix seconds of the largest request_timestamp in the last flushed batch (Merlin-compatible).",
    ),
    (PREDICTION_LOGS_PROCESSED, MetricKind::Counter, "PredictionLog messages flushed (Merlin-compatible)."),
    (MESSAGES_CONSUMED, MetricKind::Counter, "Kafka messages consumed."),
    (BYTES_CONSUMED, MetricKind::Counter, "Bytes of Kafka message values consumed."),
    (ROWS_DECODED, MetricKind::Counter, "Rows decoded from consumed logs."),
    (ROWS_WRITTEN, MetricKind::Counter, "Rows a sink acknowledged as durable."),
    (DEAD_LETTERS, MetricKind::Counter, "Logs or rows sent to the dead-letter target, by kind and reason."),
    (DEAD_LETTER_PENDING_BYTES, MetricKind::Gauge, "Bytes held by dead letters waiting for their write."),
    (
        DEAD_LETTER_CLAIM_CHECKS,
        MetricKind::Counter,
        "Dead letters too large for the target, written as a claim check instead of whole.",
    ),
    (
        DEAD_LETTER_WRITE_ERRORS,
        MetricKind::Counter,
        "Failed dead-letter writes, by class (too_large, needs_operator, transient).",
    ),
    (SINK_ERRORS, MetricKind::Counter, "Failed sink write attempts, by sink, error code and retryability."),
    (FLUSH_ROWS, MetricKind::Histogram, "Rows per flushed batch, by flush reason."),
    (FLUSH_BYTES, MetricKind::Histogram, "Arrow bytes per flushed batch."),
    (
        FLUSH_LATENCY,
        MetricKind::Histogram,
        "Seconds from the first message entering a batch to every sink acknowledging it.",
    ),
    (SINK_LATENCY, MetricKind::Histogram, "Seconds one sink write attempt took."),
    (INFLIGHT_BYTES, MetricKind::Gauge, "Bytes consumed but not yet acknowledged."),
    (RESIDENT_MEMORY, MetricKind::Gauge, "Resident memory of the process, read at each scrape."),
    (MEMORY_BOUND, MetricKind::Gauge, "The memory formula's bound for this configuration (docs/reliability.md)."),
    (PAUSED_PARTITIONS, MetricKind::Gauge, "Partitions paused by backpressure."),
    (
        BOOKKEEPING_BYTES,
        MetricKind::Gauge,
        "Bytes of the bookkeeping of messages not yet committable (staged rows' among them), counted against the in-flight budget.",
    ),
    (
        EARLY_MOVES,
        MetricKind::Counter,
        "Times staged rows' bookkeeping reached half the in-flight budget and staging sinks were asked to move at once.",
    ),
    (INTAKE_HOLDS, MetricKind::Counter, "Times intake was held at the in-flight budget before acknowledgements freed it or it was paused."),
    (CONSUMER_LAG, MetricKind::Gauge, "Messages between the consumer position and the high watermark."),
    (COMMITS, MetricKind::Counter, "Offset commits that succeeded."),
    (COMMIT_FAILURES, MetricKind::Counter, "Offset commits that failed."),
    (
        CHECKPOINT_PROBLEMS,
        MetricKind::Counter,
        "Exactly-once partitions held: checkpoint unread (retried) or unparseable (stopped).",
    ),
    (
        ROW_FRESHNESS,
        MetricKind::Histogram,
        "Seconds from a row's request_timestamp to its sink acknowledging it as durable.",
    ),
    (FEATURE_NULLS, MetricKind::Counter, "NULL cells per declared feature column."),
    (
        FEATURE_TYPE_MISMATCHES,
        MetricKind::Counter,
        "Feature cells whose value had another kind than the column's type (coerced or rejected).",
    ),
    (
        UNDECLARED_FEATURES,
        MetricKind::Counter,
        "Cells of features present in logs but not declared in the schema (100 names, the rest _other).",
    ),
    (PREDICTION_SCORE, MetricKind::Histogram, "The model's score per row, by class."),
    (PREDICTION_LABELS, MetricKind::Counter, "Rows per derived prediction label."),
    (FEATURE_VALUE, MetricKind::Histogram, "A numeric feature's values (features and buckets from metrics.feature_histograms)."),
    (
        BUILD_INFO,
        MetricKind::Gauge,
        "Constant 1, labelled with the publisher version and the model version it publishes for.",
    ),
    (READY, MetricKind::Gauge, "1 while /readyz answers 200 (read at each scrape), else 0."),
    // The BigQuery sink's.
    (bigquery::APPEND_LATENCY_SECONDS, MetricKind::Histogram, "Seconds from sending an AppendRows request to its response."),
    (bigquery::ROWS_APPENDED_TOTAL, MetricKind::Counter, "Rows BigQuery accepted."),
    (bigquery::BYTES_APPENDED_TOTAL, MetricKind::Counter, "Arrow record-batch bytes BigQuery accepted."),
    (bigquery::INFLIGHT_REQUESTS, MetricKind::Gauge, "AppendRows requests sent and not yet answered."),
    (bigquery::INFLIGHT_BYTES, MetricKind::Gauge, "Bytes admitted into the BigQuery writer and not yet resolved."),
    (bigquery::RETRIES_TOTAL, MetricKind::Counter, "AppendRows requests re-sent after an error, by gRPC code."),
    (bigquery::RECONNECTS_TOTAL, MetricKind::Counter, "AppendRows connections opened again after one was lost or given up (not after an idle close)."),
    (bigquery::CONNECTIONS_OPEN, MetricKind::Gauge, "AppendRows connections open now (each counts against BigQuery's concurrent-connection quota)."),
    (bigquery::ROW_ERRORS_TOTAL, MetricKind::Counter, "Rows BigQuery rejected, by kind."),
    (bigquery::SPLITS_TOTAL, MetricKind::Counter, "AppendRows requests split because they hit the size cap."),
    (bigquery::SCHEMA_EVOLUTIONS_TOTAL, MetricKind::Counter, "Columns added to the table."),
    (bigquery::HEALTHY, MetricKind::Gauge, "1 while the BigQuery writer can reach BigQuery with the permissions it needs."),
    (bigquery::FATAL_ERRORS_TOTAL, MetricKind::Counter, "Errors that make the BigQuery sink unhealthy (permission, not found, auth)."),
    (bigquery::STREAM_OFFSET, MetricKind::Gauge, "Next row offset of the partition's committed stream (exactly-once)."),
    (bigquery::STREAMS_CREATED_TOTAL, MetricKind::Counter, "COMMITTED write streams created (CreateWriteStream; exactly-once)."),
    (bigquery::STREAMS_REUSED_TOTAL, MetricKind::Counter, "Partitions assigned again that kept the stream this process was writing instead of creating one (exactly-once)."),
    // The Arize sink's.
    (arize::REQUEST_SECONDS, MetricKind::Histogram, "Seconds from sending an Arize pandas_arrow request to its answer (or error)."),
    (arize::RESPONSES_TOTAL, MetricKind::Counter, "Arize requests by answer: HTTP status class, timeout or connection error."),
    // The MaxCompute sink's.
    (maxcompute::POLL_ERRORS_TOTAL, MetricKind::Counter, "Polls of a MaxCompute SQL instance that failed and were repeated on the same instance."),
    (maxcompute::MOVES_OVERDUE_TOTAL, MetricKind::Counter, "MaxCompute moves (INSERT ... SELECT, TRUNCATE) that ran longer than move_timeout."),
    (maxcompute::MOVE_AGE_SECONDS, MetricKind::Gauge, "Seconds the running MaxCompute move has taken so far (0: none running)."),
    (maxcompute::MOVE_TIMEOUT_SECONDS, MetricKind::Gauge, "The MAXCOMPUTE sink's move_timeout in seconds."),
];

/// The MaxCompute sink's metrics (`observation_publisher_maxcompute_*`).
pub mod maxcompute {
    /// Counter: polls of an SQL instance that failed (the same instance is polled again).
    pub const POLL_ERRORS_TOTAL: &str = "observation_publisher_maxcompute_poll_errors_total";
    /// Counter: moves that ran longer than the sink's `move_timeout` (counted once per move,
    /// when it passes the timeout).
    pub const MOVES_OVERDUE_TOTAL: &str = "observation_publisher_maxcompute_moves_overdue_total";
    /// Gauge, seconds: how long the running move has taken so far, 0 while none runs.
    pub const MOVE_AGE_SECONDS: &str = "observation_publisher_maxcompute_move_age_seconds";
    /// Gauge, seconds: the sink's `move_timeout` (an alert compares the move's age with it).
    pub const MOVE_TIMEOUT_SECONDS: &str = "observation_publisher_maxcompute_move_timeout_seconds";
}

/// The Arize sink's metrics (`observation_publisher_arize_*`).
pub mod arize {
    /// Histogram, seconds: from sending a `pandas_arrow` request to its answer (or error).
    pub const REQUEST_SECONDS: &str = "observation_publisher_arize_request_seconds";
    /// Counter, label [`super::STATUS`]: requests by answer.
    pub const RESPONSES_TOTAL: &str = "observation_publisher_arize_responses_total";
}

/// The BigQuery sink's metrics (`observation_publisher_bigquery_*`).
pub mod bigquery {
    /// Histogram, seconds: from sending an AppendRows request to its response.
    pub const APPEND_LATENCY_SECONDS: &str =
        "observation_publisher_bigquery_append_latency_seconds";
    /// Counter: rows BigQuery accepted.
    pub const ROWS_APPENDED_TOTAL: &str = "observation_publisher_bigquery_rows_appended_total";
    /// Counter: Arrow record-batch bytes BigQuery accepted.
    pub const BYTES_APPENDED_TOTAL: &str = "observation_publisher_bigquery_bytes_appended_total";
    /// Gauge: AppendRows requests sent and not yet answered.
    pub const INFLIGHT_REQUESTS: &str = "observation_publisher_bigquery_inflight_requests";
    /// Gauge: bytes admitted into the writer and not yet resolved (the backpressure budget in use).
    pub const INFLIGHT_BYTES: &str = "observation_publisher_bigquery_inflight_bytes";
    /// Counter, label `code`: requests re-sent after an error, by gRPC code name.
    pub const RETRIES_TOTAL: &str = "observation_publisher_bigquery_retries_total";
    /// Counter: AppendRows connections a writer opened again after one was lost or given up (an
    /// error, a stall, a schema change); reopening after an idle close is not counted.
    pub const RECONNECTS_TOTAL: &str = "observation_publisher_bigquery_reconnects_total";
    /// Gauge: AppendRows connections open now, over every writer of the process (opening and
    /// half-closed ones included): what counts against BigQuery's concurrent-connection quota.
    pub const CONNECTIONS_OPEN: &str = "observation_publisher_bigquery_connections_open";
    /// Counter, label `kind` (`row_error`, `invalid`, `too_large`): rows BigQuery rejected.
    pub const ROW_ERRORS_TOTAL: &str = "observation_publisher_bigquery_row_errors_total";
    /// Counter: requests split because they hit the size cap.
    pub const SPLITS_TOTAL: &str = "observation_publisher_bigquery_request_splits_total";
    /// Counter: columns added to the table (start-up or while running).
    pub const SCHEMA_EVOLUTIONS_TOTAL: &str =
        "observation_publisher_bigquery_schema_evolutions_total";
    /// Gauge: 1 while the writer can reach BigQuery with the permissions it needs, else 0.
    pub const HEALTHY: &str = "observation_publisher_bigquery_healthy";
    /// Counter, label `code`: errors that make the sink unhealthy (permission, not found, auth).
    pub const FATAL_ERRORS_TOTAL: &str = "observation_publisher_bigquery_fatal_errors_total";
    /// Gauge, label `partition`: next row offset of the partition's committed stream (exactly-once).
    pub const STREAM_OFFSET: &str = "observation_publisher_bigquery_stream_offset";
    /// Counter: COMMITTED write streams created (exactly-once; CreateWriteStream has a quota).
    pub const STREAMS_CREATED_TOTAL: &str = "observation_publisher_bigquery_streams_created_total";
    /// Counter: partitions assigned again that kept this process's stream (its first append at
    /// the known length was accepted) instead of creating one (exactly-once).
    pub const STREAMS_REUSED_TOTAL: &str = "observation_publisher_bigquery_streams_reused_total";
}
