//! Every ADC credential type, request for request against google-auth.

use super::{normal, oracle, BIGQUERY_SCOPE};
use crate::http_capture::{Captured, Reply, Server};
use observation_publisher::auth::google::Credentials;
use serde_json::{json, Value as Json};

/// One answer for every fake endpoint: an OAuth/STS token, an IAM `generateAccessToken`
/// answer, the metadata server's account info and a subject token under `id_token`.
pub(super) fn universal_answer() -> Reply {
    let body = json!({
        "access_token": "at-1", "expires_in": 3600, "token_type": "Bearer",
        "issued_token_type": "urn:ietf:params:oauth:token-type:access_token",
        "accessToken": "iam-1", "expireTime": "2099-01-01T00:00:00Z",
        "email": "default@p.iam.gserviceaccount.com", "scopes": [BIGQUERY_SCOPE],
        "id_token": "subject-from-url",
    });
    Reply::Body(
        200,
        vec![
            ("content-type", "application/json".into()),
            ("metadata-flavor", "Google".into()),
        ],
        body.to_string().into_bytes(),
    )
}

/// The credential files, `c{i}` in every path of case `i`.
fn cases(base: &str, key: &str, subject_file: &str) -> Vec<(&'static str, Json)> {
    let iam = |c: &str| {
        format!("{base}/{c}/iam/v1/projects/-/serviceAccounts/target@p.iam.gserviceaccount.com:generateAccessToken")
    };
    let sa = |c: &str| {
        json!({"type": "service_account", "project_id": "p", "private_key_id": "kid-1",
            "private_key": key, "client_email": "sa@p.iam.gserviceaccount.com", "client_id": "1",
            "token_uri": format!("{base}/{c}/token")})
    };
    let user = |c: &str| {
        json!({"type": "authorized_user", "client_id": "cid", "client_secret": "csecret",
            "refresh_token": "rt-1", "token_uri": format!("{base}/{c}/token")})
    };
    vec![
        ("service_account", sa("c0")),
        ("authorized_user", user("c1")),
        (
            "external_account, file-sourced text, workforce pool",
            json!({"type": "external_account",
                "audience": "//iam.googleapis.com/locations/global/workforcePools/pool/providers/prov",
                "subject_token_type": "urn:ietf:params:oauth:token-type:id_token",
                "token_url": format!("{base}/c2/sts/v1/token"),
                "workforce_pool_user_project": "proj-123",
                "credential_source": {"file": subject_file}}),
        ),
        (
            "external_account, URL-sourced json, client auth, impersonation",
            json!({"type": "external_account",
                "audience": "//iam.googleapis.com/projects/123/locations/global/workloadIdentityPools/pool/providers/prov",
                "subject_token_type": "urn:ietf:params:oauth:token-type:jwt",
                "token_url": format!("{base}/c3/sts/v1/token"),
                "client_id": "ext-client", "client_secret": "ext-secret",
                "service_account_impersonation_url": iam("c3"),
                "service_account_impersonation": {"token_lifetime_seconds": 1200},
                "credential_source": {"url": format!("{base}/c3/subject"),
                    "headers": {"x-test-header": "v"},
                    "format": {"type": "json", "subject_token_field_name": "id_token"}}}),
        ),
        (
            "impersonated_service_account from a service account, with delegates",
            json!({"type": "impersonated_service_account",
                "service_account_impersonation_url": iam("c4"),
                "delegates": ["d1@p.iam.gserviceaccount.com"], "source_credentials": sa("c4")}),
        ),
        (
            "impersonated_service_account from an authorized user",
            json!({"type": "impersonated_service_account",
                "service_account_impersonation_url": iam("c5"), "source_credentials": user("c5")}),
        ),
    ]
}

fn of_case(reqs: &[Captured], prefix: &str) -> Vec<Json> {
    reqs.iter()
        .filter(|c| c.path.starts_with(prefix))
        .map(normal)
        .collect()
}

#[test]
fn every_credential_type_sends_what_google_auth_sends() {
    let server = Server::answering(universal_answer());
    let host = format!("127.0.0.1:{}", server.port);
    let base = format!("http://{host}");
    let dir = tempfile::tempdir().unwrap();
    let key = oracle(&["keygen"], &[]);
    let subject_file = dir.path().join("subject.txt");
    std::fs::write(&subject_file, "subject-from-file").unwrap();
    let cases = cases(&base, &key, subject_file.to_str().unwrap());
    let mut files = Vec::new();
    for (i, (_, v)) in cases.iter().enumerate() {
        let p = dir.path().join(format!("c{i}.json"));
        std::fs::write(&p, v.to_string()).unwrap();
        files.push(p);
    }
    let mut spec: Vec<Json> = files.iter().map(|p| json!({"file": p})).collect();
    spec.push(json!({"metadata": true}));
    let spec_path = dir.path().join("spec.json");
    std::fs::write(
        &spec_path,
        json!({"scope": BIGQUERY_SCOPE, "cases": spec}).to_string(),
    )
    .unwrap();
    let empty = dir.path().join("no-gcloud");
    std::fs::create_dir(&empty).unwrap();
    let answer = oracle(
        &[spec_path.to_str().unwrap()],
        &[
            ("GCE_METADATA_HOST", host.clone()),
            ("GCE_METADATA_IP", host.clone()),
            ("CLOUDSDK_CONFIG", empty.display().to_string()),
            // Keeps google-auth from looking the project up on cloudresourcemanager.
            ("GOOGLE_CLOUD_PROJECT", "p".to_string()),
        ],
    );
    let theirs = server.take();
    let their_tokens: Json = serde_json::from_str(&answer).unwrap();

    let rt = tokio::runtime::Runtime::new().unwrap();
    let mut our_tokens = Vec::new();
    for p in &files {
        let c = Credentials::from_file(p).unwrap_or_else(|e| panic!("{e}"));
        our_tokens.push(
            rt.block_on(c.token())
                .unwrap_or_else(|e| panic!("{}: {e}", p.display())),
        );
    }
    let md = Credentials::metadata_server(&host);
    our_tokens.push(rt.block_on(md.token()).unwrap());
    let ours = server.take();

    for (i, (name, _)) in cases.iter().enumerate() {
        let prefix = format!("/c{i}/");
        let (t, o) = (of_case(&theirs, &prefix), of_case(&ours, &prefix));
        assert!(!t.is_empty(), "{name}: google-auth sent nothing");
        assert!(
            o == t,
            "{name}: our requests differ from google-auth's\nours: {}\ngoogle-auth: {}",
            serde_json::to_string_pretty(&o).unwrap(),
            serde_json::to_string_pretty(&t).unwrap(),
        );
    }
    // google-auth probes the server and reads the account first; the token request is the one
    // that must match.
    let token_path = "/computeMetadata/v1/instance/service-accounts/default/token";
    let (t, o) = (of_case(&theirs, token_path), of_case(&ours, token_path));
    assert_eq!(t.len(), 1, "{theirs:#?}");
    assert_eq!(o, t, "metadata server: ours (left), google-auth's (right)");
    assert_eq!(json!(our_tokens), their_tokens["tokens"]);
}
