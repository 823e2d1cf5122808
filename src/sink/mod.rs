//! Sinks (in progress).
