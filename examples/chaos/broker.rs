//! The Kafka side of a run, and address helpers.

use crate::tcp_proxy::TcpProxy;
use rdkafka::mocking::MockCluster;
use rdkafka::producer::DefaultProducerContext;
use std::net::SocketAddr;

/// The Kafka side: tansu behind a proxy, or a mock cluster in this process.
pub(crate) enum Broker {
    Tansu(TcpProxy),
    Mock(MockCluster<'static, DefaultProducerContext>),
}

impl Broker {
    pub(crate) fn bootstrap(&self) -> String {
        match self {
            Broker::Tansu(p) => p.addr.to_string(),
            Broker::Mock(c) => c.bootstrap_servers(),
        }
    }

    pub(crate) async fn create_topics(
        &self,
        topics: &[&str],
        partitions: i32,
    ) -> Result<(), String> {
        match self {
            Broker::Mock(c) => {
                for t in topics {
                    c.create_topic(t, partitions, 1)
                        .map_err(|e| e.to_string())?;
                }
                Ok(())
            }
            Broker::Tansu(p) => {
                use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
                let admin: AdminClient<rdkafka::client::DefaultClientContext> =
                    rdkafka::ClientConfig::new()
                        .set("bootstrap.servers", p.addr.to_string())
                        .create()
                        .map_err(|e| e.to_string())?;
                let new: Vec<NewTopic<'_>> = topics
                    .iter()
                    .map(|t| NewTopic::new(t, partitions, TopicReplication::Fixed(1)))
                    .collect();
                let out = admin
                    .create_topics(&new, &AdminOptions::new())
                    .await
                    .map_err(|e| e.to_string())?;
                for r in out {
                    r.map_err(|(t, e)| format!("create topic {t}: {e}"))?;
                }
                Ok(())
            }
        }
    }

    pub(crate) fn cut(&self) {
        match self {
            Broker::Tansu(p) => p.cut(),
            Broker::Mock(c) => {
                let _ = c.broker_down(1);
            }
        }
    }

    pub(crate) fn restore(&self) {
        match self {
            Broker::Tansu(p) => p.restore(),
            Broker::Mock(c) => {
                let _ = c.broker_up(1);
            }
        }
    }
}

/// The socket address of an `http://host:port` URL.
pub(crate) fn socket(url: &str) -> Result<SocketAddr, String> {
    let hostport = url
        .trim_start_matches("http://")
        .trim_start_matches("https://")
        .trim_end_matches('/');
    use std::net::ToSocketAddrs;
    hostport
        .to_socket_addrs()
        .map_err(|e| format!("{url}: {e}"))?
        .next()
        .ok_or_else(|| format!("{url}: no address"))
}

/// A loopback port nobody listens on (now).
pub(crate) fn free_port() -> Result<u16, String> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    Ok(l.local_addr().map_err(|e| e.to_string())?.port())
}
