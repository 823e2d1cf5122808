//! The requests that fetch a temporary key, as Alibaba's credentials SDK sends them
//! (tests/it/maxcompute/creds.rs compares them with `alibabacloud-credentials` against the same
//! fake endpoints).
//!
//! - RRSA: `AssumeRoleWithOIDC` (STS API version 2015-04-01, anonymous: the OIDC token is the
//!   proof). `Action`, `Format`, `Version` and `Timestamp` go in the query; `RoleArn`,
//!   `OIDCProviderArn`, `OIDCToken`, `RoleSessionName` and `DurationSeconds` in a form body of a
//!   POST, as Alibaba's Go credentials SDK sends them. The Python SDK puts all of them in a GET's
//!   query; STS reads both, and the body keeps the service account's token out of URLs that
//!   proxies and access logs record.
//! - ECS RAM role: `PUT /latest/api/token` (header `X-aliyun-ecs-metadata-token-ttl-seconds:
//!   21600`) for an IMDSv2 token, then `GET /latest/meta-data/ram/security-credentials/` for the
//!   role's name unless it is configured, a fresh token, and `GET …/security-credentials/<role>`,
//!   each with `X-aliyun-ecs-metadata-token`. Without a token (an old metadata server) the GETs
//!   go without one, unless `ALIBABA_CLOUD_IMDSV1_DISABLED=true`; a GET refused with a token is
//!   tried once without it, as the SDK does.

use super::{AccessKey, EcsRole, KeyError, Rrsa, Source};
use std::time::SystemTime;

/// Seconds asked for an IMDSv2 token (the SDK's).
const METADATA_TOKEN_TTL: &str = "21600";
const CREDENTIALS_PATH: &str = "/latest/meta-data/ram/security-credentials/";

/// Fetches a new key of a fetched source (RRSA, ECS role).
pub(super) async fn fetch(http: &reqwest::Client, source: &Source) -> Result<AccessKey, KeyError> {
    match source {
        Source::Rrsa(r) => assume_role_with_oidc(http, r).await,
        Source::EcsRole(e) => ecs_role(http, e).await,
        Source::Static(k) | Source::Environment(k) => Ok(k.clone()),
    }
}

fn chain(e: &reqwest::Error) -> String {
    // reqwest's message names the URL, never a header or the form body.
    crate::error_text::with_causes(e)
}

/// The JSON `Credentials` of an STS answer or the metadata server's document.
fn key_of(v: &serde_json::Value) -> Option<AccessKey> {
    let s = |k: &str| v.get(k).and_then(|x| x.as_str()).map(str::to_owned);
    let expires = humantime::parse_rfc3339(&s("Expiration")?).ok()?;
    let mut key = AccessKey::new(
        s("AccessKeyId")?,
        s("AccessKeySecret")?,
        Some(s("SecurityToken")?),
    );
    key.expires = Some(expires);
    Some(key)
}

async fn assume_role_with_oidc(http: &reqwest::Client, r: &Rrsa) -> Result<AccessKey, KeyError> {
    let asking = format!(
        "AssumeRoleWithOIDC for role {} at {}",
        r.role_arn, r.sts_endpoint
    );
    // Read at every refresh: the kubelet replaces the projected token before it expires.
    let token = tokio::fs::read_to_string(&r.token_file)
        .await
        .map_err(|e| {
            KeyError(format!(
                "{asking}: reading the OIDC token file {} (ALIBABA_CLOUD_OIDC_TOKEN_FILE): {e}: \
                 check the pod's projected service-account token volume",
                r.token_file.display()
            ))
        })?;
    let mut url = reqwest::Url::parse(&r.sts_endpoint)
        .map_err(|e| KeyError(format!("{asking}: sts_endpoint is not a URL: {e}")))?;
    let timestamp = humantime::format_rfc3339_seconds(SystemTime::now()).to_string();
    url.query_pairs_mut()
        .append_pair("Action", "AssumeRoleWithOIDC")
        .append_pair("Format", "JSON")
        .append_pair("Version", "2015-04-01")
        .append_pair("Timestamp", &timestamp);
    let form = [
        ("DurationSeconds", r.duration.as_secs().to_string()),
        ("RoleArn", r.role_arn.clone()),
        ("OIDCProviderArn", r.oidc_provider_arn.clone()),
        ("OIDCToken", token),
        ("RoleSessionName", r.session_name.clone()),
    ];
    // `application/x-www-form-urlencoded` is the serialization of a URL's query pairs; reqwest's
    // own `form` needs a feature this crate does not build.
    let mut encoder = reqwest::Url::parse("form:").expect("static URL");
    encoder.query_pairs_mut().extend_pairs(&form);
    let body = encoder.query().unwrap_or("").to_string();
    let resp = http
        .post(url)
        .header("Content-Type", "application/x-www-form-urlencoded")
        .body(body)
        .send()
        .await
        .map_err(|e| KeyError(format!("{asking}: no answer: {}", chain(&e))))?;
    let status = resp.status().as_u16();
    let body = resp
        .bytes()
        .await
        .map_err(|e| KeyError(format!("{asking}: answer cut short: {}", chain(&e))))?;
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
    if status != 200 {
        let s = |k: &str| v.get(k).and_then(|x| x.as_str()).map(str::to_owned);
        let said = match (s("Code"), s("Message"), s("RequestId")) {
            (Some(c), m, id) => format!(
                " {c}: {} (RequestId {})",
                m.unwrap_or_default(),
                id.unwrap_or_default()
            ),
            _ if body.is_empty() => String::new(),
            _ => format!(
                ": {}",
                String::from_utf8_lossy(&body)
                    .chars()
                    .take(200)
                    .collect::<String>()
            ),
        };
        let hint = if status == 429 || status >= 500 {
            "STS is unavailable for now; retrying".to_string()
        } else {
            format!(
                "check that the role's trust policy names OIDC provider {} and this pod's \
                 ServiceAccount, and that the role may be assumed for {} s",
                r.oidc_provider_arn,
                r.duration.as_secs()
            )
        };
        return Err(KeyError(format!("{asking}: HTTP {status}{said}: {hint}")));
    }
    v.get("Credentials").and_then(key_of).ok_or_else(|| {
        KeyError(format!(
            "{asking}: HTTP 200 without Credentials.AccessKeyId, AccessKeySecret, SecurityToken \
             and Expiration"
        ))
    })
}

/// One metadata request: `Ok(Err(status))` for an answer other than 200.
async fn metadata(req: reqwest::RequestBuilder) -> Result<Result<String, u16>, String> {
    let resp = req.send().await.map_err(|e| chain(&e))?;
    let status = resp.status().as_u16();
    let text = resp.text().await.map_err(|e| chain(&e))?;
    Ok(if status == 200 { Ok(text) } else { Err(status) })
}

impl EcsRole {
    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.metadata.trim_end_matches('/'))
    }

    /// An IMDSv2 token; `None` when the server gives none and IMDSv1 is allowed.
    async fn token(&self, http: &reqwest::Client) -> Result<Option<String>, KeyError> {
        let req = http.put(self.url("/latest/api/token")).header(
            "X-aliyun-ecs-metadata-token-ttl-seconds",
            METADATA_TOKEN_TTL,
        );
        let failed = match metadata(req).await {
            Ok(Ok(token)) => return Ok(Some(token)),
            Ok(Err(status)) => format!("HTTP {status}"),
            Err(e) => e,
        };
        if self.imdsv1_disabled {
            return Err(KeyError(format!(
                "ECS RAM role: no metadata token from {} ({failed}) and \
                 ALIBABA_CLOUD_IMDSV1_DISABLED=true: is this pod on an ECS node with a RAM role?",
                self.url("/latest/api/token")
            )));
        }
        Ok(None)
    }

    /// `GET path` with the token; refused with it, once more without (unless IMDSv1 is off).
    async fn get(
        &self,
        http: &reqwest::Client,
        path: &str,
        token: Option<&str>,
    ) -> Result<String, KeyError> {
        let send = |token: Option<&str>| {
            let mut req = http.get(self.url(path));
            if let Some(t) = token {
                req = req.header("X-aliyun-ecs-metadata-token", t);
            }
            metadata(req)
        };
        let mut answer = send(token).await;
        if token.is_some() && !self.imdsv1_disabled && !matches!(answer, Ok(Ok(_))) {
            answer = send(None).await;
        }
        match answer {
            Ok(Ok(text)) => Ok(text),
            Ok(Err(status)) => Err(KeyError(format!(
                "ECS RAM role: {} answered HTTP {status}: check that the node has a RAM role \
                 (ALIBABA_CLOUD_ECS_METADATA names it)",
                self.url(path)
            ))),
            Err(e) => Err(KeyError(format!(
                "ECS RAM role: no answer from {}: {e}: is this pod on an ECS node? Without one, \
                 give the MAXCOMPUTE sink keys or set up RRSA",
                self.url(path)
            ))),
        }
    }
}

async fn ecs_role(http: &reqwest::Client, e: &EcsRole) -> Result<AccessKey, KeyError> {
    let role = match &e.role_name {
        Some(r) => r.clone(),
        None => {
            let token = e.token(http).await?;
            e.get(http, CREDENTIALS_PATH, token.as_deref())
                .await?
                .trim()
                .to_string()
        }
    };
    let token = e.token(http).await?;
    let path = format!("{CREDENTIALS_PATH}{role}");
    let text = e.get(http, &path, token.as_deref()).await?;
    let v: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
    let code = v.get("Code").and_then(|c| c.as_str()).unwrap_or("");
    if code != "Success" {
        return Err(KeyError(format!(
            "ECS RAM role {role}: the metadata server answered Code {code:?}, not \"Success\""
        )));
    }
    key_of(&v).ok_or_else(|| {
        KeyError(format!(
            "ECS RAM role {role}: the metadata server's answer lacks AccessKeyId, \
             AccessKeySecret, SecurityToken or Expiration"
        ))
    })
}
