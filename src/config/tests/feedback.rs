//! Feedback a person can act on: each problem says where its value came from and shows it
//! (secrets hidden), and unknown keys join the problems with the key they were meant to be.

use super::MERLIN;
use crate::config::{load, Needs, ENV_PREFIX};

/// What [`load`] (every command's loader) says about a value: where it came from (the file's
/// line, the variable, `--set`) and the value itself, unless it is a secret.
fn loaded(env: &[(&str, &str)], sets: &[&str], file: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.yaml");
    std::fs::write(&path, file).unwrap();
    let env = env
        .iter()
        .map(|(k, v)| (format!("{ENV_PREFIX}{k}"), v.to_string()))
        .collect();
    let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
    let text = match load(&path, env, &sets, Needs::RUN) {
        Err(p) => p.to_string(),
        Ok(l) => l.warnings.join("\n"),
    };
    text.replace(&path.display().to_string(), "c.yaml")
}

#[test]
fn a_problem_says_where_its_value_came_from_and_shows_it() {
    let err = loaded(&[], &["batching.linger=forever"], MERLIN);
    assert!(
        err.contains("batching.linger: invalid duration \"forever\"")
            && err.contains("(from --set)\n"),
        "{err}"
    );
    let err = loaded(&[("BATCHING__MAX_ROWS", "lots")], &[], MERLIN);
    assert!(
        err.contains(
            "batching.max_rows: expected a non-negative integer, found \"lots\" (from OBS_PUBLISHER__BATCHING__MAX_ROWS)"
        ),
        "{err}"
    );
    // A later layer names the layer that won.
    let err = loaded(
        &[("BATCHING__MAX_ROWS", "lots")],
        &["batching.max_rows=many"],
        MERLIN,
    );
    assert!(err.contains("found \"many\" (from --set)"), "{err}");
    let file = format!("{MERLIN}batching:\n  linger: someday\n");
    let line = file.lines().count();
    let err = loaded(&[], &[], &file);
    assert!(
        err.contains("invalid duration \"someday\"")
            && err.contains(&format!("(at c.yaml:{line})")),
        "{err}"
    );
}

/// Only secrets are hidden, and they are hidden wherever they show, whoever set them.
#[test]
fn secrets_stay_hidden_in_every_problem() {
    const PLANTED: &str = "planted-S3cret";
    // The same text as a secret and as a bad value elsewhere: hidden in both.
    let err = loaded(
        &[(
            "OBSERVATION_SOURCE__CONFIG__ADDITIONAL_CONSUMER_CONFIG__SASL.PASSWORD",
            PLANTED,
        )],
        &[&format!("batching.linger={PLANTED}")],
        MERLIN,
    );
    assert!(err.contains("invalid duration \"<redacted>\""), "{err}");
    assert!(!err.contains("planted"), "{err}");
    let sinks = MERLIN.replace(
        "observation_source:",
        "- type: ARIZE\n  config: {api_key: planted-S3cret, space_key: s}\nobservation_source:",
    );
    let err = loaded(&[], &["batching.linger=planted-S3cret"], &sinks);
    assert!(err.contains("invalid duration \"<redacted>\""), "{err}");
    // A key nobody reads (a typo of a secret's key) is named, never its value.
    let warned = loaded(
        &[],
        &[&format!("observation_sinks.0.config.apikey={PLANTED}")],
        MERLIN,
    );
    assert!(
        warned.contains("observation_sinks[0].config.apikey: unknown key ignored (from --set)"),
        "{warned}"
    );
    assert!(!warned.contains("planted"), "{warned}");
    // Paths that cannot be set; an argument without `=` is not shown at all.
    for (set, why) in [
        ("observation_sinks.x.type=VALUE", "--set"),
        ("batching..linger=VALUE", "empty path segment"),
        ("VALUE", "expected key.path=value"),
    ] {
        let err = loaded(&[], &[&set.replace("VALUE", PLANTED)], MERLIN);
        assert!(
            err.contains(why) && !err.contains("planted"),
            "{set}: {err}"
        );
    }
}

#[test]
fn unknown_keys_join_the_problems_with_the_key_they_were_meant_to_be() {
    let typo = MERLIN.replace("inference_schema:", "inference_shema:");
    let line = typo
        .lines()
        .position(|l| l.starts_with("inference_shema:"))
        .unwrap()
        + 1;
    let err = loaded(&[], &["batching.lingr=3s"], &typo);
    assert!(
        err.contains("  - inference_schema: required (inference_shema is set: a misspelling?)\n"),
        "{err}"
    );
    assert!(
        err.contains(&format!(
            "  - inference_shema: unknown key ignored; did you mean inference_schema? (at c.yaml:{line})\n"
        )),
        "{err}"
    );
    assert!(
        err.contains(
            "  - batching.lingr: unknown key; did you mean batching.linger? (from --set)\n"
        ),
        "{err}"
    );
    // Alone, an unknown key in Merlin's sections is a warning, with its suggestion.
    let warned = loaded(&[], &["observation_source.config.topc=x"], MERLIN);
    assert_eq!(
        warned,
        "observation_source.config.topc: unknown key ignored; did you mean observation_source.config.topic? (from --set)"
    );
}
