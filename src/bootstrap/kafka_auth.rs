//! How KEDA's Kafka scaler authenticates, derived from the librdkafka settings the publisher's
//! consumer uses (`additional_consumer_config`), so that the scaler reads lag wherever the
//! publisher can read messages. Pure: [`super::spec`] checks it when autoscaling is on, and
//! [`super::keda`] builds the TriggerAuthentication and the config Secret's `keda-*` items from
//! it.

use std::collections::BTreeMap;

/// Prefix of the config Secret's keys that hold the scaler's credentials.
pub const SECRET_KEY_PREFIX: &str = "keda-";

/// How KEDA's Kafka scaler authenticates, derived from `additional_consumer_config`.
#[derive(Clone, PartialEq, Eq)]
pub struct KafkaAuth {
    /// KEDA's `sasl` mode (`plaintext`, `scram_sha256`, `scram_sha512`), when SASL is on.
    pub sasl: Option<&'static str>,
    /// TLS to the brokers.
    pub tls: bool,
    /// Certificate verification off (`enable.ssl.certificate.verification: false`).
    pub unsafe_ssl: bool,
    /// Secret values by KEDA authentication parameter (`username`, `password`, `ca`, `cert`,
    /// `key`, `keyPassword`).
    pub params: BTreeMap<&'static str, String>,
    /// Parameters whose value the spec reads from an existing Secret (`secretKeyRef`): the
    /// TriggerAuthentication points KEDA at that Secret's key, and the value is copied nowhere.
    pub refs: BTreeMap<&'static str, SecretRef>,
}

/// A key of an existing Secret in the version's namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretRef {
    /// The Secret's name.
    pub name: String,
    /// The key in its data.
    pub key: String,
}

impl std::fmt::Debug for KafkaAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The values are credentials: only their names are shown.
        f.debug_struct("KafkaAuth")
            .field("sasl", &self.sasl)
            .field("tls", &self.tls)
            .field("unsafe_ssl", &self.unsafe_ssl)
            .field("params", &self.params.keys().collect::<Vec<_>>())
            .field("refs", &self.refs)
            .finish()
    }
}

impl KafkaAuth {
    /// The config Secret's key holding `param`.
    pub fn secret_key(param: &str) -> String {
        format!("{SECRET_KEY_PREFIX}{param}")
    }

    /// Whether the scaler gets any credential (and so a TriggerAuthentication).
    pub fn has_credentials(&self) -> bool {
        !self.params.is_empty() || !self.refs.is_empty()
    }

    /// Moves the parameters whose value is `placeholder` to [`KafkaAuth::refs`], read from
    /// `secret` (a credential the spec reads from an existing Secret).
    pub fn take_ref(&mut self, placeholder: &str, secret: &SecretRef) {
        let params: Vec<&'static str> = (self.params.iter())
            .filter(|(_, v)| v.as_str() == placeholder)
            .map(|(p, _)| *p)
            .collect();
        for p in params {
            self.params.remove(p);
            self.refs.insert(p, secret.clone());
        }
    }

    /// The Secret items to add: `keda-<param>` → value.
    pub fn secret_items(&self) -> impl Iterator<Item = (String, &str)> + '_ {
        self.params
            .iter()
            .map(|(p, v)| (Self::secret_key(p), v.as_str()))
    }
}

/// What [`kafka_auth`] found.
#[derive(Debug, Default)]
pub struct Derived {
    /// The scaler's settings; `None` for a plaintext cluster.
    pub auth: Option<KafkaAuth>,
    /// Settings the scaler cannot follow but can do without.
    pub warnings: Vec<String>,
    /// Settings that would leave the scaler unable to read lag.
    pub problems: Vec<String>,
}

/// librdkafka keys that name a file in the publisher's pod: KEDA runs elsewhere and cannot read
/// it, so the scaler needs the PEM itself.
const FILE_KEYS: &[(&str, &str)] = &[
    ("ssl.certificate.location", "ssl.certificate.pem"),
    ("ssl.key.location", "ssl.key.pem"),
    (
        "ssl.keystore.location",
        "ssl.certificate.pem and ssl.key.pem",
    ),
];

/// Derives KEDA's Kafka authentication from the consumer's librdkafka settings (keys and values
/// as librdkafka reads them: `security.protocol` and `sasl.mechanisms` case-insensitively).
pub fn kafka_auth(consumer_config: &[(String, String)]) -> Derived {
    let get = |key: &str| {
        consumer_config
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    };
    let mut out = Derived::default();
    let protocol = get("security.protocol")
        .unwrap_or("plaintext")
        .to_ascii_lowercase();
    let (sasl_on, tls) = match protocol.as_str() {
        "plaintext" => (false, false),
        "ssl" => (false, true),
        "sasl_plaintext" => (true, false),
        "sasl_ssl" => (true, true),
        other => {
            out.problems.push(format!(
                "security.protocol {other:?} is not one librdkafka knows (plaintext, ssl, sasl_plaintext, sasl_ssl)"
            ));
            return out;
        }
    };
    let mut params = BTreeMap::new();
    let mut sasl = None;
    if sasl_on {
        // librdkafka's default mechanism is GSSAPI; `sasl.mechanism` is its alias.
        let mechanism = get("sasl.mechanisms")
            .or_else(|| get("sasl.mechanism"))
            .unwrap_or("GSSAPI")
            .to_ascii_uppercase();
        if mechanism == "OAUTHBEARER" {
            sasl = oauthbearer(consumer_config, &mut params, &mut out.problems);
        }
        sasl = sasl.or(match mechanism.as_str() {
            "OAUTHBEARER" => None,
            "PLAIN" => Some("plaintext"),
            "SCRAM-SHA-256" => Some("scram_sha256"),
            "SCRAM-SHA-512" => Some("scram_sha512"),
            other => {
                out.problems.push(format!(
                    "sasl.mechanisms {other}: bootstrap can hand KEDA's Kafka scaler PLAIN, SCRAM and OAUTHBEARER (client credentials) settings only; set up its TriggerAuthentication yourself and leave autoscaling out of the spec"
                ));
                None
            }
        });
        for (key, param) in [("sasl.username", "username"), ("sasl.password", "password")] {
            if mechanism == "OAUTHBEARER" {
                break;
            }
            match get(key) {
                Some(v) if !v.is_empty() => {
                    params.insert(param, v.to_string());
                }
                _ if sasl.is_some() => out.problems.push(format!(
                    "{key} is required with SASL {mechanism}: KEDA's scaler authenticates with it"
                )),
                _ => {}
            }
        }
    }
    let mut unsafe_ssl = false;
    if tls {
        for (key, param) in [
            ("ssl.ca.pem", "ca"),
            ("ssl.certificate.pem", "cert"),
            ("ssl.key.pem", "key"),
            ("ssl.key.password", "keyPassword"),
        ] {
            if let Some(v) = get(key).filter(|v| !v.is_empty()) {
                params.insert(param, v.to_string());
            }
        }
        if params.contains_key("cert") != params.contains_key("key") {
            out.problems.push(
                "ssl.certificate.pem and ssl.key.pem go together: KEDA's scaler needs both for a client certificate".into(),
            );
        }
        for (key, instead) in FILE_KEYS {
            if get(key).is_some() {
                out.problems.push(format!(
                    "{key} names a file in the publisher's pod, which KEDA's scaler cannot read: give the PEM as {instead}"
                ));
            }
        }
        match get("ssl.ca.location") {
            Some(v) if v != "probe" && !params.contains_key("ca") => out.warnings.push(
                "ssl.ca.location names a file in the publisher's pod: KEDA's scaler verifies the brokers against its own trusted roots unless the CA is given as ssl.ca.pem"
                .into(),
            ),
            _ => {}
        }
        if get("enable.ssl.certificate.verification")
            .is_some_and(|v| v.eq_ignore_ascii_case("false"))
        {
            unsafe_ssl = true;
            out.warnings.push(
                "enable.ssl.certificate.verification is false: KEDA's scaler skips verification too (unsafeSsl)".into(),
            );
        }
    }
    if sasl_on || tls {
        out.auth = Some(KafkaAuth {
            sasl,
            tls,
            unsafe_ssl,
            params,
            refs: BTreeMap::new(),
        });
    }
    out
}

/// KEDA's Kafka scaler under OAUTHBEARER: it runs the client-credentials grant itself
/// (`sasl: oauthbearer`, the client id and secret as `username` and `password`,
/// `oauthTokenEndpointUri`, comma-separated `scopes`), so it can follow the publisher's
/// `sasl.oauthbearer.method: oidc` when the secret itself is in the spec, and nothing else.
fn oauthbearer(
    consumer_config: &[(String, String)],
    params: &mut BTreeMap<&'static str, String>,
    problems: &mut Vec<String>,
) -> Option<&'static str> {
    use crate::auth::kafka::{Method, Secret};
    let refuse =
        "leave autoscaling out of the spec and set up KEDA's TriggerAuthentication yourself";
    match crate::auth::kafka::method(consumer_config) {
        Err(e) => problems.push(e),
        Ok(None) => problems.push(format!("sasl.mechanisms OAUTHBEARER without sasl.oauthbearer.method: oidc: KEDA's Kafka scaler needs the token endpoint and client credentials; set them, or {refuse}")),
        Ok(Some(Method::Google)) => problems.push(format!("sasl.oauthbearer.method google: KEDA's Kafka scaler cannot get Google's Managed Kafka tokens (its OAUTHBEARER runs the client-credentials grant only); {refuse} (for example KEDA's gcp-stackdriver scaler on Managed Kafka's consumer-lag metric)")),
        Ok(Some(Method::Unsecured(_))) => problems.push(format!("enable.sasl.oauthbearer.unsecure.jwt: KEDA's Kafka scaler cannot make librdkafka's unsecured tokens (its OAUTHBEARER runs the client-credentials grant only); {refuse}")),
        Ok(Some(Method::Oidc(o))) => match o.secret {
            Secret::File(_) => problems.push(format!("{}: the file is in the publisher's pod, which KEDA's scaler cannot read; give KEDA the secret as sasl.oauthbearer.client.secret (bootstrap keeps it in the version's Secret), or {refuse}", crate::auth::kafka::SECRET_FILE_KEY)),
            Secret::Literal(secret) => {
                params.insert("username", o.client_id);
                params.insert("password", secret);
                params.insert("oauthTokenEndpointUri", o.endpoint);
                if let Some(scope) = o.scope {
                    params.insert("scopes", scope.split_whitespace().collect::<Vec<_>>().join(","));
                }
                return Some("oauthbearer");
            }
        },
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn cfg(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn a_plaintext_cluster_needs_no_authentication() {
        let d = kafka_auth(&cfg(&[("auto.offset.reset", "earliest")]));
        assert!(d.auth.is_none() && d.problems.is_empty() && d.warnings.is_empty());
        let d = kafka_auth(&cfg(&[("security.protocol", "PLAINTEXT")]));
        assert!(d.auth.is_none() && d.problems.is_empty());
    }

    #[test]
    fn sasl_mechanisms_map_to_keda_s_modes() {
        for (mechanism, mode) in [
            ("PLAIN", "plaintext"),
            ("SCRAM-SHA-256", "scram_sha256"),
            ("scram-sha-512", "scram_sha512"),
        ] {
            let d = kafka_auth(&cfg(&[
                ("security.protocol", "SASL_SSL"),
                ("sasl.mechanisms", mechanism),
                ("sasl.username", "svc"),
                ("sasl.password", "s3cret"),
            ]));
            assert!(d.problems.is_empty(), "{:?}", d.problems);
            let a = d.auth.unwrap();
            assert_eq!(a.sasl, Some(mode));
            assert!(a.tls);
            assert_eq!(a.params["username"], "svc");
            assert_eq!(a.params["password"], "s3cret");
        }
        // `sasl.mechanism` is librdkafka's alias; SASL_PLAINTEXT has no TLS.
        let a = kafka_auth(&cfg(&[
            ("security.protocol", "sasl_plaintext"),
            ("sasl.mechanism", "PLAIN"),
            ("sasl.username", "u"),
            ("sasl.password", "p"),
        ]))
        .auth
        .unwrap();
        assert_eq!((a.sasl, a.tls), (Some("plaintext"), false));
    }

    #[test]
    fn what_the_scaler_cannot_do_is_a_problem() {
        // librdkafka's default mechanism is GSSAPI.
        let d = kafka_auth(&cfg(&[("security.protocol", "SASL_SSL")]));
        assert!(d.problems[0].contains("GSSAPI"), "{:?}", d.problems);
        let d = kafka_auth(&cfg(&[
            ("security.protocol", "SASL_SSL"),
            ("sasl.mechanisms", "OAUTHBEARER"),
        ]));
        assert!(d.problems[0].contains("OAUTHBEARER"));
        let d = kafka_auth(&cfg(&[
            ("security.protocol", "SASL_PLAINTEXT"),
            ("sasl.mechanisms", "PLAIN"),
            ("sasl.username", "u"),
        ]));
        assert_eq!(d.problems.len(), 1);
        assert!(d.problems[0].starts_with("sasl.password is required"));
        let d = kafka_auth(&cfg(&[
            ("security.protocol", "SSL"),
            ("ssl.certificate.location", "/etc/kafka/client.pem"),
            ("ssl.key.pem", "KEY"),
        ]));
        assert_eq!(d.problems.len(), 2, "{:?}", d.problems);
        assert!(kafka_auth(&cfg(&[("security.protocol", "tls")])).problems[0].contains("\"tls\""));
    }

    #[test]
    fn oauthbearer_client_credentials_go_to_keda_and_what_it_cannot_do_is_refused() {
        let oidc = [
            ("security.protocol", "SASL_SSL"),
            ("sasl.mechanisms", "OAUTHBEARER"),
            ("sasl.oauthbearer.method", "oidc"),
            ("sasl.oauthbearer.token.endpoint.url", "https://idp/token"),
            ("sasl.oauthbearer.client.id", "cid"),
            ("sasl.oauthbearer.scope", "kafka.read kafka.write"),
        ];
        let mut with_secret = cfg(&oidc);
        with_secret.push(("sasl.oauthbearer.client.secret".into(), "s".into()));
        let d = kafka_auth(&with_secret);
        assert!(d.problems.is_empty(), "{:?}", d.problems);
        let a = d.auth.unwrap();
        assert_eq!(a.sasl, Some("oauthbearer"));
        let p: Vec<(&str, &str)> = a.params.iter().map(|(k, v)| (*k, v.as_str())).collect();
        assert_eq!(
            p,
            [
                ("oauthTokenEndpointUri", "https://idp/token"),
                ("password", "s"),
                ("scopes", "kafka.read,kafka.write"),
                ("username", "cid"),
            ]
        );
        let mut with_file = cfg(&oidc);
        with_file.push(("sasl.oauthbearer.client.secret.file".into(), "/s".into()));
        let d = kafka_auth(&with_file);
        assert!(
            d.problems[0].contains("KEDA's scaler cannot read"),
            "{:?}",
            d.problems
        );
        let d = kafka_auth(&cfg(&[
            ("security.protocol", "SASL_SSL"),
            ("sasl.oauthbearer.method", "google"),
            ("sasl.mechanisms", "OAUTHBEARER"),
        ]));
        assert!(d.problems[0].contains("google"), "{:?}", d.problems);
    }

    #[test]
    fn tls_material_is_handed_over_and_files_are_warned_about() {
        let d = kafka_auth(&cfg(&[
            ("security.protocol", "SSL"),
            ("ssl.ca.pem", "CA"),
            ("ssl.certificate.pem", "CERT"),
            ("ssl.key.pem", "KEY"),
            ("ssl.key.password", "kp"),
        ]));
        assert!(d.problems.is_empty() && d.warnings.is_empty());
        let a = d.auth.unwrap();
        assert_eq!(a.sasl, None);
        assert_eq!(
            a.params.keys().copied().collect::<Vec<_>>(),
            ["ca", "cert", "key", "keyPassword"]
        );
        let d = kafka_auth(&cfg(&[
            ("security.protocol", "SSL"),
            ("ssl.ca.location", "/etc/ssl/ca.pem"),
            ("enable.ssl.certificate.verification", "false"),
        ]));
        assert!(d.problems.is_empty());
        assert_eq!(d.warnings.len(), 2, "{:?}", d.warnings);
        let a = d.auth.unwrap();
        assert!(a.tls && a.unsafe_ssl && a.params.is_empty());
        // librdkafka's "probe" means the system's roots: nothing to warn about.
        let d = kafka_auth(&cfg(&[
            ("security.protocol", "SSL"),
            ("ssl.ca.location", "probe"),
        ]));
        assert!(d.warnings.is_empty());
    }

    #[test]
    fn debug_output_names_credentials_without_their_values() {
        let a = kafka_auth(&cfg(&[
            ("security.protocol", "SASL_SSL"),
            ("sasl.mechanisms", "PLAIN"),
            ("sasl.username", "svc-user"),
            ("sasl.password", "hunter2-secret"),
        ]))
        .auth
        .unwrap();
        let text = format!("{a:?}");
        assert!(text.contains("password") && !text.contains("hunter2-secret"));
    }

    proptest! {
        /// Every credential the scaler needs has a Secret key, and the last value of a repeated
        /// librdkafka key wins, as it does in the consumer.
        #[test]
        fn every_credential_maps_to_one_secret_key(
            user in "[a-z]{1,8}", first in "[a-z]{1,8}", last in "[A-Z]{1,8}",
            mechanism in prop::sample::select(vec!["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]),
            protocol in prop::sample::select(vec!["SASL_SSL", "SASL_PLAINTEXT"]),
        ) {
            let d = kafka_auth(&cfg(&[
                ("security.protocol", protocol),
                ("sasl.password", &first),
                ("sasl.mechanisms", mechanism),
                ("sasl.username", &user),
                ("sasl.password", &last),
            ]));
            prop_assert!(d.problems.is_empty());
            let a = d.auth.unwrap();
            let items: BTreeMap<String, &str> = a.secret_items().collect();
            prop_assert_eq!(items.len(), 2);
            prop_assert_eq!(items["keda-username"], user.as_str());
            prop_assert_eq!(items["keda-password"], last.as_str());
            prop_assert_eq!(a.tls, protocol == "SASL_SSL");
        }
    }
}
