//! The ARIZE sink: batches to Arize's pandas-logger endpoint, speaking exactly what Merlin's
//! `ArizeSink` sends through arize 7.10.2, with the status checked (docs/arize.md).
//!
//! Input: shared [`Batch`](crate::batch::Batch)es. Output: `Ok(report)` once Arize acknowledged (2xx) every request
//! of the batch; `report.rejected` lists the rows Arize would refuse ([`validate`]) and rows
//! too large for any request: the runtime dead-letters them as row letters naming the sink.
//!
//! Per batch: validate the rows → build the body columns of the accepted rows ([`encode`]) →
//! split into requests under `max_request_bytes` → post them in order ([`client`]). The requests
//! and which of them Arize acknowledged are remembered ([`progress`]) until the batch succeeds,
//! so a retry of the same batch (after a 429, a 5xx, a timeout, a 401 fixed meanwhile) sends
//! only what was not acknowledged. A 413 splits the request in two and goes on.
//!
//! Files: [`schema`] (the `public.Schema` protobuf and the body's columns, from the config),
//! [`validate`] (per-row checks of the SDK), [`encode`] (Arrow IPC stream bodies), [`progress`]
//! (the batch's requests and their state), [`client`] (HTTP and status classification).

pub mod client;
pub mod encode;
pub mod progress;
pub mod schema;
pub mod sink;
pub mod validate;

pub use sink::{ArizeSink, NAME};
