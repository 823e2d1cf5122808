//! Dead letters on their way to the target: sent; sent again when a write failed (at once, as a
//! claim check, when the log was too large; after the failure's back-off otherwise); and those
//! for rows a sink refused, kept until every sink has acknowledged their batch. What an
//! outstanding letter means for the commit is the ledger's, not this.

use super::events::{self, RateLimit};
use super::ledger::BatchId;
use crate::commit::Partition;
use crate::deadletter::{self, DeadLetter, Failure};
use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

/// The dead-letter target and the letters waiting for it.
pub(crate) struct Letters {
    target: Box<dyn deadletter::Target>,
    /// Letters whose write failed, with when to send them again.
    retry: VecDeque<(Instant, DeadLetter)>,
    /// Letters for rows a sink refused, kept until every sink acknowledged their batch (their
    /// bytes count against the budget: [`super::ledger::Ledger::refused_bytes`]).
    stashed: HashMap<BatchId, Vec<DeadLetter>>,
    failed_log: RateLimit,
    claim_log: RateLimit,
}

impl Letters {
    pub(crate) fn new(target: Box<dyn deadletter::Target>) -> Self {
        Letters {
            target,
            retry: VecDeque::new(),
            stashed: HashMap::new(),
            failed_log: RateLimit::new(),
            claim_log: RateLimit::new(),
        }
    }

    pub(crate) fn send(&mut self, letter: DeadLetter) {
        self.target.send(letter);
    }

    /// A sink refused these rows of batch `id`; other sinks have not acknowledged it yet.
    pub(crate) fn stash(&mut self, id: BatchId, dead: Vec<DeadLetter>) {
        if !dead.is_empty() {
            self.stashed.entry(id).or_default().extend(dead);
        }
    }

    /// Every sink acknowledged batch `id`: sends the letters of every row refused in it (`dead`
    /// from the last sink, the others stashed). Returns how many.
    pub(crate) fn release(&mut self, id: BatchId, dead: Vec<DeadLetter>) -> u64 {
        let mut letters = self.stashed.remove(&id).unwrap_or_default();
        letters.extend(dead);
        let n = letters.len() as u64;
        for letter in letters {
            self.target.send(letter);
        }
        n
    }

    /// A letter was written; reports it if it went as a claim check.
    pub(crate) fn written(
        &mut self,
        topic: &str,
        partition: Partition,
        offset: i64,
        claim_check: Option<usize>,
    ) {
        if let Some(original_bytes) = claim_check {
            events::ClaimCheckWritten {
                topic,
                partition,
                offset,
                original_bytes,
            }
            .emit(&mut self.claim_log, Instant::now());
        }
    }

    /// A write failed: the letter goes again, at once as a claim check if it was too large,
    /// else after the failure's back-off. Returns whether the target itself is failing (the
    /// publisher turns unready until it takes letters again). `epoch` is the letter's
    /// partition's assignment now.
    pub(crate) fn failed(
        &mut self,
        mut letter: DeadLetter,
        failure: Failure,
        error: &str,
        epoch: u64,
    ) -> bool {
        if letter.epoch != epoch {
            // Its partition was revoked since: the offset was not committed, the next owner
            // reads the log again and dead-letters it itself. Keeping it would hold memory the
            // budget no longer counts.
            return false;
        }
        // A claim check refused as too large is not a size problem any more: the target is.
        let failure = if failure == Failure::TooLarge && letter.claim_check {
            Failure::NeedsOperator
        } else {
            failure
        };
        let now = Instant::now();
        events::DeadLetterFailed {
            topic: &letter.topic,
            partition: letter.partition,
            offset: letter.offset,
            failure,
            error,
        }
        .emit(&mut self.failed_log, now);
        if failure == Failure::TooLarge {
            letter.claim_check = true;
            self.target.send(letter);
            return false;
        }
        self.retry.push_back((now + failure.retry_after(), letter));
        true
    }

    /// Sends again the letters whose retry time has come.
    pub(crate) fn retry_due(&mut self, now: Instant) {
        while self.retry.front().is_some_and(|(t, _)| *t <= now) {
            if let Some((_, l)) = self.retry.pop_front() {
                self.target.send(l);
            }
        }
    }

    /// The target's own word on whether it takes letters.
    pub(crate) fn target_ready(&self) -> bool {
        self.target.is_ready()
    }

    /// Drops the retries of revoked partitions: the next owner dead-letters those logs again.
    pub(crate) fn forget(&mut self, partitions: &[Partition]) {
        self.retry
            .retain(|(_, l)| !partitions.contains(&l.partition));
    }

    /// Waits (bounded) for every write to finish; returns whether the target is ready.
    pub(crate) fn flush(&mut self, timeout: Duration) -> bool {
        self.target.flush(timeout);
        self.target.is_ready()
    }
}
