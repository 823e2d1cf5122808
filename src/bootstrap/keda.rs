//! KEDA autoscaling on consumer lag: the `ScaledObject`, and, when the consumer config carries
//! SASL or TLS settings, the `TriggerAuthentication` that hands KEDA's Kafka scaler the same
//! credentials ([`super::kafka_auth`]). Pure builders.
//!
//! The credentials go into the version's config Secret under `keda-<parameter>` keys and the
//! `TriggerAuthentication` points at them (`secretTargetRef`), or at the existing Secret's key
//! for a credential the spec reads from one (`secretKeyRef`); the `ScaledObject` carries only
//! the non-secret `sasl` and `tls` modes, which KEDA accepts in trigger metadata.

use super::kafka_auth::KafkaAuth;
use super::meta::meta;
use super::spec::Spec;
use kube::api::{ApiResource, DynamicObject};
use serde_json::{json, Map, Value};

/// KEDA's `ScaledObject` resource.
pub fn scaled_object_resource() -> ApiResource {
    keda_resource("ScaledObject", "scaledobjects")
}

/// KEDA's `TriggerAuthentication` resource.
pub fn trigger_authentication_resource() -> ApiResource {
    keda_resource("TriggerAuthentication", "triggerauthentications")
}

fn keda_resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: "keda.sh".into(),
        version: "v1alpha1".into(),
        api_version: "keda.sh/v1alpha1".into(),
        kind: kind.into(),
        plural: plural.into(),
    }
}

/// The KEDA `ScaledObject` (Kafka lag trigger), when the spec asks for autoscaling.
pub fn scaled_object(spec: &Spec) -> Option<DynamicObject> {
    let a = spec.autoscaling.as_ref()?;
    let source = spec.config.observation_source.as_ref()?;
    let mut metadata = Map::new();
    let mut put = |k: &str, v: String| metadata.insert(k.into(), Value::String(v));
    put(
        "bootstrapServers",
        crate::redact::strip_userinfo(&source.bootstrap_servers).into_owned(),
    );
    put("consumerGroup", source.group_id.clone());
    put("topic", source.topic.clone());
    put("lagThreshold", a.lag_threshold.to_string());
    put("offsetResetPolicy", "earliest".into());
    let mut trigger = json!({"type": "kafka"});
    if let Some(auth) = &a.kafka_auth {
        if let Some(mode) = auth.sasl {
            put("sasl", mode.into());
        }
        if auth.tls {
            put("tls", "enable".into());
        }
        if auth.unsafe_ssl {
            put("unsafeSsl", "true".into());
        }
        if auth.has_credentials() {
            trigger["authenticationRef"] =
                json!({"name": spec.names.workload, "kind": "TriggerAuthentication"});
        }
    }
    trigger["metadata"] = Value::Object(metadata);
    let mut obj = DynamicObject::new(&spec.names.workload, &scaled_object_resource()).data(json!({
        "spec": {
            "scaleTargetRef": {"name": spec.names.workload},
            "minReplicaCount": a.min_replicas,
            "maxReplicaCount": a.max_replicas,
            "triggers": [trigger],
        }
    }));
    obj.metadata = meta(spec, &spec.names.workload, &[]);
    Some(obj)
}

/// The `TriggerAuthentication` reading the scaler's credentials from the config Secret, when
/// autoscaling is on and the cluster needs credentials.
pub fn trigger_authentication(spec: &Spec) -> Option<DynamicObject> {
    let auth = spec.autoscaling.as_ref()?.kafka_auth.as_ref()?;
    if !auth.has_credentials() {
        return None;
    }
    let mut refs: Vec<Value> = auth
        .params
        .keys()
        .map(|p| {
            json!({
                "parameter": p,
                "name": spec.names.config_secret,
                "key": KafkaAuth::secret_key(p),
            })
        })
        .collect();
    // Credentials the spec reads from an existing Secret: KEDA reads the same key.
    refs.extend(
        auth.refs
            .iter()
            .map(|(p, r)| json!({"parameter": p, "name": r.name, "key": r.key})),
    );
    refs.sort_by(|a, b| a["parameter"].as_str().cmp(&b["parameter"].as_str()));
    let mut obj = DynamicObject::new(&spec.names.workload, &trigger_authentication_resource())
        .data(json!({"spec": {"secretTargetRef": refs}}));
    obj.metadata = meta(spec, &spec.names.workload, &[]);
    Some(obj)
}
