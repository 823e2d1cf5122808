//! prost types generated from `proto/caraml/upi/v1/*.proto`.
//!
//! The hot path does not use them ([`crate::decode`] walks the bytes itself); they are the
//! readable reference of the wire format, used by tests, the generator and the prost baseline
//! in the benchmarks.

#[allow(missing_docs, clippy::all, unreachable_pub)]
mod generated {
    include!(concat!(env!("OUT_DIR"), "/caraml.upi.v1.rs"));
}

pub use generated::*;
