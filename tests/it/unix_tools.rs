//! The offline tools behave as Unix tools do: the output's name says its format (or a mismatch
//! is refused before anything is written), an input that is not length-delimited stops at once
//! with one line, binary never goes to a terminal, colour codes never go to a file, `produce`
//! gives up on an unreachable broker naming it, and `schema` answers for every sink type.
//!
//! A terminal is a real pseudo-terminal: `script` (util-linux) runs the command on one.

use crate::common::{bin, repo_config, run, stderr};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn local() -> String {
    repo_config("local.yaml").to_str().unwrap().to_string()
}

fn gen(dir: &Path, n: u32) -> PathBuf {
    let path = dir.join("logs.bin");
    let o = run(&[
        "gen",
        "-c",
        &local(),
        "-n",
        &n.to_string(),
        "--seed",
        "3",
        "-o",
        path.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    path
}

fn convert(input: &Path, extra: &[&str]) -> Output {
    let cfg = local();
    let mut args = vec!["convert", "-c", &cfg, "-i", input.to_str().unwrap()];
    args.extend_from_slice(extra);
    run(&args)
}

#[test]
fn the_output_name_says_the_format_and_a_mismatch_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let logs = gen(dir.path(), 50);

    let pq = dir.path().join("rows.parquet");
    let o = convert(&logs, &["-o", pq.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let rows: usize = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(
        std::fs::File::open(&pq).unwrap(),
    )
    .expect("-o rows.parquet without -f is Parquet")
    .build()
    .unwrap()
    .map(|b| b.unwrap().num_rows())
    .sum();
    assert_eq!(rows, 50);

    let ipc = dir.path().join("rows.arrow");
    let o = convert(&logs, &["-o", ipc.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    arrow_ipc::reader::StreamReader::try_new(std::fs::File::open(&ipc).unwrap(), None)
        .expect("-o rows.arrow without -f is an Arrow IPC stream");

    // A mismatch, or an extension that names no format: exit 2, one line, nothing written.
    let wrong = dir.path().join("other.parquet");
    let o = convert(&logs, &["-f", "jsonl", "-o", wrong.to_str().unwrap()]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("-f jsonl but -o ") && err.contains("names Parquet: drop -f"),
        "{err}"
    );
    assert!(!wrong.exists(), "the refused output was created");
    let csv = dir.path().join("rows.csv");
    let o = convert(&logs, &["-o", csv.to_str().unwrap()]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("name it .jsonl, .parquet or .arrow, or give -f jsonl|parquet|arrow"),
        "{err}"
    );
    assert!(!csv.exists());

    // gen writes logs, never rows.
    let named_for_rows = dir.path().join("logs.jsonl");
    let o = run(&[
        "gen",
        "-c",
        &local(),
        "-n",
        "5",
        "-o",
        named_for_rows.to_str().unwrap(),
    ]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("gen writes length-delimited PredictionLogs"),
        "{err}"
    );
    assert!(!named_for_rows.exists());
}

#[test]
fn an_input_that_is_not_length_delimited_stops_at_once_with_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let logs = gen(dir.path(), 300);
    let jsonl = dir.path().join("rows.jsonl");
    let o = convert(&logs, &["-o", jsonl.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let pq = dir.path().join("rows.parquet");
    let o = convert(&logs, &["-o", pq.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));

    for (input, looks) in [(&jsonl, "JSON lines"), (&pq, "a Parquet file")] {
        let o = convert(input, &["-o", "/dev/null"]);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{err}");
        assert_eq!(err.lines().count(), 1, "one line, not one per log:\n{err}");
        assert!(
            err.contains(&format!(
                "is not length-delimited PredictionLogs (it looks like {looks})"
            )) && err.contains("what gen writes"),
            "{err}"
        );
    }
}

/// Runs `command` (a shell command line) with stdin, stdout and stderr on a pseudo-terminal;
/// returns its exit code and everything it printed there.
fn on_a_terminal(command: &str) -> (Option<i32>, String) {
    let script = Command::new("script")
        .args(["-qec", command, "/dev/null"])
        .stdin(Stdio::null())
        .output()
        .expect("`script` (util-linux) runs a command on a pseudo-terminal");
    (
        script.status.code(),
        String::from_utf8_lossy(&script.stdout).into_owned(),
    )
}

fn quoted(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

#[test]
fn binary_is_never_written_to_a_terminal_and_text_is() {
    let dir = tempfile::tempdir().unwrap();
    let logs = gen(dir.path(), 3);
    let b = quoted(env!("CARGO_BIN_EXE_observation-publisher"));
    let c = quoted(&local());
    let l = quoted(logs.to_str().unwrap());

    let (code, out) = on_a_terminal(&format!("{b} gen -c {c} -n 3"));
    assert_eq!(code, Some(2), "{out}");
    assert!(
        out.contains(
            "gen: not writing length-delimited PredictionLogs to a terminal: give -o FILE"
        ),
        "{out}"
    );
    for f in ["parquet", "arrow"] {
        let (code, out) = on_a_terminal(&format!("{b} convert -c {c} -i {l} -f {f}"));
        assert_eq!(code, Some(2), "{f}: {out}");
        assert!(out.contains("to a terminal: give -o FILE"), "{f}: {out}");
    }
    // JSON lines are text: shown.
    let (code, out) = on_a_terminal(&format!("{b} convert -c {c} -i {l}"));
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("{\"session_id\":"), "{out}");
    // The same binary output into a pipe is fine.
    let o = bin()
        .args(["gen", "-c", &local(), "-n", "3"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(!o.stdout.is_empty());
}

#[test]
fn pretty_logs_have_colour_codes_on_a_terminal_only() {
    let dir = tempfile::tempdir().unwrap();
    let logs = gen(dir.path(), 5);
    let args = [
        "run".to_string(),
        "-c".into(),
        local(),
        "--replay".into(),
        logs.to_str().unwrap().into(),
        "--log-format".into(),
        "pretty".into(),
        "--set".into(),
        format!("local_sink.path={}", dir.path().join("rows").display()),
        "--set".into(),
        format!("dead_letter.path={}", dir.path().join("dead.bin").display()),
        "--set".into(),
        "server.listen=127.0.0.1:0".into(),
    ];
    let o = bin().args(&args).output().unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(err.contains(" INFO "), "the pretty format: {err}");
    assert!(!err.contains('\u{1b}'), "colour codes in a file: {err:?}");

    let line: Vec<String> = args.iter().map(|a| quoted(a)).collect();
    let (code, out) = on_a_terminal(&format!(
        "{} {}",
        quoted(env!("CARGO_BIN_EXE_observation-publisher")),
        line.join(" ")
    ));
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("\u{1b}["), "a terminal gets colours: {out:?}");
}

#[test]
fn produce_to_an_unreachable_broker_gives_up_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let logs = gen(dir.path(), 5);
    // Nothing listens on port 1: every connection is refused.
    let mut child = bin()
        .args([
            "produce",
            "--brokers",
            "127.0.0.1:1",
            "--topic",
            "nowhere",
            "--delivery-timeout",
            "2s",
            "-i",
            logs.to_str().unwrap(),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // A hang guard, far above the 2 s asked for: the command used to wait forever.
    let deadline = Instant::now() + Duration::from_secs(60);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            child.kill().unwrap();
            panic!("produce still waits for an unreachable broker after 60 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let o = child.wait_with_output().unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("127.0.0.1:1/bootstrap: Connect to ipv4#127.0.0.1:1 failed"),
        "the broker's error, as librdkafka says it: {err}"
    );
    assert!(
        err.contains("check --brokers 127.0.0.1:1 and that the broker is reachable"),
        "{err}"
    );
}

/// Merlin's example configuration with an ARIZE and a MAXCOMPUTE sink beside its BIGQUERY one.
fn three_sinks(dir: &Path) -> PathBuf {
    let cfg = dir.join("c.yaml");
    let text = std::fs::read_to_string(repo_config("merlin-binary.yaml"))
        .unwrap()
        .replace(
            "observation_source:",
            "- type: ARIZE\n  config: {api_key: a, space_key: s}\n\
             - type: MAXCOMPUTE\n  config: {project: mc-proj, dataset: mc_ds, ttl_days: 1, \
             access_key_id: i, access_key_secret: k, access_url: 'https://mc.example/api'}\n\
             observation_source:",
        );
    std::fs::write(&cfg, text).unwrap();
    cfg
}

#[test]
fn schema_answers_for_every_sink_type() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = three_sinks(dir.path());
    let c = cfg.to_str().unwrap();

    let o = run(&["schema", "-c", c]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("choose one with --sink bigquery or --sink arize or --sink maxcompute"),
        "{err}"
    );

    let o = run(&["schema", "-c", c, "--sink", "bigquery"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(doc["tableReference"]["datasetId"], "mlobs");

    let o = run(&["schema", "-c", c, "--sink", "maxcompute"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let sql = String::from_utf8_lossy(&o.stdout);
    assert_eq!(
        sql,
        "-- MaxCompute project mc-proj\n\
         set odps.namespace.schema=true;\n\
         create table mc_ds.prediction_log_sample_credit_model ( session_id STRING,\
         row_id STRING,request_timestamp TIMESTAMP,model_version STRING,amount DOUBLE,\
         merchant_id STRING,num_txn_24h BIGINT,is_foreign BOOLEAN,prediction_score DOUBLE,\
         _prediction_label STRING )  auto partitioned by (trunc_time(request_timestamp, 'day') \
         as request_timestamp_pt);\n"
    );

    let o = run(&["schema", "-c", c, "--sink", "arize"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(doc["model_id"], "sample-credit-model");
    assert_eq!(doc["model_version"], "3");
    assert_eq!(doc["model_type"], "SCORE_CATEGORICAL");
    assert_eq!(
        doc["arrow_schema"]["prediction_label_column_name"],
        "_prediction_label"
    );
    let body: Vec<(&str, &str)> = doc["body_columns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["name"].as_str().unwrap(), c["type"].as_str().unwrap()))
        .collect();
    assert_eq!(
        body,
        [
            ("amount", "Float64"),
            ("merchant_id", "Utf8"),
            ("num_txn_24h", "Int64"),
            ("is_foreign", "Boolean"),
            ("prediction_score", "Float64"),
            ("request_timestamp", "Timestamp(ns)"),
            ("_prediction_label", "Utf8"),
            ("_prediction_id", "Utf8"),
        ]
    );
    // The schema printed is the one the sink sends.
    let sent = {
        use observation_publisher::config::{load_value, Config, Needs};
        let v = load_value(Some(&cfg), Vec::new(), &[]).unwrap();
        let c = Config::from_value(&v, Needs::RUN).unwrap().0;
        observation_publisher::sink::arize::schema::Plan::new(&c)
            .unwrap()
            .schema_base64()
    };
    assert_eq!(doc["schema_base64"], sent.as_str());
    assert_eq!(doc["schema_sent_in"], "the schema header");
}
