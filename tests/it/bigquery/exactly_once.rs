//! Exactly-once delivery on COMMITTED streams: resume by finalize-and-skip, fencing, identical
//! re-sends after lost answers, and stopping on gaps and refused rows.

use super::proxy::{Fault, Proxy, Script};
use super::*;
use observation_publisher::sink::bigquery::checkpoint::{resume_partition, Checkpoint};
use observation_publisher::sink::bigquery::{AppendWriter, WriterError};
use tonic::Code;

fn any_port() -> std::net::SocketAddr {
    "127.0.0.1:0".parse().expect("address")
}

fn committed(client: StorageClient, stream: &str, f: &Fixture) -> AppendWriter {
    AppendWriter::start_committed(
        client,
        stream.to_string(),
        0,
        0,
        Arc::clone(&f.layout.arrow),
        test_writer_options(),
    )
    .expect("writer")
}

#[tokio::test]
async fn resume_finalizes_fences_the_old_owner_and_skips_rows_already_written() {
    let f = Fixture::new("eo_resume").await;
    let client = storage(&grpc_url());
    let first = resume_partition(&client, f.table(), None)
        .await
        .expect("new stream");
    assert_eq!(first.skip_rows, 0);
    let old = committed(client.clone(), &first.stream, &f);

    // Messages → rows, deterministically: three "polls" of 20 rows each.
    let polls: Vec<RecordBatch> = (0..4u64).map(|i| f.batch(700 + i, 10, 2)).collect();
    let a = old
        .append(polls[0].clone())
        .await
        .expect("append")
        .await
        .expect("acked");
    let b = old
        .append(polls[1].clone())
        .await
        .expect("append")
        .await
        .expect("acked");
    assert_eq!(a.stream_offsets, Some(0..20));
    assert_eq!(b.stream_offsets, Some(20..40));

    // The Kafka commit happened after the first poll only; then the process "crashed".
    let meta = Checkpoint {
        stream: first.stream.clone(),
        next_row: 20,
        carried: 0,
        day: None,
    }
    .to_metadata();
    let cp = Checkpoint::from_metadata(&meta).expect("checkpoint");

    let resumed = resume_partition(&client, f.table(), Some(&cp))
        .await
        .expect("resume");
    assert_eq!(resumed.finalized, Some((first.stream.clone(), 40)));
    assert_eq!(
        resumed.skip_rows, 20,
        "the second poll is already in BigQuery"
    );
    assert_ne!(resumed.stream, first.stream);

    // The previous owner is fenced: nothing more of it is acknowledged.
    let zombie = old.append(polls[3].clone()).await.expect("append").await;
    assert!(matches!(zombie, Err(WriterError::Stopped(_))), "{zombie:?}");
    assert!(!old.is_healthy());

    // Replay from the committed Kafka offset: poll 1 again (skipped: 20 rows), then poll 2.
    let new = committed(client.clone(), &resumed.stream, &f);
    let mut skip = resumed.skip_rows as usize;
    for poll in &polls[1..3] {
        let n = poll.num_rows();
        let take = poll.slice(skip.min(n), n - skip.min(n));
        skip -= skip.min(n);
        if take.num_rows() > 0 {
            let out = new
                .append(take)
                .await
                .expect("append")
                .await
                .expect("acked");
            assert_eq!(out.stream_offsets, Some(0..20));
        }
    }
    assert!(new.close(Duration::from_secs(30)).await);
    assert_eq!(
        f.counts().await,
        (60, 60),
        "every row once, none of the zombie's"
    );
}

#[tokio::test]
async fn lost_answers_and_outages_resend_identical_requests_and_land_once() {
    let f = Fixture::new("eo_faults").await;
    let stream = resume_partition(&storage(&grpc_url()), f.table(), None)
        .await
        .expect("stream")
        .stream;
    let mut script = Script::default();
    script.at.insert(2, Fault::ForwardThenDrop);
    script.at.insert(5, Fault::Unavailable);
    script.at.insert(8, Fault::InBand(Code::Unavailable));
    script.at.insert(11, Fault::ForwardThenDrop);
    let proxy = Proxy::start(any_port(), &grpc_url(), script).await;
    let w = committed(storage(&proxy.url()), &stream, &f);
    let batches: Vec<RecordBatch> = (0..10u64).map(|i| f.batch(800 + i, 5, 2)).collect();
    let mut pending = Vec::new();
    for b in &batches {
        pending.push(w.append(b.clone()).await.expect("append"));
    }
    let mut next = 0;
    for p in pending {
        let out = tokio::time::timeout(Duration::from_secs(120), p)
            .await
            .expect("resolves")
            .expect("acked");
        assert_eq!(
            out.stream_offsets,
            Some(next..next + 10),
            "contiguous offsets in append order"
        );
        next += 10;
    }
    assert_eq!(proxy.unused_faults(), 0);
    assert!(w.is_healthy());
    assert!(w.close(Duration::from_secs(30)).await);
    assert_eq!(
        f.counts().await,
        (100, 100),
        "answers lost after landing: re-sent, not duplicated"
    );
}

#[tokio::test]
async fn a_gap_or_refused_rows_stop_the_partition_without_acknowledging() {
    let f = Fixture::new("eo_stop").await;
    let client = storage(&grpc_url());
    for fault in [Fault::InBand(Code::OutOfRange), Fault::RowErrors(vec![1])] {
        let stream = resume_partition(&client, f.table(), None)
            .await
            .expect("stream")
            .stream;
        let mut script = Script::default();
        script.at.insert(1, fault.clone());
        let proxy = Proxy::start(any_port(), &grpc_url(), script).await;
        let w = committed(storage(&proxy.url()), &stream, &f);
        let out = w.append(f.batch(900, 5, 2)).await.expect("append").await;
        assert!(
            matches!(out, Err(WriterError::Stopped(_))),
            "{fault:?}: {out:?}"
        );
        assert!(!w.is_healthy(), "{fault:?}");
        assert_eq!(proxy.forwarded(), 0);
    }
    assert_eq!(f.counts().await, (0, 0));
}
