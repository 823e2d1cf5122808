//! The in-flight budget as the pipeline state applies it: what counts against
//! `batching.max_inflight_bytes`, the hold, pause and resume of intake
//! ([`crate::pipeline::intake`] decides), and the early move of staged rows.

use super::State;
use crate::commit::Partition;
use crate::pipeline::events;
use crate::pipeline::intake::{Ask, Gate};
use crate::sink::RevokeHook;
use crate::source::group::Group;
use std::time::Instant;

impl State {
    /// Bytes the batches hold between decoding and every sink's acknowledgement: the Arrow
    /// buffers of batches flushed but not yet acknowledged ([`crate::batch::Batch::held_bytes`],
    /// their capacity, not their data) and what the open batch's builders hold
    /// ([`crate::batch::Batcher::held_bytes`]). librdkafka's prefetch (a quarter of the budget,
    /// see [`crate::source::prefetch_split`]) comes on top; docs/reliability.md §1.4 has the
    /// whole memory formula.
    pub(crate) fn inflight_bytes(&self) -> usize {
        self.ledger.inflight_bytes() + self.batcher.held_bytes()
    }

    /// Bytes held by dead letters waiting for their write
    /// ([`crate::deadletter::DeadLetter::held_bytes`]), and by those stashed until every sink
    /// acknowledged their batch.
    pub(crate) fn letter_bytes(&self) -> usize {
        self.ledger.letter_bytes() + self.ledger.refused_bytes()
    }

    /// Bytes of the pipeline's bookkeeping of messages not yet committable, as allocated
    /// ([`crate::pipeline::ledger::Ledger::bookkeeping_bytes`]): for a staged batch, whose
    /// bytes no longer count, what stays until the sink's move.
    pub(crate) fn bookkeeping_bytes(&self) -> usize {
        self.ledger.bookkeeping_bytes()
    }

    fn budget_used(&self) -> usize {
        self.inflight_bytes() + self.letter_bytes() + self.bookkeeping_bytes()
    }

    /// Whether intake should pause: batches in flight, dead letters waiting for their write
    /// and the bookkeeping of messages not yet committable (staged rows') together use up the
    /// in-flight budget (`batching.max_inflight_bytes`).
    pub(crate) fn over_budget(&self) -> bool {
        self.budget_used() >= self.budget
    }

    /// Whether paused intake may resume (all together below half the budget).
    pub(crate) fn under_half_budget(&self) -> bool {
        self.budget_used() < self.budget / 2
    }

    /// The staging sinks' hooks ([`crate::sink::Sink::revoke_hook`]): called with a deadline
    /// already reached, they move what is staged at once.
    pub(crate) fn set_staging_hooks(&mut self, hooks: Vec<RevokeHook>) {
        self.staging_hooks = hooks;
    }

    /// Asks the staging sinks to move what they staged now when its bookkeeping fills its
    /// share of the budget (again every second while it does): at their interval it could hold
    /// intake for most of one.
    pub(crate) fn move_early(&mut self, now: Instant) {
        if self.staging_hooks.is_empty() {
            return;
        }
        let (bookkeeping, staged) = (self.bookkeeping_bytes(), self.ledger.staged_messages());
        let ask = (self.early_move).decide(bookkeeping, staged, self.budget, now);
        if ask == Ask::Nothing {
            return;
        }
        if ask == Ask::First {
            events::EarlyMove {
                bookkeeping_bytes: bookkeeping,
                staged_messages: staged,
                budget: self.budget,
            }
            .emit();
        }
        for hook in &self.staging_hooks {
            hook(now);
        }
    }

    /// What the budget holds, for the intake's reports.
    pub(crate) fn intake_report(&self, paused_partitions: usize, changed: bool) -> events::Intake {
        events::Intake {
            paused_partitions,
            changed,
            batch_bytes: self.inflight_bytes(),
            letter_bytes: self.letter_bytes(),
            bookkeeping_bytes: self.bookkeeping_bytes(),
            staged_messages: self.ledger.staged_messages(),
        }
    }

    /// Holds, pauses or resumes intake, as [`crate::pipeline::intake`] decides.
    pub(super) fn gate(&mut self, now: Instant, group: &Group<'_>) {
        self.move_early(now);
        let (over, under_half) = (self.over_budget(), self.under_half_budget());
        match self.intake.decide(over, under_half, now) {
            Gate::Keep => {}
            Gate::Hold => events::IntakeHeld.emit(),
            Gate::Pause => match group.assignment().and_then(|a| group.pause(&a).map(|()| a)) {
                Ok(a) => {
                    let changed = self.intake.paused();
                    self.intake_report(a.len(), changed).emit();
                }
                Err(e) if self.errors.allow(now) => {
                    tracing::warn!(error = %e, "cannot pause intake for the in-flight budget; trying again");
                }
                Err(_) => {}
            },
            Gate::Resume => {
                let Ok(a) = group.assignment() else { return };
                let a: Vec<Partition> = a.into_iter().filter(|&p| self.may_run(p)).collect();
                if group.resume(&a).is_ok() {
                    self.intake.resumed();
                    self.intake_report(0, true).emit();
                }
            }
        }
    }
}
