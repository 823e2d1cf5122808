//! SIGTERM / SIGINT → a cancellation token every stage watches. The stages then stop intake,
//! flush, wait for acknowledgements and commit, bounded by the drain deadline.

use tokio_util::sync::CancellationToken;

/// Cancels `token` on the first SIGTERM or SIGINT.
pub async fn on_signal(token: CancellationToken) {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(e) => {
                tracing::error!(error = %e, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    tokio::select! {
        _ = term => tracing::info!("SIGTERM received: draining"),
        _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT received: draining"),
        _ = token.cancelled() => return,
    }
    token.cancel();
}
