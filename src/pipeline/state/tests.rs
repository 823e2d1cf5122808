//! What the pipeline does with each dead-letter outcome, with a target that only records what
//! it is sent: the outcomes are fed by hand, as the target's thread would report them.

use super::*;
use crate::batch::testing::layout;
use crate::config::Batching;
use crate::deadletter::Failure;
use std::sync::Mutex;

#[derive(Clone, Default)]
struct Recorder(Arc<Mutex<Vec<DeadLetter>>>);

impl deadletter::Target for Recorder {
    fn send(&mut self, letter: DeadLetter) {
        self.0.lock().unwrap().push(letter);
    }
    fn is_ready(&self) -> bool {
        true
    }
    fn flush(&mut self, _: Duration) {}
}

impl Recorder {
    fn take(&self) -> Vec<DeadLetter> {
        std::mem::take(&mut self.0.lock().unwrap())
    }
}

/// A state with a `budget`, partition 0 assigned; returns the events sender and the target.
fn state(budget: usize) -> (State, mpsc::Sender<Event>, Recorder) {
    let (tx, rx) = mpsc::channel();
    let (sink_tx, sink_rx) = tokio::sync::mpsc::channel(2);
    // The sink task's end of the channel stays open, as while a publisher runs.
    std::mem::forget(sink_rx);
    let target = Recorder::default();
    let mut st = state_on(budget, rx, sink_tx, &target);
    st.assigned_with(&[0], &HashMap::new());
    (st, tx, target)
}

/// A state over these channels and dead-letter target.
fn state_on(
    budget: usize,
    events: mpsc::Receiver<Event>,
    sink_tx: tokio::sync::mpsc::Sender<SinkJob>,
    target: &Recorder,
) -> State {
    State::new(
        "t".into(),
        1,
        Batcher::new(layout(), Batching::default()),
        Health::new(),
        events,
        sink_tx,
        Box::new(target.clone()),
        budget,
        None,
    )
}

fn failed(tx: &mpsc::Sender<Event>, letter: DeadLetter, failure: Failure) {
    tx.send(Event::DeadLetter(Outcome::Failed {
        letter: Box::new(letter),
        failure,
        error: "e".into(),
    }))
    .unwrap();
}

fn written(tx: &mpsc::Sender<Event>, l: &DeadLetter) {
    tx.send(Event::DeadLetter(Outcome::Written {
        partition: l.partition,
        offset: l.offset,
        epoch: l.epoch,
        bytes: l.held_bytes(),
        claim_check: None,
    }))
    .unwrap();
}

const BAD: &[u8] = b"\x0f not a log";

#[test]
fn a_letter_refused_as_too_large_is_sent_again_at_once_as_a_claim_check() {
    let (mut st, tx, target) = state(1 << 20);
    st.take(0, 0, None, Some(BAD), Instant::now());
    let letter = target.take().pop().expect("the letter was sent");
    assert!(!letter.claim_check);
    assert_eq!(st.letter_bytes(), letter.held_bytes());
    failed(&tx, letter, Failure::TooLarge);
    st.drain_events(None);
    let again = target.take().pop().expect("sent again without waiting");
    assert!(again.claim_check);
    assert!(st.health.dead_letter_ok.load(Ordering::Relaxed));
    assert!(st.ledger.commit_points(None).is_empty(), "not written yet");
    written(&tx, &again);
    st.drain_events(None);
    assert_eq!(st.letter_bytes(), 0);
    assert_eq!(st.ledger.commit_points(None)[0].offset, 1);
}

/// A target that was not usable at start-up (a Kafka topic not there yet) makes the publisher
/// ready once it says it is usable, with nothing pending: it no longer waits for a letter to be
/// written, which without bad input never comes.
#[test]
fn a_target_not_usable_at_start_turns_ready_when_it_is_with_nothing_pending() {
    let (mut st, _tx, _target) = state(1 << 20);
    st.health.dead_letter_ok.store(false, Ordering::Relaxed);
    st.retry_dead_letters(Instant::now());
    assert!(st.health.dead_letter_ok.load(Ordering::Relaxed));
}

#[test]
fn a_target_only_an_operator_can_fix_is_retried_slowly_and_makes_the_publisher_unready() {
    let (mut st, tx, target) = state(1 << 20);
    st.take(0, 0, None, Some(BAD), Instant::now());
    let mut letter = target.take().pop().unwrap();
    // A claim check refused as too large is the target's problem, not the letter's.
    letter.claim_check = true;
    failed(&tx, letter, Failure::TooLarge);
    st.drain_events(None);
    assert!(target.take().is_empty(), "not sent again at once");
    assert!(!st.health.dead_letter_ok.load(Ordering::Relaxed));
    let now = Instant::now();
    st.retry_dead_letters(now + Duration::from_secs(5));
    assert!(target.take().is_empty(), "not within 10 s");
    assert!(
        !st.health.dead_letter_ok.load(Ordering::Relaxed),
        "a letter is pending: the target's own word does not count"
    );
    st.retry_dead_letters(now + Duration::from_secs(11));
    let again = target.take().pop().expect("sent again after 10 s");
    written(&tx, &again);
    st.drain_events(None);
    assert!(
        st.health.dead_letter_ok.load(Ordering::Relaxed),
        "ready again"
    );
    assert_eq!(st.ledger.commit_points(None)[0].offset, 1);
}

#[test]
fn pending_letter_bytes_count_against_the_budget_and_a_revoked_partitions_letters_are_dropped() {
    let big = [BAD, &[0u8; 4000][..]].concat();
    let (mut st, tx, target) = state(6000);
    st.take(0, 0, None, Some(&big), Instant::now());
    assert!(!st.over_budget());
    st.take(0, 1, None, Some(&big), Instant::now());
    assert!(
        st.over_budget(),
        "two 4 KB letters pass a 6,000-byte budget"
    );
    let sent = target.take();
    assert_eq!(sent.len(), 2);
    written(&tx, &sent[0]);
    st.drain_events(None);
    assert!(!st.over_budget() && !st.under_half_budget());
    // The partition is revoked while the other letter fails: it is not kept for a retry.
    failed(&tx, sent[1].clone(), Failure::Transient);
    st.drain_events(None);
    st.forget(&[0]);
    assert_eq!(st.letter_bytes(), 0);
    assert!(st.under_half_budget());
    st.retry_dead_letters(Instant::now() + Duration::from_secs(60));
    assert!(
        target.take().is_empty(),
        "dropped: the next owner dead-letters it"
    );
    // A failure reported after the revoke is dropped too.
    st.assigned_with(&[0], &HashMap::new());
    failed(&tx, sent[1].clone(), Failure::Transient);
    st.drain_events(None);
    st.retry_dead_letters(Instant::now() + Duration::from_secs(60));
    assert!(target.take().is_empty());
}

#[test]
fn a_sink_task_that_stopped_is_a_crash_and_stops_the_intake() {
    let (tx, rx) = mpsc::channel::<Event>();
    drop(tx);
    let (sink_tx, sink_rx) = tokio::sync::mpsc::channel(2);
    let mut st = state_on(1 << 20, rx, sink_tx, &Recorder::default());
    assert!(!st.sink_gone(), "the sink task runs");
    assert!(st.health.crashes().is_empty());
    drop(sink_rx);
    assert!(st.sink_gone());
    assert!(st.sink_gone(), "and stays gone");
    assert_eq!(
        st.health.crashes(),
        ["the sink task stopped"],
        "recorded once"
    );
    assert!(!st.health.sinks_ok.load(Ordering::Relaxed));
}

#[test]
fn a_revoke_counts_the_messages_one_sink_wrote_that_stay_uncommitted_for_another() {
    let (tx, rx) = mpsc::channel();
    let (sink_tx, sink_rx) = tokio::sync::mpsc::channel(2);
    std::mem::forget(sink_rx);
    let mut st = State::new(
        "t".into(),
        2,
        Batcher::new(layout(), Batching::default()),
        Health::new(),
        rx,
        sink_tx,
        Box::new(Recorder::default()),
        1 << 20,
        None,
    );
    st.assigned_with(&[0], &HashMap::new());
    for offset in 0..3 {
        let log = crate::batch::testing::log("s", 1, offset, 0);
        st.take(0, offset, None, Some(&log), Instant::now());
    }
    st.flush(Instant::now());
    tx.send(Event::Acked {
        id: 0,
        sink: 0,
        dead: Vec::new(),
        checkpoints: Vec::new(),
    })
    .unwrap();
    st.drain_events(None);
    let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    metrics::with_local_recorder(&recorder, || st.forget(&[0]));
    let line = format!("{} 3", crate::metrics::names::REVOKE_WRITTEN_UNCOMMITTED);
    assert!(handle.render().contains(&line), "{}", handle.render());
}
