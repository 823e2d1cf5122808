//! Finding and reading ADC credential files: each file becomes a [`Source`], checked whole at
//! load time so a malformed file stops the start-up instead of the first token fetch.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;

use super::AuthError;

/// The variable naming the credentials file.
pub const CREDENTIALS_VAR: &str = "GOOGLE_APPLICATION_CREDENTIALS";

/// Google's public OAuth token endpoint (the default `token_uri`).
pub(super) const GOOGLE_TOKEN_URI: &str = "https://oauth2.googleapis.com/token";

/// Where a token comes from.
#[derive(Clone)]
pub(super) enum Source {
    ServiceAccount(Arc<ServiceAccount>),
    AuthorizedUser(Arc<AuthorizedUser>),
    ExternalAccount(Arc<ExternalAccount>),
    Impersonated(Arc<Impersonation>),
    Metadata {
        /// `http://host/computeMetadata/v1`.
        root: String,
    },
}

pub(super) struct ServiceAccount {
    pub(super) client_email: String,
    pub(super) private_key_id: Option<String>,
    pub(super) key: ring::signature::RsaKeyPair,
    pub(super) token_uri: String,
    pub(super) project_id: Option<String>,
}

pub(super) struct AuthorizedUser {
    pub(super) client_id: String,
    pub(super) client_secret: String,
    pub(super) refresh_token: String,
    pub(super) token_uri: String,
    pub(super) quota_project_id: Option<String>,
}

pub(super) struct ExternalAccount {
    pub(super) audience: String,
    pub(super) subject_token_type: String,
    pub(super) token_url: String,
    pub(super) subject: SubjectSource,
    /// `client_id`/`client_secret`: HTTP basic authentication at the token endpoint.
    pub(super) client: Option<(String, String)>,
    pub(super) workforce_pool_user_project: Option<String>,
    pub(super) quota_project_id: Option<String>,
    /// `service_account_impersonation_url` and its `token_lifetime_seconds`.
    pub(super) impersonation: Option<(String, u64)>,
}

/// Where an external account's subject token is read.
pub(super) struct SubjectSource {
    pub(super) from: SubjectFrom,
    /// `format.type: json`: the field holding the token.
    pub(super) json_field: Option<String>,
}

pub(super) enum SubjectFrom {
    File(PathBuf),
    Url {
        url: String,
        headers: Vec<(String, String)>,
    },
}

/// `impersonated_service_account`: a source's token traded for the target's.
pub(super) struct Impersonation {
    pub(super) source: Source,
    pub(super) url: String,
    pub(super) delegates: Option<Vec<String>>,
    pub(super) lifetime_s: u64,
    pub(super) quota_project_id: Option<String>,
}

/// ADC's search: the variable's file, gcloud's file, the metadata server.
pub(super) fn application_default() -> Result<(Source, String), AuthError> {
    if let Some(p) = std::env::var_os(CREDENTIALS_VAR).filter(|p| !p.is_empty()) {
        let path = PathBuf::from(p);
        let origin = format!("{CREDENTIALS_VAR}={}", path.display());
        if !path.is_file() {
            return Err(file_error(&path, &origin, "no such file".into()));
        }
        return Ok((load(&path, &origin)?, origin));
    }
    let gcloud = std::env::var_os("CLOUDSDK_CONFIG")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config/gcloud")))
        .map(|d| d.join("application_default_credentials.json"));
    if let Some(path) = gcloud.filter(|p| p.is_file()) {
        let origin = format!("gcloud's {}, {CREDENTIALS_VAR} unset", path.display());
        return Ok((load(&path, &origin)?, origin));
    }
    let host = std::env::var("GCE_METADATA_HOST")
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "metadata.google.internal".into());
    let origin =
        format!("metadata server {host}, {CREDENTIALS_VAR} unset and no gcloud credentials file");
    Ok((
        Source::Metadata {
            root: format!("http://{host}/computeMetadata/v1"),
        },
        origin,
    ))
}

/// The quota project, as google-auth settles it: `from_env` (`GOOGLE_CLOUD_QUOTA_PROJECT`) when
/// set, else the file's `quota_project_id` for the types google-auth reads it from (not
/// `service_account`: google-auth ignores it there). An empty value names none, as in
/// google-auth.
pub(super) fn quota_project(source: &Source, from_env: Option<String>) -> Option<String> {
    from_env.filter(|p| !p.is_empty()).or_else(|| {
        match source {
            Source::AuthorizedUser(u) => u.quota_project_id.clone(),
            Source::ExternalAccount(ea) => ea.quota_project_id.clone(),
            Source::Impersonated(imp) => imp.quota_project_id.clone(),
            Source::ServiceAccount(_) | Source::Metadata { .. } => None,
        }
        .filter(|p| !p.is_empty())
    })
}

fn file_error(path: &Path, origin: &str, problem: String) -> AuthError {
    AuthError::File {
        path: path.to_path_buf(),
        origin: origin.to_string(),
        problem,
    }
}

/// Reads and checks the credentials file at `path`.
pub(super) fn load(path: &Path, origin: &str) -> Result<Source, AuthError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| file_error(path, origin, format!("cannot read it: {e}")))?;
    let v: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| file_error(path, origin, format!("not JSON: {e}")))?;
    parse(&v).map_err(|problem| file_error(path, origin, problem))
}

/// The fields of every type (unknown ones ignored; which are required depends on `type`).
#[derive(Deserialize, Default)]
#[serde(default)]
struct Raw {
    r#type: Option<String>,
    // service_account
    client_email: Option<String>,
    private_key: Option<String>,
    private_key_id: Option<String>,
    token_uri: Option<String>,
    project_id: Option<String>,
    // authorized_user
    client_id: Option<String>,
    client_secret: Option<String>,
    refresh_token: Option<String>,
    quota_project_id: Option<String>,
    // external_account
    audience: Option<String>,
    subject_token_type: Option<String>,
    token_url: Option<String>,
    credential_source: Option<RawSource>,
    service_account_impersonation_url: Option<String>,
    service_account_impersonation: Option<RawImpersonationOptions>,
    workforce_pool_user_project: Option<String>,
    // impersonated_service_account
    source_credentials: Option<serde_json::Value>,
    delegates: Option<Vec<String>>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct RawSource {
    file: Option<String>,
    url: Option<String>,
    headers: Option<std::collections::BTreeMap<String, String>>,
    format: Option<RawFormat>,
    environment_id: Option<String>,
    executable: Option<serde_json::Value>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct RawFormat {
    r#type: Option<String>,
    subject_token_field_name: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct RawImpersonationOptions {
    token_lifetime_seconds: Option<u64>,
}

fn required(v: Option<String>, field: &str, kind: &str) -> Result<String, String> {
    v.filter(|s| !s.is_empty())
        .ok_or_else(|| format!("`{field}` is required for type `{kind}`"))
}

/// A credentials file's JSON as a [`Source`]; the error says which field is wrong.
pub(super) fn parse(v: &serde_json::Value) -> Result<Source, String> {
    let raw = Raw::deserialize(v).map_err(|e| format!("unexpected field type: {e}"))?;
    let kind = raw.r#type.clone().unwrap_or_default();
    match kind.as_str() {
        "service_account" => service_account(raw),
        "authorized_user" => Ok(Source::AuthorizedUser(Arc::new(AuthorizedUser {
            client_id: required(raw.client_id, "client_id", &kind)?,
            client_secret: required(raw.client_secret, "client_secret", &kind)?,
            refresh_token: required(raw.refresh_token, "refresh_token", &kind)?,
            token_uri: raw.token_uri.unwrap_or_else(|| GOOGLE_TOKEN_URI.into()),
            quota_project_id: raw.quota_project_id,
        }))),
        "external_account" => external_account(raw),
        "impersonated_service_account" => impersonated(raw),
        "" => Err("no `type` field".into()),
        other => Err(format!(
            "credential type `{other}` is not supported (service_account, authorized_user, \
             external_account and impersonated_service_account are)"
        )),
    }
}

fn service_account(raw: Raw) -> Result<Source, String> {
    let kind = "service_account";
    let pem = required(raw.private_key, "private_key", kind)?;
    let der = pem_pkcs8(&pem).ok_or("`private_key` is not a PEM `PRIVATE KEY` block")?;
    let key = ring::signature::RsaKeyPair::from_pkcs8(&der)
        .map_err(|e| format!("`private_key` is not a PKCS#8 RSA key: {e}"))?;
    Ok(Source::ServiceAccount(Arc::new(ServiceAccount {
        client_email: required(raw.client_email, "client_email", kind)?,
        private_key_id: raw.private_key_id,
        key,
        token_uri: raw.token_uri.unwrap_or_else(|| GOOGLE_TOKEN_URI.into()),
        project_id: raw.project_id,
    })))
}

/// The DER bytes of a `-----BEGIN PRIVATE KEY-----` block.
fn pem_pkcs8(pem: &str) -> Option<Vec<u8>> {
    use base64::Engine as _;
    let body = pem
        .split("-----BEGIN PRIVATE KEY-----")
        .nth(1)?
        .split("-----END PRIVATE KEY-----")
        .next()?;
    let b64: String = body.chars().filter(|c| !c.is_whitespace()).collect();
    base64::engine::general_purpose::STANDARD.decode(b64).ok()
}

fn external_account(raw: Raw) -> Result<Source, String> {
    let kind = "external_account";
    let src = raw
        .credential_source
        .ok_or("`credential_source` is required for type `external_account`")?;
    if src.environment_id.is_some() {
        return Err("AWS-sourced subject tokens (`credential_source.environment_id`) are not supported; use a file- or URL-sourced credential_source".into());
    }
    if src.executable.is_some() {
        return Err("executable-sourced subject tokens (`credential_source.executable`) are not supported; use a file- or URL-sourced credential_source".into());
    }
    let from = match (src.file, src.url) {
        (Some(f), None) => SubjectFrom::File(PathBuf::from(f)),
        (None, Some(url)) => SubjectFrom::Url {
            url,
            headers: src.headers.unwrap_or_default().into_iter().collect(),
        },
        _ => return Err("`credential_source` needs exactly one of `file` and `url`".into()),
    };
    let format = src.format.unwrap_or_default();
    let json_field = match format.r#type.as_deref().unwrap_or("text") {
        "text" => None,
        "json" => Some(format.subject_token_field_name.ok_or(
            "`credential_source.format.subject_token_field_name` is required with format `json`",
        )?),
        other => {
            return Err(format!(
                "`credential_source.format.type` `{other}` is not `text` or `json`"
            ))
        }
    };
    let lifetime = raw
        .service_account_impersonation
        .and_then(|o| o.token_lifetime_seconds)
        .unwrap_or(3600);
    let client = match (raw.client_id, raw.client_secret) {
        (Some(id), Some(secret)) => Some((id, secret)),
        (Some(_), None) | (None, Some(_)) => {
            return Err("`client_id` and `client_secret` go together".into())
        }
        (None, None) => None,
    };
    Ok(Source::ExternalAccount(Arc::new(ExternalAccount {
        audience: required(raw.audience, "audience", kind)?,
        subject_token_type: required(raw.subject_token_type, "subject_token_type", kind)?,
        token_url: raw
            .token_url
            .unwrap_or_else(|| "https://sts.googleapis.com/v1/token".into()),
        subject: SubjectSource { from, json_field },
        client,
        workforce_pool_user_project: raw.workforce_pool_user_project,
        quota_project_id: raw.quota_project_id,
        impersonation: raw.service_account_impersonation_url.map(|u| (u, lifetime)),
    })))
}

fn impersonated(raw: Raw) -> Result<Source, String> {
    let kind = "impersonated_service_account";
    let url = required(
        raw.service_account_impersonation_url,
        "service_account_impersonation_url",
        kind,
    )?;
    if !url.contains(":generateAccessToken") {
        return Err(format!(
            "`service_account_impersonation_url` {url} does not end in `:generateAccessToken`"
        ));
    }
    let source_json = raw
        .source_credentials
        .ok_or("`source_credentials` is required for type `impersonated_service_account`")?;
    let source = parse(&source_json).map_err(|e| format!("`source_credentials`: {e}"))?;
    if matches!(source, Source::Impersonated(_)) {
        return Err("`source_credentials` cannot itself be impersonated".into());
    }
    Ok(Source::Impersonated(Arc::new(Impersonation {
        source,
        url,
        delegates: raw.delegates,
        lifetime_s: 3600,
        quota_project_id: raw.quota_project_id,
    })))
}
