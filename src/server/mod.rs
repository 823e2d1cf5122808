//! The HTTP port: Prometheus text at `/metrics`, liveness at `/healthz`, readiness at `/readyz`.
//!
//! Liveness means the process serves requests. Readiness means the consumer has joined its group
//! (an empty assignment counts, so extra replicas are ready), the topic exists, and every sink
//! and the dead-letter target are healthy; `/readyz` lists what is not.
//!
//! The port is bounded (`server` section): a header-read timeout, an idle timeout and a
//! connection limit, so slow or silent clients cannot pile up on the runtime the sinks share.

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

/// Readiness conditions, set by the stages.
#[derive(Debug, Default)]
pub struct Health {
    /// The consumer joined its group (first assignment seen, possibly empty).
    pub joined: AtomicBool,
    /// The source topic exists.
    pub topic_exists: AtomicBool,
    /// Every sink's last write succeeded (or none was attempted yet).
    pub sinks_ok: AtomicBool,
    /// The dead-letter target is usable.
    pub dead_letter_ok: AtomicBool,
    /// Every sink's connection reports itself healthy (BigQuery writer health).
    pub sink_streams_ok: AtomicBool,
    /// HTTP connections open now.
    pub http_connections: AtomicUsize,
    /// Most HTTP connections ever open at once (never above `server.max_connections`).
    pub http_connections_peak: AtomicUsize,
}

impl Health {
    /// A fresh state: nothing ready yet, sinks and dead letters presumed healthy.
    pub fn new() -> Arc<Self> {
        let h = Health::default();
        h.sinks_ok.store(true, Ordering::Relaxed);
        h.dead_letter_ok.store(true, Ordering::Relaxed);
        h.sink_streams_ok.store(true, Ordering::Relaxed);
        Arc::new(h)
    }

    /// The conditions that are not met (empty = ready).
    pub fn not_ready(&self) -> Vec<&'static str> {
        let mut v = Vec::new();
        if !self.joined.load(Ordering::Relaxed) {
            v.push("consumer has not joined its group");
        }
        if !self.topic_exists.load(Ordering::Relaxed) {
            v.push("source topic does not exist (yet)");
        }
        if !self.sinks_ok.load(Ordering::Relaxed) {
            v.push("a sink is failing");
        }
        if !self.sink_streams_ok.load(Ordering::Relaxed) {
            v.push("a sink cannot reach its destination");
        }
        if !self.dead_letter_ok.load(Ordering::Relaxed) {
            v.push("dead-letter target is not usable");
        }
        v
    }
}

#[derive(Clone)]
struct AppState {
    health: Arc<Health>,
    render: Arc<dyn Fn() -> String + Send + Sync>,
}

/// Serves the three endpoints on `listener` until `shutdown` is cancelled, within the limits of
/// `cfg` (`server` section):
/// - at most `max_connections` connections are served at once: a permit is taken *before*
///   accepting, so further clients wait in the kernel's listen backlog;
/// - a client has `header_read_timeout` to send a request's headers (hyper's timer, counted from
///   when the server starts waiting: a new connection or the previous response), then the
///   connection is closed;
/// - a connection on which no byte moves either way for `idle_timeout` is closed ([`IdleTimeout`]).
///
/// `render` produces the Prometheus text. Accept errors (out of file descriptors, a client gone
/// before it was accepted) are logged and retried; the port is never given up.
pub async fn serve(
    listener: tokio::net::TcpListener,
    health: Arc<Health>,
    render: Arc<dyn Fn() -> String + Send + Sync>,
    shutdown: CancellationToken,
    cfg: crate::config::Server,
) -> std::io::Result<()> {
    let app = Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .with_state(AppState {
            health: Arc::clone(&health),
            render,
        });
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(cfg.header_read_timeout)
        .keep_alive(true);
    let permits = Arc::new(Semaphore::new(cfg.max_connections.max(1)));
    loop {
        let permit = tokio::select! {
            () = shutdown.cancelled() => return Ok(()),
            p = Arc::clone(&permits).acquire_owned() => p.expect("the semaphore is never closed"),
        };
        let stream = tokio::select! {
            () = shutdown.cancelled() => return Ok(()),
            r = listener.accept() => match r {
                Ok((stream, _)) => stream,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot accept an HTTP connection; retrying");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let open = health.http_connections.fetch_add(1, Ordering::Relaxed) + 1;
        health
            .http_connections_peak
            .fetch_max(open, Ordering::Relaxed);
        let io = TokioIo::new(IdleTimeout::new(stream, cfg.idle_timeout));
        let conn = http.serve_connection(io, TowerToHyperService::new(app.clone()));
        let (health, stop) = (Arc::clone(&health), shutdown.clone());
        tokio::spawn(async move {
            tokio::pin!(conn);
            tokio::select! {
                _ = conn.as_mut() => {}
                () = stop.cancelled() => {
                    conn.as_mut().graceful_shutdown();
                    let _ = conn.as_mut().await;
                }
            }
            health.http_connections.fetch_sub(1, Ordering::Relaxed);
            drop(permit);
        });
    }
}

/// A stream that fails with `TimedOut` when no byte has moved in either direction for `timeout`
/// while the connection waits on it (hyper then closes the connection).
struct IdleTimeout<S> {
    inner: S,
    timeout: Duration,
    /// Fires `timeout` after the last byte read or written.
    deadline: Pin<Box<tokio::time::Sleep>>,
}

impl<S> IdleTimeout<S> {
    fn new(inner: S, timeout: Duration) -> Self {
        IdleTimeout {
            inner,
            timeout,
            deadline: Box::pin(tokio::time::sleep(timeout)),
        }
    }

    fn progressed(&mut self) {
        let next = tokio::time::Instant::now() + self.timeout;
        self.deadline.as_mut().reset(next);
    }

    /// Called when the inner stream is pending: an error once the deadline has passed.
    fn pending<T>(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Result<T>> {
        match self.deadline.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "HTTP connection idle for server.idle_timeout",
            ))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for IdleTimeout<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(r) => {
                if buf.filled().len() > before {
                    this.progressed();
                }
                Poll::Ready(r)
            }
            Poll::Pending => this.pending(cx),
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for IdleTimeout<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_write(cx, buf) {
            Poll::Ready(r) => {
                if matches!(r, Ok(n) if n > 0) {
                    this.progressed();
                }
                Poll::Ready(r)
            }
            Poll::Pending => this.pending(cx),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_flush(cx) {
            Poll::Ready(r) => Poll::Ready(r),
            Poll::Pending => this.pending(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_shutdown(cx) {
            Poll::Ready(r) => Poll::Ready(r),
            Poll::Pending => this.pending(cx),
        }
    }
}

async fn metrics(State(s): State<AppState>) -> ([(&'static str, &'static str); 1], String) {
    (
        [("content-type", "text/plain; version=0.0.4")],
        (s.render)(),
    )
}

async fn readyz(State(s): State<AppState>) -> (StatusCode, String) {
    let missing = s.health.not_ready();
    if missing.is_empty() {
        (StatusCode::OK, "ready\n".into())
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {}\n", missing.join("; ")),
        )
    }
}

#[cfg(test)]
mod tests;
