//! The one integration-test binary. Modules talk to real parts: the built binary, the local
//! Kafka broker and the BigQuery emulator started by `scripts/test`, a fake Kubernetes API
//! server over real HTTP.

mod bigquery;
mod bootstrap;
mod cli;
mod common;
mod hostile;
mod runtime;
mod secrets;
