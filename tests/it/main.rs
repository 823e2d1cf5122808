//! The one integration-test binary. Modules talk to real parts: the built binary, the local
//! Kafka broker and the BigQuery emulator started by `scripts/test`, a fake Kubernetes API
//! server over real HTTP.

mod arize;
mod bigquery;
mod binary;
mod bootstrap;
mod cli;
mod closed_stdout;
mod common;
mod crash;
mod docs_defaults;
mod google_auth;
mod hostile;
mod http_capture;
mod image;
mod kafka_oauth;
mod lanes;
mod layering;
mod mapped_input;
mod maxcompute;
mod memory;
mod merlin;
mod parquet_readers;
mod probes;
mod runtime;
mod secrets;
mod unix_tools;
