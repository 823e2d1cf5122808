//! Tokens are replaced before they expire; an endpoint that cannot answer is a transient error
//! (the caller retries and reports itself unready), a refusal is not.

use crate::http_capture::{Reply, Server};
use observation_publisher::auth::google::{AuthError, Credentials};
use serde_json::json;
use std::time::Duration;

fn token(access: &str, expires_in: u64) -> Reply {
    Reply::Body(
        200,
        vec![("content-type", "application/json".into())],
        json!({"access_token": access, "expires_in": expires_in, "token_type": "Bearer"})
            .to_string()
            .into_bytes(),
    )
}

fn user_file(dir: &std::path::Path, server: &Server) -> std::path::PathBuf {
    let p = dir.join("user.json");
    let v = json!({"type": "authorized_user", "client_id": "cid", "client_secret": "cs",
        "refresh_token": "rt", "token_uri": format!("http://127.0.0.1:{}/token", server.port)});
    std::fs::write(&p, v.to_string()).unwrap();
    p
}

#[tokio::test]
async fn a_token_is_replaced_before_it_expires_and_shared_by_clones() {
    let server = Server::answering(token("t-2", 3600));
    server.script([token("t-1", 2)]);
    let dir = tempfile::tempdir().unwrap();
    let c = Credentials::from_file(&user_file(dir.path(), &server)).unwrap();
    assert_eq!(c.token().await.unwrap(), "t-1");
    assert_eq!(c.clone().authorization().await.unwrap(), "Bearer t-1");
    assert_eq!(server.count(), 1, "a fresh token is reused");
    // Two seconds of life: replaced once a quarter of it is left, before it expires.
    tokio::time::sleep(Duration::from_millis(1600)).await;
    assert_eq!(c.token().await.unwrap(), "t-2");
    assert_eq!(server.count(), 2);
}

#[tokio::test]
async fn an_unreachable_or_failing_endpoint_is_transient_and_a_refusal_is_not() {
    let server = Server::answering(Reply::Drop);
    let dir = tempfile::tempdir().unwrap();
    let c = Credentials::from_file(&user_file(dir.path(), &server)).unwrap();
    let e = c.token().await.unwrap_err();
    assert!(e.is_transient(), "{e}");
    assert!(
        e.to_string()
            .contains(&format!("127.0.0.1:{}/token", server.port)),
        "{e}"
    );

    server.script([Reply::Body(503, vec![], b"overloaded".to_vec())]);
    let e = c.token().await.unwrap_err();
    assert!(matches!(e, AuthError::Unreachable { .. }), "{e}");

    server.script([Reply::Body(
        400,
        vec![],
        br#"{"error": "invalid_grant"}"#.to_vec(),
    )]);
    let e = c.token().await.unwrap_err();
    assert!(matches!(e, AuthError::Refused { status: 400, .. }), "{e}");
    assert!(!e.is_transient());
    assert!(e.to_string().contains("invalid_grant"), "{e}");

    // A token close to expiry is not used when its replacement cannot be fetched.
    server.script([token("t-short", 2), Reply::Drop]);
    assert_eq!(c.token().await.unwrap(), "t-short");
    tokio::time::sleep(Duration::from_millis(1600)).await;
    assert!(c.token().await.unwrap_err().is_transient());
}

/// The Storage Write client turns a token endpoint that cannot answer into UNAVAILABLE (the
/// writer retries and reports itself unhealthy) and a refusal into UNAUTHENTICATED (a fix is
/// needed).
#[tokio::test]
async fn the_storage_client_retries_an_unreachable_token_endpoint_and_not_a_refusal() {
    use observation_publisher::sink::bigquery::StorageClient;
    let server = Server::answering(Reply::Drop);
    let dir = tempfile::tempdir().unwrap();
    let c = Credentials::from_file(&user_file(dir.path(), &server)).unwrap();
    // Never reached: the token is asked for before the request goes out.
    let client = StorageClient::new("http://127.0.0.1:9", Some(c)).unwrap();
    let stream = "projects/p/datasets/d/tables/t/streams/_default";
    let status = client.get_write_stream(stream).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::Unavailable, "{status}");
    server.script([Reply::Body(
        401,
        vec![],
        br#"{"error": "invalid_client"}"#.to_vec(),
    )]);
    let status = client.get_write_stream(stream).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::Unauthenticated, "{status}");
}
