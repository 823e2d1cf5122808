//! Many AppendRows connections open at once, as two publishers with a pool of connections each
//! (or an exactly-once stream per partition) hold them: every one is served.
//!
//! The emulator runs each RPC on a thread of a pool that defaults to min(32, cores + 4) threads
//! (6 on a 2-core machine) and an open AppendRows stream holds its thread, so without the pool
//! `scripts/bigquery` gives it, the seventh connection here is never answered (the chaos suite
//! saw a writer wait on one until its drain deadline). BigQuery has no such limit.

use super::*;
use observation_publisher::sink::bigquery::AppendWriter;

#[tokio::test]
async fn ten_connections_open_at_once_are_all_answered() {
    let f = Fixture::new("connections").await;
    let mut writers = Vec::new();
    for _ in 0..10 {
        writers.push(
            AppendWriter::start(
                storage(&grpc_url()),
                f.table(),
                Arc::clone(&f.layout.arrow),
                test_writer_options(),
            )
            .expect("writer"),
        );
    }
    // Every writer opens its connection and sends before any answer is awaited.
    let mut pending = Vec::new();
    for (i, w) in writers.iter().enumerate() {
        pending.push(
            w.append(f.batch(5_000 + i as u64, 3, 2))
                .await
                .expect("append"),
        );
    }
    for p in pending {
        let out = tokio::time::timeout(Duration::from_secs(60), p)
            .await
            .expect("every connection is answered")
            .expect("acked");
        assert_eq!(out.appended, 6);
    }
    for w in writers {
        assert!(w.close(Duration::from_secs(30)).await);
    }
    assert_eq!(f.counts().await, (60, 60));
}
