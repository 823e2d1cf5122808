//! No secret is printed: secrets planted in the configuration are searched for
//! in everything the binary prints: `check-config`, the start-up log line, librdkafka's log lines
//! forwarded to ours, start-up errors (librdkafka's configuration errors quote the offending
//! value), configuration errors, and `bootstrap apply --dry-run` (the ScaledObject carries the
//! bootstrap servers).

use crate::common::{bin, run, stderr};
use crate::runtime::brokers;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::Stdio;

/// Every planted value contains this marker; none may appear in any output.
const MARK: &str = "PLANTED";

fn config(dir: &Path, name: &str, consumer: &str, bootstrap: &str, sinks: &str) -> String {
    let path = dir.join(name);
    std::fs::write(
        &path,
        format!(
            r#"project: sample
model_id: secrets
model_version: "1"
inference_schema:
  feature_types: {{amount: float64}}
  model_prediction_output: {{output_class: RegressionOutput, prediction_score_column: y}}
{sinks}
observation_source:
  type: KAFKA
  config:
    topic: secrets-never-printed
    bootstrap_servers: "{bootstrap}"
    group_id: secrets-g
    additional_consumer_config:
      auto.offset.reset: earliest
{consumer}
local_sink: {{path: {rows}}}
dead_letter: {{target: file, path: {dl}}}
server: {{listen: "127.0.0.1:0"}}
"#,
            rows = dir.join("rows").display(),
            dl = dir.join("dl.bin").display(),
        ),
    )
    .unwrap();
    path.to_str().unwrap().to_string()
}

/// OAUTHBEARER settings with planted secrets; this build of librdkafka has no OAUTHBEARER/OIDC
/// support (no libcurl), so creating the consumer fails with a configuration error that quotes
/// the value.
const OAUTH: &str = r#"      security.protocol: SASL_PLAINTEXT
      sasl.mechanisms: OAUTHBEARER
      sasl.oauthbearer.config: "principal=PLANTED-OAUTH-CONFIG"
      sasl.oauthbearer.assertion.private.key.passphrase: PLANTED-PASSPHRASE
      sasl.kerberos.kinit.cmd: "kinit PLANTED-KINIT"
      sasl.oauthbearer.client.secret: PLANTED-CLIENT-SECRET"#;

/// SASL PLAIN, which the local broker refuses: librdkafka logs the failed handshakes.
const PLAIN: &str = r#"      security.protocol: SASL_PLAINTEXT
      sasl.mechanisms: PLAIN
      sasl.username: PLANTED-USER
      sasl.password: PLANTED-SASL-PASSWORD
      sasl.kerberos.kinit.cmd: "kinit PLANTED-KINIT""#;

const BIGQUERY: &str = r#"observation_sinks:
- type: BIGQUERY
  config:
    project: p
    dataset: d
    ttl_days: 1
    auth: none
    rest_base_url: http://restuser:PLANTED-REST-PASSWORD@127.0.0.1:9/bigquery/v2"#;

fn assert_clean(what: &str, text: &str) {
    assert!(
        !text.contains(MARK),
        "{what} printed a planted secret:\n{text}"
    );
}

fn all_output(o: &std::process::Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), stderr(o))
}

#[test]
fn check_config_and_start_up_errors_print_no_secret() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), "oauth.yaml", OAUTH, &brokers(), BIGQUERY);
    let o = run(&["check-config", "-c", &cfg]);
    let out = all_output(&o);
    assert!(o.status.success(), "{out}");
    assert_clean("check-config", &out);
    for shown in [
        "sasl.oauthbearer.config: <redacted>",
        "sasl.kerberos.kinit.cmd: <redacted>",
        "rest_base_url: http://<redacted>@127.0.0.1:9/bigquery/v2",
        "auto.offset.reset: earliest",
        "security.protocol: SASL_PLAINTEXT",
    ] {
        assert!(out.contains(shown), "missing {shown:?}:\n{out}");
    }

    // `run` without the BigQuery sink reaches the consumer, whose creation fails on the
    // OAUTHBEARER settings: the start-up line and the error are printed, the secrets are not.
    let cfg = config(dir.path(), "oauth-run.yaml", OAUTH, &brokers(), "");
    let o = run(&["run", "-c", &cfg]);
    let out = all_output(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(out.contains("\"message\":\"starting: "), "{out}");
    assert!(
        out.contains("cannot create the Kafka consumer")
            && out.contains("not supported in this build"),
        "{out}"
    );
    assert_clean("run (start-up error)", &out);
}

const ARIZE: &str = r#"observation_sinks:
- type: ARIZE
  config:
    api_key: PLANTED-ARIZE-API-KEY
    space_key: PLANTED-ARIZE-SPACE-KEY
    uri: http://127.0.0.1:9/v1"#;

#[test]
fn arize_keys_are_never_printed() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), "arize.yaml", "", &brokers(), ARIZE);
    let o = run(&["check-config", "-c", &cfg]);
    let out = all_output(&o);
    assert!(o.status.success(), "{out}");
    assert_clean("check-config (ARIZE)", &out);
    for shown in [
        "type: ARIZE",
        "api_key: <redacted>",
        "space_key: <redacted>",
        "uri: http://127.0.0.1:9/v1",
    ] {
        assert!(out.contains(shown), "missing {shown:?}:\n{out}");
    }
    // `run` builds the ARIZE sink, prints its start-up line, then fails creating the consumer
    // (the OAUTHBEARER settings): neither key is printed.
    let cfg = config(dir.path(), "arize-run.yaml", OAUTH, &brokers(), ARIZE);
    let o = run(&["run", "-c", &cfg]);
    let out = all_output(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(out.contains("\"message\":\"starting: "), "{out}");
    assert_clean("run (ARIZE)", &out);
}

#[test]
fn forwarded_librdkafka_lines_print_no_secret() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), "plain.yaml", PLAIN, &brokers(), "");
    let mut child = bin()
        .args(["run", "-c", &cfg])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    // Bound the wait: stop the publisher if the line never comes (no assertion on time).
    let watchdog = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_secs(60));
        let _ = std::process::Command::new("kill")
            .arg(pid.to_string())
            .status();
    });
    let mut text = String::new();
    let mut forwarded = 0;
    for line in BufReader::new(child.stderr.take().unwrap()).lines() {
        let line = line.unwrap();
        if line.contains("librdkafka: ") {
            forwarded += 1;
        }
        text.push_str(&line);
        text.push('\n');
        if forwarded >= 2 {
            break;
        }
    }
    let _ = std::process::Command::new("kill")
        .arg(pid.to_string())
        .status();
    let _ = child.wait();
    drop(watchdog);
    assert!(forwarded >= 2, "librdkafka's lines are forwarded:\n{text}");
    assert!(text.contains("\"message\":\"starting: "), "{text}");
    assert_clean("run (forwarded librdkafka lines)", &text);
}

#[test]
fn credentials_in_bootstrap_servers_are_a_configuration_error_that_does_not_echo_them() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(
        dir.path(),
        "boot.yaml",
        "",
        "user:PLANTED-BOOTSTRAP-PASSWORD@127.0.0.1:9092",
        "",
    );
    for cmd in ["check-config", "run"] {
        let o = run(&[cmd, "-c", &cfg]);
        let out = all_output(&o);
        assert_eq!(o.status.code(), Some(2), "{cmd}: {out}");
        assert!(
            out.contains("observation_source.config.bootstrap_servers: holds credentials"),
            "{cmd}: {out}"
        );
        assert_clean(cmd, &out);
    }
}

fn spec(dir: &Path, name: &str, bootstrap: &str) -> String {
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/example-spec.yaml"),
    )
    .unwrap()
    .replace("# autoscaling: {", "autoscaling: {")
    .replace("kafka.example:9092", bootstrap)
    .replace(
        "        auto.offset.reset: earliest",
        "        auto.offset.reset: earliest\n        sasl.oauthbearer.config: PLANTED-IN-SPEC\n        sasl.password: PLANTED-SPEC-PASSWORD",
    )
    .replace(
        "      ttl_days: 14\n",
        "      ttl_days: 14\n  - type: ARIZE\n    config:\n      api_key: PLANTED-SPEC-ARIZE-API-KEY\n      space_key: PLANTED-SPEC-ARIZE-SPACE-KEY\n",
    );
    assert!(text.contains("PLANTED-IN-SPEC"), "the spec was changed");
    assert!(
        text.contains("PLANTED-SPEC-ARIZE-API-KEY"),
        "the spec was changed"
    );
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_string()
}

#[test]
fn bootstrap_dry_run_prints_no_secret() {
    let dir = tempfile::tempdir().unwrap();
    let good = spec(dir.path(), "spec.yaml", "kafka.example:9092");
    let o = run(&["bootstrap", "apply", "--dry-run", "--spec", &good]);
    let out = all_output(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(
        out.contains("kind: ScaledObject") && out.contains("bootstrapServers: kafka.example:9092"),
        "{out}"
    );
    assert_clean("bootstrap apply --dry-run", &out);

    let bad = spec(
        dir.path(),
        "bad.yaml",
        "user:PLANTED-BOOTSTRAP-PASSWORD@kafka.example:9092",
    );
    let o = run(&["bootstrap", "apply", "--dry-run", "--spec", &bad]);
    let out = all_output(&o);
    assert_eq!(o.status.code(), Some(2), "{out}");
    assert!(
        out.contains("bootstrap_servers: holds credentials"),
        "{out}"
    );
    assert_clean(
        "bootstrap apply --dry-run (credentials in bootstrap_servers)",
        &out,
    );
}

/// `{:?}` of the configuration, its parts and a bootstrap spec prints no planted secret: a
/// `Debug` reaches logs through `?value` fields and panic messages.
#[test]
fn debug_formatting_prints_no_secret() {
    use observation_publisher::bootstrap::Spec;
    use observation_publisher::config::{load_value, Config, Needs};
    let dir = tempfile::tempdir().unwrap();
    let sinks = format!(
        "{BIGQUERY}\n- type: ARIZE\n  config: {{api_key: PLANTED-ARIZE-API-KEY, space_key: PLANTED-ARIZE-SPACE-KEY, uri: 'http://u:PLANTED-URI-PASSWORD@127.0.0.1:9/v1'}}\n- type: MAXCOMPUTE\n  config: {{project: p, dataset: d, access_key_id: PLANTED-AK-ID, access_key_secret: PLANTED-AK-SECRET, access_url: 'http://u:PLANTED-MC-PASSWORD@odps.example/api', tunnel_endpoint: 'http://u:PLANTED-TUNNEL-PASSWORD@dt.example'}}"
    );
    let oauth_rest: Vec<&str> = (OAUTH.lines())
        .filter(|l| {
            !l.contains("security.protocol")
                && !l.contains("sasl.mechanisms")
                && !l.contains("kinit")
        })
        .collect();
    let consumer = format!(
        "{PLAIN}\n      ssl.key.pem: PLANTED-KEY-PEM\n{}",
        oauth_rest.join("\n")
    );
    let path = config(
        dir.path(),
        "debug.yaml",
        &consumer,
        "127.0.0.1:9092",
        &sinks,
    );
    let v = load_value(Some(Path::new(&path)), [], &[]).unwrap();
    let (c, _) = Config::from_value(&v, Needs::RUN).unwrap_or_else(|p| panic!("{p}"));
    let source = c.observation_source.as_ref().unwrap();
    assert_eq!(c.observation_sinks.len(), 3);
    for (what, text) in [
        ("Config", format!("{c:?}")),
        ("KafkaSource", format!("{source:?}")),
        ("sinks", format!("{:?}", c.observation_sinks)),
    ] {
        assert_clean(what, &text);
    }
    // What may be shown still is.
    let text = format!("{source:?}");
    assert!(
        text.contains("\"security.protocol\", \"SASL_PLAINTEXT\"")
            && text.contains("\"sasl.password\", \"<redacted>\""),
        "{text}"
    );

    let spec_path = spec(dir.path(), "spec.yaml", "kafka.example:9092");
    let (s, _) = Spec::load(Path::new(&spec_path)).unwrap_or_else(|p| panic!("{p}"));
    assert_clean("Spec", &format!("{s:?}"));
    assert_clean("Spec (pretty)", &format!("{s:#?}"));
}
