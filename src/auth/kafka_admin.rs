//! Kafka admin clients under publisher-supplied OAUTHBEARER tokens.
//!
//! rdkafka's `AdminClient` polls only its own result queue and never enables librdkafka's
//! token-refresh event, so its context's `generate_oauth_token` is never called and the client
//! waits for a token forever. librdkafka takes a token at any time through
//! `rd_kafka_oauthbearer_set_token`, so [`admin_client`] hands one over at creation and
//! [`AdminTokens::refresh`] again before each request. Admin clients here live for one or two
//! requests (the dead-letter topic, `produce`'s topic), far shorter than a token's life, and
//! [`Tokens::token`] returns one valid for at least half its lifetime.
//!
//! This is the crate's second `unsafe` block (Cargo.toml's `[lints]`): the call needs the raw
//! client handle, which rdkafka exposes but wraps in no safe function.

use super::kafka::Tokens;
use rdkafka::admin::AdminClient;
use rdkafka::config::{ClientConfig, FromClientConfigAndContext};
use rdkafka::ClientContext;
use std::ffi::{c_char, CString};
use std::sync::Arc;
use std::time::UNIX_EPOCH;

/// An admin client and, under a publisher-supplied method, the process's token source.
pub struct AdminTokens<C: ClientContext> {
    /// The client.
    pub admin: AdminClient<C>,
    tokens: Option<Arc<Tokens>>,
}

/// An admin client for `cfg` holding a token from `tokens` when there is a source (the
/// refusal text names the token service's answer).
pub fn admin_client<C: ClientContext>(
    cfg: &ClientConfig,
    context: C,
    tokens: Option<Arc<Tokens>>,
) -> Result<AdminTokens<C>, String> {
    let admin = AdminClient::from_config_and_context(cfg, context)
        .map_err(|e| format!("cannot create a Kafka admin client: {e}"))?;
    let a = AdminTokens { admin, tokens };
    a.refresh()?;
    Ok(a)
}

impl<C: ClientContext> AdminTokens<C> {
    /// Gives the client a current token (nothing without a source). Call before each request.
    pub fn refresh(&self) -> Result<(), String> {
        let Some(tokens) = &self.tokens else {
            return Ok(());
        };
        let t = tokens.token()?;
        let lifetime_ms = t
            .expires
            .duration_since(UNIX_EPOCH)
            .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
            .unwrap_or(0);
        let value = CString::new(t.value)
            .map_err(|_| "Kafka OAUTHBEARER: the token holds a NUL byte".to_string())?;
        let principal = CString::new(t.principal)
            .map_err(|_| "Kafka OAUTHBEARER: the principal holds a NUL byte".to_string())?;
        let mut errstr = [0 as c_char; 512];
        let client = self.admin.inner().native_ptr();
        #[allow(unsafe_code)] // The crate's second exception (Cargo.toml's `[lints]`).
        // SAFETY: `client` is the live handle `self.admin` owns, borrowed for this call; the two
        // strings are NUL-terminated and outlive the call (librdkafka copies them); no
        // extensions (a null array of length 0, which librdkafka accepts); `errstr` is writable
        // for the length given.
        let code = unsafe {
            rdkafka::bindings::rd_kafka_oauthbearer_set_token(
                client,
                value.as_ptr(),
                lifetime_ms,
                principal.as_ptr(),
                std::ptr::null_mut(),
                0,
                errstr.as_mut_ptr(),
                errstr.len(),
            )
        };
        if code == rdkafka::bindings::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
            return Ok(());
        }
        let bytes: Vec<u8> = errstr
            .iter()
            .take_while(|&&c| c != 0)
            .map(|&c| c as u8)
            .collect();
        Err(format!(
            "Kafka OAUTHBEARER: the admin client refused the token: {}",
            String::from_utf8_lossy(&bytes)
        ))
    }
}
