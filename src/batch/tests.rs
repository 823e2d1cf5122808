//! Unit and property tests of the batcher.

use super::testing::{layout, log, malformed, numeric_last_row_id};
use super::*;
use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use proptest::prelude::*;
use std::collections::BTreeMap;

fn cfg(max_rows: usize, max_bytes: usize, linger_ms: u64) -> Batching {
    Batching {
        max_rows,
        max_bytes,
        linger: Duration::from_millis(linger_ms),
        max_inflight_bytes: 1 << 30,
        ..Batching::default()
    }
}

/// `x` of a row encodes where it came from: partition * 1e9 + offset * 100 + row in log.
fn x_of(partition: Partition, offset: i64, row: usize) -> i64 {
    i64::from(partition) * 1_000_000_000 + offset * 100 + row as i64
}

fn msg(partition: Partition, offset: i64, rows: usize) -> Vec<u8> {
    log("s", rows, x_of(partition, offset, 0), 1_700_000_000_000_000)
}

fn xs(b: &Batch) -> Vec<i64> {
    b.records
        .column(4)
        .as_primitive::<Int64Type>()
        .values()
        .to_vec()
}

#[test]
fn flushes_at_max_rows() {
    let t0 = Instant::now();
    let mut b = Batcher::new(layout(), cfg(4, 1 << 20, 1000));
    let mut ready = Vec::new();
    for o in 0..4 {
        assert_eq!(b.push(0, o, &msg(0, o, 1), t0, &mut ready), Ok(1));
    }
    assert_eq!(ready.len(), 1);
    assert_eq!(ready[0].rows(), 4);
    assert_eq!(ready[0].reason, FlushReason::Rows);
    assert_eq!(
        ready[0].offsets,
        vec![PartitionOffsets {
            partition: 0,
            ranges: vec![OffsetRange::new(0, 3)]
        }]
    );
    assert!(b.is_empty());
    assert_eq!(b.deadline(), None);
}

#[test]
fn a_log_that_does_not_fit_starts_the_next_batch() {
    let t0 = Instant::now();
    let mut b = Batcher::new(layout(), cfg(5, 1 << 20, 1000));
    let mut ready = Vec::new();
    b.push(0, 10, &msg(0, 10, 3), t0, &mut ready).unwrap();
    b.push(0, 11, &msg(0, 11, 3), t0, &mut ready).unwrap();
    assert_eq!(ready.len(), 1);
    assert_eq!(ready[0].rows(), 3);
    assert_eq!(
        xs(&ready[0]),
        vec![x_of(0, 10, 0), x_of(0, 10, 1), x_of(0, 10, 2)]
    );
    assert_eq!(ready[0].offsets[0].ranges, vec![OffsetRange::single(10)]);
    assert_eq!(b.rows(), 3);
    let rest = b.flush().unwrap();
    assert_eq!(rest.reason, FlushReason::Drain);
    assert_eq!(
        xs(&rest),
        vec![x_of(0, 11, 0), x_of(0, 11, 1), x_of(0, 11, 2)]
    );
    assert_eq!(rest.offsets[0].ranges, vec![OffsetRange::single(11)]);
    assert!(b.flush().is_none());
}

#[test]
fn an_oversized_log_is_a_batch_of_its_own() {
    let t0 = Instant::now();
    let mut b = Batcher::new(layout(), cfg(2, 1 << 20, 1000));
    let mut ready = Vec::new();
    b.push(0, 0, &msg(0, 0, 1), t0, &mut ready).unwrap();
    b.push(0, 1, &msg(0, 1, 7), t0, &mut ready).unwrap();
    assert_eq!(
        ready.iter().map(Batch::rows).collect::<Vec<_>>(),
        vec![1, 7]
    );
    assert_eq!(ready[1].messages, 1);
    assert!(b.is_empty());
}

#[test]
fn flushes_on_bytes() {
    let t0 = Instant::now();
    // Each row weighs well over 40 bytes (fixed-width columns plus strings).
    let mut b = Batcher::new(layout(), cfg(1000, 200, 1000));
    let mut ready = Vec::new();
    for o in 0..20 {
        b.push(1, o, &msg(1, o, 1), t0, &mut ready).unwrap();
    }
    assert!(ready.len() > 2);
    for batch in &ready {
        assert!(batch.bytes <= 200, "{} bytes", batch.bytes);
        assert_eq!(batch.reason, FlushReason::Bytes);
    }
}

#[test]
fn a_batch_flushes_at_an_eighth_of_the_inflight_budget_when_that_is_smaller() {
    let t0 = Instant::now();
    // max_bytes would allow 1 MiB; the budget (1,600 bytes) allows 200 per batch.
    let config = Batching {
        max_inflight_bytes: 1_600,
        ..cfg(1000, 1 << 20, 1000)
    };
    assert_eq!(config.batch_bytes(), 200);
    let mut b = Batcher::new(layout(), config);
    let mut ready = Vec::new();
    for o in 0..20 {
        b.push(1, o, &msg(1, o, 1), t0, &mut ready).unwrap();
    }
    assert!(ready.len() > 2, "{} batches", ready.len());
    for batch in &ready {
        assert!(batch.bytes <= 200, "{} bytes", batch.bytes);
        assert_eq!(batch.reason, FlushReason::Bytes);
    }
}

/// 1,000 rows of a 4 KiB session id: ≈ 4 MB decoded from ≈ 12 KB, counted and reserved.
fn large(offset: i64) -> Vec<u8> {
    log(
        &"s".repeat(4096),
        1_000,
        x_of(1, offset, 0),
        1_700_000_000_000_000,
    )
}

#[test]
fn a_rejected_large_log_leaves_no_capacity_in_the_open_batch() {
    let t0 = Instant::now();
    let mut b = Batcher::new(layout(), cfg(10_000, 8 << 20, 1000));
    let mut ready = Vec::new();
    b.push(1, 0, &msg(1, 0, 1), t0, &mut ready).unwrap();
    let before = b.held_bytes();
    let bad = numeric_last_row_id(&large(1));
    let e = b.push(1, 1, &bad, t0, &mut ready).unwrap_err();
    assert_eq!(e.error.kind, crate::decode::ErrorKind::TypeMismatch, "{e}");
    assert!(
        b.held_bytes() <= before + (256 << 10),
        "the open batch holds {} bytes after the rollback (was {before})",
        b.held_bytes()
    );
    let batch = b.flush().unwrap();
    assert_eq!(batch.rows(), 1);
    assert!(
        batch.held_bytes < 256 << 10,
        "{} bytes held",
        batch.held_bytes
    );
}

#[test]
fn a_large_log_that_does_not_fit_ships_the_open_batch_first() {
    let t0 = Instant::now();
    let mut b = Batcher::new(layout(), cfg(10_000, 1 << 20, 1000));
    let mut ready = Vec::new();
    b.push(1, 0, &msg(1, 0, 1), t0, &mut ready).unwrap();
    assert_eq!(b.push(1, 1, &large(1), t0, &mut ready), Ok(1_000));
    assert_eq!(
        ready.iter().map(Batch::rows).collect::<Vec<_>>(),
        vec![1, 1_000]
    );
    // The small batch holds only its row: the large log was never decoded into its builders.
    assert!(
        ready[0].held_bytes < 64 << 10,
        "{} bytes held",
        ready[0].held_bytes
    );
    assert_eq!(ready[0].reason, FlushReason::Bytes);
    // The large one holds what it needs, reserved once (not doubled).
    let big = &ready[1];
    assert!(big.bytes > 4_000_000, "{} bytes", big.bytes);
    assert!(
        big.held_bytes >= big.bytes && big.held_bytes <= big.bytes + big.bytes / 8,
        "{} bytes held for {} bytes of data",
        big.held_bytes,
        big.bytes
    );
    assert!(b.is_empty());
}

#[test]
fn linger_is_driven_by_the_callers_clock() {
    let t0 = Instant::now();
    let linger = Duration::from_millis(500);
    let mut b = Batcher::new(layout(), cfg(100, 1 << 20, 500));
    let mut ready = Vec::new();
    assert_eq!(b.deadline(), None);
    assert!(
        b.poll_linger(t0 + linger * 10).is_none(),
        "an empty batcher never flushes"
    );
    b.push(0, 0, &msg(0, 0, 1), t0, &mut ready).unwrap();
    b.push(
        0,
        1,
        &msg(0, 1, 1),
        t0 + Duration::from_millis(300),
        &mut ready,
    )
    .unwrap();
    assert_eq!(
        b.deadline(),
        Some(t0 + linger),
        "counted from the first message"
    );
    assert!(b.poll_linger(t0 + Duration::from_millis(499)).is_none());
    let batch = b.poll_linger(t0 + linger).unwrap();
    assert_eq!((batch.rows(), batch.reason), (2, FlushReason::Linger));
    // A push that finds the deadline passed flushes at once, with the message.
    b.push(0, 2, &msg(0, 2, 1), t0 + linger, &mut ready)
        .unwrap();
    b.push(0, 3, &msg(0, 3, 1), t0 + linger * 3, &mut ready)
        .unwrap();
    assert_eq!(ready.len(), 1);
    assert_eq!((ready[0].rows(), ready[0].reason), (2, FlushReason::Linger));
}

#[test]
fn a_log_over_max_log_bytes_is_rejected_but_one_over_max_bytes_is_not() {
    let t0 = Instant::now();
    let mut c = cfg(1 << 20, 4096, 1000);
    c.max_log_bytes = 64 << 10;
    let mut b = Batcher::new(layout(), c);
    let mut ready = Vec::new();
    b.push(0, 1, &msg(0, 1, 1), t0, &mut ready).unwrap();
    // A long session id copied into 1,000 rows: about 1 MB decoded from 30 KB.
    let big = log(&"s".repeat(1000), 1000, 0, 1_700_000_000_000_000);
    let f = b.push(0, 2, &big, t0, &mut ready).unwrap_err();
    assert_eq!(f.error.kind, crate::decode::ErrorKind::TooLarge, "{f}");
    assert!(ready.is_empty(), "the open batch is untouched");
    assert_eq!(b.rows(), 1);
    // Over max_bytes (4 KiB) but within max_log_bytes: a batch of its own, as before.
    let alone = msg(0, 3, 500);
    assert_eq!(b.push(0, 3, &alone, t0, &mut ready), Ok(500));
    assert_eq!(ready.iter().map(Batch::rows).collect::<Vec<_>>(), [1, 500]);
}

#[test]
fn rejected_logs_break_the_offset_ranges() {
    let t0 = Instant::now();
    let mut b = Batcher::new(layout(), cfg(100, 1 << 20, 1000));
    let mut ready = Vec::new();
    b.push(0, 1, &msg(0, 1, 1), t0, &mut ready).unwrap();
    b.push(0, 2, &msg(0, 2, 1), t0, &mut ready).unwrap();
    b.push(1, 2, &msg(1, 2, 1), t0, &mut ready).unwrap();
    let f = b.push(0, 3, &malformed(), t0, &mut ready).unwrap_err();
    assert_eq!((f.partition, f.offset), (0, 3));
    assert_eq!(f.error.kind, crate::decode::ErrorKind::InvalidProtobuf);
    assert!(f
        .to_string()
        .starts_with("partition 0 offset 3: invalid_protobuf"));
    b.push(0, 7, &msg(0, 7, 1), t0, &mut ready).unwrap(); // gap 4..6: compacted away
    b.push(1, 3, &msg(1, 3, 1), t0, &mut ready).unwrap();
    let batch = b.flush().unwrap();
    assert_eq!(
        batch.offsets,
        vec![
            PartitionOffsets {
                partition: 0,
                ranges: vec![OffsetRange::new(1, 2), OffsetRange::single(7)]
            },
            PartitionOffsets {
                partition: 1,
                ranges: vec![OffsetRange::new(2, 3)]
            },
        ]
    );
    assert_eq!(batch.messages, 5);
}

#[test]
fn logs_without_rows_are_acknowledged_with_the_batch() {
    let t0 = Instant::now();
    let mut b = Batcher::new(layout(), cfg(100, 1 << 20, 1000));
    let mut ready = Vec::new();
    assert_eq!(b.push(2, 5, &msg(2, 5, 0), t0, &mut ready), Ok(0));
    assert_eq!(
        b.deadline(),
        Some(t0 + Duration::from_secs(1)),
        "linger runs for row-less logs too"
    );
    b.push(2, 6, &msg(2, 6, 2), t0, &mut ready).unwrap();
    b.push(2, 7, &msg(2, 7, 0), t0, &mut ready).unwrap();
    b.push(2, 8, &msg(2, 8, 1), t0, &mut ready).unwrap();
    let batch = b.flush().unwrap();
    assert_eq!(batch.offsets[0].ranges, vec![OffsetRange::new(5, 8)]);
    assert_eq!(batch.rows_by_source.len(), 2);
    assert_eq!(batch.source_of_row(0), Some((2, 6)));
    assert_eq!(batch.source_of_row(1), Some((2, 6)));
    assert_eq!(batch.source_of_row(2), Some((2, 8)));
    assert_eq!(batch.source_of_row(3), None);
}

#[derive(Debug, Clone)]
enum Step {
    /// A message on a partition after a gap; `None` rows = malformed.
    Msg {
        p: Partition,
        gap: i64,
        rows: Option<usize>,
    },
    /// Time passes.
    Wait(u64),
    /// The timer fires.
    Poll,
    /// Drain.
    Flush,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        10 => (0..3i32, prop_oneof![3 => Just(0i64), 1 => 1..4i64], prop_oneof![6 => (0..5usize).prop_map(Some), 1 => Just(None)])
            .prop_map(|(p, gap, rows)| Step::Msg { p, gap, rows }),
        2 => (0..400u64).prop_map(Step::Wait),
        1 => Just(Step::Poll),
        1 => Just(Step::Flush),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]
    #[test]
    fn batches_respect_limits_and_account_for_every_offset(
        max_rows in 1..9usize,
        max_bytes in prop_oneof![Just(1usize << 20), 100..600usize],
        steps in proptest::collection::vec(step(), 1..120),
    ) {
        let t0 = Instant::now();
        let mut now = t0;
        let mut b = Batcher::new(layout(), cfg(max_rows, max_bytes, 250));
        let mut next: BTreeMap<Partition, i64> = BTreeMap::new();
        // (partition, offset) -> rows expected, None if malformed.
        let mut pushed: BTreeMap<(Partition, i64), Option<usize>> = BTreeMap::new();
        let mut failures: Vec<(Partition, i64)> = Vec::new();
        let mut batches: Vec<Batch> = Vec::new();
        for s in steps {
            match s {
                Step::Msg { p, gap, rows } => {
                    let o = next.get(&p).copied().unwrap_or(0) + gap;
                    next.insert(p, o + 1);
                    let bytes = match rows { Some(r) => msg(p, o, r), None => malformed() };
                    pushed.insert((p, o), rows);
                    match b.push(p, o, &bytes, now, &mut batches) {
                        Ok(n) => prop_assert_eq!(Some(n), rows),
                        Err(f) => {
                            prop_assert_eq!(rows, None);
                            failures.push((f.partition, f.offset));
                        }
                    }
                    if let Some(d) = b.deadline() {
                        prop_assert!(d > now, "a due batch is flushed by the push that finds it due");
                    }
                }
                Step::Wait(ms) => now += Duration::from_millis(ms),
                Step::Poll => batches.extend(b.poll_linger(now)),
                Step::Flush => batches.extend(b.flush()),
            }
        }
        batches.extend(b.flush());

        let mut seen: BTreeMap<(Partition, i64), usize> = BTreeMap::new();
        for f in &failures {
            *seen.entry(*f).or_default() += 1;
        }
        for batch in &batches {
            prop_assert!(batch.messages > 0);
            if batch.messages > 1 {
                prop_assert!(batch.rows() <= max_rows, "{} rows > {}", batch.rows(), max_rows);
                prop_assert!(batch.bytes <= max_bytes, "{} bytes > {}", batch.bytes, max_bytes);
            }
            let mut in_batch = 0;
            for po in &batch.offsets {
                for r in &po.ranges {
                    for ((p, o), _) in pushed.range((po.partition, r.first)..=(po.partition, r.last)) {
                        prop_assert_eq!(*p, po.partition);
                        *seen.entry((*p, *o)).or_default() += 1;
                        in_batch += 1;
                    }
                }
            }
            prop_assert_eq!(in_batch, batch.messages, "ranges cover exactly the batch's messages");
            // Every row maps back to its source message.
            let xs = xs(batch);
            let mut row_in_log = 0;
            for (row, x) in xs.iter().enumerate() {
                let (p, o) = batch.source_of_row(row).expect("row has a source");
                if row > 0 && batch.source_of_row(row - 1) != Some((p, o)) {
                    row_in_log = 0;
                }
                prop_assert_eq!(*x, x_of(p, o, row_in_log));
                row_in_log += 1;
            }
        }
        for (k, rows) in &pushed {
            prop_assert_eq!(seen.get(k).copied(), Some(1), "offset {:?} ({:?} rows) accounted for once", k, rows);
        }
        prop_assert_eq!(seen.len(), pushed.len());
        let total_rows: usize = pushed.values().flatten().sum();
        prop_assert_eq!(batches.iter().map(Batch::rows).sum::<usize>(), total_rows);
    }
}

/// A batch made of one log over `max_bytes` is not reserved again by the small batch after it
/// (a 1-row batch after it weighed the large log's capacity).
#[test]
fn a_small_log_after_an_oversized_one_does_not_reserve_its_batch_again() {
    let t0 = Instant::now();
    let mut b = Batcher::new(layout(), cfg(10_000, 1 << 20, 1000));
    let mut ready = Vec::new();
    assert_eq!(b.push(1, 0, &large(0), t0, &mut ready), Ok(1_000));
    assert_eq!(ready.len(), 1, "over max_bytes: a batch of its own");
    let big = ready[0].held_bytes;
    b.push(1, 1, &msg(1, 1, 1), t0, &mut ready).unwrap();
    assert!(
        b.held_bytes() < 256 << 10,
        "a 1-row open batch holds {} bytes (the large batch held {big})",
        b.held_bytes()
    );
    let small = b.flush().unwrap();
    assert!(
        small.held_bytes < 256 << 10,
        "{} bytes held",
        small.held_bytes
    );
}
