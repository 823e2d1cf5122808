//! OAuth bearer tokens from Application Default Credentials, via the `gcp_auth` crate.
//!
//! `gcp_auth` looks, in order, at `GOOGLE_APPLICATION_CREDENTIALS` (a service-account key or an
//! authorized-user file), the GCE/GKE metadata server (workload identity) and gcloud's own
//! credentials. It caches the token and fetches a new one when the cached one is within 20 s of
//! expiry; we ask for a token at every (re)connection and every REST call, so an expired token is
//! never sent. TLS inside `gcp_auth` is rustls with its `ring` feature (no aws-lc, no OpenSSL).
//! Without credentials (the emulator) no [`Credentials`] is built at all.

use std::sync::Arc;

/// OAuth scope for BigQuery (Storage Write and REST).
pub const BIGQUERY_SCOPE: &str = "https://www.googleapis.com/auth/bigquery";

/// A source of bearer tokens.
#[derive(Clone)]
pub struct Credentials {
    provider: Arc<dyn gcp_auth::TokenProvider>,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Credentials(application default)")
    }
}

/// Credentials could not be found or a token could not be fetched.
#[derive(Debug, thiserror::Error)]
#[error("BigQuery credentials: {0}")]
pub struct AuthError(#[from] gcp_auth::Error);

impl Credentials {
    /// Application Default Credentials (see the module docs for the search order).
    pub async fn application_default() -> Result<Self, AuthError> {
        Ok(Credentials {
            provider: gcp_auth::provider().await?,
        })
    }

    /// The value of an `authorization` header: `Bearer <token>`, refreshed before expiry.
    pub async fn authorization(&self) -> Result<String, AuthError> {
        let token = self.provider.token(&[BIGQUERY_SCOPE]).await?;
        Ok(format!("Bearer {}", token.as_str()))
    }

    /// An access token for `scopes` and when it expires (the Kafka OAUTHBEARER token carries
    /// both), refreshed before expiry like [`Credentials::authorization`]'s.
    pub async fn access_token(
        &self,
        scopes: &[&str],
    ) -> Result<(String, std::time::SystemTime), AuthError> {
        let token = self.provider.token(scopes).await?;
        let secs = token.expires_at().timestamp().max(0) as u64;
        let expires = std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs);
        Ok((token.as_str().to_string(), expires))
    }

    /// The project the credentials belong to (for the live test).
    pub async fn project_id(&self) -> Result<String, AuthError> {
        Ok(self.provider.project_id().await?.to_string())
    }
}
