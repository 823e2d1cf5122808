//! Appends through the real Storage Write gRPC API of the emulator.

use super::*;
use arrow_array::cast::AsArray;
use arrow_array::types::{Float64Type, Int64Type, TimestampMicrosecondType};
use arrow_array::{Array, ArrayRef, StringArray};
use observation_publisher::sink::bigquery::AppendWriter;
use std::collections::HashMap;

fn writer(f: &Fixture, opts: WriterOptions) -> AppendWriter {
    AppendWriter::start(
        storage(&grpc_url()),
        f.table(),
        Arc::clone(&f.layout.arrow),
        opts,
    )
    .expect("writer")
}

/// The batch's cell as BigQuery's JSON would print it (None for NULL).
fn cell(col: &ArrayRef, i: usize) -> Option<String> {
    if col.is_null(i) {
        return None;
    }
    use arrow_schema::DataType::*;
    Some(match col.data_type() {
        Utf8 => col.as_string::<i32>().value(i).to_string(),
        Int64 => col.as_primitive::<Int64Type>().value(i).to_string(),
        Float64 => col.as_primitive::<Float64Type>().value(i).to_string(),
        Boolean => col.as_boolean().value(i).to_string(),
        Timestamp(..) => col
            .as_primitive::<TimestampMicrosecondType>()
            .value(i)
            .to_string(),
        other => panic!("unexpected column type {other}"),
    })
}

#[tokio::test]
async fn decoded_logs_land_with_their_types_and_values() {
    let f = Fixture::new("values").await;
    let batch = f.batch(7, 40, 3);
    let w = writer(&f, test_writer_options());
    let out = w
        .append(batch.clone())
        .await
        .expect("append")
        .await
        .expect("acknowledged");
    assert_eq!((out.rows, out.appended, out.rejected.len()), (120, 120, 0));
    assert_eq!(w.stats().failures.load(Ordering::Relaxed), 0);
    assert!(w.is_healthy());
    assert!(w.close(Duration::from_secs(30)).await);

    let names: Vec<String> = f.layout.columns.iter().map(|c| c.name.clone()).collect();
    let q = f
        .query(&format!("SELECT {} FROM {{t}}", names.join(", ")))
        .await;
    assert_eq!(q.rows.len(), 120);
    assert_eq!(q.columns, names);
    let by_key: HashMap<(String, String), &Vec<Option<String>>> = q
        .rows
        .iter()
        .map(|r| {
            (
                (
                    r[0].clone().expect("session_id"),
                    r[1].clone().expect("row_id"),
                ),
                r,
            )
        })
        .collect();
    assert_eq!(by_key.len(), 120, "no duplicates");
    let sessions: &StringArray = batch.column(0).as_string::<i32>();
    let row_ids: &StringArray = batch.column(1).as_string::<i32>();
    let mut nulls = 0;
    for i in 0..batch.num_rows() {
        let key = (sessions.value(i).to_string(), row_ids.value(i).to_string());
        let row = by_key
            .get(&key)
            .unwrap_or_else(|| panic!("row {key:?} missing"));
        for (c, col) in batch.columns().iter().enumerate() {
            let want = cell(col, i);
            let got = row[c].clone();
            nulls += usize::from(want.is_none());
            match (col.data_type(), &want, &got) {
                (arrow_schema::DataType::Float64, Some(w), Some(g)) => {
                    let (w, g): (f64, f64) = (w.parse().expect("f64"), g.parse().expect("f64"));
                    assert_eq!(
                        w.to_bits(),
                        g.to_bits(),
                        "{} of {key:?}: {w} vs {g}",
                        names[c]
                    );
                }
                _ => assert_eq!(want, got, "{} of {key:?}", names[c]),
            }
        }
    }
    assert!(nulls > 0, "the generator's NULL cells were compared too");
}

#[tokio::test]
async fn pipelined_appends_all_land_once() {
    let f = Fixture::new("pipelined").await;
    let w = writer(&f, test_writer_options());
    let mut pending = Vec::new();
    let mut expected = 0;
    for seed in 0..16u64 {
        let b = f.batch(100 + seed, 25, 2);
        expected += b.num_rows();
        pending.push(w.append(b).await.expect("append"));
    }
    let mut appended = 0;
    for p in pending {
        let out = p.await.expect("acknowledged");
        assert!(out.rejected.is_empty());
        appended += out.appended;
    }
    assert_eq!(appended, expected);
    assert_eq!(
        w.stats().connections.load(Ordering::Relaxed),
        1,
        "one persistent stream"
    );
    assert_eq!(
        w.stats().requests_sent.load(Ordering::Relaxed),
        16,
        "nothing re-sent"
    );
    assert!(w.close(Duration::from_secs(30)).await);
    assert_eq!(f.counts().await, (expected as u64, expected as u64));
}

#[tokio::test]
async fn a_batch_over_max_request_bytes_is_split_and_lands_once() {
    let f = Fixture::new("split").await;
    let batch = f.batch(3, 2_000, 2);
    let encoded = observation_publisher::sink::bigquery::encode::batch_bytes(&batch)
        .expect("ipc")
        .len();
    let opts = WriterOptions {
        max_request_bytes: 64 << 10,
        ..test_writer_options()
    };
    assert!(
        encoded > 3 * opts.max_request_bytes,
        "the batch needs several requests ({encoded} bytes)"
    );
    let w = writer(&f, opts);
    let out = w
        .append(batch)
        .await
        .expect("append")
        .await
        .expect("acknowledged");
    assert_eq!((out.appended, out.rejected.len()), (4_000, 0));
    let sent = w.stats().requests_sent.load(Ordering::Relaxed);
    assert!(sent >= 3, "split into {sent} requests");
    assert_eq!(w.stats().connections.load(Ordering::Relaxed), 1);
    assert_eq!(w.stats().failures.load(Ordering::Relaxed), 0);
    assert!(w.close(Duration::from_secs(30)).await);
    assert_eq!(f.counts().await, (4_000, 4_000));
}

/// A request over the emulator's 10 MiB cap (sent because the writer was told a larger limit)
/// is refused in-band with RESOURCE_EXHAUSTED "size cap": the writer splits it, never re-sends
/// it as is, and every row lands once.
#[tokio::test]
async fn a_size_cap_rejection_is_split_and_resent() {
    let f = Fixture::new("sizecap").await;
    // Long merchant ids make a ~10.2 MiB request out of ~5k rows (between the 10 MiB in-band
    // cap and the 11 MiB transport cap).
    let base = f.batch(9, 2_700, 2);
    let mut cols: Vec<ArrayRef> = base.columns().to_vec();
    let pad = "x".repeat(1_900);
    let merchants: StringArray = (0..base.num_rows())
        .map(|i| Some(format!("{i}-{pad}")))
        .collect();
    cols[5] = Arc::new(merchants);
    let batch = RecordBatch::try_new(base.schema(), cols).expect("batch");
    let encoded = observation_publisher::sink::bigquery::encode::batch_bytes(&batch)
        .expect("ipc")
        .len();
    assert!(
        encoded > 10 << 20 && encoded < (10 << 20) + (800 << 10),
        "{encoded}"
    );
    let opts = WriterOptions {
        max_request_bytes: 11 << 20,
        max_inflight_bytes: 64 << 20,
        ..test_writer_options()
    };
    let w = writer(&f, opts);
    let out = w
        .append(batch)
        .await
        .expect("append")
        .await
        .expect("acknowledged");
    assert_eq!((out.appended, out.rejected.len()), (5_400, 0));
    assert!(w.close(Duration::from_secs(60)).await);
    assert_eq!(f.counts().await, (5_400, 5_400));
}

#[tokio::test]
async fn a_missing_table_makes_the_writer_unhealthy_until_it_exists() {
    let f = Fixture::new("notfound").await;
    let missing = TableRef {
        table: "not_yet".into(),
        ..f.table().clone()
    };
    let w = AppendWriter::start(
        storage(&grpc_url()),
        &missing,
        Arc::clone(&f.layout.arrow),
        test_writer_options(),
    )
    .expect("writer");
    let mut health = w.health();
    let mut pending = w.append(f.batch(5, 10, 1)).await.expect("append");
    tokio::time::timeout(Duration::from_secs(60), health.wait_for(|h| !*h))
        .await
        .expect("NOT_FOUND makes the writer unhealthy")
        .expect("health channel");
    assert!(
        tokio::time::timeout(Duration::from_millis(300), &mut pending)
            .await
            .is_err(),
        "nothing is acknowledged while the table is missing"
    );
    let mut spec = f.spec.clone();
    spec.table = missing.clone();
    spec.resource["tableReference"]["tableId"] = serde_json::json!("not_yet");
    f.tables
        .ensure_table(&spec)
        .await
        .expect("create the table");
    let out = tokio::time::timeout(Duration::from_secs(60), pending)
        .await
        .expect("recovers once the table exists")
        .expect("acknowledged");
    assert_eq!(out.appended, 10);
    assert!(w.is_healthy());
    assert!(w.close(Duration::from_secs(30)).await);
    let q = f
        .query(&format!("SELECT COUNT(*) FROM `{}`", missing.dotted()))
        .await;
    assert_eq!(q.scalar(), Some("10"));
}

/// Rows whose `request_timestamp` is in an expired partition or too far ahead are reported
/// rejected with that reason and never sent; on a committed stream the offsets cover only the
/// rows sent.
#[tokio::test]
async fn rows_outside_the_partition_range_are_rejected_before_sending() {
    use arrow_array::TimestampMicrosecondArray;
    use observation_publisher::sink::bigquery::checkpoint::resume_partition;
    use observation_publisher::sink::bigquery::validate::{now_micros, PartitionWindow};
    use observation_publisher::sink::bigquery::RejectReason;

    let f = Fixture::new("window").await;
    let base = f.batch(11, 10, 1);
    let now = now_micros();
    const DAY: i64 = 86_400_000_000;
    let ts: TimestampMicrosecondArray = (0..10i64)
        .map(|i| {
            Some(match i {
                2 => now - 30 * DAY,  // expired (ttl 14 days)
                7 => now + 800 * DAY, // too far ahead
                _ => now - i * 1_000,
            })
        })
        .collect::<TimestampMicrosecondArray>()
        .with_timezone("UTC");
    let mut cols = base.columns().to_vec();
    cols[2] = Arc::new(ts);
    let batch = RecordBatch::try_new(base.schema(), cols).expect("batch");
    let opts = WriterOptions {
        partition_window: Some(PartitionWindow::for_ttl_days(2, 14)),
        ..test_writer_options()
    };

    let w = writer(&f, opts.clone());
    let out = w
        .append(batch.clone())
        .await
        .expect("append")
        .await
        .expect("acked");
    let rejected: Vec<(usize, RejectReason)> =
        out.rejected.iter().map(|r| (r.index, r.reason)).collect();
    assert_eq!(
        rejected,
        [
            (2, RejectReason::OutsidePartitionRange),
            (7, RejectReason::OutsidePartitionRange)
        ]
    );
    assert_eq!(out.appended, 8);
    assert!(w.close(Duration::from_secs(30)).await);

    let client = storage(&grpc_url());
    let stream = resume_partition(&client, f.table(), None)
        .await
        .expect("stream")
        .stream;
    let eo = AppendWriter::start_committed(client, stream, 0, 0, Arc::clone(&f.layout.arrow), opts)
        .expect("writer");
    let out = eo
        .append(batch)
        .await
        .expect("append")
        .await
        .expect("acked");
    assert_eq!((out.appended, out.rejected.len()), (8, 2));
    assert_eq!(out.stream_offsets, Some(0..8));
    assert!(eo.close(Duration::from_secs(30)).await);
    assert_eq!(
        f.counts().await,
        (16, 8),
        "8 rows per writer, none of the out-of-range ones"
    );
}
