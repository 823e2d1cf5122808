//! The sink task with two controlled sinks whose acknowledgements the test resolves by hand, in
//! any order, feeding the task's events into a real [`Ledger`]: batches are submitted without
//! waiting for acknowledgements, each sink's acknowledgement is reported on its own, a batch
//! commits only once every sink wrote it, a staged batch leaves the in-flight bytes, and a
//! failed acknowledgement is submitted again to that sink alone — first, before anything new.

use super::*;
use crate::batch::testing::{layout, log};
use crate::batch::{Batch, Batcher};
use crate::commit::Partition;
use crate::config::Batching;
use crate::pipeline::ledger::{CommitPoint, Ledger};
use crate::sink::{SinkErrorKind, SubmitFuture};
use std::sync::Mutex;
use tokio::sync::oneshot;

/// What the test answers for one submission.
type Answer = Result<Progress, SinkError>;

/// Submissions seen by one sink (the batch's offset), and the senders that resolve them.
#[derive(Default)]
struct Script {
    submitted: Vec<i64>,
    pending: Vec<(i64, oneshot::Sender<Answer>)>,
}

#[derive(Clone, Default)]
struct Controlled(Arc<Mutex<Script>>);

impl Controlled {
    fn submitted(&self) -> Vec<i64> {
        self.0.lock().unwrap().submitted.clone()
    }

    /// Resolves the oldest pending submission of the batch at `offset`.
    fn answer(&self, offset: i64, a: Answer) {
        let mut s = self.0.lock().unwrap();
        let i = s
            .pending
            .iter()
            .position(|p| p.0 == offset)
            .unwrap_or_else(|| panic!("no pending submission of batch {offset}"));
        let (_, tx) = s.pending.remove(i);
        let _ = tx.send(a);
    }

    /// Stages the batch at `offset`; returns the sender that completes it.
    fn stage(&self, offset: i64) {
        let (tx, rx) = oneshot::channel::<Answer>();
        self.0.lock().unwrap().pending.push((offset, tx));
        self.answer_staged(offset, rx);
    }

    fn answer_staged(&self, offset: i64, rx: oneshot::Receiver<Answer>) {
        let mut s = self.0.lock().unwrap();
        let i = s.pending.iter().position(|p| p.0 == offset).unwrap();
        let (_, tx) = s.pending.remove(i);
        let next: Acknowledgement = Box::pin(async move { rx.await.unwrap() });
        let _ = tx.send(Ok(Progress::Staged(next)));
    }
}

impl Sink for Controlled {
    fn name(&self) -> &'static str {
        "controlled"
    }

    fn submit(&mut self, batch: Arc<Batch>) -> SubmitFuture<'_> {
        let offset = batch.offsets[0].ranges[0].first;
        let (tx, rx) = oneshot::channel::<Answer>();
        {
            let mut s = self.0.lock().unwrap();
            s.submitted.push(offset);
            s.pending.push((offset, tx));
        }
        Box::pin(async move {
            let ack: Acknowledgement = Box::pin(async move { rx.await.unwrap() });
            Ok(ack)
        })
    }
}

fn written() -> Answer {
    Ok(Progress::Written(WriteReport::default()))
}

fn batch_at(offset: i64) -> Batch {
    let mut b = Batcher::new(layout(), Batching::default());
    let mut ready = Vec::new();
    b.push(
        0,
        offset,
        &log("s", 1, offset, 0),
        Instant::now(),
        &mut ready,
    )
    .unwrap();
    b.flush().unwrap()
}

struct Rig {
    health: Arc<Health>,
    ledger: Ledger,
    events: mpsc::Receiver<Event>,
    jobs: tokio::sync::mpsc::Sender<SinkJob>,
    a: Controlled,
    b: Controlled,
    bytes: HashMap<i64, usize>,
    /// The batches sent, to see when the task lets go of them.
    sent: HashMap<i64, std::sync::Weak<Batch>>,
    /// The bytes each stage reported the task keeps, in order.
    kept: Vec<usize>,
}

const P: Partition = 0;

impl Rig {
    fn start() -> Rig {
        let (a, b) = (Controlled::default(), Controlled::default());
        let (jobs, rx) = tokio::sync::mpsc::channel(2);
        let (tx, events) = mpsc::channel();
        let health = Health::new();
        tokio::spawn(run(
            rx,
            vec![Box::new(a.clone()), Box::new(b.clone())],
            tx,
            Arc::clone(&health),
            CancellationToken::new(),
            ModelLabels {
                model_id: "m".into(),
                model_version: "1".into(),
                project: "p".into(),
            },
            "t".into(),
        ));
        let mut ledger = Ledger::new(false);
        ledger.assigned(&[P], &HashMap::new());
        Rig {
            health,
            ledger,
            events,
            jobs,
            a,
            b,
            bytes: HashMap::new(),
            sent: HashMap::new(),
            kept: Vec::new(),
        }
    }

    async fn send(&mut self, offset: i64) {
        let mut batch = batch_at(offset);
        assert!(self.ledger.consumed(P, offset));
        let bytes = 1000 * (offset as usize + 1);
        let (id, epochs) = self.ledger.dispatched(&batch.offsets, bytes, 2);
        batch.epochs = epochs;
        self.bytes.insert(offset, bytes);
        let batch = Arc::new(batch);
        self.sent.insert(offset, Arc::downgrade(&batch));
        self.jobs
            .send(SinkJob {
                id,
                batch,
                opened: Instant::now(),
            })
            .await
            .unwrap();
    }

    /// Lets the task run (time is paused: backoffs pass at once), then applies its events.
    async fn settle(&mut self) {
        for _ in 0..50 {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        while let Ok(e) = self.events.try_recv() {
            match e {
                Event::Acked {
                    id,
                    sink,
                    dead,
                    checkpoints,
                } => {
                    assert!(dead.is_empty());
                    self.ledger.sink_acked(id, sink, &[], checkpoints);
                }
                Event::Staged { id, sink, kept } => {
                    self.kept.push(kept);
                    self.ledger.staged(id, sink, kept);
                }
                Event::Unstaged { id, sink } => {
                    self.ledger.unstaged(id, sink);
                }
                _ => unreachable!(),
            }
        }
    }

    fn commit(&mut self) -> Option<i64> {
        let points: Vec<CommitPoint> = self.ledger.commit_points(None);
        let last = points.last().map(|p| p.offset);
        for p in &points {
            self.ledger.committed(p);
        }
        last
    }
}

#[tokio::test(start_paused = true)]
async fn acknowledgements_arrive_per_sink_in_any_order_and_failures_are_resubmitted_to_that_sink_first(
) {
    let mut r = Rig::start();
    for o in 0..3 {
        r.send(o).await;
    }
    r.settle().await;
    assert_eq!(
        r.a.submitted(),
        [0, 1, 2],
        "submitted without waiting for acknowledgements"
    );
    assert_eq!(r.b.submitted(), [0, 1, 2]);
    assert_eq!(r.ledger.inflight_bytes(), 1000 + 2000 + 3000);

    // Batch 2 written everywhere, batch 0 by one sink only: nothing is committable yet.
    r.b.answer(2, written());
    r.a.answer(2, written());
    r.b.answer(0, written());
    r.settle().await;
    assert_eq!(r.commit(), None, "batch 0 is not in sink a yet");
    assert_eq!(r.ledger.inflight_bytes(), 1000 + 2000);

    // Sink a fails batch 0 (retryable): it is submitted again to sink a alone, before the
    // batch that comes next.
    r.a.answer(
        0,
        Err(SinkError::new(
            SinkErrorKind::Unavailable,
            true,
            "try later",
        )),
    );
    r.settle().await;
    r.send(3).await;
    r.settle().await;
    assert_eq!(r.a.submitted(), [0, 1, 2, 0, 3]);
    assert_eq!(r.b.submitted(), [0, 1, 2, 3], "sink b is not asked again");
    assert_eq!(r.commit(), None);

    // Batch 1: staged by both sinks, its bytes leave the in-flight count (and the task drops
    // it); not committable.
    r.a.stage(1);
    r.settle().await;
    assert!(r.sent[&1].upgrade().is_some(), "sink b still holds batch 1");
    r.b.stage(1);
    r.settle().await;
    assert_eq!(r.ledger.inflight_bytes(), 1000 + 4000);
    assert!(
        r.sent[&1].upgrade().is_none(),
        "no sink holds batch 1 any more"
    );
    r.a.answer(0, written());
    r.settle().await;
    assert_eq!(
        r.commit(),
        Some(1),
        "batch 0 is written everywhere; batch 1 only staged"
    );

    r.a.answer(1, written());
    r.b.answer(1, written());
    r.a.answer(3, written());
    r.b.answer(3, written());
    r.settle().await;
    assert_eq!(r.commit(), Some(4));
    assert!(r.ledger.settled());
    assert_eq!(r.ledger.inflight_bytes(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_staged_batch_that_fails_is_held_again_and_its_bytes_count_until_it_is_written() {
    let mut r = Rig::start();
    r.send(0).await;
    r.settle().await;
    r.a.stage(0);
    r.settle().await;
    assert_eq!(
        r.ledger.inflight_bytes(),
        1000,
        "sink b still holds batch 0"
    );
    // What sink a staged does not become durable: batch 0 goes to sink a again, from the
    // bytes sink b still holds.
    r.a.answer(
        0,
        Err(SinkError::new(
            SinkErrorKind::Unavailable,
            true,
            "the staged rows were lost",
        )),
    );
    r.settle().await;
    assert_eq!(r.a.submitted(), [0, 0]);
    r.b.answer(0, written());
    r.settle().await;
    assert!(
        r.sent[&0].upgrade().is_some(),
        "the task keeps batch 0 for sink a"
    );
    assert_eq!(
        r.ledger.inflight_bytes(),
        1000,
        "sink a holds batch 0 again: its bytes still count"
    );
    assert_eq!(r.commit(), None);
    r.a.answer(0, written());
    r.settle().await;
    assert_eq!(r.commit(), Some(1));
    assert_eq!(r.ledger.inflight_bytes(), 0);
    assert!(r.sent[&0].upgrade().is_none());
}

#[tokio::test(start_paused = true)]
async fn a_staged_batch_s_bookkeeping_counts_until_every_sink_wrote_it() {
    let mut r = Rig::start();
    // 200 messages of distinct timestamps: the task keeps 200 runs for their freshness.
    let mut b = Batcher::new(layout(), Batching::default());
    let mut ready = Vec::new();
    for o in 0..200 {
        assert!(r.ledger.consumed(P, o));
        let l = log("s", 1, o, 1_000_000 + o);
        b.push(P, o, &l, Instant::now(), &mut ready).unwrap();
    }
    let mut batch = b.flush().unwrap();
    let (id, epochs) = r.ledger.dispatched(&batch.offsets, 1000, 2);
    batch.epochs = epochs;
    let job = SinkJob {
        id,
        batch: Arc::new(batch),
        opened: Instant::now(),
    };
    r.jobs.send(job).await.unwrap();
    r.settle().await;
    let held = r.ledger.bookkeeping_bytes();
    assert!(held >= 200 * crate::commit::ENTRY_BYTES, "{held}");
    r.a.stage(0);
    r.b.stage(0);
    r.settle().await;
    assert_eq!(r.ledger.inflight_bytes(), 0, "no sink holds the batch");
    let kept = *r.kept.last().unwrap();
    assert!(
        kept >= 200 * 16 + std::mem::size_of::<Taken>(),
        "the runs and the record: {kept}"
    );
    assert_eq!(r.ledger.staged_messages(), 200);
    assert_eq!(r.ledger.bookkeeping_bytes(), held + kept);
    r.a.answer(0, written());
    r.b.answer(0, written());
    r.settle().await;
    assert_eq!(r.commit(), Some(200));
    assert_eq!(r.ledger.staged_messages(), 0);
    assert_eq!(r.ledger.bookkeeping_bytes(), 0, "released once written");
}

#[tokio::test(start_paused = true)]
async fn a_refused_row_the_batch_does_not_have_stops_the_task_without_acknowledging() {
    let mut r = Rig::start();
    r.send(0).await;
    r.settle().await;
    r.b.answer(0, written());
    r.a.answer(
        0,
        Ok(Progress::Written(WriteReport {
            rejected: vec![crate::sink::RejectedRow {
                row: 7,
                code: "invalid",
                message: "a row of another batch".into(),
            }],
            commit_metadata: Vec::new(),
        })),
    );
    r.settle().await;
    assert!(
        r.jobs.is_closed(),
        "the sink task stopped (the pipeline records a crash)"
    );
    assert_eq!(r.commit(), None, "batch 0 is not acknowledged by sink a");
}

#[tokio::test(start_paused = true)]
async fn a_sink_that_needs_a_fix_is_retried_after_30_seconds_and_holds_its_later_batches() {
    let mut r = Rig::start();
    r.send(0).await;
    r.settle().await;
    r.a.answer(
        0,
        Err(SinkError::new(
            SinkErrorKind::Rejected,
            false,
            "permission denied",
        )),
    );
    r.b.answer(0, written());
    r.settle().await; // 5 s pass
    r.send(1).await;
    r.settle().await; // 10 s
    assert_eq!(
        r.a.submitted(),
        [0],
        "nothing new while the failed batch waits"
    );
    assert_eq!(r.b.submitted(), [0, 1]);
    r.b.answer(1, written());
    r.settle().await;
    assert!(
        !r.health.sinks_ok.load(Ordering::Relaxed),
        "unready while sink a needs a fix, though sink b writes"
    );
    assert_eq!(r.commit(), None);
    for _ in 0..4 {
        r.settle().await; // 35 s
    }
    assert_eq!(r.a.submitted(), [0, 0, 1]);
    r.a.answer(0, written());
    r.settle().await;
    assert!(r.health.sinks_ok.load(Ordering::Relaxed), "ready again");
    assert_eq!(r.commit(), Some(1));
}

/// A sink that counts its `close` calls.
struct Closing(Arc<std::sync::atomic::AtomicUsize>);

impl Sink for Closing {
    fn name(&self) -> &'static str {
        "closing"
    }

    fn submit(&mut self, _batch: Arc<Batch>) -> SubmitFuture<'_> {
        Box::pin(async { Ok(crate::sink::written(WriteReport::default())) })
    }

    fn close(&mut self) -> crate::sink::CloseFuture<'_> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Box::pin(std::future::ready(()))
    }
}

#[tokio::test]
async fn every_sink_is_closed_once_when_the_task_ends_drained_or_stopped() {
    for hard in [false, true] {
        let closed = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let (jobs, rx) = tokio::sync::mpsc::channel::<SinkJob>(2);
        let (tx, _events) = mpsc::channel();
        let stop = CancellationToken::new();
        let task = tokio::spawn(run(
            rx,
            vec![
                Box::new(Closing(Arc::clone(&closed))),
                Box::new(Closing(Arc::clone(&closed))),
            ],
            tx,
            Health::new(),
            stop.clone(),
            ModelLabels {
                model_id: "m".into(),
                model_version: "1".into(),
                project: "p".into(),
            },
            "t".into(),
        ));
        if hard {
            stop.cancel();
        } else {
            drop(jobs);
        }
        task.await.unwrap();
        assert_eq!(closed.load(Ordering::SeqCst), 2, "hard stop: {hard}");
    }
}

/// A sink whose `submit` does not return until the test opens its gate (a MaxCompute move
/// holding the upload slots, an Arize request that hangs).
struct Gated {
    gate: Arc<tokio::sync::Semaphore>,
    started: Arc<std::sync::atomic::AtomicUsize>,
}

impl Sink for Gated {
    fn name(&self) -> &'static str {
        "gated"
    }

    fn submit(&mut self, _batch: Arc<Batch>) -> SubmitFuture<'_> {
        self.started.fetch_add(1, Ordering::SeqCst);
        let gate = Arc::clone(&self.gate);
        Box::pin(async move {
            gate.acquire().await.unwrap().forget();
            Ok(crate::sink::written(WriteReport::default()))
        })
    }
}

#[tokio::test(start_paused = true)]
async fn a_sink_whose_submit_hangs_delays_only_its_own_acknowledgements() {
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let started = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let fast = Controlled::default();
    let (jobs, rx) = tokio::sync::mpsc::channel(2);
    let (tx, events) = mpsc::channel();
    tokio::spawn(run(
        rx,
        vec![
            Box::new(Gated {
                gate: Arc::clone(&gate),
                started: Arc::clone(&started),
            }),
            Box::new(fast.clone()),
        ],
        tx,
        Health::new(),
        CancellationToken::new(),
        ModelLabels {
            model_id: "m".into(),
            model_version: "1".into(),
            project: "p".into(),
        },
        "t".into(),
    ));
    let mut ledger = Ledger::new(false);
    ledger.assigned(&[P], &HashMap::new());
    let apply = |ledger: &mut Ledger| {
        let mut acked = [0usize; 2];
        while let Ok(e) = events.try_recv() {
            let Event::Acked { id, sink, .. } = e else {
                unreachable!()
            };
            acked[sink] += 1;
            ledger.sink_acked(id, sink, &[], Vec::new());
        }
        acked
    };
    let n = 6;
    for offset in 0..n {
        let mut batch = batch_at(offset);
        assert!(ledger.consumed(P, offset));
        let (id, epochs) = ledger.dispatched(&batch.offsets, 1000, 2);
        batch.epochs = epochs;
        jobs.send(SinkJob {
            id,
            batch: Arc::new(batch),
            opened: Instant::now(),
        })
        .await
        .unwrap();
        // The other sink takes and writes each batch while the gated one is still in its first
        // `submit`.
        tokio::time::sleep(Duration::from_millis(100)).await;
        fast.answer(offset, written());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let acked = apply(&mut ledger);
    assert_eq!(fast.submitted(), (0..n).collect::<Vec<_>>());
    assert_eq!(acked, [0, n as usize], "the other sink wrote every batch");
    assert_eq!(
        started.load(Ordering::SeqCst),
        1,
        "the gated sink is in its first submit"
    );
    // Commits still wait for every sink.
    assert_eq!(ledger.commit_points(None).len(), 0);

    // The gated sink is released: it takes and writes the rest, and everything commits.
    gate.add_permits(n as usize);
    for _ in 0..50 {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(apply(&mut ledger), [n as usize, 0]);
    assert_eq!(started.load(Ordering::SeqCst), n as usize);
    let points = ledger.commit_points(None);
    assert_eq!(points.last().map(|p| p.offset), Some(n));
}

/// Without sinks there are no lanes: the task still takes every batch and ends only when the
/// pipeline closes its channel.
#[tokio::test(start_paused = true)]
async fn without_sinks_the_task_takes_batches_until_the_channel_closes() {
    let (jobs, rx) = tokio::sync::mpsc::channel::<SinkJob>(1);
    let (tx, _events) = mpsc::channel();
    let task = tokio::spawn(run(
        rx,
        Vec::new(),
        tx,
        Health::new(),
        CancellationToken::new(),
        ModelLabels {
            model_id: "m".into(),
            model_version: "1".into(),
            project: "p".into(),
        },
        "t".into(),
    ));
    for offset in 0..4 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(
            !task.is_finished(),
            "the task ended before its channel closed"
        );
        jobs.send(SinkJob {
            id: offset as BatchId,
            batch: Arc::new(batch_at(offset)),
            opened: Instant::now(),
        })
        .await
        .expect("the task takes the batch");
    }
    drop(jobs);
    task.await.unwrap();
}
