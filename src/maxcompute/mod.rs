//! MaxCompute (Alibaba Cloud ODPS) protocol pieces, pure and verified against pyodps
//! (tests/it/maxcompute): request signing, the Tunnel's record encoding, Merlin's DDL. The
//! sink built on them is `sink::maxcompute`; docs/maxcompute.md records the wire facts.
//!
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
pub mod record;
pub mod schema;
pub mod sign;
pub mod wire;
