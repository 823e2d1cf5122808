//! `produce`: sends every frame of a length-delimited file as one Kafka message (no key),
//! batching and waiting for every delivery report. A message the broker has not acknowledged
//! within `--delivery-timeout` fails (librdkafka `message.timeout.ms`), so an unreachable broker
//! ends the command with its error instead of a silent wait; the broker's first error is said
//! when it happens. Exit 1 if any message was not delivered.

use super::{open_input, EXIT_FAILURE, EXIT_USAGE};
use crate::cli::ProduceArgs;
use crate::framing::FrameReader;
use rdkafka::admin::{AdminOptions, NewTopic, TopicReplication};
use rdkafka::config::ClientConfig;
use rdkafka::error::KafkaError;
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use rdkafka::types::RDKafkaErrorCode;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What the clients heard: failed deliveries, the first delivery error, the broker's first error
/// (librdkafka's error callback: connection refused, name resolution, authentication).
#[derive(Default)]
struct Heard {
    failed: AtomicU64,
    first_failure: Mutex<Option<String>>,
    broker_error: Mutex<Option<String>>,
}

/// The clients' context: records what [`Heard`] holds, and prints the broker's first error
/// once, when it happens.
/// Also supplies OAUTHBEARER tokens when the settings ask the publisher for them.
#[derive(Clone)]
struct Listening(Arc<Heard>, Option<Arc<crate::auth::kafka::Tokens>>);

impl rdkafka::ClientContext for Listening {
    crate::auth::kafka::token_refresh!(1);

    fn error(&self, error: KafkaError, reason: &str) {
        let text = if reason.is_empty() {
            error.to_string()
        } else {
            reason.to_string()
        };
        // The first error is the cause (`Connect to … failed: Connection refused`); later
        // ones mostly repeat it or summarise it (`1/1 brokers are down`).
        let mut first = self.0.broker_error.lock().expect("not poisoned");
        if first.is_none() {
            eprintln!("produce: {text} (still trying until --delivery-timeout)");
            *first = Some(text);
        }
    }
}

impl ProducerContext for Listening {
    type DeliveryOpaque = ();
    fn delivery(&self, r: &DeliveryResult<'_>, _: ()) {
        if let Err((e, _)) = r {
            self.0.failed.fetch_add(1, Ordering::Relaxed);
            let mut first = self.0.first_failure.lock().expect("not poisoned");
            first.get_or_insert_with(|| e.to_string());
        }
    }
}

/// The command's failure: what failed, then the broker's error when there was one, then what
/// to check.
fn failure(what: &str, heard: &Heard, brokers: &str) -> String {
    let broker = heard.broker_error.lock().expect("not poisoned").clone();
    match broker {
        Some(b) => format!(
            "produce: {what}; the broker's error: {b}; check --brokers {brokers} and that \
             the broker is reachable"
        ),
        None => format!("produce: {what} (brokers {brokers})"),
    }
}

/// `produce`.
pub fn produce(a: ProduceArgs) -> ExitCode {
    let timeout = a.delivery_timeout;
    if timeout.is_zero() {
        eprintln!("produce: --delivery-timeout must be more than 0 (e.g. 30s)");
        return ExitCode::from(EXIT_USAGE);
    }
    let mut cfg = ClientConfig::new();
    cfg.set("bootstrap.servers", &a.brokers)
        .set("linger.ms", "20")
        .set("batch.num.messages", "10000")
        .set("queue.buffering.max.messages", "1000000")
        .set("queue.buffering.max.kbytes", "1048576")
        .set("message.timeout.ms", timeout.as_millis().to_string());
    let mut pairs = Vec::new();
    for kv in &a.producer_config {
        match kv.split_once('=') {
            Some((k, v)) => pairs.push((k.to_string(), v.to_string())),
            None => {
                eprintln!("produce: --producer-config {kv:?}: expected key=value");
                return ExitCode::from(EXIT_USAGE);
            }
        }
    }
    let tokens = match crate::auth::kafka::Tokens::from_settings(&pairs) {
        Ok(t) => t,
        Err(e) => {
            eprintln!(
                "produce: --producer-config {}",
                e.replace("additional_consumer_config.", "")
            );
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let method = crate::auth::kafka::method(&pairs).ok().flatten();
    for (k, v) in crate::auth::kafka::librdkafka_pairs(&pairs, method.as_ref()) {
        cfg.set(k, v);
    }
    let heard = Arc::new(Heard::default());
    let context = Listening(Arc::clone(&heard), tokens.clone());
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("produce: {e}");
            return ExitCode::from(EXIT_FAILURE);
        }
    };
    // Created first: its polling thread runs the error callback, which the admin client's
    // does not, so a broker that refuses connections is heard while the topic is created.
    let producer: ThreadedProducer<Listening> = match cfg.create_with_context(context.clone()) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("produce: {e}");
            return ExitCode::from(EXIT_FAILURE);
        }
    };
    let oauth = tokens.is_some();
    match crate::auth::kafka_admin::admin_client(&cfg, context, tokens) {
        // Under a token source this is the token service's answer, without which the producer
        // cannot send either.
        Err(e) if oauth => {
            eprintln!("produce: {e}");
            return ExitCode::from(EXIT_FAILURE);
        }
        Err(_) => {}
        Ok(client) => {
            let admin = client.admin;
            let t = NewTopic::new(&a.topic, a.partitions, TopicReplication::Fixed(1));
            let options = AdminOptions::new().request_timeout(Some(timeout));
            // The topic may exist already, or be created by the broker on first use: only a broker
            // that did not answer at all stops the command here.
            let unanswered = match rt.block_on(admin.create_topics([&t], &options)) {
                Err(e) => Some(e.to_string()),
                Ok(results) => results.into_iter().find_map(|r| match r {
                    Err((_, code)) if unreachable(code) => Some(code.to_string()),
                    _ => None,
                }),
            };
            if let Some(e) = unanswered {
                eprintln!(
                    "{}",
                    failure(
                        &format!(
                            "no broker answered the creation of topic {} within {} ({e})",
                            a.topic,
                            humantime::format_duration(timeout)
                        ),
                        &heard,
                        &a.brokers
                    )
                );
                return ExitCode::from(EXIT_FAILURE);
            }
        }
    }
    let (input, _) = match open_input(&a.input) {
        Ok(i) => i,
        Err(e) => {
            eprintln!("produce: cannot open {}: {e}", a.input);
            return ExitCode::from(EXIT_FAILURE);
        }
    };
    let started = std::time::Instant::now();
    let mut reader = FrameReader::new(input);
    let mut buf = Vec::new();
    let mut n = 0u64;
    loop {
        match reader.next_into(&mut buf) {
            Ok(Some(_)) => {}
            Ok(None) => break,
            Err(e) => {
                eprintln!("produce: {e}");
                return ExitCode::from(EXIT_FAILURE);
            }
        }
        let mut record = BaseRecord::<(), [u8]>::to(&a.topic).payload(&buf[..]);
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((e, r)) if e.rdkafka_error_code() == Some(RDKafkaErrorCode::QueueFull) => {
                    record = r;
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err((e, _)) => {
                    eprintln!("{}", failure(&e.to_string(), &heard, &a.brokers));
                    return ExitCode::from(EXIT_FAILURE);
                }
            }
        }
        n += 1;
    }
    // Every message fails by itself once its delivery timeout passes; the flush waits a little
    // longer so those reports arrive.
    if let Err(e) = producer.flush(timeout + Duration::from_secs(10)) {
        eprintln!(
            "{}",
            failure(
                &format!("not every message was delivered to topic {}: {e}", a.topic),
                &heard,
                &a.brokers
            )
        );
        return ExitCode::from(EXIT_FAILURE);
    }
    let failed = heard.failed.load(Ordering::Relaxed);
    if failed > 0 {
        let first = heard.first_failure.lock().expect("not poisoned").clone();
        eprintln!(
            "{}",
            failure(
                &format!(
                    "{failed} of {n} messages were not delivered to topic {} ({}; \
                     --delivery-timeout {})",
                    a.topic,
                    first.unwrap_or_default(),
                    humantime::format_duration(timeout)
                ),
                &heard,
                &a.brokers
            )
        );
        return ExitCode::from(EXIT_FAILURE);
    }
    let secs = started.elapsed().as_secs_f64();
    eprintln!(
        "produce: {n} messages to {} in {secs:.2}s ({:.0} msg/s)",
        a.topic,
        n as f64 / secs.max(1e-9)
    );
    ExitCode::SUCCESS
}

/// Whether a topic's creation failed because no broker answered (rather than, say, because it
/// exists already or the principal may not create topics).
fn unreachable(code: RDKafkaErrorCode) -> bool {
    matches!(
        code,
        RDKafkaErrorCode::OperationTimedOut
            | RDKafkaErrorCode::RequestTimedOut
            | RDKafkaErrorCode::BrokerTransportFailure
            | RDKafkaErrorCode::AllBrokersDown
            | RDKafkaErrorCode::Resolve
            | RDKafkaErrorCode::TimedOutQueue
    )
}
