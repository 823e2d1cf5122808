//! The HTTP port: Prometheus text at `/metrics`, liveness at `/healthz`, readiness at `/readyz`.
//!
//! Liveness means the process serves requests. Readiness means the consumer has joined its group
//! (an empty assignment counts, so extra replicas are ready), the topic exists, and every sink
//! and the dead-letter target are healthy; `/readyz` lists what is not.

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use axum::Router;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
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

/// Serves the three endpoints on `listener` until `shutdown` is cancelled. `render` produces the
/// Prometheus text.
pub async fn serve(
    listener: tokio::net::TcpListener,
    health: Arc<Health>,
    render: Arc<dyn Fn() -> String + Send + Sync>,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let app = Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .with_state(AppState { health, render });
    axum::serve(listener, app)
        .with_graceful_shutdown(async move { shutdown.cancelled().await })
        .await
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
