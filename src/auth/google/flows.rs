//! The token requests, each as google-auth sends it for the same credentials (form fields,
//! JSON bodies, scopes, client authentication).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use reqwest::header::{HeaderValue, AUTHORIZATION, CONTENT_TYPE};
use serde_json::{json, Value};

use super::file::GOOGLE_TOKEN_URI;
use super::file::{
    AuthorizedUser, ExternalAccount, Impersonation, ServiceAccount, Source, SubjectFrom,
    SubjectSource,
};
use super::AuthError;

/// What an impersonating source's token must carry to call `generateAccessToken`.
const IAM_SCOPE: &str = "https://www.googleapis.com/auth/iam";

/// A fetched token.
pub(super) struct Fetched {
    pub(super) token: String,
    pub(super) lifetime: Duration,
}

/// The HTTP client, where the credentials came from (for messages) and their quota project.
pub(super) struct Flow<'a> {
    pub(super) http: &'a reqwest::Client,
    pub(super) origin: &'a str,
    /// The credentials' quota project ([`super::Credentials::quota_project`]).
    pub(super) quota_project: Option<&'a str>,
}

/// `application/x-www-form-urlencoded`: everything but `A-Za-z0-9*-._` is escaped.
const FORM: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'*')
    .remove(b'-')
    .remove(b'.')
    .remove(b'_');

/// Python's `urllib.parse.quote`: everything but `A-Za-z0-9_.-~/` is escaped.
const QUOTE: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'_')
    .remove(b'.')
    .remove(b'-')
    .remove(b'~')
    .remove(b'/');

fn form(fields: &[(&str, &str)]) -> String {
    fields
        .iter()
        .map(|(k, v)| {
            format!(
                "{}={}",
                percent_encoding::utf8_percent_encode(k, FORM),
                percent_encoding::utf8_percent_encode(v, FORM)
            )
        })
        .collect::<Vec<_>>()
        .join("&")
}

/// A header value hidden from `Debug` and HTTP/2 header compression (a bearer or basic secret).
fn sensitive(v: String) -> Option<HeaderValue> {
    let mut h = HeaderValue::try_from(v).ok()?;
    h.set_sensitive(true);
    Some(h)
}

fn b64url(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

impl Flow<'_> {
    /// A token for `scopes` from `source`.
    pub(super) async fn fetch(
        &self,
        source: &Source,
        scopes: &[String],
    ) -> Result<Fetched, AuthError> {
        match source {
            Source::ServiceAccount(sa) => self.jwt_grant(sa, scopes).await,
            Source::AuthorizedUser(u) => self.refresh_grant(u).await,
            Source::ExternalAccount(ea) => self.external(ea, scopes, self.quota_project).await,
            Source::Impersonated(imp) => self.impersonated(imp, scopes).await,
            Source::Metadata { root } => self.metadata(root, scopes).await,
        }
    }

    fn unreachable(&self, what: &str, cause: impl std::fmt::Display) -> AuthError {
        AuthError::Unreachable {
            origin: self.origin.to_string(),
            what: what.to_string(),
            cause: cause.to_string(),
        }
    }

    /// Sends `req`; the JSON body of a 2xx answer. 5xx, 429 and transport errors are
    /// [`AuthError::Unreachable`], other statuses [`AuthError::Refused`].
    async fn send(&self, what: &str, req: reqwest::RequestBuilder) -> Result<Value, AuthError> {
        let resp = req
            .send()
            .await
            .map_err(|e| self.unreachable(what, crate::error_text::with_causes(&e)))?;
        let status = resp.status();
        let body = resp
            .text()
            .await
            .map_err(|e| self.unreachable(what, crate::error_text::with_causes(&e)))?;
        if status.is_server_error() || status.as_u16() == 429 {
            return Err(self.unreachable(what, format!("HTTP {status}: {}", clip(&body))));
        }
        if !status.is_success() {
            return Err(AuthError::Refused {
                origin: self.origin.to_string(),
                what: what.to_string(),
                status: status.as_u16(),
                body: clip(&body),
            });
        }
        serde_json::from_str(&body)
            .map_err(|e| self.unreachable(what, format!("answer is not JSON: {e}")))
    }

    /// An OAuth token answer: `access_token` and `expires_in` (a number, or a string as some
    /// endpoints send it).
    fn oauth_token(&self, what: &str, v: &Value) -> Result<Fetched, AuthError> {
        let token = v["access_token"]
            .as_str()
            .ok_or_else(|| self.unreachable(what, "answer has no access_token"))?;
        let secs = match &v["expires_in"] {
            Value::Number(n) => n.as_u64(),
            Value::String(s) => s.parse().ok(),
            _ => None,
        }
        .unwrap_or(3600);
        Ok(Fetched {
            token: token.to_string(),
            lifetime: Duration::from_secs(secs),
        })
    }

    async fn post_form(
        &self,
        what: &str,
        url: &str,
        body: String,
        basic: Option<&(String, String)>,
    ) -> Result<Value, AuthError> {
        let mut req = self
            .http
            .post(url)
            .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
            .body(body);
        if let Some(h) = basic.and_then(|(id, secret)| {
            sensitive(format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(format!("{id}:{secret}"))
            ))
        }) {
            req = req.header(AUTHORIZATION, h);
        }
        self.send(what, req).await
    }

    /// The JWT-bearer grant of a service-account key.
    async fn jwt_grant(
        &self,
        sa: &ServiceAccount,
        scopes: &[String],
    ) -> Result<Fetched, AuthError> {
        let what = format!("token endpoint {}", sa.token_uri);
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs();
        let mut header = json!({"typ": "JWT", "alg": "RS256"});
        if let Some(kid) = &sa.private_key_id {
            header["kid"] = json!(kid);
        }
        let claims = json!({
            "iat": now,
            "exp": now + 3600,
            "iss": sa.client_email,
            // google-auth's audience whatever `token_uri` says: Google's token endpoint is
            // who checks the assertion, a private endpoint forwards it.
            "aud": GOOGLE_TOKEN_URI,
            "scope": scopes.join(" "),
        });
        let signing_input = format!(
            "{}.{}",
            b64url(header.to_string().as_bytes()),
            b64url(claims.to_string().as_bytes())
        );
        let mut sig = vec![0; sa.key.public().modulus_len()];
        sa.key
            .sign(
                &ring::signature::RSA_PKCS1_SHA256,
                &ring::rand::SystemRandom::new(),
                signing_input.as_bytes(),
                &mut sig,
            )
            .map_err(|_| self.unreachable(&what, "signing the JWT failed"))?;
        let assertion = format!("{signing_input}.{}", b64url(&sig));
        let body = form(&[
            ("grant_type", "urn:ietf:params:oauth:grant-type:jwt-bearer"),
            ("assertion", &assertion),
        ]);
        let v = self.post_form(&what, &sa.token_uri, body, None).await?;
        self.oauth_token(&what, &v)
    }

    /// The refresh-token grant of an `authorized_user` file. No `scope`, as google-auth: the
    /// token carries the scopes the user consented to (gcloud's ADC login: cloud-platform).
    async fn refresh_grant(&self, u: &AuthorizedUser) -> Result<Fetched, AuthError> {
        let what = format!("token endpoint {}", u.token_uri);
        let fields = [
            ("grant_type", "refresh_token"),
            ("client_id", u.client_id.as_str()),
            ("client_secret", u.client_secret.as_str()),
            ("refresh_token", u.refresh_token.as_str()),
        ];
        let v = self
            .post_form(&what, &u.token_uri, form(&fields), None)
            .await?;
        self.oauth_token(&what, &v)
    }

    /// The subject token of an external account: the file read again, or the URL fetched.
    async fn subject_token(&self, src: &SubjectSource) -> Result<String, AuthError> {
        let (what, text) = match &src.from {
            SubjectFrom::File(path) => {
                let what = format!("subject token file {}", path.display());
                // Missing at pod start until the kubelet projects it: retried like a network error.
                let text = tokio::fs::read_to_string(path)
                    .await
                    .map_err(|e| self.unreachable(&what, e))?;
                (what, text)
            }
            SubjectFrom::Url { url, headers } => {
                let what = format!("subject token URL {url}");
                let mut req = self.http.get(url);
                for (k, v) in headers {
                    req = req.header(k, v);
                }
                let resp = req
                    .send()
                    .await
                    .map_err(|e| self.unreachable(&what, crate::error_text::with_causes(&e)))?;
                let status = resp.status();
                let text = resp
                    .text()
                    .await
                    .map_err(|e| self.unreachable(&what, crate::error_text::with_causes(&e)))?;
                if !status.is_success() {
                    return Err(self.unreachable(&what, format!("HTTP {status}: {}", clip(&text))));
                }
                (what, text)
            }
        };
        let token = match &src.json_field {
            None => text,
            Some(field) => serde_json::from_str::<Value>(&text)
                .ok()
                .and_then(|v| v[field.as_str()].as_str().map(str::to_string))
                .ok_or_else(|| {
                    self.unreachable(&what, format!("no string field `{field}` in its JSON"))
                })?,
        };
        if token.is_empty() {
            return Err(self.unreachable(&what, "empty"));
        }
        Ok(token)
    }

    /// The STS token exchange; with impersonation, then `generateAccessToken`, naming
    /// `quota_project` (google-auth's impersonation source is a copy of the external account
    /// itself, quota project included).
    async fn external(
        &self,
        ea: &ExternalAccount,
        scopes: &[String],
        quota_project: Option<&str>,
    ) -> Result<Fetched, AuthError> {
        let what = format!("STS token endpoint {}", ea.token_url);
        let subject = self.subject_token(&ea.subject).await?;
        // The federated token only has to call generateAccessToken when impersonating.
        let sts_scope = match ea.impersonation {
            Some(_) => IAM_SCOPE.to_string(),
            None => scopes.join(" "),
        };
        // google-auth's `options`: Python's `json.dumps` (", " and ": " separators) through
        // `urllib.parse.quote`; only without client authentication (the client id names the
        // project then).
        let options = match (&ea.workforce_pool_user_project, &ea.client) {
            (Some(p), None) => {
                let dumped = format!("{{\"userProject\": {}}}", json!(p));
                Some(percent_encoding::utf8_percent_encode(&dumped, QUOTE).to_string())
            }
            _ => None,
        };
        let mut fields = vec![
            (
                "grant_type",
                "urn:ietf:params:oauth:grant-type:token-exchange",
            ),
            ("audience", ea.audience.as_str()),
            ("scope", sts_scope.as_str()),
            (
                "requested_token_type",
                "urn:ietf:params:oauth:token-type:access_token",
            ),
            ("subject_token", subject.as_str()),
            ("subject_token_type", ea.subject_token_type.as_str()),
        ];
        if let Some(o) = &options {
            fields.push(("options", o));
        }
        let v = self
            .post_form(&what, &ea.token_url, form(&fields), ea.client.as_ref())
            .await?;
        let federated = self.oauth_token(&what, &v)?;
        match &ea.impersonation {
            None => Ok(federated),
            Some((url, lifetime)) => {
                self.generate_access_token(
                    url,
                    &federated.token,
                    quota_project,
                    None,
                    scopes,
                    *lifetime,
                )
                .await
            }
        }
    }

    /// `impersonated_service_account`: the source's token (with the IAM scope where the source
    /// takes scopes), then `generateAccessToken` with the source's own quota project, as
    /// google-auth applies the source credentials to that request (of its source types only an
    /// `authorized_user` reads one; the variable does not reach the source).
    async fn impersonated(
        &self,
        imp: &Impersonation,
        scopes: &[String],
    ) -> Result<Fetched, AuthError> {
        let iam = [IAM_SCOPE.to_string()];
        let source = match &imp.source {
            Source::AuthorizedUser(u) => self.refresh_grant(u).await?,
            Source::ServiceAccount(sa) => self.jwt_grant(sa, &iam).await?,
            Source::ExternalAccount(ea) => {
                let quota = ea.quota_project_id.as_deref().filter(|p| !p.is_empty());
                self.external(ea, &iam, quota).await?
            }
            Source::Metadata { root } => self.metadata(root, &iam).await?,
            Source::Impersonated(_) => {
                return Err(self.unreachable("impersonation", "nested impersonation"))
            }
        };
        let source_quota = match &imp.source {
            Source::AuthorizedUser(u) => u.quota_project_id.as_deref(),
            _ => None,
        };
        self.generate_access_token(
            &imp.url,
            &source.token,
            source_quota.filter(|p| !p.is_empty()),
            imp.delegates.as_deref(),
            scopes,
            imp.lifetime_s,
        )
        .await
    }

    /// IAM Credentials' `generateAccessToken` at `url`, authorized by `bearer` (and billed to
    /// `quota_project` when given).
    async fn generate_access_token(
        &self,
        url: &str,
        bearer: &str,
        quota_project: Option<&str>,
        delegates: Option<&[String]>,
        scopes: &[String],
        lifetime_s: u64,
    ) -> Result<Fetched, AuthError> {
        let what = format!("IAM generateAccessToken {url}");
        let body = json!({
            "delegates": delegates,
            "scope": scopes,
            "lifetime": format!("{lifetime_s}s"),
        });
        let mut req = self.http.post(url).json(&body);
        if let Some(h) = sensitive(format!("Bearer {bearer}")) {
            req = req.header(AUTHORIZATION, h);
        }
        if let Some(q) = quota_project {
            req = req.header(super::QUOTA_PROJECT_HEADER, q);
        }
        let v = self.send(&what, req).await?;
        let token = v["accessToken"]
            .as_str()
            .ok_or_else(|| self.unreachable(&what, "answer has no accessToken"))?;
        let expires = v["expireTime"]
            .as_str()
            .and_then(|t| humantime::parse_rfc3339_weak(t).ok())
            .ok_or_else(|| self.unreachable(&what, "answer has no RFC 3339 expireTime"))?;
        Ok(Fetched {
            token: token.to_string(),
            lifetime: expires
                .duration_since(SystemTime::now())
                .unwrap_or_default(),
        })
    }

    /// The metadata server's token for the instance's default service account.
    async fn metadata(&self, root: &str, scopes: &[String]) -> Result<Fetched, AuthError> {
        let what = format!("metadata server {root}");
        let url = format!(
            "{root}/instance/service-accounts/default/token?scopes={}",
            percent_encoding::utf8_percent_encode(&scopes.join(","), FORM)
        );
        let v = self
            .send(
                &what,
                self.http.get(url).header("Metadata-Flavor", "Google"),
            )
            .await?;
        self.oauth_token(&what, &v)
    }

    /// See [`super::Credentials::project_id`].
    pub(super) async fn project_id(&self, source: &Source) -> Result<String, AuthError> {
        let from_file = match source {
            Source::ServiceAccount(sa) => sa.project_id.clone(),
            Source::AuthorizedUser(u) => u.quota_project_id.clone(),
            Source::ExternalAccount(ea) => ea.quota_project_id.clone(),
            Source::Impersonated(imp) => imp.quota_project_id.clone(),
            Source::Metadata { root } => {
                let what = format!("metadata server {root}");
                let req = self
                    .http
                    .get(format!("{root}/project/project-id"))
                    .header("Metadata-Flavor", "Google");
                let resp = req
                    .send()
                    .await
                    .map_err(|e| self.unreachable(&what, crate::error_text::with_causes(&e)))?;
                let text = resp
                    .text()
                    .await
                    .map_err(|e| self.unreachable(&what, crate::error_text::with_causes(&e)))?;
                Some(text.trim().to_string()).filter(|p| !p.is_empty())
            }
        };
        from_file.ok_or_else(|| {
            self.unreachable(
                "project id",
                "the credentials name no project; set GOOGLE_CLOUD_PROJECT",
            )
        })
    }
}

/// An error body, cut to a readable length.
fn clip(body: &str) -> String {
    let b = body.trim();
    match b.char_indices().nth(300) {
        Some((i, _)) => format!("{}…", &b[..i]),
        None => b.to_string(),
    }
}
