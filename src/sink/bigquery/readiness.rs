//! Exactly-once readiness: the sink is ready while every partition's writer is.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// The sink's readiness: false while any partition's writer reports itself unhealthy. Each
/// writer retries inside a write, so a write stuck on an unreachable BigQuery shows only here.
pub(super) struct Readiness {
    pub(super) tx: Arc<tokio::sync::watch::Sender<bool>>,
    writers: Arc<Mutex<HashMap<u64, bool>>>,
    next: u64,
}

impl Readiness {
    pub(super) fn new() -> Self {
        Readiness {
            tx: Arc::new(tokio::sync::watch::channel(true).0),
            writers: Arc::default(),
            next: 0,
        }
    }

    /// Follows a writer's health until the writer is gone (inside a tokio runtime).
    pub(super) fn follow(&mut self, mut health: tokio::sync::watch::Receiver<bool>) {
        let id = self.next;
        self.next += 1;
        let (tx, writers) = (Arc::clone(&self.tx), Arc::clone(&self.writers));
        tokio::spawn(async move {
            loop {
                let ok = *health.borrow_and_update();
                Self::set(&tx, &writers, id, Some(ok));
                if health.changed().await.is_err() {
                    Self::set(&tx, &writers, id, None);
                    return;
                }
            }
        });
    }

    fn set(
        tx: &tokio::sync::watch::Sender<bool>,
        writers: &Mutex<HashMap<u64, bool>>,
        id: u64,
        ok: Option<bool>,
    ) {
        let mut w = writers.lock().unwrap_or_else(|e| e.into_inner());
        match ok {
            Some(ok) => w.insert(id, ok),
            None => w.remove(&id),
        };
        tx.send_replace(w.values().all(|ok| *ok));
    }
}

#[cfg(test)]
mod tests {
    use super::Readiness;
    use std::time::Duration;
    use tokio::sync::watch;

    async fn settled(rx: &mut watch::Receiver<bool>, want: bool) -> bool {
        tokio::time::timeout(Duration::from_secs(5), rx.wait_for(|v| *v == want))
            .await
            .is_ok()
    }

    #[tokio::test]
    async fn readiness_is_false_while_any_writer_is_unhealthy_and_forgets_closed_writers() {
        let mut r = Readiness::new();
        let mut ready = r.tx.subscribe();
        let (a_tx, a_rx) = watch::channel(true);
        let (b_tx, b_rx) = watch::channel(true);
        r.follow(a_rx);
        r.follow(b_rx);
        assert!(settled(&mut ready, true).await);
        b_tx.send_replace(false);
        assert!(
            settled(&mut ready, false).await,
            "one writer cannot reach BigQuery"
        );
        a_tx.send_replace(false);
        b_tx.send_replace(true);
        assert!(settled(&mut ready, false).await);
        a_tx.send_replace(true);
        assert!(settled(&mut ready, true).await, "all writers healthy again");
        a_tx.send_replace(false);
        assert!(settled(&mut ready, false).await);
        drop(a_tx); // the unhealthy writer was closed (partition revoked)
        assert!(
            settled(&mut ready, true).await,
            "a closed writer no longer counts"
        );
    }
}
