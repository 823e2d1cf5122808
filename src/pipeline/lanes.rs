//! One lane per sink: each sink takes its batches on a task of its own, so a sink whose
//! `submit` waits (a MaxCompute move holding its upload slots, an Arize request that hangs)
//! delays only its own batches. The sink task decides what each lane submits and when (its
//! queues, retries and backoff); a lane submits one batch at a time and reports the outcome
//! (the acknowledgement future, or the error). What a lane may hold is bounded as before: the
//! batches are counted in the in-flight budget until every sink has acknowledged them, and each
//! sink bounds what it takes itself.

use super::ledger::{BatchId, SinkIndex};
use crate::batch::Batch;
use crate::sink::{Acknowledgement, Sink, SinkError};
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

/// A batch for one lane to submit.
pub(super) struct Submission {
    pub(super) id: BatchId,
    /// Failed attempts before this one.
    pub(super) attempt: u32,
    pub(super) batch: Arc<Batch>,
}

/// What a lane's submission ended with.
pub(super) struct Submitted {
    pub(super) id: BatchId,
    pub(super) sink: SinkIndex,
    pub(super) attempt: u32,
    /// When the lane called `submit`.
    pub(super) submitted: Instant,
    pub(super) result: Result<Acknowledgement, SinkError>,
}

/// The lanes of every sink.
pub(super) struct Lanes {
    /// Per lane: where its submissions go (at most one queued or in progress, see `busy`).
    to: Vec<mpsc::UnboundedSender<Submission>>,
    busy: Vec<bool>,
    done: mpsc::UnboundedReceiver<Submitted>,
    tasks: JoinSet<()>,
    stop: CancellationToken,
}

impl Lanes {
    /// Starts a lane per sink; `stop` (or [`Lanes::close`]) makes every lane abandon the
    /// submission in progress.
    pub(super) fn start(sinks: Vec<Box<dyn Sink>>, stop: CancellationToken) -> Lanes {
        let (done_tx, done) = mpsc::unbounded_channel();
        let mut tasks = JoinSet::new();
        let mut to = Vec::with_capacity(sinks.len());
        for (i, sink) in sinks.into_iter().enumerate() {
            let (tx, rx) = mpsc::unbounded_channel();
            to.push(tx);
            tasks.spawn(lane(i, sink, rx, done_tx.clone(), stop.clone()));
        }
        Lanes {
            busy: vec![false; to.len()],
            to,
            done,
            tasks,
            stop,
        }
    }

    /// Whether lane `sink` has no submission in progress.
    pub(super) fn idle(&self, sink: SinkIndex) -> bool {
        !self.busy[sink]
    }

    /// Gives lane `sink` (idle) a batch to submit.
    pub(super) fn submit(&mut self, sink: SinkIndex, s: Submission) {
        debug_assert!(!self.busy[sink], "one submission per lane at a time");
        self.busy[sink] = true;
        // A lane ends only when stopped or closed, and the task stops with it.
        let _ = self.to[sink].send(s);
    }

    /// The next submission to end, in any lane. `None` once every lane has ended; never, without
    /// lanes. A lane that
    /// panicked (a sink's `submit` panicked) panics the caller, as a panic in the sink task.
    pub(super) async fn next(&mut self) -> Option<Submitted> {
        if self.busy.is_empty() {
            // No sinks, no lanes: nothing ever ends (the sink task goes on taking batches).
            return std::future::pending().await;
        }
        loop {
            tokio::select! {
                s = self.done.recv() => {
                    let s = s?;
                    self.busy[s.sink] = false;
                    return Some(s);
                }
                Some(ended) = self.tasks.join_next() => {
                    if let Err(e) = ended {
                        if e.is_panic() {
                            std::panic::resume_unwind(e.into_panic());
                        }
                    }
                }
            }
        }
    }

    /// Stops every lane (a submission in progress is abandoned) and waits until each has
    /// closed its sink.
    pub(super) async fn close(mut self) {
        self.stop.cancel();
        self.to.clear();
        while let Some(ended) = self.tasks.join_next().await {
            if let Err(e) = ended {
                tracing::error!(error = %e, "a sink lane failed while closing");
            }
        }
    }
}

/// Lane `i`: submits what it is given, one batch at a time, until stopped or closed; then the
/// sink releases what it holds outside the process.
async fn lane(
    i: SinkIndex,
    mut sink: Box<dyn Sink>,
    mut rx: mpsc::UnboundedReceiver<Submission>,
    done: mpsc::UnboundedSender<Submitted>,
    stop: CancellationToken,
) {
    loop {
        let s = tokio::select! {
            () = stop.cancelled() => break,
            s = rx.recv() => match s {
                Some(s) => s,
                None => break,
            },
        };
        let submitted = Instant::now();
        let result = tokio::select! {
            // Stopped: nothing of this batch is counted.
            () = stop.cancelled() => break,
            r = sink.submit(s.batch) => r,
        };
        let out = Submitted {
            id: s.id,
            sink: i,
            attempt: s.attempt,
            submitted,
            result,
        };
        if done.send(out).is_err() {
            break;
        }
    }
    sink.close().await;
}
