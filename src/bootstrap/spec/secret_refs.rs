//! Credentials of the run config read from existing Secrets: any credential of `config` (a
//! value `check-config` redacts, such as `sasl.password` or an ARIZE sink's `api_key`) may be
//! written `{secretKeyRef: {name, key}}` instead of the literal, so that a spec kept in git
//! holds no secret, and neither does the version's own Secret.
//!
//! Each reference leaves `config.yaml` and becomes an environment variable of the publisher's
//! container, `OBS_PUBLISHER__<PATH>` with `valueFrom.secretKeyRef`, which the configuration's
//! environment layering puts back at its place before the configuration is read
//! (`crate::config::load_value`; a list item by its index: `OBSERVATION_SINKS__1__CONFIG__API_KEY`).
//! The spec is validated with a placeholder in each place (the value itself is only in the
//! cluster), and KEDA's scaler is pointed at the same Secret key for a Kafka credential.

use crate::bootstrap::kafka_auth::SecretRef;
use crate::bootstrap::names::is_dns_subdomain;
use crate::config::{key_text, redact, Obj, Problems, ENV_PREFIX};
use serde_yaml_ng::Value;

use super::identity::is_secret_item;

/// The key that marks a reference.
pub const SECRET_KEY_REF: &str = "secretKeyRef";

/// One credential of the run config read from an existing Secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretEnv {
    /// Where the value goes in the run config, one segment per mapping key or list index.
    pub path: Vec<String>,
    /// The environment variable carrying it (`OBS_PUBLISHER__…`).
    pub env: String,
    /// The Secret key holding it.
    pub secret: SecretRef,
}

impl SecretEnv {
    /// What stands in the value's place while the spec is validated: names the reference,
    /// holds no secret.
    pub fn placeholder(&self) -> String {
        placeholder(&self.secret)
    }
}

fn placeholder(secret: &SecretRef) -> String {
    format!("{SECRET_KEY_REF}:{}/{}", secret.name, secret.key)
}

/// Takes every `{secretKeyRef: …}` out of `run_config` (the mapping written into the Secret)
/// and returns the references with a copy of the config for validation, where each stands as
/// its [`SecretEnv::placeholder`]. Problems are reported at `config.<path>`.
pub(super) fn take_secret_refs(
    run_config: &mut Value,
    p: &mut Problems,
) -> (Vec<SecretEnv>, Value) {
    let mut found = Vec::new();
    let mut checked = run_config.clone();
    collect(&mut checked, &mut Vec::new(), "config", &mut found, p);
    for (path, _, secret) in &found {
        set(&mut checked, path, Value::String(placeholder(secret)));
    }
    // Only where a credential goes: the places the configuration's own redaction hides (a
    // topic or a server list read from a Secret would leave KEDA and the checks blind).
    let mut redacted = checked.clone();
    redact(&mut redacted);
    let mut refs = Vec::new();
    for (path, at, secret) in found {
        let hidden = lookup(&redacted, &path)
            .and_then(Value::as_str)
            .is_some_and(|v| v == crate::redact::REDACTED);
        if !hidden {
            p.push(
                &at,
                format_args!(
                    "{SECRET_KEY_REF} stands only in place of a credential (a value check-config \
                     shows as <redacted>, such as sasl.password or api_key); write this value itself"
                ),
            );
            continue;
        }
        match env_name(&path) {
            Ok(env) => {
                remove(run_config, &path);
                refs.push(SecretEnv { path, env, secret });
            }
            Err(why) => p.push(&at, why),
        }
    }
    (refs, checked)
}

/// Finds the references below `v`, replacing each by null in `v`.
fn collect(
    v: &mut Value,
    path: &mut Vec<String>,
    at: &str,
    found: &mut Vec<(Vec<String>, String, SecretRef)>,
    p: &mut Problems,
) {
    match v {
        Value::Mapping(m) if m.contains_key(SECRET_KEY_REF) => {
            let mut r = Obj::closed(Some(&*v), at, &[SECRET_KEY_REF], p);
            let mut s = r.closed_obj(SECRET_KEY_REF, &["name", "key"], p);
            let name = s.req_text("name", p);
            let key = s.req_text("key", p);
            let sat = format!("{at}.{SECRET_KEY_REF}");
            if !name.is_empty() && !is_dns_subdomain(&name) {
                p.push(
                    &format!("{sat}.name"),
                    format_args!("{name:?} is not a valid Secret name"),
                );
            }
            if !key.is_empty() && !is_secret_item(&key) {
                p.push(
                    &format!("{sat}.key"),
                    format_args!("{key:?} is not a valid Secret key"),
                );
            }
            found.push((path.clone(), at.to_string(), SecretRef { name, key }));
            *v = Value::Null;
        }
        Value::Mapping(m) => {
            for (k, child) in m.iter_mut() {
                let k = key_text(k);
                path.push(k.clone());
                collect(child, path, &format!("{at}.{k}"), found, p);
                path.pop();
            }
        }
        Value::Sequence(items) => {
            for (i, child) in items.iter_mut().enumerate() {
                path.push(i.to_string());
                collect(child, path, &format!("{at}[{i}]"), found, p);
                path.pop();
            }
        }
        _ => {}
    }
}

/// `OBS_PUBLISHER__A__B__C` for the path `a.b.c`, if the environment layering can reach it:
/// it splits names at `__` and lowercases them, and Kubernetes takes `[-._a-zA-Z0-9]` in a
/// variable's name.
fn env_name(path: &[String]) -> Result<String, String> {
    for s in path {
        let ok = !s.is_empty()
            && !s.contains("__")
            && !s.starts_with('_')
            && !s.ends_with('_')
            && s.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "-._".contains(c));
        if !ok {
            return Err(format!(
                "the key {s:?} cannot be set through an environment variable (lower-case \
                 letters, digits, '-', '.' and single '_' only), so it cannot come from a \
                 Secret; write this value itself"
            ));
        }
    }
    Ok(format!(
        "{ENV_PREFIX}{}",
        path.join("__").to_ascii_uppercase()
    ))
}

fn lookup<'a>(v: &'a Value, path: &[String]) -> Option<&'a Value> {
    path.iter().try_fold(v, |node, seg| match node {
        Value::Mapping(m) => m.get(seg.as_str()),
        Value::Sequence(items) => items.get(seg.parse::<usize>().ok()?),
        _ => None,
    })
}

fn set(v: &mut Value, path: &[String], to: Value) {
    if let Some(slot) = lookup_mut(v, path) {
        *slot = to;
    }
}

/// Removes the value at `path` (its key, in a mapping): the environment puts it back.
fn remove(v: &mut Value, path: &[String]) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let Some(Value::Mapping(m)) = lookup_mut(v, parents) else {
        return;
    };
    m.remove(last.as_str());
}

fn lookup_mut<'a>(v: &'a mut Value, path: &[String]) -> Option<&'a mut Value> {
    path.iter().try_fold(v, |node, seg| match node {
        Value::Mapping(m) => m.get_mut(seg.as_str()),
        Value::Sequence(items) => items.get_mut(seg.parse::<usize>().ok()?),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::super::tests::MINIMAL;
    use super::super::Spec;
    use crate::config::{load_value, Config, Needs, SinkConfig};

    /// A spec whose Kafka and Arize credentials come from existing Secrets.
    fn keyless() -> String {
        MINIMAL
            .replace(
                "namespace: mlobs",
                "namespace: mlobs\nautoscaling: {max_replicas: 3}",
            )
            .replace(
                r#"{bootstrap_servers: "kafka:9092"}"#,
                r#"
      bootstrap_servers: "kafka:9092"
      additional_consumer_config:
        security.protocol: SASL_SSL
        sasl.mechanisms: SCRAM-SHA-512
        sasl.username: publisher
        sasl.password: {secretKeyRef: {name: kafka-credentials, key: password}}"#,
            )
            .replace(
                "  observation_source:",
                "  - type: ARIZE\n    config:\n      api_key: {secretKeyRef: {name: arize, key: api-key}}\n      space_key: {secretKeyRef: {name: arize, key: space-key}}\n  observation_source:",
            )
    }

    #[test]
    fn a_credential_from_a_secret_becomes_an_environment_variable_and_nothing_else() {
        let (s, _) = Spec::parse(&keyless()).unwrap_or_else(|p| panic!("{p}"));
        let envs: Vec<(&str, &str, &str)> = (s.secret_envs.iter())
            .map(|e| {
                (
                    e.env.as_str(),
                    e.secret.name.as_str(),
                    e.secret.key.as_str(),
                )
            })
            .collect();
        assert_eq!(
            envs,
            [
                ("OBS_PUBLISHER__OBSERVATION_SINKS__1__CONFIG__API_KEY", "arize", "api-key"),
                ("OBS_PUBLISHER__OBSERVATION_SINKS__1__CONFIG__SPACE_KEY", "arize", "space-key"),
                (
                    "OBS_PUBLISHER__OBSERVATION_SOURCE__CONFIG__ADDITIONAL_CONSUMER_CONFIG__SASL.PASSWORD",
                    "kafka-credentials",
                    "password"
                ),
            ]
        );
        // config.yaml holds neither the references nor any placeholder; the literal stays.
        let yaml = s.config_yaml();
        for absent in ["secretKeyRef", "sasl.password", "api_key", "space_key"] {
            assert!(!yaml.contains(absent), "{absent} in {yaml}");
        }
        assert!(yaml.contains("sasl.username: publisher"), "{yaml}");
        // KEDA reads the password from the same Secret key; only the literal username is
        // copied into the version's Secret.
        let auth = s.autoscaling.as_ref().unwrap().kafka_auth.as_ref().unwrap();
        assert_eq!(
            auth.params.keys().copied().collect::<Vec<_>>(),
            ["username"]
        );
        assert_eq!(auth.refs["password"].name, "kafka-credentials");
        assert_eq!(auth.refs["password"].key, "password");

        // What the pod does: config.yaml plus the variables, through the environment layering.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.yaml");
        std::fs::write(&path, &yaml).unwrap();
        let env = [
            (envs[0].0, "0x1F-arize-key"),
            (envs[1].0, "007"),
            (envs[2].0, "1e3"),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string()));
        let v = load_value(Some(&path), env, &[]).unwrap_or_else(|p| panic!("{p}"));
        let (c, _) = Config::from_value(&v, Needs::RUN).unwrap_or_else(|p| panic!("{p}"));
        let SinkConfig::Arize(a) = &c.observation_sinks[1] else {
            panic!("{:?}", c.observation_sinks)
        };
        // A secret is text: `007` is not the number 7.
        assert_eq!(
            (a.api_key.as_str(), a.space_key.as_str()),
            ("0x1F-arize-key", "007")
        );
        let consumer = &c
            .observation_source
            .as_ref()
            .unwrap()
            .additional_consumer_config;
        assert!(
            consumer.contains(&("sasl.password".to_string(), "1e3".to_string())),
            "{consumer:?}"
        );
    }

    #[test]
    fn the_deployment_and_keda_read_the_existing_secret() {
        use crate::bootstrap::checksum::ChecksumKey;
        let (s, _) = Spec::parse(&keyless()).unwrap_or_else(|p| panic!("{p}"));
        let m = crate::bootstrap::manifest::build(&s, &ChecksumKey::DryRun);
        let pod = m.deployment.spec.unwrap().template.spec.unwrap();
        let env = pod.containers[0].env.clone().unwrap();
        let from: Vec<(String, String, String)> = (env.iter())
            .map(|e| {
                let r = e
                    .value_from
                    .as_ref()
                    .unwrap()
                    .secret_key_ref
                    .as_ref()
                    .unwrap();
                assert!(e.value.is_none());
                (e.name.clone(), r.name.clone(), r.key.clone())
            })
            .collect();
        let want: Vec<(String, String, String)> = (s.secret_envs.iter())
            .map(|e| (e.env.clone(), e.secret.name.clone(), e.secret.key.clone()))
            .collect();
        assert_eq!(from, want);
        assert_eq!(from.len(), 3);
        // The version's Secret carries the literal username for KEDA, no password.
        let data = m.secret.data.unwrap();
        assert!(data.contains_key("keda-username") && !data.contains_key("keda-password"));
        let ta = m.trigger_authentication.unwrap();
        assert_eq!(
            ta.data["spec"]["secretTargetRef"],
            serde_json::json!([
                {"parameter": "password", "name": "kafka-credentials", "key": "password"},
                {"parameter": "username", "name": s.names.config_secret, "key": "keda-username"},
            ])
        );
    }

    #[test]
    fn a_reference_stands_only_where_a_credential_goes() {
        let text = keyless()
            .replace(
                r#"bootstrap_servers: "kafka:9092""#,
                "bootstrap_servers: {secretKeyRef: {name: kafka, key: servers}}",
            )
            .replace(
                "sasl.username: publisher",
                "sasl.username: {secretKeyRef: {name: Bad_Name, key: 'a b', optional: true}}",
            )
            .replace(
                "api_key: {secretKeyRef: {name: arize, key: api-key}}",
                "api_key: {secretKeyRef: {name: arize, key: api-key}, other: 1}",
            );
        let got = Spec::parse(&text).unwrap_err().0;
        let want = [
            "config.observation_sinks[1].config.api_key.other: unknown key; expected one of secretKeyRef",
            "config.observation_source.config.bootstrap_servers: secretKeyRef stands only in place of a credential (a value check-config shows as <redacted>, such as sasl.password or api_key); write this value itself",
            "config.observation_source.config.additional_consumer_config.sasl.username.secretKeyRef.optional: unknown key; expected one of name, key",
            "config.observation_source.config.additional_consumer_config.sasl.username.secretKeyRef.name: \"Bad_Name\" is not a valid Secret name",
            "config.observation_source.config.additional_consumer_config.sasl.username.secretKeyRef.key: \"a b\" is not a valid Secret key",
        ];
        for w in want {
            assert!(got.iter().any(|g| g == w), "missing {w:?} in {got:#?}");
        }
        // A key the environment layering cannot reach (it lowercases names).
        let text = keyless().replace(
            "sasl.username: publisher",
            "sasl.username: publisher\n        Sasl.Password: {secretKeyRef: {name: k, key: p}}",
        );
        let got = Spec::parse(&text).unwrap_err().to_string();
        assert!(
            got.contains("additional_consumer_config.Sasl.Password: the key \"Sasl.Password\" cannot be set through an environment variable"),
            "{got}"
        );
    }
}
