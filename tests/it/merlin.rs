//! Merlin's control plane runs the publisher unchanged: its container command `python -m
//! publisher +environment=config` (answered by the binary under the name `python`, as the image
//! ships it: a relative symlink), and the config it writes (tests/fixtures/
//! merlin-deployment-test.yaml is the text Merlin's own deployment_test.go pins, verbatim).
//! The image test (image.rs) runs the same command inside the container.

use crate::common::{bin, repo_config, stderr};
use crate::runtime::{
    brokers, create_topic, expected_rows, free_port, http_get, logs, parquet_rows, produce, stop,
    unique, wait_for,
};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

/// Merlin's deployment_test.go fixture, verbatim.
pub(crate) fn fixture() -> String {
    std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/merlin-deployment-test.yaml"),
    )
    .unwrap()
}

/// The fixture without its `- type: <ty>` sink entry (what Merlin writes with that sink off).
pub(crate) fn fixture_without(ty: &str) -> String {
    let f = fixture();
    let start = f.find(&format!("- type: {ty}\n")).expect("the sink");
    let end = f[start + 2..]
        .find("\n- type: ")
        .map(|i| start + 2 + i + 1)
        .or_else(|| {
            f[start..]
                .find("\nobservation_source:")
                .map(|i| start + i + 1)
        })
        .unwrap();
    format!("{}{}", &f[..start], &f[end..])
}

/// A directory holding `python`, a symlink to the binary under test (the image's is relative:
/// scripts/image and image.rs check that one).
fn python_dir() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let target = Path::new(env!("CARGO_BIN_EXE_observation-publisher"));
    std::os::unix::fs::symlink(target, dir.path().join("python")).unwrap();
    let python = dir.path().join("python");
    (dir, python)
}

fn stdout_of(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn python(py: &Path, conf_dir: &Path, args: &[&str]) -> Output {
    Command::new(py)
        .args(args)
        .env("OBS_PUBLISHER_MERLIN_CONF_DIR", conf_dir)
        .output()
        .unwrap()
}

#[test]
fn python_refuses_anything_but_merlins_command_naming_what_it_expected() {
    let (dir, py) = python_dir();
    std::fs::write(
        dir.path().join("config.yaml"),
        fixture_without("MAXCOMPUTE"),
    )
    .unwrap();
    let cases: &[(&[&str], &str)] = &[
        (&[], "no arguments"),
        (&["script.py"], "not a Python interpreter"),
        (&["-c", "print(1)"], "not a Python interpreter"),
        (&["-m", "http.server"], "only the publisher module"),
        (&["-m", "publisher"], "+environment=NAME is missing"),
        (
            &[
                "-m",
                "publisher",
                "+environment=config",
                "hydra.run.dir=/tmp",
            ],
            "\"hydra.run.dir\" is not a key this publisher reads",
        ),
        (
            &[
                "-m",
                "publisher",
                "+environment=config",
                "environment.inference_schema.model_prediction_output.bogus=1",
            ],
            "names a key this publisher does not read",
        ),
        (&["-m", "publisher", "+environment=nothere"], "nothere.yaml"),
    ];
    for (args, expect) in cases {
        let o = python(&py, dir.path(), args);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "python {args:?}: {err}");
        assert!(err.contains(expect), "python {args:?}: {err}");
        if !expect.ends_with(".yaml") {
            assert!(
                err.contains("expected: python -m publisher +environment=NAME"),
                "python {args:?} names what it expected: {err}"
            );
        }
    }
    // The binary under its own name is not Merlin's command.
    let o = bin().args(["-m", "publisher"]).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(!stderr(&o).contains("expected: python"), "{}", stderr(&o));
}

#[test]
fn merlins_command_runs_the_daemon_on_the_mounted_config_with_overrides() {
    let (dir, py) = python_dir();
    let conf = dir.path().join("conf");
    std::fs::create_dir_all(&conf).unwrap();
    let out = dir.path().join("rows");
    let topic = unique("merlin-cmd");
    let group = unique("merlin-cmd-group");
    // config/local.yaml's schema (what `logs` generates), Merlin's source keys; its `server`
    // section goes, so the port is Merlin's `prometheus_port` (overridden below).
    let local = std::fs::read_to_string(repo_config("local.yaml")).unwrap();
    let cfg = local
        .replace("server:\n  listen: 127.0.0.1:18000\n", "")
        .replace("caraml-demo-fraud-detector-1-prediction-log", &topic)
        .replace("127.0.0.1:19092", &brokers())
        .replace("demo-fraud-detector-1", &group)
        .replace("out/demo/rows", out.to_str().unwrap())
        .replace(
            "out/demo/dead-letters.bin",
            dir.path().join("dlq.bin").to_str().unwrap(),
        );
    assert!(!cfg.contains("server:"), "{cfg}");
    std::fs::write(conf.join("config.yaml"), cfg).unwrap();
    create_topic(&topic, 2);
    let produced = logs(60, 11, 0.05);
    produce(&topic, &produced);

    let port = free_port();
    let child = crate::common::Reaped(
        Command::new(&py)
            .args([
                "-m",
                "publisher",
                "+environment=config",
                &format!("environment.prometheus_port={port}"),
                "+environment.batching.linger=200ms",
                "++environment.consumer.start_from=earliest",
                "+environment.consumer.session_timeout=6s",
            ])
            .env("OBS_PUBLISHER_MERLIN_CONF_DIR", &conf)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.path().join("stderr")).unwrap())
            .spawn()
            .unwrap(),
    );
    let want: BTreeSet<(String, String)> = expected_rows(&produced, 11);
    let landed = wait_for(Duration::from_secs(60), || {
        parquet_rows(&out).into_iter().collect::<BTreeSet<_>>() == want
    });
    // The override moved the port; Merlin's metric names are served there.
    let metrics = http_get(port, "/metrics")
        .map(|(_, b)| b)
        .unwrap_or_default();
    let code = stop(child);
    assert!(
        landed,
        "every valid log became a row; stderr:\n{}",
        std::fs::read_to_string(dir.path().join("stderr")).unwrap_or_default()
    );
    assert!(
        metrics.contains("total_prediction_logs_processed_total"),
        "{metrics}"
    );
    assert_eq!(code, Some(0), "SIGTERM drains and exits 0");
}

#[test]
fn merlins_config_as_written_passes_check_config_and_run_names_its_access_url() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("config.yaml");
    // The whole fixture (BIGQUERY + MAXCOMPUTE + ARIZE) passes: its `access_url: url` is what
    // the pod's environment replaces.
    std::fs::write(&f, fixture()).unwrap();
    let o = bin().args(["check-config", "-c"]).arg(&f).output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout_of(&o);
    for shown in ["access_key_secret: secret", "access_key_id: key"] {
        assert!(!out.contains(shown), "the access keys are redacted:\n{out}");
    }
    assert!(
        out.contains("observation_sinks[1].config.access_url = \"url\": not an http(s):// URL: `run` exits 2 unless the environment replaces it (OBS_PUBLISHER__OBSERVATION_SINKS__1__CONFIG__ACCESS_URL)"),
        "{out}"
    );

    // The variable the message names does replace it.
    let o = bin()
        .args(["check-config", "-c"])
        .arg(&f)
        .env(
            "OBS_PUBLISHER__OBSERVATION_SINKS__1__CONFIG__ACCESS_URL",
            "https://service.ap-southeast-1.maxcompute.aliyun.com/api",
        )
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout_of(&o);
    assert!(
        out.contains("access_url = \"https://service.ap-southeast-1.maxcompute.aliyun.com/api\": MaxCompute's control plane"),
        "{out}"
    );

    // `run` checks the URL where the MAXCOMPUTE sink starts: exit 2, naming the key and the
    // variable that sets it (BIGQUERY left out: it would wait for its service first).
    std::fs::write(&f, fixture_without("BIGQUERY")).unwrap();
    let o = bin()
        .args(["run", "-c"])
        .arg(&f)
        .args(["--set", "server.listen=127.0.0.1:0"])
        .output()
        .unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("MAXCOMPUTE sink: access_url \"url\""), "{err}");
    assert!(err.contains("OBS_PUBLISHER__OBSERVATION_SINKS__"), "{err}");

    // What Merlin writes with its MaxCompute sink disabled (BIGQUERY + ARIZE) is accepted, and
    // check-config says how each of Merlin's keys is understood.
    std::fs::write(&f, fixture_without("MAXCOMPUTE")).unwrap();
    let o = bin().args(["check-config", "-c"]).arg(&f).output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        !stderr(&o).contains("unknown key"),
        "Merlin's keys are all known: {}",
        stderr(&o)
    );
    let out = String::from_utf8(o.stdout).unwrap();
    for (key, meaning) in [
        ("inference_schema.tag_columns = [\"tag\"]", "no effect"),
        (
            "observation_source.config.batch_size = 100",
            "no effect: Merlin's consume() batch size",
        ),
        (
            "model_prediction_output.prediction_label_column = \"prediction_label\"",
            "always `_prediction_label`",
        ),
        (
            "model_prediction_output.actual_score_column = \"\"",
            "no ground truth",
        ),
        (
            "model_prediction_output.score_threshold = null",
            "null means the default, 0.5",
        ),
    ] {
        let line = out
            .lines()
            .find(|l| l.starts_with("#") && l.contains(key))
            .unwrap_or_else(|| panic!("{key} is explained:\n{out}"));
        assert!(line.contains(meaning), "{line}");
    }
    // The output stays YAML, the explanations being comments.
    let v: serde_yaml_ng::Value = serde_yaml_ng::from_str(&out).unwrap();
    assert_eq!(v["project"].as_str(), Some("project-1"));
}

/// An override may carry a secret: no argument error prints a secret, only the key path and
/// what is wrong with it. Each path of the Python entry point that reports an override is tried
/// with a planted value (the publisher's own `--set` and variables: `tests/it/cli.rs`).
#[test]
fn no_argument_error_prints_an_overrides_value() {
    const PLANTED: &str = "planted-Secret-9f3c";
    let (dir, py) = python_dir();
    std::fs::write(
        dir.path().join("config.yaml"),
        fixture_without("MAXCOMPUTE"),
    )
    .unwrap();
    let planted = |key: &str| format!("{key}={PLANTED}");
    let cases: Vec<(Vec<String>, &str)> = vec![
        // A typo in a key under a sink's config (apikey for api_key).
        (
            vec![planted("environment.observation_sinks.1.config.apikey")],
            "\"observation_sinks.1.config.apikey\"=… names a key this publisher does not read",
        ),
        // A key outside the publisher's sections.
        (
            vec![planted("environment.observation_sinkz.0.config.api_key")],
            "is not a key this publisher reads",
        ),
        (vec![planted("~environment.x")], "deleting keys"),
        (vec![planted("--api_key")], "flags are not supported"),
        // An invalid value is quoted, unless it is a secret's value too.
        (
            vec![
                planted("environment.batching.linger"),
                planted("environment.observation_source.config.additional_consumer_config.sasl.password"),
            ],
            "batching.linger: invalid duration \"<redacted>\"",
        ),
        // A list indexed by a name.
        (
            vec![planted(
                "environment.observation_sinks.arize.config.api_key",
            )],
            "indexes a list",
        ),
    ];
    for (overrides, expect) in cases {
        let mut args = vec!["-m", "publisher", "+environment=config"];
        args.extend(overrides.iter().map(String::as_str));
        let o = python(&py, dir.path(), &args);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{overrides:?}: {err}");
        assert!(err.contains(expect), "{overrides:?}: {err}");
        assert!(
            !err.contains(PLANTED),
            "{overrides:?} printed its value: {err}"
        );
        assert!(!stdout_of(&o).contains(PLANTED), "{overrides:?}");
    }
}
