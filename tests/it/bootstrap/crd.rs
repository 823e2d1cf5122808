//! Custom resources checked against their CRDs' published OpenAPI schemas, vendored in
//! `tests/fixtures/crds/` (KEDA's and the Prometheus Operator's, see the README there).
//!
//! The API server validates a custom resource against its CRD's structural schema: types,
//! required fields, enums, patterns, bounds, int-or-string. A field the schema does not know is
//! pruned without an error, so a misspelt field would vanish on a real cluster; here it is an
//! error (what `fieldValidation=Strict` does). CEL rules (`x-kubernetes-validations`) and string
//! formats are not evaluated.

use regex::Regex;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::OnceLock;

/// Plural → CRD file of each custom resource the fake API server knows.
const CRDS: &[(&str, &str)] = &[
    ("scaledobjects", "keda.sh_scaledobjects.yaml"),
    (
        "triggerauthentications",
        "keda.sh_triggerauthentications.yaml",
    ),
    ("podmonitors", "monitoring.coreos.com_podmonitors.yaml"),
    (
        "prometheusrules",
        "monitoring.coreos.com_prometheusrules.yaml",
    ),
];

/// `(group/version, schema)` of every served version, by plural.
type Schemas = BTreeMap<&'static str, Vec<(String, Value)>>;

fn schemas() -> &'static Schemas {
    static S: OnceLock<Schemas> = OnceLock::new();
    S.get_or_init(|| {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/crds");
        CRDS.iter()
            .map(|(plural, file)| {
                let text = std::fs::read_to_string(dir.join(file)).expect("vendored CRD");
                let crd: Value = serde_yaml_ng::from_str(&text).expect("CRD YAML");
                assert_eq!(crd["spec"]["names"]["plural"], *plural, "{file}");
                let group = crd["spec"]["group"].as_str().expect("group");
                let versions = crd["spec"]["versions"]
                    .as_array()
                    .expect("versions")
                    .iter()
                    .filter(|v| v["served"] == true)
                    .map(|v| {
                        (
                            format!("{group}/{}", v["name"].as_str().expect("version name")),
                            v["schema"]["openAPIV3Schema"].clone(),
                        )
                    })
                    .collect();
                (*plural, versions)
            })
            .collect()
    })
}

/// Whether `plural` is one of the custom resources checked here.
pub(crate) fn is_custom(plural: &str) -> bool {
    CRDS.iter().any(|(p, _)| *p == plural)
}

/// What is wrong with `obj` as a `plural`, as the API server would word it (`spec.x: …`).
/// Empty when it is valid.
pub(crate) fn validate(plural: &str, obj: &Value) -> Vec<String> {
    let Some(versions) = schemas().get(plural) else {
        return vec![format!("{plural}: no CRD vendored")];
    };
    let api_version = obj["apiVersion"].as_str().unwrap_or("");
    let Some((_, schema)) = versions.iter().find(|(v, _)| v == api_version) else {
        return vec![format!("apiVersion: {api_version:?} is not served")];
    };
    let mut errors = Vec::new();
    check(schema, obj, "", &mut errors);
    errors
}

fn at(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

fn type_ok(ty: &str, v: &Value) -> bool {
    match ty {
        "object" => v.is_object(),
        "array" => v.is_array(),
        "string" => v.is_string(),
        "integer" => v.is_i64() || v.is_u64(),
        "number" => v.is_number(),
        "boolean" => v.is_boolean(),
        _ => true,
    }
}

fn check(schema: &Value, v: &Value, path: &str, errors: &mut Vec<String>) {
    let shown = if path.is_empty() { "<root>" } else { path };
    if v.is_null() && schema["nullable"] == true {
        return;
    }
    if schema["x-kubernetes-int-or-string"] == true {
        if !(v.is_string() || v.is_i64() || v.is_u64()) {
            errors.push(format!("{shown}: must be an integer or a string"));
        }
        return;
    }
    if let Some(any) = schema["anyOf"].as_array() {
        let fits = any.iter().any(|s| {
            let mut e = Vec::new();
            check(s, v, path, &mut e);
            e.is_empty()
        });
        if !fits {
            errors.push(format!("{shown}: matches none of its anyOf schemas"));
            return;
        }
    }
    if let Some(ty) = schema["type"].as_str() {
        if !type_ok(ty, v) {
            errors.push(format!("{shown}: Invalid type: expected {ty}, got {v}"));
            return;
        }
    }
    if let Some(allowed) = schema["enum"].as_array() {
        if !allowed.contains(v) {
            errors.push(format!("{shown}: Unsupported value: {v}"));
        }
    }
    match v {
        Value::Object(map) => {
            for r in schema["required"].as_array().into_iter().flatten() {
                let r = r.as_str().unwrap_or("");
                if !map.contains_key(r) {
                    errors.push(format!("{}: Required value", at(path, r)));
                }
            }
            // ObjectMeta is validated by the API server itself, not by the CRD's schema.
            if path == "metadata" {
                return;
            }
            let props = schema["properties"].as_object();
            let additional = &schema["additionalProperties"];
            let open = schema["x-kubernetes-preserve-unknown-fields"] == true
                || additional == &Value::Bool(true);
            for (k, child) in map {
                match props.and_then(|p| p.get(k)) {
                    Some(s) => check(s, child, &at(path, k), errors),
                    None if additional.is_object() => {
                        check(additional, child, &at(path, k), errors)
                    }
                    None if open => {}
                    None => errors.push(format!("{}: unknown field", at(path, k))),
                }
            }
        }
        Value::Array(items) => {
            if let Some(n) = schema["minItems"].as_u64() {
                if (items.len() as u64) < n {
                    errors.push(format!("{shown}: must have at least {n} items"));
                }
            }
            for (i, item) in items.iter().enumerate() {
                check(&schema["items"], item, &format!("{path}[{i}]"), errors);
            }
        }
        Value::String(s) => {
            if let Some(p) = schema["pattern"].as_str() {
                match Regex::new(p) {
                    Ok(re) if re.is_match(s) => {}
                    Ok(_) => errors.push(format!("{shown}: {s:?} does not match {p}")),
                    Err(e) => errors.push(format!("{shown}: pattern {p} does not compile: {e}")),
                }
            }
            if let Some(n) = schema["minLength"].as_u64() {
                if (s.chars().count() as u64) < n {
                    errors.push(format!("{shown}: shorter than {n}"));
                }
            }
            if let Some(n) = schema["maxLength"].as_u64() {
                if (s.chars().count() as u64) > n {
                    errors.push(format!("{shown}: longer than {n}"));
                }
            }
        }
        Value::Number(n) => {
            let x = n.as_f64().unwrap_or(0.0);
            if schema["minimum"].as_f64().is_some_and(|m| x < m) {
                errors.push(format!("{shown}: below its minimum {}", schema["minimum"]));
            }
            if schema["maximum"].as_f64().is_some_and(|m| x > m) {
                errors.push(format!("{shown}: above its maximum {}", schema["maximum"]));
            }
        }
        _ => {}
    }
}

#[test]
fn the_alert_rules_shipped_for_the_prometheus_operator_fit_its_schema() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("deploy/alerts/prometheusrule.yaml");
    let rule: Value = serde_yaml_ng::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    assert_eq!(validate("prometheusrules", &rule), Vec::<String>::new());
}

#[test]
fn the_checker_finds_what_the_api_server_would_reject_or_prune() {
    let good = serde_json::json!({
        "apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject",
        "metadata": {"name": "x", "labels": {"a": "b"}},
        "spec": {
            "scaleTargetRef": {"name": "x"}, "minReplicaCount": 1,
            "triggers": [{"type": "kafka", "metadata": {"topic": "t"},
                          "authenticationRef": {"name": "x", "kind": "TriggerAuthentication"}}],
        },
    });
    assert_eq!(validate("scaledobjects", &good), Vec::<String>::new());
    let mut bad = good.clone();
    bad["spec"]["minReplicaCount"] = "1".into();
    bad["spec"]["triggers"][0]["authenticationRef"]["kind"] = "Secret".into();
    bad["spec"]["triggers"][0]["metadata"]["topic"] = 7.into();
    bad["spec"]["triggers"][0]["authRef"] = serde_json::json!({"name": "x"});
    bad["spec"]["scaleTargetRef"] = serde_json::json!({});
    bad["apiVersion"] = "keda.sh/v1alpha1".into();
    let errors = validate("scaledobjects", &bad);
    for want in [
        "spec.minReplicaCount: Invalid type",
        "spec.triggers[0].authenticationRef.kind: Unsupported value",
        "spec.triggers[0].metadata.topic: Invalid type",
        "spec.triggers[0].authRef: unknown field",
        "spec.scaleTargetRef.name: Required value",
    ] {
        assert!(
            errors.iter().any(|e| e.starts_with(want)),
            "{want} in {errors:?}"
        );
    }
    let mut pm = serde_json::json!({
        "apiVersion": "monitoring.coreos.com/v1", "kind": "PodMonitor", "metadata": {"name": "x"},
        "spec": {"selector": {"matchLabels": {"a": "b"}},
                 "podMetricsEndpoints": [{"port": "prom-metric", "interval": "30s"}]},
    });
    assert_eq!(validate("podmonitors", &pm), Vec::<String>::new());
    pm["spec"]["podMetricsEndpoints"][0]["interval"] = "30 seconds".into();
    assert!(validate("podmonitors", &pm)[0].contains("does not match"));
    pm["apiVersion"] = "monitoring.coreos.com/v2".into();
    assert!(validate("podmonitors", &pm)[0].contains("not served"));
}
