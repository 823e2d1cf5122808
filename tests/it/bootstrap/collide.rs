//! Two model identities whose `{project}-{model}-{version}` read the same, applied to one
//! namespace: two independent object sets (golden file), and deleting one leaves the other.

use super::fake_apiserver::{FakeApiServer, Rollouts};
use super::golden::check_golden;
use super::{opts, spec, NS};
use observation_publisher::bootstrap::apply::{apply, ApplyOutcome};
use observation_publisher::bootstrap::delete::delete;
use serde_json::{json, Value};

/// What the fake API server holds, without server-set metadata: names, identity labels, what
/// each Deployment mounts and runs as, and the consumer group and topic of each config Secret.
fn object_sets(fake: &FakeApiServer) -> String {
    let mut out = serde_json::Map::new();
    for plural in ["serviceaccounts", "secrets", "configmaps", "deployments"] {
        let mut objs = Vec::new();
        for name in fake.names(NS, plural) {
            let o = fake.get(NS, plural, &name).unwrap();
            let labels: serde_json::Map<String, Value> = o["metadata"]["labels"]
                .as_object()
                .unwrap()
                .iter()
                .filter(|(k, _)| k.starts_with("observation-publisher.caraml.dev/"))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            let mut summary = json!({"name": name, "labels": labels});
            match plural {
                "deployments" => {
                    let pod = &o["spec"]["template"]["spec"];
                    summary["selector"] = o["spec"]["selector"]["matchLabels"].clone();
                    summary["serviceAccountName"] = pod["serviceAccountName"].clone();
                    summary["configSecret"] = pod["volumes"][0]["secret"]["secretName"].clone();
                }
                "secrets" => {
                    let secret: k8s_openapi::api::core::v1::Secret =
                        serde_json::from_value(o.clone()).unwrap();
                    let bytes = &secret.data.unwrap()["config.yaml"].0;
                    let cfg: serde_yaml_ng::Value = serde_yaml_ng::from_slice(bytes).unwrap();
                    let sc = &cfg["observation_source"]["config"];
                    summary["group_id"] = json!(sc["group_id"].as_str());
                    summary["topic"] = json!(sc["topic"].as_str());
                }
                _ => {}
            }
            objs.push(summary);
        }
        out.insert(plural.into(), Value::Array(objs));
    }
    serde_yaml_ng::to_string(&Value::Object(out)).unwrap()
}

#[tokio::test]
async fn colliding_identities_get_two_independent_object_sets() {
    let fake = FakeApiServer::start(Rollouts::Complete).await;
    let c = fake.client();
    let a = spec("fraud-team", "model", "2", 1, "");
    let b = spec("fraud", "team-model", "2", 1, "");
    for s in [&a, &b] {
        assert!(matches!(
            apply(&c, s, opts()).await.unwrap(),
            ApplyOutcome::Running { .. }
        ));
    }
    for plural in ["serviceaccounts", "secrets", "configmaps", "deployments"] {
        assert_eq!(
            fake.names(NS, plural).len(),
            2,
            "{plural}: {:?}",
            fake.names(NS, plural)
        );
    }
    let sets = object_sets(&fake);
    check_golden("colliding-identities.objects.yaml", &sets);

    // Deleting one leaves every object of the other as it was.
    let before: Vec<Value> = ["serviceaccounts", "secrets", "deployments"]
        .iter()
        .flat_map(|p| fake.names(NS, p).into_iter().map(move |n| (*p, n)))
        .filter_map(|(p, n)| fake.get(NS, p, &n))
        .filter(|o| o["metadata"]["labels"]["observation-publisher.caraml.dev/project"] == "fraud")
        .collect();
    assert_eq!(before.len(), 3);
    let report = delete(&c, &a, None).await.unwrap();
    assert_eq!(report.deleted.len(), 4, "{report:?}");
    for plural in ["serviceaccounts", "secrets", "configmaps", "deployments"] {
        assert_eq!(fake.names(NS, plural).len(), 1, "{plural}");
    }
    for o in before {
        let plural = match o["kind"].as_str().unwrap() {
            "ServiceAccount" => "serviceaccounts",
            "Secret" => "secrets",
            _ => "deployments",
        };
        let name = o["metadata"]["name"].as_str().unwrap();
        assert_eq!(
            fake.get(NS, plural, name).as_ref(),
            Some(&o),
            "{plural}/{name}"
        );
    }
}
