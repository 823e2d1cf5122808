//! A fault-injecting AppendRows proxy: a tonic server on 127.0.0.1 that forwards to the emulator,
//! in lockstep (one request forwarded, its answer relayed, then the next), and replaces chosen
//! requests (numbered from 1 across all connections) with a fault instead of forwarding them.
//! Lockstep makes the faults deterministic: every answer before a fault has been relayed, and
//! nothing after it has reached the emulator. The unary calls a COMMITTED-stream writer makes
//! (create, get, finalize) are forwarded untouched. The chaos harness (`examples/chaos`) uses
//! this file too, injecting faults while load runs ([`Proxy::inject`]).

use observation_publisher::sink::bigquery::proto::{
    append_rows_request, append_rows_response, rpc, AppendRowsRequest, AppendRowsResponse,
    CreateWriteStreamRequest, FinalizeWriteStreamRequest, FinalizeWriteStreamResponse,
    GetWriteStreamRequest, RowError, WriteStream,
};
use observation_publisher::sink::bigquery::StorageClient;
use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use tokio::sync::{mpsc, oneshot};
use tokio_stream::wrappers::{ReceiverStream, TcpListenerStream, UnboundedReceiverStream};
use tonic::body::Body;
use tonic::codec::Streaming;
use tonic::codegen::{http, Service};
use tonic::{Code, Status};

/// What the proxy does with one request.
#[derive(Debug, Clone)]
pub(crate) enum Fault {
    /// End the RPC with UNAVAILABLE (the request is not forwarded).
    Unavailable,
    /// End the RPC with OK, as a dropped connection looks to a reader (not forwarded).
    DropStream,
    /// Answer with these `row_errors` (the whole request rejected; not forwarded).
    RowErrors(Vec<i64>),
    /// Answer with an in-band error status (not forwarded); the stream stays open.
    InBand(Code),
    /// Never answer (the connection stays open): the writer must give up on it.
    Stall,
    /// Forward the request, wait for the emulator's answer, then end the RPC (OK) without
    /// relaying it: the request landed but its answer is lost.
    ForwardThenDrop,
    /// Answer with INVALID_ARGUMENT carrying the StorageError SCHEMA_MISMATCH_EXTRA_FIELDS, as
    /// BigQuery does when the writer has columns the table lacks (not forwarded).
    SchemaMismatch,
}

/// Faults by request number, and RPC-open refusals (consumed one per AppendRows call).
#[derive(Debug, Default)]
pub(crate) struct Script {
    pub(crate) at: HashMap<usize, Fault>,
    pub(crate) refuse_open: VecDeque<Code>,
    /// When the writer half-closes a connection, keep the RPC open (never end it) until the
    /// writer drops it, as a server slow to end a call would.
    pub(crate) hold_after_half_close: bool,
}

struct Inner {
    upstream: StorageClient,
    script: Mutex<Script>,
    requests: AtomicUsize,
    forwarded: AtomicUsize,
    opens: AtomicUsize,
    /// AppendRows calls being served now, and the most at once.
    live: AtomicUsize,
    peak: AtomicUsize,
}

/// A running proxy; stopped on drop.
pub(crate) struct Proxy {
    pub(crate) addr: SocketAddr,
    inner: Arc<Inner>,
    stop: Option<oneshot::Sender<()>>,
}

impl Proxy {
    /// Starts a proxy on `bind` (port 0 for any) forwarding to `upstream`.
    pub(crate) async fn start(bind: SocketAddr, upstream: &str, script: Script) -> Proxy {
        let listener = tokio::net::TcpListener::bind(bind)
            .await
            .expect("bind proxy");
        let addr = listener.local_addr().expect("proxy address");
        let inner = Arc::new(Inner {
            upstream: StorageClient::new(upstream, None).expect("upstream client"),
            script: Mutex::new(script),
            requests: AtomicUsize::new(0),
            forwarded: AtomicUsize::new(0),
            opens: AtomicUsize::new(0),
            live: AtomicUsize::new(0),
            peak: AtomicUsize::new(0),
        });
        let (stop, stopped) = oneshot::channel::<()>();
        let svc = ProxySvc(Arc::clone(&inner));
        tokio::spawn(async move {
            let r = tonic::transport::Server::builder()
                .add_service(svc)
                .serve_with_incoming_shutdown(TcpListenerStream::new(listener), async {
                    let _ = stopped.await;
                })
                .await;
            if let Err(e) = r {
                eprintln!("proxy stopped: {e}");
            }
        });
        Proxy {
            addr,
            inner,
            stop: Some(stop),
        }
    }

    pub(crate) fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Requests received (faulted or forwarded).
    pub(crate) fn requests(&self) -> usize {
        self.inner.requests.load(Ordering::SeqCst)
    }

    /// Requests forwarded to the emulator.
    pub(crate) fn forwarded(&self) -> usize {
        self.inner.forwarded.load(Ordering::SeqCst)
    }

    /// Scripted faults not injected yet.
    pub(crate) fn unused_faults(&self) -> usize {
        let s = self.inner.script.lock().expect("script");
        s.at.len() + s.refuse_open.len()
    }

    /// AppendRows calls received.
    pub(crate) fn opens(&self) -> usize {
        self.inner.opens.load(Ordering::SeqCst)
    }

    /// AppendRows calls being served now (opened and not yet ended by the writer).
    pub(crate) fn live(&self) -> usize {
        self.inner.live.load(Ordering::SeqCst)
    }

    /// The most AppendRows calls served at once since the last [`Self::reset_peak`] (or start).
    pub(crate) fn peak(&self) -> usize {
        self.inner.peak.load(Ordering::SeqCst)
    }

    /// Starts counting [`Self::peak`] again from the calls being served now.
    pub(crate) fn reset_peak(&self) {
        self.inner.peak.store(self.live(), Ordering::SeqCst);
    }

    /// Schedules `faults` for the requests to come, every other one from the next request on
    /// (so that a retry between two faults can succeed). Used by the chaos harness only.
    #[allow(dead_code)]
    pub(crate) fn inject(&self, faults: impl IntoIterator<Item = Fault>) {
        let next = self.requests() + 1;
        let mut s = self.inner.script.lock().expect("script");
        for (i, f) in faults.into_iter().enumerate() {
            s.at.insert(next + 2 * i, f);
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

#[derive(Clone)]
struct ProxySvc(Arc<Inner>);

impl tonic::server::NamedService for ProxySvc {
    const NAME: &'static str = "google.cloud.bigquery.storage.v1.BigQueryWrite";
}

impl Service<http::Request<Body>> for ProxySvc {
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<Body>) -> Self::Future {
        let inner = Arc::clone(&self.0);
        Box::pin(async move {
            let method = req
                .uri()
                .path()
                .trim_start_matches("/google.cloud.bigquery.storage.v1.BigQueryWrite/");
            Ok(match method {
                "AppendRows" => {
                    let codec =
                        tonic_prost::ProstCodec::<AppendRowsResponse, AppendRowsRequest>::default();
                    tonic::server::Grpc::new(codec)
                        .streaming(AppendSvc(inner), req)
                        .await
                }
                "CreateWriteStream" => {
                    let codec =
                        tonic_prost::ProstCodec::<WriteStream, CreateWriteStreamRequest>::default();
                    let svc = Forward(inner, |i, r: CreateWriteStreamRequest| {
                        Box::pin(async move {
                            i.upstream
                                .create_write_stream(&r.parent, r.write_stream.unwrap_or_default())
                                .await
                        })
                    });
                    tonic::server::Grpc::new(codec).unary(svc, req).await
                }
                "GetWriteStream" => {
                    let codec =
                        tonic_prost::ProstCodec::<WriteStream, GetWriteStreamRequest>::default();
                    let svc = Forward(inner, |i, r: GetWriteStreamRequest| {
                        Box::pin(async move { i.upstream.get_write_stream(&r.name).await })
                    });
                    tonic::server::Grpc::new(codec).unary(svc, req).await
                }
                "FinalizeWriteStream" => {
                    let codec = tonic_prost::ProstCodec::<
                        FinalizeWriteStreamResponse,
                        FinalizeWriteStreamRequest,
                    >::default();
                    let svc = Forward(inner, |i, r: FinalizeWriteStreamRequest| {
                        Box::pin(async move { i.upstream.finalize_write_stream(&r.name).await })
                    });
                    tonic::server::Grpc::new(codec).unary(svc, req).await
                }
                _ => Status::unimplemented("the test proxy does not serve this method").into_http(),
            })
        })
    }
}

/// A unary call forwarded to the emulator as it is.
struct Forward<Req, Resp>(
    Arc<Inner>,
    fn(Arc<Inner>, Req) -> BoxFuture<Result<Resp, Status>>,
);

impl<Req, Resp> tonic::server::UnaryService<Req> for Forward<Req, Resp>
where
    Req: Send + 'static,
    Resp: Send + 'static,
{
    type Response = Resp;
    type Future = BoxFuture<Result<tonic::Response<Resp>, Status>>;

    fn call(&mut self, req: tonic::Request<Req>) -> Self::Future {
        let answer = (self.1)(Arc::clone(&self.0), req.into_inner());
        Box::pin(async move { answer.await.map(tonic::Response::new) })
    }
}

struct AppendSvc(Arc<Inner>);

type Responses = ReceiverStream<Result<AppendRowsResponse, Status>>;

impl Service<tonic::Request<Streaming<AppendRowsRequest>>> for AppendSvc {
    type Response = tonic::Response<Responses>;
    type Error = Status;
    type Future = BoxFuture<Result<Self::Response, Status>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Status>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: tonic::Request<Streaming<AppendRowsRequest>>) -> Self::Future {
        let inner = Arc::clone(&self.0);
        Box::pin(async move {
            inner.opens.fetch_add(1, Ordering::SeqCst);
            let refused = inner.script.lock().expect("script").refuse_open.pop_front();
            if let Some(code) = refused {
                return Err(Status::new(code, "injected at open"));
            }
            let (tx, rx) = mpsc::channel(64);
            let live = inner.live.fetch_add(1, Ordering::SeqCst) + 1;
            inner.peak.fetch_max(live, Ordering::SeqCst);
            tokio::spawn(async move {
                relay(Arc::clone(&inner), req.into_inner(), tx).await;
                inner.live.fetch_sub(1, Ordering::SeqCst);
            });
            Ok(tonic::Response::new(ReceiverStream::new(rx)))
        })
    }
}

fn in_band(code: Code) -> AppendRowsResponse {
    AppendRowsResponse {
        response: Some(append_rows_response::Response::Error(rpc::Status {
            code: code as i32,
            message: "injected in-band".into(),
            details: Vec::new(),
        })),
        ..Default::default()
    }
}

fn schema_mismatch() -> AppendRowsResponse {
    use observation_publisher::sink::bigquery::proto::{
        storage_error::StorageErrorCode, StorageError,
    };
    use prost::Message;
    let detail = StorageError {
        code: StorageErrorCode::SchemaMismatchExtraFields as i32,
        entity: String::new(),
        error_message: "Input schema has more fields than BigQuery schema".into(),
    };
    AppendRowsResponse {
        response: Some(append_rows_response::Response::Error(rpc::Status {
            code: Code::InvalidArgument as i32,
            message: "injected: Input schema has more fields than BigQuery schema".into(),
            details: vec![prost_types::Any {
                type_url: "type.googleapis.com/google.cloud.bigquery.storage.v1.StorageError"
                    .into(),
                value: detail.encode_to_vec(),
            }],
        })),
        ..Default::default()
    }
}

/// One downstream connection: lockstep forwarding with faults.
async fn relay(
    inner: Arc<Inner>,
    mut inbound: Streaming<AppendRowsRequest>,
    tx: mpsc::Sender<Result<AppendRowsResponse, Status>>,
) {
    // The downstream connection's first request carries the stream name and writer schema; the
    // upstream connection's first forwarded request needs them even if that one was faulted.
    let mut head: Option<(String, append_rows_request::Rows)> = None;
    let mut upstream: Option<(
        mpsc::UnboundedSender<AppendRowsRequest>,
        Streaming<AppendRowsResponse>,
    )> = None;
    while let Ok(Some(mut msg)) = inbound.message().await {
        if head.is_none() {
            if let Some(rows) = msg.rows.clone() {
                head = Some((msg.write_stream.clone(), rows));
            }
        }
        let n = inner.requests.fetch_add(1, Ordering::SeqCst) + 1;
        if std::env::var_os("PROXY_DEBUG").is_some() {
            let len = match &msg.rows {
                Some(append_rows_request::Rows::ArrowRows(a)) => a
                    .rows
                    .as_ref()
                    .map_or(0, |r| r.serialized_record_batch.len()),
                _ => 0,
            };
            eprintln!("proxy: request {n}, {len} payload bytes");
        }
        let fault = inner.script.lock().expect("script").at.remove(&n);
        let drop_answer = matches!(fault, Some(Fault::ForwardThenDrop));
        let answer = match fault {
            Some(Fault::Unavailable) => {
                let _ = tx
                    .send(Err(Status::unavailable("injected: connection lost")))
                    .await;
                return;
            }
            Some(Fault::DropStream) => return,
            Some(Fault::Stall) => {
                // Hold the connection until the writer abandons it.
                tx.closed().await;
                return;
            }
            Some(Fault::RowErrors(ix)) => AppendRowsResponse {
                row_errors: ix
                    .into_iter()
                    .map(|index| RowError {
                        index,
                        code: 1,
                        message: format!("injected: bad row {index}"),
                    })
                    .collect(),
                ..Default::default()
            },
            Some(Fault::InBand(code)) => in_band(code),
            Some(Fault::SchemaMismatch) => schema_mismatch(),
            None | Some(Fault::ForwardThenDrop) => {
                let stream = match upstream.as_mut() {
                    Some((utx, s)) => {
                        if utx.send(msg).is_err() {
                            return;
                        }
                        s
                    }
                    None => {
                        let Some((ws, rows)) = head.clone() else {
                            return;
                        };
                        msg.write_stream = ws.clone();
                        if let (
                            Some(append_rows_request::Rows::ArrowRows(first)),
                            Some(append_rows_request::Rows::ArrowRows(this)),
                        ) = (Some(rows), msg.rows.as_mut())
                        {
                            this.writer_schema = first.writer_schema;
                        }
                        let (utx, urx) = mpsc::unbounded_channel();
                        let _ = utx.send(msg);
                        match inner
                            .upstream
                            .append_rows(&ws, UnboundedReceiverStream::new(urx))
                            .await
                        {
                            Ok(s) => &mut upstream.insert((utx, s)).1,
                            Err(st) => {
                                let _ = tx.send(Err(st)).await;
                                return;
                            }
                        }
                    }
                };
                inner.forwarded.fetch_add(1, Ordering::SeqCst);
                let got = stream.message().await;
                if std::env::var_os("PROXY_DEBUG").is_some() {
                    eprintln!("proxy: upstream {n}: {got:?}");
                }
                match got {
                    Ok(Some(r)) => r,
                    Ok(None) => return,
                    Err(st) => {
                        let _ = tx.send(Err(st)).await;
                        return;
                    }
                }
            }
        };
        if std::env::var_os("PROXY_DEBUG").is_some() {
            eprintln!(
                "proxy: answer {n}: {:?} {:?}",
                answer.response, answer.row_errors
            );
        }
        if drop_answer {
            return;
        }
        if tx.send(Ok(answer)).await.is_err() {
            return;
        }
    }
    let hold = inner.script.lock().expect("script").hold_after_half_close;
    if hold {
        tx.closed().await;
    }
}
