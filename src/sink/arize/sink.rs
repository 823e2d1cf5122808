//! The ARIZE sink's adapter to the sink seam (the folder's module docs say how it writes).

use super::client::{Client, ClientOptions, Outcome};
use super::progress::Progress;
use super::schema::Plan;
use super::{encode, schema, validate};
use crate::batch::Batch;
use crate::config::{ArizeSink as ArizeConfig, Config};
use crate::sink::{RejectedRow, Sink, SinkError, SinkErrorKind, SubmitFuture, WriteReport};
use arrow_array::{BooleanArray, RecordBatch};
use arrow_schema::SchemaRef;
use std::sync::Arc;
use std::time::SystemTime;

/// The sink name (metric label `sink`, dead-letter message prefix).
pub const NAME: &str = "arize";

/// The batch being written and what Arize acknowledged of it.
struct InFlight {
    /// The batch (kept so a retry is recognised by identity).
    batch: Arc<Batch>,
    /// The accepted rows' body columns.
    body: RecordBatch,
    /// For each body row, its row in the batch.
    batch_rows: Vec<usize>,
    /// Rows refused by validation (batch rows).
    refused: Vec<RejectedRow>,
    /// The requests and their state.
    progress: Progress,
}

/// Writes batches to Arize.
pub struct ArizeSink {
    plan: Plan,
    body_schema: SchemaRef,
    client: Client,
    max_request_bytes: usize,
    in_flight: Option<InFlight>,
}

impl ArizeSink {
    /// A sink for `cfg`'s model and the ARIZE sink settings `arize`. Fails for a configuration
    /// Arize cannot take (multiclass; the config check refuses it first) or keys that cannot be
    /// sent as HTTP headers.
    pub fn new(cfg: &Config, arize: &ArizeConfig) -> Result<Self, String> {
        let plan = Plan::new(cfg).map_err(|e| e.to_string())?;
        let layout = crate::table::TableLayout::from_config(cfg);
        let (header, metadata) = match plan.schema_carrier() {
            schema::SchemaCarrier::Header(h) => (Some(h), None),
            schema::SchemaCarrier::Metadata(m) => (None, Some(m)),
        };
        let body_schema = encode::body_schema(&plan, &layout.arrow, metadata.as_deref());
        let client = Client::new(
            &ClientOptions {
                uri: arize.uri.clone(),
                api_key: arize.api_key.clone(),
                space_key: arize.space_key.clone(),
                space_id: arize.space_id.clone(),
                request_timeout: arize.request_timeout,
                connect_timeout: arize.connect_timeout,
            },
            header.as_deref(),
        )
        .map_err(|e| e.to_string())?;
        Ok(ArizeSink {
            plan,
            body_schema,
            client,
            max_request_bytes: usize::try_from(arize.max_request_bytes).unwrap_or(usize::MAX),
            in_flight: None,
        })
    }

    /// Validates and encodes a new batch.
    fn prepare(&self, batch: Arc<Batch>) -> Result<InFlight, SinkError> {
        let now = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX));
        let refused = validate::refused_rows(&batch.records, &self.plan, now);
        let mut keep = vec![true; batch.rows()];
        for r in &refused {
            keep[r.row] = false;
        }
        let batch_rows: Vec<usize> = (0..keep.len()).filter(|&i| keep[i]).collect();
        let encode_error = |e: arrow_schema::ArrowError| {
            SinkError::new(
                SinkErrorKind::Encode,
                false,
                "building the Arize request body",
            )
            .with_source(e)
        };
        let body = encode::body_batch(
            &batch.records,
            &BooleanArray::from(keep),
            &self.plan,
            &self.body_schema,
        )
        .map_err(encode_error)?;
        let parts = if body.num_rows() == 0 {
            Vec::new()
        } else {
            encode::split_under_cap(&body, 0..body.num_rows(), self.max_request_bytes)
                .map_err(encode_error)?
        };
        Ok(InFlight {
            batch,
            body,
            batch_rows,
            refused,
            progress: Progress::new(parts),
        })
    }

    async fn write_batch(&mut self, batch: Arc<Batch>) -> Result<WriteReport, SinkError> {
        let same = self
            .in_flight
            .as_ref()
            .is_some_and(|f| Arc::ptr_eq(&f.batch, &batch));
        if !same {
            self.in_flight = Some(self.prepare(batch)?);
        }
        let f = self.in_flight.as_mut().expect("set above");
        while let Some(i) = f.progress.next_pending() {
            let req = f.progress.request(i);
            match self.client.post(req.body.clone(), req.rows.len()).await {
                Outcome::Acked => f.progress.ack(i),
                Outcome::TooLarge => {
                    let body = &f.body;
                    let refused = f
                        .progress
                        .too_large(i, |a, b| {
                            Ok::<_, arrow_schema::ArrowError>((
                                encode::encode(body, a)?,
                                encode::encode(body, b)?,
                            ))
                        })
                        .map_err(|e| {
                            SinkError::new(
                                SinkErrorKind::Encode,
                                false,
                                "splitting an Arize request",
                            )
                            .with_source(e)
                        })?;
                    if let Some(row) = refused {
                        tracing::warn!(
                            sink = NAME,
                            row = f.batch_rows[row],
                            "Arize answered 413 to a one-row request; the row is dead-lettered"
                        );
                    }
                }
                Outcome::Throttled(wait) => {
                    let mut e = SinkError::new(
                        SinkErrorKind::Unavailable,
                        true,
                        "Arize is throttling (HTTP 429)",
                    );
                    if let Some(w) = wait {
                        e = e.with_retry_after(w);
                    }
                    return Err(e);
                }
                Outcome::Transient(m) => {
                    return Err(SinkError::new(SinkErrorKind::Unavailable, true, m))
                }
                Outcome::NeedsFix(m) => {
                    return Err(SinkError::new(SinkErrorKind::Rejected, false, m))
                }
            }
        }
        let f = self.in_flight.take().expect("set above");
        let mut rejected = f.refused;
        rejected.extend(f.progress.refused_too_large().iter().map(|&r| RejectedRow {
            row: f.batch_rows[r],
            code: "arize_too_large",
            message:
                "Arize answered 413 (payload too large) to a request holding only this row".into(),
        }));
        rejected.sort_by_key(|r| r.row);
        Ok(WriteReport {
            rejected,
            commit_metadata: Vec::new(),
        })
    }
}

impl Sink for ArizeSink {
    fn name(&self) -> &'static str {
        NAME
    }

    /// Writes the batch while taking it (requests in order, remembering which Arize
    /// acknowledged, so a retry resends none of those); the acknowledgement is then ready.
    fn submit(&mut self, batch: Arc<Batch>) -> SubmitFuture<'_> {
        Box::pin(async move { self.write_batch(batch).await.map(crate::sink::written) })
    }
}
