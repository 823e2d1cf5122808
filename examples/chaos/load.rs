//! The load generator: logs with unique session ids (one row each, row id "0"), about 1%
//! malformed, produced at a steady rate by an idempotent producer that never gives up on a
//! message. Every delivery report lands in the [`Ledger`], which is what the audit compares
//! against.

use observation_publisher::config::InferenceSchema;
use observation_publisher::gen::{GenOptions, Generator};
use rdkafka::config::ClientConfig;
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use rdkafka::Message;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What was produced, from the broker's delivery reports.
#[derive(Debug, Default)]
pub(crate) struct Ledger {
    /// Session ids of well-formed logs the broker acknowledged.
    pub(crate) valid: HashSet<String>,
    /// The bytes of the malformed logs the broker acknowledged (to count those the topic does
    /// not hold byte for byte).
    pub(crate) malformed_payloads: HashSet<Vec<u8>>,
    /// What the delivery reports said each position holds (every report: a broker that gives
    /// one position to two logs shows here): the evidence the audit weighs when the topic later
    /// serves other bytes at a position ([`crate::audit::tally`]).
    pub(crate) at: HashMap<(i32, i64), Vec<Acked>>,
    /// Next offset after the last acknowledged message, per partition.
    pub(crate) end: BTreeMap<i32, i64>,
    /// Deliveries that failed for good (the producer retries forever, so this stays 0).
    pub(crate) failed: u64,
}

impl Ledger {
    /// Hashes of the bytes of the well-formed logs the broker acknowledged: every message of
    /// the topic that is none of these must be dead-lettered ([`crate::audit::positions_of`]).
    pub(crate) fn valid_payloads(&self) -> HashSet<u64> {
        self.acked()
            .filter(|(_, a)| !a.malformed)
            .map(|(_, a)| a.hash)
            .collect()
    }

    /// (partition, offset) of malformed logs, as the broker's delivery reports gave them.
    pub(crate) fn malformed_positions(&self) -> HashSet<(i32, i64)> {
        self.acked()
            .filter(|(_, a)| a.malformed)
            .map(|(k, _)| *k)
            .collect()
    }

    fn acked(&self) -> impl Iterator<Item = (&(i32, i64), &Acked)> {
        self.at
            .iter()
            .flat_map(|(k, v)| v.iter().map(move |a| (k, a)))
    }
}

/// A log the broker acknowledged at a position.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Acked {
    /// [`payload_hash`] of its bytes.
    pub(crate) hash: u64,
    pub(crate) malformed: bool,
}

/// One log in flight.
pub(crate) struct Sent {
    session: String,
    /// The bytes, for a malformed log.
    malformed: Option<Vec<u8>>,
    /// [`payload_hash`] of the bytes.
    hash: u64,
}

/// The hash the audit identifies well-formed logs by.
pub(crate) fn payload_hash(bytes: &[u8]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    bytes.hash(&mut h);
    h.finish()
}

struct Recorder(Arc<Mutex<Ledger>>);

impl rdkafka::ClientContext for Recorder {}

impl ProducerContext for Recorder {
    type DeliveryOpaque = Box<Sent>;

    fn delivery(&self, r: &DeliveryResult<'_>, sent: Box<Sent>) {
        let mut l = self.0.lock().expect("ledger");
        match r {
            Ok(m) => {
                let end = l.end.entry(m.partition()).or_insert(0);
                *end = (*end).max(m.offset() + 1);
                let acked = Acked {
                    hash: sent.hash,
                    malformed: sent.malformed.is_some(),
                };
                l.at.entry((m.partition(), m.offset()))
                    .or_default()
                    .push(acked);
                match sent.malformed {
                    Some(bytes) => {
                        l.malformed_payloads.insert(bytes);
                    }
                    None => {
                        l.valid.insert(sent.session);
                    }
                }
            }
            Err(_) => l.failed += 1,
        }
    }
}

/// Load settings.
pub(crate) struct Load {
    pub(crate) bootstrap: String,
    pub(crate) topic: String,
    pub(crate) schema: InferenceSchema,
    pub(crate) seed: u64,
    pub(crate) rate: u32,
    pub(crate) duration: Duration,
    pub(crate) malformed_ratio: f64,
}

/// Produces for `duration`, then waits (up to `flush`) for every delivery report.
pub(crate) fn run(load: Load, ledger: Arc<Mutex<Ledger>>, flush: Duration) -> Result<(), String> {
    let producer: ThreadedProducer<Recorder> = ClientConfig::new()
        .set("bootstrap.servers", &load.bootstrap)
        .set("enable.idempotence", "true")
        .set("linger.ms", "20")
        .set("message.timeout.ms", "0")
        .create_with_context(Recorder(ledger))
        .map_err(|e| format!("producer: {e}"))?;
    let mut g = Generator::new(
        &load.schema,
        GenOptions {
            rows_per_log: 1,
            seed: load.seed,
            malformed_ratio: load.malformed_ratio,
            start_micros: now_micros(),
            model: ("demo".into(), "fraud-detector".into(), "1".into()),
        },
    );
    let started = Instant::now();
    let tick = Duration::from_millis(100);
    let per_tick = f64::from(load.rate) / 10.0;
    let mut due = 0.0;
    let mut ticks = 0u32;
    while started.elapsed() < load.duration {
        due += per_tick;
        while due >= 1.0 {
            due -= 1.0;
            let log = g.next_log();
            let sent = Box::new(Sent {
                session: log.session_id,
                malformed: log.malformed.then(|| log.bytes.clone()),
                hash: payload_hash(&log.bytes),
            });
            let mut record: BaseRecord<'_, (), Vec<u8>, Box<Sent>> =
                BaseRecord::with_opaque_to(&load.topic, sent).payload(&log.bytes);
            loop {
                match producer.send(record) {
                    Ok(()) => break,
                    Err((_, r)) => {
                        // Queue full (broker cut): wait for room.
                        record = r;
                        std::thread::sleep(Duration::from_millis(50));
                    }
                }
            }
        }
        ticks += 1;
        if let Some(wait) = (tick * ticks).checked_sub(started.elapsed()) {
            std::thread::sleep(wait);
        }
    }
    producer
        .flush(flush)
        .map_err(|e| format!("not every log was delivered within {flush:?}: {e}"))
}

/// Microseconds since the Unix epoch.
pub(crate) fn now_micros() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}
