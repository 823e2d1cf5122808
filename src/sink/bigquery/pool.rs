//! How many AppendRows connections the at-least-once sink holds: as few as its backlog needs,
//! at most `connections`. A pure rule; the sink ([`super::sink`]) asks it where each batch goes
//! and gives each writer its idle period, and the writers open and close the connections.
//!
//! Every open connection counts against BigQuery's per-project quota of concurrent
//! connections, whether it carries rows or not, and one publisher runs per model version: a
//! pool held open at its maximum would spend `connections` of that quota per version. So:
//!
//! - a batch goes to the first writer (lane) whose connection is open and has room for it in
//!   its share of `max_inflight_bytes`: load gathers on the first lanes and the others fall idle;
//! - only when every open lane is full (batches would wait for room: a backlog) does the batch
//!   open the first closed lane, up to `connections`;
//! - when every lane is open and full, the batch takes the first room that frees on any lane
//!   (waiting on one chosen lane while another frees first would leave the pipeline shallower
//!   than round-robin kept it);
//! - a lane closes its connection once it has had nothing to send or await for its idle
//!   period: [`IDLE_CLOSE`] for every lane but the first, [`IDLE_CLOSE_LAST`] for the first.
//!   An idle sink therefore holds one connection after `IDLE_CLOSE` and none after
//!   `IDLE_CLOSE_LAST`; the next batch opens one again as the very first batch did.

use std::time::Duration;

/// How long a connection beyond the first stays open with nothing to do. It must outlast the
/// gaps inside a backlog (batches flush at least every `batching.linger`, 1 s) by far, so that
/// a backlog never opens and closes connections per batch (Google advises connections that
/// live for minutes, not per write); a burst that comes back within a minute finds its
/// connections open, and each extra connection is opened at most about once a minute.
/// Longer would hold quota that no backlog needs: only models that had a backlog in the last
/// minute hold more than one connection.
pub const IDLE_CLOSE: Duration = Duration::from_secs(60);

/// How long the first connection stays open with nothing to do. Google advises against opening
/// and closing connections for many small writes, so a model with a trickle of traffic (a
/// batch every minute or two) keeps its one connection; and BigQuery itself ends an AppendRows
/// connection inactive for 600 s with an error ("Closing the stream because it has been
/// inactive for 600 seconds"), which the writer would count as a failure, so the publisher
/// closes it cleanly first.
pub const IDLE_CLOSE_LAST: Duration = Duration::from_secs(300);

/// What the rule knows of one lane (a writer and its connection) when a batch comes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lane {
    /// Its connection is open, or it holds batches (and so is opening or reopening one).
    pub open: bool,
    /// Encoded bytes admitted to it and not yet resolved.
    pub inflight: usize,
    /// Its share of `max_inflight_bytes`; a batch counts as at most this many bytes.
    pub capacity: usize,
}

impl Lane {
    /// The lane admits a batch of `bytes` without waiting (as its byte budget would).
    pub fn has_room(&self, bytes: usize) -> bool {
        self.inflight + bytes.clamp(1, self.capacity.max(1)) <= self.capacity
    }
}

/// Where a batch goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// This open lane has room: the batch is queued on it at once.
    Use(usize),
    /// Every open lane is full: this closed lane opens its connection for the batch.
    Open(usize),
    /// Every lane is open and full: the batch takes the first room that frees, on any lane.
    Wait,
}

/// The rule, with its idle periods (settable so that tests need not wait minutes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Elastic {
    /// Lanes (the sink's `connections`, at least 1).
    pub max: usize,
    /// Idle period of every lane but the first.
    pub idle: Duration,
    /// Idle period of the first lane.
    pub idle_last: Duration,
}

impl Elastic {
    /// `max` lanes with the production idle periods.
    pub fn new(max: usize) -> Self {
        Elastic {
            max: max.max(1),
            idle: IDLE_CLOSE,
            idle_last: IDLE_CLOSE_LAST,
        }
    }

    /// Where a batch of `bytes` encoded bytes goes, given the lanes (`max` of them).
    pub fn route(&self, lanes: &[Lane], bytes: usize) -> Route {
        if let Some(i) = lanes.iter().position(|l| l.open && l.has_room(bytes)) {
            return Route::Use(i);
        }
        if let Some(i) = lanes.iter().position(|l| !l.open) {
            return Route::Open(i);
        }
        Route::Wait
    }

    /// How long lane `i`'s connection stays open with nothing to send or await.
    pub fn idle_close(&self, i: usize) -> Duration {
        if i == 0 {
            self.idle_last
        } else {
            self.idle
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn lane(open: bool, inflight: usize) -> Lane {
        Lane {
            open,
            inflight,
            capacity: 100,
        }
    }

    #[test]
    fn load_gathers_on_the_first_open_lane_with_room() {
        let p = Elastic::new(4);
        let closed = lane(false, 0);
        assert_eq!(
            p.route(&[closed; 4], 10),
            Route::Open(0),
            "a cold sink opens one"
        );
        let lanes = [lane(true, 50), lane(true, 0), closed, closed];
        assert_eq!(
            p.route(&lanes, 50),
            Route::Use(0),
            "room on the first: no other"
        );
        assert_eq!(p.route(&lanes, 51), Route::Use(1));
        let full = [lane(true, 95), lane(true, 60), closed, closed];
        assert_eq!(
            p.route(&full, 50),
            Route::Open(2),
            "a backlog opens the next"
        );
        let all = [
            lane(true, 95),
            lane(true, 60),
            lane(true, 70),
            lane(true, 99),
        ];
        assert_eq!(
            p.route(&all, 50),
            Route::Wait,
            "at the maximum: wait for room"
        );
    }

    #[test]
    fn a_batch_over_a_lane_s_share_needs_an_empty_lane() {
        let p = Elastic::new(2);
        let lanes = [lane(true, 1), lane(false, 0)];
        assert_eq!(p.route(&lanes, 1_000), Route::Open(1));
        assert_eq!(
            p.route(&[lane(true, 0), lane(true, 1)], 1_000),
            Route::Use(0)
        );
        assert!(
            !lane(true, 100).has_room(0),
            "an empty batch still takes a byte"
        );
    }

    #[test]
    fn only_the_first_lane_stays_open_long() {
        let p = Elastic::new(3);
        assert_eq!(p.idle_close(0), IDLE_CLOSE_LAST);
        assert_eq!(p.idle_close(1), IDLE_CLOSE);
        assert_eq!(p.idle_close(2), IDLE_CLOSE);
        assert!(IDLE_CLOSE < IDLE_CLOSE_LAST && IDLE_CLOSE_LAST < Duration::from_secs(600));
        assert_eq!(Elastic::new(0).max, 1);
    }

    /// A pool as the sink and its writers run it: batches (their sizes) queued per lane, the
    /// last time each lane had work, and the clock.
    struct Model {
        rule: Elastic,
        capacity: usize,
        queued: Vec<Vec<usize>>,
        open: Vec<bool>,
        active: Vec<Duration>,
        now: Duration,
    }

    impl Model {
        fn lanes(&self) -> Vec<Lane> {
            (0..self.rule.max)
                .map(|i| Lane {
                    open: self.open[i] || !self.queued[i].is_empty(),
                    inflight: self.queued[i]
                        .iter()
                        .map(|b| b.clamp(&1, &self.capacity))
                        .sum(),
                    capacity: self.capacity,
                })
                .collect()
        }

        /// What a writer does with its idle period: close once idle that long.
        fn close_idle(&mut self) {
            for i in 0..self.rule.max {
                let idle = self.now.saturating_sub(self.active[i]);
                if self.queued[i].is_empty() && idle >= self.rule.idle_close(i) {
                    self.open[i] = false;
                }
            }
        }
    }

    proptest! {
        /// Whatever the sequence of batches, answers and pauses: a lane opens only when every
        /// open lane is full, the fullest possible pool waits rather than exceeds `max`, a batch
        /// is queued only where it fits (or waits for room), and after `idle` without work
        /// (batches or answers) at most the first lane is open, after `idle_last` none.
        #[test]
        fn the_pool_opens_for_a_backlog_and_shrinks_when_idle(
            max in 1usize..6,
            capacity in 1usize..400,
            ops in proptest::collection::vec((0u8..3, 0usize..500, 0u64..40), 1..300),
        ) {
            let rule = Elastic {
                max,
                idle: Duration::from_secs(10),
                idle_last: Duration::from_secs(30),
            };
            let mut m = Model {
                rule,
                capacity,
                queued: vec![Vec::new(); max],
                open: vec![false; max],
                active: vec![Duration::ZERO; max],
                now: Duration::ZERO,
            };
            for (op, n, secs) in ops {
                match op {
                    0 => {
                        let lanes = m.lanes();
                        let i = match rule.route(&lanes, n) {
                            Route::Use(i) => {
                                prop_assert!(lanes[i].open && lanes[i].has_room(n));
                                prop_assert!(!lanes[..i].iter().any(|l| l.open && l.has_room(n)));
                                i
                            }
                            Route::Open(i) => {
                                prop_assert!(!lanes[i].open);
                                prop_assert!(!lanes[..i].iter().any(|l| !l.open));
                                prop_assert!(!lanes.iter().any(|l| l.open && l.has_room(n)));
                                i
                            }
                            Route::Wait => {
                                prop_assert!(lanes.iter().all(|l| l.open && !l.has_room(n)));
                                // Room comes first on some lane, as its oldest batches are
                                // answered.
                                let i = (n + secs as usize) % max;
                                while !m.lanes()[i].has_room(n) {
                                    m.queued[i].remove(0);
                                }
                                i
                            }
                        };
                        prop_assert!(i < max);
                        m.queued[i].push(n);
                        m.open[i] = true;
                        m.active[i] = m.now;
                    }
                    1 => {
                        let i = n % max;
                        if !m.queued[i].is_empty() {
                            m.queued[i].remove(0);
                            m.active[i] = m.now;
                        }
                    }
                    _ => {
                        m.now += Duration::from_secs(secs);
                        m.close_idle();
                    }
                }
                let lanes = m.lanes();
                prop_assert!(lanes.iter().all(|l| l.inflight <= l.capacity));
                // Every lane open beyond the first was needed: it holds work or has not been
                // idle for its period yet.
                for (i, l) in lanes.iter().enumerate() {
                    if l.open && m.queued[i].is_empty() {
                        prop_assert!(m.now.saturating_sub(m.active[i]) < rule.idle_close(i));
                    }
                }
                let drained = m.queued.iter().all(Vec::is_empty);
                let last_work = m.active.iter().max().copied().unwrap_or_default();
                let quiet = m.now.saturating_sub(last_work);
                if drained && quiet >= rule.idle {
                    prop_assert!(lanes[1..].iter().all(|l| !l.open), "{lanes:?}");
                }
                if drained && quiet >= rule.idle_last {
                    prop_assert!(lanes.iter().all(|l| !l.open), "{lanes:?}");
                }
            }
        }
    }
}
