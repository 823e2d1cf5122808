//! observation-publisher
pub mod config;
