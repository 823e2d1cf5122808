//! OAuth bearer tokens from Application Default Credentials, via the `gcp_auth` crate.
//!
//! `gcp_auth` looks, in order, at `GOOGLE_APPLICATION_CREDENTIALS` (a service-account key or an
//! authorized-user file), the GCE/GKE metadata server (workload identity) and gcloud's own
//! credentials. It caches the token and fetches a new one when the cached one is within 20 s of
//! expiry; we ask for a token at every (re)connection and every REST call, so an expired token is
//! never sent. TLS inside `gcp_auth` is rustls with its `ring` feature (no aws-lc, no OpenSSL).
//! Without credentials (the emulator) no [`Credentials`] is built at all.

use crate::config::preflight::{self, CREDENTIALS_ENV};
use std::path::{Path, PathBuf};
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
pub enum AuthError {
    /// From `gcp_auth`, with no key file named.
    #[error("BigQuery credentials: {0}")]
    Provider(#[from] gcp_auth::Error),
    /// The key file `GOOGLE_APPLICATION_CREDENTIALS` names cannot be used (`gcp_auth`'s own
    /// error names neither the variable nor the path).
    #[error(
        "BigQuery credentials: {CREDENTIALS_ENV} names {path:?}, which {why}; point it at the service-account key file, or unset it to use the metadata server"
    )]
    KeyFile {
        /// The path the variable holds.
        path: PathBuf,
        /// What is wrong with it.
        why: String,
    },
}

impl Credentials {
    /// Application Default Credentials (see the module docs for the search order).
    pub async fn application_default() -> Result<Self, AuthError> {
        let key_file = std::env::var_os(CREDENTIALS_ENV)
            .filter(|p| !p.is_empty())
            .map(PathBuf::from);
        if let Some(p) = &key_file {
            check_key_file(p)?;
        }
        match gcp_auth::provider().await {
            Ok(provider) => Ok(Credentials { provider }),
            // Read, but not a key gcp_auth can use (not JSON, not a service account's).
            Err(e) => Err(match key_file {
                Some(path) => AuthError::KeyFile {
                    path,
                    why: format!("is not a usable key file: {e}"),
                },
                None => AuthError::Provider(e),
            }),
        }
    }

    /// The value of an `authorization` header: `Bearer <token>`, refreshed before expiry.
    pub async fn authorization(&self) -> Result<String, AuthError> {
        let token = self.provider.token(&[BIGQUERY_SCOPE]).await?;
        Ok(format!("Bearer {}", token.as_str()))
    }

    /// The project the credentials belong to (for the live test).
    pub async fn project_id(&self) -> Result<String, AuthError> {
        Ok(self.provider.project_id().await?.to_string())
    }
}

/// The key file at `path` exists and can be read (checked as `check-config` does).
fn check_key_file(path: &Path) -> Result<(), AuthError> {
    preflight::check(path, preflight::Use::Read(false)).map_err(|why| AuthError::KeyFile {
        path: path.to_path_buf(),
        why,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_file_that_is_not_there_is_named_with_its_variable() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("key.json");
        let err = check_key_file(&missing).unwrap_err().to_string();
        assert_eq!(
            err,
            format!(
                "BigQuery credentials: GOOGLE_APPLICATION_CREDENTIALS names {missing:?}, which does \
                 not exist; point it at the service-account key file, or unset it to use the \
                 metadata server"
            )
        );
        std::fs::write(&missing, "{}").unwrap();
        check_key_file(&missing).unwrap();
        assert!(check_key_file(dir.path())
            .unwrap_err()
            .to_string()
            .contains("which is a directory, not a file"));
    }
}
