//! Probes answer whatever other clients do: the HTTP port is flooded with
//! more stalled connections than `server.max_connections`, from one peer and from several
//! loopback addresses, each having sent one byte; `/healthz` and `/readyz` still answer every
//! time. The timeouts of the stalled clients are an hour here, so nothing but the admission
//! policy (`src/server/slots.rs`) can make room for the probes.

use observation_publisher::config::Server;
use observation_publisher::server::{serve, Health};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio_util::sync::CancellationToken;

/// A client from `from` that connects, sends one byte and stalls.
async fn stalled(from: Ipv4Addr, to: SocketAddr) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind(SocketAddr::new(IpAddr::V4(from), 0)).unwrap();
    let mut s = socket.connect(to).await.unwrap();
    s.write_all(b"G").await.unwrap();
    s
}

/// One probe (a fresh connection, like kubelet's), from `from`: the status line, or why not.
async fn probe(from: Ipv4Addr, to: SocketAddr, path: &str) -> Result<String, String> {
    let attempt = async {
        let socket = TcpSocket::new_v4().map_err(|e| e.to_string())?;
        socket
            .bind(SocketAddr::new(IpAddr::V4(from), 0))
            .map_err(|e| e.to_string())?;
        let mut s = socket.connect(to).await.map_err(|e| e.to_string())?;
        s.write_all(
            format!("GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .await
        .map_err(|e| e.to_string())?;
        let mut out = Vec::new();
        s.read_to_end(&mut out).await.map_err(|e| e.to_string())?;
        let text = String::from_utf8_lossy(&out).into_owned();
        Ok(text.lines().next().unwrap_or_default().to_string())
    };
    // Generous: an answer takes milliseconds, and the stalled clients would hold their slots
    // for an hour.
    tokio::time::timeout(Duration::from_secs(20), attempt)
        .await
        .map_err(|_| format!("{path}: no answer"))?
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probes_answer_while_the_port_is_flooded_by_stalled_clients() {
    let cfg = Server {
        listen: "127.0.0.1:0".into(),
        header_read_timeout: Duration::from_secs(3600),
        idle_timeout: Duration::from_secs(3600),
        max_connections: Server::MAX_CONNECTIONS,
        max_connections_per_peer: Server::MAX_CONNECTIONS_PER_PEER,
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let health = Health::new();
    health.joined.store(true, Ordering::Relaxed);
    health.topic_exists.store(true, Ordering::Relaxed);
    let stop = CancellationToken::new();
    let server = tokio::spawn(serve(
        listener,
        Arc::clone(&health),
        Arc::new(|| "m 1\n".to_string()),
        stop.clone(),
        cfg,
    ));

    // More stalled clients than max_connections from 127.0.0.1 (the probes' own address), then
    // 8 from each of 127.0.0.2 … 127.0.0.9. (Not many more: a server that stops accepting
    // leaves the rest in the kernel's listen backlog of 128, and a client past
    // that cannot even connect.)
    let local = Ipv4Addr::new(127, 0, 0, 1);
    let mut flood = Vec::new();
    for _ in 0..Server::MAX_CONNECTIONS + 16 {
        flood.push(stalled(local, addr).await);
    }
    for n in 2..=5 {
        for _ in 0..8 {
            flood.push(stalled(Ipv4Addr::new(127, 0, 0, n), addr).await);
        }
    }

    let mut answers = Vec::new();
    for round in 0..6 {
        // Probes from the flooding address and from one that never connected before.
        let from = if round % 2 == 0 {
            local
        } else {
            Ipv4Addr::new(127, 0, 0, 100)
        };
        for path in ["/healthz", "/readyz"] {
            answers.push((path, probe(from, addr, path).await));
        }
        // The flood goes on between rounds.
        flood.push(stalled(local, addr).await);
        flood.push(stalled(Ipv4Addr::new(127, 0, 0, 2 + round as u8), addr).await);
    }
    for (path, a) in &answers {
        assert_eq!(a.as_deref(), Ok("HTTP/1.1 200 OK"), "{path}: {answers:?}");
    }
    assert!(health.http_connections_peak.load(Ordering::Relaxed) <= Server::MAX_CONNECTIONS);
    assert!(health.http_connections_evicted.load(Ordering::Relaxed) > 0);
    stop.cancel();
    server.await.unwrap().unwrap();
    drop(flood);
}
