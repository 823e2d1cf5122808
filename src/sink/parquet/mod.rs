//! The embedded default sink: local Parquet files, one folder per day of `request_timestamp`.
//!
//! Input: batches in the table layout. Output: files
//! `<path>/dt=YYYY-MM-DD/part-<micros>-<run>-<seq>.parquet` with the table's columns (zstd), and
//! an acknowledgement once they are durable.
//!
//! Guarantee (acknowledged = durable): each (batch, day) slice is encoded in memory, written to a
//! hidden temporary name (`.part-….parquet.tmp`) created exclusively, `fsync`ed, renamed to its
//! final name, and the folder is `fsync`ed (and the base folder too when the day folder is new)
//! **before** the batch's acknowledgement resolves `Written` ([`Sink::submit`](crate::sink::Sink::submit) takes a batch
//! once fewer than [`WRITES_AT_ONCE`] are being written, and writes it on the blocking pool). A reader therefore only ever sees complete files, and
//! a crash before the acknowledgement leaves at most a hidden temporary file (and, if the crash
//! hits between two renames of one batch, some final files whose rows are written again after the
//! restart: at-least-once).
//!
//! Rotation: every acknowledged write closes its files, so a file never stays open across
//! batches and `rotate_interval` needs no timer here: files are at most one batch (at most
//! `linger`) old when closed. `rotate_bytes` caps a file: a day slice whose Arrow size exceeds it
//! is split into several files (Parquet output is smaller than the Arrow estimate). Merging small
//! files on quiet topics is left to the reader's compaction.
//!
//! Errors: any I/O failure (a full disk, a read-only or missing folder, permissions) is
//! retryable and leaves no visible file for the failed slice; an encoding failure or a batch
//! without a `request_timestamp` column is permanent.

pub mod sink;

pub use sink::{ParquetSink, DAY_COLUMN, WRITES_AT_ONCE};
