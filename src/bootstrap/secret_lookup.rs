//! The Kafka credentials a spec reads from existing Secrets, read by bootstrap itself for its own
//! look-ups (the partition count `apply` compares with the replicas, the lag of `status` and of
//! `delete --drain`).
//!
//! A setting written `{secretKeyRef: {name, key}}` stands in the parsed spec as its placeholder,
//! so a spec kept in git holds no secret; the pods get the value from the kubelet. bootstrap's
//! look-up client authenticates as the publisher does, so it needs the value too: it reads the
//! same Secret key, in the spec's namespace (a `secretKeyRef` names a Secret of the pod's own
//! namespace), through its kube client. The value goes into the look-up client's configuration
//! only: never into a log, an error text or a manifest.
//!
//! Finding the references and filling them in are pure ([`kafka_refs`], [`fill`]); [`lookup_source`]
//! only reads the Secrets.

use super::error::BootstrapError;
use super::kafka_auth::SecretRef;
use super::spec::{SecretEnv, Spec};
use crate::config::KafkaSource;
use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use kube::Client;
use std::collections::BTreeMap;

/// Where the consumer's librdkafka settings sit in the run config.
const SETTINGS: [&str; 3] = ["observation_source", "config", "additional_consumer_config"];

/// One librdkafka setting of the source read from a Secret key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KafkaRef {
    /// The setting, e.g. `sasl.password`.
    pub setting: String,
    /// The Secret key holding its value.
    pub secret: SecretRef,
}

/// The consumer settings among the spec's references to Secret keys.
pub fn kafka_refs(envs: &[SecretEnv]) -> Vec<KafkaRef> {
    envs.iter()
        .filter_map(|e| match e.path.as_slice() {
            [a, b, c, setting] if [a, b, c] == SETTINGS => Some(KafkaRef {
                setting: setting.clone(),
                secret: e.secret.clone(),
            }),
            _ => None,
        })
        .collect()
}

/// The `data` of the Secrets the references name, as the API server answered: `None` for a
/// Secret that does not exist. (`stringData` is write-only: the API server folds it into
/// `data`.)
#[derive(Default)]
pub struct SecretData(BTreeMap<String, Option<BTreeMap<String, Vec<u8>>>>);

impl std::fmt::Debug for SecretData {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The values are credentials: only the Secrets' key names are shown.
        let keys: BTreeMap<&str, Option<Vec<&str>>> = (self.0.iter())
            .map(|(n, d)| {
                (
                    n.as_str(),
                    d.as_ref().map(|d| d.keys().map(String::as_str).collect()),
                )
            })
            .collect();
        f.debug_tuple("SecretData").field(&keys).finish()
    }
}

impl SecretData {
    /// Records what the API server answered for the Secret `name`.
    pub fn insert(&mut self, name: &str, data: Option<BTreeMap<String, Vec<u8>>>) {
        self.0.insert(name.to_string(), data);
    }

    fn has(&self, name: &str) -> bool {
        self.0.contains_key(name)
    }
}

/// Why a setting's value could not be read from its Secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Why {
    /// The Secret does not exist.
    NoSecret,
    /// The Secret has no such key; its keys are listed.
    NoKey(Vec<String>),
    /// The value is not UTF-8, which a librdkafka setting must be.
    NotText,
    /// bootstrap may not read the Secret (403); the API server's message.
    Forbidden(String),
}

/// A setting whose value bootstrap could not read from its Secret. The text names the setting,
/// the Secret and its key, and what to do; never the value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unresolved {
    /// The spec's namespace, where the Secret is looked for.
    pub namespace: String,
    /// The reference.
    pub at: KafkaRef,
    /// What went wrong.
    pub why: Why,
}

impl std::fmt::Display for Unresolved {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (ns, r) = (&self.namespace, &self.at);
        let (name, key) = (&r.secret.name, &r.secret.key);
        write!(
            f,
            "additional_consumer_config.{} is read from key {key:?} of Secret {ns}/{name}, which bootstrap reads to authenticate its Kafka look-ups (the partition count, the lag of status and of delete --drain), but ",
            r.setting
        )?;
        match &self.why {
            Why::NoSecret => write!(
                f,
                "that Secret does not exist; create it (kubectl -n {ns} create secret generic {name} --from-file={key}=FILE; the publisher's pods need it too) or correct secretKeyRef.name in the spec"
            ),
            Why::NoKey(keys) => write!(
                f,
                "the Secret has no key {key:?} (its keys: {}); add it to the Secret or correct secretKeyRef.key in the spec",
                if keys.is_empty() { "none".to_string() } else { keys.join(", ") }
            ),
            Why::NotText => write!(
                f,
                "its value is not UTF-8 text, which a librdkafka setting must be; store the credential as text"
            ),
            Why::Forbidden(msg) => write!(
                f,
                "bootstrap may not read it ({msg}); grant bootstrap's role `get` on secrets in namespace {ns} (deploy/rbac.yaml does)"
            ),
        }
    }
}

impl std::error::Error for Unresolved {}

impl From<Box<Unresolved>> for BootstrapError {
    fn from(u: Box<Unresolved>) -> Self {
        BootstrapError::KafkaCredential(u.to_string())
    }
}

/// `source` with each setting of `refs` set to its Secret key's value, taken from `secrets`
/// as is (a trailing newline stays, as in the pod's environment variable). Every other
/// setting is left as it was.
pub fn fill(
    source: &KafkaSource,
    refs: &[KafkaRef],
    secrets: &SecretData,
    namespace: &str,
) -> Result<KafkaSource, Box<Unresolved>> {
    let mut out = source.clone();
    for r in refs {
        let fail = |why| {
            Box::new(Unresolved {
                namespace: namespace.to_string(),
                at: r.clone(),
                why,
            })
        };
        let data = match secrets.0.get(&r.secret.name) {
            Some(Some(d)) => d,
            _ => return Err(fail(Why::NoSecret)),
        };
        let Some(bytes) = data.get(&r.secret.key) else {
            return Err(fail(Why::NoKey(data.keys().cloned().collect())));
        };
        let value = std::str::from_utf8(bytes).map_err(|_| fail(Why::NotText))?;
        for (k, v) in out.additional_consumer_config.iter_mut() {
            if *k == r.setting {
                *v = value.to_string();
            }
        }
    }
    Ok(out)
}

/// The spec's Kafka source with every setting it reads from a Secret filled in from the
/// cluster, for bootstrap's look-up client only; `None` when the spec has no Kafka source.
/// A Secret or key that is missing, or that bootstrap may not read, fails at once.
pub async fn lookup_source(
    client: &Client,
    spec: &Spec,
) -> Result<Option<KafkaSource>, BootstrapError> {
    let Some(source) = spec.config.observation_source.as_ref() else {
        return Ok(None);
    };
    let ns = &spec.namespace;
    let refs = kafka_refs(&spec.secret_envs);
    let api = Api::<Secret>::namespaced(client.clone(), ns);
    let mut secrets = SecretData::default();
    for r in &refs {
        let name = &r.secret.name;
        if secrets.has(name) {
            continue;
        }
        match api.get_opt(name).await {
            Ok(s) => secrets.insert(
                name,
                s.map(|s| {
                    (s.data.unwrap_or_default().into_iter())
                        .map(|(k, v)| (k, v.0))
                        .collect()
                }),
            ),
            Err(kube::Error::Api(s)) if s.code == 403 => {
                return Err(Box::new(Unresolved {
                    namespace: ns.clone(),
                    at: r.clone(),
                    why: Why::Forbidden(s.message),
                })
                .into())
            }
            Err(e) => {
                return Err(BootstrapError::kube(
                    format!(
                        "read Secret {ns}/{name} (for additional_consumer_config.{})",
                        r.setting
                    ),
                    e,
                ))
            }
        }
    }
    Ok(Some(fill(source, &refs, &secrets, ns)?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn source(settings: &[(&str, &str)]) -> KafkaSource {
        KafkaSource {
            topic: "t".into(),
            bootstrap_servers: "kafka:9092".into(),
            group_id: "g".into(),
            batch_size: 1,
            poll_timeout_seconds: 1.0,
            additional_consumer_config: (settings.iter())
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            buffer_capacity: 1,
            buffer_max_duration_seconds: 1,
        }
    }

    fn data(name: &str, items: &[(&str, &[u8])]) -> SecretData {
        let mut s = SecretData::default();
        s.insert(
            name,
            Some(
                (items.iter())
                    .map(|(k, v)| (k.to_string(), v.to_vec()))
                    .collect(),
            ),
        );
        s
    }

    #[test]
    fn the_parsed_specs_consumer_settings_from_secrets_are_its_kafka_references() {
        let text = crate::bootstrap::spec::tests::MINIMAL
            .replace(
                r#"{bootstrap_servers: "kafka:9092"}"#,
                r#"
      bootstrap_servers: "kafka:9092"
      additional_consumer_config:
        security.protocol: SASL_PLAINTEXT
        sasl.mechanisms: PLAIN
        sasl.username: publisher
        sasl.password: {secretKeyRef: {name: kafka, key: password}}"#,
            )
            .replace(
                "  observation_source:",
                "  - type: ARIZE\n    config:\n      api_key: {secretKeyRef: {name: arize, key: api-key}}\n      space_key: s\n  observation_source:",
            );
        let (spec, _) = Spec::parse(&text).unwrap_or_else(|p| panic!("{p}"));
        assert_eq!(spec.secret_envs.len(), 2, "{:?}", spec.secret_envs);
        let refs = kafka_refs(&spec.secret_envs);
        assert_eq!(refs, [kafka_ref("sasl.password", "kafka", "password")]);
        // And the parsed source holds the placeholder at that setting, which fill replaces.
        let source = spec.config.observation_source.as_ref().unwrap();
        let got = fill(
            source,
            &refs,
            &data("kafka", &[("password", b"pw\n")]),
            "mlobs",
        )
        .unwrap();
        let setting = |s: &KafkaSource| {
            (s.additional_consumer_config.iter())
                .find(|(k, _)| k == "sasl.password")
                .map(|(_, v)| v.clone())
        };
        assert_eq!(
            setting(source).as_deref(),
            Some("secretKeyRef:kafka/password")
        );
        assert_eq!(setting(&got).as_deref(), Some("pw\n"));
    }

    fn kafka_ref(setting: &str, name: &str, key: &str) -> KafkaRef {
        KafkaRef {
            setting: setting.into(),
            secret: SecretRef {
                name: name.into(),
                key: key.into(),
            },
        }
    }

    #[test]
    fn each_failure_names_the_setting_the_secret_its_key_and_what_to_do_never_a_value() {
        let src = source(&[("sasl.password", "secretKeyRef:kafka/password")]);
        let refs = [kafka_ref("sasl.password", "kafka", "password")];
        let cases: [(SecretData, &str); 3] = [
            (SecretData::default(), "does not exist; create it"),
            (
                data("kafka", &[("username", b"hunter2-user")]),
                "no key \"password\" (its keys: username); add it",
            ),
            (
                data("kafka", &[("password", &[0xff, 0xfe])]),
                "not UTF-8 text",
            ),
        ];
        for (secrets, want) in cases {
            let e = fill(&src, &refs, &secrets, "mlobs")
                .unwrap_err()
                .to_string();
            for part in [
                "additional_consumer_config.sasl.password",
                "Secret mlobs/kafka",
                "key \"password\"",
                want,
            ] {
                assert!(e.contains(part), "{part:?} not in {e}");
            }
            assert!(!e.contains("hunter2"), "{e}");
        }
        let forbidden = Unresolved {
            namespace: "mlobs".into(),
            at: refs[0].clone(),
            why: Why::Forbidden("secrets \"kafka\" is forbidden".into()),
        }
        .to_string();
        assert!(
            forbidden.contains("grant bootstrap's role `get` on secrets in namespace mlobs"),
            "{forbidden}"
        );
        // The Debug of what was read shows key names only.
        let mut read = data("kafka", &[("password", b"hunter2")]);
        read.insert("gone", None);
        assert_eq!(
            format!("{read:?}"),
            r#"SecretData({"gone": None, "kafka": Some(["password"])})"#
        );
    }

    proptest! {
        /// Every referenced setting gets exactly its Secret key's value (byte for byte, a
        /// trailing newline included); every other setting and field stays as it was.
        #[test]
        fn fill_sets_each_referenced_setting_to_its_keys_value_and_nothing_else(
            settings in proptest::collection::btree_map("[a-z]{1,6}(\\.[a-z]{1,6}){0,2}", "[ -~]{0,12}", 0..6),
            picks in proptest::collection::vec((any::<proptest::sample::Index>(), 0..3usize, "[ -~\n]{0,16}"), 0..4),
        ) {
            let settings: Vec<(String, String)> = settings.into_iter().collect();
            let mut secrets = SecretData::default();
            let mut refs = Vec::new();
            let mut want = settings.clone();
            let mut stored: BTreeMap<String, BTreeMap<String, Vec<u8>>> = BTreeMap::new();
            if !settings.is_empty() {
                for (i, secret, value) in &picks {
                    let at = i.index(settings.len());
                    let setting = &settings[at].0;
                    if refs.iter().any(|r: &KafkaRef| &r.setting == setting) {
                        continue;
                    }
                    let (name, key) = (format!("s{secret}"), format!("k-{at}"));
                    stored.entry(name.clone()).or_default().insert(key.clone(), value.clone().into_bytes());
                    refs.push(kafka_ref(setting, &name, &key));
                    want[at].1 = value.clone();
                }
            }
            for (name, d) in stored {
                secrets.insert(&name, Some(d));
            }
            let pairs: Vec<(&str, &str)> = settings.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            let src = source(&pairs);
            let got = fill(&src, &refs, &secrets, "ns").unwrap();
            prop_assert_eq!(&got.additional_consumer_config, &want);
            prop_assert_eq!(
                (&got.topic, &got.bootstrap_servers, &got.group_id),
                (&src.topic, &src.bootstrap_servers, &src.group_id)
            );
        }
    }
}
