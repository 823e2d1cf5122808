//! Which consumer group `run` joins, and how the assignment is negotiated in it.
//!
//! Merlin's deployer gives every model's publisher one shared `group_id`. In one group every
//! join or leave of any member is a rebalance of all of them, and under the eager protocol
//! (librdkafka's default `range,roundrobin`, which Merlin's Python publishers use) every member
//! revokes everything and waits for the slowest to rejoin: a rollout of one model pauses every
//! other model's publisher. So by default (`consumer.group: per_version`) the publisher joins a
//! group of its own model version, named from the configured group and the version
//! ([`per_version_name`]), and a partition that group has never committed starts where the
//! configured group left it (`start_from: group:<configured>`), so that moving from Merlin's
//! publisher neither skips nor republishes. `consumer.group: shared` keeps the configured group
//! as it is, with the eager protocol its other members speak (librdkafka cannot mix the two in
//! one group); `own` says the configured group already belongs to this version alone
//! (`bootstrap` writes it).

use super::StartFrom;
use serde::Serialize;
use sha2::{Digest, Sha256};

/// `consumer.group`: how the configured `group_id` is used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum GroupMode {
    /// A group of this model version's own, named from the configured group (default).
    #[default]
    PerVersion,
    /// The configured group, which belongs to this model version alone (bootstrap's).
    Own,
    /// The configured group, shared with other models' publishers (Merlin's, by choice).
    Shared,
}

impl GroupMode {
    pub(crate) fn parse(s: &str) -> Option<Self> {
        match s {
            "per_version" => Some(Self::PerVersion),
            "own" => Some(Self::Own),
            "shared" => Some(Self::Shared),
            _ => None,
        }
    }

    /// The accepted values, for error messages.
    pub(crate) const VALUES: &'static str = "per_version, own or shared";

    /// The assignment unless `additional_consumer_config` says otherwise: a shared group may
    /// hold members speaking the eager protocol, so it keeps librdkafka's default
    /// (`range,roundrobin`); every other group is `cooperative-sticky`.
    pub fn assignment(self) -> Assignment {
        match self {
            Self::Shared => Assignment::Eager,
            Self::PerVersion | Self::Own => Assignment::Cooperative,
        }
    }
}

/// Kafka's longest name (topics; group ids are kept within it too, so that ACLs, quotas and
/// every tool that shows them treat them like any other name).
const MAX_NAME: usize = 249;

/// The group of one model version: `<group>.<project>.<model>.<version>`. The configured group
/// is kept verbatim as the prefix (so a prefixed ACL on it covers every version's group); the
/// other parts keep `[A-Za-z0-9_-]` and turn anything else into `_`. When a part had to be
/// changed, or the name would pass [`MAX_NAME`], the parts are cut and 8 hex digits of a hash
/// of the original parts are added, so two versions never share a group.
pub fn per_version_name(group: &str, project: &str, model: &str, version: &str) -> String {
    let clean = |s: &str| -> String {
        s.chars()
            .map(|c| match c {
                'A'..='Z' | 'a'..='z' | '0'..='9' | '_' | '-' => c,
                _ => '_',
            })
            .collect()
    };
    let parts = [clean(project), clean(model), clean(version)];
    let changed = parts
        .iter()
        .zip([project, model, version])
        .any(|(c, o)| c != o);
    let name = format!("{group}.{}.{}.{}", parts[0], parts[1], parts[2]);
    if !changed && name.chars().count() <= MAX_NAME {
        return name;
    }
    let mut h = Sha256::new();
    for p in [project, model, version] {
        h.update((p.len() as u64).to_be_bytes());
        h.update(p.as_bytes());
    }
    let hash: String = h.finalize()[..4]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let tail = format!(".{hash}");
    let room = MAX_NAME.saturating_sub(tail.chars().count());
    let cut: String = name.chars().take(room).collect();
    format!("{cut}{tail}")
}

/// librdkafka keys that `group.protocol: consumer` (KIP-848) refuses: the broker runs the
/// session, the heartbeat and the assignment.
pub const CLASSIC_ONLY_KEYS: &[&str] = &[
    "session.timeout.ms",
    "heartbeat.interval.ms",
    "partition.assignment.strategy",
    "group.protocol.type",
];

/// Whether `additional_consumer_config` asks for KIP-848's consumer protocol.
pub fn kip848(additional: &[(String, String)]) -> bool {
    (additional.iter().rev())
        .find(|(k, _)| k == "group.protocol")
        .is_some_and(|(_, v)| v.eq_ignore_ascii_case("consumer"))
}

/// How a member negotiates the assignment of its group's partitions. Kafka refuses a classic
/// member whose protocol no member of the group shares (`INCONSISTENT_GROUP_PROTOCOL`), and
/// librdkafka cannot offer an eager and a cooperative strategy at once: a group moves from one
/// to the other only by emptying.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Assignment {
    /// Classic protocol, eager strategies (`range`, `roundrobin`: librdkafka's default).
    Eager,
    /// Classic protocol, `cooperative-sticky`.
    Cooperative,
    /// KIP-848's `group.protocol: consumer`: the broker assigns.
    Broker,
}

impl Assignment {
    /// What `additional_consumer_config` makes of `default`: KIP-848's protocol, or an
    /// explicit `partition.assignment.strategy` (the last one given, as librdkafka reads them).
    pub fn given(additional: &[(String, String)], default: Assignment) -> Assignment {
        if kip848(additional) {
            return Assignment::Broker;
        }
        let strategy = (additional.iter().rev())
            .find(|(k, _)| k == "partition.assignment.strategy")
            .map(|(_, v)| v);
        match strategy {
            Some(v) if v.split(',').any(|s| s.trim() == "cooperative-sticky") => {
                Assignment::Cooperative
            }
            Some(_) => Assignment::Eager,
            None => default,
        }
    }

    /// How librdkafka's settings name it, for messages.
    pub fn describe(self) -> &'static str {
        match self {
            Assignment::Eager => "the eager protocol (range,roundrobin)",
            Assignment::Cooperative => "cooperative-sticky",
            Assignment::Broker => "KIP-848's consumer protocol",
        }
    }
}

/// librdkafka refuses the classic protocol's keys under `group.protocol: consumer`: said here,
/// with the others, rather than when the consumer is made.
pub(crate) fn check(source: &super::KafkaSource, problems: &mut super::Problems) {
    let key = |k: &str| format!("observation_source.config.additional_consumer_config.{k}");
    let additional = &source.additional_consumer_config;
    if kip848(additional) {
        for (k, _) in additional
            .iter()
            .filter(|(k, _)| CLASSIC_ONLY_KEYS.contains(&k.as_str()))
        {
            problems.push(
                &key(k),
                "not accepted with group.protocol: consumer (KIP-848: the broker runs the session, heartbeats and assignment); remove it, or use group.protocol: classic",
            );
        }
    }
}

impl super::Config {
    /// The consumer group `run` joins (`None` without a source).
    pub fn consumer_group(&self) -> Option<String> {
        let src = self.observation_source.as_ref()?;
        Some(match self.consumer.group {
            GroupMode::PerVersion => per_version_name(
                &src.group_id,
                &self.project,
                &self.model_id,
                &self.model_version,
            ),
            GroupMode::Own | GroupMode::Shared => src.group_id.clone(),
        })
    }

    /// How `run`'s consumer negotiates its assignment (`None` without a source): what
    /// `source::consumer_config` hands librdkafka.
    pub fn assignment(&self) -> Option<Assignment> {
        let src = self.observation_source.as_ref()?;
        let default = self.consumer.group.assignment();
        Some(Assignment::given(&src.additional_consumer_config, default))
    }

    /// Where a partition the group never committed starts: `consumer.start_from` when set;
    /// otherwise, in a per-version group, where the configured group left it (a partition that
    /// group never committed either starts per `auto.offset.reset`).
    pub fn start_from(&self) -> Option<StartFrom> {
        if let Some(s) = &self.consumer.start_from {
            return Some(s.clone());
        }
        match (self.consumer.group, &self.observation_source) {
            (GroupMode::PerVersion, Some(src)) => Some(StartFrom::Group(src.group_id.clone())),
            _ => None,
        }
    }

    /// One line saying where partitions the group never committed start, for `check-config`.
    pub fn start_text(&self) -> String {
        let reset = self.auto_offset_reset();
        match (&self.consumer.start_from, self.start_from()) {
            (None, Some(StartFrom::Group(g))) => format!(
                "a partition this group never committed starts where group {g:?} committed it (adopting the configured group's position: nothing skipped or published again); one that group never committed either starts at the {reset} offset (auto.offset.reset)"
            ),
            (Some(StartFrom::Group(g)), _) => format!(
                "a partition this group never committed starts where group {g:?} committed it (consumer.start_from); one that group never committed either starts at the earliest offset"
            ),
            (Some(StartFrom::Timestamp(ms)), _) => format!(
                "a partition this group never committed starts at the first message at or after {ms} ms since the epoch (consumer.start_from)"
            ),
            (Some(StartFrom::Latest), _) => "a partition this group never committed starts at its end (consumer.start_from: latest)".into(),
            (Some(StartFrom::Earliest), _) => "a partition this group never committed starts at its earliest offset (consumer.start_from: earliest)".into(),
            (None, _) => format!(
                "a partition this group never committed starts at the {reset} offset (auto.offset.reset)"
            ),
        }
    }

    /// librdkafka's `auto.offset.reset`: `consumer.start_from`'s when set (`latest`, or
    /// `earliest` for every start it positions itself), else an explicit one in
    /// `additional_consumer_config`, else `earliest` (nothing a model logged is skipped).
    pub fn auto_offset_reset(&self) -> &str {
        match &self.consumer.start_from {
            Some(StartFrom::Latest) => "latest",
            Some(_) => "earliest",
            None => (self.observation_source.iter())
                .flat_map(|s| s.additional_consumer_config.iter())
                .find(|(k, _)| k == "auto.offset.reset")
                .map_or("earliest", |(_, v)| v.as_str()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn plain_names_are_joined_with_dots() {
        assert_eq!(
            per_version_name("merlin-publisher", "sample", "iris", "3"),
            "merlin-publisher.sample.iris.3"
        );
    }

    #[test]
    fn changed_or_long_parts_get_a_hash() {
        let a = per_version_name("g", "a.b", "m", "1");
        let b = per_version_name("g", "a_b", "m", "1");
        assert_ne!(a, b, "a dot and an underscore must not meet in one group");
        assert!(a.starts_with("g.a_b.m.1."), "{a}");
        let long = per_version_name("g", &"p".repeat(300), "m", "1");
        assert_eq!(long.chars().count(), MAX_NAME);
    }

    #[test]
    fn an_explicit_strategy_or_kip848_overrides_the_default_assignment() {
        let kv = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
            (pairs.iter())
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        use Assignment::*;
        assert_eq!(Assignment::given(&kv(&[("x.y", "1")]), Eager), Eager);
        assert_eq!(
            Assignment::given(&kv(&[("x.y", "1")]), Cooperative),
            Cooperative
        );
        let range = kv(&[("partition.assignment.strategy", "range,roundrobin")]);
        assert_eq!(Assignment::given(&range, Cooperative), Eager);
        let sticky = kv(&[("partition.assignment.strategy", " cooperative-sticky")]);
        assert_eq!(Assignment::given(&sticky, Eager), Cooperative);
        let both = kv(&[
            ("partition.assignment.strategy", "cooperative-sticky"),
            ("partition.assignment.strategy", "range"),
        ]);
        assert_eq!(
            Assignment::given(&both, Cooperative),
            Eager,
            "the last wins"
        );
        let kip = kv(&[("group.protocol", "CONSUMER")]);
        assert_eq!(Assignment::given(&kip, Eager), Broker);
    }

    proptest! {
        /// Within Kafka's length, made of the configured group plus names Kafka accepts, and
        /// never the same for two different versions.
        #[test]
        fn names_are_bounded_prefixed_and_distinct(
            group in "[a-z0-9._-]{1,40}",
            p1 in "[a-z0-9.-]{1,120}", m1 in "[a-z0-9._ -]{1,120}", v1 in "[0-9]{1,4}",
            p2 in "[a-z0-9.-]{1,120}", m2 in "[a-z0-9._ -]{1,120}", v2 in "[0-9]{1,4}",
        ) {
            let a = per_version_name(&group, &p1, &m1, &v1);
            prop_assert!(a.chars().count() <= MAX_NAME);
            let prefix = format!("{group}.");
            prop_assert!(a.starts_with(&prefix));
            prop_assert!(a[group.len()..].chars().all(|c| c.is_ascii_alphanumeric() || "._-".contains(c)));
            let b = per_version_name(&group, &p2, &m2, &v2);
            if (p1, m1, v1) != (p2, m2, v2) {
                prop_assert_ne!(a, b);
            }
        }
    }
}
