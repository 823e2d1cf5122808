//! The memory formula (docs/reliability.md, "The memory formula"): an upper bound on the
//! publisher's resident memory for a configuration, term by term. Pure: `check-config` prints it,
//! the running publisher exports it (`observation_publisher_memory_bound_bytes`) beside its
//! resident memory so an alert can compare the two, and `bootstrap` sizes a Deployment's memory
//! limit with it.

use crate::config::{Config, SinkConfig};

const MIB: u64 = 1 << 20;

/// The process with nothing in flight, plus allocator slack: code, runtime threads, metrics,
/// the decoder's scratch, `run --replay`'s three 1 MiB read buffers.
pub const PROCESS_BYTES: u64 = 64 * MIB;

/// Fetch responses counted in librdkafka's prefetch: the queue can hold its threshold plus one
/// response per broker leading an assigned partition, and one broker more than that. Three
/// covers a partition set led by up to three brokers; each further broker adds one response.
pub const FETCHES_COUNTED: u64 = 3;

/// Batches the ARIZE sink holds at once: the batch it writes, filtered to Arize's columns, and
/// its request bodies, kept until Arize acknowledged all of them.
pub const ARIZE_BATCHES: u64 = 2;

/// One term of the bound.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Term {
    /// What it counts, as `check-config` prints it.
    pub what: String,
    /// Its bytes.
    pub bytes: u64,
}

/// The bound: a sum of terms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Footprint {
    /// The terms, in the formula's order.
    pub terms: Vec<Term>,
}

impl Footprint {
    /// The bound for `cfg`; `broker` when intake is a Kafka consumer (`run --replay` reads a
    /// file instead and has no prefetch).
    pub fn of(cfg: &Config, broker: bool) -> Footprint {
        let b = &cfg.batching;
        let batch = b.batch_bytes() as u64;
        let mut terms = vec![Term {
            what: "batches, dead letters and staged rows' bookkeeping in flight (batching.max_inflight_bytes)".into(),
            bytes: b.max_inflight_bytes as u64,
        }];
        if broker {
            let (queue, fetch) = crate::source::prefetch_split(b.max_inflight_bytes as u64);
            let fetch = fetch.max(cfg.consumer.max_message_bytes as u64);
            terms.push(Term {
                what: format!(
                    "librdkafka's prefetch: its queue and {FETCHES_COUNTED} fetch responses"
                ),
                bytes: queue + FETCHES_COUNTED * fetch,
            });
        }
        terms.push(Term {
            what: "the open batch (a flush at batching.max_bytes or an eighth of the budget)"
                .into(),
            bytes: batch,
        });
        terms.push(Term {
            what: "one log being decoded (batching.max_log_bytes)".into(),
            bytes: b.max_log_bytes as u64,
        });
        terms.push(Term {
            what: "the process itself".into(),
            bytes: PROCESS_BYTES,
        });
        if cfg.local_sink.is_some() {
            terms.push(Term {
                what: format!(
                    "local Parquet sink: {} batches encoded at once",
                    crate::sink::parquet::WRITES_AT_ONCE
                ),
                bytes: crate::sink::parquet::WRITES_AT_ONCE as u64 * batch,
            });
        }
        for sink in &cfg.observation_sinks {
            let (what, bytes) = match sink {
                SinkConfig::BigQuery(q) => (
                    "BIGQUERY sink: appends sent, not yet answered (its max_inflight_bytes, or a request per connection)".to_string(),
                    q.max_inflight_bytes
                        .max(u64::from(q.connections) * q.max_request_bytes),
                ),
                SinkConfig::Arize(_) => (
                    format!("ARIZE sink: {ARIZE_BATCHES} batches (rows and request bodies)"),
                    ARIZE_BATCHES * batch,
                ),
                SinkConfig::MaxCompute(_) => (
                    format!(
                        "MAXCOMPUTE sink: {} Tunnel blocks uploading at once",
                        crate::sink::maxcompute::MAX_UPLOADS
                    ),
                    crate::sink::maxcompute::MAX_UPLOADS as u64 * batch,
                ),
            };
            terms.push(Term { what, bytes });
        }
        Footprint { terms }
    }

    /// The bound: every term added up.
    pub fn bound(&self) -> u64 {
        self.terms.iter().map(|t| t.bytes).sum()
    }

    /// One line per term, then the total, in MiB, as `check-config` prints them.
    pub fn describe(&self) -> String {
        let mib = |b: u64| b as f64 / MIB as f64;
        let mut out = String::new();
        for t in &self.terms {
            out.push_str(&format!("  {:>8.1} MiB  {}\n", mib(t.bytes), t.what));
        }
        out.push_str(&format!(
            "  {:>8.1} MiB  in all ({} bytes)\n",
            mib(self.bound()),
            self.bound()
        ));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Needs;

    fn config(sinks: &str, extra: &str) -> Config {
        let yaml = include_str!("../config/merlin-binary.yaml");
        let head = yaml.split("observation_sinks:").next().unwrap();
        let source = yaml.split("observation_source:").nth(1).unwrap();
        let y = format!("{head}observation_sinks:\n{sinks}observation_source:{source}{extra}");
        let v: serde_yaml_ng::Value = serde_yaml_ng::from_str(&y).unwrap();
        Config::from_value(&v, Needs::RUN)
            .unwrap_or_else(|p| panic!("{p}"))
            .0
    }

    const BIGQUERY: &str = "- type: BIGQUERY\n  config: {project: p, dataset: d, ttl_days: 1}\n";
    const ARIZE: &str = "- type: ARIZE\n  config: {api_key: k, space_key: s}\n";
    const MAXCOMPUTE: &str = "- type: MAXCOMPUTE\n  config: {project: p, dataset: d, ttl_days: 0, access_key_id: k, access_key_secret: s, access_url: 'http://odps.example/api'}\n";
    const LOCAL: &str = "local_sink: {path: /tmp/rows}\n";

    #[test]
    fn every_sink_kind_at_its_defaults_is_bounded_by_128_mib() {
        for (sinks, extra) in [
            (BIGQUERY, ""),
            (ARIZE, ""),
            (MAXCOMPUTE, ""),
            ("", LOCAL),
            (BIGQUERY, LOCAL),
        ] {
            let f = Footprint::of(&config(sinks, extra), true);
            assert!(
                f.bound() <= 128 * MIB,
                "{sinks}{extra}: {} bytes\n{}",
                f.bound(),
                f.describe()
            );
        }
    }

    #[test]
    fn a_default_topic_s_largest_message_is_accepted_and_fetched_whole() {
        let cfg = config(BIGQUERY, "");
        assert_eq!(cfg.consumer.max_message_bytes, 1_048_588);
        assert!(cfg.batching.max_log_bytes >= cfg.consumer.max_message_bytes);
        let larger = config(BIGQUERY, "consumer: {max_message_bytes: 8MiB}\n");
        assert_eq!(larger.batching.max_log_bytes, 16 * (8 << 20));
        let set = config(
            BIGQUERY,
            "consumer: {max_message_bytes: 8MiB}\nbatching: {max_log_bytes: 20MiB}\n",
        );
        assert_eq!(set.batching.max_log_bytes, 20 << 20);
        let f = Footprint::of(&larger, true);
        let fetches = f
            .terms
            .iter()
            .find(|t| t.what.contains("prefetch"))
            .unwrap();
        assert!(fetches.bytes >= FETCHES_COUNTED * (8 << 20));
    }

    #[test]
    fn replay_has_no_prefetch_term() {
        let cfg = config("", LOCAL);
        let broker = Footprint::of(&cfg, true);
        let replay = Footprint::of(&cfg, false);
        assert_eq!(broker.terms.len(), replay.terms.len() + 1);
        assert!(replay.bound() < broker.bound());
        assert!(broker.describe().contains("in all"));
    }

    proptest::proptest! {
        /// The bound grows with every setting it counts and is at least the sum of the budget,
        /// one log and the process.
        #[test]
        fn the_bound_grows_with_what_it_counts(
            budget_mib in 1u64..4096,
            log_mib in 1u64..1024,
            conns in 1u32..=16,
        ) {
            let extra = format!(
                "batching: {{max_inflight_bytes: {budget_mib}MiB, max_bytes: 1MiB, max_log_bytes: {log_mib}MiB}}\n"
            );
            let sinks = format!(
                "- type: BIGQUERY\n  config: {{project: p, dataset: d, ttl_days: 1, connections: {conns}}}\n"
            );
            let cfg = config(&sinks, &extra);
            let f = Footprint::of(&cfg, true).bound();
            proptest::prop_assert!(f >= (budget_mib + log_mib) * MIB + PROCESS_BYTES);
            let more_log = format!(
                "batching: {{max_inflight_bytes: {budget_mib}MiB, max_bytes: 1MiB, max_log_bytes: {}MiB}}\n",
                log_mib + 1
            );
            proptest::prop_assert!(Footprint::of(&config(&sinks, &more_log), true).bound() > f);
            let more_budget = format!(
                "batching: {{max_inflight_bytes: {}MiB, max_bytes: 1MiB, max_log_bytes: {log_mib}MiB}}\n",
                budget_mib + 1
            );
            proptest::prop_assert!(Footprint::of(&config(&sinks, &more_budget), true).bound() > f);
        }
    }
}
