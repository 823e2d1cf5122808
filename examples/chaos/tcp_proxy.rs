//! A TCP proxy that can be cut: while down it drops every open connection and closes each new
//! one as soon as it is accepted, so clients see the far side as unreachable.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// A running proxy (it lives as long as the process).
pub(crate) struct TcpProxy {
    pub(crate) addr: SocketAddr,
    up: Arc<AtomicBool>,
    generation: watch::Sender<u64>,
}

impl TcpProxy {
    /// Listens on `bind` (port 0 for any) and forwards to `upstream`.
    pub(crate) async fn start(bind: SocketAddr, upstream: SocketAddr) -> std::io::Result<Self> {
        let listener = TcpListener::bind(bind).await?;
        let addr = listener.local_addr()?;
        let up = Arc::new(AtomicBool::new(true));
        let (generation, _) = watch::channel(0u64);
        let (up2, gen2) = (Arc::clone(&up), generation.clone());
        tokio::spawn(async move {
            while let Ok((downstream, _)) = listener.accept().await {
                if !up2.load(Ordering::SeqCst) {
                    drop(downstream);
                    continue;
                }
                let mut cut = gen2.subscribe();
                tokio::spawn(async move {
                    let _ = downstream.set_nodelay(true);
                    let Ok(mut far) = TcpStream::connect(upstream).await else {
                        return;
                    };
                    let _ = far.set_nodelay(true);
                    let mut near = downstream;
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut near, &mut far) => {}
                        _ = cut.changed() => {}
                    }
                });
            }
        });
        Ok(TcpProxy {
            addr,
            up,
            generation,
        })
    }

    /// Drops every connection and refuses new ones until [`TcpProxy::restore`].
    pub(crate) fn cut(&self) {
        self.up.store(false, Ordering::SeqCst);
        self.generation.send_modify(|g| *g += 1);
    }

    /// Accepts connections again.
    pub(crate) fn restore(&self) {
        self.up.store(true, Ordering::SeqCst);
    }
}
