//! The offline commands, end to end through the real binary: `gen`, `convert` (jsonl, parquet,
//! arrow), `schema`, `check-config`, exit codes.

use crate::common::{repo_config, run, stderr};
use arrow_array::RecordBatch;
use observation_publisher::config::{load_value, Config, Needs};
use observation_publisher::decode::reference::batch_cells;
use observation_publisher::decode::Decoder;
use observation_publisher::framing::FrameReader;
use observation_publisher::table::TableLayout;
use std::path::Path;
use std::process::Output;
use std::sync::Arc;

fn gen(dir: &std::path::Path, n: u32, malformed: &str) -> std::path::PathBuf {
    let path = dir.join("logs.bin");
    let o = run(&[
        "gen",
        "-c",
        repo_config("local.yaml").to_str().unwrap(),
        "-n",
        &n.to_string(),
        "--seed",
        "5",
        "--rows-per-log",
        "2",
        "--malformed-ratio",
        malformed,
        "--start-time",
        "2026-11-01T00:00:00Z",
        "-o",
        path.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    path
}

/// Rows the library decodes from the same file, for comparison with what the binary wrote.
fn decode_file(path: &std::path::Path) -> (Vec<RecordBatch>, usize) {
    let v = load_value(Some(&repo_config("local.yaml")), Vec::new(), &[]).unwrap();
    let (cfg, _) = Config::from_value(&v, Needs::CONVERT).unwrap();
    let mut d = Decoder::new(Arc::new(TableLayout::from_config(&cfg)));
    let mut r = FrameReader::new(std::io::BufReader::new(std::fs::File::open(path).unwrap()));
    let mut buf = Vec::new();
    let mut bad = 0;
    while r.next_into(&mut buf).unwrap().is_some() {
        bad += usize::from(d.decode(&buf).is_err());
    }
    (vec![d.finish()], bad)
}

/// `convert` of `input` into `out` with config/local.yaml, plus `extra` arguments.
fn convert(input: &Path, out: &Path, extra: &[&str]) -> Output {
    let cfg = repo_config("local.yaml");
    let mut args = vec![
        "convert",
        "-c",
        cfg.to_str().unwrap(),
        "-i",
        input.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    run(&args)
}

#[test]
fn convert_jsonl_reports_bad_logs_and_writes_every_good_row() {
    let dir = tempfile::tempdir().unwrap();
    let input = gen(dir.path(), 500, "0.05");
    let out = dir.path().join("rows.jsonl");
    let o = convert(&input, &out, &[]);
    assert!(
        o.status.success(),
        "bad logs are skipped, not fatal: {}",
        stderr(&o)
    );
    let (batches, bad) = decode_file(&input);
    assert!(bad > 5, "the generator made malformed logs");
    let err = stderr(&o);
    let reported = err
        .lines()
        .filter(|l| l.starts_with("log ") && l.contains(" at byte "))
        .count();
    assert_eq!(
        reported, 10,
        "the first 10 bad logs are reported with index and offset:\n{err}"
    );
    assert!(
        err.contains(&format!(
            "convert: {} more bad logs not shown (the first 10 are above)",
            bad - 10
        )),
        "the rest are counted:\n{err}"
    );
    assert!(
        err.contains(&format!(
            "500 logs read, {} rows written, {bad} bad logs skipped",
            batches[0].num_rows()
        )),
        "{err}"
    );

    let text = std::fs::read_to_string(&out).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), batches[0].num_rows());
    let first: serde_json::Value = serde_json::from_str(lines[0]).unwrap();
    let keys: Vec<&String> = first.as_object().unwrap().keys().collect();
    let schema_keys: Vec<String> = batches[0]
        .schema()
        .fields()
        .iter()
        .map(|f| f.name().clone())
        .collect();
    assert_eq!(
        keys,
        schema_keys.iter().collect::<Vec<_>>(),
        "keys in table column order, all present"
    );
    let ts = first["request_timestamp"].as_str().unwrap();
    assert!(
        ts.starts_with("2026-11-01T00:00:00.") && ts.ends_with('Z') && ts.len() == 27,
        "{ts}"
    );

    let strict = convert(&input, &out, &["--strict"]);
    assert_eq!(strict.status.code(), Some(1), "--strict fails on bad logs");
}

#[test]
fn parquet_and_arrow_outputs_hold_the_decoded_rows() {
    let dir = tempfile::tempdir().unwrap();
    let input = gen(dir.path(), 300, "0.02");
    let (expected, _) = decode_file(&input);
    let expected = batch_cells(&expected[0]);

    let pq = dir.path().join("rows.parquet");
    let o = convert(&input, &pq, &["-f", "parquet"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(
        std::fs::File::open(&pq).unwrap(),
    )
    .unwrap()
    .build()
    .unwrap();
    let mut got = Vec::new();
    for b in reader {
        let b = b.unwrap();
        assert_eq!(
            b.schema().field(2).data_type(),
            &arrow_schema::DataType::Timestamp(
                arrow_schema::TimeUnit::Microsecond,
                Some("UTC".into())
            )
        );
        got.extend(batch_cells(&b));
    }
    assert_eq!(got, expected);

    let ipc = dir.path().join("rows.arrow");
    let o = convert(&input, &ipc, &["-f", "arrow"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let reader =
        arrow_ipc::reader::StreamReader::try_new(std::fs::File::open(&ipc).unwrap(), None).unwrap();
    let mut got = Vec::new();
    for b in reader {
        got.extend(batch_cells(&b.unwrap()));
    }
    assert_eq!(got, expected);
}

#[test]
fn unrecoverable_frames_exit_1_without_allocating_the_claimed_length() {
    let dir = tempfile::tempdir().unwrap();
    let input = gen(dir.path(), 20, "0");
    let mut bytes = std::fs::read(&input).unwrap();
    // A truncated last frame.
    bytes.truncate(bytes.len() - 10);
    let truncated = dir.path().join("truncated.bin");
    std::fs::write(&truncated, &bytes).unwrap();
    let o = convert(&truncated, Path::new("/dev/null"), &[]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("unrecoverable input"), "{}", stderr(&o));
    // A length prefix claiming ~4 EiB.
    let huge = dir.path().join("huge.bin");
    std::fs::write(
        &huge,
        [
            0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x3f, 1, 2, 3,
        ],
    )
    .unwrap();
    let o = convert(&huge, Path::new("/dev/null"), &[]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("declares"), "{}", stderr(&o));
}

#[test]
fn invalid_config_lists_every_problem_and_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("bad.yaml");
    std::fs::write(
        &cfg,
        "project: p\nmodel_id: m\ninference_schema:\n  feature_types: {row_id: string, x: int128}\n  model_prediction_output: {output_class: Regression}\nbatching: {linger: forever}\n",
    )
    .unwrap();
    let o = run(&["check-config", "-c", cfg.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    for needle in [
        "model_version: required",
        "row_id",
        "int128",
        "unknown output class",
        "batching.linger",
        "observation_source: required",
    ] {
        assert!(err.contains(needle), "missing {needle:?}:\n{err}");
    }
    // convert needs no source or sinks, but still reports the schema problems.
    let o = run(&["convert", "-c", cfg.to_str().unwrap(), "-i", "/dev/null"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(!stderr(&o).contains("observation_source"), "{}", stderr(&o));
}

#[test]
fn check_config_redacts_secrets_and_schema_prints_the_table() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("c.yaml");
    let text = std::fs::read_to_string(repo_config("merlin-binary.yaml"))
        .unwrap()
        .replace(
            "      fetch.min.bytes: \"1024000\"",
            "      fetch.min.bytes: \"1024000\"\n      sasl.password: s3cr3t-value",
        );
    std::fs::write(&cfg, text).unwrap();
    let o = run(&["check-config", "-c", cfg.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(!out.contains("s3cr3t-value") && !stderr(&o).contains("s3cr3t-value"));
    assert!(out.contains("<redacted>"));
    // The memory formula's bound for Merlin's config at the defaults, as YAML comments after it.
    let bound = {
        use observation_publisher::config::{load_value, Config, Needs};
        let v = load_value(Some(&cfg), Vec::new(), &[]).unwrap();
        let c = Config::from_value(&v, Needs::RUN).unwrap().0;
        observation_publisher::footprint::Footprint::of(&c, true).bound()
    };
    assert!(
        out.contains("# resident memory bound") && out.contains(&format!("in all ({bound} bytes)")),
        "{out}"
    );
    assert!(bound <= 128 << 20, "{bound}");
    serde_yaml_ng::from_str::<serde_yaml_ng::Value>(&out).expect("still one YAML document");

    let o = run(&["schema", "-c", cfg.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        doc["tableReference"]["tableId"],
        "prediction_log_sample_credit_model"
    );
    assert_eq!(doc["tableReference"]["projectId"], "gcp-project");
    assert_eq!(doc["timePartitioning"]["expirationMs"], "1209600000");
    assert_eq!(doc["timePartitioning"]["field"], "request_timestamp");
    let names: Vec<&str> = doc["schema"]["fields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "session_id",
            "row_id",
            "request_timestamp",
            "model_version",
            "amount",
            "merchant_id",
            "num_txn_24h",
            "is_foreign",
            "prediction_score",
            "_prediction_label"
        ]
    );
    let types: Vec<&str> = doc["schema"]["fields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["type"].as_str().unwrap())
        .collect();
    assert_eq!(
        types,
        [
            "STRING",
            "STRING",
            "TIMESTAMP",
            "STRING",
            "FLOAT",
            "STRING",
            "INTEGER",
            "BOOLEAN",
            "FLOAT",
            "STRING"
        ]
    );
}

#[test]
fn version_flag() {
    let o = run(&["--version"]);
    assert!(o.status.success());
    assert!(String::from_utf8_lossy(&o.stdout).contains(env!("CARGO_PKG_VERSION")));
}

/// Merlin's example config with the feature `merchant_id` renamed to `name` (a string feature).
fn merlin_with_feature(dir: &Path, name: &str) -> std::path::PathBuf {
    let cfg = dir.join("c.yaml");
    let text = std::fs::read_to_string(repo_config("merlin-binary.yaml"))
        .unwrap()
        .replace(
            "    merchant_id: string",
            &format!("    \"{name}\": string"),
        );
    std::fs::write(&cfg, text).unwrap();
    cfg
}

#[test]
fn a_unicode_feature_name_works_in_every_offline_command() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = merlin_with_feature(dir.path(), "città");
    let c = cfg.to_str().unwrap();
    let o = run(&["check-config", "-c", c]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("città"));

    let o = run(&["schema", "-c", c]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(doc["schema"]["fields"][5]["name"], "città");
    assert_eq!(doc["schema"]["fields"][5]["type"], "STRING");

    let logs = dir.path().join("logs.bin");
    let o = run(&["gen", "-c", c, "-n", "20", "-o", logs.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let jsonl = dir.path().join("rows.jsonl");
    let o = run(&[
        "convert",
        "-c",
        c,
        "-i",
        logs.to_str().unwrap(),
        "-o",
        jsonl.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let text = std::fs::read_to_string(&jsonl).unwrap();
    assert_eq!(text.lines().count(), 20);
    for line in text.lines() {
        let row: serde_json::Value = serde_json::from_str(line).unwrap();
        assert!(row["città"].is_string(), "{line}");
    }
    let parquet = dir.path().join("rows.parquet");
    let o = run(&[
        "convert",
        "-c",
        c,
        "-i",
        logs.to_str().unwrap(),
        "-f",
        "parquet",
        "-o",
        parquet.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let file = std::fs::File::open(&parquet).unwrap();
    let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)
        .unwrap()
        .build()
        .unwrap();
    let mut rows = 0;
    for b in reader {
        let b = b.unwrap();
        assert!(b.schema().field_with_name("città").is_ok());
        rows += b.num_rows();
    }
    assert_eq!(rows, 20);
}

#[test]
fn a_column_name_bigquery_refuses_exits_2_with_the_rule() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = merlin_with_feature(dir.path(), "_TABLE_SUFFIX");
    let o = run(&["convert", "-c", cfg.to_str().unwrap(), "-i", "/dev/null"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("_TABLE_SUFFIX: BigQuery reserves column names starting with _TABLE_"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn names_that_break_bigquery_or_kafka_exit_2_naming_key_and_rule() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("c.yaml");
    let text = std::fs::read_to_string(repo_config("merlin-binary.yaml"))
        .unwrap()
        .replace("project: sample", "project: \"sam/ple\"")
        .replace("model_id: credit-model", "model_id: \"credit model\"")
        .replace(
            "topic: caraml-sample-credit-model-3-prediction-log",
            "topic: \"bad topic/..\"",
        );
    std::fs::write(&cfg, text).unwrap();
    let c = cfg.to_str().unwrap();
    let o = run(&["check-config", "-c", c]);
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    for expected in [
        "project, model_id: they make the BigQuery table id \"prediction_log_sam/ple_credit model\": '/'",
        "observation_source.config.topic: \"bad topic/..\": ' ' (U+0020) is not allowed in a Kafka topic name",
    ] {
        assert!(err.contains(expected), "missing {expected:?} in {err}");
    }
    let o = run(&["schema", "-c", c]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("BigQuery table id"));
    // `convert` writes no table and reads no topic.
    let o = run(&["convert", "-c", c, "-i", "/dev/null"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
}

/// Two exactly-once BigQuery sinks would resume from one checkpoint: both offline validation
/// and `run` refuse them before anything connects, with the reason and what to do instead.
#[test]
fn exactly_once_with_two_bigquery_sinks_exits_2_saying_why() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("c.yaml");
    let text = std::fs::read_to_string(repo_config("merlin-binary.yaml"))
        .unwrap()
        .replace(
            "observation_source:",
            "- type: BIGQUERY\n  config: {project: p2, dataset: other, ttl_days: 7}\nobservation_source:",
        );
    std::fs::write(&cfg, format!("{text}delivery: exactly_once\n")).unwrap();
    for cmd in ["check-config", "run"] {
        let o = run(&[cmd, "-c", cfg.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(2), "{cmd}: {}", stderr(&o));
        let err = stderr(&o);
        for expected in [
            "delivery: exactly_once allows one BIGQUERY sink per publisher, found 2",
            "a second publisher with its own group_id",
        ] {
            assert!(
                err.contains(expected),
                "{cmd}: missing {expected:?} in {err}"
            );
        }
    }
}

/// A problem with an override names the variable or `--set` and shows the value, unless the
/// value is a secret: then it is hidden wherever it shows. What cannot be applied (a path that
/// cannot be set, an argument without a key) names the key path only: before the tree is read,
/// any value may be a secret.
#[test]
fn a_set_or_variable_problem_names_its_origin_and_hides_only_secrets() {
    const PLANTED: &str = "planted-Secret-9f3c";
    let cfg = repo_config("merlin-binary.yaml");
    let cfg = cfg.to_str().unwrap();
    let planted = |key: &str| format!("{key}={PLANTED}");
    let secret = planted("observation_source.config.additional_consumer_config.sasl.password");
    let cases: &[(&[&str], &str)] = &[
        (
            &["--set", "batching.linger=forever"],
            "batching.linger: invalid duration \"forever\"",
        ),
        (
            &["--set", &planted("batching.linger"), "--set", &secret],
            "batching.linger: invalid duration \"<redacted>\"",
        ),
        (
            &["--set", &planted("observation_sinks.x.type")],
            "indexes a list",
        ),
        (
            &["--set", &planted("batching..linger")],
            "empty path segment",
        ),
        (&["--set", PLANTED], "expected key.path=value"),
        // An override without `--set`: clap's error quotes the argument.
        (
            &[&planted("batching.linger")],
            "unexpected argument 'batching.linger=…'",
        ),
    ];
    for (extra, expect) in cases {
        let mut args = vec!["check-config", "-c", cfg];
        args.extend_from_slice(extra);
        let o = run(&args);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{extra:?}: {err}");
        assert!(err.contains(expect), "{extra:?}: {err}");
        assert!(!err.contains(PLANTED), "{extra:?} printed a secret: {err}");
        assert!(
            !String::from_utf8_lossy(&o.stdout).contains(PLANTED),
            "{extra:?}"
        );
    }
    // A key nobody reads is a warning, and the run goes on: the warning names the key only.
    let o = run(&[
        "check-config",
        "-c",
        cfg,
        "--set",
        &planted("observation_sinks.0.config.apikey"),
    ]);
    let err = stderr(&o);
    assert!(
        err.contains(
            "warning: observation_sinks[0].config.apikey: unknown key ignored (from --set)"
        ),
        "{err}"
    );
    assert!(
        !err.contains(PLANTED),
        "the warning printed the value: {err}"
    );
    let o = crate::common::bin()
        .args(["check-config", "-c", cfg])
        .env("OBS_PUBLISHER__BATCHING__MAX_ROWS", "lots")
        .output()
        .unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert_eq!(
        err,
        "invalid configuration (1 problem):\n  - batching.max_rows: expected a non-negative \
         integer, found \"lots\" (from OBS_PUBLISHER__BATCHING__MAX_ROWS)\n"
    );
}

/// A misspelt key is reported with the problems, with the key it was probably meant to be and
/// where it is written; the required key it leaves out says so.
#[test]
fn a_misspelt_key_is_one_problem_in_the_list_with_its_line_and_the_key_meant() {
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(repo_config("merlin-binary.yaml"))
        .unwrap()
        .replace("inference_schema:", "inference_shema:");
    let line = text
        .lines()
        .position(|l| l.starts_with("inference_shema:"))
        .unwrap()
        + 1;
    let cfg = dir.path().join("typo.yaml");
    std::fs::write(&cfg, text).unwrap();
    let cfg = cfg.to_str().unwrap();
    let o = run(&["check-config", "-c", cfg, "--set", "batching.lingr=3s"]);
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(
        stderr(&o),
        format!(
            "invalid configuration (3 problems):\n\
             \x20 - inference_schema: required (inference_shema is set: a misspelling?)\n\
             \x20 - batching.lingr: unknown key; did you mean batching.linger? (from --set)\n\
             \x20 - inference_shema: unknown key ignored; did you mean inference_schema? (at {cfg}:{line})\n"
        )
    );
}

/// A file the configuration or the environment names that is not there is a problem for
/// `check-config` and for `run` (before it connects anywhere), naming the setting or variable,
/// the path and where the setting was made; check-config also says where dead letters go.
#[test]
fn a_named_file_that_is_not_there_exits_2_naming_setting_and_path() {
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    let key = dir.path().join("key.json");
    let text = std::fs::read_to_string(repo_config("merlin-binary.yaml"))
        .unwrap()
        .replace(
            "      auto.offset.reset: latest\n",
            &format!(
                "      auto.offset.reset: latest\n      ssl.ca.location: {}\n",
                ca.display()
            ),
        );
    let line = text
        .lines()
        .position(|l| l.contains("ssl.ca.location"))
        .unwrap()
        + 1;
    let cfg = dir.path().join("c.yaml");
    std::fs::write(&cfg, text).unwrap();
    let cfg = cfg.to_str().unwrap();
    let expected = format!(
        "invalid configuration (2 problems):\n\
         \x20 - observation_source.config.additional_consumer_config.ssl.ca.location: {ca:?} does not exist (at {cfg}:{line})\n\
         \x20 - GOOGLE_APPLICATION_CREDENTIALS: {key:?} does not exist; point it at the service-account key file, or unset it to use the metadata server\n"
    );
    for cmd in ["check-config", "run"] {
        let o = crate::common::bin()
            .args([cmd, "-c", cfg])
            .env("GOOGLE_APPLICATION_CREDENTIALS", &key)
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2), "{cmd}: {}", stderr(&o));
        assert_eq!(stderr(&o), expected, "{cmd}");
    }
    std::fs::write(&ca, "not checked beyond being readable").unwrap();
    std::fs::write(&key, "{}").unwrap();
    let o = crate::common::bin()
        .args(["check-config", "-c", cfg])
        .env("GOOGLE_APPLICATION_CREDENTIALS", &key)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_yaml_ng::Value =
        serde_yaml_ng::from_slice(&o.stdout).expect("check-config prints YAML");
    assert_eq!(
        v["dead-letter topic"].as_str(),
        Some("caraml-sample-credit-model-3-prediction-log-dlq")
    );
    let letters = dir.path().join("letters/dlq.bin");
    let o = run(&[
        "check-config",
        "-c",
        cfg,
        "--set",
        "dead_letter.target=file",
        "--set",
        &format!("dead_letter.path={}", letters.display()),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_yaml_ng::Value = serde_yaml_ng::from_slice(&o.stdout).unwrap();
    assert_eq!(v["dead-letter file"].as_str(), letters.to_str());
}

/// An argument that is not UTF-8 is a usage error (exit 2), also on the path that hides
/// override values, never a panic.
#[test]
fn an_argument_that_is_not_utf8_is_a_usage_error() {
    use std::os::unix::ffi::OsStrExt;
    let cfg = repo_config("merlin-binary.yaml");
    let bad = std::ffi::OsStr::from_bytes(b"batching.linger=\xff\xfeplanted");
    let o = crate::common::bin()
        .args(["check-config", "-c"])
        .arg(&cfg)
        .arg(bad)
        .output()
        .unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(!err.contains("planted"), "{err}");
}

#[test]
fn a_log_level_that_is_not_a_level_is_a_configuration_problem() {
    let cfg = repo_config("merlin-binary.yaml");
    let cfg = cfg.to_str().unwrap();
    // tracing would read `verbose` as a target name and `run` would log nothing at all.
    let o = run(&["check-config", "-c", cfg, "--set", "logging.level=verbose"]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("logging.level: ")
            && err.contains("is not a level; expected error, warn, info, debug, trace or off"),
        "{err}"
    );
    // The directive lists the tests themselves run with stay valid.
    let o = run(&[
        "check-config",
        "-c",
        cfg,
        "--set",
        "logging.level=info,observation_publisher::pipeline=debug,librdkafka=debug",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
}
