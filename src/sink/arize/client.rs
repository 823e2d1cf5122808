//! The HTTP side: one `POST {uri}/pandas_arrow` per request, with the headers arize 7.10.2
//! sends, and the classification of the answer ([`classify`], pure).
//!
//! Headers (as the SDK's `Client.__init__` + `log` + `_post_file` set them): `authorization`
//! (the raw API key), `space` (the space key), `sync: 0`, `number-of-rows`, `sdk-language`,
//! `language-version`, `sdk-version`, `schema` (base64 of the `public.Schema` protobuf). No
//! `content-type`, no compression. `sdk-language` says `rust`; `sdk-version` names the SDK
//! version whose wire format is spoken (7.10.2), `language-version` the Rust version the
//! publisher requires.

use crate::metrics::names;
use bytes::Bytes;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use std::time::{Duration, Instant, SystemTime};

/// The SDK version whose requests the sink reproduces.
pub const SDK_VERSION: &str = "7.10.2";
/// Longest Retry-After honoured; a longer one is cut to this (the batch is then retried again).
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(600);

/// What an answer (or its absence) means for the request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// 2xx: acknowledged.
    Acked,
    /// 413: split the request and send the halves.
    TooLarge,
    /// 429: wait (the server's Retry-After, if it gave one) and retry.
    Throttled(Option<Duration>),
    /// 5xx, 408, a timeout or a connection error: retry with backoff.
    Transient(String),
    /// 401, 403 and any other unexpected status: retrying at once cannot help; the batch waits
    /// until the cause is fixed (the runtime retries it every 30 s, never drops it).
    NeedsFix(String),
}

/// Classifies an HTTP status (with its Retry-After header, if any, read at `now`).
pub fn classify(status: u16, retry_after: Option<&str>, now: SystemTime) -> Outcome {
    match status {
        200..=299 => Outcome::Acked,
        413 => Outcome::TooLarge,
        429 => Outcome::Throttled(retry_after.and_then(|v| parse_retry_after(v, now))),
        408 | 500..=599 => Outcome::Transient(format!("Arize answered HTTP {status}")),
        401 | 403 => Outcome::NeedsFix(format!(
            "Arize refused the credentials (HTTP {status}): check the ARIZE sink's api_key and space_key"
        )),
        _ => Outcome::NeedsFix(format!("Arize answered HTTP {status}")),
    }
}

/// Retry-After as delay-seconds or an HTTP date, capped at [`MAX_RETRY_AFTER`].
pub fn parse_retry_after(v: &str, now: SystemTime) -> Option<Duration> {
    let v = v.trim();
    let d = match v.parse::<u64>() {
        Ok(s) => Duration::from_secs(s),
        Err(_) => httpdate::parse_http_date(v)
            .ok()?
            .duration_since(now)
            .unwrap_or(Duration::ZERO),
    };
    Some(d.min(MAX_RETRY_AFTER))
}

/// Bounded label value for an outcome (metric label `status`).
pub fn status_label(status: Option<u16>, timeout: bool) -> &'static str {
    match status {
        Some(200..=299) => "2xx",
        Some(401) => "401",
        Some(403) => "403",
        Some(413) => "413",
        Some(429) => "429",
        Some(400..=499) => "4xx",
        Some(500..=599) => "5xx",
        Some(_) => "other",
        None if timeout => "timeout",
        None => "connection",
    }
}

/// Every value of the `status` label, for describing metrics up front.
pub const STATUS_LABELS: [&str; 10] = [
    "2xx",
    "401",
    "403",
    "413",
    "429",
    "4xx",
    "5xx",
    "other",
    "timeout",
    "connection",
];

/// Connection settings. `Debug` shows the keys redacted.
#[derive(Clone)]
pub struct ClientOptions {
    /// Base URI (`…/v1`); requests go to `{uri}/pandas_arrow`.
    pub uri: String,
    /// API key (secret).
    pub api_key: String,
    /// Space key (secret; empty when the sink names its space by ID).
    pub space_key: String,
    /// Space ID (empty when the sink names its space by key).
    pub space_id: String,
    /// Whole-request timeout.
    pub request_timeout: Duration,
    /// Connection timeout.
    pub connect_timeout: Duration,
}

impl std::fmt::Debug for ClientOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientOptions")
            .field("uri", &self.uri)
            .field("api_key", &crate::redact::REDACTED)
            .field("space_key", &crate::redact::REDACTED)
            .field("space_id", &self.space_id)
            .field("request_timeout", &self.request_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .finish()
    }
}

/// A `reqwest` client bound to one Arize endpoint and one set of credentials.
#[derive(Debug, Clone)]
pub struct Client {
    http: reqwest::Client,
    url: String,
    headers: HeaderMap,
    /// Hides the keys in an answer's body before it is shown.
    scrubber: crate::redact::Scrubber,
}

/// Most bytes of a refusing answer's body shown in its error.
pub const MAX_SHOWN_BODY: usize = 1024;

/// The error of a refusing answer, with what the body says (at most [`MAX_SHOWN_BODY`] bytes,
/// secrets scrubbed): "HTTP 400" alone does not say what to fix.
pub fn with_body(outcome: Outcome, body: &[u8], scrubber: &crate::redact::Scrubber) -> Outcome {
    let Outcome::NeedsFix(msg) = outcome else {
        return outcome;
    };
    let text = String::from_utf8_lossy(&body[..body.len().min(MAX_SHOWN_BODY)]);
    let text = text.trim();
    if text.is_empty() {
        return Outcome::NeedsFix(msg);
    }
    let cut = if body.len() > MAX_SHOWN_BODY {
        " …"
    } else {
        ""
    };
    Outcome::NeedsFix(format!("{msg}: {}{cut}", scrubber.scrub(text)))
}

/// The error of a redirect, which is not followed: it names where it points (credentials in
/// the address stripped).
pub fn redirect(status: u16, location: Option<&str>) -> Outcome {
    let to = location.map_or_else(
        || "no Location".to_string(),
        |l| crate::redact::strip_userinfo(l).into_owned(),
    );
    Outcome::NeedsFix(format!(
        "Arize answered HTTP {status} redirecting to {to}; redirects are not followed: set the \
         ARIZE sink's uri to the address that answers"
    ))
}

/// The client could not be built (a header value Arize's keys cannot hold, a TLS set-up error).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ClientError(String);

impl Client {
    /// A client for `opts`; `schema_header`, when given, is the `schema` header of every
    /// request (see [`super::schema::SchemaCarrier`]).
    pub fn new(opts: &ClientOptions, schema_header: Option<&str>) -> Result<Self, ClientError> {
        crate::sink::install_crypto_provider();
        let http = reqwest::Client::builder()
            .timeout(opts.request_timeout)
            .connect_timeout(opts.connect_timeout)
            .user_agent(concat!("observation-publisher/", env!("CARGO_PKG_VERSION")))
            // A followed 301/302 turns the POST into a body-less GET whose 2xx would count as
            // acknowledged, and a cross-host redirect would carry the keys elsewhere: a
            // redirect is an answer to fix (see `classify`).
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| ClientError(format!("HTTP client: {e}")))?;
        let mut headers = HeaderMap::new();
        let secret = |what: &str, v: &str| {
            let mut h = HeaderValue::from_str(v).map_err(|_| {
                ClientError(format!(
                    "the ARIZE sink's {what} holds characters an HTTP header cannot carry"
                ))
            })?;
            h.set_sensitive(true);
            Ok::<_, ClientError>(h)
        };
        headers.insert("authorization", secret("api_key", &opts.api_key)?);
        if !opts.space_key.is_empty() {
            headers.insert("space", secret("space_key", &opts.space_key)?);
        }
        if !opts.space_id.is_empty() {
            // Arize's current SDK sends the ID under both names (`space_id` is the older one,
            // which proxies that drop underscored headers lose).
            let id = HeaderValue::from_str(&opts.space_id).map_err(|_| {
                ClientError(
                    "the ARIZE sink's space_id holds characters an HTTP header cannot carry".into(),
                )
            })?;
            headers.insert("arize-space-id", id.clone());
            headers.insert("space_id", id);
        }
        headers.insert("sdk-language", HeaderValue::from_static("rust"));
        headers.insert(
            "language-version",
            HeaderValue::from_static(env!("CARGO_PKG_RUST_VERSION")),
        );
        headers.insert("sdk-version", HeaderValue::from_static(SDK_VERSION));
        headers.insert("sync", HeaderValue::from_static("0"));
        if let Some(schema) = schema_header {
            headers.insert(
                HeaderName::from_static("schema"),
                HeaderValue::from_str(schema)
                    .map_err(|e| ClientError(format!("schema header: {e}")))?,
            );
        }
        Ok(Client {
            http,
            url: format!("{}/pandas_arrow", opts.uri.trim_end_matches('/')),
            headers,
            scrubber: crate::redact::Scrubber::new([opts.api_key.clone(), opts.space_key.clone()]),
        })
    }

    /// Posts one body of `rows` rows and classifies the answer. Records the request latency and
    /// the status class.
    pub async fn post(&self, body: Bytes, rows: usize) -> Outcome {
        let started = Instant::now();
        let sent = self
            .http
            .post(&self.url)
            .headers(self.headers.clone())
            .header("number-of-rows", rows)
            .body(body)
            .send()
            .await;
        let (outcome, label) = match sent {
            Ok(mut resp) => {
                let status = resp.status().as_u16();
                let header = |name| {
                    resp.headers()
                        .get(name)
                        .and_then(|v: &HeaderValue| v.to_str().ok())
                        .map(str::to_owned)
                };
                let retry_after = header(reqwest::header::RETRY_AFTER);
                let location = header(reqwest::header::LOCATION);
                let outcome = if (300..400).contains(&status) {
                    redirect(status, location.as_deref())
                } else {
                    classify(status, retry_after.as_deref(), SystemTime::now())
                };
                // Read the answer (to the end, so the connection can be reused; a refusal's
                // body is kept up to what is shown).
                let mut body = Vec::new();
                while let Ok(Some(chunk)) = resp.chunk().await {
                    if body.len() < MAX_SHOWN_BODY + 1 {
                        body.extend_from_slice(&chunk[..chunk.len().min(MAX_SHOWN_BODY + 1)]);
                    }
                }
                let outcome = if (400..500).contains(&status) {
                    with_body(outcome, &body, &self.scrubber)
                } else {
                    outcome
                };
                (outcome, status_label(Some(status), false))
            }
            Err(e) => {
                let label = status_label(None, e.is_timeout());
                let what = if e.is_timeout() {
                    "timed out"
                } else {
                    "failed"
                };
                // reqwest's message names the URL, never the headers.
                (
                    Outcome::Transient(format!("request to Arize {what}: {e}")),
                    label,
                )
            }
        };
        metrics::histogram!(names::arize::REQUEST_SECONDS).record(started.elapsed().as_secs_f64());
        metrics::counter!(names::arize::RESPONSES_TOTAL, names::STATUS => label).increment(1);
        outcome
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
    }

    #[test]
    fn statuses_map_to_what_the_sink_does() {
        let now = at(0);
        for s in [200, 201, 202, 204, 299] {
            assert_eq!(classify(s, None, now), Outcome::Acked, "{s}");
        }
        assert_eq!(classify(413, None, now), Outcome::TooLarge);
        assert_eq!(classify(429, None, now), Outcome::Throttled(None));
        assert_eq!(
            classify(429, Some("7"), now),
            Outcome::Throttled(Some(Duration::from_secs(7)))
        );
        for s in [408, 500, 502, 503, 504, 599] {
            assert!(
                matches!(classify(s, None, now), Outcome::Transient(_)),
                "{s}"
            );
        }
        for s in [400, 401, 403, 404, 405, 409, 422, 301, 304, 100] {
            assert!(
                matches!(classify(s, None, now), Outcome::NeedsFix(_)),
                "{s}"
            );
        }
        let Outcome::NeedsFix(m) = classify(401, None, now) else {
            unreachable!()
        };
        assert!(m.contains("api_key and space_key"), "{m}");
    }

    #[test]
    fn retry_after_reads_seconds_and_http_dates_and_is_capped() {
        let now = at(1_445_412_480); // Wed, 21 Oct 2015 07:28:00 GMT
        assert_eq!(
            parse_retry_after(" 120 ", now),
            Some(Duration::from_secs(120))
        );
        assert_eq!(
            parse_retry_after("Wed, 21 Oct 2015 07:28:30 GMT", now),
            Some(Duration::from_secs(30))
        );
        // A date in the past: retry now.
        assert_eq!(
            parse_retry_after("Wed, 21 Oct 2015 07:27:00 GMT", now),
            Some(Duration::ZERO)
        );
        assert_eq!(parse_retry_after("86400", now), Some(MAX_RETRY_AFTER));
        assert_eq!(parse_retry_after("soon", now), None);
        assert_eq!(parse_retry_after("-3", now), None);
    }

    #[test]
    fn a_refusal_shows_its_body_bounded_and_scrubbed_and_a_redirect_its_location() {
        let scrub = crate::redact::Scrubber::new(["planted-api-KEY".to_string()]);
        let refused = classify(400, None, at(0));
        let Outcome::NeedsFix(m) = with_body(
            refused.clone(),
            b"{\"error\": \"column x missing\", \"key\": \"planted-api-KEY\"}",
            &scrub,
        ) else {
            unreachable!()
        };
        assert!(
            m.contains("HTTP 400") && m.contains("column x missing"),
            "{m}"
        );
        assert!(!m.contains("planted-api-KEY"), "{m}");
        let long = vec![b'a'; 10 * MAX_SHOWN_BODY];
        let Outcome::NeedsFix(m) = with_body(refused.clone(), &long, &scrub) else {
            unreachable!()
        };
        assert!(
            m.len() < MAX_SHOWN_BODY + 100 && m.ends_with(" …"),
            "{}",
            m.len()
        );
        assert_eq!(with_body(refused.clone(), b"  ", &scrub), refused);
        // Only refusals carry a body.
        assert_eq!(with_body(Outcome::Acked, b"x", &scrub), Outcome::Acked);

        for s in [301, 302, 307, 308] {
            let Outcome::NeedsFix(m) = redirect(s, Some("https://u:pw@other.example/v1")) else {
                unreachable!()
            };
            assert!(m.contains(&format!("HTTP {s}")), "{m}");
            assert!(m.contains("other.example/v1") && !m.contains("pw"), "{m}");
        }
        assert!(matches!(redirect(302, None), Outcome::NeedsFix(m) if m.contains("no Location")));
    }

    #[test]
    fn debug_of_the_options_hides_the_keys() {
        let o = ClientOptions {
            uri: "http://arize.test/v1".into(),
            api_key: "planted-api-KEY".into(),
            space_key: "planted-space-KEY".into(),
            space_id: String::new(),
            request_timeout: Duration::from_secs(1),
            connect_timeout: Duration::from_secs(1),
        };
        let d = format!("{o:?} {o:#?}");
        assert!(!d.contains("planted-"), "{d}");
        assert!(d.contains("<redacted>") && d.contains("arize.test"), "{d}");
        let c = Client::new(&o, Some("c2NoZW1h")).unwrap();
        let d = format!("{c:?}");
        assert!(!d.contains("planted-"), "{d}");
    }

    /// The space as Arize's current SDK names it: by ID under `arize-space-id` and `space_id`,
    /// by the deprecated key under `space`; the keys are sensitive header values.
    #[test]
    fn the_space_is_sent_by_id_or_by_key() {
        let client = |space_key: &str, space_id: &str| {
            let o = ClientOptions {
                uri: "http://arize.test/v1".into(),
                api_key: "api-KEY".into(),
                space_key: space_key.into(),
                space_id: space_id.into(),
                request_timeout: Duration::from_secs(1),
                connect_timeout: Duration::from_secs(1),
            };
            Client::new(&o, None).unwrap().headers
        };
        let names = |h: &HeaderMap| {
            let mut n: Vec<String> = (h.keys().map(|k| k.as_str().to_string()))
                .filter(|k| k.contains("space"))
                .collect();
            n.sort_unstable();
            n
        };
        let by_id = client("", "U3BhY2U6MTIz");
        assert_eq!(names(&by_id), ["arize-space-id", "space_id"]);
        assert_eq!(by_id["arize-space-id"], "U3BhY2U6MTIz");
        assert_eq!(by_id["space_id"], "U3BhY2U6MTIz");
        let by_key = client("space-KEY", "");
        assert_eq!(names(&by_key), ["space"]);
        assert!(by_key["space"].is_sensitive() && by_key["authorization"].is_sensitive());
        assert_eq!(
            names(&client("space-KEY", "U3BhY2U6MTIz")),
            ["arize-space-id", "space", "space_id"]
        );
    }

    #[test]
    fn status_labels_are_bounded() {
        for (s, t) in [
            (Some(200), false),
            (Some(401), false),
            (Some(403), false),
            (Some(413), false),
            (Some(429), false),
            (Some(404), false),
            (Some(503), false),
            (Some(302), false),
            (None, true),
            (None, false),
        ] {
            assert!(STATUS_LABELS.contains(&status_label(s, t)));
        }
    }
}
