//! The BIGQUERY sink: Storage Write API (gRPC, Arrow rows) and table management (REST), and
//! its two adapters to the sink seam: [`sink::BigQueryTableSink`] (the default stream, at least
//! once) and [`exactly_once::ExactlyOnceSink`] (a COMMITTED stream per partition).
//!
//! # Layout
//! - [`client`]: tonic channel to the Storage Write endpoint (TLS + OAuth, or plain for the emulator).
//! - `crate::auth::google`: Application Default Credentials (bearer tokens, refreshed before expiry).
//! - [`encode`]: record batches → `arrow_rows` AppendRows requests under the size cap (pure).
//! - [`writer`]: one persistent AppendRows stream per table (or per partition, committed),
//!   pipelined, byte-bounded, re-sending; the kind of stream is a policy chosen at start.
//! - [`error`]: gRPC code classification (retry / split / bisect / fatal).
//! - [`checkpoint`]: exactly-once checkpoints in Kafka commit metadata, and resuming a
//!   partition's COMMITTED stream from one.
//! - [`sink`]: the at-least-once adapter to the seam (a pool of default-stream writers).
//! - [`pool`]: the rule of that pool: which writer takes a batch, when connections open and
//!   close (pure).
//! - [`exactly_once`]: the exactly-once adapter (a COMMITTED stream per partition).
//! - [`table`]: create the table, add columns, partition expiration, clustering, queries.
//! - [`validate`]: rows BigQuery would refuse (partition range), found before sending.
//! - [`metrics`]: metric names.
//!
//! # Building from the configuration
//! [`connect`] turns a [`BigQuerySink`] into a [`StorageClient`] and a [`TableManager`] with the
//! configured endpoints and auth mode.

pub mod checkpoint;
pub mod client;
pub mod encode;
pub mod error;
pub mod exactly_once;
pub mod metrics;
pub mod pool;
mod readiness;
pub mod sink;
pub mod table;
pub mod validate;
pub mod writer;

pub use crate::auth::google::Credentials;
pub use client::StorageClient;
pub use exactly_once::ExactlyOnceSink;
pub use pool::Elastic;
pub use sink::BigQueryTableSink;
pub use table::{EnsureReport, TableError, TableManager, TableSpec};
pub use writer::{
    AppendOutcome, AppendWriter, Pending, RejectReason, RejectedRow, WriterError, WriterOptions,
};

use crate::config::{BigQueryAuth, BigQuerySink};

/// The generated Storage Write v1 types (and `google.rpc`).
pub mod proto {
    pub use googleapis_tonic_google_cloud_bigquery_storage_v1::google::cloud::bigquery::storage::v1::*;
    pub use googleapis_tonic_google_cloud_bigquery_storage_v1::google::rpc;
}

/// A table's coordinates.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TableRef {
    /// GCP project.
    pub project: String,
    /// Dataset.
    pub dataset: String,
    /// Table id.
    pub table: String,
}

impl TableRef {
    /// `projects/p/datasets/d/tables/t`.
    pub fn path(&self) -> String {
        format!(
            "projects/{}/datasets/{}/tables/{}",
            self.project, self.dataset, self.table
        )
    }

    /// The table's `_default` write stream.
    pub fn default_stream(&self) -> String {
        format!("{}/streams/_default", self.path())
    }

    /// `p.d.t` (for SQL and messages).
    pub fn dotted(&self) -> String {
        format!("{}.{}.{}", self.project, self.dataset, self.table)
    }
}

/// Failure to set up the BigQuery clients.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// Credentials could not be loaded.
    #[error(transparent)]
    Auth(#[from] crate::auth::google::AuthError),
    /// Bad endpoint.
    #[error(transparent)]
    Client(#[from] client::ClientError),
    /// REST client.
    #[error(transparent)]
    Table(#[from] TableError),
}

/// Builds the gRPC and REST clients for a configured sink.
pub async fn connect(sink: &BigQuerySink) -> Result<(StorageClient, TableManager), ConnectError> {
    super::install_crypto_provider();
    let credentials = match sink.auth {
        BigQueryAuth::Adc => Some(Credentials::application_default().await?),
        BigQueryAuth::None => None,
    };
    let storage = StorageClient::new(&sink.storage_endpoint, credentials.clone())?;
    let tables = TableManager::new(table::RestOptions {
        base_url: sink.rest_base_url.clone(),
        credentials,
        emulator_compat: sink.emulator_compat,
        timeout: std::time::Duration::from_secs(60),
    })?;
    Ok((storage, tables))
}

/// Writer options from a configured sink.
pub fn writer_options(sink: &BigQuerySink) -> WriterOptions {
    WriterOptions {
        max_request_bytes: sink.max_request_bytes as usize,
        max_inflight_bytes: sink.max_inflight_bytes as usize,
        // `request_timestamp` is the third column of every table layout.
        partition_window: Some(validate::PartitionWindow::for_ttl_days(2, sink.ttl_days)),
        ..WriterOptions::default()
    }
}
