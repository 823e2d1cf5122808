//! Kafka SASL/OAUTHBEARER tokens supplied by the publisher itself.
//!
//! librdkafka here is built without curl, so its own `sasl.oauthbearer.method: oidc` is not
//! available (it refuses every `sasl.oauthbearer.*` OIDC key). The publisher reads those keys
//! from `additional_consumer_config` instead, keeps them away from librdkafka, and hands each
//! client a token through librdkafka's refresh callback (rdkafka's
//! `ClientContext::generate_oauth_token`), which librdkafka calls at start and again at 80% of
//! the token's lifetime; a failure goes back to librdkafka, which says it through the client's
//! error callback (so `/readyz`) and asks again 10 s later.
//!
//! Two sources, chosen by `sasl.oauthbearer.method`, and a third for test set-ups:
//! - `oidc`: the client-credentials grant, as librdkafka's own OIDC sends it (a form POST of
//!   `grant_type=client_credentials` and `scope` to `sasl.oauthbearer.token.endpoint.url`, the
//!   client id and secret in HTTP basic auth). The secret comes from
//!   `sasl.oauthbearer.client.secret.file` (read again at every fetch, so a rotated Secret is
//!   picked up) or `sasl.oauthbearer.client.secret`. The principal is the token's `sub` claim
//!   (or the claim `sasl.oauthbearer.sub.claim.name` names).
//! - `google`: Google's Application Default Credentials, in the form Google Cloud's Managed
//!   Service for Apache Kafka takes (its `GcpLoginCallbackHandler` and Python token provider):
//!   base64url of `{"typ":"JWT","alg":"GOOG_OAUTH2_TOKEN"}`, of the claims `exp`, `iat`,
//!   `iss: Google`, `scope: kafka`, `sub: <service account e-mail>`, and of the access token
//!   (scope `cloud-platform`), joined with dots.
//! - librdkafka's unsecured JWT, when `enable.sasl.oauthbearer.unsecure.jwt` is true without a
//!   method (see `kafka_unsecured`: librdkafka makes only the first one).
//!
//! A token is shared by every client of the process (consumer, dead-letter producer, helpers)
//! until half its lifetime has passed, so short-lived helper clients do not each ask the
//! token service.

use super::kafka_unsecured::Unsecured;
use base64::Engine;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The scope Google's Kafka handlers ask for.
pub const GOOGLE_KAFKA_SCOPE: &str = "https://www.googleapis.com/auth/cloud-platform";
/// The key naming the token source.
pub const METHOD_KEY: &str = "sasl.oauthbearer.method";
/// librdkafka's switch for its unsecured JWT, which the publisher then makes.
pub const UNSECURE_JWT_KEY: &str = "enable.sasl.oauthbearer.unsecure.jwt";
/// The publisher's own key: a file holding the client secret.
pub const SECRET_FILE_KEY: &str = "sasl.oauthbearer.client.secret.file";
/// How long one token request may take.
const FETCH_TIMEOUT: Duration = Duration::from_secs(30);

/// Where tokens come from.
#[derive(Clone, PartialEq, Eq)]
pub enum Method {
    /// Google's Application Default Credentials, in Managed Kafka's form.
    Google,
    /// An OAuth 2.0 client-credentials grant.
    Oidc(Oidc),
    /// librdkafka's unsecured JWT (`enable.sasl.oauthbearer.unsecure.jwt`, test set-ups).
    Unsecured(Unsecured),
}

/// The client-credentials settings (the secret itself is read only when a token is fetched).
#[derive(Clone, PartialEq, Eq)]
pub struct Oidc {
    /// `sasl.oauthbearer.token.endpoint.url`.
    pub endpoint: String,
    /// `sasl.oauthbearer.client.id`.
    pub client_id: String,
    /// Where the secret is.
    pub secret: Secret,
    /// `sasl.oauthbearer.scope`, sent when set.
    pub scope: Option<String>,
    /// The claim that names the principal (`sub` unless `sasl.oauthbearer.sub.claim.name`).
    pub sub_claim: String,
}

/// The client secret: a file read at every fetch, or the value itself.
#[derive(Clone, PartialEq, Eq)]
pub enum Secret {
    /// `sasl.oauthbearer.client.secret.file`.
    File(PathBuf),
    /// `sasl.oauthbearer.client.secret`.
    Literal(String),
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Secret::File(p) => write!(f, "file {}", p.display()),
            Secret::Literal(_) => f.write_str("<redacted>"),
        }
    }
}

impl std::fmt::Debug for Method {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Method::Google => f.write_str("google"),
            Method::Unsecured(u) => write!(
                f,
                "unsecured JWT for principal {} (enable.sasl.oauthbearer.unsecure.jwt, for test set-ups; lifetime {} s)",
                u.principal, u.life_seconds
            ),
            Method::Oidc(o) => write!(
                f,
                "oidc(endpoint {}, client {}, secret {:?}, scope {:?})",
                o.endpoint, o.client_id, o.secret, o.scope
            ),
        }
    }
}

/// What `additional_consumer_config` asks for: `Ok(None)` when `sasl.oauthbearer.method` is
/// not the publisher's (librdkafka gets the keys as they are), `Err` naming the setting and
/// what to do.
pub fn method(pairs: &[(String, String)]) -> Result<Option<Method>, String> {
    let get = |k: &str| {
        pairs
            .iter()
            .rev()
            .find(|(pk, _)| pk == k)
            .map(|(_, v)| v.trim())
            .filter(|v| !v.is_empty())
    };
    let key = |k: &str| format!("additional_consumer_config.{k}");
    let mechanism = get("sasl.mechanisms").or(get("sasl.mechanism"));
    let method = match get(METHOD_KEY) {
        None | Some("default") => {
            // librdkafka's own unsecured token is taken over only where librdkafka would make
            // it (OAUTHBEARER over SASL): see `kafka_unsecured`.
            let sasl = get("security.protocol")
                .is_some_and(|p| p.to_ascii_uppercase().starts_with("SASL_"));
            let oauthbearer = mechanism.is_some_and(|m| m.eq_ignore_ascii_case("OAUTHBEARER"));
            if !(sasl && oauthbearer && get(UNSECURE_JWT_KEY) == Some("true")) {
                return Ok(None);
            }
            let config = get("sasl.oauthbearer.config").unwrap_or("");
            Method::Unsecured(Unsecured::parse(config, &key("sasl.oauthbearer.config"))?)
        }
        Some("google") => Method::Google,
        Some("oidc") => {
            let required = |k: &str| {
                get(k).map(str::to_string).ok_or_else(|| {
                    format!("{}: required with sasl.oauthbearer.method: oidc", key(k))
                })
            };
            let endpoint = required("sasl.oauthbearer.token.endpoint.url")?;
            if !(endpoint.starts_with("https://") || endpoint.starts_with("http://")) {
                return Err(format!(
                    "{}: {endpoint:?} is not an http(s) URL",
                    key("sasl.oauthbearer.token.endpoint.url")
                ));
            }
            let secret = match (get(SECRET_FILE_KEY), get("sasl.oauthbearer.client.secret")) {
                (Some(f), None) => Secret::File(PathBuf::from(f)),
                (None, Some(s)) => Secret::Literal(s.to_string()),
                (Some(_), Some(_)) => return Err(format!("{} and {}: set one, not both (prefer the file: the Secret then holds no literal in the configuration)", key(SECRET_FILE_KEY), key("sasl.oauthbearer.client.secret"))),
                (None, None) => return Err(format!("{}: required with sasl.oauthbearer.method: oidc (a file holding the client secret, e.g. a mounted Secret), or sasl.oauthbearer.client.secret", key(SECRET_FILE_KEY))),
            };
            Method::Oidc(Oidc {
                endpoint,
                client_id: required("sasl.oauthbearer.client.id")?,
                secret,
                scope: get("sasl.oauthbearer.scope").map(str::to_string),
                sub_claim: get("sasl.oauthbearer.sub.claim.name")
                    .unwrap_or("sub")
                    .to_string(),
            })
        }
        Some(other) => {
            return Err(format!(
                "{}: {other:?} is not a method: oidc (client credentials from a token endpoint) or google (Application Default Credentials, for Google Cloud's Managed Kafka)",
                key(METHOD_KEY)
            ))
        }
    };
    if get("sasl.oauthbearer.extensions").is_some() {
        return Err(format!("{}: the Kafka client cannot send SASL extensions with a token the publisher supplies; remove it (a broker that needs extensions, such as Confluent Cloud's identity pools, cannot be used with sasl.oauthbearer.method)", key("sasl.oauthbearer.extensions")));
    }
    if mechanism.is_some_and(|m| !m.eq_ignore_ascii_case("OAUTHBEARER")) {
        return Err(format!(
            "{}: sasl.oauthbearer.method needs OAUTHBEARER (or leave it unset)",
            key("sasl.mechanisms")
        ));
    }
    match get("security.protocol").map(str::to_ascii_uppercase).as_deref() {
        Some("SASL_SSL" | "SASL_PLAINTEXT") => {}
        _ => return Err(format!("{}: sasl.oauthbearer.method needs SASL_SSL (or SASL_PLAINTEXT on a network you trust: the token would travel in clear)", key("security.protocol"))),
    }
    Ok(Some(method))
}

/// The settings librdkafka gets under a publisher-supplied method: every `sasl.oauthbearer.*`
/// key left out (librdkafka refuses the OIDC ones in this build, and the secret file key is
/// the publisher's), `sasl.mechanisms` OAUTHBEARER. Unchanged without one.
pub fn librdkafka_pairs(
    pairs: &[(String, String)],
    method: Option<&Method>,
) -> Vec<(String, String)> {
    if method.is_none() {
        return pairs.to_vec();
    }
    let mut out: Vec<(String, String)> = pairs
        .iter()
        .filter(|(k, _)| {
            !k.starts_with("sasl.oauthbearer.") && k != "sasl.mechanism" && k != UNSECURE_JWT_KEY
        })
        .cloned()
        .collect();
    out.retain(|(k, _)| k != "sasl.mechanisms");
    out.push(("sasl.mechanisms".into(), "OAUTHBEARER".into()));
    out
}

/// A token for librdkafka: the value, its principal, and when it expires.
#[derive(Clone)]
pub struct Token {
    /// What the client sends.
    pub value: String,
    /// The principal librdkafka reports.
    pub principal: String,
    /// Expiry.
    pub expires: SystemTime,
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Token(<redacted>, principal {}, expires {:?})",
            self.principal, self.expires
        )
    }
}

struct Cached {
    token: Token,
    reuse_until: SystemTime,
}

/// The process's token source, shared by every Kafka client.
pub struct Tokens {
    method: Method,
    rt: tokio::runtime::Runtime,
    http: reqwest::Client,
    google: tokio::sync::OnceCell<crate::auth::google::Credentials>,
    email: Mutex<Option<String>>,
    cached: Mutex<Option<Cached>>,
}

impl std::fmt::Debug for Tokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Tokens({:?})", self.method)
    }
}

impl Drop for Tokens {
    fn drop(&mut self) {
        // Dropped possibly inside an async context, where a runtime may not block.
        let rt = std::mem::replace(
            &mut self.rt,
            tokio::runtime::Builder::new_current_thread()
                .build()
                .expect("a current-thread runtime"),
        );
        rt.shutdown_background();
    }
}

impl Tokens {
    /// The source `pairs` ask for (`None` when librdkafka does it all): the one already in use
    /// for the same settings if there is one, so every client of the process (the consumer,
    /// the dead-letter producer, each helper) shares its token.
    pub fn from_settings(pairs: &[(String, String)]) -> Result<Option<Arc<Tokens>>, String> {
        static IN_USE: Mutex<Vec<std::sync::Weak<Tokens>>> = Mutex::new(Vec::new());
        let Some(method) = method(pairs)? else {
            return Ok(None);
        };
        let mut in_use = IN_USE.lock().unwrap_or_else(|e| e.into_inner());
        in_use.retain(|w| w.strong_count() > 0);
        if let Some(t) = in_use
            .iter()
            .filter_map(std::sync::Weak::upgrade)
            .find(|t| t.method == method)
        {
            return Ok(Some(t));
        }
        let t = Arc::new(Tokens::new(method)?);
        in_use.push(Arc::downgrade(&t));
        Ok(Some(t))
    }

    /// A source for `method`, with a thread of its own for the requests (librdkafka asks from
    /// whichever thread polls the client, inside an async context or not).
    pub fn new(method: Method) -> Result<Tokens, String> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("kafka-oauth")
            .enable_all()
            .build()
            .map_err(|e| format!("Kafka OAUTHBEARER: cannot start its runtime: {e}"))?;
        let http = reqwest::Client::builder()
            .timeout(FETCH_TIMEOUT)
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("observation-publisher/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| format!("Kafka OAUTHBEARER: HTTP client: {e}"))?;
        Ok(Tokens {
            method,
            rt,
            http,
            google: tokio::sync::OnceCell::new(),
            email: Mutex::new(None),
            cached: Mutex::new(None),
        })
    }

    /// A token valid for at least half its lifetime (fetched when the shared one is older).
    /// Blocks the calling thread for at most the fetch timeout.
    pub fn token(self: &Arc<Self>) -> Result<Token, String> {
        let now = SystemTime::now();
        if let Some(c) = &*self.cached.lock().unwrap_or_else(|e| e.into_inner()) {
            if now < c.reuse_until {
                return Ok(c.token.clone());
            }
        }
        let (tx, rx) = std::sync::mpsc::channel();
        let me = Arc::clone(self);
        self.rt.spawn(async move {
            let _ = tx.send(me.fetch().await);
        });
        let token = rx
            .recv_timeout(FETCH_TIMEOUT + Duration::from_secs(5))
            .map_err(|_| "Kafka OAUTHBEARER: the token request did not finish".to_string())??;
        let half = token.expires.duration_since(now).unwrap_or_default() / 2;
        *self.cached.lock().unwrap_or_else(|e| e.into_inner()) = Some(Cached {
            token: token.clone(),
            reuse_until: now + half,
        });
        Ok(token)
    }

    async fn fetch(&self) -> Result<Token, String> {
        match &self.method {
            Method::Oidc(o) => self.client_credentials(o).await,
            Method::Google => self.google().await,
            Method::Unsecured(u) => {
                let (value, expires) = u.token(SystemTime::now());
                Ok(Token {
                    value,
                    principal: u.principal.clone(),
                    expires,
                })
            }
        }
    }

    async fn client_credentials(&self, o: &Oidc) -> Result<Token, String> {
        let what = format!("Kafka OAUTHBEARER token from {}", o.endpoint);
        let secret = match &o.secret {
            Secret::Literal(s) => s.clone(),
            Secret::File(p) => std::fs::read_to_string(p)
                .map(|s| s.trim_end_matches(['\r', '\n']).to_string())
                .map_err(|e| {
                    format!("{what}: cannot read {SECRET_FILE_KEY} {}: {e}", p.display())
                })?,
        };
        let body = form_body(o.scope.as_deref());
        let resp = self
            .http
            .post(&o.endpoint)
            .basic_auth(&o.client_id, Some(&secret))
            .header("accept", "application/json")
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body)
            .send()
            .await
            .map_err(|e| format!("{what}: {}", crate::error_text::with_causes(&e)))?;
        let status = resp.status();
        let body = resp.text().await.map_err(|e| format!("{what}: {e}"))?;
        if !status.is_success() {
            let detail: String = body.chars().take(300).collect();
            return Err(format!("{what}: HTTP {status}: {detail} (check sasl.oauthbearer.client.id, the client secret and sasl.oauthbearer.scope)"));
        }
        parse_token_response(&body, &o.sub_claim, &o.client_id, SystemTime::now())
            .map_err(|e| format!("{what}: {e}"))
    }

    async fn google(&self) -> Result<Token, String> {
        let creds = self
            .google
            .get_or_try_init(crate::auth::google::Credentials::application_default)
            .await
            .map_err(|e| format!("Kafka OAUTHBEARER (google): {e}"))?;
        let (access, expires) = creds
            .access_token(&[GOOGLE_KAFKA_SCOPE])
            .await
            .map_err(|e| format!("Kafka OAUTHBEARER (google): {e}"))?;
        let known = self.email.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let email = match known {
            Some(e) => e,
            None => {
                let e = google_email(&self.http).await?;
                *self.email.lock().unwrap_or_else(|e| e.into_inner()) = Some(e.clone());
                e
            }
        };
        Ok(google_token(&access, &email, expires, SystemTime::now()))
    }
}

/// The client-credentials form: librdkafka's fields, the scope percent-encoded.
pub fn form_body(scope: Option<&str>) -> String {
    const FORM: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
        .remove(b'-')
        .remove(b'.')
        .remove(b'_')
        .remove(b'~');
    match scope {
        Some(s) => format!(
            "grant_type=client_credentials&scope={}",
            percent_encoding::utf8_percent_encode(s, FORM)
        ),
        None => "grant_type=client_credentials".into(),
    }
}

fn secs(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs()
}

/// What a client context answers librdkafka's token refresh with (`tokens`: the process's
/// source, `None` when `sasl.oauthbearer.method` is not the publisher's). The error text
/// reaches the client's error callback, so the log and `/readyz`.
pub fn refresh(
    tokens: Option<&Arc<Tokens>>,
) -> Result<rdkafka::client::OAuthToken, Box<dyn std::error::Error>> {
    let Some(tokens) = tokens else {
        return Err("no OAUTHBEARER token source: set sasl.oauthbearer.method (oidc or google) in additional_consumer_config".into());
    };
    let t = tokens.token()?;
    let ms = t
        .expires
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis();
    Ok(rdkafka::client::OAuthToken {
        token: t.value,
        principal_name: t.principal,
        lifetime_ms: i64::try_from(ms).unwrap_or(i64::MAX),
    })
}

/// The two items of an rdkafka `ClientContext` that hand librdkafka the process's tokens
/// through [`refresh`]: `field` is the context's `Option<Arc<Tokens>>`. (rdkafka's trait is
/// foreign and its switch a constant, so every context states them; this writes them once.)
macro_rules! token_refresh {
    ($field:tt) => {
        const ENABLE_REFRESH_OAUTH_TOKEN: bool = true;

        fn generate_oauth_token(
            &self,
            _: Option<&str>,
        ) -> Result<rdkafka::client::OAuthToken, Box<dyn std::error::Error>> {
            $crate::auth::kafka::refresh(self.$field.as_ref())
        }
    };
}
pub(crate) use token_refresh;

/// Managed Kafka's token for `access` (see the module docs).
pub fn google_token(access: &str, email: &str, expires: SystemTime, now: SystemTime) -> Token {
    let b64 = |s: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s);
    let header = r#"{"typ":"JWT","alg":"GOOG_OAUTH2_TOKEN"}"#;
    let claims = serde_json::json!({
        "exp": secs(expires),
        "iat": secs(now),
        "iss": "Google",
        "scope": "kafka",
        "sub": email,
    });
    Token {
        value: format!(
            "{}.{}.{}",
            b64(header),
            b64(&claims.to_string()),
            b64(access)
        ),
        principal: email.to_string(),
        expires,
    }
}

/// The claims of a JWT (`None` for an opaque token).
fn jwt_claims(token: &str) -> Option<serde_json::Value> {
    let payload = token.split('.').nth(1)?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload.trim_end_matches('='))
        .ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// A token endpoint's answer: `access_token`, its lifetime from `expires_in` (else the JWT's
/// `exp`), its principal from the JWT claim `sub_claim` (else the client id, for an opaque
/// token).
pub fn parse_token_response(
    body: &str,
    sub_claim: &str,
    client_id: &str,
    now: SystemTime,
) -> Result<Token, String> {
    let v: serde_json::Value =
        serde_json::from_str(body).map_err(|e| format!("the answer is not JSON ({e})"))?;
    let access = v["access_token"]
        .as_str()
        .filter(|s| !s.is_empty())
        .ok_or("the answer has no access_token")?;
    let claims = jwt_claims(access);
    let expires =
        match (
            v["expires_in"].as_f64(),
            claims.as_ref().and_then(|c| c["exp"].as_f64()),
        ) {
            (Some(s), _) if s > 0.0 => now + Duration::from_secs_f64(s),
            (_, Some(exp)) if exp > 0.0 => UNIX_EPOCH + Duration::from_secs_f64(exp),
            _ => return Err(
                "the answer has neither expires_in nor a JWT exp claim: its lifetime is unknown"
                    .into(),
            ),
        };
    let principal = claims
        .as_ref()
        .and_then(|c| c[sub_claim].as_str())
        .unwrap_or(client_id)
        .to_string();
    Ok(Token {
        value: access.to_string(),
        principal,
        expires,
    })
}

/// The service account e-mail the Google credentials act as: from the credentials file
/// (`client_email`, or the impersonation URL's account), else the metadata server.
async fn google_email(http: &reqwest::Client) -> Result<String, String> {
    let what = "Kafka OAUTHBEARER (google): the service account e-mail (Managed Kafka's principal)";
    if let Ok(path) = std::env::var("GOOGLE_APPLICATION_CREDENTIALS") {
        let text = std::fs::read_to_string(&path).map_err(|e| {
            format!("{what}: cannot read GOOGLE_APPLICATION_CREDENTIALS {path}: {e}")
        })?;
        let v: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| format!("{what}: {path} is not JSON: {e}"))?;
        return email_of_file(&v).map_err(|e| format!("{what}: {path}: {e}"));
    }
    let host =
        std::env::var("GCE_METADATA_HOST").unwrap_or_else(|_| "metadata.google.internal".into());
    let url = format!("http://{host}/computeMetadata/v1/instance/service-accounts/default/email");
    let resp = http
        .get(&url)
        .header("Metadata-Flavor", "Google")
        .send()
        .await
        .map_err(|e| format!("{what}: {url}: {}", crate::error_text::with_causes(&e)))?;
    let status = resp.status();
    let body = resp
        .text()
        .await
        .map_err(|e| format!("{what}: {url}: {e}"))?;
    if !status.is_success() || body.trim().is_empty() {
        return Err(format!("{what}: {url}: HTTP {status}"));
    }
    Ok(body.trim().to_string())
}

/// The e-mail a credentials file acts as.
pub fn email_of_file(v: &serde_json::Value) -> Result<String, String> {
    if let Some(e) = v["client_email"].as_str() {
        return Ok(e.to_string());
    }
    if let Some(url) = v["service_account_impersonation_url"].as_str() {
        let account = url
            .rsplit_once("serviceAccounts/")
            .and_then(|(_, a)| a.split(':').next())
            .filter(|a| a.contains('@'));
        if let Some(a) = account {
            return Ok(a.to_string());
        }
    }
    Err(format!("credentials of type {:?} name no service account: Managed Kafka's principal is a service account; use a service-account key, the metadata server (GKE workload identity), or a federation or impersonation file with service_account_impersonation_url", v["type"].as_str().unwrap_or("?")))
}

#[cfg(test)]
#[path = "kafka_tests.rs"]
mod tests;
