//! Kafka look-ups for bootstrap: the topic's partition count and the version's consumer lag.
//!
//! rdkafka 0.39's admin client has no offset listing, so this uses the same protocol requests
//! through a consumer that never joins the group: OffsetFetch (`committed_offsets`) for the
//! group's commits and ListOffsets (`fetch_watermarks`) for the high watermarks. Lag of a
//! partition = high watermark − committed offset; with no commit, everything retained counts.
//!
//! The look-up client authenticates with the spec's own Kafka settings; under
//! `sasl.oauthbearer.method` its context supplies the tokens, as the publisher's clients do. A
//! credential the spec reads from a Secret in the cluster (`secretKeyRef`) must be filled in
//! first ([`super::secret_lookup::lookup_source`]); the commands do that before every look-up.

use super::error::BootstrapError;
use super::poll::{pause_until, Backoff};
use crate::config::KafkaSource;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{Offset, TopicPartitionList};
use serde::Serialize;
use std::time::Duration;
use tokio::time::Instant;

/// Lag of one partition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PartitionLag {
    /// Partition.
    pub partition: i32,
    /// The group's committed offset, if any.
    pub committed: Option<i64>,
    /// Low watermark.
    pub low: i64,
    /// High watermark.
    pub high: i64,
    /// Messages not yet committed by the group.
    pub lag: i64,
}

/// Lag of a consumer group on one topic.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Lag {
    /// Topic.
    pub topic: String,
    /// Group.
    pub group: String,
    /// Sum over partitions.
    pub total: i64,
    /// Per partition.
    pub partitions: Vec<PartitionLag>,
}

/// Lag of one partition from its watermarks and commit.
pub fn partition_lag(low: i64, high: i64, committed: Option<i64>) -> i64 {
    match committed {
        Some(c) => (high - c.max(low)).max(0),
        None => (high - low).max(0),
    }
}

/// A consumer that never joins, for look-ups; it supplies OAUTHBEARER tokens when the source's
/// settings ask the publisher for them.
type LookUp = BaseConsumer<crate::kafka_log::HelperContext>;

fn consumer(source: &KafkaSource) -> Result<LookUp, BootstrapError> {
    let tokens = crate::source::tokens(source).map_err(BootstrapError::Kafka)?;
    let oauth = tokens.is_some();
    let mut cfg = ClientConfig::new();
    for (k, v) in &crate::source::librdkafka_settings(source) {
        cfg.set(k, v);
    }
    cfg.set("bootstrap.servers", &source.bootstrap_servers)
        .set("group.id", &source.group_id)
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false");
    let c: LookUp = cfg
        .create_with_context(crate::kafka_log::HelperContext("bootstrap look-up", tokens))
        .map_err(|e| {
            // librdkafka's configuration errors quote the offending value.
            let scrub = crate::redact::Scrubber::for_kafka(
                &source.bootstrap_servers,
                &source.additional_consumer_config,
            );
            BootstrapError::Kafka(
                scrub
                    .scrub(&format!(
                        "cannot create a client for {}: {e}",
                        source.bootstrap_servers
                    ))
                    .into_owned(),
            )
        })?;
    // The first token is asked for at creation; a poll serves that request before the
    // look-ups (which do not poll) need the connection.
    if oauth {
        let _ = c.poll(Duration::from_millis(100));
    }
    Ok(c)
}

fn partition_ids(c: &LookUp, topic: &str, timeout: Duration) -> Result<Vec<i32>, BootstrapError> {
    let md = c
        .fetch_metadata(Some(topic), timeout)
        .map_err(|e| BootstrapError::Kafka(format!("metadata of topic {topic:?}: {e}")))?;
    let t = md
        .topics()
        .iter()
        .find(|t| t.name() == topic)
        .ok_or_else(|| BootstrapError::Kafka(format!("topic {topic:?} not in the metadata")))?;
    if let Some(err) = t.error() {
        return Err(BootstrapError::Kafka(format!("topic {topic:?}: {:?}", err)));
    }
    Ok(t.partitions().iter().map(|p| p.id()).collect())
}

/// Number of partitions of the source topic (blocking).
pub fn partition_count(source: &KafkaSource, timeout: Duration) -> Result<usize, BootstrapError> {
    let c = consumer(source)?;
    Ok(partition_ids(&c, &source.topic, timeout)?.len())
}

/// The group's lag on its topic (blocking).
pub fn lag(source: &KafkaSource, timeout: Duration) -> Result<Lag, BootstrapError> {
    let c = consumer(source)?;
    let topic = &source.topic;
    let ids = partition_ids(&c, topic, timeout)?;
    let mut tpl = TopicPartitionList::new();
    for p in &ids {
        tpl.add_partition(topic, *p);
    }
    let committed = c.committed_offsets(tpl, timeout).map_err(|e| {
        BootstrapError::Kafka(format!(
            "committed offsets of group {:?}: {e}",
            source.group_id
        ))
    })?;
    let mut partitions = Vec::with_capacity(ids.len());
    for p in ids {
        let (low, high) = c
            .fetch_watermarks(topic, p, timeout)
            .map_err(|e| BootstrapError::Kafka(format!("watermarks of {topic}/{p}: {e}")))?;
        let commit = committed
            .find_partition(topic, p)
            .and_then(|e| match e.offset() {
                Offset::Offset(o) => Some(o),
                _ => None,
            });
        partitions.push(PartitionLag {
            partition: p,
            committed: commit,
            low,
            high,
            lag: partition_lag(low, high, commit),
        });
    }
    Ok(Lag {
        topic: topic.clone(),
        group: source.group_id.clone(),
        total: partitions.iter().map(|p| p.lag).sum(),
        partitions,
    })
}

/// [`lag`] off the async runtime.
pub async fn lag_async(source: &KafkaSource, timeout: Duration) -> Result<Lag, BootstrapError> {
    let s = source.clone();
    tokio::task::spawn_blocking(move || lag(&s, timeout))
        .await
        .map_err(|e| BootstrapError::Kafka(format!("lag query task failed: {e}")))?
}

/// [`partition_count`] off the async runtime.
pub async fn partition_count_async(
    source: &KafkaSource,
    timeout: Duration,
) -> Result<usize, BootstrapError> {
    let s = source.clone();
    tokio::task::spawn_blocking(move || partition_count(&s, timeout))
        .await
        .map_err(|e| BootstrapError::Kafka(format!("metadata task failed: {e}")))?
}

/// Waits until the group has no lag on its topic, polling with backoff, for at most `timeout`.
/// Kafka errors while polling are retried until the deadline.
pub async fn wait_for_no_lag(
    source: &KafkaSource,
    timeout: Duration,
    backoff: Backoff,
) -> Result<Lag, BootstrapError> {
    let deadline = Instant::now() + timeout;
    let mut pauses = backoff.pauses();
    let mut last: Option<Lag> = None;
    loop {
        let per_call = deadline
            .saturating_duration_since(Instant::now())
            .clamp(Duration::from_secs(1), Duration::from_secs(10));
        match lag_async(source, per_call).await {
            Ok(l) if l.total == 0 => return Ok(l),
            Ok(l) => {
                tracing::info!(
                    "draining: group {} lags {} message(s) on {}",
                    l.group,
                    l.total,
                    l.topic
                );
                last = Some(l);
            }
            Err(e) => tracing::warn!("draining: {e}; retrying"),
        }
        let pause = pauses.next().unwrap_or(backoff.max);
        if !pause_until(deadline, pause).await {
            return Err(match last {
                Some(l) => BootstrapError::DrainTimeout { group: l.group, topic: l.topic, lag: l.total },
                None => BootstrapError::Kafka(format!(
                    "could not read the lag of group {:?} on {:?} before the drain timeout; nothing was deleted",
                    source.group_id, source.topic
                )),
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lag_arithmetic() {
        assert_eq!(partition_lag(0, 10, Some(10)), 0);
        assert_eq!(partition_lag(0, 10, Some(4)), 6);
        assert_eq!(partition_lag(0, 10, None), 10);
        assert_eq!(partition_lag(5, 5, None), 0);
        // A commit below the low watermark (retention removed the rest) counts from low.
        assert_eq!(partition_lag(8, 10, Some(2)), 2);
    }
}
