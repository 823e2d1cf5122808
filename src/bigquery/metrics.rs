//! Metric names of the BigQuery sink, in one place (the crate-wide metrics module registers
//! descriptions and histogram buckets; this module only names what the sink emits).
//!
//! Labels are bounded: `table` (one per publisher), `code` (a gRPC code name), `kind`.

/// Histogram, seconds: from sending an AppendRows request to its response.
pub const APPEND_LATENCY_SECONDS: &str = "observation_publisher_bigquery_append_latency_seconds";
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
/// Counter: AppendRows connections opened after the first.
pub const RECONNECTS_TOTAL: &str = "observation_publisher_bigquery_reconnects_total";
/// Counter, label `kind` (`row_error`, `invalid`, `too_large`): rows BigQuery rejected.
pub const ROW_ERRORS_TOTAL: &str = "observation_publisher_bigquery_row_errors_total";
/// Counter: requests split because they hit the size cap.
pub const SPLITS_TOTAL: &str = "observation_publisher_bigquery_request_splits_total";
/// Counter: columns added to the table (start-up or while running).
pub const SCHEMA_EVOLUTIONS_TOTAL: &str = "observation_publisher_bigquery_schema_evolutions_total";
/// Gauge: 1 while the writer can reach BigQuery with the permissions it needs, else 0.
pub const HEALTHY: &str = "observation_publisher_bigquery_healthy";
/// Counter, label `code`: errors that make the sink unhealthy (permission, not found, auth).
pub const FATAL_ERRORS_TOTAL: &str = "observation_publisher_bigquery_fatal_errors_total";
/// Gauge, label `partition`: next row offset of the partition's committed stream (exactly-once).
pub const STREAM_OFFSET: &str = "observation_publisher_bigquery_stream_offset";
