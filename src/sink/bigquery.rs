//! The BigQuery sink: the runtime's [`Sink`] over the Storage Write writer
//! ([`crate::bigquery::writer::AppendWriter`], one persistent AppendRows stream on the table's
//! `_default` stream, at-least-once).
//!
//! At start-up the table is created or migrated (add-only columns, partition expiration); a
//! changed column type or a missing dataset is a configuration error. A write resolves when
//! BigQuery accepted every row except those it refused for good, which come back in the
//! [`WriteReport`] to be dead-lettered; transient failures are retried inside the writer, so
//! during an outage a write simply waits (readiness follows the writer's health).

use super::{RejectedRow, Sink, SinkError, SinkErrorKind, WriteFuture, WriteReport};
use crate::batch::Batch;
use crate::bigquery::{self, AppendWriter, TableSpec, WriterError};
use crate::config::{BigQuerySink as BigQueryConfig, Config};
use crate::table::TableLayout;
use std::sync::Arc;

/// Why the sink could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The configuration cannot work (changed column type, missing dataset, bad endpoint or
    /// credentials): exit 2.
    #[error("{0}")]
    Config(String),
    /// BigQuery is unreachable or refused for now: retry.
    #[error("{0}")]
    Unavailable(String),
}

/// Writes batches into the model's table.
pub struct BigQueryTableSink {
    writer: AppendWriter,
}

impl BigQueryTableSink {
    /// Connects, creates or migrates the table and starts the writer (inside a tokio runtime).
    pub async fn start(cfg: &Config, sink: &BigQueryConfig) -> Result<Self, StartError> {
        let (client, tables) = bigquery::connect(sink)
            .await
            .map_err(|e| StartError::Config(e.to_string()))?;
        let spec =
            TableSpec::from_config(cfg, sink).map_err(|e| StartError::Config(e.to_string()))?;
        match tables.ensure_table(&spec).await {
            Ok(report) => {
                tracing::info!(table = %spec.table.dotted(), report = ?report, "BigQuery table ready")
            }
            Err(e) if e.is_config_error() => return Err(StartError::Config(e.to_string())),
            Err(e) => return Err(StartError::Unavailable(e.to_string())),
        }
        let schema = Arc::clone(&TableLayout::from_config(cfg).arrow);
        let writer = AppendWriter::start_evolving(
            client,
            tables,
            spec,
            schema,
            bigquery::writer_options(sink),
        )
        .map_err(|e| StartError::Config(e.to_string()))?;
        Ok(BigQueryTableSink { writer })
    }
}

fn sink_error(e: WriterError) -> SinkError {
    match e {
        WriterError::Closed => SinkError::new(SinkErrorKind::Unavailable, true, e.to_string()),
        WriterError::SchemaMismatch | WriterError::Encode(_) => {
            SinkError::new(SinkErrorKind::Encode, false, e.to_string())
        }
        WriterError::Stopped(_) | WriterError::RowTooLarge(_) => {
            SinkError::new(SinkErrorKind::Rejected, false, e.to_string())
        }
    }
}

impl Sink for BigQueryTableSink {
    fn name(&self) -> &'static str {
        "bigquery"
    }

    fn write(&mut self, batch: Arc<Batch>) -> WriteFuture<'_> {
        Box::pin(async move {
            let pending = self
                .writer
                .append(batch.records.clone())
                .await
                .map_err(sink_error)?;
            let outcome = pending.await.map_err(sink_error)?;
            Ok(WriteReport {
                rejected: outcome
                    .rejected
                    .into_iter()
                    .map(|r| RejectedRow {
                        row: r.index,
                        code: r.reason.as_str(),
                        message: r.message,
                    })
                    .collect(),
                commit_metadata: Vec::new(),
            })
        })
    }

    fn health(&self) -> Option<tokio::sync::watch::Receiver<bool>> {
        Some(self.writer.health())
    }
}
