//! Exactly-once across midnight: the partition window is evaluated at the day the checkpoint
//! carries, so a new owner after midnight refuses exactly what the old owner refused before it
//! (and its skip covers exactly the rows already written); the day moves only where a commit
//! at the batch's first offset records it.

use super::reuse::{logs, Pipeline};
use super::*;
use observation_publisher::sink::bigquery::exactly_once::Clock;
use observation_publisher::sink::bigquery::validate::{day_of, day_start};
use std::sync::atomic::{AtomicI64, Ordering::SeqCst};

const MINUTE: i64 = 60_000_000;

/// `n` logs alternating between a row of `day` and a row of the oldest day the fixture's table
/// keeps at `day` (`ttl_days: 14`): in the window at `day`, the second ones out of it at `day + 1`.
fn mixed(f: &Fixture, day: i64, n: usize) -> Vec<Vec<u8>> {
    let fresh = logs(f, 5, n / 2, day_start(day) + 60 * MINUTE);
    let oldest = logs(f, 6, n / 2, day_start(day - 14) + 60 * MINUTE);
    fresh
        .into_iter()
        .zip(oldest)
        .flat_map(|(a, b)| [a, b])
        .collect()
}

fn clock_of(at: &Arc<AtomicI64>) -> Clock {
    let at = Arc::clone(at);
    Arc::new(move || at.load(SeqCst))
}

#[tokio::test]
async fn a_replay_after_midnight_refuses_what_the_writer_refused_and_the_day_moves_at_a_commit() {
    let f = Fixture::new("eo_midnight").await;
    let d = day_of(observation_publisher::sink::bigquery::validate::now_micros());
    let logs = mixed(&f, d, 40);
    let p = Pipeline::with_logs(f, logs);
    let at = Arc::new(AtomicI64::new(day_start(d + 1) - MINUTE));

    // 23:59: the old owner writes two batches; only the first one's commit happens.
    let mut a = p.sink().await.with_clock(clock_of(&at));
    p.assign(1, None);
    let (cp10, refused) = p.write_report(&mut a, 0..10, 1).await;
    assert_eq!(refused, 0, "at day d every row is in the window");
    assert_eq!(cp10.day, Some(d), "the checkpoint carries the window's day");
    let (_, refused) = p.write_report(&mut a, 10..20, 1).await;
    assert_eq!(refused, 0);

    // 00:01: the next owner replays from offset 10 at the checkpoint's day.
    at.store(day_start(d + 1) + MINUTE, SeqCst);
    let mut b = p.sink().await.with_clock(clock_of(&at));
    p.assign(2, Some(&cp10));
    let (cp30, refused) = p.write_report(&mut b, 10..30, 2).await;
    assert_eq!(
        refused, 0,
        "the replay refuses what the writer refused: nothing"
    );
    assert_eq!(cp30.day, Some(d), "no commit has moved the day yet");
    assert_eq!(
        p.f.counts().await,
        (30, 30),
        "every row once: the skip covered exactly the rows the old owner wrote"
    );

    // The next batch moves the day once every earlier message is acknowledged (the pipeline
    // says "behind" twice first), recorded at the batch's first offset before any row is
    // evaluated at the new day.
    p.behind.store(2, SeqCst);
    let (cp40, refused) = p.write_report(&mut b, 30..40, 2).await;
    assert_eq!(p.behind.load(SeqCst), 0, "asked again while behind");
    let moves = p.moves.lock().unwrap().clone();
    assert_eq!(moves.len(), 1, "{moves:?}");
    let (offset, moved) = &moves[0];
    assert_eq!(*offset, 30, "recorded at the batch's first offset");
    assert_eq!(
        (
            moved.stream.as_str(),
            moved.next_row,
            moved.carried,
            moved.day
        ),
        (cp30.stream.as_str(), cp30.next_row, 0, Some(d + 1)),
    );
    assert_eq!(refused, 5, "at day d + 1 the oldest day's rows are refused");
    assert_eq!(cp40.day, Some(d + 1));
    assert_eq!(p.f.counts().await, (35, 35));
}
