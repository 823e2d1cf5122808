//! OAuth bearer tokens from Google's Application Default Credentials (ADC).
//!
//! # Where the credentials come from
//! In ADC's order: the file `GOOGLE_APPLICATION_CREDENTIALS` names; else gcloud's
//! `application_default_credentials.json` (under `$CLOUDSDK_CONFIG`, by default
//! `~/.config/gcloud`); else the GCE/GKE metadata server (`GCE_METADATA_HOST`, by default
//! `metadata.google.internal`). A file may hold any credential type ADC accepts:
//!
//! | `type` | how a token is obtained |
//! | --- | --- |
//! | `service_account` | a JWT signed with the key (RS256) exchanged at `token_uri` (JWT-bearer grant) |
//! | `authorized_user` | the refresh token exchanged at `token_uri` (refresh-token grant) |
//! | `external_account` | a subject token (from a file, read again at each refresh, or a URL) exchanged at `token_url` (STS token exchange), then, with `service_account_impersonation_url`, `generateAccessToken` there |
//! | `impersonated_service_account` | the source credentials' token, then `generateAccessToken` at `service_account_impersonation_url` (with `delegates`) |
//!
//! `token_uri`, `token_url` and the impersonation URL are used exactly as the file gives them
//! (private and regional endpoints exist). The requests are the ones Google's own library,
//! google-auth, sends for the same file: `tests/it/google_auth` checks them against it.
//!
//! # Quota project
//! Requests are billed and rate-limited against the credentials' own project unless they name
//! a quota project in the `x-goog-user-project` header, as google-auth's `Credentials.apply`
//! does: `GOOGLE_CLOUD_QUOTA_PROJECT` if set, else the file's `quota_project_id` for
//! `authorized_user`, `external_account` and `impersonated_service_account` files (a
//! `service_account` file's `quota_project_id` is ignored, as google-auth ignores it). A user's
//! gcloud credentials need one: BigQuery refuses them without it. [`Credentials::quota_project`]
//! gives it; the BigQuery clients send it beside the bearer token. The token requests carry it
//! where google-auth's do: `generateAccessToken` called with an external account's federated
//! token, and with an impersonation source's own token when that source is an `authorized_user`
//! naming one.
//!
//! # Refresh and failures
//! A token is cached and replaced once less than a quarter of its life (at most four minutes)
//! is left; if the replacement cannot be fetched the cached token is used while it has more than
//! a minute left, so a token is never sent expired. Loading the configuration reads files only:
//! a malformed file or an unknown type is an [`AuthError::File`] (the sink's start-up exits 2
//! with the file and the variable named). Fetching a token talks to the network: an unreachable
//! endpoint, a 5xx or 429 ([`AuthError::Unreachable`]) and a refusal ([`AuthError::Refused`])
//! are errors of the call that needed the token, which the caller retries with backoff while
//! the pod reports itself unready (a metadata server slow at pod start, a Workload Identity
//! binding not propagated yet).
//!
//! # Why not Google's Rust crate
//! `google-cloud-auth` builds with rustls and the application's ring provider, but its every
//! release needs Rust 1.91 through `google-cloud-gax` (the image builds with 1.89) and it adds 41
//! crates (a second `sha2`/`digest`/`hmac` generation, `jiff` and `time`, `schemars` twice,
//! `serde_with` and `darling`). These flows are a few HTTP requests over the `reqwest` client
//! the sink already has, and `ring` (already rustls's provider) signs the JWT.

mod file;
mod flows;
#[cfg(test)]
mod tests;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub use file::CREDENTIALS_VAR;

/// The variable naming the quota project, over the file's `quota_project_id`.
pub const QUOTA_PROJECT_VAR: &str = "GOOGLE_CLOUD_QUOTA_PROJECT";

/// The header naming the quota project of a request.
pub const QUOTA_PROJECT_HEADER: &str = "x-goog-user-project";

/// OAuth scope for BigQuery (Storage Write and REST).
pub const BIGQUERY_SCOPE: &str = "https://www.googleapis.com/auth/bigquery";

/// A source of bearer tokens (cheap to clone: clones share the cached token).
#[derive(Clone)]
pub struct Credentials {
    inner: Arc<Inner>,
}

struct Inner {
    source: file::Source,
    /// Where the credentials came from, for messages.
    origin: String,
    scopes: Vec<String>,
    /// What `x-goog-user-project` says, if anything.
    quota_project: Option<String>,
    http: reqwest::Client,
    cache: tokio::sync::Mutex<Option<Cached>>,
}

/// A token and when to replace it.
#[derive(Clone)]
struct Cached {
    token: String,
    refresh_at: Instant,
    expires_at: Instant,
}

impl Cached {
    /// Replaced once less than a quarter of its life, at most four minutes, is left.
    fn new(token: String, now: Instant, lifetime: Duration) -> Cached {
        let margin = (lifetime / 4).min(Duration::from_secs(240));
        Cached {
            token,
            refresh_at: now + lifetime.saturating_sub(margin),
            expires_at: now + lifetime,
        }
    }

    /// Still good for the next call if the replacement cannot be fetched.
    fn usable(&self, now: Instant) -> bool {
        now + Duration::from_secs(60) < self.expires_at
    }
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match &self.inner.source {
            file::Source::ServiceAccount(_) => "service_account",
            file::Source::AuthorizedUser(_) => "authorized_user",
            file::Source::ExternalAccount(_) => "external_account",
            file::Source::Impersonated(_) => "impersonated_service_account",
            file::Source::Metadata { .. } => "metadata server",
        };
        write!(f, "Credentials({kind}, {})", self.inner.origin)
    }
}

/// Credentials could not be loaded, or a token could not be fetched.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    /// The credentials file is unreadable, malformed or of a type not supported: a fix is needed.
    #[error("Google credentials file {} ({origin}): {problem}; fix the file or point {CREDENTIALS_VAR} at a valid one", path.display())]
    File {
        /// The file.
        path: PathBuf,
        /// How it was found (the variable, or gcloud's default location).
        origin: String,
        /// What is wrong.
        problem: String,
    },
    /// The token endpoint (or the subject-token source, or the metadata server) could not be
    /// reached or answered 5xx/429: retried.
    #[error("Google credentials ({origin}): {what} unavailable: {cause}; retrying")]
    Unreachable {
        /// How the credentials were found.
        origin: String,
        /// Which endpoint or source.
        what: String,
        /// The transport error or status.
        cause: String,
    },
    /// The token endpoint refused the request (4xx): the credentials or their IAM bindings need
    /// a fix (a new Workload Identity binding takes minutes to apply).
    #[error("Google credentials ({origin}): {what} refused the request with HTTP {status}: {body}; check the credentials and their IAM bindings")]
    Refused {
        /// How the credentials were found.
        origin: String,
        /// Which endpoint.
        what: String,
        /// HTTP status.
        status: u16,
        /// The answer's body (the OAuth error; never a token).
        body: String,
    },
}

impl AuthError {
    /// Worth retrying as is: the endpoint was unreachable or overloaded.
    pub fn is_transient(&self) -> bool {
        matches!(self, AuthError::Unreachable { .. })
    }
}

impl Credentials {
    /// Application Default Credentials (see the module docs for the search order). Reads files
    /// only; the first token is fetched by the first call that needs it.
    pub async fn application_default() -> Result<Self, AuthError> {
        let (source, origin) = file::application_default()?;
        Ok(Self::build(source, origin))
    }

    /// The credentials in `path` (any type of the module docs).
    pub fn from_file(path: &std::path::Path) -> Result<Self, AuthError> {
        let origin = "given directly".to_string();
        let source = file::load(path, &origin)?;
        Ok(Self::build(source, origin))
    }

    /// The metadata server at `host` (`host[:port]`, as `GCE_METADATA_HOST` gives it).
    pub fn metadata_server(host: &str) -> Self {
        Self::build(
            file::Source::Metadata {
                root: format!("http://{host}/computeMetadata/v1"),
            },
            format!("metadata server {host}"),
        )
    }

    /// The same credentials asking for `scopes` instead of BigQuery's (a token cache of its own).
    pub fn with_scopes(&self, scopes: &[&str]) -> Self {
        let mut c = Self::build(self.inner.source.clone(), self.inner.origin.clone());
        Arc::get_mut(&mut c.inner).expect("just built").scopes =
            scopes.iter().map(|s| (*s).to_string()).collect();
        c
    }

    fn build(source: file::Source, origin: String) -> Self {
        // rustls's ring provider for the token client, as every client of the process uses
        // (reqwest is built without a provider of its own); an error means one is installed.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .timeout(Duration::from_secs(30))
            .build()
            .unwrap_or_default();
        let quota_project = file::quota_project(&source, std::env::var(QUOTA_PROJECT_VAR).ok());
        Credentials {
            inner: Arc::new(Inner {
                source,
                origin,
                scopes: vec![BIGQUERY_SCOPE.to_string()],
                quota_project,
                http,
                cache: tokio::sync::Mutex::new(None),
            }),
        }
    }

    /// The project requests are billed to when it is not the credentials' own: the value of
    /// the [`QUOTA_PROJECT_HEADER`] every request made with these credentials carries (see the
    /// module docs).
    pub fn quota_project(&self) -> Option<&str> {
        self.inner.quota_project.as_deref()
    }

    /// The value of an `authorization` header: `Bearer <token>`, refreshed before expiry.
    pub async fn authorization(&self) -> Result<String, AuthError> {
        Ok(format!("Bearer {}", self.token().await?))
    }

    /// The access token itself, refreshed before expiry.
    pub async fn token(&self) -> Result<String, AuthError> {
        Ok(self.cached().await?.token)
    }

    /// An access token for `scopes` and when it expires (a Kafka OAUTHBEARER token carries
    /// both), refreshed before expiry like [`Credentials::token`]'s.
    pub async fn access_token(
        &self,
        scopes: &[&str],
    ) -> Result<(String, std::time::SystemTime), AuthError> {
        let same = self
            .inner
            .scopes
            .iter()
            .map(String::as_str)
            .eq(scopes.iter().copied());
        let c = if same {
            self.cached().await?
        } else {
            self.with_scopes(scopes).cached().await?
        };
        let left = c.expires_at.saturating_duration_since(Instant::now());
        Ok((c.token, std::time::SystemTime::now() + left))
    }

    async fn cached(&self) -> Result<Cached, AuthError> {
        // One fetch at a time: callers arriving during a refresh wait for its token.
        let mut cache = self.inner.cache.lock().await;
        let now = Instant::now();
        if let Some(c) = cache.as_ref().filter(|c| now < c.refresh_at) {
            return Ok(c.clone());
        }
        let f = flows::Flow {
            http: &self.inner.http,
            origin: &self.inner.origin,
            quota_project: self.inner.quota_project.as_deref(),
        };
        match f.fetch(&self.inner.source, &self.inner.scopes).await {
            Ok(t) => {
                let c = Cached::new(t.token, Instant::now(), t.lifetime);
                *cache = Some(c.clone());
                Ok(c)
            }
            Err(e) => match cache.as_ref().filter(|c| c.usable(Instant::now())) {
                Some(c) => {
                    tracing::warn!(error = %e, "could not refresh the Google access token; using the current one until it is within a minute of expiry");
                    Ok(c.clone())
                }
                None => Err(e),
            },
        }
    }

    /// The project the credentials belong to: `GOOGLE_CLOUD_PROJECT`, else the file's
    /// `project_id` or `quota_project_id`, else the metadata server's project.
    pub async fn project_id(&self) -> Result<String, AuthError> {
        if let Some(p) = std::env::var("GOOGLE_CLOUD_PROJECT")
            .ok()
            .filter(|p| !p.is_empty())
        {
            return Ok(p);
        }
        flows::Flow {
            http: &self.inner.http,
            origin: &self.inner.origin,
            quota_project: self.inner.quota_project.as_deref(),
        }
        .project_id(&self.inner.source)
        .await
    }
}
