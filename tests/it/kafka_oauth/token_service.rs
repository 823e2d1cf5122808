//! Fake token services over real HTTP: an OAuth 2.0 client-credentials endpoint issuing
//! HS256-signed JWTs, and Google's service-account (JWT bearer) token endpoint.

use base64::Engine;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

/// One request the service got.
#[derive(Clone, Debug)]
pub(crate) struct Request {
    pub(crate) method: String,
    pub(crate) path: String,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) body: String,
}

impl Request {
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// The answer to a request: (status, JSON body).
pub(crate) type Answer = Arc<dyn Fn(&Request) -> (u16, String) + Send + Sync>;

/// A running service.
pub(crate) struct TokenService {
    pub(crate) url: String,
    pub(crate) requests: Arc<Mutex<Vec<Request>>>,
}

impl TokenService {
    pub(crate) fn start(answer: Answer) -> TokenService {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/token", listener.local_addr().unwrap());
        let requests = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::clone(&requests);
        std::thread::spawn(move || {
            for mut s in listener.incoming().flatten() {
                let Some(req) = read_request(&mut s) else {
                    continue;
                };
                let (status, body) = answer(&req);
                seen.lock().unwrap().push(req);
                let _ = write!(
                    s,
                    "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
            }
        });
        TokenService { url, requests }
    }

    pub(crate) fn requests(&self) -> Vec<Request> {
        self.requests.lock().unwrap().clone()
    }
}

fn read_request(s: &mut std::net::TcpStream) -> Option<Request> {
    let mut r = BufReader::new(s.try_clone().ok()?);
    let mut line = String::new();
    r.read_line(&mut line).ok()?;
    let mut parts = line.split_whitespace();
    let (method, path) = (parts.next()?.to_string(), parts.next()?.to_string());
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        r.read_line(&mut h).ok()?;
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        let (k, v) = h.split_once(':')?;
        headers.push((k.trim().to_string(), v.trim().to_string()));
    }
    let len = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0usize);
    let mut body = vec![0u8; len];
    r.read_exact(&mut body).ok()?;
    Some(Request {
        method,
        path,
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    })
}

pub(crate) fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

pub(crate) fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

pub(crate) fn unb64(s: &str) -> Option<Vec<u8>> {
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(s)
        .ok()
}

/// An HS256 JWT of `claims` signed with `key`.
pub(crate) fn sign(key: &[u8], claims: &serde_json::Value) -> String {
    let input = format!(
        "{}.{}",
        b64(br#"{"alg":"HS256","typ":"JWT"}"#),
        b64(claims.to_string().as_bytes())
    );
    let k = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, key);
    let sig = ring::hmac::sign(&k, input.as_bytes());
    format!("{input}.{}", b64(sig.as_ref()))
}

/// The claims of an HS256 JWT signed with `key` and not expired, or why not.
pub(crate) fn verify(key: &[u8], token: &str) -> Result<serde_json::Value, String> {
    let (input, sig) = token.rsplit_once('.').ok_or("not a JWT")?;
    let sig = unb64(sig).ok_or("signature is not base64url")?;
    let k = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, key);
    ring::hmac::verify(&k, input.as_bytes(), &sig).map_err(|_| "bad signature")?;
    let payload = input.split('.').nth(1).ok_or("no payload")?;
    let claims: serde_json::Value =
        serde_json::from_slice(&unb64(payload).ok_or("payload is not base64url")?)
            .map_err(|e| e.to_string())?;
    if claims["exp"].as_u64().unwrap_or(0) <= now() {
        return Err("expired".into());
    }
    Ok(claims)
}
