//! Metrics (in progress).
