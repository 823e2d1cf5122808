//! exactly_once with a coordinator that cannot answer `OffsetFetch`: the
//! partition is not started on a guess. It stays paused, `/readyz` says why, nothing is
//! written; once the coordinator answers, every row lands exactly once.

use super::*;
use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exactly_once_holds_a_partition_whose_checkpoint_cannot_be_read() {
    let _serial = serial().await;
    let ExactlyOnce {
        cluster,
        bootstrap,
        topic,
        dataset,
        all,
        run,
        _dir,
    } = ExactlyOnce::new("eo_unread", 1, 300, 66, 50, "1s", &[]).await;
    tokio::task::block_in_place(|| crate::runtime::produce_at(&bootstrap, &topic, &all));
    // Every OffsetFetch fails while the stack lasts (librdkafka retries "loading" itself, so
    // each read of ours consumes several).
    cluster.request_errors(
        RDKafkaApiKey::OffsetFetch,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_COORDINATOR_LOAD_IN_PROGRESS; 100_000],
    );
    let child = run.start();
    let port = run.port;
    let why = tokio::task::spawn_blocking(move || {
        let mut body = String::new();
        let seen = wait_for(LIMIT, || {
            body = http_get(port, "/readyz")
                .map(|(_, b)| b)
                .unwrap_or_default();
            body.contains("checkpoint could not be read")
        });
        (seen, body)
    })
    .await
    .unwrap();
    assert!(
        why.0,
        "/readyz names the unread checkpoint: {:?}; logs:\n{}",
        why.1,
        run.logs()
    );
    assert_eq!(
        http_get(port, "/readyz").map(|(s, _)| s),
        Some(503),
        "unready while held"
    );
    assert_eq!(
        rows_written(port).unwrap_or(0),
        0,
        "nothing written on a guess"
    );

    cluster.clear_request_errors(RDKafkaApiKey::OffsetFetch);
    let (b, t, g) = (bootstrap.clone(), topic.clone(), run.group.clone());
    let done = tokio::task::spawn_blocking(move || {
        wait_for(LIMIT, || {
            crate::runtime::committed_at(&b, &t, &g, 1)
                .values()
                .sum::<i64>()
                == 300
        })
    })
    .await
    .unwrap();
    assert!(done, "every offset committed; logs:\n{}", run.logs());
    assert_eq!(
        http_get(port, "/readyz").map(|(s, _)| s),
        Some(200),
        "ready once the checkpoint is read"
    );
    let code = tokio::task::spawn_blocking(move || stop(child))
        .await
        .unwrap();
    assert_eq!(code, Some(0));
    let (count, distinct) = counts_in(&dataset).await;
    assert_eq!((count, distinct), (300, 300), "every row once");
    drop(cluster);
}
