//! How the sink answers Arize's statuses, against the capturing server: 2xx acknowledges, 401
//! needs a fix (and a retry after recovery sends only what was not acknowledged), 429 carries
//! Retry-After, 413 splits, 500 and a dropped connection are retried.

use super::*;
use crate::http_capture::{Reply, Server};
use observation_publisher::sink::{Sink, SinkErrorKind};

/// A batch big enough for several requests under a 64 KiB cap.
fn big(model: Model, now: SystemTime) -> (Config, Arc<Batch>) {
    let cfg = model.config();
    let logs: Vec<_> = (0..40)
        .map(|i| TestLog::new(&format!("session-{i:03}"), 50, 60_000_000, i))
        .collect();
    let b = batch(&cfg, &logs, now);
    (cfg, b)
}

fn rows_in(body: &[u8]) -> usize {
    arrow_ipc::reader::StreamReader::try_new(std::io::Cursor::new(body.to_vec()), None)
        .unwrap()
        .map(|b| b.unwrap().num_rows())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_401_needs_a_fix_and_the_retry_sends_only_what_was_not_acknowledged() {
    let server = Server::start();
    let (cfg, b) = big(Model::Binary, SystemTime::now());
    let mut s = sink(&cfg, &server.uri(), 64 << 10);
    server.script([Reply::Status(200, vec![]), Reply::Status(401, vec![])]);
    let e = s.write(Arc::clone(&b)).await.unwrap_err();
    assert!(!e.is_retryable(), "{e}");
    assert!(e.to_string().contains("api_key and space_key"), "{e}");
    let first = server.take();
    assert_eq!(first.len(), 2);
    // The server recovers; the same batch is written again.
    let report = s.write(Arc::clone(&b)).await.unwrap();
    assert_eq!(report.rejected, []);
    let rest = server.take();
    assert!(!rest.is_empty());
    // The acknowledged request was not re-sent; the refused one was, and then the rest.
    assert_eq!(rest[0].body, first[1].body);
    assert!(rest.iter().all(|r| r.body != first[0].body));
    let rows: usize =
        rows_in(&first[0].body) + rest.iter().map(|r| rows_in(&r.body)).sum::<usize>();
    assert_eq!(rows, b.rows());
    for r in first.iter().chain(&rest) {
        assert!(r.body.len() <= 64 << 10);
        assert_eq!(
            r.header("number-of-rows"),
            Some(rows_in(&r.body).to_string().as_str())
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_429_is_retryable_with_the_servers_retry_after() {
    let server = Server::start();
    let (cfg, b) = big(Model::Regression, SystemTime::now());
    let mut s = sink(&cfg, &server.uri(), 8 << 20);
    server.script([Reply::Status(429, vec![("retry-after", "7".into())])]);
    let e = s.write(Arc::clone(&b)).await.unwrap_err();
    assert!(e.is_retryable());
    assert_eq!(e.kind, SinkErrorKind::Unavailable);
    assert_eq!(e.retry_after(), Some(Duration::from_secs(7)));
    server.script([Reply::Status(429, vec![])]);
    let e = s.write(Arc::clone(&b)).await.unwrap_err();
    assert!(e.is_retryable() && e.retry_after().is_none());
    s.write(b).await.unwrap();
    assert_eq!(server.take().len(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_413_splits_the_request_and_sends_the_halves() {
    let server = Server::start();
    let (cfg, b) = big(Model::Ranking, SystemTime::now());
    let mut s = sink(&cfg, &server.uri(), 8 << 20);
    server.script([Reply::Status(413, vec![]), Reply::Status(413, vec![])]);
    let report = s.write(Arc::clone(&b)).await.unwrap();
    assert_eq!(report.rejected, []);
    let got = server.take();
    // whole (413) → first half (413) → its halves, then the second half.
    let rows: Vec<usize> = got.iter().map(|r| rows_in(&r.body)).collect();
    let n = b.rows();
    assert_eq!(rows, [n, n / 2, n / 4, n / 2 - n / 4, n - n / 2]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_500_and_a_dropped_connection_are_retried() {
    let server = Server::start();
    let (cfg, b) = big(Model::Binary, SystemTime::now());
    let mut s = sink(&cfg, &server.uri(), 8 << 20);
    server.script([Reply::Status(500, vec![]), Reply::Drop]);
    for _ in 0..2 {
        let e = s.write(Arc::clone(&b)).await.unwrap_err();
        assert!(e.is_retryable(), "{e}");
        assert_eq!(e.kind, SinkErrorKind::Unavailable);
    }
    s.write(b).await.unwrap();
    assert_eq!(server.take().len(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_listening_is_a_retryable_connection_error() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let (cfg, b) = big(Model::Regression, SystemTime::now());
    let mut s = sink(&cfg, &format!("http://127.0.0.1:{port}/v1"), 8 << 20);
    let e = s.write(b).await.unwrap_err();
    assert!(e.is_retryable(), "{e}");
    assert!(!e.to_string().contains(API_KEY), "{e}");
}
