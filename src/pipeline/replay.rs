//! `run --replay FILE`: the same pipeline fed from a length-delimited dump instead of Kafka
//! (backfills, dead-letter replay, benchmarks). Messages get partition 0 and their index as the
//! offset; nothing is committed anywhere; at the end of the file the pipeline drains and prints
//! a summary line (JSON) on stdout.

use super::state::State;
use crate::framing::FrameReader;
use crate::readahead::ReadAhead;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// Reports intake paused (the replay's one "partition") or resumed.
fn intake(st: &State, paused_partitions: usize) {
    st.intake_report(paused_partitions, true).emit();
}

/// Replays `path` (frames up to `max_frame` bytes); returns whether every row was acknowledged.
pub(crate) fn run(
    path: &Path,
    state: Arc<Mutex<State>>,
    shutdown: CancellationToken,
    drain_timeout: Duration,
    max_frame: usize,
) -> bool {
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) => {
            tracing::error!(path = %path.display(), error = %e, "cannot open the replay file");
            return false;
        }
    };
    // Read ahead on a thread of its own, as librdkafka's broker thread fetches on the Kafka
    // path: the pipeline thread only frames and decodes. Three 1 MiB buffers.
    let read_ahead = match ReadAhead::new(file, 1 << 20, 3) {
        Ok(r) => r,
        Err(e) => {
            tracing::error!(error = %e, "cannot start the replay reader thread");
            return false;
        }
    };
    let started = Instant::now();
    let mut reader = FrameReader::new(read_ahead).with_max_frame(max_frame);
    let mut buf = Vec::new();
    let mut index: i64 = 0;
    let mut ok = true;
    let mut st = State::lock(&state);
    // The clock is read, and cancellation checked, with the housekeeping (as the Kafka loop does
    // once per burst): at most 1,024 frames apart, a millisecond or two.
    let mut now = Instant::now();
    loop {
        // Every 1,024 frames, and whenever the budget is used up (so that batches and pending
        // dead letters pass it by one frame at most).
        if index % 1024 == 0 || st.over_budget() {
            if shutdown.is_cancelled() {
                break;
            }
            now = Instant::now();
            st.drain_events(None);
            if st.sink_gone() {
                ok = false;
                break;
            }
            st.retry_dead_letters(now);
            st.poll_linger(now);
            st.move_early(now);
            // Backpressure: wait for acknowledgements rather than read ahead without bound.
            // The open batch counts too: it still ships by linger while intake waits.
            if st.over_budget() {
                intake(&st, 1);
                while st.over_budget() && !shutdown.is_cancelled() && !st.sink_gone() {
                    st.move_early(Instant::now());
                    st.drain_events(Some(Duration::from_millis(20)));
                    st.poll_linger(Instant::now());
                }
                intake(&st, 0);
                now = Instant::now();
            }
        }
        // Decoded where the reader holds the frame when it can (no copy).
        match reader.next_with(&mut buf, |_, frame| {
            st.take(0, index, None, Some(frame), now);
        }) {
            Ok(Some(())) => index += 1,
            Ok(None) => break,
            Err(e) => {
                tracing::error!(error = %e, frame = index, "unrecoverable replay input; stopping after what was read");
                ok = false;
                break;
            }
        }
    }
    st.flush(Instant::now());
    // A replay waits for its sinks as long as it takes, unless asked to stop.
    let mut deadline = None;
    while !st.settle(Instant::now() + Duration::from_millis(200), None, None) {
        if st.sink_gone() {
            ok = false;
            break;
        }
        if shutdown.is_cancelled() {
            let d = *deadline.get_or_insert_with(|| Instant::now() + drain_timeout);
            if Instant::now() >= d {
                ok = false;
                break;
            }
        }
    }
    st.flush_dead_letters(Duration::from_secs(10));
    let secs = started.elapsed().as_secs_f64();
    let t = st.totals;
    let summary = format!(
        "{}\n",
        serde_json::json!({
            "logs": t.messages, "rows": t.rows, "dead_letters": t.dead_letters,
            "seconds": (secs * 1000.0).round() / 1000.0,
            "rows_per_second": (t.rows as f64 / secs.max(1e-9)).round(),
            "complete": ok,
        })
    );
    ok && crate::stdout::print("run", &summary) == std::process::ExitCode::SUCCESS
}
