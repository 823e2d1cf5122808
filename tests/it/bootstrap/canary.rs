//! Canary: v1 and v2 of one model side by side; removing v1 leaves v2 alone. Delete is idempotent.

use super::fake_apiserver::{FakeApiServer, Rollouts};
use super::{opts, spec, NS};
use observation_publisher::bootstrap::apply::{apply, ApplyOutcome};
use observation_publisher::bootstrap::delete::delete;
use observation_publisher::bootstrap::status::status;

#[tokio::test]
async fn v1_and_v2_run_side_by_side_and_deleting_v1_leaves_v2() {
    let fake = FakeApiServer::start(Rollouts::Complete).await;
    let c = fake.client();
    let v1 = spec("sample", "credit-model", "1", 1, "");
    let v2 = spec("sample", "credit-model", "2", 1, "");
    assert!(matches!(
        apply(&c, &v1, opts()).await.unwrap(),
        ApplyOutcome::Running { .. }
    ));
    assert!(matches!(
        apply(&c, &v2, opts()).await.unwrap(),
        ApplyOutcome::Running { .. }
    ));

    // Separate names, Secrets, ServiceAccounts, selectors, topics and groups.
    assert_ne!(v1.names.workload, v2.names.workload);
    assert_ne!(v1.names.config_secret, v2.names.config_secret);
    assert_ne!(v1.group_id(), v2.group_id());
    assert_ne!(v1.topic(), v2.topic());
    for plural in ["deployments", "serviceaccounts", "secrets", "configmaps"] {
        assert_eq!(
            fake.names(NS, plural).len(),
            2,
            "{plural}: {:?}",
            fake.names(NS, plural)
        );
    }
    let sel = |s: &observation_publisher::bootstrap::Spec| {
        fake.get(NS, "deployments", &s.names.workload).unwrap()["spec"]["selector"].clone()
    };
    assert_ne!(sel(&v1), sel(&v2), "selectors must not overlap");
    let pod_sa = |s: &observation_publisher::bootstrap::Spec| {
        fake.get(NS, "deployments", &s.names.workload).unwrap()["spec"]["template"]["spec"]
            ["serviceAccountName"]
            .clone()
    };
    assert_eq!(pod_sa(&v1), v1.names.workload.as_str());
    assert_eq!(pod_sa(&v2), v2.names.workload.as_str());

    // Cut-over: v1 goes, v2 stays untouched.
    let v2_before = fake.get(NS, "deployments", &v2.names.workload).unwrap();
    let report = delete(&c, &v1, None).await.unwrap();
    assert_eq!(report.deleted.len(), 4, "{report:?}"); // Deployment, Secret, ServiceAccount, marker
    assert_eq!(
        fake.names(NS, "deployments"),
        vec![v2.names.workload.clone()]
    );
    assert_eq!(
        fake.names(NS, "secrets"),
        vec![v2.names.config_secret.clone()]
    );
    assert_eq!(
        fake.names(NS, "serviceaccounts"),
        vec![v2.names.workload.clone()]
    );
    assert_eq!(fake.names(NS, "configmaps"), vec![v2.names.marker.clone()]);
    assert_eq!(
        fake.get(NS, "deployments", &v2.names.workload).unwrap(),
        v2_before
    );

    let st = status(&c, &v2, None).await.unwrap();
    assert!(st.objects.deployment && st.objects.secret && st.objects.service_account);
    assert_eq!(st.rollout, "running");
    let st1 = status(&c, &v1, None).await.unwrap();
    assert!(
        !st1.objects.deployment
            && !st1.objects.secret
            && !st1.objects.service_account
            && !st1.objects.revision_marker
    );
    assert_eq!(st1.rollout, "absent");
}

#[tokio::test]
async fn delete_is_idempotent() {
    let fake = FakeApiServer::start(Rollouts::Complete).await;
    let c = fake.client();
    let v = spec("sample", "credit-model", "7", 1, "");
    // Never deployed: nothing to delete, still a success.
    let r = delete(&c, &v, None).await.unwrap();
    assert!(r.deleted.is_empty());
    // ScaledObject, TriggerAuthentication, PodMonitor, PodDisruptionBudget, Deployment, Secret,
    // ServiceAccount, revision marker.
    assert_eq!(r.already_gone.len(), 8, "{r:?}");
    apply(&c, &v, opts()).await.unwrap();
    let r = delete(&c, &v, None).await.unwrap();
    assert_eq!(r.deleted.len(), 4, "{r:?}");
    let r = delete(&c, &v, None).await.unwrap();
    assert!(r.deleted.is_empty(), "{r:?}");
    assert!(fake.names(NS, "deployments").is_empty());
}

#[tokio::test]
async fn status_reports_objects_revision_and_replicas_as_json() {
    let fake = FakeApiServer::start(Rollouts::Complete).await;
    let c = fake.client();
    let v = spec("sample", "credit-model", "3", 3, "replicas: 2");
    apply(&c, &v, opts()).await.unwrap();
    let st = status(&c, &v, None).await.unwrap();
    let j = serde_json::to_value(&st).unwrap();
    assert_eq!(j["deployed_revision"], 3);
    assert_eq!(j["claimed_revision"], 3);
    assert_eq!(j["rollout"], "running");
    assert_eq!(j["replicas"]["ready"], 2);
    assert_eq!(j["objects"]["scaled_object"], false);
    assert_eq!(j["applying"], false);
}

#[tokio::test]
async fn delete_and_status_work_without_keda() {
    let fake = FakeApiServer::start_with(Rollouts::Complete, false).await;
    let c = fake.client();
    let v = spec("sample", "credit-model", "8", 1, "");
    apply(&c, &v, opts()).await.unwrap();
    let st = status(&c, &v, None).await.unwrap();
    assert!(!st.objects.scaled_object && st.objects.deployment);
    let r = delete(&c, &v, None).await.unwrap();
    assert!(
        r.already_gone
            .iter()
            .any(|o| o.starts_with("ScaledObject/")),
        "{r:?}"
    );
    assert!(fake.names(NS, "deployments").is_empty());
}
