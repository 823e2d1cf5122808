//! `consumer.group`, static membership and KIP-848's settings, read from Merlin's config.

use super::{parse, MERLIN};
use crate::config::{GroupMode, Needs, StartFrom};

fn with(extra: &str) -> String {
    format!("{MERLIN}\n{extra}")
}

#[test]
fn merlins_config_joins_a_group_of_its_version_starting_where_the_shared_one_left() {
    let (c, _) = parse(MERLIN, Needs::RUN).unwrap();
    let shared = c.observation_source.as_ref().unwrap().group_id.clone();
    assert_eq!(c.consumer.group, GroupMode::PerVersion);
    let own = c.consumer_group().unwrap();
    assert_eq!(own, format!("{shared}.{}.{}.3", c.project, c.model_id));
    assert_eq!(c.start_from(), Some(StartFrom::Group(shared.clone())));
    // An explicit start wins; a shared or own group is joined as it is, from auto.offset.reset.
    let (c, _) = parse(&with("consumer: {start_from: latest}"), Needs::RUN).unwrap();
    assert_eq!(c.start_from(), Some(StartFrom::Latest));
    for (mode, want) in [("shared", GroupMode::Shared), ("own", GroupMode::Own)] {
        let (c, _) = parse(&with(&format!("consumer: {{group: {mode}}}")), Needs::RUN).unwrap();
        assert_eq!(c.consumer.group, want);
        assert_eq!(c.consumer_group().unwrap(), shared);
        assert_eq!(c.start_from(), None);
    }
}

#[test]
fn where_a_group_starts_is_said_in_one_line() {
    let (c, _) = parse(MERLIN, Needs::RUN).unwrap();
    let text = c.start_text();
    let shared = &c.observation_source.as_ref().unwrap().group_id;
    assert!(text.contains(&format!("{shared:?}")), "{text}");
    assert!(text.contains(c.auto_offset_reset()), "{text}");
    let (c, _) = parse(&with("consumer: {group: own}"), Needs::RUN).unwrap();
    assert!(
        !c.start_text().contains(shared.as_str()),
        "{}",
        c.start_text()
    );
}

#[test]
fn a_bad_group_mode_and_classic_keys_under_kip848_are_problems() {
    let yaml = MERLIN.replace(
        "fetch.min.bytes: \"1024000\"",
        "fetch.min.bytes: \"1024000\"\n      group.protocol: consumer\n      session.timeout.ms: \"6000\"\n      partition.assignment.strategy: range",
    );
    let yaml = format!("{yaml}\nconsumer: {{group: mine, static_membership: maybe}}\n");
    let p = parse(&yaml, Needs::RUN).unwrap_err();
    let text = p.to_string();
    for needle in [
        "consumer.group: \"mine\": expected per_version, own or shared",
        "consumer.static_membership",
        "additional_consumer_config.session.timeout.ms: not accepted with group.protocol: consumer",
        "additional_consumer_config.partition.assignment.strategy: not accepted",
    ] {
        assert!(text.contains(needle), "missing {needle:?} in:\n{text}");
    }
}
