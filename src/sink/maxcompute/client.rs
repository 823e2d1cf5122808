//! The I/O clients (thin over [`super::wire`], [`super::sign`] and [`super::error`]): SQL
//! instances and table lookup on the control plane, upload sessions on the Tunnel. Every request
//! is signed (`Date`, `Authorization: ODPS …`, and `authorization-sts-token` with a temporary
//! key) and carries `curr_project` as pyodps adds it; every failure is classified
//! ([`CallError`]). Retrying is the caller's (the sink's) decision.
//!
//! The key is asked of [`Keys`] for every request: a fixed pair, or Alibaba's default chain
//! ([`crate::auth::alibaba`]), which refreshes temporary keys ahead of expiry and never hands out
//! an expired one; without a usable key the request is not sent and fails retryable.

use super::error::{classify, parse_error_body, Class, Failure};
use super::instance::{self, Poll};
use super::schema::TableColumn;
use super::sign::{auth_headers, http_date, Credentials, RequestToSign};
use super::wire::{self, UploadSession};
use crate::auth::alibaba::{Provider, Source};
use crate::backoff::Backoff;
use crate::sink::SinkError;
use bytes::Bytes;
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

/// Bytes escaped in a path segment (names are identifiers; anything else is encoded).
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC.remove(b'_').remove(b'-').remove(b'.');

/// The Tunnel headers pyodps 0.12.2 sends on every Tunnel call.
pub const TUNNEL_HEADERS: &[(&str, &str)] = &[
    ("x-odps-tunnel-version", "6"),
    ("odps-tunnel-date-transform", "v1"),
    ("odps-tunnel-sdk-support-schema-evolution", "true"),
];

/// A failed call: what to do next and the sink seam's error.
#[derive(Debug)]
pub struct CallError {
    /// Retry, fix, or refuse rows.
    pub class: Class,
    /// The error the sink reports (kind, retryable, message naming the call).
    pub error: SinkError,
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.error.fmt(f)
    }
}

impl std::error::Error for CallError {}

fn fail(what: &str, f: Failure) -> CallError {
    let (class, error) = classify(what, &f);
    CallError { class, error }
}

/// Where a Tunnel session writes: a table and, for a partitioned one, its partition as the
/// Tunnel names it (`k=v`, e.g. [`super::table::tunnel_partition`]).
#[derive(Debug, Clone, Copy)]
pub struct Tunnel<'a> {
    /// The table (in the client's dataset).
    pub table: &'a str,
    /// The partition, for a partitioned table.
    pub partition: Option<&'a str>,
}

impl<'a> Tunnel<'a> {
    /// A table without partitions.
    pub fn table(table: &'a str) -> Self {
        Tunnel {
            table,
            partition: None,
        }
    }
}

impl std::fmt::Display for Tunnel<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.partition {
            Some(p) => write!(f, "{} partition {p}", self.table),
            None => f.write_str(self.table),
        }
    }
}

/// One poll of an SQL instance ([`Client::poll_sql`]).
#[derive(Debug)]
pub enum Polled {
    /// Still running, or terminated without a verdict yet: poll the same instance again.
    Pending,
    /// Terminated with every task `SUCCESS`.
    Succeeded,
    /// Terminated with a task `FAILED` or `CANCELLED` (its `?result` in the error): the
    /// statement did nothing, and only now may it be run again.
    Failed(CallError),
}

/// What a client needs (from the MAXCOMPUTE sink's configuration).
#[derive(Debug, Clone)]
pub struct ClientOptions {
    /// The control plane, `http(s)://host/api` (`access_url`).
    pub endpoint: String,
    /// The project.
    pub project: String,
    /// The dataset (a schema inside the project).
    pub dataset: String,
    /// The Tunnel endpoint, when configured (`tunnel_endpoint`); else asked from `?service`.
    pub tunnel_endpoint: Option<String>,
    /// Timeout of one request.
    pub request_timeout: Duration,
    /// Timeout of establishing a connection.
    pub connect_timeout: Duration,
    /// Longest wait between two polls of a running SQL instance.
    pub max_poll_interval: Duration,
    /// Longest wait for an SQL instance to terminate; then a retryable timeout (the instance may
    /// still run: the caller looks the table up again before re-running DDL).
    pub max_instance_wait: Duration,
}

/// Default longest wait between two polls of a running SQL instance.
pub const DEFAULT_MAX_POLL_INTERVAL: Duration = Duration::from_secs(1);
/// Default longest wait for an SQL instance to terminate.
pub const DEFAULT_MAX_INSTANCE_WAIT: Duration = Duration::from_secs(600);

impl ClientOptions {
    /// The options of a MAXCOMPUTE sink's configuration (polling at the defaults).
    pub fn from_config(c: &crate::config::MaxComputeSink) -> Self {
        ClientOptions {
            endpoint: c.access_url.clone(),
            project: c.project.clone(),
            dataset: c.dataset.clone(),
            tunnel_endpoint: c.tunnel_endpoint.clone(),
            request_timeout: c.request_timeout,
            connect_timeout: c.connect_timeout,
            max_poll_interval: DEFAULT_MAX_POLL_INTERVAL,
            max_instance_wait: DEFAULT_MAX_INSTANCE_WAIT,
        }
    }
}

/// Where a client's access keys come from.
#[derive(Debug, Clone)]
pub enum Keys {
    /// A fixed pair (the configuration's `access_key_id` and `access_key_secret`).
    Fixed(Credentials),
    /// Alibaba's default credential chain, read from the process's environment when the client
    /// is built; `sts_endpoint` is the sink's key of that name.
    Chain {
        /// Overrides the STS endpoint the environment implies.
        sts_endpoint: Option<String>,
    },
    /// A provider already built (any [`Source`]).
    Provider(Arc<Provider>),
}

impl From<Credentials> for Keys {
    fn from(c: Credentials) -> Self {
        Keys::Fixed(c)
    }
}

/// The keys of a MAXCOMPUTE sink's configuration: its pair, else the default chain.
pub fn credentials(c: &crate::config::MaxComputeSink) -> Keys {
    match (&c.access_key_id, &c.access_key_secret) {
        (Some(id), Some(secret)) => Keys::Fixed(Credentials::new(id.clone(), secret.clone())),
        _ => Keys::Chain {
            sts_endpoint: c.sts_endpoint.clone(),
        },
    }
}

/// Which source a MAXCOMPUTE sink's keys come from in an environment (`check-config`):
/// [`Source::describe`] of what [`credentials`] resolves to, or why it cannot resolve.
pub fn credentials_source(
    c: &crate::config::MaxComputeSink,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<String, String> {
    let keys = c
        .access_key_id
        .as_deref()
        .zip(c.access_key_secret.as_deref());
    Source::resolve(keys, c.sts_endpoint.as_deref(), env).map(|s| s.describe())
}

/// How a client gets the key of each request.
enum Signer {
    Fixed(Credentials),
    Provider(Arc<Provider>),
}

/// A signed client of one project.
pub struct Client {
    http: reqwest::Client,
    signer: Signer,
    opts: ClientOptions,
    tunnel: Mutex<Option<String>>,
}

/// Which endpoint a request goes to.
#[derive(Clone, Copy)]
enum Plane {
    Control,
    Tunnel,
}

impl Client {
    /// A client; fails (not retryable) if the TLS stack cannot be built or the default chain
    /// finds no source (a half-set environment: the message names the variables).
    pub fn new(opts: ClientOptions, keys: impl Into<Keys>) -> Result<Self, CallError> {
        crate::sink::install_crypto_provider();
        let needs_fix = |m: String| CallError {
            class: Class::NeedsFix,
            error: SinkError::new(
                crate::sink::SinkErrorKind::Rejected,
                false,
                format!("MaxCompute credentials: {m}"),
            ),
        };
        let signer = match keys.into() {
            Keys::Fixed(c) => Signer::Fixed(c),
            Keys::Provider(p) => Signer::Provider(p),
            Keys::Chain { sts_endpoint } => {
                let source =
                    Source::resolve(None, sts_endpoint.as_deref(), &|k| std::env::var(k).ok())
                        .map_err(needs_fix)?;
                tracing::info!(source = %source.describe(), "MaxCompute credentials");
                Signer::Provider(Arc::new(Provider::new(source).map_err(needs_fix)?))
            }
        };
        let http = reqwest::Client::builder()
            .timeout(opts.request_timeout)
            .connect_timeout(opts.connect_timeout)
            .user_agent(concat!("observation-publisher/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| {
                fail(
                    "building the HTTP client",
                    Failure::Status {
                        status: 0,
                        code: None,
                        message: e.to_string(),
                    },
                )
            })?;
        let tunnel = opts
            .tunnel_endpoint
            .as_ref()
            .map(|t| t.trim_end_matches('/').to_string());
        Ok(Client {
            http,
            signer,
            opts,
            tunnel: Mutex::new(tunnel),
        })
    }

    fn seg(s: &str) -> String {
        utf8_percent_encode(s, SEGMENT).to_string()
    }

    fn project_path(&self) -> String {
        format!("/projects/{}", Self::seg(&self.opts.project))
    }

    /// One signed request with a body of known length.
    async fn call(
        &self,
        plane: Plane,
        method: reqwest::Method,
        target: &str,
        headers: &[(&str, &str)],
        body: Bytes,
    ) -> Result<(u16, reqwest::header::HeaderMap, Bytes), Failure> {
        self.call_body(plane, method, target, headers, body.into())
            .await
    }

    /// A signed `GET` of the control plane: the answer's body.
    async fn control_get(&self, target: &str) -> Result<Bytes, Failure> {
        let call = self.call(
            Plane::Control,
            reqwest::Method::GET,
            target,
            &[],
            Bytes::new(),
        );
        Ok(Box::pin(call).await?.2)
    }

    /// The query naming the project and the dataset (schema) a table request is about.
    fn table_scope(&self) -> String {
        format!(
            "curr_project={}&curr_schema={}",
            Self::seg(&self.opts.project),
            Self::seg(&self.opts.dataset)
        )
    }

    /// One signed request; a non-2xx answer is a [`Failure::Status`].
    async fn call_body(
        &self,
        plane: Plane,
        method: reqwest::Method,
        target: &str,
        headers: &[(&str, &str)],
        body: reqwest::Body,
    ) -> Result<(u16, reqwest::header::HeaderMap, Bytes), Failure> {
        let base = match plane {
            Plane::Control => self.opts.endpoint.trim_end_matches('/').to_string(),
            Plane::Tunnel => self.tunnel_endpoint().await?,
        };
        let creds = self.credentials().await?;
        let date = http_date(SystemTime::now());
        let mut all: Vec<(&str, &str)> = vec![("Date", &date)];
        all.extend_from_slice(headers);
        let auth = auth_headers(
            &creds,
            &RequestToSign {
                method: method.as_str(),
                target,
                headers: &all,
            },
        );
        let mut req = self.http.request(method, format!("{base}{target}"));
        for (k, v) in &all {
            req = req.header(*k, *v);
        }
        for (k, v) in auth {
            // Marked sensitive: never shown by the HTTP stack's own debug output.
            let mut v = reqwest::header::HeaderValue::from_str(&v).map_err(|_| {
                Failure::Credentials(format!("the {k} header is not valid header text"))
            })?;
            v.set_sensitive(true);
            req = req.header(k, v);
        }
        let sent = req.body(body).send().await;
        let resp = sent.map_err(net_failure)?;
        let status = resp.status().as_u16();
        let head = resp.headers().clone();
        let body = resp.bytes().await.map_err(net_failure)?;
        if (200..300).contains(&status) {
            Ok((status, head, body))
        } else {
            let (code, message) = parse_error_body(&body);
            Err(Failure::Status {
                status,
                code,
                message,
            })
        }
    }

    /// The key for the next request: the fixed pair, or a usable one of the provider (a
    /// provider without one fails the request before it is sent, retryable).
    async fn credentials(&self) -> Result<Credentials, Failure> {
        match &self.signer {
            Signer::Fixed(c) => Ok(c.clone()),
            Signer::Provider(p) => p
                .key()
                .await
                .map(|k| Credentials::from(k.as_ref()))
                .map_err(|e| Failure::Credentials(e.to_string())),
        }
    }

    /// The Tunnel endpoint: the configured one, else `GET /projects/{p}/tunnel?service` (the
    /// answer is `host:port`, reached with the control plane's scheme), asked once.
    pub async fn tunnel_endpoint(&self) -> Result<String, Failure> {
        if let Some(t) = self.tunnel.lock().expect("tunnel lock").clone() {
            return Ok(t);
        }
        let target = format!(
            "{}/tunnel?service&curr_project={}",
            self.project_path(),
            Self::seg(&self.opts.project)
        );
        let body = self.control_get(&target).await?;
        let host = String::from_utf8_lossy(&body).trim().to_string();
        let scheme = if self.opts.endpoint.starts_with("https://") {
            "https"
        } else {
            "http"
        };
        let t = if host.contains("://") {
            host.trim_end_matches('/').to_string()
        } else {
            format!("{scheme}://{host}")
        };
        *self.tunnel.lock().expect("tunnel lock") = Some(t.clone());
        Ok(t)
    }

    /// The columns of `dataset.table` (partition columns excluded); `None` when it does not
    /// exist (404 `NoSuchObject`).
    pub async fn table(&self, table: &str) -> Result<Option<Vec<TableColumn>>, CallError> {
        let what = format!("looking up table {}.{table}", self.opts.dataset);
        let target = format!(
            "{}/tables/{}?{}",
            self.project_path(),
            Self::seg(table),
            self.table_scope()
        );
        match self.control_get(&target).await {
            Ok(body) => {
                let xml = String::from_utf8_lossy(&body);
                wire::table_columns(&xml).map(Some).map_err(|m| {
                    fail(
                        &what,
                        Failure::Status {
                            status: 200,
                            code: Some("UnreadableTable".into()),
                            message: m,
                        },
                    )
                })
            }
            Err(Failure::Status {
                status: 404,
                code: Some(c),
                ..
            }) if c == "NoSuchObject" => Ok(None),
            Err(f) => Err(fail(&what, f)),
        }
    }

    /// The names of the tables in the dataset that begin with `prefix` (every page).
    pub async fn list_tables(&self, prefix: &str) -> Result<Vec<String>, CallError> {
        let what = format!(
            "listing the tables of {} named {prefix}*",
            self.opts.dataset
        );
        let mut names = Vec::new();
        let mut marker: Option<String> = None;
        loop {
            let mut target = format!(
                "{}/tables?expectmarker=true&name={}&{}",
                self.project_path(),
                Self::seg(prefix),
                self.table_scope()
            );
            if let Some(m) = &marker {
                target.push_str(&format!("&marker={}", Self::seg(m)));
            }
            let body = self
                .control_get(&target)
                .await
                .map_err(|f| fail(&what, f))?;
            let (page, next) = wire::table_names(&String::from_utf8_lossy(&body));
            names.extend(page.into_iter().filter(|n| n.starts_with(prefix)));
            match next {
                Some(m) if marker.as_ref() != Some(&m) => marker = Some(m),
                _ => return Ok(names),
            }
        }
    }

    /// Runs one SQL statement (with `settings`, e.g. [`super::ddl::SQL_SETTINGS`]) and waits for
    /// it: create the instance, poll until `Terminated`, then every task must be `Success`; a
    /// failed task's `?result` is in the error.
    pub async fn run_sql(&self, sql: &str, settings: &[(&str, &str)]) -> Result<(), CallError> {
        let id = self.start_sql(sql, settings).await?;
        self.wait_sql(&id, sql).await
    }

    /// Creates the SQL instance of one statement and returns its id, without waiting for it. A
    /// caller that must not run a statement twice (an `INSERT`) waits with [`Client::wait_sql`]
    /// and, on a retryable failure of the wait, waits again on the same id.
    pub async fn start_sql(
        &self,
        sql: &str,
        settings: &[(&str, &str)],
    ) -> Result<String, CallError> {
        let what = "running SQL";
        let cp = Self::seg(&self.opts.project);
        let target = format!("{}/instances?curr_project={cp}", self.project_path());
        let body = Bytes::from(wire::instance_xml(sql, settings));
        let (_, head, _) = self
            .call(
                Plane::Control,
                reqwest::Method::POST,
                &target,
                &[("Content-Type", "application/xml")],
                body,
            )
            .await
            .map_err(|f| fail(what, f))?;
        let location = head
            .get(reqwest::header::LOCATION)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        let id = wire::instance_id(location)
            .ok_or_else(|| {
                fail(
                    what,
                    Failure::Status {
                        status: 201,
                        code: None,
                        message: format!("no instance id in Location {location:?}"),
                    },
                )
            })?
            .to_string();
        Ok(id)
    }

    /// Waits for instance `id` (running `sql`) to terminate with every task `SUCCESS`
    /// ([`super::instance`]). A poll that fails with a retryable error (including a skewed
    /// clock) is repeated on the same instance with backoff; a failed or cancelled task's
    /// `?result` is in the error. Gives up (retryable) after `max_instance_wait`.
    pub async fn wait_sql(&self, id: &str, sql: &str) -> Result<(), CallError> {
        let mut waits = self.poll_pauses();
        let deadline = tokio::time::Instant::now() + self.opts.max_instance_wait;
        loop {
            match self.poll_sql(id, sql).await {
                Ok(Polled::Succeeded) => return Ok(()),
                Ok(Polled::Failed(e)) => return Err(e),
                Ok(Polled::Pending) => {}
                Err(e) if e.class == Class::Retry => {
                    tracing::warn!(instance = id, error = %e, "MaxCompute: polling an SQL instance failed; polling it again");
                }
                Err(e) => return Err(e),
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(fail(
                    &format!("running SQL (instance {id})"),
                    Failure::Timeout(format!(
                        "not terminated after {:?}; it may still run",
                        self.opts.max_instance_wait
                    )),
                ));
            }
            let wait = waits.next().unwrap_or(self.opts.max_poll_interval);
            tokio::time::sleep(wait).await;
        }
    }

    /// The pauses between two polls of a running instance: from 20 ms, doubling up to
    /// `max_poll_interval`.
    pub fn poll_pauses(&self) -> impl Iterator<Item = Duration> {
        Backoff {
            initial: Duration::from_millis(20),
            max: self.opts.max_poll_interval,
        }
        .pauses()
    }

    /// One poll of instance `id` (running `sql`): see [`Polled`]. An error is the poll's (the
    /// instance may still run, or have succeeded): poll the same instance again. Poll errors
    /// are counted in [`crate::metrics::names::maxcompute::POLL_ERRORS_TOTAL`].
    pub async fn poll_sql(&self, id: &str, sql: &str) -> Result<Polled, CallError> {
        match self.poll_once(id, sql).await {
            Ok(p) => Ok(p),
            Err(e) => {
                metrics::counter!(crate::metrics::names::maxcompute::POLL_ERRORS_TOTAL)
                    .increment(1);
                Err(e)
            }
        }
    }

    async fn poll_once(&self, id: &str, sql: &str) -> Result<Polled, CallError> {
        let cp = Self::seg(&self.opts.project);
        let inst = format!("{}/instances/{}", self.project_path(), Self::seg(id));
        let what = format!("polling SQL instance {id}");
        let get = |query: &'static str| {
            let target = format!("{inst}?{query}curr_project={cp}");
            async move {
                (self.control_get(&target).await).map(|b| String::from_utf8_lossy(&b).into_owned())
            }
        };
        let xml = get("").await.map_err(|f| fail(&what, f))?;
        if !instance::terminated(wire::tag_text(&xml, "Status").as_deref()) {
            return Ok(Polled::Pending);
        }
        let xml = get("taskstatus&").await.map_err(|f| fail(&what, f))?;
        match instance::verdict(&wire::task_statuses(&xml)) {
            Poll::Pending => return Ok(Polled::Pending),
            Poll::Succeeded => return Ok(Polled::Succeeded),
            Poll::Failed => {}
        }
        let detail = match get("result&").await {
            Ok(r) => wire::result_text(&r),
            Err(f) => format!("(its result could not be read: {f:?})"),
        };
        Ok(Polled::Failed(fail(
            &format!("running SQL (instance {id})"),
            Failure::TaskFailed {
                statement: sql.to_string(),
                detail,
            },
        )))
    }

    fn table_resource(&self, table: &str) -> String {
        format!(
            "{}/schemas/{}/tables/{}",
            self.project_path(),
            Self::seg(&self.opts.dataset),
            Self::seg(table)
        )
    }

    /// A Tunnel target on `table`: `query` (`k=v&…`), its partition when it has one, then
    /// `curr_project`, as pyodps adds them (`get_common_params`).
    fn tunnel_target(&self, table: &Tunnel<'_>, query: &str) -> String {
        let partition = table
            .partition
            .map(|p| format!("&partition={}", Self::seg(p)))
            .unwrap_or_default();
        format!(
            "{}?{query}{partition}&curr_project={}",
            self.table_resource(table.table),
            Self::seg(&self.opts.project)
        )
    }

    async fn tunnel_call(
        &self,
        what: &str,
        method: reqwest::Method,
        target: String,
        extra: &[(&str, &str)],
        body: Bytes,
    ) -> Result<Bytes, CallError> {
        self.call(Plane::Tunnel, method, &target, &tunnel_headers(extra), body)
            .await
            .map(|(_, _, b)| b)
            .map_err(|f| fail(what, f))
    }

    fn session_of(what: &str, body: &[u8]) -> Result<UploadSession, CallError> {
        wire::upload_session(body).map_err(|m| {
            fail(
                what,
                Failure::Status {
                    status: 200,
                    code: Some("UnreadableSession".into()),
                    message: m,
                },
            )
        })
    }

    /// Creates an upload session on `dataset.table` (its schema gives the records' tags).
    pub async fn create_upload(&self, table: Tunnel<'_>) -> Result<UploadSession, CallError> {
        let what = format!(
            "creating an upload session on {}.{table}",
            self.opts.dataset
        );
        let target = self.tunnel_target(&table, "uploads=1");
        let body = self
            .tunnel_call(&what, reqwest::Method::POST, target, &[], Bytes::new())
            .await?;
        Self::session_of(&what, &body)
    }

    /// Writes one block (a [`super::record::BlockWriter`]'s bytes); the same `block_id` again
    /// replaces it.
    pub async fn put_block(
        &self,
        table: Tunnel<'_>,
        upload_id: &str,
        block_id: u64,
        data: Bytes,
    ) -> Result<(), CallError> {
        let what = format!("writing block {block_id} of upload {upload_id}");
        let target = self.tunnel_target(
            &table,
            &format!("uploadid={}&blockid={block_id}", Self::seg(upload_id)),
        );
        self.call_body(
            Plane::Tunnel,
            reqwest::Method::PUT,
            &target,
            &tunnel_headers(&[("Content-Type", "application/octet-stream")]),
            reqwest::Body::wrap(Chunked(data)),
        )
        .await
        .map(|_| ())
        .map_err(|f| fail(&what, f))
    }

    /// The session as the service holds it (status, uploaded blocks).
    pub async fn upload_status(
        &self,
        table: Tunnel<'_>,
        upload_id: &str,
    ) -> Result<UploadSession, CallError> {
        let what = format!("reading upload session {upload_id}");
        let target = self.tunnel_target(&table, &format!("uploadid={}", Self::seg(upload_id)));
        let body = self
            .tunnel_call(&what, reqwest::Method::GET, target, &[], Bytes::new())
            .await?;
        Self::session_of(&what, &body)
    }

    /// Commits the session with exactly `blocks`, as pyodps does: the service's block list is
    /// read first and must equal `blocks` (a missing block is retryable: write it again).
    pub async fn commit_upload(
        &self,
        table: Tunnel<'_>,
        upload_id: &str,
        blocks: &[u64],
    ) -> Result<UploadSession, CallError> {
        let what = format!("committing upload session {upload_id}");
        let held = self.upload_status(table, upload_id).await?;
        let mut want = blocks.to_vec();
        want.sort_unstable();
        let mut have = held.blocks.clone();
        have.sort_unstable();
        if want != have {
            return Err(fail(
                &what,
                Failure::Incomplete(format!(
                    "the service holds blocks {have:?}, the commit names {want:?}: write the missing blocks again"
                )),
            ));
        }
        let target = self.tunnel_target(&table, &format!("uploadid={}", Self::seg(upload_id)));
        let body = self
            .tunnel_call(&what, reqwest::Method::POST, target, &[], Bytes::new())
            .await?;
        Self::session_of(&what, &body)
    }
}

fn tunnel_headers<'a>(extra: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
    let mut headers = TUNNEL_HEADERS.to_vec();
    headers.extend_from_slice(extra);
    headers
}

/// Size of one chunk of a block's body.
const CHUNK: usize = 64 * 1024;

/// A block's body sent as pyodps sends it: `Transfer-Encoding: chunked` (no length announced),
/// in [`CHUNK`]-byte frames.
struct Chunked(Bytes);

impl http_body::Body for Chunked {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        if self.0.is_empty() {
            return std::task::Poll::Ready(None);
        }
        let n = self.0.len().min(CHUNK);
        let frame = self.0.split_to(n);
        std::task::Poll::Ready(Some(Ok(http_body::Frame::data(frame))))
    }
}

fn net_failure(e: reqwest::Error) -> Failure {
    // reqwest's message names the URL, never the headers (the Authorization stays out).
    let m = crate::error_text::with_causes(&e);
    if e.is_timeout() {
        Failure::Timeout(m)
    } else {
        Failure::Network(m)
    }
}
