//! Merlin's container command, answered by this binary: `python -m publisher
//! +environment=NAME [overrides]`.
//!
//! Merlin's control plane starts its publisher with `command: ["python", "-m", "publisher",
//! "+environment=config"]` and mounts the config Secret at
//! `/mlobs/observation-publisher/conf/environment` (Hydra then reads
//! `conf/environment/<NAME>.yaml`). Kubernetes' `command` replaces the image's entrypoint, so the
//! image ships `python` as a relative symlink to this binary, and `main` dispatches on the name
//! it was started under (argv\[0\]) before any argument parsing. This module is the pure part:
//! which names mean "Merlin's command", and what the arguments ask for.
//!
//! Accepted, as Hydra would: `+environment=NAME` (once, required) selects the file; overrides
//! `environment.a.b=v`, `+environment.a.b=v` or `++environment.a.b=v` become `--set a.b=v`
//! (the `environment.` prefix is optional). Anything else (`python script.py`, `python -c …`,
//! Hydra's own `hydra.*` keys, deletions `~key`, a key the publisher does not read) is a usage
//! error, exit 2, naming what was expected.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

/// Where Merlin mounts the config Secret (Hydra's `conf/environment` of Merlin's image).
pub const MERLIN_CONF_DIR: &str = "/mlobs/observation-publisher/conf/environment";

/// Environment variable that moves [`MERLIN_CONF_DIR`] (tests outside a container).
pub const CONF_DIR_ENV: &str = "OBS_PUBLISHER_MERLIN_CONF_DIR";

/// The command this entry point answers, for error messages.
pub const EXPECTED: &str =
    "python -m publisher +environment=NAME [environment.KEY=VALUE ...] (Merlin's publisher command)";

/// Top-level keys an override may name: Merlin's and the publisher's own sections.
pub const KNOWN_TOP_LEVEL_KEYS: &[&str] = &[
    "project",
    "model_id",
    "model_version",
    "inference_schema",
    "observation_source",
    "observation_sinks",
    "prometheus_port",
    "batching",
    "consumer",
    "dead_letter",
    "local_sink",
    "server",
    "logging",
    "delivery",
];

/// Whether the binary was started under a Python interpreter's name (`python`, `python3`,
/// `python3.10`): then it answers Merlin's command instead of its own CLI.
pub fn is_python_name(argv0: &OsStr) -> bool {
    let Some(name) = Path::new(argv0).file_name().and_then(OsStr::to_str) else {
        return false;
    };
    let Some(rest) = name.strip_prefix("python") else {
        return false;
    };
    rest.is_empty()
        || rest == "3"
        || rest
            .strip_prefix("3.")
            .is_some_and(|minor| !minor.is_empty() && minor.bytes().all(|b| b.is_ascii_digit()))
}

/// What Merlin's command asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invocation {
    /// The config group selected by `+environment=NAME`.
    pub environment: String,
    /// Overrides as `--set` arguments (`key.path=value`, without `environment.`).
    pub sets: Vec<String>,
}

impl Invocation {
    /// The config file: `<dir>/<environment>.yaml`.
    pub fn config_path(&self, dir: &Path) -> PathBuf {
        dir.join(format!("{}.yaml", self.environment))
    }
}

/// Parses the arguments after argv\[0\]. Every problem is reported at once.
pub fn parse<S: AsRef<OsStr>>(args: &[S]) -> Result<Invocation, Vec<String>> {
    let args: Vec<&OsStr> = args.iter().map(AsRef::as_ref).collect();
    let mut problems = Vec::new();
    match args.as_slice() {
        [m, module, ..] if *m == "-m" && *module == "publisher" => {}
        [m, module, ..] if *m == "-m" => problems.push(format!(
            "module {:?}: this image runs only the publisher module",
            module.to_string_lossy()
        )),
        [] => problems.push("no arguments".to_string()),
        [first, ..] => problems.push(format!(
            "{:?}: this image is not a Python interpreter",
            first.to_string_lossy()
        )),
    }
    if !problems.is_empty() {
        return Err(problems);
    }
    let mut environment: Option<String> = None;
    let mut sets = Vec::new();
    for arg in &args[2..] {
        let Some(arg) = arg.to_str() else {
            problems.push(format!("{arg:?}: not UTF-8"));
            continue;
        };
        match override_of(arg) {
            Ok(Override::Environment(name)) => {
                if environment.replace(name).is_some() {
                    problems.push(format!("{}: +environment is given twice", shown(arg)));
                }
            }
            Ok(Override::Set(s)) => sets.push(s),
            Err(why) => problems.push(format!("{}: {why}", shown(arg))),
        }
    }
    match environment {
        None if problems.is_empty() => Err(vec![
            "+environment=NAME is missing (it selects conf/environment/NAME.yaml)".to_string(),
        ]),
        Some(environment) if problems.is_empty() => Ok(Invocation { environment, sets }),
        _ => Err(problems),
    }
}

/// An argument as an error message may show it: the key, never the value (an override may carry
/// a secret, and a typo in its key must not print it).
pub fn shown(arg: &str) -> String {
    match arg.split_once('=') {
        Some((key, _)) => format!("{key:?}=…"),
        None => format!("{arg:?}"),
    }
}

/// One Hydra command-line override, as far as the publisher understands it.
#[derive(Debug, PartialEq, Eq)]
enum Override {
    /// `+environment=NAME`.
    Environment(String),
    /// A key override, as a `--set` argument.
    Set(String),
}

fn override_of(arg: &str) -> Result<Override, String> {
    if arg.starts_with('~') {
        return Err("deleting keys is not supported".into());
    }
    if arg.starts_with('-') {
        return Err("flags are not supported; give Hydra overrides key=value".into());
    }
    let (plus, body) = if let Some(b) = arg.strip_prefix("++") {
        (2, b)
    } else if let Some(b) = arg.strip_prefix('+') {
        (1, b)
    } else {
        (0, arg)
    };
    let Some((key, value)) = body.split_once('=') else {
        return Err("expected key=value".into());
    };
    if key == "environment" {
        if plus == 0 {
            return Err("select the config with +environment=NAME".into());
        }
        let valid = !value.is_empty()
            && value
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
            && !value.starts_with('.');
        if !valid {
            return Err("the environment name must be a file name (letters, digits, _ - .)".into());
        }
        return Ok(Override::Environment(value.to_string()));
    }
    let path = key.strip_prefix("environment.").unwrap_or(key);
    let top = path.split('.').next().unwrap_or_default();
    if !KNOWN_TOP_LEVEL_KEYS.contains(&top) || path.split('.').any(str::is_empty) {
        return Err(format!(
            "{key:?} is not a key this publisher reads (known: environment.<{}>.…)",
            KNOWN_TOP_LEVEL_KEYS.join("|")
        ));
    }
    Ok(Override::Set(format!("{path}={value}")))
}

/// Whether a configuration warning ("`path`: unknown key ignored", maybe with a suggestion and
/// where it was set) is about the key an override set, which makes the override a usage error
/// (it would have no effect).
pub fn override_is_unknown(set: &str, warning: &str) -> bool {
    let key = set.split_once('=').map_or(set, |(k, _)| k);
    let Some((path, _)) = warning.split_once(": unknown key ignored") else {
        return false;
    };
    // Warnings index lists as `sinks[0].config`; overrides as `sinks.0.config`.
    let w = path.replace('[', ".").replace(']', "");
    w == key || key.starts_with(&format!("{w}."))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(args: &[&str]) -> Invocation {
        parse(args).unwrap_or_else(|p| panic!("{args:?}: {p:?}"))
    }
    fn err(args: &[&str]) -> String {
        parse(args).expect_err("refused").join("; ")
    }

    #[test]
    fn python_names() {
        for n in [
            "python",
            "/usr/local/bin/python",
            "python3",
            "python3.10",
            "bin/python3.12",
        ] {
            assert!(is_python_name(OsStr::new(n)), "{n}");
        }
        for n in [
            "observation-publisher",
            "/usr/local/bin/observation-publisher",
            "python2",
            "python3.",
            "python3.x",
            "pythonista",
            "ipython",
        ] {
            assert!(!is_python_name(OsStr::new(n)), "{n}");
        }
    }

    #[test]
    fn merlins_command_selects_the_file() {
        let i = ok(&["-m", "publisher", "+environment=config"]);
        assert_eq!(i.environment, "config");
        assert!(i.sets.is_empty());
        assert_eq!(
            i.config_path(Path::new(MERLIN_CONF_DIR)),
            Path::new("/mlobs/observation-publisher/conf/environment/config.yaml")
        );
    }

    #[test]
    fn overrides_become_sets() {
        let i = ok(&[
            "-m",
            "publisher",
            "environment.prometheus_port=9100",
            "+environment=prod",
            "+environment.batching.max_rows=1000",
            "++logging.level=debug",
            "environment.observation_sinks.0.config.ttl_days=30",
        ]);
        assert_eq!(i.environment, "prod");
        assert_eq!(
            i.sets,
            [
                "prometheus_port=9100",
                "batching.max_rows=1000",
                "logging.level=debug",
                "observation_sinks.0.config.ttl_days=30"
            ]
        );
    }

    #[test]
    fn other_python_invocations_name_what_was_expected() {
        assert!(err(&[]).contains("no arguments"));
        assert!(err(&["script.py"]).contains("not a Python interpreter"));
        assert!(err(&["-c", "print(1)"]).contains("not a Python interpreter"));
        assert!(err(&["-m", "http.server"]).contains("only the publisher module"));
        assert!(err(&["-m", "publisher"]).contains("+environment=NAME is missing"));
    }

    #[test]
    fn unknown_or_unsupported_overrides_are_each_reported() {
        let e = err(&[
            "-m",
            "publisher",
            "+environment=config",
            "hydra.run.dir=/tmp",
            "foo=bar",
            "~environment.batching",
            "environment=config",
            "+environment=other",
            "--cfg",
            "noequals",
            "environment..x=1",
        ]);
        for part in [
            "\"hydra.run.dir\" is not a key",
            "\"foo\" is not a key",
            "deleting keys",
            "select the config with +environment=NAME",
            "+environment is given twice",
            "flags are not supported",
            "expected key=value",
            "\"environment..x\" is not a key",
        ] {
            assert!(e.contains(part), "{part} in {e}");
        }
    }

    #[test]
    fn a_refused_override_is_named_by_its_key_never_its_value() {
        let v = "planted-s3cret";
        for bad in [
            format!("environment.observation_sinkz.0.config.api_key={v}"),
            format!("hydra.x={v}"),
            format!("~environment.batching={v}"),
            format!("--api_key={v}"),
            format!("environment={v}"),
        ] {
            let e = err(&["-m", "publisher", "+environment=config", &bad]);
            let key = bad.split_once('=').unwrap().0;
            assert!(e.contains(&format!("{key:?}=…")), "{bad}: {e}");
            assert!(!e.contains(v), "{bad}: {e}");
        }
    }

    #[test]
    fn environment_names_cannot_leave_the_directory() {
        for bad in [
            "+environment=../etc/passwd",
            "+environment=a/b",
            "+environment=",
            "+environment=.hidden",
        ] {
            assert!(
                err(&["-m", "publisher", bad]).contains("file name"),
                "{bad}"
            );
        }
    }

    #[test]
    fn a_warning_about_an_overridden_key_is_detected() {
        let w = "inference_schema.model_prediction_output.bogus: unknown key ignored";
        assert!(override_is_unknown(
            "inference_schema.model_prediction_output.bogus=1",
            w
        ));
        assert!(override_is_unknown(
            "inference_schema.model_prediction_output.bogus.deeper=1",
            w
        ));
        assert!(!override_is_unknown(
            "inference_schema.model_prediction_output.bog=1",
            w
        ));
        assert!(!override_is_unknown("prometheus_port=1", w));
        assert!(override_is_unknown(
            "batching.lingr=1",
            "batching.lingr: unknown key ignored; did you mean batching.linger? (from --set)"
        ));
        assert!(override_is_unknown(
            "observation_sinks.1.config.bogus=1",
            "observation_sinks[1].config.bogus: unknown key ignored"
        ));
    }
}
