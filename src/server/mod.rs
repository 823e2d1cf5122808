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
use slots::{Admission, SlotId, Slots};
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
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
    /// Why a sink is failing: its service unavailable at start-up (retried), or its last
    /// failed write. `/readyz` says it, so an operator sees the cause (e.g. the STS endpoint
    /// refusing) and not only that a sink is failing.
    pub sink_problem: Mutex<Option<String>>,
    /// The dead-letter target is usable.
    pub dead_letter_ok: AtomicBool,
    /// Every sink's connection reports itself healthy (BigQuery writer health).
    pub sink_streams_ok: AtomicBool,
    /// Exactly-once partitions paused because their checkpoint could not be read (retried).
    pub checkpoints_unread: AtomicUsize,
    /// Exactly-once partitions stopped because their checkpoint does not parse.
    pub checkpoints_unparseable: AtomicUsize,
    /// HTTP connections open now.
    pub http_connections: AtomicUsize,
    /// Most HTTP connections ever open at once (never above `server.max_connections`).
    pub http_connections_peak: AtomicUsize,
    /// What crashed (a pipeline thread or task that panicked, with its message); while not
    /// empty, `/healthz` answers 503 and the process exits non-zero when it stops.
    pub crashed: Mutex<Vec<String>>,
    /// HTTP connections closed to make room for a newer client (`server.max_connections`,
    /// `server.max_connections_per_peer`).
    pub http_connections_evicted: AtomicUsize,
    /// What a sink reports stuck although it reaches its destination (a MaxCompute move past
    /// `move_timeout`): each a sentence naming the sink, what is stuck and what to check.
    pub sinks_stuck: Mutex<Vec<String>>,
    /// `group.protocol: consumer` is set and the group's coordinator does not serve KIP-848's
    /// ConsumerGroupHeartbeat: the consumer would wait forever, unassigned.
    pub group_protocol_refused: AtomicBool,
    /// Why the consumer cannot reach its brokers, as librdkafka last said it (cleared once a
    /// broker answers): `/readyz` names it instead of its consequences.
    pub broker_problem: Mutex<Option<String>>,
}

/// A client error about the brokers, for [`Health::set_broker_problem`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BrokerProblem {
    /// A cause: which broker, what failed, what to check.
    Cause(String),
    /// librdkafka's "N/N brokers are down", which names no cause.
    AllDown(String),
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

    /// Records that `what` crashed: `/healthz` fails from now on.
    pub fn crash(&self, what: String) {
        self.crashed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(what);
    }

    /// What crashed so far (empty = healthy).
    pub fn crashes(&self) -> Vec<String> {
        self.crashed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// What the sinks report stuck now (empty = nothing); `/readyz` lists it after
    /// [`Health::not_ready`].
    pub fn stuck(&self) -> Vec<String> {
        self.sinks_stuck
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Replaces what the sinks report stuck.
    pub fn set_stuck(&self, stuck: Vec<String>) {
        *self.sinks_stuck.lock().unwrap_or_else(|e| e.into_inner()) = stuck;
    }

    /// Whether `/readyz` answers 200: every condition met and nothing stuck.
    pub fn is_ready(&self) -> bool {
        self.not_ready().is_empty() && self.stuck().is_empty()
    }

    /// Records a client error about the brokers: a cause replaces what was known; "all
    /// brokers are down" is kept only when no cause is known.
    pub fn set_broker_problem(&self, problem: BrokerProblem) {
        let mut p = self
            .broker_problem
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        match problem {
            BrokerProblem::Cause(c) => *p = Some(c),
            BrokerProblem::AllDown(reason) => {
                if p.is_none() {
                    *p = Some(format!(
                        "no Kafka broker can be reached ({reason}; check observation_source.bootstrap_servers)"
                    ));
                }
            }
        }
    }

    /// A broker answered: what was said about the brokers no longer holds.
    pub fn broker_reached(&self) {
        *self
            .broker_problem
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = None;
    }

    /// The conditions that are not met (empty = ready), besides [`Health::stuck`]. While the
    /// brokers cannot be reached, that is said, not its consequences (no group joined, no
    /// topic seen).
    pub fn not_ready(&self) -> Vec<String> {
        let mut v: Vec<String> = Vec::new();
        let broker = self
            .broker_problem
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let joined = self.joined.load(Ordering::Relaxed);
        let topic = self.topic_exists.load(Ordering::Relaxed);
        match broker {
            Some(b) if !joined || !topic => v.push(b),
            _ => {
                if !joined {
                    v.push("consumer has not joined its group".into());
                }
                if !topic {
                    v.push("source topic does not exist (yet)".into());
                }
            }
        }
        if !self.sinks_ok.load(Ordering::Relaxed) {
            let start = self
                .sink_problem
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone();
            v.push(match start {
                Some(why) => format!("a sink is failing: {why}"),
                None => "a sink is failing".into(),
            });
        }
        if !self.sink_streams_ok.load(Ordering::Relaxed) {
            v.push("a sink cannot reach its destination".into());
        }
        if !self.dead_letter_ok.load(Ordering::Relaxed) {
            v.push("dead-letter target is not usable".into());
        }
        if self.checkpoints_unread.load(Ordering::Relaxed) > 0 {
            v.push("exactly-once: a partition's checkpoint could not be read (retrying; the partition is paused)".into());
        }
        if self.checkpoints_unparseable.load(Ordering::Relaxed) > 0 {
            v.push("exactly-once: a partition's checkpoint does not parse (the partition is stopped; see the error log)".into());
        }
        if self.group_protocol_refused.load(Ordering::Relaxed) {
            v.push("the brokers do not serve group.protocol: consumer (KIP-848 needs Kafka 4.0 or later): remove group.protocol from additional_consumer_config, or set it to classic".into());
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
/// - every connection is accepted at once, then admitted by [`slots::Slots`]: at most
///   `max_connections` are open, at most `max_connections_per_peer` from one IP address, and
///   room is made by closing the oldest *idle* connection (no request being handled) of the
///   same peer, or else of the peer holding the most; so a probe, which sends its request as
///   soon as it connects, is never queued behind stalled clients;
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
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(AppState {
            health: Arc::clone(&health),
            render,
        });
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(cfg.header_read_timeout)
        .keep_alive(true);
    let registry = Arc::new(Mutex::new(Registry {
        slots: Slots::new(cfg.max_connections, cfg.max_connections_per_peer),
        evictions: HashMap::new(),
    }));
    loop {
        let (stream, peer) = tokio::select! {
            () = shutdown.cancelled() => return Ok(()),
            r = listener.accept() => match r {
                Ok(accepted) => accepted,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot accept an HTTP connection; retrying");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let (id, evicted) = {
            let mut r = lock(&registry);
            let (id, evict) = match r.slots.admit(peer.ip()) {
                Admission::Admit { id, evict } => (id, evict),
                Admission::Refuse => {
                    // Every slot is handling a request right now: this client retries.
                    drop(stream);
                    continue;
                }
            };
            let evicted = evict.and_then(|old| r.evictions.remove(&old));
            let token = shutdown.child_token();
            r.evictions.insert(id, token.clone());
            (id, (evicted, token))
        };
        let (evicted, evict_me) = evicted;
        if let Some(old) = evicted {
            old.cancel();
            health.http_connections.fetch_sub(1, Ordering::Relaxed);
            health
                .http_connections_evicted
                .fetch_add(1, Ordering::Relaxed);
        }
        let open = health.http_connections.fetch_add(1, Ordering::Relaxed) + 1;
        health
            .http_connections_peak
            .fetch_max(open, Ordering::Relaxed);
        let io = TokioIo::new(IdleTimeout::new(stream, cfg.idle_timeout));
        let inner = TowerToHyperService::new(app.clone());
        let reg = Arc::clone(&registry);
        let service = hyper::service::service_fn(move |req| {
            lock(&reg).slots.busy(id, true);
            let answer = hyper::service::Service::call(&inner, req);
            let reg = Arc::clone(&reg);
            async move {
                let r = answer.await;
                lock(&reg).slots.busy(id, false);
                r
            }
        });
        let conn = http.serve_connection(io, service);
        let (health, stop, registry) =
            (Arc::clone(&health), shutdown.clone(), Arc::clone(&registry));
        tokio::spawn(async move {
            tokio::pin!(conn);
            tokio::select! {
                _ = conn.as_mut() => {}
                () = evict_me.cancelled() => {
                    if !stop.is_cancelled() {
                        // Evicted for a newer client (its slot is already free): dropping the
                        // connection closes the socket.
                        return;
                    }
                    conn.as_mut().graceful_shutdown();
                    let _ = conn.as_mut().await;
                }
            }
            let mut r = lock(&registry);
            if r.evictions.remove(&id).is_some() {
                r.slots.release(id);
                health.http_connections.fetch_sub(1, Ordering::Relaxed);
            }
        });
    }
}

/// The connection slots and, for each open connection, the token that closes it.
struct Registry {
    slots: Slots,
    evictions: HashMap<SlotId, CancellationToken>,
}

fn lock(r: &Mutex<Registry>) -> MutexGuard<'_, Registry> {
    // Every critical section is a few map operations; a panic inside one is a bug, and the
    // maps stay usable.
    r.lock().unwrap_or_else(|e| e.into_inner())
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

async fn healthz(State(s): State<AppState>) -> (StatusCode, String) {
    let crashed = s.health.crashes();
    if crashed.is_empty() {
        (StatusCode::OK, "ok\n".into())
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("unhealthy: {}\n", crashed.join("; ")),
        )
    }
}

async fn readyz(State(s): State<AppState>) -> (StatusCode, String) {
    let mut missing = s.health.not_ready();
    missing.extend(s.health.stuck());
    if missing.is_empty() {
        (StatusCode::OK, "ready\n".into())
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {}\n", missing.join("; ")),
        )
    }
}

mod slots;

#[cfg(test)]
mod tests;
