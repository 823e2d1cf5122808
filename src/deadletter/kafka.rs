//! Kafka dead-letter topic.

use super::{DeadLetter, Outcome, OutcomeFn, Target};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::error::RDKafkaErrorCode;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use rdkafka::ClientContext;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Producer context: turns delivery reports into [`Outcome`]s.
pub struct DlqContext {
    on_outcome: OutcomeFn,
}

impl ClientContext for DlqContext {}

impl ProducerContext for DlqContext {
    type DeliveryOpaque = Box<DeadLetter>;

    fn delivery(&self, result: &DeliveryResult<'_>, letter: Box<DeadLetter>) {
        match result {
            Ok(_) => (self.on_outcome)(Outcome::Written {
                partition: letter.partition,
                offset: letter.offset,
                epoch: letter.epoch,
            }),
            Err((e, _)) => (self.on_outcome)(Outcome::Failed {
                error: e.to_string(),
                letter,
            }),
        }
    }
}

/// Writes dead letters to a Kafka topic with idempotent, acks=all delivery.
pub struct KafkaTarget {
    producer: ThreadedProducer<DlqContext>,
    topic: String,
    ready: Arc<AtomicBool>,
}

impl KafkaTarget {
    /// Creates the producer (sharing the source's connection settings in `base`) and makes sure
    /// the topic exists, creating it if missing. A topic that cannot be created leaves the
    /// target not ready; sends then fail and are retried by the caller.
    pub fn new(
        base: &ClientConfig,
        topic: String,
        on_outcome: OutcomeFn,
    ) -> Result<Self, rdkafka::error::KafkaError> {
        let mut cfg = base.clone();
        cfg.set("enable.idempotence", "true")
            .set("acks", "all")
            .set("linger.ms", "20")
            .set("message.timeout.ms", "60000");
        let producer: ThreadedProducer<DlqContext> =
            cfg.create_with_context(DlqContext { on_outcome })?;
        let ready = Arc::new(AtomicBool::new(false));
        let t = KafkaTarget {
            producer,
            topic,
            ready,
        };
        t.ensure_topic(base);
        Ok(t)
    }

    fn ensure_topic(&self, base: &ClientConfig) {
        let exists = self
            .producer
            .client()
            .fetch_metadata(Some(&self.topic), Duration::from_secs(10))
            .map(|m| {
                m.topics().iter().any(|t| {
                    t.name() == self.topic && t.error().is_none() && !t.partitions().is_empty()
                })
            })
            .unwrap_or(false);
        if exists {
            self.ready.store(true, Ordering::Relaxed);
            return;
        }
        let admin: Result<AdminClient<DefaultClientContext>, _> = base.create();
        let created = match admin {
            Ok(admin) => {
                let topic = NewTopic::new(&self.topic, 1, TopicReplication::Fixed(-1));
                let fut = admin.create_topics(
                    [&topic],
                    &AdminOptions::new().operation_timeout(Some(Duration::from_secs(10))),
                );
                match futures_executor(fut) {
                    Ok(results) => results.iter().all(|r| match r {
                        Ok(_) => true,
                        Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => true,
                        Err((t, e)) => {
                            tracing::error!(topic = %t, error = %e, "cannot create the dead-letter topic");
                            false
                        }
                    }),
                    Err(e) => {
                        tracing::error!(topic = %self.topic, error = %e, "cannot create the dead-letter topic");
                        false
                    }
                }
            }
            Err(e) => {
                tracing::error!(error = %e, "cannot create a Kafka admin client");
                false
            }
        };
        self.ready.store(created, Ordering::Relaxed);
    }
}

/// Runs a future to completion on the current thread (admin calls at start-up only).
fn futures_executor<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a current-thread runtime")
        .block_on(f)
}

impl Target for KafkaTarget {
    fn send(&mut self, letter: DeadLetter) {
        let partition = letter.partition.to_string();
        let offset = letter.offset.to_string();
        let headers = OwnedHeaders::new_with_capacity(6)
            .insert(Header {
                key: "x-error-kind",
                value: Some(letter.kind.as_str()),
            })
            .insert(Header {
                key: "x-error-code",
                value: Some(letter.code),
            })
            .insert(Header {
                key: "x-error-message",
                value: Some(letter.message.as_str()),
            })
            .insert(Header {
                key: "x-source-topic",
                value: Some(letter.topic.as_str()),
            })
            .insert(Header {
                key: "x-source-partition",
                value: Some(partition.as_str()),
            })
            .insert(Header {
                key: "x-source-offset",
                value: Some(offset.as_str()),
            });
        let payload = letter.payload.clone();
        let key = letter.key.clone();
        let mut record: BaseRecord<'_, Vec<u8>, Vec<u8>, Box<DeadLetter>> =
            BaseRecord::with_opaque_to(&self.topic, Box::new(letter))
                .payload(&payload)
                .headers(headers);
        if let Some(k) = key.as_ref() {
            record = record.key(k);
        }
        if let Err((e, rec)) = self.producer.send(record) {
            let letter = rec.delivery_opaque;
            (self.producer.context().on_outcome)(Outcome::Failed {
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
