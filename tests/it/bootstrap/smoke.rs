//! Smoke test against a real cluster: `KUBECONFIG=… cargo test --test it bootstrap::smoke -- --ignored`.
//! It writes the objects of a throwaway model version into `SMOKE_NAMESPACE` (default
//! `default`), checks server-side apply ownership and idempotence, then deletes them. It does not
//! wait for pods (no publisher image is assumed to be pullable).

use observation_publisher::bootstrap::apply::write_objects;
use observation_publisher::bootstrap::delete::delete;
use observation_publisher::bootstrap::manifest::FIELD_MANAGER;
use observation_publisher::bootstrap::status::status;
use observation_publisher::bootstrap::Spec;

#[tokio::test]
#[ignore = "needs KUBECONFIG"]
async fn real_cluster_apply_status_delete() {
    let ns = std::env::var("SMOKE_NAMESPACE").unwrap_or_else(|_| "default".into());
    let text = super::spec_text(
        "smoke",
        "bootstrap",
        &format!("s{:06x}", fastrand::u32(..0xffffff)),
        1,
        "",
    )
    .replace(
        &format!("namespace: {}", super::NS),
        &format!("namespace: {ns}"),
    );
    let (spec, _) = Spec::parse(&text).unwrap_or_else(|p| panic!("{p}"));
    let client = kube::Client::try_default()
        .await
        .expect("KUBECONFIG must point at a cluster");

    write_objects(&client, &spec)
        .await
        .expect("server-side apply");
    let deployments: kube::Api<k8s_openapi::api::apps::v1::Deployment> =
        kube::Api::namespaced(client.clone(), &ns);
    let d = deployments.get(&spec.names.workload).await.unwrap();
    let managers: Vec<_> = d
        .metadata
        .managed_fields
        .unwrap_or_default()
        .into_iter()
        .filter_map(|m| m.manager)
        .collect();
    assert!(managers.iter().any(|m| m == FIELD_MANAGER), "{managers:?}");
    let generation = d.metadata.generation;

    write_objects(&client, &spec).await.expect("re-apply");
    let d = deployments.get(&spec.names.workload).await.unwrap();
    assert_eq!(
        d.metadata.generation, generation,
        "re-applying the same spec must not roll the pods"
    );

    let st = status(&client, &spec, None).await.unwrap();
    assert!(st.objects.deployment && st.objects.secret && st.objects.service_account);
    assert_eq!(st.deployed_revision, Some(1));

    let r = delete(&client, &spec, None).await.unwrap();
    assert!(r.deleted.len() >= 3, "{r:?}");
    let r = delete(&client, &spec, None).await.unwrap();
    assert!(r.deleted.is_empty(), "{r:?}");
}
