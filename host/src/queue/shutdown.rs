//! Stopping a queue: at once ([`WorkQueue::shutdown`]) or after handing out
//! what is pending ([`WorkQueue::shutdown_with_drain`]).

use std::future::Future;
use std::hash::Hash;
use std::sync::Arc;

use super::WorkQueue;

impl<K> WorkQueue<K>
where
    K: Clone + Eq + Hash + Send + Sync + 'static,
{
    /// Whether [`shutdown`](Self::shutdown) or [`shutdown_with_drain`](Self::shutdown_with_drain)
    /// was called.
    ///
    /// ```
    /// use std::time::Duration;
    /// use setpoint::queue::{Config, WorkQueue};
    ///
    /// let queue = WorkQueue::<u8>::new(Config::default());
    /// queue.shutdown();
    /// assert!(queue.is_shutting_down());
    /// ```
    #[must_use]
    pub fn is_shutting_down(&self) -> bool {
        self.inner.state().is_shutting_down()
    }

    /// Shuts down immediately: adds are ignored, pending and delayed keys are dropped, and every
    /// `get`, including those already waiting, returns `None`. Keys being processed may still be
    /// passed to `done`, which no longer requeues them. Idempotent; also ends a drain.
    ///
    /// ```
    /// use std::time::Duration;
    /// use setpoint::queue::{Config, WorkQueue};
    ///
    /// let queue = WorkQueue::new(Config::default());
    /// queue.add("dropped");
    /// queue.shutdown();
    /// queue.add("ignored");
    /// assert_eq!(queue.try_get(), None);
    /// ```
    pub fn shutdown(&self) {
        let drained = {
            let mut state = self.inner.state();
            state.shutdown(false);
            state.is_drained()
        };
        tracing::debug!(queue = %self.inner.name, "work queue shut down");
        self.inner.wake_getters.notify_waiters();
        if drained {
            self.inner.wake_drained.notify_waiters();
        }
    }

    /// Shuts down gracefully: from this call on (even if the returned future is never awaited)
    /// adds are ignored and delayed keys are dropped, while pending keys are still handed out
    /// and dirty keys still requeued on `done`. `get` returns `None` once nothing is ready and
    /// no processing key awaits a requeue. The returned future completes when nothing is ready
    /// or being processed; it never completes if workers stop calling `get`/`done` with keys
    /// left, so bound it with [`tokio::time::timeout`] and fall back to
    /// [`shutdown`](Self::shutdown).
    ///
    /// ```
    /// use std::time::Duration;
    /// use setpoint::queue::{Config, WorkQueue};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let queue = WorkQueue::new(Config::default());
    /// queue.add("last");
    /// let drained = queue.shutdown_with_drain();
    /// queue.add("ignored");
    /// let key = queue.get().await.unwrap();
    /// assert_eq!(key, "last", "pending keys are still handed out");
    /// queue.done(&key);
    /// tokio::time::timeout(Duration::from_secs(1), drained).await?;
    /// assert_eq!(queue.get().await, None);
    /// # Ok(()) }
    /// ```
    pub fn shutdown_with_drain(&self) -> impl Future<Output = ()> + Send + use<K> {
        self.inner.state().shutdown(true);
        tracing::debug!(queue = %self.inner.name, "work queue draining");
        self.inner.wake_getters.notify_waiters();
        let inner = Arc::clone(&self.inner);
        async move {
            loop {
                // `notify_waiters` reaches futures created before it even if not yet polled.
                let notified = inner.wake_drained.notified();
                if inner.state().is_drained() {
                    return;
                }
                notified.await;
            }
        }
    }
}
