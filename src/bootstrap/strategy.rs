//! How a revision's pods replace the running ones (pure).
//!
//! The Deployment rolls one surge pod at a time (`maxSurge: 1`, `maxUnavailable: 0`), and a pod
//! is ready only once its consumer has joined its group. Kafka refuses a member whose
//! assignment protocol no member of the group shares (`INCONSISTENT_GROUP_PROTOCOL`), and
//! librdkafka cannot offer an eager and a cooperative strategy at once (it refuses the mix in
//! `partition.assignment.strategy`). So when a revision's pods would speak the other protocol
//! in the group the running pods are in, the surge pod never becomes ready, the old pods are
//! never removed, and the rollout stalls until its progress deadline. That one revision is
//! rolled out with `Recreate`: every old pod stops first (committing, as its partitions are
//! revoked, what its sinks acknowledged), then the new ones start and find the group empty. A
//! short pause in publishing; nothing skipped. The next revision speaks what the pods it
//! replaces speak, and rolls again.
//!
//! The case that meets every version at once is the first rollout onto this build of a version
//! deployed by an earlier one. Its config has no `consumer.group` key (every config this build
//! writes has one), and that build joined `group_id` as it is with librdkafka's default eager
//! assignment unless `additional_consumer_config` chose a strategy.
//!
//! KIP-848's protocol is left to the broker: whether a consumer-protocol member may join a
//! classic group is its migration policy's call (`group.consumer.migration.policy`).

use super::manifest::CONFIG_ITEM;
use crate::config::{scalar_text, Assignment, Config, Needs};
use k8s_openapi::api::apps::v1::{Deployment, DeploymentStrategy};
use k8s_openapi::api::core::v1::Secret;
use serde_yaml_ng::Value;

/// Where a config's pods are in Kafka: their group and how they negotiate its assignment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Membership {
    /// The consumer group the pods join.
    pub group: String,
    /// Their assignment protocol.
    pub assignment: Assignment,
    /// The config was written by a build from before `consumer.group` existed.
    pub earlier_build: bool,
}

/// The membership of pods running `cfg` under this build (`None` without a source).
pub fn membership(cfg: &Config) -> Option<Membership> {
    Some(Membership {
        group: cfg.consumer_group()?,
        assignment: cfg.assignment()?,
        earlier_build: false,
    })
}

/// The membership of the pods running a config Secret's `config.yaml` (the Secret as found
/// before the update); `None` when it cannot be read.
pub fn running_in(secret: &Secret) -> Option<Membership> {
    running(&secret.data.as_ref()?.get(CONFIG_ITEM)?.0)
}

/// The membership of the pods running `config_yaml`, as the build that wrote it runs it.
pub fn running(config_yaml: &[u8]) -> Option<Membership> {
    let v: Value = serde_yaml_ng::from_slice(config_yaml).ok()?;
    if v.get("consumer").and_then(|c| c.get("group")).is_some() {
        let source_only = Needs {
            source: true,
            sinks: false,
            bigquery: false,
        };
        return membership(&Config::from_value(&v, source_only).ok()?.0);
    }
    // Read by hand, not validated: a config an earlier build accepted may not pass this one's
    // checks, and only the group and the consumer's settings matter here.
    let sc = v.get("observation_source")?.get("config")?;
    let group = scalar_text(sc.get("group_id")?)?;
    let additional: Vec<(String, String)> = match sc.get("additional_consumer_config") {
        Some(Value::Mapping(m)) => (m.iter())
            .filter_map(|(k, v)| Some((scalar_text(k)?, scalar_text(v)?)))
            .collect(),
        _ => Vec::new(),
    };
    Some(Membership {
        group,
        assignment: Assignment::given(&additional, Assignment::Eager),
        earlier_build: true,
    })
}

/// How a revision replaces the running pods.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Strategy {
    /// One surge pod at a time (the Deployment as [`super::manifest::deployment`] builds it).
    RollingUpdate,
    /// Every old pod stops before the new ones start; why.
    Recreate(String),
}

/// The rule: `running` is where the pods the update replaces are (`None`: no Deployment yet,
/// or a config that cannot be read), `next` where this revision's pods will be.
pub fn strategy(running: Option<&Membership>, next: Option<&Membership>) -> Strategy {
    let (Some(old), Some(new)) = (running, next) else {
        return Strategy::RollingUpdate;
    };
    let clash = matches!(
        (old.assignment, new.assignment),
        (Assignment::Eager, Assignment::Cooperative) | (Assignment::Cooperative, Assignment::Eager)
    );
    if old.group != new.group || !clash {
        return Strategy::RollingUpdate;
    }
    let who = if old.earlier_build {
        "(deployed by an earlier build of the publisher) join"
    } else {
        "join"
    };
    Strategy::Recreate(format!(
        "the running pods {who} consumer group {:?} with {} and this revision's pods would join it with {}; Kafka refuses a member whose protocol no member shares, so a surge pod would never become ready. The old pods stop (committing what was written) before the new ones start; later revisions roll one pod at a time again",
        old.group,
        old.assignment.describe(),
        new.assignment.describe()
    ))
}

impl Strategy {
    /// Sets `d`'s strategy to this one (a Deployment is built with [`Strategy::RollingUpdate`]).
    pub fn set(&self, d: &mut Deployment) {
        if let (Strategy::Recreate(_), Some(spec)) = (self, d.spec.as_mut()) {
            // No `rollingUpdate` alongside: the API server refuses it with `Recreate`.
            spec.strategy = Some(DeploymentStrategy {
                type_: Some("Recreate".into()),
                rolling_update: None,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bootstrap::checksum::ChecksumKey;
    use crate::bootstrap::manifest::deployment;
    use crate::bootstrap::spec::tests::MINIMAL;
    use crate::bootstrap::Spec;

    /// The minimal spec, with `consumer` (a flow mapping) in its config and `additional` after
    /// the source's bootstrap servers.
    fn spec(consumer: &str, additional: &str) -> Spec {
        let mut text = MINIMAL.replace(
            r#"config: {bootstrap_servers: "kafka:9092"}"#,
            &format!(r#"config: {{bootstrap_servers: "kafka:9092"{additional}}}"#),
        );
        if !consumer.is_empty() {
            text.push_str(&format!("  consumer: {consumer}\n"));
        }
        Spec::parse(&text).unwrap_or_else(|p| panic!("{p}")).0
    }

    /// `s`'s `config.yaml` as a build from before `consumer.group` wrote it.
    fn earlier(s: &Spec) -> Vec<u8> {
        let mut v = s.run_config.clone();
        if let Some(Value::Mapping(c)) = v.get_mut("consumer") {
            c.remove("group");
        }
        serde_yaml_ng::to_string(&v).unwrap().into_bytes()
    }

    fn decide(running_yaml: &[u8], next: &Spec) -> Strategy {
        strategy(
            running(running_yaml).as_ref(),
            membership(&next.config).as_ref(),
        )
    }

    #[test]
    fn the_first_rollout_from_an_earlier_build_recreates_and_the_next_rolls() {
        let s = spec("", "");
        let old = running(&earlier(&s)).unwrap();
        assert_eq!(old.assignment, Assignment::Eager);
        assert_eq!(old.group, s.group_id());
        assert!(old.earlier_build);
        let Strategy::Recreate(why) = decide(&earlier(&s), &s) else {
            panic!("eager pods in the group: not rolled one by one");
        };
        assert!(why.contains(s.group_id()), "{why}");
        assert!(why.contains("earlier build"), "{why}");
        assert!(why.contains("cooperative-sticky"), "{why}");
        // Once this build wrote the config, the pods speak what the next revision speaks.
        let written = s.config_yaml();
        assert_eq!(running(written.as_bytes()), membership(&s.config));
        assert_eq!(decide(written.as_bytes(), &s), Strategy::RollingUpdate);
    }

    #[test]
    fn only_a_change_of_protocol_in_the_same_group_recreates() {
        let s = spec("", "");
        // An earlier build told to be cooperative already.
        let sticky = spec(
            "",
            ", additional_consumer_config: {partition.assignment.strategy: cooperative-sticky}",
        );
        assert_eq!(decide(&earlier(&sticky), &s), Strategy::RollingUpdate);
        // Still eager in a shared group: what the running pods speak.
        let shared = spec("{group: shared}", "");
        assert_eq!(decide(&earlier(&s), &shared), Strategy::RollingUpdate);
        // A group per version is a new, empty group: nothing to clash with.
        let per_version = spec("{group: per_version}", "");
        assert_ne!(per_version.config.consumer_group().unwrap(), s.group_id());
        assert_eq!(decide(&earlier(&s), &per_version), Strategy::RollingUpdate);
        // The broker decides on KIP-848's protocol.
        let kip848 = spec(
            "",
            ", additional_consumer_config: {group.protocol: consumer}",
        );
        assert_eq!(decide(&earlier(&s), &kip848), Strategy::RollingUpdate);
        // Back from cooperative to eager in the same group clashes the same way.
        let Strategy::Recreate(why) = decide(s.config_yaml().as_bytes(), &shared) else {
            panic!("cooperative pods, eager surge pod");
        };
        assert!(!why.contains("earlier build"), "{why}");
        // Nothing running, or a config that cannot be read: as usual.
        assert_eq!(
            strategy(None, membership(&s.config).as_ref()),
            Strategy::RollingUpdate
        );
        assert_eq!(running(b"{not yaml"), None);
        assert_eq!(decide(b"{not yaml", &s), Strategy::RollingUpdate);
    }

    #[test]
    fn recreate_replaces_the_rolling_update() {
        let s = spec("", "");
        let mut d = deployment(&s, &ChecksumKey::DryRun);
        Strategy::RollingUpdate.set(&mut d);
        let rolling = d.spec.as_ref().unwrap().strategy.clone().unwrap();
        assert_eq!(rolling.type_.as_deref(), Some("RollingUpdate"));
        Strategy::Recreate(String::new()).set(&mut d);
        let st = d.spec.as_ref().unwrap().strategy.clone().unwrap();
        assert_eq!(st.type_.as_deref(), Some("Recreate"));
        assert!(st.rolling_update.is_none());
    }
}
