//! Keeping secrets out of everything the publisher prints. Pure: no I/O.
//!
//! Three rules, applied by `check-config`, the start-up log line, every log line (a scrubbing
//! writer in [`crate::telemetry`], which also covers librdkafka's forwarded log lines and its
//! configuration errors) and the `bootstrap` output:
//! - every `additional_consumer_config` value is a secret unless its key is on
//!   [`NON_SECRET_CONSUMER_KEYS`], a list of librdkafka keys known to hold no secret (key-name
//!   matching misses keys such as `sasl.oauthbearer.config` or `sasl.kerberos.kinit.cmd`);
//! - elsewhere in the configuration, values of keys that name a secret (`password`, `api_key`,
//!   `token`, …) are secrets;
//! - credentials inside a URL or a server list (`scheme://user:password@host`,
//!   `user:password@host:9092`) are cut out of every string printed: [`strip_userinfo`].
//!
//! Free text (a log line, an error) is scrubbed by [`Scrubber`]: every secret value of the
//! configuration of at least [`MIN_SECRET_LEN`] bytes is replaced, then userinfo is stripped.

use std::borrow::Cow;

/// What a secret is replaced with.
pub const REDACTED: &str = "<redacted>";

/// Shorter secret values are redacted in the printed configuration but not searched for in
/// free text (replacing every `1` or `ab` in every log line would garble it).
pub const MIN_SECRET_LEN: usize = 4;

/// librdkafka consumer keys whose values are never secret (shown by `check-config` and the
/// start-up log). Every other `additional_consumer_config` value is redacted.
pub const NON_SECRET_CONSUMER_KEYS: &[&str] = &[
    "allow.auto.create.topics",
    "api.version.fallback.ms",
    "api.version.request",
    "api.version.request.timeout.ms",
    "auto.commit.interval.ms",
    "auto.offset.reset",
    "broker.address.family",
    "broker.address.ttl",
    "broker.version.fallback",
    "check.crcs",
    "client.dns.lookup",
    "client.id",
    "client.rack",
    "connections.max.idle.ms",
    "coordinator.query.interval.ms",
    "debug",
    "enable.partition.eof",
    "enable.ssl.certificate.verification",
    "fetch.error.backoff.ms",
    "fetch.max.bytes",
    "fetch.min.bytes",
    "fetch.queue.backoff.ms",
    "fetch.wait.max.ms",
    "group.instance.id",
    "group.protocol",
    "group.protocol.type",
    "group.remote.assignor",
    "heartbeat.interval.ms",
    "isolation.level",
    "log.connection.close",
    "log_level",
    "max.partition.fetch.bytes",
    "max.poll.interval.ms",
    "message.max.bytes",
    "metadata.max.age.ms",
    "metadata.recovery.strategy",
    "partition.assignment.strategy",
    "queued.max.messages.kbytes",
    "queued.min.messages",
    "receive.message.max.bytes",
    "reconnect.backoff.max.ms",
    "reconnect.backoff.ms",
    "retry.backoff.max.ms",
    "retry.backoff.ms",
    "sasl.kerberos.min.time.before.relogin",
    "sasl.kerberos.service.name",
    "sasl.mechanism",
    "sasl.mechanisms",
    "sasl.oauthbearer.method",
    "sasl.oauthbearer.scope",
    "security.protocol",
    "session.timeout.ms",
    "socket.connection.setup.timeout.ms",
    "socket.keepalive.enable",
    "socket.max.fails",
    "socket.nagle.disable",
    "socket.receive.buffer.bytes",
    "socket.send.buffer.bytes",
    "socket.timeout.ms",
    "ssl.ca.location",
    "ssl.certificate.location",
    "ssl.cipher.suites",
    "ssl.curves.list",
    "ssl.endpoint.identification.algorithm",
    "ssl.key.location",
    "ssl.sigalgs.list",
    "statistics.interval.ms",
    "topic.metadata.propagation.max.ms",
    "topic.metadata.refresh.fast.interval.ms",
    "topic.metadata.refresh.interval.ms",
    "topic.metadata.refresh.sparse",
];

/// A credential as an HTTP header value (`authorization: Bearer …`), marked sensitive: a
/// request's `Debug` shows `Sensitive` instead, and HTTP/2 sends it never-indexed, so no HPACK
/// table along the way keeps it.
pub fn sensitive_header(
    value: &str,
) -> Result<reqwest::header::HeaderValue, reqwest::header::InvalidHeaderValue> {
    let mut v = reqwest::header::HeaderValue::from_str(value)?;
    v.set_sensitive(true);
    Ok(v)
}

/// Whether an `additional_consumer_config` value may be printed.
pub fn is_non_secret_consumer_key(key: &str) -> bool {
    NON_SECRET_CONSUMER_KEYS.contains(&key)
}

/// Characters that end a token when scanning back from an `@`.
fn is_delimiter(c: char) -> bool {
    c.is_whitespace() || ",;'\"`()[]{}<>=|".contains(c)
}

/// Replaces the credentials in every `scheme://user[:password]@host` and `user:password@host`
/// in `s` with [`REDACTED`] (an e-mail address such as a service account, with no `:` before its
/// `@` and no scheme, is kept).
pub fn strip_userinfo(s: &str) -> Cow<'_, str> {
    strip(s, &mut Vec::new())
}

/// The credentials [`strip_userinfo`] removes from `s`: each whole `user:password` and its
/// parts (to search for them in free text).
pub fn userinfo_parts(s: &str) -> Vec<String> {
    let mut found = Vec::new();
    strip(s, &mut found);
    let parts: Vec<String> = found
        .iter()
        .flat_map(|f| f.split(':').map(str::to_string))
        .collect();
    found.extend(parts);
    found
}

fn strip<'a>(s: &'a str, found: &mut Vec<String>) -> Cow<'a, str> {
    if !s.contains('@') {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(at) = rest.find('@') {
        let head = &rest[..at];
        let token_start = head
            .char_indices()
            .rev()
            .find(|(_, c)| is_delimiter(*c))
            .map_or(0, |(i, c)| i + c.len_utf8());
        let token = &head[token_start..];
        let (start, after_scheme) = match token.rfind("://") {
            Some(i) => (token_start + i + 3, true),
            None => (token_start, false),
        };
        let userinfo = &head[start..];
        let credentials = !userinfo.is_empty()
            && userinfo != REDACTED
            && !userinfo.contains('/')
            && (after_scheme || userinfo.contains(':'));
        if credentials {
            found.push(userinfo.to_string());
            out.push_str(&head[..start]);
            out.push_str(REDACTED);
        } else {
            out.push_str(head);
        }
        out.push('@');
        rest = &rest[at + 1..];
    }
    out.push_str(rest);
    if found.is_empty() && out == s {
        Cow::Borrowed(s)
    } else {
        Cow::Owned(out)
    }
}

/// Scrubs free text: known secret values, then URL credentials. `Debug` counts the secrets
/// and never shows them.
#[derive(Clone, Default)]
pub struct Scrubber {
    /// Secret values to replace, longest first (so a secret containing another goes whole).
    secrets: Vec<String>,
}

impl std::fmt::Debug for Scrubber {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scrubber")
            .field("secrets", &self.secrets.len())
            .finish()
    }
}

impl Scrubber {
    /// A scrubber for `secrets` (values shorter than [`MIN_SECRET_LEN`] are ignored).
    pub fn new(secrets: impl IntoIterator<Item = String>) -> Self {
        let mut secrets: Vec<String> = secrets
            .into_iter()
            .filter(|s| s.len() >= MIN_SECRET_LEN)
            .collect();
        // JSON log lines escape quotes, backslashes and control characters: look for that form
        // too.
        let escaped: Vec<String> = secrets
            .iter()
            .filter_map(|s| {
                let j = serde_json::to_string(s).ok()?;
                let inner = &j[1..j.len() - 1];
                (inner != s).then(|| inner.to_string())
            })
            .collect();
        secrets.extend(escaped);
        secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
        secrets.dedup();
        Scrubber { secrets }
    }

    /// A scrubber for a Kafka client's settings: the credentials in `bootstrap` and every
    /// `additional_consumer_config` value not on [`NON_SECRET_CONSUMER_KEYS`].
    pub fn for_kafka(bootstrap: &str, config: &[(String, String)]) -> Self {
        let mut secrets = userinfo_parts(bootstrap);
        secrets.extend(
            config
                .iter()
                .filter(|(k, _)| !is_non_secret_consumer_key(k))
                .map(|(_, v)| v.clone()),
        );
        Scrubber::new(secrets)
    }

    /// `text` with every secret replaced and URL credentials stripped.
    pub fn scrub<'a>(&self, text: &'a str) -> Cow<'a, str> {
        let mut out = Cow::Borrowed(text);
        for s in &self.secrets {
            if out.contains(s.as_str()) {
                out = Cow::Owned(out.replace(s.as_str(), REDACTED));
            }
        }
        match strip_userinfo(&out) {
            Cow::Borrowed(_) => out,
            Cow::Owned(o) => Cow::Owned(o),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_credential_header_is_sensitive() {
        let v = sensitive_header("Bearer ya29.PLANTED-TOKEN").unwrap();
        assert!(v.is_sensitive());
        assert!(!format!("{v:?}").contains("PLANTED"));
        assert!(sensitive_header("a\nb").is_err());
    }

    #[test]
    fn userinfo_is_cut_from_urls_and_server_lists() {
        for (input, want) in [
            (
                "http://user:s3cret@example.com/bigquery/v2/",
                "http://<redacted>@example.com/bigquery/v2/",
            ),
            ("https://token@host:443", "https://<redacted>@host:443"),
            (
                "a:9092,user:pw@b:9092,c:9092",
                "a:9092,<redacted>@b:9092,c:9092",
            ),
            (
                "Failed to resolve 'user:SECRET@kafka:9092': Name or service not known",
                "Failed to resolve '<redacted>@kafka:9092': Name or service not known",
            ),
            (
                "sa@proj.iam.gserviceaccount.com",
                "sa@proj.iam.gserviceaccount.com",
            ),
            ("http://host/path@x", "http://host/path@x"),
            ("no at sign", "no at sign"),
            ("trailing @", "trailing @"),
        ] {
            assert_eq!(strip_userinfo(input), want, "{input}");
        }
    }

    #[test]
    fn userinfo_parts_name_what_was_removed() {
        assert_eq!(
            userinfo_parts("http://user:s3cret@h/x"),
            ["user:s3cret", "user", "s3cret"]
        );
        assert!(userinfo_parts("plain:9092").is_empty());
    }

    #[test]
    fn scrubber_replaces_secrets_and_userinfo() {
        let s = Scrubber::new(["hunter22".to_string(), "abc".to_string()]);
        assert_eq!(
            s.scrub("value hunter22 at http://u:p@h and abc"),
            "value <redacted> at http://<redacted>@h and abc"
        );
        assert!(matches!(s.scrub("nothing here"), Cow::Borrowed(_)));
    }

    #[test]
    fn only_listed_consumer_keys_are_shown() {
        assert!(is_non_secret_consumer_key("auto.offset.reset"));
        for k in [
            "sasl.password",
            "sasl.oauthbearer.config",
            "sasl.oauthbearer.assertion.private.key.passphrase",
            "sasl.kerberos.kinit.cmd",
            "sasl.oauthbearer.client.secret",
            "ssl.key.pem",
            "some.future.key",
        ] {
            assert!(!is_non_secret_consumer_key(k), "{k}");
        }
    }
}
