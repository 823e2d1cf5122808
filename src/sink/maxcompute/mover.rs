//! The interval mover: every `interval` (at once, and then every [`DRAIN_POLL`], once the
//! process is stopping or, until the revoke's deadline, once partitions are revoked) it moves
//! the current epoch: adds the next epoch's partition to the staging table (uploads go there
//! from then on), copies the epoch's partition into the target with one `INSERT … SELECT …
//! WHERE _epoch = 'e'`, drops that partition, and publishes the epoch moved, which resolves
//! the staged acknowledgements waiting on it.
//!
//! The staged rows cannot be uploaded again (no sink holds their batch any more), so every step
//! is retried until it succeeds, with capped backoff and the sink unready meanwhile; a failed
//! task did nothing and is run again; a wait on a running statement that fails is repeated on
//! the same instance, never by a second one. The move holds [`Epochs`], so no upload session
//! commits during it; a session of the moved epoch commits into the next one instead.
//!
//! A move that runs longer than `move_timeout` is reported, not abandoned: abandoning a running
//! `INSERT` for a new one could insert its rows twice, and it may still finish. From the timeout
//! on, the sink's stuck report (readiness) names the step and its instance and how long the
//! move has run; the move is counted once and logged once; when it finishes the report clears.

use super::table;
use crate::backoff::Backoff;
use crate::metrics::names::maxcompute as names;
use crate::sink::maxcompute::client::{CallError, Client, Polled};
use crate::sink::maxcompute::ddl::SQL_SETTINGS;
use crate::sink::maxcompute::schema::TableColumn;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{watch, Mutex};
use tokio_util::sync::CancellationToken;

/// How often the mover looks for staged rows once the process is stopping.
pub const DRAIN_POLL: Duration = Duration::from_millis(100);

/// How often a running move's age is published (gauge, and the stuck report once overdue).
const AGE_TICK: Duration = Duration::from_secs(1);

/// What readiness says about a move past its timeout (pure): the sink, the step and its
/// instance, how long, the setting, and what to check.
pub fn stuck_report(step: &str, age: Duration, move_timeout: Duration) -> String {
    let whole = |d: Duration| humantime::format_duration(Duration::from_secs(d.as_secs()));
    format!(
        "MaxCompute: a move has run for {} (move_timeout {}): {step}; staged rows wait and \
         their offsets stay uncommitted. Check that instance in MaxCompute (its status and \
         Logview, the project's quota group and job queue); it is still polled, and the sink is \
         ready again once it finishes",
        whole(age),
        whole(move_timeout)
    )
}

/// Which epoch staged rows belong to (pure). Uploads go into the current epoch's partition of
/// the staging table; a move takes the current epoch (when anything joined it) and opens the
/// next. A batch's rows are in the target once its epoch is moved.
#[derive(Debug, Default)]
pub struct Epochs {
    current: u64,
    dirty: bool,
}

impl Epochs {
    /// The epoch an upload session opened now writes into (its partition exists).
    pub fn current(&self) -> u64 {
        self.current
    }

    /// An upload session of `epoch` is about to commit: `Some(epoch)` when it is still the
    /// current epoch (the upload joins it), `None` when a move has taken it since (its partition
    /// is moved or dropped: the rows must go into a session of the current epoch instead).
    pub fn committed(&mut self, epoch: u64) -> Option<u64> {
        if epoch != self.current {
            return None;
        }
        self.dirty = true;
        Some(self.current)
    }

    /// A move starts: the epoch it moves, or `None` when nothing was staged since the last.
    pub fn start_move(&mut self) -> Option<u64> {
        if !self.dirty {
            return None;
        }
        self.dirty = false;
        self.current += 1;
        Some(self.current - 1)
    }
}

/// What the mover needs.
pub struct Mover {
    /// The signed client.
    pub client: Arc<Client>,
    /// The dataset.
    pub dataset: String,
    /// The target table.
    pub target: String,
    /// This instance's staging table.
    pub staging: String,
    /// Our columns (moved by name).
    pub columns: Vec<TableColumn>,
    /// How often to move.
    pub interval: Duration,
    /// Retry pacing.
    pub backoff: Backoff,
    /// Staged epochs (held during a move).
    pub epochs: Arc<Mutex<Epochs>>,
    /// Epochs below this value are in the target.
    pub moved: watch::Sender<u64>,
    /// False while a step is failing.
    pub health: watch::Sender<bool>,
    /// How long a move runs before it is reported.
    pub move_timeout: Duration,
    /// The report of a move past `move_timeout` ([`stuck_report`]), `None` otherwise.
    pub stuck: watch::Sender<Option<String>>,
    /// What the running move is doing (its step and instance), for the report.
    pub step: std::sync::Mutex<String>,
    /// The process is stopping: move at once, then keep moving what arrives.
    pub stopping: CancellationToken,
    /// Partitions are being revoked: move at once, then keep moving what arrives every
    /// [`DRAIN_POLL`] until this instant.
    pub urgent: watch::Receiver<Option<tokio::time::Instant>>,
    /// The sink is closing: end after the running move, start no other.
    pub closing: CancellationToken,
}

impl Mover {
    /// Runs until `closing` is cancelled, between moves: a move once started runs to its end
    /// (its statements are never abandoned; the sink's close waits for it or leaves it).
    pub async fn run(mut self) {
        let mut urgent_open = true;
        loop {
            let until = *self.urgent.borrow_and_update();
            let wait = if self.stopping.is_cancelled()
                || until.is_some_and(|u| tokio::time::Instant::now() < u)
            {
                DRAIN_POLL
            } else {
                self.interval
            };
            tokio::select! {
                () = self.closing.cancelled() => return,
                () = tokio::time::sleep(wait) => {}
                () = self.stopping.cancelled(), if !self.stopping.is_cancelled() => {}
                r = self.urgent.changed(), if urgent_open => urgent_open = r.is_ok(),
            }
            if self.closing.is_cancelled() {
                return;
            }
            self.move_once().await;
        }
    }

    /// One move, when anything is staged: the next epoch's partition is added (uploads go
    /// there from now on), the moved epoch's rows are copied into the target and its partition
    /// dropped. Each statement runs to its end on its own instance ([`Mover::run_once`]).
    pub async fn move_once(&self) {
        let mut epochs = self.epochs.lock().await;
        let Some(epoch) = epochs.start_move() else {
            return;
        };
        let started = tokio::time::Instant::now();
        let staging = format!("{}.{}", self.dataset, self.staging);
        let work = async {
            let add = table::add_partition_sql(&self.dataset, &self.staging, epoch + 1);
            let next = format!("adding the partition of epoch {} to {staging}", epoch + 1);
            self.run_once(&next, &add).await;
            let insert = table::insert_sql(
                &self.dataset,
                &self.target,
                &self.staging,
                &self.columns,
                epoch,
            );
            let into = format!("INSERT … SELECT into {}.{}", self.dataset, self.target);
            self.run_once(&into, &insert).await;
            let drop = table::drop_partition_sql(&self.dataset, &self.staging, epoch);
            let emptying = format!("dropping the moved partition of epoch {epoch} of {staging}");
            self.run_once(&emptying, &drop).await;
        };
        tokio::select! {
            () = work => {}
            () = self.watch_age(started) => {}
        }
        ::metrics::gauge!(names::MOVE_AGE_SECONDS).set(0.0);
        if self.stuck.send_replace(None).is_some() {
            tracing::info!(
                sink = "maxcompute",
                took_s = started.elapsed().as_secs(),
                "MaxCompute: the move that passed move_timeout finished; staged rows are in the \
                 target and the sink is ready again"
            );
        }
        drop(epochs);
        tracing::debug!(epoch, staging = %self.staging, "MaxCompute: staged rows moved into the target");
        self.moved.send_replace(epoch + 1);
    }

    /// Runs one statement of a move to its end, never twice at once: once its instance exists
    /// only that instance is polled, every poll error retried with backoff on it, until it
    /// terminates. A new instance starts only after a task of it says `FAILED` or `CANCELLED`
    /// (it did nothing), or when the submit's answer was unclear (an error: no instance id came
    /// back, so none can be polled; a copy the service did create may run later, which each
    /// statement of a move tolerates: adding a partition is idempotent, a late `INSERT` of an
    /// epoch copies its rows or, once the partition is dropped, nothing, and a late drop removes
    /// only its own epoch's partition).
    async fn run_once(&self, what: &str, sql: &str) {
        let mut attempt = 0u32;
        loop {
            self.set_step(format!("{what} (no instance yet)"));
            let id = self
                .until_done(&format!("starting: {what}"), || {
                    self.client.start_sql(sql, SQL_SETTINGS)
                })
                .await;
            self.set_step(format!("{what}, instance {id}"));
            let mut pauses = self.client.poll_pauses();
            loop {
                match self.client.poll_sql(&id, sql).await {
                    Ok(Polled::Succeeded) => {
                        self.health.send_replace(true);
                        return;
                    }
                    Ok(Polled::Pending) => {
                        let wait = pauses.next().unwrap_or(Duration::from_secs(1));
                        tokio::time::sleep(wait).await;
                    }
                    Ok(Polled::Failed(e)) => {
                        self.failed(&format!("{what} failed; running it again"), attempt, &e)
                            .await;
                        attempt = attempt.saturating_add(1);
                        break;
                    }
                    Err(e) => {
                        let again = format!("polling: {what}; polling the same instance again");
                        self.failed(&again, attempt, &e).await;
                        attempt = attempt.saturating_add(1);
                    }
                }
            }
        }
    }

    fn set_step(&self, step: String) {
        *self.step.lock().unwrap_or_else(|e| e.into_inner()) = step;
    }

    /// Publishes the running move's age every [`AGE_TICK`]; past `move_timeout`, reports it
    /// stuck (kept current with its age and step), counts and logs it once. Never returns: the
    /// move's end ends it.
    async fn watch_age(&self, started: tokio::time::Instant) {
        let mut reported = false;
        loop {
            let age = started.elapsed();
            ::metrics::gauge!(names::MOVE_AGE_SECONDS).set(age.as_secs_f64());
            if age >= self.move_timeout {
                let step = self.step.lock().unwrap_or_else(|e| e.into_inner()).clone();
                let report = stuck_report(&step, age, self.move_timeout);
                if !reported {
                    reported = true;
                    ::metrics::counter!(names::MOVES_OVERDUE_TOTAL).increment(1);
                    tracing::warn!(
                        sink = "maxcompute",
                        step = %step,
                        move_timeout_s = self.move_timeout.as_secs(),
                        "{report}"
                    );
                }
                self.stuck.send_replace(Some(report));
            }
            let to_timeout = self.move_timeout.saturating_sub(age);
            let pause = if to_timeout.is_zero() {
                AGE_TICK
            } else {
                AGE_TICK.min(to_timeout)
            };
            tokio::time::sleep(pause).await;
        }
    }

    /// Retries `call` until it succeeds.
    async fn until_done<T, F, Fut>(&self, what: &str, mut call: F) -> T
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, CallError>>,
    {
        let mut attempt = 0u32;
        loop {
            match call().await {
                Ok(v) => {
                    self.health.send_replace(true);
                    return v;
                }
                Err(e) => {
                    self.failed(what, attempt, &e).await;
                    attempt = attempt.saturating_add(1);
                }
            }
        }
    }

    async fn failed(&self, what: &str, attempt: u32, e: &CallError) {
        self.health.send_replace(false);
        let wait = e
            .error
            .retry_after()
            .unwrap_or_else(|| self.backoff.delay(attempt, fastrand::f64()));
        tracing::warn!(
            sink = "maxcompute",
            step = what,
            attempt,
            retry_in_ms = wait.as_millis() as u64,
            error = %e,
            "MaxCompute: a move step failed; staged rows wait (nothing is committed meanwhile)"
        );
        tokio::time::sleep(wait).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn epochs_move_only_what_was_committed() {
        let mut e = Epochs::default();
        assert_eq!(e.start_move(), None, "nothing staged, nothing to move");
        assert_eq!(e.committed(0), Some(0));
        assert_eq!(e.committed(0), Some(0));
        assert_eq!(e.start_move(), Some(0));
        assert_eq!(e.start_move(), None);
        assert_eq!(e.committed(0), None, "epoch 0 was taken by a move");
        assert_eq!(e.current(), 1);
        assert_eq!(
            e.committed(1),
            Some(1),
            "after a move, commits join the next epoch"
        );
        assert_eq!(e.start_move(), Some(1));
    }

    proptest::proptest! {
        /// Against a model of the staging table's partitions: a commit lands only in the
        /// current epoch, a move takes exactly the epochs that received commits, in order, each
        /// once; so every committed upload is moved by exactly one move, and no upload joins an
        /// epoch after its move started (its partition may be dropped by then).
        #[test]
        fn every_commit_is_moved_once_and_none_joins_a_moved_epoch(
            steps in proptest::collection::vec((0u8..3, 0u64..3), 0..200)
        ) {
            let mut e = Epochs::default();
            let mut moved: Vec<u64> = Vec::new();
            let mut joined: std::collections::BTreeMap<u64, usize> = Default::default();
            let mut opened: Vec<u64> = Vec::new();
            for (op, lag) in steps {
                match op {
                    0 => opened.push(e.current()),
                    1 => {
                        // A session opened `lag` openings ago commits.
                        let Some(at) = opened.len().checked_sub(1 + lag as usize) else { continue };
                        let epoch = opened.remove(at);
                        match e.committed(epoch) {
                            Some(j) => {
                                proptest::prop_assert_eq!(j, epoch);
                                proptest::prop_assert!(!moved.contains(&j), "joined moved {j}");
                                *joined.entry(j).or_default() += 1;
                            }
                            None => proptest::prop_assert!(epoch < e.current()),
                        }
                    }
                    _ => {
                        if let Some(m) = e.start_move() {
                            proptest::prop_assert!(moved.last().is_none_or(|l| *l < m));
                            moved.push(m);
                        }
                    }
                }
            }
            if let Some(m) = e.start_move() {
                moved.push(m);
            }
            let with_rows: Vec<u64> = joined.keys().copied().collect();
            proptest::prop_assert_eq!(moved, with_rows, "moves take exactly the epochs with commits");
        }
    }

    #[test]
    fn the_stuck_report_names_the_sink_instance_age_setting_and_what_to_check() {
        let r = stuck_report(
            "INSERT … SELECT into ds.t, instance 20260101abc",
            Duration::from_millis(754_900),
            Duration::from_secs(600),
        );
        for part in [
            "MaxCompute",
            "instance 20260101abc",
            "12m 34s",
            "move_timeout 10m",
            "quota group",
            "ready again",
        ] {
            assert!(r.contains(part), "{part}: {r}");
        }
    }
}
