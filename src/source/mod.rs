//! The Kafka source: consumer settings and the consumer context (rebalance, statistics, errors).
//!
//! The consumer commits explicitly (`enable.auto.commit=false`, `enable.auto.offset.store=false`):
//! the pipeline commits a `TopicPartitionList` of acknowledged offsets only. librdkafka's own
//! prefetch is sized from `batching.max_inflight_bytes`, so the whole process stays within the
//! in-flight budget.

pub mod group;

use crate::auth::kafka::Tokens;
use crate::config::{kip848, Assignment, Config, KafkaSource};
use crate::server::{BrokerProblem, Health};
use rdkafka::config::ClientConfig;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, RebalanceProtocol};
use rdkafka::error::KafkaError;
use rdkafka::statistics::Statistics;
use rdkafka::types::RDKafkaRespErr;
use rdkafka::ClientContext;
use rdkafka::TopicPartitionList;
use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};

/// librdkafka keys that carry connection and security settings, shared by the dead-letter
/// producer and admin clients.
fn is_connection_key(k: &str) -> bool {
    k.starts_with("security.")
        || k.starts_with("sasl.")
        || k.starts_with("ssl.")
        || k.starts_with("ssl_")
        || k == "client.id"
        || k == "client.dns.lookup"
        || k == "broker.address.family"
}

/// Connection settings only (bootstrap servers and security), for producers and admin clients.
pub fn connection_config(src: &KafkaSource) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", &src.bootstrap_servers);
    for (k, v) in &librdkafka_settings(src) {
        if is_connection_key(k) {
            c.set(k, v);
        }
    }
    c
}

/// `additional_consumer_config` as librdkafka gets it: under a publisher-supplied
/// `sasl.oauthbearer.method` without the `sasl.oauthbearer.*` keys the publisher reads itself
/// ([`crate::auth::kafka`]).
pub fn librdkafka_settings(src: &KafkaSource) -> Vec<(String, String)> {
    let extra = &src.additional_consumer_config;
    let method = crate::auth::kafka::method(extra).ok().flatten();
    crate::auth::kafka::librdkafka_pairs(extra, method.as_ref())
}

/// The Kafka token source `additional_consumer_config` asks for (`None` when librdkafka needs
/// none from the publisher); `Err` names the setting to fix.
pub fn tokens(src: &KafkaSource) -> Result<Option<Arc<Tokens>>, String> {
    Tokens::from_settings(&src.additional_consumer_config)
}

/// How long librdkafka waits before it checks again whether a fetch may be sent, once its local
/// queue is over `queued.max.messages.kbytes`. librdkafka's default (1,000 ms in 2.12) stalls the
/// consumer: at `batching.max_inflight_bytes=16MiB` the queue drains in a few milliseconds at
/// full rate and the next fetch went out up to a second later (the rate fell to 12k msg/s). At
/// 10 ms the consumer still idled about 40% of the time at that budget; at 1 ms a queue that
/// fell below its threshold is refilled after at most 1 ms plus a fetch round trip, and the
/// publisher's core stays busy while the topic has a backlog. The cost is one queue-size check
/// per millisecond per broker while the queue is full. Measured in docs/performance.md,
/// "Fetch settings".
pub const FETCH_QUEUE_BACKOFF_MS: u64 = 1;

/// librdkafka's share of the in-flight budget (`batching.max_inflight_bytes`): a quarter, split
/// between its queue of fetched messages (`queued.max.messages.kbytes`, two thirds) and one
/// fetch response (`fetch.max.bytes`, a third), between budgets of 12 MiB and 1.2 GiB; below,
/// 2 MiB split 1 and 1; above, fetches of 100 MiB (and from 8 GiB a queue of 2 GiB). The queue
/// threshold is only checked before a fetch is sent, and each broker has one fetch in flight,
/// so the queue can hold the threshold plus one response per broker that leads an assigned
/// partition: with one broker the two add up to the quarter that the memory formula counts
/// (docs/reliability.md section 1.4). A response of half the queue keeps one fetch in flight
/// while the queue still holds a round trip's worth of messages. Returns `(queue bytes, fetch bytes)`, each within what librdkafka
/// accepts.
pub fn prefetch_split(max_inflight_bytes: u64) -> (u64, u64) {
    let prefetch = (max_inflight_bytes / 4).max(2 << 20);
    // At least 1 MiB: librdkafka refuses a fetch.max.bytes below message.max.bytes (1,000,000).
    let fetch = (prefetch / 3).clamp(1 << 20, 100 << 20);
    // queued.max.messages.kbytes takes at most 2,097,151 KiB.
    let queue = (prefetch - fetch).min(MAX_QUEUE_KIB << 10);
    (queue, fetch)
}

/// librdkafka's largest `queued.max.messages.kbytes`.
const MAX_QUEUE_KIB: u64 = 2_097_151;

/// The consumer's settings: the publisher's defaults, then Merlin's
/// `additional_consumer_config` (which may override them, except the keys config validation
/// forbids). `instance` is the static member id (`consumer.static_membership`,
/// [`instance_id`]).
///
/// The group is [`Config::consumer_group`]: by default one of this model version's own, where
/// the assignment is `cooperative-sticky`, so a member joining or leaving moves only the
/// partitions that change owner and everyone else keeps consuming (the eager default revokes
/// every partition of every member and stops them all until the slowest has rejoined). A group
/// shared with Merlin's eager publishers (`consumer.group: shared`) keeps librdkafka's eager
/// default, since one group cannot mix the two. Under `group.protocol: consumer` (KIP-848) the
/// broker runs the session, the heartbeat and the assignment: the settings librdkafka refuses
/// there are left out.
pub fn consumer_config(cfg: &Config, src: &KafkaSource, instance: Option<&str>) -> ClientConfig {
    let mut c = ClientConfig::new();
    let session_ms = cfg.consumer.session_timeout.as_millis().max(1000) as u64;
    let (queue, fetch) = prefetch_split(cfg.batching.max_inflight_bytes as u64);
    // One response holds at least one whole message of the topic's largest.
    let fetch = fetch.max(cfg.consumer.max_message_bytes as u64);
    let group = cfg.consumer_group().unwrap_or_else(|| src.group_id.clone());
    c.set("bootstrap.servers", &src.bootstrap_servers)
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("auto.offset.reset", cfg.auto_offset_reset())
        .set("statistics.interval.ms", "5000")
        .set("queued.max.messages.kbytes", (queue >> 10).to_string())
        .set("fetch.max.bytes", fetch.to_string())
        // librdkafka wants room for a response's framing above fetch.max.bytes.
        .set(
            "receive.message.max.bytes",
            (fetch + 512).max(100_000_000).to_string(),
        )
        .set("fetch.queue.backoff.ms", FETCH_QUEUE_BACKOFF_MS.to_string());
    let default = cfg.consumer.group.assignment();
    match Assignment::given(&src.additional_consumer_config, default) {
        // librdkafka says that the coordinator does not serve KIP-848 only in a `cgrp` debug
        // line (and then looks for a coordinator again, forever): the context watches for it.
        // rdkafka passes librdkafka the level of the `log` crate's global filter (info), under
        // which those lines are never written.
        Assignment::Broker => {
            c.set("debug", "cgrp").set_log_level(RDKafkaLogLevel::Debug);
        }
        classic => {
            c.set("session.timeout.ms", session_ms.to_string()).set(
                "heartbeat.interval.ms",
                (session_ms / 4).clamp(100, 3000).to_string(),
            );
            if classic == Assignment::Cooperative {
                c.set("partition.assignment.strategy", "cooperative-sticky");
            }
        }
    }
    if let Some(id) = instance {
        c.set("group.instance.id", id);
    }
    for (k, v) in &librdkafka_settings(src) {
        if k == "auto.offset.reset" && cfg.consumer.start_from.is_some() {
            continue;
        }
        c.set(k, v);
    }
    c
}

/// The static member id under `consumer.static_membership`: the pod's name, from `POD_NAME`
/// (the downward API) or else `HOSTNAME` (which Kubernetes sets to the pod's name). `None`
/// without static membership; `Err` saying what to set when neither is there.
pub fn instance_id(
    cfg: &Config,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Option<String>, String> {
    if !cfg.consumer.static_membership {
        return Ok(None);
    }
    let name = ["POD_NAME", "HOSTNAME"]
        .into_iter()
        .find_map(|k| env(k).filter(|v| !v.trim().is_empty()));
    match name {
        Some(n) => Ok(Some(n)),
        None => Err("consumer.static_membership is on, but neither POD_NAME nor HOSTNAME is set: set POD_NAME to the pod's name (env valueFrom fieldRef metadata.name), or turn static membership off".into()),
    }
}

/// Called by the consumer context on rebalances (on the polling thread, inside `poll`).
pub trait RebalanceListener: Send + Sync {
    /// Partitions are about to be assigned: the listener may set start offsets in `tpl` (for
    /// partitions the group has no committed offset for).
    fn assigning(&self, consumer: &BaseConsumer<SourceContext>, tpl: &mut TopicPartitionList);
    /// Partitions were assigned (possibly none); the listener may pause some of them.
    fn assigned(&self, consumer: &BaseConsumer<SourceContext>, partitions: &[i32]);
    /// Partitions are about to be revoked: stop intake, settle what can be settled, commit.
    fn revoking(&self, consumer: &BaseConsumer<SourceContext>, partitions: &[i32]);
}

/// Consumer context: rebalances go to the pipeline's listener, statistics to lag gauges.
pub struct SourceContext {
    topic: String,
    health: Arc<Health>,
    /// Watch librdkafka's group debug lines for a coordinator without KIP-848.
    watch_protocol: bool,
    /// librdkafka's debug lines come only from the `debug=cgrp` set for that watch
    /// ([`consumer_config`]), not from an operator's own `debug`: they are dropped.
    drop_debug: bool,
    listener: OnceLock<Arc<dyn RebalanceListener>>,
    on_stats: Box<dyn Fn(&Statistics) + Send + Sync>,
    tokens: Option<Arc<Tokens>>,
}

impl SourceContext {
    /// A context for `topic`; `on_stats` receives librdkafka statistics (lag per partition).
    pub fn new(
        topic: String,
        health: Arc<Health>,
        on_stats: Box<dyn Fn(&Statistics) + Send + Sync>,
    ) -> Self {
        SourceContext {
            topic,
            health,
            watch_protocol: false,
            drop_debug: false,
            listener: OnceLock::new(),
            on_stats,
            tokens: None,
        }
    }

    /// Supplies OAUTHBEARER tokens from `tokens` ([`tokens`]).
    pub fn with_tokens(mut self, tokens: Option<Arc<Tokens>>) -> Self {
        self.tokens = tokens;
        self
    }

    /// Watches librdkafka's group debug lines for a coordinator without KIP-848, under
    /// `group.protocol: consumer` (whose [`consumer_config`] asks for those lines, unless the
    /// operator set `debug` already).
    pub fn watching_protocol(mut self, src: &KafkaSource) -> Self {
        let extra = &src.additional_consumer_config;
        self.watch_protocol = kip848(extra);
        self.drop_debug = self.watch_protocol && !extra.iter().any(|(k, _)| k == "debug");
        self
    }

    /// Installs the rebalance listener (once).
    pub fn set_listener(&self, l: Arc<dyn RebalanceListener>) {
        let _ = self.listener.set(l);
    }

    fn partitions(&self, tpl: &TopicPartitionList) -> Vec<i32> {
        tpl.elements()
            .iter()
            .filter(|e| e.topic() == self.topic)
            .map(|e| e.partition())
            .collect()
    }
}

impl ClientContext for SourceContext {
    crate::auth::kafka::token_refresh!(tokens);

    fn stats(&self, statistics: Statistics) {
        if statistics.brokers.values().any(|b| b.state == "UP") {
            self.health.broker_reached();
        }
        (self.on_stats)(&statistics);
    }

    fn error(&self, error: KafkaError, reason: &str) {
        if let Some(problem) = broker_problem(&error, reason) {
            self.health.set_broker_problem(problem);
        }
        crate::kafka_log::error("consumer", &error, reason);
    }

    fn log(&self, level: RDKafkaLogLevel, fac: &str, line: &str) {
        use RDKafkaLogLevel as L;
        if self.watch_protocol && line.contains(NO_KIP848) {
            let refused = &self.health.group_protocol_refused;
            if !refused.swap(true, Ordering::Relaxed) {
                tracing::error!(librdkafka = line, "the group's coordinator does not serve group.protocol: consumer (KIP-848, Kafka 4.0 or later); the consumer cannot join: remove group.protocol from additional_consumer_config or set it to classic");
            }
            return;
        }
        if self.drop_debug && matches!(level, L::Debug) {
            return;
        }
        crate::kafka_log::log("consumer", level, fac, line);
    }
}

/// What `/readyz` says for a client error that means the brokers cannot be reached or will not
/// let the consumer in (`None` for other errors). librdkafka's reason names the broker and the
/// cause (`127.0.0.1:9/bootstrap: Connect to ipv4#127.0.0.1:9 failed: Connection refused`);
/// "all brokers are down" adds nothing to the cause, so it never replaces one already known.
fn broker_problem(error: &KafkaError, reason: &str) -> Option<BrokerProblem> {
    use rdkafka::types::RDKafkaErrorCode as C;
    let code = error.rdkafka_error_code()?;
    let what = match code {
        C::AllBrokersDown => return Some(BrokerProblem::AllDown(reason.to_string())),
        C::BrokerTransportFailure | C::Resolve => "cannot reach a Kafka broker",
        C::Authentication if reason.contains("OAUTHBEARER token") => {
            "no Kafka OAUTHBEARER token (retried every 10 s)"
        }
        C::Authentication | C::SaslAuthenticationFailed => "a Kafka broker refused the credentials",
        C::SSL => "the TLS handshake with a Kafka broker failed",
        _ => return None,
    };
    Some(BrokerProblem::Cause(format!(
        "{what}: {} (check observation_source.bootstrap_servers and the security settings in additional_consumer_config)",
        crate::kafka_log::kind(reason)
    )))
}

/// What librdkafka's group debug line says when the coordinator does not serve KIP-848
/// (`rd_kafka_ConsumerGroupHeartbeatRequest`, librdkafka 2.12).
const NO_KIP848: &str = "ConsumerGroupHeartbeatRequest not supported by broker";

impl ConsumerContext for SourceContext {
    /// Replaces rdkafka's default handling (same steps, safe calls) so that start offsets can be
    /// set before the assignment and revoked partitions settled before they go.
    fn rebalance(
        &self,
        consumer: &BaseConsumer<Self>,
        err: RDKafkaRespErr,
        tpl: &mut TopicPartitionList,
    ) {
        let cooperative = matches!(
            consumer.rebalance_protocol(),
            RebalanceProtocol::Cooperative
        );
        match err {
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS => {
                if let Some(l) = self.listener.get() {
                    l.assigning(consumer, tpl);
                }
                let r = if cooperative {
                    consumer.incremental_assign(tpl)
                } else {
                    consumer.assign(tpl)
                };
                if let Err(e) = r {
                    tracing::error!(error = %e, "assign failed");
                }
                let parts = self.partitions(tpl);
                tracing::info!(partitions = ?parts, "partitions assigned");
                self.health.joined.store(true, Ordering::Relaxed);
                self.health.broker_reached();
                self.health
                    .group_protocol_refused
                    .store(false, Ordering::Relaxed);
                if let Some(l) = self.listener.get() {
                    l.assigned(consumer, &parts);
                }
            }
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS => {
                let parts = self.partitions(tpl);
                tracing::info!(partitions = ?parts, "partitions revoked");
                if let Some(l) = self.listener.get() {
                    l.revoking(consumer, &parts);
                }
                resume_given_up(consumer, tpl);
                let r = if cooperative {
                    consumer.incremental_unassign(tpl)
                } else {
                    consumer.unassign()
                };
                if let Err(e) = r {
                    tracing::error!(error = %e, "unassign failed");
                }
            }
            other => {
                tracing::warn!(error = ?other, "rebalance error; dropping the assignment");
                if let Some(l) = self.listener.get() {
                    l.revoking(consumer, &self.partitions(tpl));
                }
                if let Ok(all) = consumer.assignment() {
                    resume_given_up(consumer, &all);
                }
                let _ = consumer.unassign();
            }
        }
    }
}

/// Clears the application's pause of partitions about to be unassigned. librdkafka keeps it
/// across unassign and assign: a partition paused for the in-flight budget (or held for its
/// exactly-once checkpoint) when it was revoked would come back paused, and nothing would
/// resume it (the loop resumes only what it paused, and the checkpoint path only what it held
/// in this assignment): intake would stop for good, with no error. Whoever gets them back
/// pauses them again if it must.
fn resume_given_up(consumer: &BaseConsumer<SourceContext>, tpl: &TopicPartitionList) {
    if tpl.count() > 0 {
        if let Err(e) = consumer.resume(tpl) {
            tracing::warn!(error = %e, "cannot clear the pause of revoked partitions");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Assignment, Needs};

    fn config(extra: &str) -> Config {
        let yaml = format!("{}\n{extra}", include_str!("../../config/bench-20.yaml"));
        let v: serde_yaml_ng::Value = serde_yaml_ng::from_str(&yaml).unwrap();
        Config::from_value(&v, Needs::RUN).unwrap().0
    }

    fn get(c: &ClientConfig, k: &str) -> String {
        c.get(k)
            .unwrap_or_else(|| panic!("{k} not set"))
            .to_string()
    }

    #[test]
    fn the_fetch_backoff_is_short_and_queue_and_fetch_share_a_quarter_of_the_budget() {
        let cfg = config("batching:\n  max_inflight_bytes: 16MiB\n");
        let src = cfg.observation_source.clone().unwrap();
        let c = consumer_config(&cfg, &src, None);
        assert_eq!(get(&c, "fetch.queue.backoff.ms"), "1");
        // 4 MiB: 2,796,203 bytes of queue (2,730 KiB) and a 1,398,101-byte fetch.
        assert_eq!(get(&c, "queued.max.messages.kbytes"), "2730");
        assert_eq!(get(&c, "fetch.max.bytes"), "1398101");
        let cfg = config("batching:\n  max_inflight_bytes: 64MiB\n");
        let c = consumer_config(&cfg, cfg.observation_source.as_ref().unwrap(), None);
        assert_eq!(get(&c, "fetch.queue.backoff.ms"), "1");
        assert_eq!(get(&c, "queued.max.messages.kbytes"), "10922");
        assert_eq!(get(&c, "fetch.max.bytes"), "5592405");
        // A topic carrying 8 MiB messages: one fits a response, and the response fits
        // librdkafka's receive limit.
        let cfg = config("consumer:\n  max_message_bytes: 8MiB\n");
        let c = consumer_config(&cfg, cfg.observation_source.as_ref().unwrap(), None);
        assert_eq!(get(&c, "fetch.max.bytes"), (8u64 << 20).to_string());
        assert_eq!(get(&c, "receive.message.max.bytes"), "100000000");
        let cfg = config("consumer:\n  max_message_bytes: 512MiB\n");
        let c = consumer_config(&cfg, cfg.observation_source.as_ref().unwrap(), None);
        assert_eq!(
            get(&c, "receive.message.max.bytes"),
            ((512u64 << 20) + 512).to_string()
        );
    }

    proptest::proptest! {
        /// The queue can hold its threshold plus one response: together never more than the
        /// quarter of the budget the memory formula counts (or its 2 MiB floor); the fetch is
        /// one librdkafka accepts; from 12 MiB of budget up a response is at most half the
        /// queue, so one is in flight while the queue still holds messages.
        /// Budgets from 1 KiB to 64 GiB, as many of each power of two (a uniform draw would
        /// nearly always land where the fetch is at its 100 MiB cap).
        #[test]
        fn queue_and_fetch_stay_within_a_quarter_of_the_budget(
            shift in 10u32..36,
            frac in 0u64..1024,
        ) {
            let budget = (1u64 << shift) + (1u64 << shift) / 1024 * frac;
            let (queue, fetch) = prefetch_split(budget);
            proptest::prop_assert!(queue + fetch <= (budget / 4).max(2 << 20));
            proptest::prop_assert!((1 << 20..=100 << 20).contains(&fetch));
            proptest::prop_assert!(queue >= 1 << 20);
            proptest::prop_assert!(queue >> 10 <= MAX_QUEUE_KIB);
            if budget >= 12 << 20 {
                proptest::prop_assert!(2 * fetch <= queue);
            }
        }
    }

    fn with_source(extra: &str, consumer: &str) -> Config {
        let yaml = include_str!("../../config/bench-20.yaml").replace(
            "    group_id: bench\n",
            &format!("    group_id: bench\n    additional_consumer_config:\n{extra}"),
        );
        let v: serde_yaml_ng::Value =
            serde_yaml_ng::from_str(&format!("{yaml}{consumer}")).unwrap();
        Config::from_value(&v, Needs::RUN).unwrap().0
    }

    #[test]
    fn a_version_of_its_own_group_rebalances_incrementally_a_shared_one_eagerly() {
        let cfg = with_source("      x.y: \"1\"\n", "");
        let c = consumer_config(&cfg, cfg.observation_source.as_ref().unwrap(), None);
        assert_eq!(get(&c, "group.id"), "bench.bench.model-20.1");
        assert_eq!(
            get(&c, "partition.assignment.strategy"),
            "cooperative-sticky"
        );
        // What bootstrap reads to choose a rollout strategy says the same.
        assert_eq!(cfg.assignment(), Some(Assignment::Cooperative));
        assert!(c.get("group.instance.id").is_none());
        let cfg = with_source("      x.y: \"1\"\n", "consumer:\n  group: own\n");
        let c = consumer_config(&cfg, cfg.observation_source.as_ref().unwrap(), None);
        assert_eq!(get(&c, "group.id"), "bench");
        assert_eq!(
            get(&c, "partition.assignment.strategy"),
            "cooperative-sticky"
        );
        assert_eq!(cfg.assignment(), Some(Assignment::Cooperative));
        // Merlin's eager publishers share it: librdkafka's default, which they speak.
        let cfg = with_source("      x.y: \"1\"\n", "consumer:\n  group: shared\n");
        let c = consumer_config(&cfg, cfg.observation_source.as_ref().unwrap(), None);
        assert_eq!(get(&c, "group.id"), "bench");
        assert!(c.get("partition.assignment.strategy").is_none());
        assert_eq!(cfg.assignment(), Some(Assignment::Eager));
        // An explicit strategy wins.
        let cfg = with_source("      partition.assignment.strategy: range\n", "");
        let c = consumer_config(&cfg, cfg.observation_source.as_ref().unwrap(), None);
        assert_eq!(get(&c, "partition.assignment.strategy"), "range");
        assert_eq!(cfg.assignment(), Some(Assignment::Eager));
    }

    #[test]
    fn kip848_leaves_out_what_the_broker_runs_and_watches_for_a_broker_without_it() {
        let cfg = with_source("      group.protocol: consumer\n", "");
        let c = consumer_config(
            &cfg,
            cfg.observation_source.as_ref().unwrap(),
            Some("pod-1"),
        );
        assert_eq!(get(&c, "group.protocol"), "consumer");
        assert_eq!(cfg.assignment(), Some(Assignment::Broker));
        for k in crate::config::CLASSIC_ONLY_KEYS {
            assert!(
                c.get(k).is_none(),
                "{k} is refused under group.protocol=consumer"
            );
        }
        assert_eq!(get(&c, "debug"), "cgrp");
        assert_eq!(get(&c, "group.instance.id"), "pod-1");
        // librdkafka itself accepts the whole set.
        c.create::<BaseConsumer>()
            .expect("librdkafka accepts the consumer protocol's settings");
        let cfg = with_source("      x.y: \"1\"\n", "");
        let c = consumer_config(&cfg, cfg.observation_source.as_ref().unwrap(), None);
        assert!(c.get("debug").is_none());
        assert_eq!(get(&c, "session.timeout.ms"), "30000");
    }

    #[test]
    fn static_membership_takes_the_pod_name_or_says_what_to_set() {
        let off = with_source("      x.y: \"1\"\n", "");
        assert_eq!(instance_id(&off, |_| Some("p".into())), Ok(None));
        let on = with_source(
            "      x.y: \"1\"\n",
            "consumer:\n  static_membership: true\n",
        );
        let env = |k: &str| (k == "HOSTNAME").then(|| "pod-7".to_string());
        assert_eq!(instance_id(&on, env), Ok(Some("pod-7".into())));
        let env = |k: &str| Some(format!("{k}-value"));
        assert_eq!(instance_id(&on, env), Ok(Some("POD_NAME-value".into())));
        let err = instance_id(&on, |_| None).unwrap_err();
        assert!(
            err.contains("POD_NAME") && err.contains("static_membership"),
            "{err}"
        );
    }

    #[test]
    fn additional_consumer_config_overrides_the_fetch_backoff() {
        let yaml = include_str!("../../config/bench-20.yaml").replace(
            "    group_id: bench\n",
            "    group_id: bench\n    additional_consumer_config:\n      fetch.queue.backoff.ms: \"1000\"\n",
        );
        let v: serde_yaml_ng::Value = serde_yaml_ng::from_str(&yaml).unwrap();
        let cfg = Config::from_value(&v, Needs::RUN).unwrap().0;
        let c = consumer_config(&cfg, cfg.observation_source.as_ref().unwrap(), None);
        assert_eq!(get(&c, "fetch.queue.backoff.ms"), "1000");
    }
}
