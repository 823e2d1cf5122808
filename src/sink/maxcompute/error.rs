//! What a failed MaxCompute call means for the sink (pure): every failure of the clients
//! ([`super::client`]) is a [`Failure`], and [`classify`] maps it to the sink seam's
//! [`SinkError`] plus a [`Class`] saying what the caller does next.
//!
//! | failure | class | `SinkError` |
//! | --- | --- | --- |
//! | `RequestTimeTooSkewed` (this host's clock is off; pyodps retries it) | [`Class::Retry`] | `Unavailable`, retryable, says "clock skew" |
//! | `InvalidAccessKeyId`, `SignatureNotMatch`, `NoPermission`, `AccessDenied`, any other 401/403 | [`Class::NeedsFix`] | `Rejected`, not retryable, names the credentials |
//! | `TableModified`, `DataVersionConflict` (the table changed, or is being replicated, since the session opened) | [`Class::NewSession`] | `Unavailable`, retryable |
//! | 429, 5xx, 408, a throttling code (`SlotExceeded`, `FlowExceeded`, `ServiceUnavailable`, …) | [`Class::Retry`] | `Unavailable`, retryable |
//! | no answer: connection refused or reset, a body cut short, a timeout | [`Class::Retry`] | `Io`, retryable |
//! | no usable access key: the STS or metadata server unreachable or refusing ([`Failure::Credentials`]) | [`Class::Retry`] | `Unavailable`, retryable, names the credential source |
//! | a block missing at commit ([`Failure::Incomplete`]) | [`Class::Retry`] | `Unavailable`, retryable |
//! | a block the Tunnel refuses (`MalformedDataStream`, `InvalidRecord`, `InvalidColumnType`, `StringTooLong`) | [`Class::RowsRefused`] | `Rejected`, not retryable |
//! | an SQL task that failed; any other 4xx | [`Class::NeedsFix`] | `Rejected`, not retryable, names the statement and the service's detail |
//!
//! The codes are the ones pyodps's `odps/errors.py` and the Tunnel name; a code we do not know
//! falls back to the status.

use crate::sink::{SinkError, SinkErrorKind};

/// A failed call, as the clients see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// The service answered with a non-success status. `code` is the error body's `<Code>` (XML)
    /// or `Code` (JSON), when it had one.
    Status {
        /// HTTP status.
        status: u16,
        /// The service's error code.
        code: Option<String>,
        /// The service's message (or the body's start).
        message: String,
    },
    /// No (complete) answer: connection refused or reset, a body cut short.
    Network(String),
    /// The request or the connection attempt timed out.
    Timeout(String),
    /// No usable access key to sign with (Alibaba's default chain could not fetch one): the
    /// request was not sent.
    Credentials(String),
    /// The service holds less than the call needs (e.g. a block missing at commit): write it
    /// again, then retry.
    Incomplete(String),
    /// An SQL instance terminated with a task that did not succeed; `detail` is `?result`.
    TaskFailed {
        /// The statement run.
        statement: String,
        /// The service's error text for it.
        detail: String,
    },
}

/// What the caller does with a failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// Transient: retry with backoff (the same block id, or a new session after a failed commit).
    Retry,
    /// Retrying cannot help until someone fixes the configuration, the keys or the statement.
    NeedsFix,
    /// The service refused the rows of a block: a row-level refusal (the sink narrows it down to
    /// the rows and dead-letters them; the rest is written).
    RowsRefused,
    /// The upload session is stale: the table was modified (a `TRUNCATE`) or is being
    /// replicated since the session opened. The rows are fine: upload them again in a new
    /// session.
    NewSession,
}

/// Error code of a request whose `Date` is too far from the service's clock.
pub const SKEW_CODE: &str = "RequestTimeTooSkewed";

/// Error codes of an upload session made stale by a change of its table (Alibaba's Tunnel
/// error list: `TableModified`, "the table data was changed by another task during the upload,
/// create a new session"; `DataVersionConflict`, "the table was modified since the upload was
/// initiated and is being replicated, initiate another upload later").
pub const STALE_SESSION_CODES: &[&str] = &["TableModified", "DataVersionConflict"];

/// Error codes of a refused identity or permission.
pub const AUTH_CODES: &[&str] = &[
    "InvalidAccessKeyId",
    "SignatureNotMatch",
    "NoPermission",
    "AccessDenied",
    "InvalidAuthorization",
    "Unauthorized",
];

/// Error codes of throttling and of a service not ready.
pub const THROTTLE_CODES: &[&str] = &[
    "SlotExceeded",
    "FlowExceeded",
    "ServiceUnavailable",
    "InternalServerError",
    "OdpsServerError",
    "TooManyRequests",
    "RequestTimeOut",
];

/// Error codes of a Tunnel block whose rows the service refuses.
pub const ROW_CODES: &[&str] = &[
    "MalformedDataStream",
    "InvalidRecord",
    "InvalidColumnType",
    "StringTooLong",
];

/// The class of a failure (pure).
pub fn class_of(f: &Failure) -> Class {
    match f {
        Failure::Network(_)
        | Failure::Timeout(_)
        | Failure::Incomplete(_)
        | Failure::Credentials(_) => Class::Retry,
        Failure::TaskFailed { .. } => Class::NeedsFix,
        Failure::Status { status, code, .. } => {
            let code = code.as_deref().unwrap_or("");
            if code == SKEW_CODE {
                Class::Retry
            } else if STALE_SESSION_CODES.contains(&code) {
                Class::NewSession
            } else if AUTH_CODES.contains(&code) || matches!(status, 401 | 403) {
                Class::NeedsFix
            } else if THROTTLE_CODES.contains(&code) || matches!(status, 408 | 429 | 500..=599) {
                Class::Retry
            } else if ROW_CODES.contains(&code) {
                Class::RowsRefused
            } else {
                Class::NeedsFix
            }
        }
    }
}

/// Maps a failure of `what` (e.g. "committing upload session X") to the sink seam's error.
pub fn classify(what: &str, f: &Failure) -> (Class, SinkError) {
    let class = class_of(f);
    let error = match (class, f) {
        (_, Failure::Network(m)) => SinkError::new(
            SinkErrorKind::Io,
            true,
            format!("MaxCompute: {what}: no answer: {m}"),
        ),
        (_, Failure::Timeout(m)) => SinkError::new(
            SinkErrorKind::Io,
            true,
            format!("MaxCompute: {what}: timed out: {m}"),
        ),
        (_, Failure::Credentials(m)) => SinkError::new(
            SinkErrorKind::Unavailable,
            true,
            format!("MaxCompute: {what}: not sent, no usable access key: {m}"),
        ),
        (_, Failure::Incomplete(m)) => SinkError::new(
            SinkErrorKind::Unavailable,
            true,
            format!("MaxCompute: {what}: {m}"),
        ),
        (_, Failure::TaskFailed { statement, detail }) => SinkError::new(
            SinkErrorKind::Rejected,
            false,
            format!("MaxCompute: {what}: the statement failed: {statement:?}: {detail}"),
        ),
        (
            Class::Retry,
            Failure::Status {
                status,
                code,
                message,
            },
        ) if code.as_deref() == Some(SKEW_CODE) => SinkError::new(
            SinkErrorKind::Unavailable,
            true,
            format!(
                "MaxCompute: {what}: HTTP {status} {SKEW_CODE}: clock skew: this host's clock is \
                 too far from the service's (fix the node's time sync); retrying: {message}"
            ),
        ),
        (
            Class::Retry | Class::NewSession,
            Failure::Status {
                status,
                code,
                message,
            },
        ) => SinkError::new(
            SinkErrorKind::Unavailable,
            true,
            format!(
                "MaxCompute: {what}: HTTP {status} {}: {message}",
                code_text(code)
            ),
        ),
        (
            Class::RowsRefused,
            Failure::Status {
                status,
                code,
                message,
            },
        ) => SinkError::new(
            SinkErrorKind::Rejected,
            false,
            format!(
                "MaxCompute: {what}: the Tunnel refused the rows (HTTP {status} {}): {message}",
                code_text(code)
            ),
        ),
        (
            Class::NeedsFix,
            Failure::Status {
                status,
                code,
                message,
            },
        ) => {
            let code_s = code.as_deref().unwrap_or("");
            let hint = if AUTH_CODES.contains(&code_s) || matches!(status, 401 | 403) {
                ": check the MAXCOMPUTE sink's credentials (access_key_id and access_key_secret, or the source check-config names) and their permissions on the project"
            } else {
                ""
            };
            SinkError::new(
                SinkErrorKind::Rejected,
                false,
                format!(
                    "MaxCompute: {what}: HTTP {status} {}: {message}{hint}",
                    code_text(code)
                ),
            )
        }
    };
    (class, error)
}

fn code_text(code: &Option<String>) -> &str {
    code.as_deref().unwrap_or("(no error code)")
}

/// The error code and message of an error body: XML `<Error><Code>…</Code><Message>…</Message>`
/// (control plane) or JSON `{"Code": …, "Message": …}` (Tunnel). Pure.
pub fn parse_error_body(body: &[u8]) -> (Option<String>, String) {
    let text = String::from_utf8_lossy(body);
    if let Ok(v) = serde_json::from_str::<serde_json::Value>(&text) {
        let code = v.get("Code").and_then(|c| c.as_str()).map(str::to_owned);
        let message = v
            .get("Message")
            .and_then(|c| c.as_str())
            .map(str::to_owned)
            .unwrap_or_else(|| short(&text));
        return (code, message);
    }
    let code = super::wire::tag_text(&text, "Code");
    let message = super::wire::tag_text(&text, "Message").unwrap_or_else(|| short(&text));
    (code, message)
}

fn short(text: &str) -> String {
    text.chars().take(300).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(status: u16, code: Option<&str>) -> Failure {
        Failure::Status {
            status,
            code: code.map(str::to_owned),
            message: "m".into(),
        }
    }

    #[test]
    fn auth_and_permission_need_a_fix_and_name_the_keys() {
        for f in [
            status(403, Some("SignatureNotMatch")),
            status(401, Some("InvalidAccessKeyId")),
            status(403, Some("NoPermission")),
            status(400, Some("InvalidAccessKeyId")),
            status(403, None),
            status(401, None),
        ] {
            let (class, e) = classify("creating an upload session", &f);
            assert_eq!(class, Class::NeedsFix, "{f:?}");
            assert_eq!(e.kind, SinkErrorKind::Rejected);
            assert!(!e.is_retryable());
            assert!(e.message().contains("access_key_id"), "{}", e.message());
        }
    }

    #[test]
    fn throttling_server_errors_and_network_are_retried() {
        for f in [
            status(503, None),
            status(500, Some("InternalServerError")),
            status(429, None),
            status(400, Some("SlotExceeded")),
            status(400, Some("FlowExceeded")),
            status(408, None),
        ] {
            let (class, e) = classify("x", &f);
            assert_eq!(class, Class::Retry, "{f:?}");
            assert_eq!(e.kind, SinkErrorKind::Unavailable);
            assert!(e.is_retryable());
        }
        for f in [
            Failure::Network("reset".into()),
            Failure::Timeout("60s".into()),
        ] {
            let (class, e) = classify("x", &f);
            assert_eq!(class, Class::Retry);
            assert_eq!(e.kind, SinkErrorKind::Io);
            assert!(e.is_retryable());
        }
    }

    #[test]
    fn a_skewed_clock_is_retried_and_named() {
        let (class, e) = classify("polling SQL instance i", &status(403, Some(SKEW_CODE)));
        assert_eq!(class, Class::Retry);
        assert!(e.is_retryable());
        assert!(e.message().contains("clock skew"), "{}", e.message());
        assert!(!e.message().contains("access_key"), "{}", e.message());
    }

    #[test]
    fn a_changed_table_needs_a_new_session_not_a_letter() {
        for code in ["TableModified", "DataVersionConflict"] {
            let (class, e) = classify("committing upload session u", &status(400, Some(code)));
            assert_eq!(class, Class::NewSession, "{code}");
            assert!(e.is_retryable(), "{code}");
            assert_eq!(e.kind, SinkErrorKind::Unavailable);
        }
    }

    #[test]
    fn refused_rows_are_a_row_level_refusal() {
        let (class, e) = classify("PUT block 3", &status(400, Some("MalformedDataStream")));
        assert_eq!(class, Class::RowsRefused);
        assert_eq!(e.kind, SinkErrorKind::Rejected);
        assert!(!e.is_retryable());
    }

    #[test]
    fn a_failed_statement_needs_a_fix_and_names_it() {
        let f = Failure::TaskFailed {
            statement: "create tabel x".into(),
            detail: "ODPS-0130161:[1,8] Parse exception".into(),
        };
        let (class, e) = classify("running SQL", &f);
        assert_eq!(class, Class::NeedsFix);
        assert!(!e.is_retryable());
        assert!(e.message().contains("create tabel x"), "{}", e.message());
        assert!(e.message().contains("ODPS-0130161"), "{}", e.message());
        // Any other 4xx, e.g. a missing table during an upload: a fix, not a retry.
        assert_eq!(class_of(&status(404, Some("NoSuchTable"))), Class::NeedsFix);
    }

    #[test]
    fn error_bodies_of_both_planes_are_read() {
        let xml = b"<?xml version=\"1.0\"?><Error><Code>NoSuchObject</Code><Message>Table not found - a.b</Message></Error>";
        assert_eq!(
            parse_error_body(xml),
            (Some("NoSuchObject".into()), "Table not found - a.b".into())
        );
        let json = br#"{"Code": "InvalidStatus", "Message": "session is closed"}"#;
        assert_eq!(
            parse_error_body(json),
            (Some("InvalidStatus".into()), "session is closed".into())
        );
        assert_eq!(
            parse_error_body(b"Bad Gateway"),
            (None, "Bad Gateway".into())
        );
    }
}
