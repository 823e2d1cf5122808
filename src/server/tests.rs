//! The HTTP port's limits, over real sockets: silent and slow clients are closed by the configured
//! timeouts (small here), and no more than `max_connections` are served at once. A client that is
//! never closed fails its test after a generous socket timeout instead of hanging it.

use super::*;
use crate::config::Server;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

fn cfg(header_ms: u64, idle_ms: u64, max_connections: usize) -> Server {
    Server {
        listen: "127.0.0.1:0".into(),
        header_read_timeout: Duration::from_millis(header_ms),
        idle_timeout: Duration::from_millis(idle_ms),
        max_connections,
        max_connections_per_peer: max_connections,
    }
}

struct Running {
    addr: SocketAddr,
    health: Arc<Health>,
    stop: CancellationToken,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop.cancel();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn start(c: Server) -> Running {
    let std_listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    std_listener.set_nonblocking(true).unwrap();
    let addr = std_listener.local_addr().unwrap();
    let health = Health::new();
    let stop = CancellationToken::new();
    let (h, s) = (Arc::clone(&health), stop.clone());
    let thread = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(std_listener).unwrap();
            serve(listener, h, Arc::new(|| "m 1\n".to_string()), s, c)
                .await
                .unwrap();
        });
    });
    Running {
        addr,
        health,
        stop,
        thread: Some(thread),
    }
}

/// Whether the server closes `s` (EOF or reset) before the socket's 30 s read timeout.
fn closed_by_server(s: &mut TcpStream) -> bool {
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut buf = [0u8; 1024];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
            Err(_) => return false,
        }
    }
}

fn get_healthz(addr: SocketAddr) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.write_all(b"GET /healthz HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

#[test]
fn a_client_that_sends_nothing_is_closed_after_the_header_read_timeout() {
    let srv = start(cfg(200, 3_600_000, 8));
    let mut silent = TcpStream::connect(srv.addr).unwrap();
    assert!(closed_by_server(&mut silent), "a silent client is closed");
    let mut slow = TcpStream::connect(srv.addr).unwrap();
    slow.write_all(b"GET /healthz HTTP/1.1\r\nHost: t\r\n")
        .unwrap();
    assert!(closed_by_server(&mut slow), "half a header is closed too");
    let ok = get_healthz(srv.addr);
    assert!(
        ok.starts_with("HTTP/1.1 200") && ok.ends_with("ok\n"),
        "{ok}"
    );
}

#[test]
fn a_silent_connection_is_closed_after_the_idle_timeout() {
    let srv = start(cfg(3_600_000, 200, 8));
    let mut silent = TcpStream::connect(srv.addr).unwrap();
    assert!(closed_by_server(&mut silent), "closed by the idle timer");
    assert!(get_healthz(srv.addr).starts_with("HTTP/1.1 200"));
}

#[test]
fn no_more_than_max_connections_are_served_at_once() {
    let srv = start(cfg(300, 3_600_000, 2));
    // Five silent clients connect at once: each new one closes the oldest idle one once two are
    // open, and the last two are closed by the header timeout.
    let mut clients: Vec<TcpStream> = (0..5)
        .map(|_| TcpStream::connect(srv.addr).unwrap())
        .collect();
    for (i, c) in clients.iter_mut().enumerate() {
        assert!(closed_by_server(c), "client {i} is served and closed");
    }
    assert!(get_healthz(srv.addr).starts_with("HTTP/1.1 200"));
    assert_eq!(
        srv.health.http_connections_peak.load(Ordering::Relaxed),
        2,
        "at most max_connections were open at once, and the limit was reached"
    );
}
