//! The Storage Write API gRPC client: one tonic channel to a configurable endpoint.
//!
//! `https://…` endpoints use TLS (rustls with ring, system roots) and send an OAuth bearer token
//! and the credentials' quota project (`x-goog-user-project`) when [`Credentials`] are given;
//! `http://…` endpoints are plain HTTP/2 (the emulator). Every call carries
//! `x-goog-request-params: write_stream=…` (or `parent=…`), which BigQuery uses for
//! routing; the value is URL-encoded (as Google's client libraries do), so table names with
//! spaces or non-ASCII letters fit in a header.

use super::proto::{
    big_query_write_client::BigQueryWriteClient, AppendRowsRequest, AppendRowsResponse,
    CreateWriteStreamRequest, FinalizeWriteStreamRequest, FinalizeWriteStreamResponse,
    GetWriteStreamRequest, WriteStream,
};
use crate::auth::google::{Credentials, QUOTA_PROJECT_HEADER, QUOTA_PROJECT_VAR};
use std::time::Duration;
use tonic::codec::Streaming;
use tonic::metadata::MetadataValue;
use tonic::transport::{Channel, ClientTlsConfig, Endpoint};
use tonic::{Request, Status};

/// The endpoint could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// Not a valid URI.
    #[error("invalid Storage Write endpoint {0:?}: {1}")]
    Endpoint(String, String),
}

/// A cheap-to-clone handle on the Storage Write API.
#[derive(Debug, Clone)]
pub struct StorageClient {
    endpoint: Endpoint,
    channel: Channel,
    credentials: Option<Credentials>,
}

impl StorageClient {
    /// A client for `endpoint`; the connection is made lazily and re-made after failures.
    pub fn new(endpoint: &str, credentials: Option<Credentials>) -> Result<Self, ClientError> {
        let bad =
            |e: &dyn std::fmt::Display| ClientError::Endpoint(endpoint.to_string(), e.to_string());
        let mut ep = Endpoint::from_shared(endpoint.to_string())
            .map_err(|e| bad(&e))?
            .connect_timeout(Duration::from_secs(10))
            .tcp_nodelay(true)
            .http2_keep_alive_interval(Duration::from_secs(30))
            .keep_alive_timeout(Duration::from_secs(20))
            .keep_alive_while_idle(true)
            .http2_adaptive_window(true);
        if endpoint.starts_with("https://") {
            let host = ep.uri().host().unwrap_or_default().to_string();
            ep = ep
                .tls_config(ClientTlsConfig::new().with_native_roots().domain_name(host))
                .map_err(|e| bad(&e))?;
        }
        Ok(StorageClient {
            channel: ep.connect_lazy(),
            endpoint: ep,
            credentials,
        })
    }

    /// A client for the same endpoint and credentials on its own HTTP/2 connection (clones
    /// share one): a pool of writers uses one each, so their streams do not share a TCP
    /// connection's flow control.
    pub fn own_connection(&self) -> Self {
        StorageClient {
            channel: self.endpoint.connect_lazy(),
            endpoint: self.endpoint.clone(),
            credentials: self.credentials.clone(),
        }
    }

    /// Wraps `msg` with the routing header `key=value` and, with credentials, a fresh bearer
    /// token and their quota project.
    async fn request<T>(&self, msg: T, key: &str, value: &str) -> Result<Request<T>, Status> {
        let mut req = Request::new(msg);
        let md = req.metadata_mut();
        let params = routing_params(key, value);
        let v = MetadataValue::try_from(params.as_str())
            .map_err(|e| Status::invalid_argument(format!("routing header: {e}")))?;
        md.insert("x-goog-request-params", v);
        if let Some(c) = &self.credentials {
            // A token endpoint that cannot be reached is a retryable outage (the writer backs
            // off and reports itself unhealthy), not a credentials problem.
            let token = c.authorization().await.map_err(|e| {
                if e.is_transient() {
                    Status::unavailable(e.to_string())
                } else {
                    Status::unauthenticated(e.to_string())
                }
            })?;
            let mut v = MetadataValue::try_from(token)
                .map_err(|e| Status::unauthenticated(format!("token: {e}")))?;
            // Never shown by a request's Debug, sent never-indexed by HTTP/2 (HPACK).
            v.set_sensitive(true);
            md.insert("authorization", v);
            if let Some(q) = c.quota_project() {
                let v = MetadataValue::try_from(q).map_err(|e| {
                    Status::invalid_argument(format!(
                        "quota project {q:?} ({QUOTA_PROJECT_VAR} or the credentials file's quota_project_id) is not a valid header value: {e}"
                    ))
                })?;
                md.insert(QUOTA_PROJECT_HEADER, v);
            }
        }
        Ok(req)
    }

    fn grpc(&self) -> BigQueryWriteClient<Channel> {
        // Responses are small, requests up to 10 MiB (+ slack for the frame).
        BigQueryWriteClient::new(self.channel.clone()).max_encoding_message_size(12 << 20)
    }

    /// Opens a bidirectional AppendRows stream on `write_stream`, fed by `requests`. Returns
    /// once the server has answered with headers (some servers wait for the first request).
    pub async fn append_rows<S>(
        &self,
        write_stream: &str,
        requests: S,
    ) -> Result<Streaming<AppendRowsResponse>, Status>
    where
        S: tokio_stream::Stream<Item = AppendRowsRequest> + Send + 'static,
    {
        let req = self.request(requests, "write_stream", write_stream).await?;
        Ok(self.grpc().append_rows(req).await?.into_inner())
    }

    /// Creates a write stream of `stream.type` on `table` (`projects/p/datasets/d/tables/t`).
    pub async fn create_write_stream(
        &self,
        table: &str,
        stream: WriteStream,
    ) -> Result<WriteStream, Status> {
        let msg = CreateWriteStreamRequest {
            parent: table.to_string(),
            write_stream: Some(stream),
        };
        let req = self.request(msg, "parent", table).await?;
        Ok(self.grpc().create_write_stream(req).await?.into_inner())
    }

    /// Finalizes a stream: no more appends; returns its row count.
    pub async fn finalize_write_stream(
        &self,
        name: &str,
    ) -> Result<FinalizeWriteStreamResponse, Status> {
        let msg = FinalizeWriteStreamRequest {
            name: name.to_string(),
        };
        let req = self.request(msg, "name", name).await?;
        Ok(self.grpc().finalize_write_stream(req).await?.into_inner())
    }

    /// Reads a stream's metadata.
    pub async fn get_write_stream(&self, name: &str) -> Result<WriteStream, Status> {
        let msg = GetWriteStreamRequest {
            name: name.to_string(),
            ..Default::default()
        };
        let req = self.request(msg, "name", name).await?;
        Ok(self.grpc().get_write_stream(req).await?.into_inner())
    }
}

/// `key=value` for `x-goog-request-params`, the value URL-encoded except for `/` (which resource
/// names are made of): always a valid ASCII header value.
fn routing_params(key: &str, value: &str) -> String {
    use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
    const VALUE: &AsciiSet = &NON_ALPHANUMERIC
        .remove(b'-')
        .remove(b'.')
        .remove(b'_')
        .remove(b'~')
        .remove(b'/');
    format!("{key}={}", utf8_percent_encode(value, VALUE))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routing_params_are_ascii_header_values() {
        assert_eq!(
            routing_params(
                "write_stream",
                "projects/p/datasets/d/tables/t/streams/_default"
            ),
            "write_stream=projects/p/datasets/d/tables/t/streams/_default"
        );
        let p = routing_params(
            "parent",
            "projects/p/datasets/d/tables/prediction_log_città model",
        );
        assert_eq!(
            p,
            "parent=projects/p/datasets/d/tables/prediction_log_citt%C3%A0%20model"
        );
        assert!(MetadataValue::try_from(p.as_str()).is_ok());
    }
}
