//! `sasl.oauthbearer.method: google` with no credentials file: the access token and the
//! principal (the token's `sub`) both come from the metadata server, as on GKE with Workload
//! Identity. A fake metadata server over real HTTP issues the token and names the service
//! account; the checking front accepts only a token carrying that e-mail and an access token
//! the fake issued.

use super::sasl_proxy::SaslProxy;
use super::token_service::TokenService;
use super::{managed_kafka_check, oauth, setup, EMAIL, LIMIT};
use crate::runtime::{brokers, create_topic, logs, produce, unique, wait_for};
use serde_json::json;
use std::sync::{Arc, Mutex};

const ACCOUNT: &str = "/computeMetadata/v1/instance/service-accounts/default";

/// The metadata server: the default account's token (scope cloud-platform) and e-mail, to a
/// request carrying `Metadata-Flavor: Google`; 404 for anything else.
fn metadata_server(issued: Arc<Mutex<Vec<String>>>) -> TokenService {
    TokenService::start(Arc::new(move |r| {
        if r.header("metadata-flavor") != Some("Google") {
            return (403, "missing Metadata-Flavor".into());
        }
        let (path, query) = r.path.split_once('?').unwrap_or((&r.path, ""));
        match path.strip_prefix(ACCOUNT) {
            Some("/token") if query.contains("cloud-platform") => {
                let mut issued = issued.lock().unwrap();
                let token = format!("ya29.metadata-{}", issued.len());
                issued.push(token.clone());
                let body =
                    json!({"access_token": token, "expires_in": 3600, "token_type": "Bearer"});
                (200, body.to_string())
            }
            Some("/email") => (200, EMAIL.into()),
            _ => (404, "not found".into()),
        }
    }))
}

#[test]
fn without_a_credentials_file_the_principal_is_the_metadata_servers_service_account() {
    let dir = tempfile::tempdir().unwrap();
    let issued = Arc::new(Mutex::new(Vec::new()));
    let md = metadata_server(Arc::clone(&issued));
    let host = md
        .url
        .strip_prefix("http://")
        .and_then(|u| u.strip_suffix("/token"))
        .unwrap()
        .to_string();
    let i2 = Arc::clone(&issued);
    let proxy = SaslProxy::start(&brokers(), Arc::new(move |t| managed_kafka_check(t, &i2)));
    let topic = unique("oauth-metadata");
    create_topic(&topic, 1);
    create_topic(&format!("{topic}-dlq"), 1);
    let sent = logs(60, 13, 0.0);
    produce(&topic, &sent);
    let s = setup(dir.path(), &proxy.addr, &topic, &oauth("google"));
    // No gcloud credentials either: ADC falls through to the metadata server.
    let no_gcloud = dir.path().join("no-gcloud");
    std::fs::create_dir(&no_gcloud).unwrap();
    let _child = super::run_with(&s, "metadata", |c| {
        c.env_remove("GOOGLE_APPLICATION_CREDENTIALS")
            .env("CLOUDSDK_CONFIG", &no_gcloud)
            .env("GCE_METADATA_HOST", &host);
    });
    assert!(
        wait_for(LIMIT, || s.rows().len() == sent.len()),
        "rows through the checking front:\n{}\n{:?}\n{:?}",
        s.log_tail(),
        proxy.seen.lock().unwrap(),
        md.requests()
    );
    let seen = proxy.seen.lock().unwrap();
    assert!(
        !seen.accepted.is_empty() && seen.accepted.iter().all(|p| p == EMAIL),
        "{seen:?}"
    );
    assert!(seen.refused.is_empty(), "{seen:?}");
    assert!(
        md.requests()
            .iter()
            .any(|r| r.path == format!("{ACCOUNT}/email")),
        "the e-mail was asked of the metadata server: {:?}",
        md.requests()
    );
}
