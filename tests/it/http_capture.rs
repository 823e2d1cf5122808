//! A capturing HTTP/1.1 server on 127.0.0.1 standing in for endpoints that cannot be reached
//! from here (Arize's `pandas_arrow`, an OAuth token endpoint): it records every request
//! (method, path, headers as received, body) and answers from a script (a status with extra
//! headers and a body, or closing the connection without an answer); once the script is used up
//! it answers with its default reply (200, empty, unless set). Blocking std I/O on its own
//! threads, so the Python SDK and the code under test can both talk to it.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

/// One captured request.
#[derive(Debug, Clone)]
pub(crate) struct Captured {
    pub(crate) method: String,
    pub(crate) path: String,
    /// Header names lower-cased, in the order received.
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) body: Vec<u8>,
    /// The status it was answered with (`None`: the connection was dropped).
    pub(crate) answered: Option<u16>,
}

impl Captured {
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// What to do with the next request.
#[derive(Debug, Clone)]
pub(crate) enum Reply {
    /// Answer with this status and these extra headers.
    Status(u16, Vec<(&'static str, String)>),
    /// Answer with this status, extra headers and body.
    Body(u16, Vec<(&'static str, String)>, Vec<u8>),
    /// Read the request, then close the connection without answering.
    Drop,
    /// Answer 200 once the flag is set (a destination that hangs until the test releases it).
    Held(Arc<std::sync::atomic::AtomicBool>),
}

struct State {
    captured: Vec<Captured>,
    script: VecDeque<Reply>,
    default: Reply,
}

/// The server; it runs until the process ends (tests are short-lived).
#[derive(Clone)]
pub(crate) struct Server {
    pub(crate) port: u16,
    state: Arc<Mutex<State>>,
}

impl Server {
    pub(crate) fn start() -> Server {
        Server::answering(Reply::Status(200, Vec::new()))
    }

    /// A server that answers `default` whenever its script is empty.
    pub(crate) fn answering(default: Reply) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let state = Arc::new(Mutex::new(State {
            captured: Vec::new(),
            script: VecDeque::new(),
            default,
        }));
        let s = Arc::clone(&state);
        std::thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                let s = Arc::clone(&s);
                std::thread::spawn(move || serve(conn, &s));
            }
        });
        Server { port, state }
    }

    /// `http://127.0.0.1:PORT/v1`, the `uri` to give the SDK and the sink.
    pub(crate) fn uri(&self) -> String {
        format!("http://127.0.0.1:{}/v1", self.port)
    }

    /// Queues replies for the next requests.
    pub(crate) fn script(&self, replies: impl IntoIterator<Item = Reply>) {
        self.state.lock().unwrap().script.extend(replies);
    }

    /// Forgets the replies not used yet: from now on every request is answered 200.
    pub(crate) fn unscript(&self) {
        self.state.lock().unwrap().script.clear();
    }

    /// How many requests were captured so far (without taking them).
    pub(crate) fn count(&self) -> usize {
        self.state.lock().unwrap().captured.len()
    }

    /// Takes the requests captured so far.
    pub(crate) fn take(&self) -> Vec<Captured> {
        std::mem::take(&mut self.state.lock().unwrap().captured)
    }

    /// The requests captured so far (kept).
    pub(crate) fn seen(&self) -> Vec<Captured> {
        self.state.lock().unwrap().captured.clone()
    }
}

fn serve(conn: TcpStream, state: &Mutex<State>) {
    let mut out = conn.try_clone().unwrap();
    let mut r = BufReader::new(conn);
    loop {
        let mut line = String::new();
        if r.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let mut parts = line.split_whitespace();
        let (method, path) = (
            parts.next().unwrap_or_default().to_string(),
            parts.next().unwrap_or_default().to_string(),
        );
        let mut headers = Vec::new();
        loop {
            let mut h = String::new();
            if r.read_line(&mut h).unwrap_or(0) == 0 {
                return;
            }
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            let (k, v) = h.split_once(':').unwrap();
            headers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
        }
        let len: usize = headers
            .iter()
            .find(|(k, _)| k == "content-length")
            .map_or(0, |(_, v)| v.parse().unwrap());
        let mut body = vec![0; len];
        if r.read_exact(&mut body).is_err() {
            return;
        }
        let reply = {
            let mut st = state.lock().unwrap();
            let default = st.default.clone();
            let reply = st.script.pop_front().unwrap_or(default);
            st.captured.push(Captured {
                method,
                path,
                headers,
                body,
                answered: match &reply {
                    Reply::Status(code, _) | Reply::Body(code, _, _) => Some(*code),
                    Reply::Held(_) => Some(200),
                    Reply::Drop => None,
                },
            });
            reply
        };
        match reply {
            Reply::Drop => return,
            Reply::Status(code, extra) => {
                if answer(&mut out, code, &extra, &[]).is_err() {
                    return;
                }
            }
            Reply::Body(code, extra, body) => {
                if answer(&mut out, code, &extra, &body).is_err() {
                    return;
                }
            }
            Reply::Held(released) => {
                while !released.load(std::sync::atomic::Ordering::SeqCst) {
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                if answer(&mut out, 200, &[], &[]).is_err() {
                    return;
                }
            }
        }
    }
}

fn answer(
    out: &mut TcpStream,
    code: u16,
    extra: &[(&'static str, String)],
    body: &[u8],
) -> std::io::Result<()> {
    let mut resp = format!(
        "HTTP/1.1 {code} Scripted\r\ncontent-length: {}\r\n",
        body.len()
    );
    for (k, v) in extra {
        resp.push_str(&format!("{k}: {v}\r\n"));
    }
    resp.push_str("\r\n");
    out.write_all(resp.as_bytes())?;
    out.write_all(body)
}
