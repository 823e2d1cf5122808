//! Metric names of the BigQuery sink. They are defined with every other name in
//! [`crate::metrics::names::bigquery`] (the one place metric names are spelled) and re-exported
//! here for the sink's code.
//!
//! Labels are bounded: `table` (one per publisher), `code` (a gRPC code name), `kind`.

pub use crate::metrics::names::bigquery::*;
