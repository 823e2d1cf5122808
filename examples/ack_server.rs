//! The stand-in AppendRows server of `tests/it/bigquery/slow_ack.rs` (acknowledges every request
//! itself 100 ms after it arrived, pipelined, keeps nothing) as a process: prints its URL, then
//! serves until killed. `scripts/bench-fetch`'s `bigquery` variant points the BIGQUERY sink's
//! `storage_endpoint` at it to measure the publisher's own CPU per message with that sink
//! through the broker (the emulator copies its table on every append, so it cannot be fed at
//! these rates; it still serves the table management over REST).
//! `ACK_DELAY_MS` sets the delay (default 100; `scripts/bench-stall` uses an hour: a stalled
//! sink).
//!   cargo run --release --example ack_server
use std::io::Write;

#[path = "../tests/it/bigquery/slow_ack.rs"]
mod slow_ack;

#[tokio::main]
async fn main() {
    let delay = std::env::var("ACK_DELAY_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .map_or(slow_ack::DELAY, std::time::Duration::from_millis);
    let server = slow_ack::SlowAck::start_with(delay).await;
    println!("{}", server.url);
    let _ = std::io::stdout().flush();
    std::future::pending::<()>().await;
}
