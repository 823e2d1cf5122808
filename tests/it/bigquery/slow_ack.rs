//! A stand-in AppendRows server that acknowledges every request itself, `DELAY` (100 ms) after
//! it arrived, in order per connection and pipelined (it reads on while earlier requests wait):
//! a BigQuery whose append round trip is 100 ms and whose throughput is unbounded (HTTP/2
//! windows large enough that flow control never waits). It keeps
//! nothing. Used by `bigquery::pipelined` and by `examples/bq_pipeline.rs` (rows/s before and
//! after pipelining, docs/performance.md).

use observation_publisher::sink::bigquery::proto::{
    append_rows_response, AppendRowsRequest, AppendRowsResponse,
};
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_stream::wrappers::{ReceiverStream, TcpListenerStream};
use tonic::body::Body;
use tonic::codec::Streaming;
use tonic::codegen::{http, Service};
use tonic::Status;

pub(crate) const DELAY: Duration = Duration::from_millis(100);

/// HTTP/2 stream and connection window: four 4 MB requests in flight per connection.
const WINDOW: u32 = 16 << 20;

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

#[derive(Clone)]
struct Server(Arc<AtomicUsize>, Duration);

impl tonic::server::NamedService for Server {
    const NAME: &'static str = "google.cloud.bigquery.storage.v1.BigQueryWrite";
}

impl Service<http::Request<Body>> for Server {
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<Body>) -> Self::Future {
        let requests = Arc::clone(&self.0);
        let delay = self.1;
        Box::pin(async move {
            if req.uri().path().ends_with("/AppendRows") {
                let codec =
                    tonic_prost::ProstCodec::<AppendRowsResponse, AppendRowsRequest>::default();
                // BigQuery takes requests up to 10 MB; tonic's default cap is 4 MiB.
                Ok(tonic::server::Grpc::new(codec)
                    .max_decoding_message_size(16 << 20)
                    .streaming(Append(requests, delay), req)
                    .await)
            } else {
                Ok(Status::unimplemented("AppendRows only").into_http())
            }
        })
    }
}

struct Append(Arc<AtomicUsize>, Duration);

type Responses = ReceiverStream<Result<AppendRowsResponse, Status>>;

impl Service<tonic::Request<Streaming<AppendRowsRequest>>> for Append {
    type Response = tonic::Response<Responses>;
    type Error = Status;
    type Future = BoxFuture<Result<Self::Response, Status>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Status>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: tonic::Request<Streaming<AppendRowsRequest>>) -> Self::Future {
        let requests = Arc::clone(&self.0);
        let delay = self.1;
        Box::pin(async move {
            let mut inbound = req.into_inner();
            let (tx, rx) = mpsc::channel(1024);
            let (due_tx, mut due_rx) = mpsc::unbounded_channel::<tokio::time::Instant>();
            tokio::spawn(async move {
                while let Ok(Some(_)) = inbound.message().await {
                    requests.fetch_add(1, Ordering::SeqCst);
                    if due_tx.send(tokio::time::Instant::now() + delay).is_err() {
                        return;
                    }
                }
            });
            tokio::spawn(async move {
                while let Some(at) = due_rx.recv().await {
                    tokio::time::sleep_until(at).await;
                    let ok = AppendRowsResponse {
                        response: Some(append_rows_response::Response::AppendResult(
                            Default::default(),
                        )),
                        ..Default::default()
                    };
                    if tx.send(Ok(ok)).await.is_err() {
                        return;
                    }
                }
            });
            Ok(tonic::Response::new(ReceiverStream::new(rx)))
        })
    }
}

/// A running server; stops with the runtime.
pub(crate) struct SlowAck {
    pub(crate) url: String,
    requests: Arc<AtomicUsize>,
}

impl SlowAck {
    /// Starts one on 127.0.0.1 (any port), answering [`DELAY`] after each request.
    #[allow(dead_code)]
    pub(crate) async fn start() -> SlowAck {
        Self::start_with(DELAY).await
    }

    /// Starts one answering `delay` after each request (a delay longer than the run: a stalled
    /// sink).
    pub(crate) async fn start_with(delay: Duration) -> SlowAck {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let requests = Arc::new(AtomicUsize::new(0));
        // HTTP/2 windows of 16 MiB, so that flow control bounds nothing: with tonic's default
        // windows a 2 MB request waited for window updates (135 ms from send to answer against
        // the 100 ms delay, on the bench's shared cores), a throughput bound this stand-in does
        // not claim to have (docs/performance.md, "Footprint at the defaults").
        tokio::spawn(
            tonic::transport::Server::builder()
                .initial_stream_window_size(Some(WINDOW))
                .initial_connection_window_size(Some(WINDOW))
                .add_service(Server(Arc::clone(&requests), delay))
                .serve_with_incoming(TcpListenerStream::new(listener)),
        );
        SlowAck { url, requests }
    }

    /// AppendRows requests received.
    #[allow(dead_code)]
    pub(crate) fn requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }
}
