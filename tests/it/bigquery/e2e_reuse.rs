//! exactly_once with two publishers in one group on librdkafka's mock cluster (it keeps commit
//! metadata): partitions revoked and assigned back to the publisher that wrote them keep their
//! streams (no CreateWriteStream), partitions that went to the other publisher in between take
//! the usual path, and every row lands once.

use super::*;

/// The sum of a publisher's series named `name` on its `/metrics` (0 when none is there yet).
fn metric(port: u16, name: &str) -> Option<u64> {
    let (_, body) = crate::runtime::http_get(port, "/metrics")?;
    let values = body
        .lines()
        .filter(|l| l.split([' ', '{']).next() == Some(name))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok());
    Some(values.sum::<f64>() as u64)
}

const CREATED: &str = "observation_publisher_bigquery_streams_created_total";
const REUSED: &str = "observation_publisher_bigquery_streams_reused_total";

/// Produces `logs` round-robin over `topic`'s 4 partitions, so that every partition has rows
/// after every rebalance (a stream is kept, or created, at a partition's first batch).
fn produce_spread(bootstrap: &str, topic: &str, logs: &[(Vec<u8>, bool)]) {
    use rdkafka::producer::{BaseRecord, Producer, ThreadedProducer};
    let p: ThreadedProducer<rdkafka::producer::DefaultProducerContext> =
        rdkafka::config::ClientConfig::new()
            .set("bootstrap.servers", bootstrap)
            .create()
            .unwrap();
    for (i, (b, _)) in logs.iter().enumerate() {
        let mut rec = BaseRecord::<(), [u8]>::to(topic)
            .payload(&b[..])
            .partition(i as i32 % 4);
        while let Err((_, r)) = p.send(rec) {
            rec = r;
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    p.flush(Duration::from_secs(30)).unwrap();
}

/// Waits until the group's committed offsets of `topic`'s 4 partitions sum to `n`.
async fn committed(bootstrap: &str, topic: &str, group: &str, n: i64) -> bool {
    let (b, t, g) = (bootstrap.to_string(), topic.to_string(), group.to_string());
    tokio::task::spawn_blocking(move || {
        wait_for(LIMIT, || {
            crate::runtime::committed_at(&b, &t, &g, 4)
                .values()
                .sum::<i64>()
                == n
        })
    })
    .await
    .unwrap()
}

async fn ready(port: u16) -> bool {
    tokio::task::spawn_blocking(move || {
        wait_for(LIMIT, || {
            http_get(port, "/readyz").is_some_and(|(status, _)| status == 200)
        })
    })
    .await
    .unwrap()
}

/// Eager assignment (a group shared with Merlin's publishers, or `range` set by hand). A alone
/// writes all 4 partitions (4 streams). B joins: the eager rebalance revokes all of A's
/// partitions and gives some back to A, which keeps their streams, while B finalizes A's streams
/// of the others and opens its own. B stops: A takes B's partitions the usual way (their
/// checkpoints name B's streams) and keeps its own again. Without keeping, A creates a stream
/// for every partition at every assignment.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exactly_once_partitions_back_to_their_publisher_keep_their_streams() {
    streams_through_a_join_and_a_leave(true).await;
}

/// The default, cooperative-sticky: B's join revokes only the partitions that move, so A never
/// lets go of the others and writes on in their streams; B's leave hands A back B's partitions
/// on new streams. A creates one stream per partition it starts writing, never one per
/// rebalance.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exactly_once_partitions_a_cooperative_rebalance_keeps_never_change_stream() {
    streams_through_a_join_and_a_leave(false).await;
}

async fn streams_through_a_join_and_a_leave(eager: bool) {
    let _serial = serial().await;
    let ExactlyOnce {
        cluster,
        bootstrap,
        topic,
        dataset,
        all,
        run,
        _dir,
    } = ExactlyOnce::new("eo_keep", 4, 1200, 65, 50, "200ms", &[]).await;
    if eager {
        let range = "      partition.assignment.strategy: range\n";
        crate::common::add_consumer_settings(&run.config, range);
    }
    // B: the same group, its own port and dead-letter file.
    let port_b = free_port();
    let config_b = _dir.path().join("b.yaml");
    let yaml = std::fs::read_to_string(&run.config)
        .unwrap()
        .replace(
            &format!("listen: 127.0.0.1:{}", run.port),
            &format!("listen: 127.0.0.1:{port_b}"),
        )
        .replace("dead.bin", "dead-b.bin");
    std::fs::write(&config_b, yaml).unwrap();
    let run_b = Run {
        dir: run.dir.clone(),
        config: config_b,
        port: port_b,
        group: run.group.clone(),
    };
    let (a, b) = (run.port, port_b);
    let logs = || format!("publisher logs:\n{}", run.logs());

    tokio::task::block_in_place(|| produce_spread(&bootstrap, &topic, &all[..400]));
    let child_a = run.start();
    assert!(
        committed(&bootstrap, &topic, &run.group, 400).await,
        "{}",
        logs()
    );
    assert_eq!(metric(a, CREATED), Some(4), "one stream per partition");

    let child_b = run_b.start();
    assert!(ready(b).await && ready(a).await, "{}", logs());
    tokio::task::block_in_place(|| produce_spread(&bootstrap, &topic, &all[400..800]));
    assert!(
        committed(&bootstrap, &topic, &run.group, 800).await,
        "{}",
        logs()
    );
    let moved = metric(b, CREATED).unwrap_or(0);
    assert!(
        (1..4).contains(&moved),
        "B took some partitions: {moved}; {}",
        logs()
    );
    assert_eq!(
        metric(a, CREATED),
        Some(4),
        "A kept the streams of the partitions it got back; {}",
        logs()
    );
    // Under cooperative-sticky A's other partitions were never revoked: nothing to keep, and
    // the series is there at 0 (registered at start, so a rate or an increase() sees its first
    // event).
    let kept = if eager { 4 - moved } else { 0 };
    if !eager {
        let body = http_get(a, "/metrics").map(|r| r.1).unwrap_or_default();
        assert!(body.contains(&format!("\n{REUSED} 0\n")), "{body}");
    }
    assert_eq!(metric(a, REUSED), Some(kept), "{}", logs());

    let code = tokio::task::spawn_blocking(move || stop(child_b))
        .await
        .unwrap();
    assert_eq!(code, Some(0));
    tokio::task::block_in_place(|| produce_spread(&bootstrap, &topic, &all[800..]));
    assert!(
        committed(&bootstrap, &topic, &run.group, 1200).await,
        "{}",
        logs()
    );
    assert_eq!(
        metric(a, CREATED),
        Some(4 + moved),
        "B's partitions came back on new streams; {}",
        logs()
    );
    assert_eq!(metric(a, REUSED), Some(2 * kept), "{}", logs());
    let code = tokio::task::spawn_blocking(move || stop(child_a))
        .await
        .unwrap();
    assert_eq!(code, Some(0));
    assert_eq!(counts_in(&dataset).await, (1200, 1200), "every row once");
    drop(cluster);
}
