//! `logging.level`: a level or directives that each end in one; anything else is a problem.

use super::{parse, MERLIN};
use crate::config::Needs;

fn level(l: &str) -> Result<String, Vec<String>> {
    let y = format!("{MERLIN}\nlogging: {{level: {l:?}}}");
    parse(&y, Needs::RUN)
        .map(|(c, _)| c.logging.level)
        .map_err(|p| p.0)
}

#[test]
fn levels_and_directive_lists_are_accepted() {
    for ok in [
        "info",
        "DEBUG",
        "off",
        "trace",
        "info,observation_publisher::pipeline=debug,librdkafka=debug",
        "warn,observation_publisher=trace",
    ] {
        assert_eq!(level(ok).as_deref(), Ok(ok), "{ok}");
    }
}

#[test]
fn a_word_that_is_not_a_level_is_refused_naming_the_levels() {
    let p = level("verbose").unwrap_err();
    assert_eq!(
        p,
        vec![
            "logging.level: \"verbose\" is not a level; expected error, warn, info, debug, trace \
             or off, or directives such as info,observation_publisher::pipeline=debug"
                .to_string()
        ]
    );
    // A bare target shows only that target's events: every other log would be silent.
    assert!(level("info,observation_publisher").is_err());
    let p = level("observation_publisher=loud").unwrap_err();
    assert!(
        p[0].starts_with(
            "logging.level: directive \"observation_publisher=loud\" does not end in a level"
        ),
        "{p:?}"
    );
    assert!(level("").unwrap_err()[0].starts_with("logging.level: empty"));
    assert!(level(",").is_err());
    // Syntax tracing refuses (`run` would fall back to `info`) even with valid levels.
    assert!(level("a[{=info").is_err());
    assert!(level("warn, observation_publisher=trace,").is_err());
}
