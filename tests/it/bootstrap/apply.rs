//! `apply` against the fake API server: objects, request shapes, every revision rule, races.

use super::fake_apiserver::{object_path, FakeApiServer, RolloutScript, Rollouts};
use super::{fast, opts, spec, NS};
use axum::http::Method;
use observation_publisher::bootstrap::apply::{apply, ApplyOptions, ApplyOutcome};
use observation_publisher::bootstrap::error::BootstrapError;
use observation_publisher::bootstrap::manifest::{ANNOTATION_CONFIG_CHECKSUM, ANNOTATION_REVISION};
use observation_publisher::bootstrap::names::{is_dns_label, MAX_NAME};
use serde_json::{json, Value};
use std::time::Duration;

fn revision(obj: &Value) -> &str {
    obj["metadata"]["annotations"][ANNOTATION_REVISION]
        .as_str()
        .unwrap_or("")
}

fn marker_revision(fake: &FakeApiServer, name: &str) -> String {
    fake.get(NS, "configmaps", name).expect("marker")["data"]["revision"]
        .as_str()
        .unwrap_or("")
        .to_string()
}

fn writes_to(fake: &FakeApiServer, plural: &str) -> usize {
    fake.requests()
        .iter()
        .filter(|r| r.method == Method::PATCH && r.path.contains(&format!("/{plural}/")))
        .count()
}

#[tokio::test]
async fn apply_creates_every_object_with_server_side_apply() {
    let fake = FakeApiServer::start(Rollouts::Complete).await;
    let s = spec("sample", "credit-model", "3", 1, "");
    let out = apply(&fake.client(), &s, opts()).await.unwrap();
    assert_eq!(
        out,
        ApplyOutcome::Running {
            revision: 1,
            ready_replicas: 1
        }
    );
    assert_eq!(out.exit_code(), 0);
    let n = &s.names;
    for (plural, name) in [
        ("serviceaccounts", &n.workload),
        ("secrets", &n.config_secret),
        ("deployments", &n.workload),
    ] {
        let o = fake
            .get(NS, plural, name)
            .unwrap_or_else(|| panic!("{plural}/{name} missing"));
        assert_eq!(revision(&o), "1", "{plural}");
    }
    assert_eq!(marker_revision(&fake, &n.marker), "1");
    assert_eq!(
        fake.get(NS, "configmaps", &n.marker).unwrap()["data"]["phase"],
        "applied"
    );
    // Every object write is a server-side apply by our field manager, forced.
    let applies: Vec<_> = fake
        .requests()
        .into_iter()
        .filter(|r| r.method == Method::PATCH)
        .collect();
    assert_eq!(applies.len(), 3, "{applies:?}");
    for r in &applies {
        assert!(
            r.content_type.starts_with("application/apply-patch+yaml"),
            "{r:?}"
        );
        assert!(
            r.query.contains("fieldManager=observation-publisher"),
            "{r:?}"
        );
        assert!(r.query.contains("force=true"), "{r:?}");
    }
    // The Secret carries the completed run config.
    let secret = fake.get(NS, "secrets", &n.config_secret).unwrap();
    let b64 = secret["data"]["config.yaml"].as_str().unwrap();
    let yaml = String::from_utf8(decode_b64(b64)).unwrap();
    assert!(
        yaml.contains("caraml-sample-credit-model-3-prediction-log"),
        "{yaml}"
    );
}

fn decode_b64(s: &str) -> Vec<u8> {
    let alphabet = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = Vec::new();
    let mut acc = 0u32;
    let mut bits = 0;
    for c in s.bytes().filter(|c| *c != b'=') {
        let v = alphabet.iter().position(|a| *a == c).expect("base64") as u32;
        acc = (acc << 6) | v;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    out
}

#[tokio::test]
async fn same_revision_again_is_idempotent() {
    let fake = FakeApiServer::start(Rollouts::Complete).await;
    let s = spec("sample", "credit-model", "3", 4, "");
    let c = fake.client();
    apply(&c, &s, opts()).await.unwrap();
    let before = fake.get(NS, "deployments", &s.names.workload).unwrap();
    let out = apply(&c, &s, opts()).await.unwrap();
    assert_eq!(
        out,
        ApplyOutcome::Running {
            revision: 4,
            ready_replicas: 1
        }
    );
    let after = fake.get(NS, "deployments", &s.names.workload).unwrap();
    assert_eq!(before["spec"], after["spec"]);
    assert_eq!(
        after["metadata"]["generation"], 1,
        "no new rollout for the same revision"
    );
}

#[tokio::test]
async fn an_older_revision_is_superseded_and_writes_nothing() {
    let fake = FakeApiServer::start(Rollouts::Complete).await;
    let c = fake.client();
    apply(&c, &spec("sample", "credit-model", "3", 3, ""), opts())
        .await
        .unwrap();
    let deployment_writes = writes_to(&fake, "deployments");
    let out = apply(
        &c,
        &spec("sample", "credit-model", "3", 2, "replicas: 5"),
        opts(),
    )
    .await
    .unwrap();
    assert_eq!(out, ApplyOutcome::Superseded { by: 3 });
    assert_eq!(out.exit_code(), 0);
    assert!(
        out.to_string().contains("superseded by revision 3"),
        "{out}"
    );
    assert_eq!(writes_to(&fake, "deployments"), deployment_writes);
    let d = fake
        .get(
            NS,
            "deployments",
            &spec("sample", "credit-model", "3", 3, "").names.workload,
        )
        .unwrap();
    assert_eq!(revision(&d), "3");
    assert_eq!(d["spec"]["replicas"], 1);
}

#[tokio::test]
async fn a_newer_deployment_without_marker_still_supersedes() {
    let fake = FakeApiServer::start(Rollouts::Complete).await;
    let c = fake.client();
    let s = spec("sample", "credit-model", "3", 6, "");
    apply(&c, &s, opts()).await.unwrap();
    // Someone removes the marker; the Deployment's annotation still says 6.
    let markers: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
        kube::Api::namespaced(c.clone(), NS);
    markers
        .delete(&s.names.marker, &Default::default())
        .await
        .unwrap();
    let out = apply(&c, &spec("sample", "credit-model", "3", 5, ""), opts())
        .await
        .unwrap();
    assert_eq!(out, ApplyOutcome::Superseded { by: 6 });
    assert!(
        fake.get(NS, "configmaps", &s.names.marker).is_none(),
        "the superseded apply claims nothing"
    );
}

#[tokio::test]
async fn a_newer_revision_waits_for_the_older_rollout() {
    let fake = FakeApiServer::start(Rollouts::Manual).await;
    let c = fake.client();
    let v1 = spec("sample", "credit-model", "3", 1, "");
    // Revision 1 is applied; its rollout stays in progress.
    let first = tokio::spawn({
        let c = c.clone();
        let v1 = v1.clone();
        async move {
            apply(
                &c,
                &v1,
                ApplyOptions {
                    wait: Duration::from_millis(200),
                    backoff: fast(),
                },
            )
            .await
        }
    });
    assert!(matches!(
        first.await.unwrap().unwrap(),
        ApplyOutcome::TimedOut { revision: 1, .. }
    ));
    fake.set_rollout(NS, &v1.names.workload, RolloutScript::Progressing);

    let v2 = spec("sample", "credit-model", "3", 2, "replicas: 2");
    let second = tokio::spawn({
        let c = c.clone();
        let v2 = v2.clone();
        async move { apply(&c, &v2, opts()).await }
    });
    // Revision 2 reads the marker again and again: it is waiting.
    let marker_path = format!("/configmaps/{}", v2.names.marker);
    fake.until_requests(|r| {
        r.iter()
            .filter(|r| r.method == Method::GET && r.path.ends_with(&marker_path))
            .count()
            >= 4
    })
    .await;
    assert_eq!(
        revision(&fake.get(NS, "deployments", &v2.names.workload).unwrap()),
        "1",
        "revision 2 must not write yet"
    );
    assert_eq!(marker_revision(&fake, &v2.names.marker), "1");

    // The older rollout finishes: revision 2 goes ahead; then its own rollout completes.
    fake.set_rollout(NS, &v1.names.workload, RolloutScript::Complete);
    fake.until_requests(|r| {
        r.iter()
            .filter(|r| r.method == Method::PATCH && r.path.contains("/deployments/"))
            .count()
            >= 2
    })
    .await;
    fake.set_rollout(NS, &v2.names.workload, RolloutScript::Complete);
    let out = second.await.unwrap().unwrap();
    assert_eq!(
        out,
        ApplyOutcome::Running {
            revision: 2,
            ready_replicas: 2
        }
    );
    assert_eq!(marker_revision(&fake, &v2.names.marker), "2");
}

#[tokio::test]
async fn waiting_for_an_older_rollout_is_bounded_by_wait() {
    let fake = FakeApiServer::start(Rollouts::Manual).await;
    let c = fake.client();
    let v1 = spec("sample", "credit-model", "3", 1, "");
    let short = ApplyOptions {
        wait: Duration::from_millis(100),
        backoff: fast(),
    };
    let _ = apply(&c, &v1, short).await.unwrap();
    fake.set_rollout(NS, &v1.names.workload, RolloutScript::Progressing);
    let err = apply(&c, &spec("sample", "credit-model", "3", 2, ""), short)
        .await
        .unwrap_err();
    assert!(matches!(err, BootstrapError::Timeout { .. }), "{err}");
    assert_eq!(err.exit_code(), 1);
    assert!(err.to_string().contains("revision 1"), "{err}");
    assert_eq!(
        revision(&fake.get(NS, "deployments", &v1.names.workload).unwrap()),
        "1"
    );
}

#[tokio::test]
async fn a_failed_rollout_reports_its_reason() {
    let fake = FakeApiServer::start(Rollouts::Manual).await;
    let c = fake.client();
    let s = spec("sample", "credit-model", "3", 1, "");
    let task = tokio::spawn({
        let (c, s) = (c.clone(), s.clone());
        async move { apply(&c, &s, opts()).await }
    });
    fake.until_requests(|r| {
        r.iter()
            .any(|r| r.method == Method::PATCH && r.path.contains("/deployments/"))
    })
    .await;
    fake.set_rollout(NS, &s.names.workload, RolloutScript::DeadlineExceeded);
    let out = task.await.unwrap().unwrap();
    match &out {
        ApplyOutcome::Failed {
            revision: 1,
            reason,
        } => assert!(reason.starts_with("ProgressDeadlineExceeded"), "{reason}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(out.exit_code(), 1);
    assert!(out.to_string().starts_with("failed:"), "{out}");
}

#[tokio::test]
async fn a_rollout_that_never_finishes_times_out() {
    let fake = FakeApiServer::start(Rollouts::Manual).await;
    let s = spec("sample", "credit-model", "3", 1, "");
    let out = apply(
        &fake.client(),
        &s,
        ApplyOptions {
            wait: Duration::from_millis(100),
            backoff: fast(),
        },
    )
    .await
    .unwrap();
    assert!(
        matches!(out, ApplyOutcome::TimedOut { revision: 1, .. }),
        "{out:?}"
    );
    assert_eq!(out.exit_code(), 1);
}

#[tokio::test]
async fn losing_the_marker_update_race_to_a_newer_revision_supersedes() {
    let fake = FakeApiServer::start(Rollouts::Complete).await;
    let c = fake.client();
    let s1 = spec("sample", "credit-model", "3", 1, "");
    apply(&c, &s1, opts()).await.unwrap();
    let writes = writes_to(&fake, "deployments");
    // Between our read and our conditional update, revision 5 claims the marker.
    let key = object_path(NS, "configmaps", &s1.names.marker);
    fake.before_next(Method::PUT, &format!("/configmaps/{}", s1.names.marker), move |st| {
        st.set_configmap_data(&key, json!({"revision": "5", "phase": "applying", "holder": "other", "expires": "2999-01-01T00:00:00Z"}));
    });
    let out = apply(&c, &spec("sample", "credit-model", "3", 2, ""), opts())
        .await
        .unwrap();
    assert_eq!(out, ApplyOutcome::Superseded { by: 5 });
    assert_eq!(
        writes_to(&fake, "deployments"),
        writes,
        "the loser wrote nothing"
    );
    let conflicts = fake
        .requests()
        .iter()
        .filter(|r| r.method == Method::PUT)
        .count();
    assert_eq!(
        conflicts, 2,
        "one conditional update of revision 1's release, one rejected with Conflict"
    );
}

#[tokio::test]
async fn losing_the_marker_create_race_to_a_newer_revision_supersedes() {
    let fake = FakeApiServer::start(Rollouts::Complete).await;
    let s = spec("sample", "credit-model", "3", 1, "");
    let key = object_path(NS, "configmaps", &s.names.marker);
    let name = s.names.marker.clone();
    let labels = observation_publisher::bootstrap::meta::labels(&s);
    fake.before_next(Method::POST, "/configmaps", move |st| {
        st.insert(
            &key,
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": NS, "labels": labels},
                   "data": {"revision": "9", "phase": "applied", "holder": "other", "expires": "2000-01-01T00:00:00Z"}}),
        );
    });
    let out = apply(&fake.client(), &s, opts()).await.unwrap();
    assert_eq!(out, ApplyOutcome::Superseded { by: 9 });
    assert!(fake.get(NS, "deployments", &s.names.workload).is_none());
}

#[tokio::test]
async fn concurrent_applies_of_two_revisions_newest_wins() {
    for round in 0..8 {
        let fake = FakeApiServer::start(Rollouts::Complete).await;
        let c = fake.client();
        let version = format!("{round}");
        let old = spec("sample", "credit-model", &version, 1, "replicas: 1");
        let new = spec("sample", "credit-model", &version, 2, "replicas: 3");
        let (a, b) = tokio::join!(apply(&c, &old, opts()), apply(&c, &new, opts()));
        let (a, b) = (a.unwrap(), b.unwrap());
        assert_eq!(
            b,
            ApplyOutcome::Running {
                revision: 2,
                ready_replicas: 3
            },
            "round {round}"
        );
        assert!(
            matches!(
                a,
                ApplyOutcome::Superseded { by: 2 } | ApplyOutcome::Running { revision: 1, .. }
            ),
            "round {round}: {a:?}"
        );
        let d = fake.get(NS, "deployments", &new.names.workload).unwrap();
        assert_eq!(revision(&d), "2", "round {round}");
        assert_eq!(d["spec"]["replicas"], 3, "round {round}");
        assert_eq!(
            marker_revision(&fake, &new.names.marker),
            "2",
            "round {round}"
        );
    }
}

#[tokio::test]
async fn key_secret_is_mounted_only_while_named() {
    let fake = FakeApiServer::start(Rollouts::Complete).await;
    let c = fake.client();
    let with = spec(
        "sample",
        "credit-model",
        "3",
        1,
        "identity: {gcp_service_account: pub@gcp-project.iam.gserviceaccount.com, key_secret: gcp-key}",
    );
    apply(&c, &with, opts()).await.unwrap();
    let d = fake.get(NS, "deployments", &with.names.workload).unwrap();
    let pod = &d["spec"]["template"]["spec"];
    assert!(
        pod["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|v| v["secret"]["secretName"] == "gcp-key"),
        "{pod}"
    );
    assert_eq!(
        pod["containers"][0]["env"][0]["name"],
        "GOOGLE_APPLICATION_CREDENTIALS"
    );
    let sa = fake
        .get(NS, "serviceaccounts", &with.names.workload)
        .unwrap();
    assert_eq!(
        sa["metadata"]["annotations"]["iam.gke.io/gcp-service-account"],
        "pub@gcp-project.iam.gserviceaccount.com"
    );

    let without = spec("sample", "credit-model", "3", 2, "");
    apply(&c, &without, opts()).await.unwrap();
    let d = fake
        .get(NS, "deployments", &without.names.workload)
        .unwrap();
    let pod = &d["spec"]["template"]["spec"];
    assert!(
        pod["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .all(|v| v["name"] != "gcp-key"),
        "{pod}"
    );
    assert!(pod["containers"][0].get("env").is_none(), "{pod}");
    for v in pod["volumes"].as_array().unwrap() {
        if let Some(sec) = v.get("secret") {
            assert!(
                sec["secretName"].as_str().is_some_and(|n| !n.is_empty()),
                "no volume without a secret name: {v}"
            );
        }
    }
    let sa = fake
        .get(NS, "serviceaccounts", &without.names.workload)
        .unwrap();
    assert!(sa["metadata"]["annotations"]
        .get("iam.gke.io/gcp-service-account")
        .is_none());
}

#[tokio::test]
async fn long_names_are_valid_and_distinct() {
    let fake = FakeApiServer::start(Rollouts::Complete).await;
    let c = fake.client();
    let project = "a-project-with-a-rather-long-name";
    let model = "and-a-model-whose-name-alone-is-nearly-sixty-characters-long";
    let a = spec(project, model, "101", 1, "");
    let b = spec(project, model, "102", 1, "");
    for s in [&a, &b] {
        assert!(apply(&c, s, opts()).await.unwrap().exit_code() == 0);
    }
    for s in [&a, &b] {
        for name in [&s.names.workload, &s.names.config_secret, &s.names.marker] {
            assert!(name.len() <= MAX_NAME && is_dns_label(name), "{name}");
        }
        let d = fake.get(NS, "deployments", &s.names.workload).unwrap();
        for (k, v) in d["spec"]["selector"]["matchLabels"].as_object().unwrap() {
            assert!(v.as_str().unwrap().len() <= 63, "{k}={v}");
        }
    }
    assert_ne!(a.names.workload, b.names.workload);
    assert_eq!(fake.names(NS, "deployments").len(), 2);
}

#[tokio::test]
async fn autoscaling_adds_and_later_removes_a_scaled_object() {
    let fake = FakeApiServer::start(Rollouts::Complete).await;
    let c = fake.client();
    let s1 = spec(
        "sample",
        "credit-model",
        "3",
        1,
        "autoscaling: {min_replicas: 1, max_replicas: 4, lag_threshold: 100}",
    );
    apply(&c, &s1, opts()).await.unwrap();
    let so = fake
        .get(NS, "scaledobjects", &s1.names.workload)
        .expect("ScaledObject");
    assert_eq!(
        so["spec"]["triggers"][0]["metadata"]["topic"],
        "caraml-sample-credit-model-3-prediction-log"
    );
    assert!(
        fake.get(NS, "deployments", &s1.names.workload).unwrap()["spec"]
            .get("replicas")
            .is_none()
    );
    let s2 = spec("sample", "credit-model", "3", 2, "");
    apply(&c, &s2, opts()).await.unwrap();
    assert!(fake.get(NS, "scaledobjects", &s2.names.workload).is_none());
}

#[tokio::test]
async fn apply_works_without_keda_when_autoscaling_is_off() {
    let fake = FakeApiServer::start_with(Rollouts::Complete, false).await;
    let s = spec("sample", "credit-model", "3", 1, "");
    let out = apply(&fake.client(), &s, opts()).await.unwrap();
    assert_eq!(out.exit_code(), 0);
}

fn config_checksum(fake: &FakeApiServer, s: &observation_publisher::bootstrap::Spec) -> String {
    let d = fake.get(NS, "deployments", &s.names.workload).unwrap();
    d["spec"]["template"]["metadata"]["annotations"][ANNOTATION_CONFIG_CHECKSUM]
        .as_str()
        .expect("config-checksum annotation")
        .to_string()
}

fn secret_item(
    fake: &FakeApiServer,
    s: &observation_publisher::bootstrap::Spec,
    item: &str,
) -> Vec<u8> {
    let secret = fake.get(NS, "secrets", &s.names.config_secret).unwrap();
    decode_b64(
        secret["data"][item]
            .as_str()
            .unwrap_or_else(|| panic!("{item} missing")),
    )
}

/// Issue 17 item 5: the annotation rolls the pods on a config change, but is not a digest of
/// `config.yaml` anyone who reads Deployments could test guesses against.
#[tokio::test]
async fn the_config_checksum_follows_the_config_but_is_keyed_by_the_secret() {
    use observation_publisher::bootstrap::checksum::{hmac_sha256, ChecksumKey, KEY_ITEM};
    use sha2::{Digest, Sha256};
    let hex = |b: &[u8]| b.iter().map(|b| format!("{b:02x}")).collect::<String>();
    let fake = FakeApiServer::start(Rollouts::Complete).await;
    let c = fake.client();
    let r1 = spec("sample", "credit-model", "3", 1, "");
    apply(&c, &r1, opts()).await.unwrap();
    let first = config_checksum(&fake, &r1);
    let key = secret_item(&fake, &r1, KEY_ITEM);
    let yaml = secret_item(&fake, &r1, "config.yaml");

    // Not checkable without the Secret: not SHA-256(config.yaml), not HMAC under another key;
    // it is HMAC-SHA256 under the key kept in the Secret.
    assert_ne!(first, hex(&Sha256::digest(&yaml)));
    let other = ChecksumKey::generate().unwrap();
    assert_ne!(first, other.annotation(std::str::from_utf8(&yaml).unwrap()));
    assert_ne!(first, hex(&hmac_sha256(b"", &yaml)));
    let key_bytes: Vec<u8> = (0..key.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(std::str::from_utf8(&key[i..i + 2]).unwrap(), 16).unwrap())
        .collect();
    assert_eq!(key_bytes.len(), 32);
    assert_eq!(first, hex(&hmac_sha256(&key_bytes, &yaml)));

    // A new revision with the same config: the key is read back, the annotation is unchanged
    // (the pods do not roll for nothing).
    let r2 = spec("sample", "credit-model", "3", 2, "");
    apply(&c, &r2, opts()).await.unwrap();
    assert_eq!(secret_item(&fake, &r2, KEY_ITEM), key);
    assert_eq!(config_checksum(&fake, &r2), first);

    // A config change changes it, under the same key.
    let text = super::spec_text("sample", "credit-model", "3", 3, "")
        .replace("ttl_days: 14", "ttl_days: 15");
    let r3 = observation_publisher::bootstrap::Spec::parse(&text)
        .unwrap_or_else(|p| panic!("{p}"))
        .0;
    apply(&c, &r3, opts()).await.unwrap();
    assert_eq!(secret_item(&fake, &r3, KEY_ITEM), key);
    assert_ne!(config_checksum(&fake, &r3), first);
    assert_eq!(
        config_checksum(&fake, &r3),
        hex(&hmac_sha256(
            &key_bytes,
            &secret_item(&fake, &r3, "config.yaml")
        ))
    );
}
