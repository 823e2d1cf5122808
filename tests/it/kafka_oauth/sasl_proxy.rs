//! A Kafka front that checks SASL/OAUTHBEARER tokens, for a broker (tansu) that does not.
//!
//! Each client connection gets its own connection to the broker. Until the client has
//! authenticated, the front forwards only ApiVersions (tansu lists SaslHandshake and
//! SaslAuthenticate there), answers SaslHandshake (OAUTHBEARER only) and SaslAuthenticate
//! itself, checking the token with the test's verifier, and closes the connection on any other
//! request or on a refused token. Afterwards it forwards both ways, rewriting the broker's own
//! address in responses (Metadata, FindCoordinator) to the front's, so the client's every
//! connection comes through the front too.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

/// Checks a bearer token: the principal it stands for, or why it is refused.
pub(crate) type Verify = Arc<dyn Fn(&str) -> Result<String, String> + Send + Sync>;

/// What the front saw.
#[derive(Default, Debug)]
pub(crate) struct Seen {
    /// Principals of the tokens accepted, one per authenticated connection.
    pub(crate) accepted: Vec<String>,
    /// Why tokens were refused.
    pub(crate) refused: Vec<String>,
    /// Requests sent before authenticating (their API keys).
    pub(crate) unauthenticated: Vec<i16>,
}

/// A running front.
pub(crate) struct SaslProxy {
    pub(crate) addr: String,
    pub(crate) seen: Arc<Mutex<Seen>>,
}

impl SaslProxy {
    /// A front for the broker at `upstream` (`host:port`, as the broker advertises itself).
    pub(crate) fn start(upstream: &str, verify: Verify) -> SaslProxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(Seen::default()));
        let (host, up_port) = upstream.rsplit_once(':').unwrap();
        let up_port: u16 = up_port.parse().unwrap();
        let mut from = host.as_bytes().to_vec();
        from.extend_from_slice(&i32::from(up_port).to_be_bytes());
        let mut to = host.as_bytes().to_vec();
        to.extend_from_slice(&i32::from(port).to_be_bytes());
        let rewrite = Arc::new((from, to));
        let (upstream, seen2) = (upstream.to_string(), Arc::clone(&seen));
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                let (upstream, verify, seen, rewrite) = (
                    upstream.clone(),
                    Arc::clone(&verify),
                    Arc::clone(&seen2),
                    Arc::clone(&rewrite),
                );
                std::thread::spawn(move || {
                    let _ = serve(client, &upstream, &verify, &seen, &rewrite);
                });
            }
        });
        SaslProxy {
            addr: format!("{host}:{port}"),
            seen,
        }
    }
}

fn read_frame(s: &mut TcpStream) -> std::io::Result<Vec<u8>> {
    let mut len = [0u8; 4];
    s.read_exact(&mut len)?;
    let mut body = vec![0u8; i32::from_be_bytes(len).max(0) as usize];
    s.read_exact(&mut body)?;
    Ok(body)
}

fn write_frame(s: &mut TcpStream, body: &[u8]) -> std::io::Result<()> {
    let mut out = (body.len() as i32).to_be_bytes().to_vec();
    out.extend_from_slice(body);
    s.write_all(&out)
}

/// The request header v1 (api key, version, correlation id) and the body after the client id.
fn header(req: &[u8]) -> (i16, i16, [u8; 4], &[u8]) {
    let key = i16::from_be_bytes([req[0], req[1]]);
    let version = i16::from_be_bytes([req[2], req[3]]);
    let corr = [req[4], req[5], req[6], req[7]];
    let id_len = i16::from_be_bytes([req[8], req[9]]).max(0) as usize;
    (key, version, corr, &req[10 + id_len..])
}

/// The bearer token of an OAUTHBEARER client first message (RFC 7628):
/// `n,,\x01auth=Bearer <token>\x01…\x01\x01`.
pub(crate) fn bearer(msg: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(msg).ok()?;
    text.split('\x01')
        .find_map(|kv| kv.strip_prefix("auth=Bearer "))
        .map(str::to_string)
}

fn serve(
    mut client: TcpStream,
    upstream: &str,
    verify: &Verify,
    seen: &Mutex<Seen>,
    rewrite: &(Vec<u8>, Vec<u8>),
) -> std::io::Result<()> {
    let mut up = TcpStream::connect(upstream)?;
    loop {
        let req = read_frame(&mut client)?;
        let (key, version, corr, body) = header(&req);
        match key {
            18 => {
                write_frame(&mut up, &req)?;
                let resp = read_frame(&mut up)?;
                write_frame(&mut client, &resp)?;
            }
            17 => {
                let n = i16::from_be_bytes([body[0], body[1]]).max(0) as usize;
                let mechanism = &body[2..2 + n];
                let mut resp = corr.to_vec();
                let ok = mechanism == b"OAUTHBEARER";
                resp.extend_from_slice(&(if ok { 0i16 } else { 33 }).to_be_bytes());
                resp.extend_from_slice(&1i32.to_be_bytes());
                resp.extend_from_slice(&11i16.to_be_bytes());
                resp.extend_from_slice(b"OAUTHBEARER");
                write_frame(&mut client, &resp)?;
                if !ok {
                    return Ok(());
                }
            }
            36 if version <= 1 => {
                let n = i32::from_be_bytes([body[0], body[1], body[2], body[3]]).max(0) as usize;
                let verdict = bearer(&body[4..4 + n])
                    .ok_or_else(|| "no bearer token in the message".to_string())
                    .and_then(|t| verify(&t));
                let mut resp = corr.to_vec();
                match &verdict {
                    Ok(p) => {
                        seen.lock().unwrap().accepted.push(p.clone());
                        resp.extend_from_slice(&0i16.to_be_bytes());
                        resp.extend_from_slice(&(-1i16).to_be_bytes());
                    }
                    Err(why) => {
                        seen.lock().unwrap().refused.push(why.clone());
                        resp.extend_from_slice(&58i16.to_be_bytes());
                        resp.extend_from_slice(&(why.len() as i16).to_be_bytes());
                        resp.extend_from_slice(why.as_bytes());
                    }
                }
                resp.extend_from_slice(&0i32.to_be_bytes());
                if version == 1 {
                    resp.extend_from_slice(&0i64.to_be_bytes());
                }
                write_frame(&mut client, &resp)?;
                if verdict.is_err() {
                    return Ok(());
                }
                return pump(client, up, rewrite);
            }
            other => {
                seen.lock().unwrap().unauthenticated.push(other);
                return Ok(());
            }
        }
    }
}

/// Forwards both ways once authenticated, the broker's address in responses rewritten.
fn pump(client: TcpStream, up: TcpStream, rewrite: &(Vec<u8>, Vec<u8>)) -> std::io::Result<()> {
    let (mut c_read, mut u_write) = (client.try_clone()?, up.try_clone()?);
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut c_read, &mut u_write);
        let _ = u_write.shutdown(std::net::Shutdown::Both);
    });
    let (mut up, mut client) = (up, client);
    let (from, to) = rewrite;
    loop {
        let mut resp = read_frame(&mut up)?;
        let mut i = 0;
        while i + from.len() <= resp.len() {
            if resp[i..i + from.len()] == from[..] {
                resp[i..i + from.len()].copy_from_slice(to);
                i += from.len();
            } else {
                i += 1;
            }
        }
        if write_frame(&mut client, &resp).is_err() {
            let _ = client.shutdown(std::net::Shutdown::Both);
            return Ok(());
        }
    }
}
