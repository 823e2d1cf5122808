//! The optional objects on the fake API server, each checked against its CRD's schema there:
//! KEDA on a secured Kafka cluster (ScaledObject + TriggerAuthentication reading the version's
//! Secret), the PodMonitor, and the PodDisruptionBudget; and that `apply` of a later revision,
//! `delete` and `status` cover them.

use super::fake_apiserver::{FakeApiServer, Rollouts};
use super::{kafka_bootstrap, opts, spec_text, NS};
use base64::Engine;
use observation_publisher::bootstrap::apply::apply;
use observation_publisher::bootstrap::delete::delete;
use observation_publisher::bootstrap::status::status;
use observation_publisher::bootstrap::Spec;
use serde_json::Value;

const PASSWORD: &str = "pa55-w0rd-not-for-scaledobjects";
const CA: &str = "-----BEGIN CERTIFICATE-----\nMIIBfake\n-----END CERTIFICATE-----";

/// A spec whose consumer config reaches Kafka over SASL_SSL with SCRAM and a private CA.
fn secured(revision: u64, extra: &str) -> Spec {
    let plain = format!("{{bootstrap_servers: \"{}\"}}", kafka_bootstrap());
    let text = spec_text("sample", "credit-model", "3", revision, extra);
    assert!(text.contains(&plain));
    let text = text.replace(
        &plain,
        &format!(
            "{{bootstrap_servers: \"{}\", additional_consumer_config: {{security.protocol: SASL_SSL, sasl.mechanisms: SCRAM-SHA-512, sasl.username: publisher, sasl.password: {PASSWORD}, ssl.ca.pem: {CA:?}}}}}",
            kafka_bootstrap()
        ),
    );
    Spec::parse(&text).unwrap_or_else(|p| panic!("{p}")).0
}

fn secret_item(fake: &FakeApiServer, s: &Spec, key: &str) -> Option<String> {
    let secret = fake.get(NS, "secrets", &s.names.config_secret)?;
    let b64 = secret["data"][key].as_str()?;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(b64)
        .expect("base64");
    Some(String::from_utf8(bytes).expect("utf-8"))
}

#[tokio::test]
async fn keda_reads_lag_on_a_secured_cluster_with_credentials_from_the_version_s_secret() {
    let fake = FakeApiServer::start(Rollouts::Complete).await;
    let c = fake.client();
    let s = secured(
        1,
        "autoscaling: {min_replicas: 1, max_replicas: 3, lag_threshold: 500}",
    );
    apply(&c, &s, opts()).await.unwrap();
    let name = &s.names.workload;

    let so = fake.get(NS, "scaledobjects", name).expect("ScaledObject");
    let trigger = &so["spec"]["triggers"][0];
    assert_eq!(trigger["metadata"]["sasl"], "scram_sha512");
    assert_eq!(trigger["metadata"]["tls"], "enable");
    assert_eq!(trigger["authenticationRef"]["name"], name.as_str());
    assert_eq!(
        trigger["authenticationRef"]["kind"],
        "TriggerAuthentication"
    );
    let so_text = so.to_string();
    assert!(!so_text.contains(PASSWORD) && !so_text.contains("MIIBfake"));

    // Every parameter KEDA needs comes from a key of the config Secret holding the same value
    // the consumer uses.
    let ta = fake
        .get(NS, "triggerauthentications", name)
        .expect("TriggerAuthentication");
    let refs = ta["spec"]["secretTargetRef"].as_array().unwrap();
    let mut got: Vec<(String, String)> = refs
        .iter()
        .map(|r| {
            assert_eq!(r["name"], s.names.config_secret.as_str());
            let value = secret_item(&fake, &s, r["key"].as_str().unwrap())
                .unwrap_or_else(|| panic!("{r} names no Secret item"));
            (r["parameter"].as_str().unwrap().to_string(), value)
        })
        .collect();
    got.sort();
    let want = [
        ("ca", CA),
        ("password", PASSWORD),
        ("username", "publisher"),
    ];
    assert_eq!(
        got,
        want.map(|(p, v)| (p.to_string(), v.to_string())).to_vec()
    );
    // The pods still mount only config.yaml.
    let d = fake.get(NS, "deployments", name).unwrap();
    let items = &d["spec"]["template"]["spec"]["volumes"][0]["secret"]["items"];
    assert_eq!(items.as_array().unwrap().len(), 1, "{items}");

    let st = status(&c, &s, None).await.unwrap();
    assert!(st.objects.scaled_object && st.objects.trigger_authentication);
    // Up to three pods: one may be evicted at a time.
    assert!(st.objects.disruption_budget);

    // A revision without autoscaling removes both KEDA objects and the credentials' copies.
    let s2 = secured(2, "");
    apply(&c, &s2, opts()).await.unwrap();
    assert!(fake.get(NS, "scaledobjects", name).is_none());
    assert!(fake.get(NS, "triggerauthentications", name).is_none());
    assert!(secret_item(&fake, &s2, "keda-password").is_none());
    assert!(secret_item(&fake, &s2, "config.yaml").is_some());
    let st = status(&c, &s2, None).await.unwrap();
    assert!(!st.objects.trigger_authentication && !st.objects.disruption_budget);

    // And delete takes everything of a version that has them all.
    let s3 = secured(
        3,
        "autoscaling: {max_replicas: 2}\nmonitoring: {pod_monitor: true}",
    );
    apply(&c, &s3, opts()).await.unwrap();
    let report = delete(&c, &s3, None).await.unwrap();
    for kind in [
        "ScaledObject",
        "TriggerAuthentication",
        "PodMonitor",
        "PodDisruptionBudget",
        "Deployment",
        "Secret",
    ] {
        assert!(
            report
                .deleted
                .iter()
                .any(|d| d.starts_with(&format!("{kind}/"))),
            "{kind} in {report:?}"
        );
    }
    for plural in [
        "scaledobjects",
        "triggerauthentications",
        "podmonitors",
        "poddisruptionbudgets",
    ] {
        assert!(fake.names(NS, plural).is_empty(), "{plural}");
    }
}

#[tokio::test]
async fn a_disruption_budget_exists_only_while_more_than_one_pod_may_run() {
    let fake = FakeApiServer::start(Rollouts::Complete).await;
    let c = fake.client();
    let one = super::spec("sample", "credit-model", "3", 1, "replicas: 1");
    apply(&c, &one, opts()).await.unwrap();
    assert!(fake.names(NS, "poddisruptionbudgets").is_empty());
    let two = super::spec("sample", "credit-model", "3", 2, "replicas: 2");
    apply(&c, &two, opts()).await.unwrap();
    let pdb = fake
        .get(NS, "poddisruptionbudgets", &two.names.workload)
        .expect("PodDisruptionBudget");
    assert_eq!(pdb["spec"]["maxUnavailable"], 1);
    let d = fake.get(NS, "deployments", &two.names.workload).unwrap();
    assert_eq!(
        pdb["spec"]["selector"]["matchLabels"],
        d["spec"]["selector"]["matchLabels"]
    );
    let back = super::spec("sample", "credit-model", "3", 3, "replicas: 1");
    apply(&c, &back, opts()).await.unwrap();
    assert!(fake.names(NS, "poddisruptionbudgets").is_empty());
}

#[tokio::test]
async fn a_pod_monitor_only_when_asked_for_and_fit_for_the_operator_s_schema() {
    let fake = FakeApiServer::start(Rollouts::Complete).await;
    let c = fake.client();
    let plain = super::spec("sample", "credit-model", "3", 1, "");
    apply(&c, &plain, opts()).await.unwrap();
    assert!(fake.names(NS, "podmonitors").is_empty());
    let asked = super::spec(
        "sample",
        "credit-model",
        "3",
        2,
        "monitoring: {pod_monitor: true, interval: 15s, labels: {release: kube-prometheus}}",
    );
    apply(&c, &asked, opts()).await.unwrap();
    let pm: Value = fake
        .get(NS, "podmonitors", &asked.names.workload)
        .expect("PodMonitor");
    assert_eq!(pm["metadata"]["labels"]["release"], "kube-prometheus");
    let d = fake.get(NS, "deployments", &asked.names.workload).unwrap();
    let ports = &d["spec"]["template"]["spec"]["containers"][0]["ports"];
    assert_eq!(
        pm["spec"]["podMetricsEndpoints"][0]["port"],
        ports[0]["name"]
    );
    assert_eq!(
        pm["spec"]["selector"]["matchLabels"],
        d["spec"]["selector"]["matchLabels"]
    );

    // Without the operator's CRD the apply fails and says what is missing.
    let bare = FakeApiServer::start_with(Rollouts::Complete, false).await;
    let err = apply(&bare.client(), &asked, opts()).await.unwrap_err();
    assert!(err.to_string().contains("Prometheus Operator"), "{err}");
}

/// The verb RBAC checks for a request the fake saw (server-side apply is a `patch`).
fn verb(r: &super::fake_apiserver::Recorded) -> &'static str {
    match r.method.as_str() {
        "GET" => "get",
        "POST" => "create",
        "PUT" => "update",
        "PATCH" => "patch",
        "DELETE" => "delete",
        other => panic!("unexpected {other}"),
    }
}

/// deploy/rbac.yaml's Role allows every request bootstrap makes, with every object enabled.
#[tokio::test]
async fn the_shipped_role_allows_every_request_bootstrap_makes() {
    let text = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/rbac.yaml"),
    )
    .unwrap();
    let role = serde_yaml_ng::Deserializer::from_str(&text)
        .map(|d| <Value as serde::Deserialize>::deserialize(d).unwrap())
        .find(|d| d["kind"] == "Role")
        .expect("a Role");
    let allowed = |group: &str, plural: &str, verb: &str| {
        role["rules"].as_array().unwrap().iter().any(|r| {
            let has = |field: &str, v: &str| {
                r[field]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|x| x.as_str() == Some(v))
            };
            has("apiGroups", group) && has("resources", plural) && has("verbs", verb)
        })
    };
    let fake = FakeApiServer::start(Rollouts::Complete).await;
    let c = fake.client();
    let s = secured(
        1,
        "autoscaling: {max_replicas: 2}\nmonitoring: {pod_monitor: true}",
    );
    apply(&c, &s, opts()).await.unwrap();
    status(&c, &s, None).await.unwrap();
    apply(&c, &secured(2, "replicas: 1"), opts()).await.unwrap();
    delete(&c, &s, None).await.unwrap();
    let requests = fake.requests();
    let mut plurals = std::collections::BTreeSet::new();
    for r in &requests {
        // /api/v1/namespaces/NS/PLURAL/… or /apis/GROUP/VERSION/namespaces/NS/PLURAL/…
        let segs: Vec<&str> = r.path.trim_matches('/').split('/').collect();
        let group = if segs[0] == "api" { "" } else { segs[1] };
        let at = segs.iter().position(|s| *s == "namespaces").unwrap();
        let plural = segs[at + 2];
        assert!(
            allowed(group, plural, verb(r)),
            "deploy/rbac.yaml does not allow {} {group}/{plural}",
            verb(r)
        );
        plurals.insert(plural);
    }
    for p in [
        "scaledobjects",
        "triggerauthentications",
        "podmonitors",
        "poddisruptionbudgets",
    ] {
        assert!(plurals.contains(p), "{p} never requested: {plurals:?}");
    }
}
