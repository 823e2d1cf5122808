//! # observation-publisher
//!
//! Model servers log every prediction as a protobuf `caraml.upi.v1.PredictionLog` into Kafka.
//! This crate turns those logs into rows of the model's BigQuery table, fast and without losing
//! any of them.
//!
//! ```text
//! source (Kafka) → decode (PredictionLog bytes → Arrow builders) → batch → sinks → commit
//! ```
//!
//! # Layout
//! - [`auth`]: credentials (Google Application Default Credentials), for any stage.
//! - [`error_text`]: an error's text with its causes, for what a person reads.
//! - [`config`]: Merlin's YAML plus our strict sections; layered; all problems at once.
//! - [`proto`]: prost types generated from `proto/` (the readable reference of the wire format).
//! - [`decode`]: the pure hot path: a protobuf walker appending straight into Arrow builders.
//! - [`naming`]: BigQuery and Kafka name rules (columns, tables, datasets, topics), URL path
//!   segments.
//! - [`table`]: the table layout (columns, Arrow schema, BigQuery table resource).
//! - [`framing`]: length-delimited streams of logs (files, stdin, dead letters, replay).
//! - `mapped`: `convert`'s input file through a memory map (one of the crate's two `unsafe`
//!   blocks; the other hands a Kafka admin client its OAUTHBEARER token, in `auth`).
//! - [`output`]: writers for jsonl, Arrow IPC and Parquet.
//! - [`stdout`]: standard output as standard tools treat it (a closed pipe ends quietly).
//! - [`gen`]: synthetic logs for tests, benches and the demo.
//! - [`commands`]: the offline commands (`convert`, `gen`, `schema`, `check-config`).
//! - [`batch`]: the batcher: decoder + flush policy (rows, bytes, linger) + source coordinates.
//! - [`commit`]: the pure offset tracker (commit only the contiguous acknowledged prefix).
//! - [`sink`]: the `Sink` seam and what every sink shares (errors, retry with backoff), and one
//!   folder per sink: Parquet (the embedded default), BigQuery, Arize, MaxCompute.
//! - [`deadletter`]: dead-letter targets (Kafka topic, file).
//! - [`source`]: Kafka consumer settings and context (rebalances, statistics).
//! - [`kafka_log`]: librdkafka's errors and log lines, said once per kind with a count.
//! - [`pipeline`]: `run`: wires source → decode → batch → sinks → commit.
//! - [`metrics`], [`server`], [`telemetry`], [`shutdown`]: operating the daemon.
//! - [`merlin_entry`]: Merlin's container command (`python -m publisher +environment=NAME`).
//! - [`bootstrap`]: one publisher Deployment per model version on Kubernetes.

pub mod auth;
pub mod backoff;
pub mod batch;
pub mod bootstrap;
pub mod cli;
pub mod commands;
pub mod commit;
pub mod config;
pub mod deadletter;
pub mod decode;
pub mod error_text;
pub mod footprint;
pub mod framing;
pub mod gen;
pub mod kafka_log;
pub(crate) mod mapped;
pub mod merlin_entry;
pub mod metrics;
pub mod naming;
pub mod output;
pub mod pipeline;
pub mod proto;
pub mod readahead;
pub mod readbuf;
pub mod redact;
pub mod server;
pub mod shutdown;
pub mod sink;
pub mod source;
pub mod stdout;
pub mod table;
pub mod telemetry;
