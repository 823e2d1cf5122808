//! The MAXCOMPUTE sink: Merlin's MaxCompute table, written through the Tunnel into a staging
//! table of this process (a partition per move epoch), moved into the target with one
//! `INSERT … SELECT` per `interval`
//! (docs/maxcompute.md gives the choice, its cost and its crash semantics).
//!
//! - Start ([`MaxComputeSink::start`]): the target is created with Merlin's DDL when missing or
//!   given the columns it lacks (a changed type: configuration error, exit 2); the staging
//!   tables earlier starts of this pod left are dropped and this process's is created
//!   ([`table`]).
//! - [`Sink::submit`](crate::sink::Sink::submit): waits for one of [`MAX_UPLOADS`] upload slots; the acknowledgement
//!   uploads the batch's rows (the values every sink writes: the batch's Arrow columns, as the
//!   BigQuery sink writes them) into an upload session of its own and commits it
//!   ([`upload`]); rows the Tunnel refuses are narrowed down and reported before anything is
//!   staged. It then resolves [`Progress::Staged`](crate::sink::Progress::Staged) (the batch's bytes leave the in-flight
//!   budget) and continues with a future that resolves [`Progress::Written`](crate::sink::Progress::Written) once the
//!   [`mover`] has moved the batch's epoch into the target. A batch with refused rows skips the
//!   staged step (it stays held until written, so its rows can be dead-lettered).
//! - [`Sink::revoke_hook`](crate::sink::Sink::revoke_hook): a revoke moves what is staged at once, and keeps moving what is
//!   staged until the revoke's deadline, so its rows are committed by the revoke. The pipeline
//!   calls the same hook with a deadline already reached when staged rows' bookkeeping fills
//!   half the in-flight budget: the mover moves at once (an early move).
//! - [`Sink::close`](crate::sink::Sink::close): ends the mover after its running move and drops
//!   the staging table; a move still running after a bounded wait keeps the table.
//!
//! The protocol pieces, pure and verified against pyodps (tests/it/maxcompute; docs/maxcompute.md
//! records the wire facts):
//! - [`sign`]: V2 signing (`Authorization: ODPS <id>:base64(HMAC-SHA1)`); secrets never printed.
//! - [`record`]: the Tunnel's protobuf-like record stream with CRC32C checksums.
//! - [`encode`]: Arrow batches of the model's table → records, tags from the table's schema.
//! - [`schema`]: MaxCompute column types.
//! - [`ddl`]: Merlin's table name, create and alter statements; a changed type is refused.
//! - [`wire`]: the bodies sent and read (SQL instance XML, task status, table and session schema).
//! - [`error`]: every failure classified for the sink seam (retry, needs a fix, rows refused).
//! - [`instance`]: what a poll of an SQL instance says, compared as pyodps compares it.
//! - [`client`]: the signed HTTP clients (SQL instances, table lookup, Tunnel upload sessions).

pub mod client;
pub mod ddl;
pub mod encode;
pub mod error;
pub mod instance;
pub mod mover;
pub mod record;
pub mod schema;
pub mod sign;
pub mod sink;
pub mod table;
pub mod upload;
pub mod wire;

pub use sink::{check_access_url, MaxComputeSink, MAX_UPLOADS};
