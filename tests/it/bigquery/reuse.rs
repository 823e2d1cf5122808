//! Exactly-once: a partition that comes back to the sink that wrote it keeps its stream, and
//! every other case still finalizes and opens a new one, driven the way the pipeline drives the
//! sink (assignments with the checkpoint read from the group's commit, registrations answered,
//! batches stamped with their epoch) against the emulator's COMMITTED streams. Every stream the
//! sink opens is registered first, so the registrations count the streams it created.

use super::*;
use observation_publisher::batch::{Batch, Batcher};
use observation_publisher::config::Batching;
use observation_publisher::sink::bigquery::checkpoint::{resume_partition, Checkpoint};
use observation_publisher::sink::bigquery::exactly_once::{Handoff, Registered, Registration};
use observation_publisher::sink::bigquery::{AppendWriter, ExactlyOnceSink};
use observation_publisher::sink::{Progress, Sink};
use std::sync::atomic::Ordering::SeqCst;
use std::sync::Mutex;
use std::time::Instant;

/// The pipeline's side: what it hands the sink and what the sink registered.
pub(crate) struct Pipeline {
    handoff: Arc<Handoff>,
    /// New streams registered (their checkpoints).
    pub(crate) registered: Arc<Mutex<Vec<Checkpoint>>>,
    /// Registrations at an exact offset (a window day's move): offset and checkpoint.
    pub(crate) moves: Arc<Mutex<Vec<(i64, Checkpoint)>>>,
    /// How many exact registrations to answer `Behind` (earlier messages unacknowledged)
    /// before committing one.
    pub(crate) behind: Arc<std::sync::atomic::AtomicUsize>,
    logs: Vec<Vec<u8>>,
    pub(crate) f: Fixture,
}

/// `n` generated logs of one row each, stamped from `start_micros` on.
pub(crate) fn logs(f: &Fixture, seed: u64, n: usize, start_micros: i64) -> Vec<Vec<u8>> {
    let mut g = Generator::new(
        &f.config.inference_schema,
        GenOptions {
            rows_per_log: 1,
            seed,
            malformed_ratio: 0.0,
            start_micros,
            model: ("it".into(), "fraud".into(), "1".into()),
        },
    );
    (0..n).map(|_| g.next_log().bytes).collect()
}

impl Pipeline {
    async fn new(test: &str, n: usize) -> Pipeline {
        let f = Fixture::new(test).await;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_micros() as i64;
        let logs = logs(&f, 91, n, now);
        Self::with_logs(f, logs)
    }

    /// Answers registrations as the pipeline does: commits them, except the first
    /// [`Self::behind`] exact ones.
    pub(crate) fn with_logs(f: Fixture, logs: Vec<Vec<u8>>) -> Pipeline {
        let handoff = Arc::new(Handoff::default());
        let registered = Arc::new(Mutex::new(Vec::new()));
        let moves = Arc::new(Mutex::new(Vec::new()));
        let behind = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let (r, m, b) = (
            Arc::clone(&registered),
            Arc::clone(&moves),
            Arc::clone(&behind),
        );
        let _ = handoff.registrar.set(Box::new(move |reg: Registration| {
            let cp = Checkpoint::from_metadata(&reg.metadata).expect("a checkpoint");
            if !reg.exact {
                r.lock().unwrap().push(cp);
                return reg.done.send(Registered::Committed).is_ok();
            }
            let dec = |n: usize| n.checked_sub(1);
            let answer = match b.fetch_update(SeqCst, SeqCst, dec) {
                Ok(_) => Registered::Behind,
                Err(_) => {
                    m.lock().unwrap().push((reg.offset, cp));
                    Registered::Committed
                }
            };
            reg.done.send(answer).is_ok()
        }));
        Pipeline {
            handoff,
            registered,
            moves,
            behind,
            logs,
            f,
        }
    }

    pub(crate) async fn sink(&self) -> ExactlyOnceSink {
        let (cfg, sink) = (&self.f.config, self.f.config.bigquery().expect("sink"));
        ExactlyOnceSink::start(cfg, sink, Arc::clone(&self.handoff))
            .await
            .expect("sink starts")
    }

    /// Partition 0 assigned in `epoch`, with the checkpoint read from the group's commit.
    pub(crate) fn assign(&self, epoch: u64, checkpoint: Option<&Checkpoint>) {
        let mut s = self.handoff.starts.lock().unwrap();
        s.insert(0, (epoch, checkpoint.cloned()));
    }

    fn revoke(&self) {
        self.handoff.starts.lock().unwrap().remove(&0);
    }

    fn streams_created(&self) -> usize {
        self.registered.lock().unwrap().len()
    }

    /// Messages `offsets` of partition 0, consumed in `epoch`, as one batch.
    fn batch(&self, offsets: std::ops::Range<usize>, epoch: u64) -> Arc<Batch> {
        let max_rows = offsets.len() + 1;
        let batching = Batching {
            max_rows,
            ..Batching::default()
        };
        let mut b = Batcher::new(Arc::clone(&self.f.layout), batching);
        let mut ready = Vec::new();
        for o in offsets {
            b.push(0, o as i64, &self.logs[o], Instant::now(), &mut ready)
                .expect("valid log");
        }
        let mut batch = b.flush().expect("a batch");
        batch.epochs = vec![(0, epoch)];
        Arc::new(batch)
    }

    /// Writes the batch and returns its checkpoint (the commit metadata after it).
    pub(crate) async fn write(
        &self,
        sink: &mut ExactlyOnceSink,
        offsets: std::ops::Range<usize>,
        epoch: u64,
    ) -> Checkpoint {
        self.write_report(sink, offsets, epoch).await.0
    }

    /// Writes the batch: its checkpoint and how many of its rows were refused.
    pub(crate) async fn write_report(
        &self,
        sink: &mut ExactlyOnceSink,
        offsets: std::ops::Range<usize>,
        epoch: u64,
    ) -> (Checkpoint, usize) {
        let ack = sink
            .submit(self.batch(offsets.clone(), epoch))
            .await
            .unwrap_or_else(|e| panic!("batch {offsets:?} taken: {e}"));
        let Ok(Progress::Written(report)) = ack.await else {
            panic!("batch {offsets:?} written");
        };
        assert_eq!(report.commit_metadata.len(), 1, "{report:?}");
        let cp =
            Checkpoint::from_metadata(&report.commit_metadata[0].metadata).expect("a checkpoint");
        (cp, report.rejected.len())
    }
}

/// Revoked and assigned again to the same sink: the stream is kept (no new stream, no
/// registration), and the rows appended after the committed checkpoint are skipped on the
/// replay. Then the cases that must still take the usual path: another owner in between (its
/// checkpoint names its own stream), another owner that finalized our stream and died before
/// recording its own (the kept stream refuses the first append), and a first batch that has
/// nothing to append (the kept stream cannot be confirmed before the batch is acknowledged).
#[tokio::test]
async fn a_partition_back_to_its_writer_keeps_its_stream_and_every_other_case_does_not() {
    let p = Pipeline::new("eo_reuse", 90).await;
    let client = storage(&grpc_url());
    let mut sink = p.sink().await;

    // Epoch 1: a new stream; commits after 10 messages, 10 more rows land after that commit.
    p.assign(1, None);
    let cp10 = p.write(&mut sink, 0..10, 1).await;
    let s1 = cp10.stream.clone();
    assert_eq!((cp10.next_row, cp10.carried), (10, 0));
    let cp20 = p.write(&mut sink, 10..20, 1).await;
    assert_eq!((cp20.stream.as_str(), cp20.next_row), (s1.as_str(), 20));
    assert_eq!(p.streams_created(), 1);

    // Revoked with only offset 10 committed, and straight back: the replay from 10 skips the
    // 10 rows already in the stream and continues it at row 20.
    p.revoke();
    p.assign(2, Some(&cp10));
    let cp30 = p.write(&mut sink, 10..30, 2).await;
    assert_eq!(
        (cp30.stream.as_str(), cp30.next_row, cp30.carried),
        (s1.as_str(), 30, 0),
        "the stream was kept"
    );
    assert_eq!(
        p.streams_created(),
        1,
        "no stream created for a partition back"
    );

    // Another owner in between: it finalized our stream, wrote on its own and committed it.
    p.revoke();
    let theirs = resume_partition(&client, p.f.table(), Some(&cp30))
        .await
        .expect("the other owner resumes");
    assert_eq!(theirs.skip_rows, 0);
    let w = AppendWriter::start_committed(
        client.clone(),
        theirs.stream.clone(),
        0,
        0,
        Arc::clone(&p.f.layout.arrow),
        test_writer_options(),
    )
    .expect("writer");
    let rows = p.batch(30..40, 0).records.clone();
    w.append(rows).await.expect("append").await.expect("acked");
    assert!(w.close(Duration::from_secs(10)).await);
    let cp40 = Checkpoint {
        stream: theirs.stream.clone(),
        next_row: 10,
        carried: 0,
        day: None,
    };
    p.assign(3, Some(&cp40));
    let cp50 = p.write(&mut sink, 40..50, 3).await;
    assert_eq!(p.streams_created(), 2, "the usual path: a new stream");
    assert!(cp50.stream != s1 && cp50.stream != theirs.stream);
    assert_eq!((cp50.next_row, cp50.carried), (10, 0));
    let s3 = cp50.stream.clone();

    // Another owner finalized our stream and died before recording its own: the checkpoint
    // still names our stream, whose first append is refused; the usual path follows.
    p.revoke();
    client.finalize_write_stream(&s3).await.expect("finalized");
    p.assign(4, Some(&cp50));
    let cp60 = p.write(&mut sink, 50..60, 4).await;
    assert_eq!(p.streams_created(), 3, "a finalized stream is not kept");
    assert!(cp60.stream != s3);
    assert_eq!((cp60.next_row, cp60.carried), (10, 0));

    // Back with rows to skip and a first batch made only of them: nothing confirms the kept
    // stream before the batch is acknowledged, so the usual path finalizes it.
    let cp70 = p.write(&mut sink, 60..70, 4).await;
    assert_eq!(cp70.stream, cp60.stream);
    p.revoke();
    p.assign(5, Some(&cp60));
    let skipped = p.write(&mut sink, 60..70, 5).await;
    assert_eq!(
        p.streams_created(),
        4,
        "an unconfirmed kept stream is given up"
    );
    let last = p.registered.lock().unwrap().last().cloned().unwrap();
    assert_eq!(
        (last.next_row, last.carried),
        (0, 10),
        "the new stream skips the 10 rows"
    );
    assert_eq!(
        (skipped.stream.as_str(), skipped.next_row, skipped.carried),
        (last.stream.as_str(), 0, 0)
    );
    let cp90 = p.write(&mut sink, 70..90, 5).await;
    assert_eq!(
        (cp90.stream.as_str(), cp90.next_row),
        (last.stream.as_str(), 20)
    );

    // Each of the 90 messages' rows once.
    assert_eq!(p.f.counts().await, (90, 90));
}
