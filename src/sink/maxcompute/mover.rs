//! The interval mover: every `interval` (at once, and then every [`DRAIN_POLL`], once the
//! process is stopping or, until the revoke's deadline, once partitions are revoked) it moves what the staging table holds into the target with one
//! `INSERT … SELECT`, empties the staging table with `TRUNCATE`, and publishes the epoch moved,
//! which resolves the staged acknowledgements waiting on it.
//!
//! The staged rows cannot be uploaded again (no sink holds their batch any more), so every step
//! is retried until it succeeds, with capped backoff and the sink unready meanwhile; a failed
//! `INSERT` task inserted nothing and is run again; a wait on a running `INSERT` that fails is
//! repeated on the same instance, never by a second `INSERT`. The move holds [`Epochs`], so no
//! upload session commits between the `INSERT` and the `TRUNCATE`.
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

/// Which epoch staged rows belong to (pure). An upload committed into the staging table joins
/// the current epoch; a move takes the current epoch (when anything joined it) and opens the
/// next. A batch's rows are in the target once its epoch is moved.
#[derive(Debug, Default)]
pub struct Epochs {
    current: u64,
    dirty: bool,
}

impl Epochs {
    /// An upload was committed into the staging table: its epoch.
    pub fn committed(&mut self) -> u64 {
        self.dirty = true;
        self.current
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
}

impl Mover {
    /// Runs until the task is aborted.
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
                () = tokio::time::sleep(wait) => {}
                () = self.stopping.cancelled(), if !self.stopping.is_cancelled() => {}
                r = self.urgent.changed(), if urgent_open => urgent_open = r.is_ok(),
            }
            self.move_once().await;
        }
    }

    /// One move, when anything is staged.
    pub async fn move_once(&self) {
        let mut epochs = self.epochs.lock().await;
        let Some(epoch) = epochs.start_move() else {
            return;
        };
        let started = tokio::time::Instant::now();
        let work = async {
            let insert =
                table::insert_sql(&self.dataset, &self.target, &self.staging, &self.columns);
            self.insert(&insert).await;
            self.set_step(format!(
                "TRUNCATE of the staging table {}.{}",
                self.dataset, self.staging
            ));
            let truncate = table::truncate_sql(&self.dataset, &self.staging);
            self.until_done("emptying the staging table", || {
                self.client.run_sql(&truncate, SQL_SETTINGS)
            })
            .await;
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

    /// Runs the `INSERT` once. Once an instance exists only that instance is polled, every
    /// poll error retried with backoff on it, until it terminates; a new `INSERT` starts only
    /// after a task of it says `FAILED` or `CANCELLED` (it inserted nothing).
    async fn insert(&self, sql: &str) {
        let mut attempt = 0u32;
        loop {
            self.set_step(format!(
                "starting the INSERT … SELECT into {}.{} (no instance yet)",
                self.dataset, self.target
            ));
            let id = self
                .until_done("starting the move (INSERT … SELECT)", || {
                    self.client.start_sql(sql, SQL_SETTINGS)
                })
                .await;
            self.set_step(format!(
                "INSERT … SELECT into {}.{}, instance {id}",
                self.dataset, self.target
            ));
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
                        self.failed(
                            "the move (INSERT … SELECT) failed; running it again",
                            attempt,
                            &e,
                        )
                        .await;
                        attempt = attempt.saturating_add(1);
                        break;
                    }
                    Err(e) => {
                        self.failed(
                            "polling the move (INSERT … SELECT); polling the same instance again",
                            attempt,
                            &e,
                        )
                        .await;
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
        assert_eq!(e.committed(), 0);
        assert_eq!(e.committed(), 0);
        assert_eq!(e.start_move(), Some(0));
        assert_eq!(e.start_move(), None);
        assert_eq!(
            e.committed(),
            1,
            "after a move, commits join the next epoch"
        );
        assert_eq!(e.start_move(), Some(1));
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
