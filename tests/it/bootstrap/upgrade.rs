//! Upgrading from the previous naming scheme: objects found under the old names with this
//! version's identity labels are adopted in place (same Deployment, ServiceAccount and consumer
//! group); objects labelled for another version are never changed or deleted. Upgrading from a
//! build whose pods joined the group eagerly: that one rollout recreates the pods.

use super::fake_apiserver::{FakeApiServer, Rollouts};
use super::{opts, spec, NS};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DeleteParams};
use observation_publisher::bootstrap::apply::{apply, ApplyOutcome};
use observation_publisher::bootstrap::delete::delete;
use observation_publisher::bootstrap::manifest::ANNOTATION_REVISION;
use observation_publisher::bootstrap::names::Names;
use observation_publisher::bootstrap::spec::legacy_default_group;
use observation_publisher::bootstrap::status::status;
use observation_publisher::bootstrap::{BootstrapError, Spec};
use serde_json::{json, Value};

/// `s` as the previous bootstrap deployed it: old names, old default group.
fn as_before(s: &Spec) -> Spec {
    let mut old = s.clone();
    old.names = Names::legacy(&s.project, &s.model, &s.version);
    old.set_group_id(&legacy_default_group(&s.project, &s.model, &s.version));
    old
}

fn group_in_secret(fake: &FakeApiServer, name: &str) -> String {
    let o = fake.get(NS, "secrets", name).expect("secret");
    let secret: k8s_openapi::api::core::v1::Secret = serde_json::from_value(o).unwrap();
    let cfg: serde_yaml_ng::Value =
        serde_yaml_ng::from_slice(&secret.data.unwrap()["config.yaml"].0).unwrap();
    cfg["observation_source"]["config"]["group_id"]
        .as_str()
        .unwrap()
        .to_string()
}

#[tokio::test]
async fn an_upgrade_adopts_the_old_objects_and_keeps_the_consumer_group() {
    let fake = FakeApiServer::start(Rollouts::Complete).await;
    let c = fake.client();
    let v1 = spec("sample", "credit-model", "3", 1, "");
    let old = as_before(&v1);
    assert_ne!(old.names, v1.names);
    apply(&c, &old, opts()).await.unwrap();
    let old_group = "observation-publisher-sample-credit-model-3";
    assert_eq!(group_in_secret(&fake, &old.names.config_secret), old_group);
    let uid = fake.get(NS, "deployments", &old.names.workload).unwrap()["metadata"]["uid"].clone();

    // The new bootstrap applies revision 2 of the same version.
    let v2 = spec("sample", "credit-model", "3", 2, "replicas: 2");
    assert_ne!(
        v2.group_id(),
        old_group,
        "a fresh install gets the hashed group"
    );
    let out = apply(&c, &v2, opts()).await.unwrap();
    assert!(
        matches!(out, ApplyOutcome::Running { revision: 2, .. }),
        "{out:?}"
    );
    // Updated in place: no second Deployment, Secret, ServiceAccount or marker.
    for (plural, name) in [
        ("deployments", &old.names.workload),
        ("serviceaccounts", &old.names.workload),
        ("secrets", &old.names.config_secret),
        ("configmaps", &old.names.marker),
    ] {
        assert_eq!(fake.names(NS, plural), vec![name.clone()], "{plural}");
    }
    let d = fake.get(NS, "deployments", &old.names.workload).unwrap();
    assert_eq!(d["metadata"]["uid"], uid, "the same Deployment object");
    assert_eq!(d["metadata"]["annotations"][ANNOTATION_REVISION], "2");
    assert_eq!(d["spec"]["replicas"], 2);
    // The running consumer group is kept: the topic is not consumed again from the start.
    assert_eq!(group_in_secret(&fake, &old.names.config_secret), old_group);

    let st = status(&c, &v2, None).await.unwrap();
    assert!(st.objects.deployment && st.objects.secret && st.objects.service_account);
    assert_eq!(st.rollout, "running");
    let r = delete(&c, &v2, None).await.unwrap();
    // Two replicas: the PodDisruptionBudget too.
    assert_eq!(r.deleted.len(), 5, "{r:?}");
    assert!(fake.names(NS, "deployments").is_empty());
    assert!(fake.names(NS, "configmaps").is_empty());
}

#[tokio::test]
async fn old_objects_of_a_colliding_identity_are_left_to_it() {
    let fake = FakeApiServer::start(Rollouts::Complete).await;
    let c = fake.client();
    let theirs = as_before(&spec("fraud-team", "model", "2", 1, ""));
    apply(&c, &theirs, opts()).await.unwrap();
    let before = fake.get(NS, "deployments", &theirs.names.workload).unwrap();

    // (fraud, team-model, 2) had the same old names; it gets its own new ones.
    let ours = spec("fraud", "team-model", "2", 1, "");
    assert_eq!(
        Names::legacy("fraud", "team-model", "2"),
        theirs.names,
        "the old names collide"
    );
    apply(&c, &ours, opts()).await.unwrap();
    assert_eq!(fake.names(NS, "deployments").len(), 2);
    assert_eq!(
        fake.get(NS, "deployments", &theirs.names.workload).unwrap(),
        before
    );
    delete(&c, &ours, None).await.unwrap();
    assert_eq!(
        fake.names(NS, "deployments"),
        vec![theirs.names.workload.clone()]
    );
}

#[tokio::test]
async fn objects_labelled_for_another_version_are_never_changed_or_deleted() {
    let fake = FakeApiServer::start(Rollouts::Complete).await;
    let c = fake.client();
    let s = spec("sample", "credit-model", "3", 1, "");
    // Someone else's Deployment sits under this version's name.
    let foreign = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": s.names.workload, "namespace": NS,
                     "labels": {"observation-publisher.caraml.dev/project": "other",
                                "observation-publisher.caraml.dev/model": "credit-model",
                                "observation-publisher.caraml.dev/model-version": "3"}},
        "spec": {"replicas": 7},
    });
    fake.put(NS, "deployments", &s.names.workload, foreign);
    let before = fake.get(NS, "deployments", &s.names.workload).unwrap();
    let err = apply(&c, &s, opts()).await.unwrap_err();
    assert!(matches!(err, BootstrapError::NotOurs { .. }), "{err:?}");
    assert!(!err.is_retryable());
    assert!(err.to_string().contains("\"other\""), "{err}");
    assert_eq!(
        fake.get(NS, "deployments", &s.names.workload).unwrap(),
        before
    );

    let r = delete(&c, &s, None).await.unwrap();
    assert_eq!(
        r.not_ours,
        vec![format!("Deployment/{}", s.names.workload)],
        "{r:?}"
    );
    assert_eq!(
        fake.get(NS, "deployments", &s.names.workload).unwrap(),
        before
    );
    let st = status(&c, &s, None).await.unwrap();
    assert!(!st.objects.deployment, "not this version's Deployment");
}

/// The Deployment's `spec.strategy`.
fn strategy(fake: &FakeApiServer, s: &Spec) -> Value {
    fake.get(NS, "deployments", &s.names.workload)
        .expect("deployment")["spec"]["strategy"]
        .clone()
}

/// Rewrites the stored config Secret as a build from before `consumer.group` wrote it: the same
/// group, no `consumer.group` key.
fn as_written_by_an_earlier_build(fake: &FakeApiServer, s: &Spec) {
    let name = &s.names.config_secret;
    let mut secret: Secret =
        serde_json::from_value(fake.get(NS, "secrets", name).expect("secret")).unwrap();
    let data = secret.data.as_mut().unwrap();
    let mut cfg: serde_yaml_ng::Value = serde_yaml_ng::from_slice(&data["config.yaml"].0).unwrap();
    let consumer = cfg["consumer"].as_mapping_mut().unwrap();
    assert!(consumer.remove("group").is_some(), "this build writes it");
    data.get_mut("config.yaml").unwrap().0 = serde_yaml_ng::to_string(&cfg).unwrap().into_bytes();
    fake.put(NS, "secrets", name, serde_json::to_value(&secret).unwrap());
}

#[tokio::test]
async fn the_first_rollout_from_an_eager_build_recreates_the_pods_and_the_next_rolls() {
    let fake = FakeApiServer::start(Rollouts::Complete).await;
    let c = fake.client();
    let rolling =
        json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}});
    let v1 = spec("sample", "credit-model", "3", 1, "");
    apply(&c, &v1, opts()).await.unwrap();
    assert_eq!(strategy(&fake, &v1), rolling, "a first install rolls");
    as_written_by_an_earlier_build(&fake, &v1);

    // Its pods speak the eager protocol in the group this build's would join cooperatively.
    let v2 = spec("sample", "credit-model", "3", 2, "");
    let out = apply(&c, &v2, opts()).await.unwrap();
    assert!(
        matches!(out, ApplyOutcome::Running { revision: 2, .. }),
        "{out:?}"
    );
    assert_eq!(strategy(&fake, &v2), json!({"type": "Recreate"}));

    // Now the pods speak what the next revision's will.
    let v3 = spec("sample", "credit-model", "3", 3, "replicas: 2");
    apply(&c, &v3, opts()).await.unwrap();
    assert_eq!(strategy(&fake, &v3), rolling);

    // A config Secret left without its Deployment: no pods to clash with, so it rolls.
    as_written_by_an_earlier_build(&fake, &v3);
    let deployments: Api<Deployment> = Api::namespaced(c.clone(), NS);
    deployments
        .delete(&v3.names.workload, &DeleteParams::default())
        .await
        .unwrap();
    let v4 = spec("sample", "credit-model", "3", 4, "");
    apply(&c, &v4, opts()).await.unwrap();
    assert_eq!(strategy(&fake, &v4), rolling);
}
