//! The state's offset commits, and the committer thread that sends the ones the pipeline need
//! not wait for.
//!
//! A commit is a request to the group coordinator, and the coordinator answers a member's
//! requests in order: a commit sent while the member's JoinGroup is pending (a rebalance
//! round, which the broker holds until every member has rejoined; tansu holds it for half the
//! session timeout) is answered only when the round ends. A synchronous commit on the pipeline
//! thread then stopped all intake for the rest of the round, though the assignment kept every
//! partition (docs/performance.md, "Rebalances"). So the periodic commits and the exactly-once
//! stream registrations go to the committer thread, and their answers come back as
//! [`Event::Committed`]; the pipeline keeps consuming meanwhile. The revoke and the drain
//! commit on the pipeline thread, because what they commit must land before the partitions go,
//! and they first wait (bounded) for the committer's answers: with one queue, a commit never
//! lands after a later one, and a checkpoint never overwrites a newer one.
//!
//! While any commit is with the committer no periodic commit is sent: an exactly-once
//! registration records a new stream that the ledger only counts once it is answered
//! ([`crate::pipeline::ledger::Ledger::stream_recorded`]), and a periodic commit computed
//! before that would carry the old stream's checkpoint.

use super::{Event, State};
use crate::commit::Partition;
use crate::pipeline::events;
use crate::pipeline::ledger::{CommitPoint, RegisterAt};
use crate::sink::bigquery::exactly_once::{Registered, Registration};
use crate::source::group::Group;
use crate::source::SourceContext;
use rdkafka::consumer::BaseConsumer;
use rdkafka::error::KafkaResult;
use std::collections::VecDeque;
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

/// One commit for the committer thread: `(partition, offset, metadata)`.
pub(crate) struct Job {
    id: u64,
    points: Vec<(Partition, i64, Option<String>)>,
}

/// What a commit with the committer is for.
enum Purpose {
    /// Periodic: the ledger records the points once the broker accepted them.
    Points(Vec<CommitPoint>),
    /// Exactly-once: a new stream, recorded at this offset; the sink waits for the answer.
    Register(Registration, i64),
}

/// The commits with the committer thread, in the order they were sent.
#[derive(Default)]
pub(crate) struct Commits {
    queue: Option<mpsc::Sender<Job>>,
    next: u64,
    pending: VecDeque<(u64, Purpose)>,
}

impl Commits {
    /// Hands `points` to the committer; `None` when there is none (commit synchronously).
    fn send(&mut self, points: Vec<(Partition, i64, Option<String>)>) -> Option<u64> {
        let id = self.next;
        self.next += 1;
        let sent = self.queue.as_ref()?.send(Job { id, points }).is_ok();
        if !sent {
            // The thread is gone: commit on the pipeline thread from now on.
            self.queue = None;
        }
        sent.then_some(id)
    }
}

/// Starts the committer thread for `consumer`'s commits of `topic`; its answers go to
/// `events`. Returns the queue to hand to [`State::commit_through`] and the thread, which
/// ends once the queue is dropped ([`State::stop_committer`]).
pub(crate) fn start(
    consumer: Arc<BaseConsumer<SourceContext>>,
    topic: String,
    events: mpsc::Sender<Event>,
) -> std::io::Result<(mpsc::Sender<Job>, std::thread::JoinHandle<()>)> {
    let (tx, jobs) = mpsc::channel::<Job>();
    let thread = std::thread::Builder::new()
        .name("commits".into())
        .spawn(move || {
            let group = Group::new(&consumer, &topic);
            for job in jobs {
                let list = job.points.iter().map(|(p, o, m)| (*p, *o, m.as_deref()));
                let result = group.commit(list);
                if events
                    .send(Event::Committed { id: job.id, result })
                    .is_err()
                {
                    break;
                }
            }
        })?;
    Ok((tx, thread))
}

impl State {
    /// Sends the periodic and registration commits through the committer thread's `queue`.
    pub(crate) fn commit_through(&mut self, queue: mpsc::Sender<Job>) {
        self.commits.queue = Some(queue);
    }

    /// Commits on the pipeline thread from now on (the committer thread ends once its queue
    /// is empty); answers still to come are ignored.
    pub(crate) fn stop_committer(&mut self) {
        self.commits.queue = None;
        self.commits.pending.clear();
    }

    /// The periodic commit: what the ledger says may be committed, through the committer
    /// (nothing while an earlier commit is still with it; the next interval sends it).
    pub(crate) fn commit_in_background(&mut self, group: &Group<'_>) {
        if !self.commits.pending.is_empty() {
            return;
        }
        let points = self.ledger.commit_points(None);
        if points.is_empty() {
            return;
        }
        let list = (points.iter())
            .map(|p| (p.partition, p.offset, p.metadata.clone()))
            .collect();
        match self.commits.send(list) {
            Some(id) => self
                .commits
                .pending
                .push_back((id, Purpose::Points(points))),
            None => {
                let list = (points.iter()).map(|p| (p.partition, p.offset, p.metadata.as_deref()));
                let result = group.commit(list);
                self.commit_result(&points, result);
            }
        }
    }

    /// Commits what the ledger says may be committed (only `only`'s partitions, if given), on
    /// this thread, once the committer has answered what it holds (up to `deadline`).
    pub(crate) fn commit(
        &mut self,
        group: &Group<'_>,
        only: Option<&[Partition]>,
        deadline: Instant,
    ) {
        self.await_commits(deadline);
        let points = self.ledger.commit_points(only);
        if points.is_empty() {
            return;
        }
        let list = points
            .iter()
            .map(|p| (p.partition, p.offset, p.metadata.as_deref()));
        let result = group.commit(list);
        self.commit_result(&points, result);
    }

    /// Waits, up to `deadline`, for the committer's answers to what it holds.
    fn await_commits(&mut self, deadline: Instant) {
        while !self.commits.pending.is_empty() {
            let now = Instant::now();
            if now >= deadline {
                tracing::warn!(
                    commits = self.commits.pending.len(),
                    "offset commits still unanswered at the deadline; committing anyway"
                );
                return;
            }
            self.drain_events(Some((deadline - now).min(Duration::from_millis(50))));
        }
    }

    /// The committer's answer to commit `id`.
    pub(super) fn commit_answered(&mut self, id: u64, result: KafkaResult<()>) {
        let Some(at) = self.commits.pending.iter().position(|(i, _)| *i == id) else {
            return;
        };
        match self.commits.pending.remove(at).map(|(_, p)| p) {
            Some(Purpose::Points(points)) => self.commit_result(&points, result),
            Some(Purpose::Register(r, offset)) => self.register_result(r, offset, result),
            None => {}
        }
    }

    fn commit_result(&mut self, points: &[CommitPoint], result: KafkaResult<()>) {
        match result {
            Ok(()) => {
                for p in points {
                    self.ledger.committed(p);
                }
                events::Committed::Done.emit();
            }
            Err(e) => events::Committed::Failed(&e).emit(),
        }
    }

    /// Exactly-once: records the new streams the sink opened in the group's commit, where the
    /// ledger says, before the sink writes a row into them (it waits for the answer).
    pub(super) fn register(&mut self, group: &Group<'_>) {
        for r in std::mem::take(&mut self.registrations) {
            let offset = match self
                .ledger
                .register_at(r.partition, r.epoch, r.offset, r.exact)
            {
                RegisterAt::At(offset) => offset,
                RegisterAt::Stale => {
                    let _ = r.done.send(Registered::Stale);
                    continue;
                }
                RegisterAt::Behind => {
                    let _ = r.done.send(Registered::Behind);
                    continue;
                }
            };
            let point = (r.partition, offset, Some(r.metadata.clone()));
            match self.commits.send(vec![point]) {
                Some(id) => (self.commits.pending).push_back((id, Purpose::Register(r, offset))),
                None => {
                    let result = group.commit([(r.partition, offset, Some(r.metadata.as_str()))]);
                    self.register_result(r, offset, result);
                }
            }
        }
    }

    fn register_result(&mut self, r: Registration, offset: i64, result: KafkaResult<()>) {
        let answer = match result {
            // Revoked while the commit was out: the rows are no longer ours to write.
            Ok(()) if self.ledger.epoch(r.partition) != r.epoch => Registered::Stale,
            Ok(()) => {
                self.ledger.stream_recorded(r.partition, offset, r.metadata);
                Registered::Committed
            }
            Err(e) => {
                tracing::warn!(partition = r.partition, error = %e, "exactly-once: cannot record a new stream; retried");
                Registered::Failed(e.to_string())
            }
        };
        let _ = r.done.send(answer);
    }
}
