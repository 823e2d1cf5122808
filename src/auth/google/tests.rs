use std::time::{Duration, Instant};

use serde_json::json;

use super::file::{parse, quota_project, Source, SubjectFrom};
use super::{AuthError, Cached, Credentials};

fn problem(v: serde_json::Value) -> String {
    match parse(&v) {
        Err(p) => p,
        Ok(_) => panic!("accepted {v}"),
    }
}

#[test]
fn every_adc_type_parses_and_keeps_the_endpoints_the_file_gives() {
    let user = json!({"type": "authorized_user", "client_id": "c", "client_secret": "s",
        "refresh_token": "r", "token_uri": "https://private.example/token"});
    let Ok(Source::AuthorizedUser(u)) = parse(&user) else {
        panic!("authorized_user")
    };
    assert_eq!(u.token_uri, "https://private.example/token");

    let ext = json!({"type": "external_account", "audience": "//iam.googleapis.com/x",
        "subject_token_type": "urn:ietf:params:oauth:token-type:jwt",
        "token_url": "https://sts.private.example/v1/token",
        "service_account_impersonation_url": "https://iam.example/v1/projects/-/serviceAccounts/a@b:generateAccessToken",
        "service_account_impersonation": {"token_lifetime_seconds": 600},
        "credential_source": {"url": "http://127.0.0.1/token", "headers": {"Metadata": "True"},
            "format": {"type": "json", "subject_token_field_name": "access_token"}}});
    let Ok(Source::ExternalAccount(e)) = parse(&ext) else {
        panic!("external_account")
    };
    assert_eq!(e.token_url, "https://sts.private.example/v1/token");
    let (url, lifetime) = e.impersonation.clone().unwrap();
    assert!(url.starts_with("https://iam.example/"));
    assert_eq!(lifetime, 600);
    assert_eq!(e.subject.json_field.as_deref(), Some("access_token"));
    let SubjectFrom::Url { headers, .. } = &e.subject.from else {
        panic!("url source")
    };
    assert_eq!(headers, &[("Metadata".to_string(), "True".to_string())]);

    let imp = json!({"type": "impersonated_service_account", "delegates": ["d@p"],
        "service_account_impersonation_url": "https://iam.example/v1/projects/-/serviceAccounts/t@p:generateAccessToken",
        "source_credentials": user});
    let Ok(Source::Impersonated(i)) = parse(&imp) else {
        panic!("impersonated")
    };
    assert!(matches!(i.source, Source::AuthorizedUser(_)));
    assert_eq!(i.delegates.as_deref(), Some(&["d@p".to_string()][..]));
}

#[test]
fn a_malformed_file_names_the_field_and_unknown_types_are_refused() {
    assert!(problem(json!({"type": "external_account", "audience": "a",
        "subject_token_type": "t"}))
    .contains("credential_source"));
    assert!(problem(json!({"type": "authorized_user", "client_id": "c",
        "client_secret": "s"}))
    .contains("refresh_token"));
    assert!(
        problem(json!({"type": "service_account", "client_email": "e",
        "private_key": "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"}))
        .contains("PKCS#8")
    );
    assert!(problem(json!({"type": "gdch_service_account"})).contains("not supported"));
    assert!(problem(json!({"client_id": "c"})).contains("type"));
    assert!(problem(
        json!({"type": "external_account", "audience": "a", "subject_token_type": "t",
        "credential_source": {"environment_id": "aws1", "url": "http://x"}})
    )
    .contains("AWS"));
    assert!(problem(
        json!({"type": "external_account", "audience": "a", "subject_token_type": "t",
        "credential_source": {"file": "/f", "format": {"type": "json"}}})
    )
    .contains("subject_token_field_name"));
    assert!(problem(json!({"type": "impersonated_service_account",
        "service_account_impersonation_url": "https://iam.example/v1/x:generateAccessToken",
        "source_credentials": {"type": "nope"}}))
    .contains("source_credentials"));
}

#[test]
fn a_file_error_names_the_file_and_the_variable() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("creds.json");
    std::fs::write(&path, r#"{"type": "external_account"}"#).unwrap();
    let err = Credentials::from_file(&path).unwrap_err();
    assert!(matches!(err, AuthError::File { .. }));
    assert!(!err.is_transient());
    let msg = err.to_string();
    assert!(msg.contains(&path.display().to_string()), "{msg}");
    assert!(msg.contains("GOOGLE_APPLICATION_CREDENTIALS"), "{msg}");
    assert!(msg.contains("credential_source"), "{msg}");
}

#[test]
fn a_token_is_replaced_before_expiry_and_used_only_while_a_minute_is_left() {
    let now = Instant::now();
    let hour = Cached::new("t".into(), now, Duration::from_secs(3600));
    assert_eq!(hour.refresh_at - now, Duration::from_secs(3600 - 240));
    assert_eq!(hour.expires_at - now, Duration::from_secs(3600));
    let short = Cached::new("t".into(), now, Duration::from_secs(100));
    assert_eq!(short.refresh_at - now, Duration::from_secs(75));
    assert!(hour.usable(now + Duration::from_secs(3539)));
    assert!(!hour.usable(now + Duration::from_secs(3540)));
}

#[test]
fn debug_shows_where_the_credentials_came_from_and_no_secret() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("user.json");
    std::fs::write(
        &path,
        json!({"type": "authorized_user", "client_id": "c",
        "client_secret": "s3cr3t-value", "refresh_token": "r3fr3sh-value"})
        .to_string(),
    )
    .unwrap();
    let c = Credentials::from_file(&path).unwrap();
    let d = format!("{c:?}");
    assert!(d.contains("authorized_user"), "{d}");
    assert!(!d.contains("s3cr3t") && !d.contains("r3fr3sh"), "{d}");
}

#[test]
fn the_quota_project_is_the_variables_else_the_files_where_google_auth_reads_it() {
    let user = json!({"type": "authorized_user", "client_id": "c", "client_secret": "s",
        "refresh_token": "r", "quota_project_id": "from-file"});
    let user = parse(&user).unwrap();
    let env = |v: &str| Some(v.to_string());
    assert_eq!(quota_project(&user, None).as_deref(), Some("from-file"));
    // google-auth's `with_quota_project_from_environment`: the variable wins.
    assert_eq!(
        quota_project(&user, env("from-env")).as_deref(),
        Some("from-env")
    );
    assert_eq!(quota_project(&user, env("")).as_deref(), Some("from-file"));
    let metadata = Source::Metadata {
        root: "http://127.0.0.1/computeMetadata/v1".into(),
    };
    assert_eq!(quota_project(&metadata, None), None);
    assert_eq!(
        quota_project(&metadata, env("from-env")).as_deref(),
        Some("from-env")
    );
    let blank = json!({"type": "authorized_user", "client_id": "c", "client_secret": "s",
        "refresh_token": "r", "quota_project_id": ""});
    assert_eq!(quota_project(&parse(&blank).unwrap(), None), None);
}
