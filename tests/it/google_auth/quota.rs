//! The quota project against google-auth: the same credentials, google-auth's
//! `AuthorizedSession` and our BigQuery clients (REST through `TableManager`, Storage Write
//! through `StorageClient`) each call a local capture server, and the `authorization` and
//! `x-goog-user-project` headers on those calls must match; so must the token requests, which
//! carry the header where google-auth's do (`generateAccessToken`).
//!
//! `GOOGLE_CLOUD_QUOTA_PROJECT` is read when credentials are built, so our side of the
//! variable's case runs in a child process of this test binary, the same test started with the
//! variable and a plan (setting a variable in the test process would reach every test running
//! beside it).

use super::oracle::universal_answer;
use super::{normal, oracle, BIGQUERY_SCOPE};
use crate::http_capture::{Captured, Server};
use observation_publisher::auth::google::Credentials;
use observation_publisher::sink::bigquery::table::RestOptions;
use observation_publisher::sink::bigquery::{StorageClient, TableManager};
use serde_json::{json, Value as Json};
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio_stream::wrappers::TcpListenerStream;
use tonic::body::Body;
use tonic::codegen::{http, Service};
use tonic::Status;

/// The variable naming the child's plan file (see the module docs).
const CHILD_PLAN: &str = "QUOTA_TEST_CHILD_PLAN";

/// A Storage Write endpoint that records each call's headers and answers UNIMPLEMENTED.
#[derive(Clone, Default)]
struct GrpcCapture(Arc<Mutex<Vec<http::HeaderMap>>>);

impl tonic::server::NamedService for GrpcCapture {
    const NAME: &'static str = "google.cloud.bigquery.storage.v1.BigQueryWrite";
}

impl Service<http::Request<Body>> for GrpcCapture {
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<Body>) -> Self::Future {
        self.0.lock().unwrap().push(req.headers().clone());
        Box::pin(async { Ok(Status::unimplemented("headers captured").into_http()) })
    }
}

/// Starts a [`GrpcCapture`] on `rt`; its URL.
fn grpc_capture(rt: &tokio::runtime::Runtime, capture: &GrpcCapture) -> String {
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let svc = capture.clone();
    rt.spawn(async move {
        tonic::transport::Server::builder()
            .add_service(svc)
            .serve_with_incoming(TcpListenerStream::new(listener))
            .await
    });
    url
}

/// The REST base URL of case `i`.
fn api_base(base: &str, i: usize) -> String {
    format!("{base}/q{i}/bigquery/v2")
}

/// Our side: for each case (a file, or the metadata server at `metadata`), one REST call and
/// one Storage Write call with the credentials, in case order.
fn ours(plan: &Json) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    // The Storage Write client's lazy channel is made inside a runtime.
    let _inside = rt.enter();
    for (i, case) in plan["cases"].as_array().unwrap().iter().enumerate() {
        let creds = match case["file"].as_str() {
            Some(f) => Credentials::from_file(std::path::Path::new(f)).unwrap(),
            None => Credentials::metadata_server(plan["metadata"].as_str().unwrap()),
        };
        let rest = TableManager::new(RestOptions {
            base_url: api_base(plan["base"].as_str().unwrap(), i),
            credentials: Some(creds.clone()),
            emulator_compat: false,
            timeout: Duration::from_secs(10),
        })
        .unwrap();
        rt.block_on(rest.get_dataset("p", "d"))
            .unwrap_or_else(|e| panic!("case {i}: {e}"));
        let grpc = StorageClient::new(plan["grpc"].as_str().unwrap(), Some(creds)).unwrap();
        let answer =
            rt.block_on(grpc.get_write_stream("projects/p/datasets/d/tables/t/streams/_default"));
        assert_eq!(
            answer.unwrap_err().code(),
            tonic::Code::Unimplemented,
            "case {i}: the call reached the capture"
        );
    }
}

/// What matters of a BigQuery call.
fn api_headers(authorization: Option<&str>, quota: Option<&str>) -> Json {
    json!({"authorization": authorization, "x-goog-user-project": quota})
}

fn rest_calls(captured: &[Captured]) -> Vec<Json> {
    captured
        .iter()
        .filter(|c| c.path.contains("/bigquery/v2/"))
        .map(|c| api_headers(c.header("authorization"), c.header("x-goog-user-project")))
        .collect()
}

fn grpc_calls(capture: &GrpcCapture) -> Vec<Json> {
    std::mem::take(&mut *capture.0.lock().unwrap())
        .iter()
        .map(|h| {
            let get = |k: &str| h.get(k).and_then(|v| v.to_str().ok());
            api_headers(get("authorization"), get("x-goog-user-project"))
        })
        .collect()
}

/// The token requests of case `i` (everything under `/q{i}/` but its BigQuery call).
fn token_requests(captured: &[Captured], i: usize) -> Vec<Json> {
    captured
        .iter()
        .filter(|c| c.path.starts_with(&format!("/q{i}/")) && !c.path.contains("/bigquery/v2/"))
        .map(normal)
        .collect()
}

struct Bench {
    server: Server,
    host: String,
    base: String,
    dir: tempfile::TempDir,
    /// Serves the Storage Write capture.
    _rt: tokio::runtime::Runtime,
    grpc: GrpcCapture,
    grpc_url: String,
}

fn bench() -> Bench {
    let server = Server::answering(universal_answer());
    let host = format!("127.0.0.1:{}", server.port);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let grpc = GrpcCapture::default();
    let grpc_url = grpc_capture(&rt, &grpc);
    Bench {
        base: format!("http://{host}"),
        server,
        host,
        dir: tempfile::tempdir().unwrap(),
        _rt: rt,
        grpc,
        grpc_url,
    }
}

impl Bench {
    /// Writes the case files; the oracle's spec and our plan.
    fn plan(&self, cases: &[Option<Json>]) -> (std::path::PathBuf, Json) {
        let mut oracle_cases = Vec::new();
        let mut our_cases = Vec::new();
        for (i, c) in cases.iter().enumerate() {
            let api = format!("{}/projects/p/datasets/d", api_base(&self.base, i));
            match c {
                Some(v) => {
                    let p = self.dir.path().join(format!("q{i}.json"));
                    std::fs::write(&p, v.to_string()).unwrap();
                    oracle_cases.push(json!({"file": p, "api": api}));
                    our_cases.push(json!({"file": p}));
                }
                None => {
                    oracle_cases.push(json!({"metadata": true, "api": api}));
                    our_cases.push(json!({}));
                }
            }
        }
        let spec = self.dir.path().join("spec.json");
        std::fs::write(
            &spec,
            json!({"scope": BIGQUERY_SCOPE, "cases": oracle_cases}).to_string(),
        )
        .unwrap();
        let plan = json!({"cases": our_cases, "base": self.base, "metadata": self.host,
            "grpc": self.grpc_url});
        (spec, plan)
    }

    /// google-auth's run of `spec` with `env` added: what it sent.
    fn theirs(&self, spec: &std::path::Path, env: &[(&str, String)]) -> Vec<Captured> {
        let empty = self.dir.path().join("no-gcloud");
        std::fs::create_dir_all(&empty).unwrap();
        let mut all = vec![
            ("GCE_METADATA_HOST", self.host.clone()),
            ("GCE_METADATA_IP", self.host.clone()),
            ("CLOUDSDK_CONFIG", empty.display().to_string()),
            ("GOOGLE_CLOUD_PROJECT", "p".to_string()),
        ];
        all.extend(env.iter().cloned());
        oracle(&[spec.to_str().unwrap()], &all);
        self.server.take()
    }

    /// Compares both sides' calls and token requests for `n` cases.
    fn compare(&self, names: &[&str], theirs: &[Captured], ours: &[Captured]) {
        let (their_api, our_rest, our_grpc) =
            (rest_calls(theirs), rest_calls(ours), grpc_calls(&self.grpc));
        assert_eq!(their_api.len(), names.len(), "{theirs:#?}");
        for (i, name) in names.iter().enumerate() {
            assert_eq!(our_rest[i], their_api[i], "{name}: REST call, ours (left)");
            assert_eq!(
                our_grpc[i], their_api[i],
                "{name}: Storage Write call, ours (left)"
            );
            let (t, o) = (token_requests(theirs, i), token_requests(ours, i));
            assert_eq!(o, t, "{name}: token requests, ours (left)");
        }
    }
}

fn sa(base: &str, c: &str, key: &str) -> Json {
    json!({"type": "service_account", "project_id": "p", "private_key_id": "kid-1",
        "private_key": key, "client_email": "sa@p.iam.gserviceaccount.com", "client_id": "1",
        "token_uri": format!("{base}/{c}/token"), "quota_project_id": "quota-sa"})
}

fn user(base: &str, c: &str, quota: &str) -> Json {
    json!({"type": "authorized_user", "client_id": "cid", "client_secret": "csecret",
        "refresh_token": "rt-1", "token_uri": format!("{base}/{c}/token"),
        "quota_project_id": quota})
}

fn iam(base: &str, c: &str) -> String {
    format!("{base}/{c}/iam/v1/projects/-/serviceAccounts/target@p.iam.gserviceaccount.com:generateAccessToken")
}

#[test]
fn the_files_quota_project_is_sent_as_google_auth_sends_it() {
    let b = bench();
    let key = oracle(&["keygen"], &[]);
    let subject = b.dir.path().join("subject.txt");
    std::fs::write(&subject, "subject-from-file").unwrap();
    let base = b.base.clone();
    let cases = [
        ("authorized_user", Some(user(&base, "q0", "quota-user"))),
        (
            "service_account (its quota_project_id ignored)",
            Some(sa(&base, "q1", &key)),
        ),
        (
            "external_account with impersonation",
            Some(json!({"type": "external_account",
                "audience": "//iam.googleapis.com/projects/123/locations/global/workloadIdentityPools/pool/providers/prov",
                "subject_token_type": "urn:ietf:params:oauth:token-type:jwt",
                "token_url": format!("{base}/q2/sts/v1/token"),
                "service_account_impersonation_url": iam(&base, "q2"),
                "credential_source": {"file": subject},
                "quota_project_id": "quota-ext"})),
        ),
        (
            "external_account without impersonation",
            Some(json!({"type": "external_account",
                "audience": "//iam.googleapis.com/projects/123/locations/global/workloadIdentityPools/pool/providers/prov",
                "subject_token_type": "urn:ietf:params:oauth:token-type:jwt",
                "token_url": format!("{base}/q3/sts/v1/token"),
                "credential_source": {"file": subject},
                "quota_project_id": "quota-ext"})),
        ),
        (
            "impersonated_service_account from an authorized user with its own quota project",
            Some(json!({"type": "impersonated_service_account",
                "service_account_impersonation_url": iam(&base, "q4"),
                "source_credentials": user(&base, "q4", "quota-source"),
                "quota_project_id": "quota-imp"})),
        ),
        ("metadata server", None),
    ];
    let names: Vec<&str> = cases.iter().map(|(n, _)| *n).collect();
    let (spec, plan) = b.plan(&cases.iter().map(|(_, c)| c.clone()).collect::<Vec<_>>());
    let theirs = b.theirs(&spec, &[]);
    // Honesty: the quota project reaches google-auth's calls where the file names one.
    let quotas: Vec<Json> = rest_calls(&theirs)
        .iter()
        .map(|h| h["x-goog-user-project"].clone())
        .collect();
    assert_eq!(
        quotas,
        [
            json!("quota-user"),
            Json::Null,
            json!("quota-ext"),
            json!("quota-ext"),
            json!("quota-imp"),
            Json::Null
        ]
    );
    ours(&plan);
    let ours = b.server.take();
    b.compare(&names, &theirs, &ours);
}

#[test]
fn the_variable_names_the_quota_project_as_in_google_auth() {
    // In the child this test starts (below), it is our side only, under the variable.
    if let Ok(plan) = std::env::var(CHILD_PLAN) {
        let plan = std::fs::read_to_string(plan).unwrap();
        ours(&serde_json::from_str(&plan).unwrap());
        return;
    }
    let b = bench();
    let key = oracle(&["keygen"], &[]);
    let base = b.base.clone();
    let cases = [
        (
            "authorized_user with its own",
            Some(user(&base, "q0", "quota-user")),
        ),
        ("service_account", Some(sa(&base, "q1", &key))),
        (
            "impersonated_service_account (the variable does not reach the source)",
            Some(json!({"type": "impersonated_service_account",
                "service_account_impersonation_url": iam(&base, "q2"),
                "source_credentials": user(&base, "q2", "quota-source")})),
        ),
        ("metadata server", None),
    ];
    let names: Vec<&str> = cases.iter().map(|(n, _)| *n).collect();
    let (spec, plan) = b.plan(&cases.iter().map(|(_, c)| c.clone()).collect::<Vec<_>>());
    let env = [("GOOGLE_CLOUD_QUOTA_PROJECT", "quota-env".to_string())];
    let theirs = b.theirs(&spec, &env);
    assert!(
        rest_calls(&theirs)
            .iter()
            .all(|h| h["x-goog-user-project"] == "quota-env"),
        "{theirs:#?}"
    );
    let plan_file = b.dir.path().join("plan.json");
    std::fs::write(&plan_file, plan.to_string()).unwrap();
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "google_auth::quota::the_variable_names_the_quota_project_as_in_google_auth",
            "--test-threads=1",
        ])
        .env(CHILD_PLAN, &plan_file)
        .env("GOOGLE_CLOUD_QUOTA_PROJECT", "quota-env")
        .env_remove("GOOGLE_APPLICATION_CREDENTIALS")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "our side failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ours = b.server.take();
    b.compare(&names, &theirs, &ours);
}
