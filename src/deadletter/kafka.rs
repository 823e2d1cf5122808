//! Kafka dead-letter topic.
//!
//! Size rule: a letter whose value, key and headers fit `dead_letter.max_message_bytes` is
//! written whole (zstd-compressed); one that does not is written as a **claim check** — the
//! source position, the payload's size and SHA-256, the reason and its first
//! [`CLAIM_CHECK_PREFIX_BYTES`] bytes, with `x-error-truncated: true` — so that it never stalls
//! its partition. Header values are bounded ([`MAX_HEADER_VALUE_BYTES`]). The producer and the
//! topic it creates allow [`FRAMING_ALLOWANCE`] more than the limit, for Kafka's record framing.

use super::{DeadLetter, Failure, Outcome, OutcomeFn, Target};
use crate::auth::kafka::Tokens;
use crate::auth::kafka_admin::admin_client;
use crate::kafka_log::HelperContext;
use rdkafka::admin::{AdminOptions, NewTopic, TopicReplication};
use rdkafka::config::ClientConfig;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use rdkafka::ClientContext;
use sha2::{Digest, Sha256};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

/// Largest value of one header (`x-error-message` is cut to it, at a character boundary).
pub const MAX_HEADER_VALUE_BYTES: usize = 4 << 10;
/// Bytes of the payload a claim check carries (its value), and the largest key it keeps.
pub const CLAIM_CHECK_PREFIX_BYTES: usize = 4 << 10;
/// What the producer's `message.max.bytes` and the created topic's `max.message.bytes` allow
/// beyond `dead_letter.max_message_bytes`: Kafka's record and batch framing.
pub const FRAMING_ALLOWANCE: usize = 64 << 10;

/// Producer context: turns delivery reports into [`Outcome`]s.
pub struct DlqContext {
    on_outcome: OutcomeFn,
    /// The target's readiness: a delivered letter proves the topic usable.
    ready: Arc<AtomicBool>,
    tokens: Option<Arc<Tokens>>,
}

impl ClientContext for DlqContext {
    crate::auth::kafka::token_refresh!(tokens);

    fn log(&self, level: rdkafka::config::RDKafkaLogLevel, fac: &str, line: &str) {
        crate::kafka_log::log("dead-letter producer", level, fac, line);
    }

    fn error(&self, e: KafkaError, reason: &str) {
        crate::kafka_log::error("dead-letter producer", &e, reason);
    }
}

impl ProducerContext for DlqContext {
    type DeliveryOpaque = Box<DeadLetter>;

    fn delivery(&self, result: &DeliveryResult<'_>, letter: Box<DeadLetter>) {
        match result {
            Ok(_) => {
                self.ready.store(true, Ordering::Relaxed);
                (self.on_outcome)(Outcome::Written {
                    partition: letter.partition,
                    offset: letter.offset,
                    epoch: letter.epoch,
                    bytes: letter.held_bytes(),
                    claim_check: letter.claim_check.then_some(letter.payload.len()),
                })
            }
            Err((e, _)) => (self.on_outcome)(Outcome::Failed {
                failure: classify(e),
                error: e.to_string(),
                letter,
            }),
        }
    }
}

/// What a failed write means: too large (→ claim check), a target only an operator can fix, or
/// a transient failure.
pub fn classify(e: &KafkaError) -> Failure {
    use RDKafkaErrorCode as C;
    let Some(code) = e.rdkafka_error_code() else {
        return Failure::Transient;
    };
    match code {
        C::MessageSizeTooLarge | C::MessageBatchTooLarge | C::InvalidMessageSize => {
            Failure::TooLarge
        }
        C::TopicAuthorizationFailed
        | C::ClusterAuthorizationFailed
        | C::TransactionalIdAuthorizationFailed
        | C::SaslAuthenticationFailed
        | C::Authentication
        | C::UnknownTopicOrPartition
        | C::UnknownTopic
        | C::InvalidTopic
        | C::PolicyViolation => Failure::NeedsOperator,
        _ => Failure::Transient,
    }
}

/// Writes dead letters to a Kafka topic with idempotent, acks=all delivery.
pub struct KafkaTarget {
    producer: ThreadedProducer<DlqContext>,
    topic: String,
    max_message_bytes: usize,
    ready: Arc<AtomicBool>,
    /// Dropped with the target: stops the thread that checks the topic again while the target
    /// is not ready.
    _recheck: Option<mpsc::Sender<()>>,
}

/// How often a target that is not ready checks its topic again.
#[cfg(not(test))]
const RECHECK_EVERY: Duration = Duration::from_secs(10);
#[cfg(test)]
const RECHECK_EVERY: Duration = Duration::from_millis(200);
/// How long one metadata read or topic creation may take (each; the admin API's request and
/// operation timeouts).
#[cfg(not(test))]
const ADMIN_TIMEOUT: Duration = Duration::from_secs(10);
#[cfg(test)]
const ADMIN_TIMEOUT: Duration = Duration::from_secs(1);

impl KafkaTarget {
    /// Creates the producer (sharing the source's connection settings in `base`) and makes sure
    /// the topic exists, creating it if missing with `max.message.bytes` large enough for
    /// `max_message_bytes`. A topic that cannot be seen or created leaves the target not ready;
    /// sends then fail and are retried by the caller, and a thread checks the topic again every
    /// 10 s until it is usable (or a letter is delivered): a broker or topic that was not there
    /// at start-up no longer leaves `/readyz` at 503 for good. `tokens`: the OAUTHBEARER token
    /// source of the source's settings, if the publisher supplies them.
    pub fn new(
        base: &ClientConfig,
        topic: String,
        max_message_bytes: usize,
        on_outcome: OutcomeFn,
        tokens: Option<Arc<Tokens>>,
    ) -> Result<Self, KafkaError> {
        let mut cfg = base.clone();
        cfg.set("enable.idempotence", "true")
            .set("acks", "all")
            .set("linger.ms", "20")
            .set("message.timeout.ms", "60000")
            .set("compression.type", "zstd")
            .set(
                "message.max.bytes",
                (max_message_bytes + FRAMING_ALLOWANCE).to_string(),
            );
        let ready = Arc::new(AtomicBool::new(false));
        let producer: ThreadedProducer<DlqContext> = cfg.create_with_context(DlqContext {
            on_outcome,
            ready: Arc::clone(&ready),
            tokens: tokens.clone(),
        })?;
        let usable = ensure_topic(base, &topic, max_message_bytes, true, &tokens);
        ready.store(usable, Ordering::Relaxed);
        let recheck = (!usable).then(|| {
            let (stop, stopped) = mpsc::channel::<()>();
            let (base, topic, ready) = (base.clone(), topic.clone(), Arc::clone(&ready));
            let tokens = tokens.clone();
            let spawned = std::thread::Builder::new()
                .name("dead-letter-topic".into())
                .spawn(move || {
                    while let Err(mpsc::RecvTimeoutError::Timeout) =
                        stopped.recv_timeout(RECHECK_EVERY)
                    {
                        if ready.load(Ordering::Relaxed)
                            || ensure_topic(&base, &topic, max_message_bytes, false, &tokens)
                        {
                            ready.store(true, Ordering::Relaxed);
                            tracing::info!(topic = %topic, "the dead-letter topic is usable");
                            return;
                        }
                    }
                });
            if let Err(e) = spawned {
                tracing::error!(error = %e, "cannot start the dead-letter topic check");
            }
            stop
        });
        Ok(KafkaTarget {
            producer,
            topic,
            max_message_bytes,
            ready,
            _recheck: recheck,
        })
    }
}

/// Whether `topic` exists with a partition, creating it if missing (with `max.message.bytes`
/// large enough for `max_message_bytes`). Failures are logged as errors when `loud`, else at
/// debug (the re-checks of a target that is not ready). Under publisher-supplied OAUTHBEARER
/// tokens the admin client is handed the process's token (`auth::kafka_admin`).
fn ensure_topic(
    base: &ClientConfig,
    topic: &str,
    max_message_bytes: usize,
    loud: bool,
    tokens: &Option<Arc<Tokens>>,
) -> bool {
    let fail = |what: &str, e: &dyn std::fmt::Display| {
        if loud {
            tracing::error!(topic, error = %e, "{what}");
        } else {
            tracing::debug!(topic, error = %e, "{what}");
        }
    };
    let client = match admin_client(
        base,
        HelperContext("dead-letter admin", tokens.clone()),
        tokens.clone(),
    ) {
        Ok(a) => a,
        Err(e) => {
            fail("cannot check the dead-letter topic", &e);
            return false;
        }
    };
    let admin = &client.admin;
    let exists = admin
        .inner()
        .fetch_metadata(Some(topic), ADMIN_TIMEOUT)
        .map(|m| {
            m.topics()
                .iter()
                .any(|t| t.name() == topic && t.error().is_none() && !t.partitions().is_empty())
        })
        .unwrap_or(false);
    if exists {
        return true;
    }
    if let Err(e) = client.refresh() {
        fail("cannot create the dead-letter topic", &e);
        return false;
    }
    let limit = (max_message_bytes + FRAMING_ALLOWANCE).to_string();
    let new_topic =
        NewTopic::new(topic, 1, TopicReplication::Fixed(-1)).set("max.message.bytes", &limit);
    let fut = admin.create_topics(
        [&new_topic],
        &AdminOptions::new()
            .operation_timeout(Some(ADMIN_TIMEOUT))
            .request_timeout(Some(ADMIN_TIMEOUT)),
    );
    match futures_executor(fut) {
        Ok(results) => results.iter().all(|r| match r {
            Ok(_) => true,
            Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => true,
            Err((_, e)) => {
                fail("cannot create the dead-letter topic", e);
                false
            }
        }),
        Err(e) => {
            fail("cannot create the dead-letter topic", &e);
            false
        }
    }
}

/// Runs a future to completion on the current thread (the admin calls of [`ensure_topic`]).
fn futures_executor<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a current-thread runtime")
        .block_on(f)
}

/// One Kafka record of a letter: whole, or a claim check.
#[derive(Debug)]
pub struct Record<'a> {
    /// The value: the payload, or its first [`CLAIM_CHECK_PREFIX_BYTES`].
    pub value: &'a [u8],
    /// The original key (a claim check drops a key over [`CLAIM_CHECK_PREFIX_BYTES`]).
    pub key: Option<&'a [u8]>,
    /// Header names and values, each value at most [`MAX_HEADER_VALUE_BYTES`].
    pub headers: Vec<(&'static str, String)>,
    /// Whether this is a claim check.
    pub claim_check: bool,
}

/// `s` cut to at most `max` bytes at a character boundary.
fn bounded(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// The record for `letter` under a `max` of value + key + headers bytes: whole when it fits
/// and the letter is not marked `claim_check`, else a claim check.
pub fn record(letter: &DeadLetter, max: usize) -> Record<'_> {
    let mut headers: Vec<(&'static str, String)> = vec![
        ("x-error-kind", letter.kind.as_str().into()),
        ("x-error-code", letter.code.into()),
        (
            "x-error-message",
            bounded(&letter.message, MAX_HEADER_VALUE_BYTES).into(),
        ),
        (
            "x-source-topic",
            bounded(&letter.topic, MAX_HEADER_VALUE_BYTES).into(),
        ),
        ("x-source-partition", letter.partition.to_string()),
        ("x-source-offset", letter.offset.to_string()),
    ];
    let key = letter.key.as_deref();
    let header_bytes: usize = headers.iter().map(|(k, v)| k.len() + v.len()).sum();
    let size = letter.payload.len() + key.map_or(0, <[u8]>::len) + header_bytes;
    if size <= max && !letter.claim_check {
        return Record {
            value: &letter.payload,
            key,
            headers,
            claim_check: false,
        };
    }
    let digest = Sha256::digest(&letter.payload);
    let sha: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    let why = if size > max {
        format!(
            "letter of {size} bytes over dead_letter.max_message_bytes ({max}); the payload stays in \
             the source topic at x-source-partition / x-source-offset"
        )
    } else {
        "refused by the dead-letter topic as too large; the payload stays in the source topic at \
         x-source-partition / x-source-offset"
            .to_string()
    };
    headers.push(("x-error-truncated", "true".into()));
    headers.push(("x-truncated-reason", why));
    headers.push(("x-original-size", letter.payload.len().to_string()));
    headers.push(("x-original-sha256", sha));
    let key = match key {
        Some(k) if k.len() > CLAIM_CHECK_PREFIX_BYTES => {
            headers.push(("x-original-key-size", k.len().to_string()));
            None
        }
        k => k,
    };
    let prefix = letter.payload.len().min(CLAIM_CHECK_PREFIX_BYTES);
    Record {
        value: &letter.payload[..prefix],
        key,
        headers,
        claim_check: true,
    }
}

impl Target for KafkaTarget {
    fn send(&mut self, mut letter: DeadLetter) {
        let (headers, value, key, claim_check) = {
            let r = record(&letter, self.max_message_bytes);
            let mut headers = OwnedHeaders::new_with_capacity(r.headers.len());
            for (k, v) in &r.headers {
                headers = headers.insert(Header {
                    key: k,
                    value: Some(v.as_str()),
                });
            }
            (
                headers,
                r.value.to_vec(),
                r.key.map(<[u8]>::to_vec),
                r.claim_check,
            )
        };
        letter.claim_check = claim_check;
        let mut rec: BaseRecord<'_, Vec<u8>, Vec<u8>, Box<DeadLetter>> =
            BaseRecord::with_opaque_to(&self.topic, Box::new(letter))
                .payload(&value)
                .headers(headers);
        if let Some(k) = key.as_ref() {
            rec = rec.key(k);
        }
        if let Err((e, rec)) = self.producer.send(rec) {
            let letter = rec.delivery_opaque;
            (self.producer.context().on_outcome)(Outcome::Failed {
                failure: classify(&e),
                error: e.to_string(),
                letter,
            });
        }
    }

    fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Relaxed)
    }

    fn flush(&mut self, timeout: Duration) {
        let _ = self.producer.flush(timeout);
    }
}

#[cfg(test)]
mod tests;
