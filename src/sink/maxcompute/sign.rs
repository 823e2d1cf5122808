//! MaxCompute (ODPS) V2 request signing, exactly as pyodps's `AliyunAccount` signs (pure; no I/O).
//!
//! A temporary key (STS) signs the same way; its token goes in an `authorization-sts-token`
//! header that is not itself signed, as pyodps's `StsAccount` sends it ([`STS_TOKEN_HEADER`]).
//!
//! The canonical string (pyodps `BaseAccount._build_canonical_str`) is, one item a line:
//! the method; the `content-md5`, `content-type` and `date` header values (empty when absent);
//! every `x-odps-*` header and every `x-odps-*` query parameter as `key:value`, keys lower-cased
//! for headers and sorted together with the three above; then the resource: the request target
//! relative to the endpoint, percent-decoded, with **all** query parameters sorted by key
//! (`k=v`, or `k` when the value is empty). The header is
//! `Authorization: ODPS <access_id>:base64(HMAC-SHA1(secret, canonical))`.
//!
//! Headers are signed when they start with `x-odps-` (pyodps 0.13); pyodps 0.12.2 also signs a
//! header starting with `x-odps` without the dash, as a bare value line. We never send one, so
//! both versions agree on every request this crate makes (tests/it/maxcompute/sign.rs).
//!
//! pyodps percent-decodes the whole target once and then parses the query with `parse_qsl`,
//! which decodes again and reads `+` as a space; [`canonical_string`] does the same, so the
//! signature covers what pyodps (and so the service) computes from the bytes sent.

use base64::Engine;
use percent_encoding::percent_decode_str;
use std::fmt;

/// The header carrying a temporary key's STS token (pyodps `StsAccount`; not signed).
pub const STS_TOKEN_HEADER: &str = "authorization-sts-token";

/// An access key pair, with its STS token when it is temporary. `Debug` never shows the secret
/// or the token.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    /// `access_key_id`: sent in every `Authorization` header.
    pub access_id: String,
    /// `access_key_secret`: only ever used as the HMAC key.
    secret: String,
    /// The STS token of a temporary key: sent in [`STS_TOKEN_HEADER`].
    sts_token: Option<String>,
}

impl Credentials {
    /// A key pair.
    pub fn new(access_id: impl Into<String>, secret: impl Into<String>) -> Self {
        Credentials {
            access_id: access_id.into(),
            secret: secret.into(),
            sts_token: None,
        }
    }

    /// A temporary key pair and its STS token.
    pub fn temporary(
        access_id: impl Into<String>,
        secret: impl Into<String>,
        sts_token: impl Into<String>,
    ) -> Self {
        Credentials {
            sts_token: Some(sts_token.into()),
            ..Credentials::new(access_id, secret)
        }
    }

    /// The STS token, for a temporary key.
    pub fn sts_token(&self) -> Option<&str> {
        self.sts_token.as_deref()
    }
}

impl From<&crate::auth::alibaba::AccessKey> for Credentials {
    fn from(k: &crate::auth::alibaba::AccessKey) -> Self {
        Credentials {
            access_id: k.id.clone(),
            secret: k.secret().to_string(),
            sts_token: k.security_token().map(str::to_owned),
        }
    }
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("access_id", &self.access_id)
            .field("secret", &crate::redact::REDACTED)
            .field(
                "sts_token",
                &self.sts_token.as_ref().map(|_| crate::redact::REDACTED),
            )
            .finish()
    }
}

/// The request as signed: method, target relative to the endpoint (path and query as sent on
/// the wire, e.g. `/projects/p/tables/t?curr_project=p`) and the headers (any case).
#[derive(Debug, Clone, Copy)]
pub struct RequestToSign<'a> {
    /// HTTP method, upper case (`GET`, `POST`, `PUT`, …).
    pub method: &'a str,
    /// Path and query relative to the endpoint, percent-encoded as sent.
    pub target: &'a str,
    /// Request headers; `Date` must be among them (pyodps adds one when missing).
    pub headers: &'a [(&'a str, &'a str)],
}

/// Python's `unquote`: `%XX` decoded, the bytes read as UTF-8 with replacement characters.
fn unquote(s: &str) -> String {
    percent_decode_str(s).decode_utf8_lossy().into_owned()
}

/// `urllib.parse.parse_qsl(query, keep_blank_values=True)`: split on `&`, then on the first
/// `=`; `+` is a space and `%XX` is decoded in keys and values; empty pieces are skipped.
fn parse_qsl(query: &str) -> Vec<(String, String)> {
    query
        .split('&')
        .filter(|piece| !piece.is_empty())
        .map(|piece| {
            let (k, v) = piece.split_once('=').unwrap_or((piece, ""));
            (unquote(&k.replace('+', " ")), unquote(&v.replace('+', " ")))
        })
        .collect()
}

/// The canonical string pyodps signs for `req` (see the module docs).
pub fn canonical_string(req: &RequestToSign<'_>) -> String {
    let target = unquote(req.target);
    // `urlparse(.., allow_fragments=False)` on a relative URL: path up to the first `?`, and a
    // `;params` part cut from the last path segment.
    let (mut path, query) = match target.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (target.as_str(), None),
    };
    let last_segment = path.rfind('/').map_or(0, |i| i + 1);
    if let Some(semi) = path[last_segment..].find(';') {
        path = &path[..last_segment + semi];
    }
    let mut resource = path.to_string();
    let mut params = query.map(parse_qsl).unwrap_or_default();
    params.sort_by(|a, b| a.0.cmp(&b.0));
    if query.is_some_and(|q| !q.is_empty()) {
        resource.push('?');
        let joined: Vec<String> = params
            .iter()
            .map(|(k, v)| {
                if v.is_empty() {
                    k.clone()
                } else {
                    format!("{k}={v}")
                }
            })
            .collect();
        resource.push_str(&joined.join("&"));
    }

    // Sorted map of what is signed; later entries replace earlier ones, as in pyodps's dict.
    let mut signed: std::collections::BTreeMap<String, String> = Default::default();
    for (k, v) in req.headers {
        let k = k.to_lowercase();
        if k == "content-type" || k == "content-md5" || k.starts_with("x-odps-") {
            signed.insert(k, v.to_string());
        }
    }
    for k in ["content-type", "content-md5"] {
        signed.entry(k.to_string()).or_default();
    }
    let date = req
        .headers
        .iter()
        .rev()
        .find(|(k, _)| k.eq_ignore_ascii_case("date"))
        .map(|(_, v)| v.to_string())
        .unwrap_or_default();
    signed.insert("date".into(), date);
    for (k, v) in &params {
        if k.starts_with("x-odps-") {
            signed.insert(k.clone(), v.clone());
        }
    }

    let mut lines = vec![req.method.to_string()];
    for (k, v) in signed {
        if k.starts_with("x-odps-") {
            lines.push(format!("{k}:{v}"));
        } else {
            lines.push(v);
        }
    }
    lines.push(resource);
    lines.join("\n")
}

/// The `Authorization` header value: `ODPS <access_id>:base64(HMAC-SHA1(secret, canonical))`.
pub fn authorization(creds: &Credentials, req: &RequestToSign<'_>) -> String {
    let key = ring::hmac::Key::new(
        ring::hmac::HMAC_SHA1_FOR_LEGACY_USE_ONLY,
        creds.secret.as_bytes(),
    );
    let tag = ring::hmac::sign(&key, canonical_string(req).as_bytes());
    format!(
        "ODPS {}:{}",
        creds.access_id,
        base64::engine::general_purpose::STANDARD.encode(tag.as_ref())
    )
}

/// The headers that authenticate `req`: `Authorization`, and for a temporary key its token in
/// [`STS_TOKEN_HEADER`] (added after signing, as pyodps's `StsAccount` adds it).
pub fn auth_headers(creds: &Credentials, req: &RequestToSign<'_>) -> Vec<(&'static str, String)> {
    let mut out = vec![("Authorization", authorization(creds, req))];
    if let Some(t) = &creds.sts_token {
        out.push((STS_TOKEN_HEADER, t.clone()));
    }
    out
}

/// An RFC 1123 date in GMT, the `Date` header every signed request carries.
pub fn http_date(at: std::time::SystemTime) -> String {
    httpdate::fmt_http_date(at)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_string_orders_headers_and_params() {
        let headers = [
            ("Date", "Mon, 30 Nov 2026 10:00:00 GMT"),
            ("X-ODPS-B", "2"),
            ("x-odps-a", "1"),
            ("Content-Type", "application/xml"),
            ("User-Agent", "not signed"),
        ];
        let req = RequestToSign {
            method: "POST",
            target: "/projects/p/instances?x-odps-c=3&curr_project=p&flag",
            headers: &headers,
        };
        assert_eq!(
            canonical_string(&req),
            "POST\n\napplication/xml\nMon, 30 Nov 2026 10:00:00 GMT\nx-odps-a:1\nx-odps-b:2\n\
             x-odps-c:3\n/projects/p/instances?curr_project=p&flag&x-odps-c=3"
        );
    }

    #[test]
    fn query_is_decoded_twice_like_pyodps() {
        let headers = [("Date", "d")];
        let req = RequestToSign {
            method: "GET",
            target: "/projects/p%20q/tables/t?name=a+b%2Bc&e=%25C3%25A9",
            headers: &headers,
        };
        assert_eq!(
            canonical_string(&req),
            "GET\n\n\nd\n/projects/p q/tables/t?e=é&name=a b c"
        );
    }

    #[test]
    fn a_temporary_key_adds_its_token_unsigned() {
        let headers = [("Date", "d"), ("x-odps-a", "1")];
        let req = RequestToSign {
            method: "GET",
            target: "/projects/p",
            headers: &headers,
        };
        let plain = Credentials::new("STS.id", "secret");
        let temp = Credentials::temporary("STS.id", "secret", "tok");
        let a = auth_headers(&temp, &req);
        assert_eq!(
            a,
            vec![
                ("Authorization", authorization(&plain, &req)),
                (STS_TOKEN_HEADER, "tok".to_string())
            ]
        );
        assert_eq!(auth_headers(&plain, &req).len(), 1);
    }

    #[test]
    fn debug_never_shows_the_secret() {
        let c = Credentials::temporary("AKID", "s3cr3t-value", "t0ken-value");
        let shown = format!("{c:?}");
        assert!(shown.contains("AKID"));
        assert!(!shown.contains("s3cr3t"), "{shown}");
        assert!(!shown.contains("t0ken"), "{shown}");
    }
}
