//! Tests of the spec reader (a sibling file keeps `spec.rs` to its job).

use super::*;

pub(crate) const MINIMAL: &str = r#"
project: sample
model: credit-model
version: "3"
revision: 2
namespace: mlobs
image: registry.example/observation-publisher:0.1.0
config:
  inference_schema:
    session_id_column: session_id
    row_id_column: row_id
    model_prediction_output:
      output_class: BinaryClassificationOutput
      prediction_score_column: prediction_score
      prediction_label_column: prediction_label
      positive_class_label: fraud
      negative_class_label: non_fraud
    feature_types: {amount: float64}
  observation_sinks:
  - type: BIGQUERY
    config: {project: gcp-project, dataset: mlobs, ttl_days: 14}
  observation_source:
    config: {bootstrap_servers: "kafka:9092"}
"#;

#[test]
fn minimal_spec_gets_merlin_defaults() {
    let (s, warnings) = Spec::parse(MINIMAL).unwrap_or_else(|p| panic!("{p}"));
    assert_eq!(s.topic(), "caraml-sample-credit-model-3-prediction-log");
    let hash = crate::bootstrap::names::identity_hash("sample", "credit-model", "3");
    assert_eq!(
        s.group_id(),
        format!("observation-publisher-sample-credit-model-3-{hash}")
    );
    // Colliding identities (Merlin's topic names collide too) get separate groups.
    assert_ne!(
        default_group("fraud-team", "model", "2"),
        default_group("fraud", "team-model", "2")
    );
    assert_eq!(s.replicas, 1);
    assert_eq!(s.revision, 2);
    assert_eq!(s.metrics_port(), 8000);
    assert_eq!(s.termination_grace_seconds(), 45, "30 s drain + 15");
    assert!(
        warnings.iter().any(|w| w.contains("identity")),
        "{warnings:?}"
    );
    let yaml = s.config_yaml();
    assert!(
        yaml.contains("model_version: '3'") || yaml.contains("model_version: \"3\""),
        "{yaml}"
    );
    // The generated config passes the run config's own validation.
    let v: Value = serde_yaml_ng::from_str(&yaml).unwrap();
    Config::from_value(&v, Needs::RUN).unwrap();
}

#[test]
fn all_problems_are_reported_at_once() {
    let bad = MINIMAL
        .replace("revision: 2", "revision: 0")
        .replace("namespace: mlobs", "namespace: Not_Valid\nreplicas: 0\nlabels: {app.kubernetes.io/name: x, ok: \"bad value\"}\nresources: {requests: {cpu: lots}}\nidentity: {gcp_service_account: nobody, key_secret: {name: Bad_Name}}\nsurprise: 1")
        .replace("bootstrap_servers: \"kafka:9092\"", "topic: t");
    let p = Spec::parse(&bad).unwrap_err();
    let text = p.to_string();
    for needle in [
        "revision:",
        "namespace:",
        "replicas:",
        "labels.app.kubernetes.io/name: reserved",
        "labels.ok:",
        "resources.requests.cpu:",
        "identity.gcp_service_account:",
        "identity.key_secret.name:",
        "surprise: unknown key",
        "config.observation_source.config.bootstrap_servers",
    ] {
        assert!(text.contains(needle), "missing {needle:?} in\n{text}");
    }
}

#[test]
fn config_identity_must_match_the_spec() {
    let bad = MINIMAL.replace(
        "  inference_schema:",
        "  model_version: \"4\"\n  inference_schema:",
    );
    let text = Spec::parse(&bad).unwrap_err().to_string();
    assert!(text.contains("config.model_version: must equal"), "{text}");
}

#[test]
fn local_files_must_be_on_a_persistent_volume() {
    let bad = MINIMAL.replace(
        "  observation_source:",
        "  dead_letter: {target: file, path: dlq/dead.bin}\n  local_sink: {path: /tmp/rows}\n  server: {listen: \"127.0.0.1:8000\"}\n  observation_source:",
    );
    let text = Spec::parse(&bad).unwrap_err().to_string();
    for key in ["config.dead_letter.path", "config.local_sink.path"] {
        assert!(
            text.contains(&format!("{key}: "))
                && text.contains("would be on an emptyDir, which dies with its pod"),
            "{key}: {text}"
        );
    }
    assert!(
        text.contains("lost after its offsets were committed"),
        "{text}"
    );
    assert!(text.contains("config.server.listen"), "{text}");
    // On a persistent volume the spec names: accepted (relative paths are relative to the
    // working directory).
    let ok = bad
        .replace("  server: {listen: \"127.0.0.1:8000\"}\n", "")
        .replace("path: dlq/dead.bin", "path: persistent/dlq/dead.bin")
        .replace(
            "path: /tmp/rows",
            "path: /var/lib/observation-publisher/persistent/rows",
        )
        .replace(
            "namespace: mlobs",
            "namespace: mlobs\nstorage: {persistent: {claim: publisher-data}}",
        );
    let (s, _) = Spec::parse(&ok).unwrap_or_else(|p| panic!("{p}"));
    assert_eq!(s.storage.persistent.unwrap().claim, "publisher-data");
    let elsewhere = ok.replace("path: persistent/dlq/dead.bin", "path: dlq/dead.bin");
    let text = Spec::parse(&elsewhere).unwrap_err().to_string();
    assert!(
        text.contains("config.dead_letter.path: dlq/dead.bin is not on the persistent volume"),
        "{text}"
    );
}

#[test]
fn key_secret_forms() {
    let s = MINIMAL.replace(
        "namespace: mlobs",
        "namespace: mlobs\nidentity: {key_secret: gcp-key}",
    );
    let (s, _) = Spec::parse(&s).unwrap();
    assert_eq!(
        s.identity.key_secret,
        Some(KeySecret {
            name: "gcp-key".into(),
            key: DEFAULT_KEY_ITEM.into()
        })
    );
    let s = MINIMAL.replace(
        "namespace: mlobs",
        "namespace: mlobs\nidentity: {key_secret: {name: gcp-key, key: key.json}}",
    );
    let (s, _) = Spec::parse(&s).unwrap();
    assert_eq!(s.identity.key_secret.unwrap().key, "key.json");
}

#[test]
fn identity_says_which_credentials_the_bigquery_sink_gets() {
    let warned = |identity: &str| {
        let text = MINIMAL.replace("namespace: mlobs", &format!("namespace: mlobs\n{identity}"));
        let (s, warnings) = Spec::parse(&text).unwrap_or_else(|p| panic!("{p}"));
        let w: Vec<_> = warnings
            .into_iter()
            .filter(|w| w.starts_with("identity"))
            .collect();
        (s, w)
    };
    // Nothing named: the warning says what is true under either kind of node pool.
    let (s, w) = warned("");
    assert_eq!(w.len(), 1, "{w:?}");
    let want = format!(
        "Kubernetes ServiceAccount mlobs/{} itself",
        s.names.workload
    );
    assert!(w[0].contains(&want), "{w:?}");
    assert!(
        w[0].contains("gcp_workload_identity: direct") && w[0].contains("node's service account")
    );
    assert!(!w[0].contains("default credentials"), "{w:?}");
    // Direct Workload Identity, a Google service account or a key: nothing to warn about.
    for named in [
        "identity: {gcp_workload_identity: direct}",
        "identity: {gcp_service_account: p@g.iam.gserviceaccount.com}",
        "identity: {key_secret: gcp-key}",
    ] {
        let (s, w) = warned(named);
        assert!(w.is_empty(), "{named}: {w:?}");
        assert_eq!(s.identity.gcp_direct, named.contains("direct"));
    }
    // No sink that needs Google credentials: nothing to warn about either.
    let arize = MINIMAL.replace(
        "- type: BIGQUERY\n    config: {project: gcp-project, dataset: mlobs, ttl_days: 14}",
        "- type: ARIZE\n    config: {api_key: a-key, space_key: s-key}",
    );
    let (_, warnings) = Spec::parse(&arize).unwrap_or_else(|p| panic!("{p}"));
    assert!(
        !warnings.iter().any(|w| w.starts_with("identity")),
        "{warnings:?}"
    );
    // An Alibaba RAM role.
    let (s, _) = warned("identity: {alibaba_ram_role: mlobs-publisher.v1}");
    assert_eq!(
        s.identity.alibaba_ram_role.as_deref(),
        Some("mlobs-publisher.v1")
    );
}

#[test]
fn identity_problems() {
    let text = MINIMAL.replace(
        "namespace: mlobs",
        "namespace: mlobs\nidentity: {gcp_workload_identity: direct, gcp_service_account: p@g.iam.gserviceaccount.com, alibaba_ram_role: 'acs:ram::1:role/x'}",
    );
    let got = Spec::parse(&text).unwrap_err().0;
    assert_eq!(
        got,
        [
            "identity.gcp_workload_identity: direct means no Google service account: leave out gcp_service_account, or this",
            "identity.alibaba_ram_role: \"acs:ram::1:role/x\" is not a RAM role name (1 to 64 letters, digits, '.' and '-'; the name, not the ARN)",
        ]
    );
    let text = MINIMAL.replace(
        "namespace: mlobs",
        "namespace: mlobs\nidentity: {gcp_workload_identity: yes-please}",
    );
    let got = Spec::parse(&text).unwrap_err().0;
    assert!(
        got[0].starts_with("identity.gcp_workload_identity: \"yes-please\": expected direct"),
        "{got:?}"
    );
}

#[test]
fn autoscaling_bounds() {
    let s = MINIMAL.replace(
        "namespace: mlobs",
        "namespace: mlobs\nautoscaling: {min_replicas: 3, max_replicas: 2}",
    );
    let text = Spec::parse(&s).unwrap_err().to_string();
    assert!(
        text.contains("autoscaling.max_replicas: must be at least"),
        "{text}"
    );
}

/// Pins the wording, paths and order of the spec's problems (operators and docs quote them).
#[test]
fn spec_problems_keep_their_wording() {
    let problems = |text: &str| Spec::parse(text).unwrap_err().0;
    let got = problems(
        "surprise: 1\nmodel: \"\"\nversion: [1]\nrevision: null\nnamespace: Not_Valid\nimage: a b\nimage_pull_policy: Sometimes\nreplicas: 0\nresources: {requests: {cpu: lots, gpu: 1}, limits: 3, other: x}\nlabels: {ok: \"bad value\", app.kubernetes.io/name: x}\nidentity: {gcp_service_account: nobody, key_secret: {name: Bad_Name, key: \"a b\", extra: 1}, who: 1}\nautoscaling: {min_replicas: 0, lag_threshold: x}\n",
    );
    let want = [
        "surprise: unknown key; expected one of project, model, version, revision, namespace, image, image_pull_policy, replicas, resources, labels, identity, autoscaling, monitoring, storage, config",
        "project: required",
        "model: must not be empty",
        "version: must be a string",
        "revision: must be an integer from 1 to 18446744073709551615",
        "namespace: \"Not_Valid\" is not a valid namespace name",
        "image: must not contain whitespace",
        "image_pull_policy: expected Always, IfNotPresent or Never",
        "replicas: must be an integer from 1 to 1000",
        "resources.other: unknown key; expected one of requests, limits",
        "resources.requests.gpu: unknown key; expected one of cpu, memory, ephemeral-storage",
        "resources.requests.cpu: must be a Kubernetes quantity such as 500m, 1, 512Mi or 1Gi",
        "resources.limits: must be a mapping",
        "labels.ok: not a valid label value (at most 63 of A-Z a-z 0-9 . _ -, alphanumeric at both ends)",
        "labels.app.kubernetes.io/name: reserved: bootstrap sets the labels under this prefix itself",
        "identity.who: unknown key; expected one of gcp_service_account, gcp_workload_identity, key_secret, alibaba_ram_role",
        "identity.gcp_service_account: \"nobody\" is not a service-account email",
        "identity.key_secret.extra: unknown key; expected one of name, key",
        "identity.key_secret.name: \"Bad_Name\" is not a valid Secret name",
        "identity.key_secret.key: \"a b\" is not a valid Secret item name",
        "autoscaling.min_replicas: must be an integer from 1 to 1000",
        "autoscaling.max_replicas: required",
        "autoscaling.lag_threshold: must be an integer from 1 to 18446744073709551615",
        "config: required: the publisher's run config (Merlin's shape)",
    ];
    assert_eq!(got, want);
    let got = problems("[1]");
    assert_eq!(got, ["the spec must be a YAML mapping"]);
    let got = problems(
        "project: p\nmodel: m\nversion: 1\nrevision: 1\nnamespace: n\nimage: i\nresources: 1\nlabels: [a]\nidentity: {key_secret: [x]}\nautoscaling: {min_replicas: 3, max_replicas: 2}\nconfig: 1\n",
    );
    let want = [
        "resources: must be a mapping",
        "labels: must be a mapping of label keys to values",
        "identity.key_secret: must be a Secret name or {name, key}",
        "autoscaling.max_replicas: must be at least min_replicas (3)",
        "config: must be a mapping",
    ];
    assert_eq!(got, want);
}

#[test]
fn quantities() {
    for ok in ["1", "500m", "0.5", "512Mi", "1Gi", "1e3", "2k"] {
        assert!(is_quantity(ok), "{ok}");
    }
    for bad in ["", "lots", "1.2.3", "-1", "1Gb", "Mi"] {
        assert!(!is_quantity(bad), "{bad}");
    }
}

#[test]
fn memory_resources_default_to_the_formula_s_bound() {
    let (s, _) = Spec::parse(MINIMAL).unwrap_or_else(|p| panic!("{p}"));
    let bound = crate::footprint::Footprint::of(&s.config, true).bound();
    assert!(bound <= 128 << 20, "{bound}");
    assert_eq!(
        s.resources.limits.get("memory"),
        Some(&format!("{}Mi", bound.div_ceil(1 << 20)))
    );
    assert_eq!(
        s.resources.requests.get("memory").map(String::as_str),
        Some(DEFAULT_MEMORY_REQUEST)
    );
    assert_eq!(
        s.resources.requests.get("cpu").map(String::as_str),
        Some(DEFAULT_CPU_REQUEST)
    );
    assert_eq!(
        s.resources.limits.get("cpu"),
        None,
        "no CPU limit by default"
    );

    // A larger budget raises the limit with it.
    let big = MINIMAL.replace(
        "  observation_source:",
        "  batching: {max_inflight_bytes: 256MiB}\n  observation_source:",
    );
    let (b, _) = Spec::parse(&big).unwrap_or_else(|p| panic!("{p}"));
    let limit = |s: &Spec| quantity_bytes(&s.resources.limits["memory"]).unwrap();
    assert!(limit(&b) >= limit(&s) + (240 << 20));

    // What the spec sets is kept; a limit below the bound is warned about, and the request
    // never exceeds the limit.
    let low = MINIMAL.replace(
        "namespace: mlobs",
        "namespace: mlobs\nresources: {limits: {memory: 64Mi}}",
    );
    let (l, warnings) = Spec::parse(&low).unwrap_or_else(|p| panic!("{p}"));
    assert_eq!(l.resources.limits["memory"], "64Mi");
    assert_eq!(l.resources.requests["memory"], "64Mi");
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("below the memory formula's bound")),
        "{warnings:?}"
    );
    let set = MINIMAL.replace(
        "namespace: mlobs",
        "namespace: mlobs\nresources: {requests: {memory: 200Mi}, limits: {memory: 1Gi}}",
    );
    let (t, warnings) = Spec::parse(&set).unwrap_or_else(|p| panic!("{p}"));
    assert_eq!(
        (
            t.resources.requests["memory"].as_str(),
            t.resources.limits["memory"].as_str()
        ),
        ("200Mi", "1Gi")
    );
    assert!(
        !warnings.iter().any(|w| w.contains("memory formula")),
        "{warnings:?}"
    );
    assert_eq!(quantity_bytes("96Mi"), Some(96 << 20));
    assert_eq!(quantity_bytes("1G"), Some(1_000_000_000));
    assert_eq!(quantity_bytes("1000"), Some(1000));
    assert_eq!(quantity_bytes("1.5Gi"), None);
}

#[test]
fn cpu_request_defaults_unless_the_spec_sets_cpu_and_no_limit_is_added() {
    let with = |resources: &str| {
        let text = MINIMAL.replace(
            "namespace: mlobs",
            &format!("namespace: mlobs\nresources: {resources}"),
        );
        Spec::parse(&text).unwrap_or_else(|p| panic!("{p}"))
    };
    let cpu = |s: &Spec| {
        (
            s.resources.requests.get("cpu").cloned(),
            s.resources.limits.get("cpu").cloned(),
        )
    };
    let throttled = |w: &[String]| w.iter().any(|w| w.contains("resources.limits.cpu"));

    // Memory only: the CPU request still defaults, and no CPU limit appears.
    let (s, w) = with("{requests: {memory: 200Mi}}");
    assert_eq!(cpu(&s), (Some(DEFAULT_CPU_REQUEST.to_string()), None));
    assert!(!throttled(&w), "{w:?}");
    // A CPU request is kept as written.
    let (s, _) = with("{requests: {cpu: 250m}}");
    assert_eq!(cpu(&s), (Some("250m".to_string()), None));
    // A CPU limit alone: no request is added (Kubernetes requests the limit), and the
    // throttling is warned about.
    let (s, w) = with("{limits: {cpu: 500m}}");
    assert_eq!(cpu(&s), (None, Some("500m".to_string())));
    assert!(throttled(&w), "{w:?}");
    assert!(
        w.iter().any(|w| w.contains("CFS quota")),
        "the warning names the cause: {w:?}"
    );
}

#[test]
fn autoscaling_on_a_cluster_its_scaler_cannot_authenticate_to_is_refused() {
    let secured = |extra: &str| {
        MINIMAL
            .replace(
                "namespace: mlobs",
                "namespace: mlobs\nautoscaling: {max_replicas: 3}",
            )
            .replace(
                r#"{bootstrap_servers: "kafka:9092"}"#,
                &format!(r#"{{bootstrap_servers: "kafka:9092", additional_consumer_config: {{security.protocol: SASL_SSL{extra}}}}}"#),
            )
    };
    let p = Spec::parse(&secured("")).unwrap_err().to_string();
    assert!(
        p.contains(
            "config.observation_source.config.additional_consumer_config: sasl.mechanisms GSSAPI"
        ),
        "{p}"
    );
    let (s, _) = Spec::parse(&secured(
        ", sasl.mechanisms: SCRAM-SHA-512, sasl.username: u, sasl.password: p",
    ))
    .unwrap_or_else(|p| panic!("{p}"));
    let auth = s.autoscaling.unwrap().kafka_auth.unwrap();
    assert_eq!((auth.sasl, auth.tls), (Some("scram_sha512"), true));
    // Without autoscaling nothing is asked of KEDA, so nothing is refused.
    let plain = secured("").replace("autoscaling: {max_replicas: 3}", "");
    assert!(Spec::parse(&plain).is_ok());
}
