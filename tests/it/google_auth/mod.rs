//! Google credentials (`observation_publisher::auth::google`) against google-auth, Google's
//! own Python library (PyPI, `scripts/google-auth-oracle`): both refresh the same credential
//! files against the same fake token endpoints (OAuth, STS, IAM Credentials, a subject-token
//! URL, the metadata server; [`crate::http_capture`] over real HTTP), and the requests they send
//! must match: method, path and query, the headers that matter, form fields and JSON bodies,
//! the service-account JWT's header and claims.
//!
//! - [`oracle`]: every credential type ADC accepts, request for request.
//! - [`quota`]: the quota project google-auth puts on a request (`x-goog-user-project`), ours
//!   on BigQuery's REST and Storage Write calls.
//! - [`refresh`]: tokens replaced before expiry, an unreachable endpoint a transient error.
//! - [`startup`]: the binary with a malformed file exits 2 naming it and the variable; with the
//!   metadata server down it stays up and unready, and starts once a token comes.

mod oracle;
mod quota;
mod refresh;
mod startup;

use crate::http_capture::Captured;
use base64::Engine as _;
use serde_json::{json, Value as Json};
use std::path::Path;

pub(crate) const BIGQUERY_SCOPE: &str = "https://www.googleapis.com/auth/bigquery";

/// The Python of the oracle's venv (google-auth), created if needed.
pub(crate) fn oracle_python() -> std::path::PathBuf {
    static SETUP: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    crate::common::oracle_python("google-auth-oracle", "venv-google-auth", &SETUP)
}

/// Runs `oracle.py` with `args` and `env`; its stdout.
pub(crate) fn oracle(args: &[&str], env: &[(&str, String)]) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut cmd = std::process::Command::new(oracle_python());
    cmd.arg(root.join("tests/it/google_auth/oracle.py"))
        .args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd
        .env_remove("GOOGLE_APPLICATION_CREDENTIALS")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "oracle failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// `application/x-www-form-urlencoded` fields, decoded, in a sorted map.
fn form_fields(body: &[u8]) -> Json {
    let text = String::from_utf8_lossy(body).replace('+', " ");
    let mut map = serde_json::Map::new();
    let mut keys: Vec<(String, String)> = text
        .split('&')
        .filter(|kv| !kv.is_empty())
        .map(|kv| {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            let d = |s: &str| {
                percent_encoding::percent_decode_str(s)
                    .decode_utf8_lossy()
                    .into_owned()
            };
            (d(k), d(v))
        })
        .collect();
    keys.sort();
    for (k, v) in keys {
        let v = if k == "assertion" { jwt(&v) } else { json!(v) };
        map.insert(k, v);
    }
    Json::Object(map)
}

/// A JWT's header and claims, `iat`/`exp` replaced by the lifetime they give (the signature
/// and the clock differ between two runs).
fn jwt(token: &str) -> Json {
    let part = |i: usize| -> Json {
        let b = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(token.split('.').nth(i).unwrap_or_default())
            .unwrap_or_default();
        serde_json::from_slice(&b).unwrap_or(Json::Null)
    };
    let mut claims = part(1);
    let lifetime = claims["exp"].as_u64().unwrap_or(0) - claims["iat"].as_u64().unwrap_or(0);
    if let Some(m) = claims.as_object_mut() {
        m.remove("iat");
        m.remove("exp");
        m.insert("lifetime".into(), json!(lifetime));
    }
    let signed = token.split('.').nth(2).is_some_and(|s| s.len() > 300);
    json!({"header": part(0), "claims": claims, "signed": signed})
}

/// What of a request matters to the endpoint: method, path and query, the headers that carry
/// meaning, and the body as fields or JSON.
pub(crate) fn normal(c: &Captured) -> Json {
    let ct = c
        .header("content-type")
        .unwrap_or_default()
        .split(';')
        .next()
        .unwrap_or_default()
        .to_string();
    let body = match ct.as_str() {
        "application/x-www-form-urlencoded" => form_fields(&c.body),
        "application/json" => serde_json::from_slice(&c.body).unwrap_or(Json::Null),
        _ => json!(String::from_utf8_lossy(&c.body)),
    };
    json!({
        "method": c.method,
        "path": c.path,
        "content-type": ct,
        "authorization": c.header("authorization"),
        "metadata-flavor": c.header("metadata-flavor"),
        "x-goog-user-project": c.header("x-goog-user-project"),
        "x-test-header": c.header("x-test-header"),
        "body": body,
    })
}
