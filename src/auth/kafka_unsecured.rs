//! librdkafka's unsecured JWT (`enable.sasl.oauthbearer.unsecure.jwt`, for brokers in test
//! set-ups that accept any token), made by the publisher.
//!
//! librdkafka makes the first such token itself, but asks for every later one through the
//! refresh event, which rdkafka hands to the client context's callback: the callback must then
//! make it, or the pod loses its token when the first expires. The token is librdkafka's:
//! `{"alg":"none"}` and the claims `{"<principalClaimName>":"<principal>","iat":<s.mmm>,
//! "exp":<s.mmm>,"<scopeClaimName>":[<scope>...]}`, base64url without padding, joined by dots,
//! with an empty signature, from `sasl.oauthbearer.config` as librdkafka reads it
//! (`principal=`, `principalClaimName=`, `scope=` comma-separated, `scopeClaimName=`,
//! `lifeSeconds=`; space-separated). Extensions (`extension_<name>=`) cannot be sent with a
//! token the publisher supplies and are refused, as for the other methods.

use base64::Engine;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The settings of `sasl.oauthbearer.config` for an unsecured token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unsecured {
    /// `principal`.
    pub principal: String,
    /// `principalClaimName` (`sub`).
    pub principal_claim: String,
    /// `scope`, in order, without repeats or empty elements.
    pub scope: Vec<String>,
    /// `scopeClaimName` (`scope`).
    pub scope_claim: String,
    /// `lifeSeconds` (3600).
    pub life_seconds: u64,
}

impl Unsecured {
    /// Reads `sasl.oauthbearer.config` (`key`: its name in the configuration, for messages).
    pub fn parse(config: &str, key: &str) -> Result<Unsecured, String> {
        let bad = |what: String| {
            format!("{key}: {what} (for enable.sasl.oauthbearer.unsecure.jwt, e.g. \"principal=admin scope=read,write lifeSeconds=3600\")")
        };
        let (mut principal, mut principal_claim, mut scope, mut scope_claim, mut life) =
            (None, None, None, None, None);
        for item in config.split(' ').filter(|s| !s.is_empty()) {
            let (name, value) = item
                .split_once('=')
                .ok_or_else(|| bad(format!("{item:?} is not name=value")))?;
            if name.starts_with("extension_") {
                return Err(bad(format!("{name}: SASL extensions cannot be sent with a token the publisher supplies; remove it")));
            }
            let slot = match name {
                "principal" => &mut principal,
                "principalClaimName" => &mut principal_claim,
                "scope" => &mut scope,
                "scopeClaimName" => &mut scope_claim,
                "lifeSeconds" => &mut life,
                _ => return Err(bad(format!("{name:?} is not a setting: principal, principalClaimName, scope, scopeClaimName or lifeSeconds"))),
            };
            if slot.is_some() {
                return Err(bad(format!("{name} is given twice")));
            }
            if value.is_empty() {
                return Err(bad(format!("{name} is empty")));
            }
            if value.contains('"') {
                return Err(bad(format!("{name} may not hold '\"'")));
            }
            *slot = Some(value.to_string());
        }
        let life_seconds = match life {
            None => 3600,
            Some(v) => v
                .parse::<u64>()
                .ok()
                .filter(|&n| n > 0)
                .ok_or_else(|| bad(format!("lifeSeconds {v:?} is not a positive number")))?,
        };
        let mut elements: Vec<String> = Vec::new();
        for s in scope.as_deref().unwrap_or("").split(',') {
            if !s.is_empty() && !elements.iter().any(|e| e == s) {
                elements.push(s.to_string());
            }
        }
        Ok(Unsecured {
            principal: principal.ok_or_else(|| bad("no principal=".into()))?,
            principal_claim: principal_claim.unwrap_or_else(|| "sub".into()),
            scope: elements,
            scope_claim: scope_claim.unwrap_or_else(|| "scope".into()),
            life_seconds,
        })
    }

    /// The token issued at `now`, and when it expires (its principal is `principal`).
    pub fn token(&self, now: SystemTime) -> (String, SystemTime) {
        let b64 = |s: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s);
        let iat = now.duration_since(UNIX_EPOCH).unwrap_or_default();
        let exp = iat + Duration::from_secs(self.life_seconds);
        let seconds = |d: Duration| format!("{}.{:03}", d.as_secs(), d.subsec_millis());
        let mut claims = format!(
            "{{\"{}\":\"{}\",\"iat\":{},\"exp\":{}",
            self.principal_claim,
            self.principal,
            seconds(iat),
            seconds(exp)
        );
        if !self.scope.is_empty() {
            let list: Vec<String> = self.scope.iter().map(|s| format!("\"{s}\"")).collect();
            claims.push_str(&format!(",\"{}\":[{}]", self.scope_claim, list.join(",")));
        }
        claims.push('}');
        (
            format!("{}.{}.", b64(r#"{"alg":"none"}"#), b64(&claims)),
            UNIX_EPOCH + exp,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const KEY: &str = "additional_consumer_config.sasl.oauthbearer.config";

    fn claims(value: &str) -> serde_json::Value {
        let mut parts = value.split('.');
        let header = parts.next().unwrap();
        assert_eq!(
            base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(header)
                .unwrap(),
            br#"{"alg":"none"}"#
        );
        let body = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(parts.next().unwrap())
            .unwrap();
        assert_eq!(parts.next(), Some(""), "an empty signature");
        assert_eq!(parts.next(), None);
        serde_json::from_slice(&body).unwrap()
    }

    #[test]
    fn defaults_and_explicit_values_as_librdkafka_reads_them() {
        let d = Unsecured::parse("principal=fubar", KEY).unwrap();
        assert_eq!(
            (
                d.principal_claim.as_str(),
                d.scope_claim.as_str(),
                d.life_seconds
            ),
            ("sub", "scope", 3600)
        );
        let (value, expires) = d.token(UNIX_EPOCH + Duration::from_millis(1000));
        assert_eq!(expires, UNIX_EPOCH + Duration::from_secs(3601));
        let body = String::from_utf8(
            base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(value.split('.').nth(1).unwrap())
                .unwrap(),
        )
        .unwrap();
        assert_eq!(body, r#"{"sub":"fubar","iat":1.000,"exp":3601.000}"#);
        let e = Unsecured::parse(
            "  principalClaimName=azp principal=fubar scopeClaimName=roles scope=role1,,role2,role1 lifeSeconds=60",
            KEY,
        )
        .unwrap();
        let c = claims(&e.token(UNIX_EPOCH + Duration::from_millis(1500)).0);
        assert_eq!(
            c,
            serde_json::json!({"azp": "fubar", "iat": 1.5, "exp": 61.5, "roles": ["role1", "role2"]})
        );
    }

    #[test]
    fn what_librdkafka_refuses_is_refused_naming_the_key() {
        for (config, says) in [
            ("", "no principal="),
            ("scope=a", "no principal="),
            ("principal=a principal=b", "given twice"),
            ("principal=", "principal is empty"),
            ("principal=a\"b", "may not hold"),
            ("principal=a lifeSeconds=0", "lifeSeconds \"0\""),
            ("principal=a lifeSeconds=x", "lifeSeconds \"x\""),
            ("principal=a colour=red", "\"colour\" is not a setting"),
            (
                "principal=a extension_logicalCluster=lkc",
                "SASL extensions",
            ),
            ("principal=a stray", "\"stray\" is not name=value"),
        ] {
            let e = Unsecured::parse(config, KEY).unwrap_err();
            assert!(e.starts_with(KEY) && e.contains(says), "{config:?}: {e}");
        }
    }

    proptest! {
        #[test]
        fn every_token_decodes_to_its_settings(
            principal in "[a-zA-Z0-9_@.-]{1,20}",
            scope in proptest::collection::vec("[a-z]{1,6}", 0..4),
            life in 1u64..100_000,
            ms in 0u64..4_000_000_000_000,
        ) {
            let listed = if scope.is_empty() { String::new() } else { format!(" scope={}", scope.join(",")) };
            let config = format!("principal={principal}{listed} lifeSeconds={life}");
            let u = Unsecured::parse(&config, KEY).unwrap();
            let now = UNIX_EPOCH + Duration::from_millis(ms);
            let (value, expires) = u.token(now);
            let c = claims(&value);
            prop_assert_eq!(c["sub"].as_str(), Some(principal.as_str()));
            prop_assert_eq!(expires, now + Duration::from_secs(life));
            let exp = c["exp"].as_f64().unwrap();
            let iat = c["iat"].as_f64().unwrap();
            prop_assert!((exp - iat - life as f64).abs() < 0.01);
            let mut unique: Vec<String> = Vec::new();
            for s in scope { if !unique.contains(&s) { unique.push(s); } }
            if unique.is_empty() {
                prop_assert!(c.get("scope").is_none());
            } else {
                prop_assert_eq!(c["scope"].clone(), serde_json::json!(unique));
            }
        }
    }
}
