//! Alibaba Cloud access keys (for the MAXCOMPUTE sink): a static pair from the configuration, or
//! Alibaba's default credential chain when the configuration has none, in the order of Alibaba's
//! credentials SDK (`alibabacloud-credentials`, `DefaultCredentialsProvider`):
//!
//! 1. **environment**: `ALIBABA_CLOUD_ACCESS_KEY_ID` and `ALIBABA_CLOUD_ACCESS_KEY_SECRET`, with
//!    `ALIBABA_CLOUD_SECURITY_TOKEN` when the pair is temporary;
//! 2. **RRSA** (RAM Roles for Service Accounts, what ACK's pod-identity webhook sets):
//!    `ALIBABA_CLOUD_ROLE_ARN`, `ALIBABA_CLOUD_OIDC_PROVIDER_ARN`, `ALIBABA_CLOUD_OIDC_TOKEN_FILE`:
//!    `AssumeRoleWithOIDC` at the STS endpoint, the token file read again at every refresh (the
//!    kubelet rotates it);
//! 3. **ECS RAM role**: the instance metadata server (`100.100.100.200`), with an IMDSv2 token as
//!    the SDK asks for one.
//!
//! The SDK's CLI-profile and credentials-file steps are left out: a pod has neither. Where the SDK
//! silently skips a half-set step (a key id without its secret, two of RRSA's three variables),
//! this module refuses to start and names what is missing: falling through to another identity
//! than the one the operator meant to give is a security problem, not a convenience.
//!
//! Temporary keys are refreshed ahead of their expiry ([`refresh_at`]); a key is never handed out
//! within [`USABLE_MARGIN`] of its expiry. A refresh that fails while the old key is still usable
//! keeps the old key (logged, retried with backoff); one that fails without a usable key is a
//! retryable [`KeyError`], so the caller's request is not sent and is retried.

mod fetch;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// Alibaba's public STS endpoint, used when neither `sts_endpoint` nor
/// `ALIBABA_CLOUD_STS_REGION` says otherwise (the SDK's default too).
pub const DEFAULT_STS_ENDPOINT: &str = "https://sts.aliyuncs.com";
/// The ECS instance metadata server.
pub const METADATA_ENDPOINT: &str = "http://100.100.100.200";
/// Lifetime asked of STS for an RRSA key (the SDK's default; STS allows 900 s up to the role's
/// maximum session duration).
pub const SESSION_DURATION: Duration = Duration::from_secs(3600);
/// A key is not handed out this close to its expiry: a request signed now may spend up to its
/// timeout in flight, and the service's clock may run ahead of ours.
pub const USABLE_MARGIN: Duration = Duration::from_secs(60);
/// Latest a refresh starts before expiry (when 80% of the key's life is later than this).
pub const REFRESH_BEFORE: Duration = Duration::from_secs(5 * 60);

/// An access key pair, with its STS token and expiry when it is temporary. `Debug` never shows
/// the secret or the token.
#[derive(Clone, PartialEq, Eq)]
pub struct AccessKey {
    /// The access key id (sent in every `Authorization` header).
    pub id: String,
    secret: String,
    security_token: Option<String>,
    /// When a temporary key stops working (`None`: not known, a long-lived key).
    pub expires: Option<SystemTime>,
}

impl AccessKey {
    /// A key pair; `security_token` for a temporary one.
    pub fn new(id: impl Into<String>, secret: impl Into<String>, token: Option<String>) -> Self {
        AccessKey {
            id: id.into(),
            secret: secret.into(),
            security_token: token,
            expires: None,
        }
    }

    /// The secret: only ever used as the HMAC key.
    pub fn secret(&self) -> &str {
        &self.secret
    }

    /// The STS token of a temporary key.
    pub fn security_token(&self) -> Option<&str> {
        self.security_token.as_deref()
    }
}

impl std::fmt::Debug for AccessKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AccessKey")
            .field("id", &self.id)
            .field("secret", &crate::redact::REDACTED)
            .field(
                "security_token",
                &self
                    .security_token
                    .as_ref()
                    .map(|_| crate::redact::REDACTED),
            )
            .field("expires", &self.expires)
            .finish()
    }
}

/// RRSA: `AssumeRoleWithOIDC` with the service account's OIDC token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rrsa {
    /// `ALIBABA_CLOUD_ROLE_ARN`.
    pub role_arn: String,
    /// `ALIBABA_CLOUD_OIDC_PROVIDER_ARN`.
    pub oidc_provider_arn: String,
    /// `ALIBABA_CLOUD_OIDC_TOKEN_FILE`, read at every refresh.
    pub token_file: PathBuf,
    /// `RoleSessionName` (ActionTrail records it): `ALIBABA_CLOUD_ROLE_SESSION_NAME`, else
    /// `observation-publisher-` and the pod's name.
    pub session_name: String,
    /// The STS endpoint (a URL).
    pub sts_endpoint: String,
    /// `DurationSeconds` asked for.
    pub duration: Duration,
}

/// The ECS RAM role of the node, from the instance metadata server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EcsRole {
    /// `ALIBABA_CLOUD_ECS_METADATA`: the role's name; `None`: asked from the metadata server.
    pub role_name: Option<String>,
    /// The metadata server (a URL; [`METADATA_ENDPOINT`] outside tests).
    pub metadata: String,
    /// `ALIBABA_CLOUD_IMDSV1_DISABLED=true`: no fallback to requests without a metadata token.
    pub imdsv1_disabled: bool,
}

/// Where the keys come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// `access_key_id` / `access_key_secret` of the configuration.
    Static(AccessKey),
    /// `ALIBABA_CLOUD_ACCESS_KEY_ID` / `_SECRET` (and `_SECURITY_TOKEN`).
    Environment(AccessKey),
    /// RAM Roles for Service Accounts.
    Rrsa(Rrsa),
    /// The node's ECS RAM role.
    EcsRole(EcsRole),
}

/// An environment lookup: empty values count as unset (a templated manifest often renders an
/// empty value for an absent one).
fn var(env: &dyn Fn(&str) -> Option<String>, name: &str) -> Option<String> {
    env(name).filter(|v| !v.trim().is_empty())
}

/// The STS endpoint the environment names: `ALIBABA_CLOUD_STS_ENDPOINT` (a host, or a URL;
/// ACK's pod-identity webhook sets it from version 0.4.0, with the two variables after it), else
/// the one the credentials SDK derives: `ALIBABA_CLOUD_STS_REGION` gives
/// `https://sts.<region>.aliyuncs.com` (`sts-vpc.` with `ALIBABA_CLOUD_VPC_ENDPOINT_ENABLED=true`),
/// else [`DEFAULT_STS_ENDPOINT`].
pub fn default_sts_endpoint(env: &dyn Fn(&str) -> Option<String>) -> String {
    if let Some(e) = var(env, "ALIBABA_CLOUD_STS_ENDPOINT") {
        let e = e.trim().trim_end_matches('/');
        return if e.contains("://") {
            e.to_string()
        } else {
            format!("https://{e}")
        };
    }
    let vpc = var(env, "ALIBABA_CLOUD_VPC_ENDPOINT_ENABLED")
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"));
    let prefix = if vpc { "sts-vpc" } else { "sts" };
    match var(env, "ALIBABA_CLOUD_STS_REGION") {
        Some(region) => format!("https://{prefix}.{}.aliyuncs.com", region.trim()),
        None if vpc => DEFAULT_STS_ENDPOINT.replace("sts.", "sts-vpc."),
        None => DEFAULT_STS_ENDPOINT.to_string(),
    }
}

/// `RoleSessionName`: letters, digits and `.@-_`, 2 to 64 characters (STS's rule).
fn session_name(env: &dyn Fn(&str) -> Option<String>) -> String {
    if let Some(n) = var(env, "ALIBABA_CLOUD_ROLE_SESSION_NAME") {
        return n;
    }
    let pod: String = var(env, "HOSTNAME")
        .unwrap_or_else(|| "pod".into())
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || ".@-_".contains(c) {
                c
            } else {
                '-'
            }
        })
        .collect();
    let mut name = format!("observation-publisher-{pod}");
    name.truncate(64);
    name
}

impl Source {
    /// The source for a MAXCOMPUTE sink: `keys` (the configuration's pair) when given, else the
    /// chain (module docs) read from `env`. `sts_endpoint` (the sink's key) overrides the STS
    /// endpoint the environment implies. An error names the half-set variables.
    pub fn resolve(
        keys: Option<(&str, &str)>,
        sts_endpoint: Option<&str>,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Source, String> {
        if let Some((id, secret)) = keys {
            return Ok(Source::Static(AccessKey::new(id, secret, None)));
        }
        let id = var(env, "ALIBABA_CLOUD_ACCESS_KEY_ID");
        let secret = var(env, "ALIBABA_CLOUD_ACCESS_KEY_SECRET");
        match (id, secret) {
            (Some(id), Some(secret)) => {
                let token = var(env, "ALIBABA_CLOUD_SECURITY_TOKEN");
                return Ok(Source::Environment(AccessKey::new(id, secret, token)));
            }
            (Some(_), None) => return Err("ALIBABA_CLOUD_ACCESS_KEY_ID is set but ALIBABA_CLOUD_ACCESS_KEY_SECRET is not: set both, or neither to use RRSA or the ECS RAM role".into()),
            (None, Some(_)) => return Err("ALIBABA_CLOUD_ACCESS_KEY_SECRET is set but ALIBABA_CLOUD_ACCESS_KEY_ID is not: set both, or neither to use RRSA or the ECS RAM role".into()),
            (None, None) => {}
        }
        let rrsa = [
            "ALIBABA_CLOUD_ROLE_ARN",
            "ALIBABA_CLOUD_OIDC_PROVIDER_ARN",
            "ALIBABA_CLOUD_OIDC_TOKEN_FILE",
        ]
        .map(|n| (n, var(env, n)));
        if rrsa.iter().any(|(_, v)| v.is_some()) {
            let missing: Vec<&str> = rrsa
                .iter()
                .filter(|(_, v)| v.is_none())
                .map(|(n, _)| *n)
                .collect();
            if !missing.is_empty() {
                return Err(format!(
                    "RRSA is half set up: {} missing (ACK's pod-identity webhook sets all three \
                     when the ServiceAccount is annotated pod-identity.alibabacloud.com/role-name \
                     and the namespace labelled pod-identity.alibabacloud.com/injection: on)",
                    missing.join(", ")
                ));
            }
            let [(_, role_arn), (_, oidc_provider_arn), (_, token_file)] = rrsa;
            return Ok(Source::Rrsa(Rrsa {
                role_arn: role_arn.expect("checked"),
                oidc_provider_arn: oidc_provider_arn.expect("checked"),
                token_file: PathBuf::from(token_file.expect("checked")),
                session_name: session_name(env),
                sts_endpoint: sts_endpoint
                    .map(|e| e.trim_end_matches('/').to_string())
                    .unwrap_or_else(|| default_sts_endpoint(env)),
                duration: SESSION_DURATION,
            }));
        }
        if var(env, "ALIBABA_CLOUD_ECS_METADATA_DISABLED")
            .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
        {
            return Err(
                "no Alibaba Cloud credentials: the MAXCOMPUTE sink has no access_key_id \
                        and access_key_secret, ALIBABA_CLOUD_ACCESS_KEY_ID/_SECRET and RRSA's \
                        ALIBABA_CLOUD_ROLE_ARN/_OIDC_PROVIDER_ARN/_OIDC_TOKEN_FILE are unset, and \
                        ALIBABA_CLOUD_ECS_METADATA_DISABLED=true rules out the ECS RAM role"
                    .into(),
            );
        }
        Ok(Source::EcsRole(EcsRole {
            role_name: var(env, "ALIBABA_CLOUD_ECS_METADATA"),
            metadata: METADATA_ENDPOINT.into(),
            imdsv1_disabled: var(env, "ALIBABA_CLOUD_IMDSV1_DISABLED")
                .is_some_and(|v| v.trim().eq_ignore_ascii_case("true")),
        }))
    }

    /// One line saying which source is used, secrets never included (`check-config`, the
    /// start-up log).
    pub fn describe(&self) -> String {
        match self {
            Source::Static(_) => {
                "static keys: the MAXCOMPUTE sink's access_key_id and access_key_secret".into()
            }
            Source::Environment(k) => format!(
                "environment: ALIBABA_CLOUD_ACCESS_KEY_ID/_SECRET{}",
                if k.security_token.is_some() {
                    " with ALIBABA_CLOUD_SECURITY_TOKEN"
                } else {
                    ""
                }
            ),
            Source::Rrsa(r) => format!(
                "RRSA: AssumeRoleWithOIDC for role {} (OIDC provider {}, token file {}, session \
                 {}) at {}",
                r.role_arn,
                r.oidc_provider_arn,
                r.token_file.display(),
                r.session_name,
                r.sts_endpoint
            ),
            Source::EcsRole(e) => format!(
                "ECS RAM role {} from the instance metadata server {}",
                e.role_name
                    .as_deref()
                    .unwrap_or("(the node's, asked from the server)"),
                e.metadata
            ),
        }
    }

    /// Whether the keys of this source expire and are fetched (RRSA, ECS role).
    pub fn fetched(&self) -> bool {
        matches!(self, Source::Rrsa(_) | Source::EcsRole(_))
    }
}

/// No usable key: the request must not go out. Always retryable (an STS or metadata server
/// that is down, a role not trusted yet, a token file not mounted yet all heal), the message
/// says what was asked of whom and what to check.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct KeyError(pub String);

/// When a key obtained at `obtained` and expiring at `expires` is refreshed: at 80% of its life,
/// and no later than [`REFRESH_BEFORE`] its expiry.
pub fn refresh_at(obtained: SystemTime, expires: SystemTime) -> SystemTime {
    let life = expires.duration_since(obtained).unwrap_or_default();
    let at_80 = obtained + life.mul_f64(0.8);
    let latest = expires
        .checked_sub(REFRESH_BEFORE)
        .unwrap_or(SystemTime::UNIX_EPOCH);
    at_80.min(latest)
}

/// Whether `key` may sign a request at `now` (a key without expiry always may).
pub fn usable(key: &AccessKey, now: SystemTime) -> bool {
    key.expires.is_none_or(|e| now + USABLE_MARGIN < e)
}

struct Cached {
    key: Arc<AccessKey>,
    refresh_at: SystemTime,
}

#[derive(Default)]
struct State {
    cached: Option<Cached>,
    /// Refresh failures in a row (backoff while the old key is still usable).
    failures: u32,
    /// No refresh before this, while the old key is still usable.
    next_try: Option<SystemTime>,
}

/// Hands out a usable key of one [`Source`], fetching and refreshing it as needed. Concurrent
/// callers share one fetch.
pub struct Provider {
    source: Source,
    http: reqwest::Client,
    state: tokio::sync::Mutex<State>,
}

impl std::fmt::Debug for Provider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Provider")
            .field("source", &self.source.describe())
            .finish()
    }
}

impl Provider {
    /// A provider of `source`'s keys (builds its HTTP client: the SDK's timeouts).
    pub fn new(source: Source) -> Result<Self, String> {
        // Err means a provider is already installed: fine either way.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let (connect, read) = match &source {
            // The metadata server is on the node: the SDK gives it one second.
            Source::EcsRole(_) => (Duration::from_secs(1), Duration::from_secs(1)),
            _ => (Duration::from_secs(5), Duration::from_secs(10)),
        };
        let http = reqwest::Client::builder()
            .connect_timeout(connect)
            .timeout(connect + read)
            .user_agent(concat!("observation-publisher/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| format!("building the HTTP client for Alibaba credentials: {e}"))?;
        Ok(Provider {
            source,
            http,
            state: Default::default(),
        })
    }

    /// The source.
    pub fn source(&self) -> &Source {
        &self.source
    }

    /// A key usable now (module docs: refresh ahead of expiry, never an expired key).
    pub async fn key(&self) -> Result<Arc<AccessKey>, KeyError> {
        let (Source::Static(k) | Source::Environment(k)) = &self.source else {
            return self.fetched_key().await;
        };
        Ok(Arc::new(k.clone()))
    }

    async fn fetched_key(&self) -> Result<Arc<AccessKey>, KeyError> {
        let mut st = self.state.lock().await;
        let now = SystemTime::now();
        let old = st
            .cached
            .as_ref()
            .filter(|c| usable(&c.key, now))
            .map(|c| (Arc::clone(&c.key), c.refresh_at));
        if let Some((key, refresh)) = &old {
            let backing_off = st.next_try.is_some_and(|t| now < t);
            if now < *refresh || backing_off {
                return Ok(Arc::clone(key));
            }
        }
        match fetch::fetch(&self.http, &self.source).await {
            Ok(key) => {
                let now = SystemTime::now();
                let Some(expires) = key.expires.filter(|_| usable(&key, now)) else {
                    return Err(KeyError(format!(
                        "{}: the key answered expires at {}, within {USABLE_MARGIN:?} of this \
                         host's clock (or has no expiry): check the node's time sync",
                        self.source.describe(),
                        key.expires
                            .map_or("(none)".into(), |e| humantime::format_rfc3339_seconds(e)
                                .to_string())
                    )));
                };
                if st.failures > 0 {
                    tracing::info!(source = %self.source.describe(), "Alibaba credentials refreshed again");
                }
                let key = Arc::new(key);
                st.cached = Some(Cached {
                    key: Arc::clone(&key),
                    refresh_at: refresh_at(now, expires),
                });
                st.failures = 0;
                st.next_try = None;
                Ok(key)
            }
            Err(e) => {
                st.failures = st.failures.saturating_add(1);
                match old {
                    Some((key, _)) => {
                        let wait =
                            Duration::from_secs(1u64 << st.failures.min(6).saturating_sub(1));
                        st.next_try = Some(now + wait);
                        tracing::warn!(error = %e, retry_in_s = wait.as_secs(), expires = %key.expires.map(humantime::format_rfc3339_seconds).map(|t| t.to_string()).unwrap_or_default(), "refreshing Alibaba credentials failed; the current key is used until it expires");
                        Ok(key)
                    }
                    None => Err(e),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
