//! [`Subscription`]: one subscriber's stream of changes under a prefix,
//! first from the hub's history (the backlog), then from its broadcast.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::broadcast;

use super::{Error, Event, WatchHub};
use crate::store::Revision;

/// A stream of changes under one prefix; see the module docs.
///
/// ```
/// use std::sync::Arc;
/// use setpoint::store::{Backend, Condition, MemoryBackend};
/// use setpoint::watch::{EventType, WatchHub};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let store = Arc::new(MemoryBackend::new());
/// let hub = WatchHub::start(store.clone(), 16).await?;
///
/// let mut changes = hub.subscribe("/", 0)?;
/// store.put("/k", b"{}".to_vec(), Condition::Any).await?;
/// let event = changes.next().await?;
/// assert_eq!(changes.revision(), event.revision);
/// # Ok(()) }
/// ```
pub struct Subscription {
    // Filled in by `WatchHub::subscribe`.
    pub(super) epoch: Arc<AtomicU64>,
    pub(super) subscribed_in: u64,
    pub(super) prefix: String,
    pub(super) backlog: VecDeque<Arc<Event>>,
    pub(super) receiver: broadcast::Receiver<Arc<Event>>,
    pub(super) after: Revision,
    pub(super) last_seen: Revision,
    /// For the oldest revision the hub still holds, when this subscriber
    /// is cut off (not kept alive by it).
    pub(super) hub: std::sync::Weak<super::Inner>,
}

impl Subscription {
    /// The next change, or why there is none.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use setpoint::store::{Backend, Condition, MemoryBackend};
    /// use setpoint::watch::{EventType, WatchHub};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let store = Arc::new(MemoryBackend::new());
    /// let hub = WatchHub::start(store.clone(), 16).await?;
    ///
    /// let mut changes = hub.subscribe("/", 0)?;
    /// let writer = tokio::spawn({
    ///     let store = store.clone();
    ///     async move { store.put("/later", b"{}".to_vec(), Condition::Any).await }
    /// });
    /// assert_eq!(changes.next().await?.key, "/later", "waits for the next change");
    /// writer.await??;
    /// # Ok(()) }
    /// ```
    pub async fn next(&mut self) -> Result<Arc<Event>, Error> {
        if let Some(event) = self.backlog.pop_front() {
            self.after = event.revision;
            return Ok(event);
        }
        loop {
            match self.receiver.recv().await {
                Ok(event) => {
                    if self.epoch.load(Ordering::SeqCst) != self.subscribed_in {
                        return Err(Error::TooOldResourceVersion {
                            requested: self.after,
                            oldest: event.revision - 1,
                        });
                    }
                    self.last_seen = event.revision;
                    if event.revision <= self.after || !event.key.starts_with(&self.prefix) {
                        continue;
                    }
                    self.after = event.revision;
                    return Ok(event);
                }
                Err(broadcast::error::RecvError::Lagged(_)) => {
                    // The changes it missed are gone from the channel; the
                    // hub's history may still start after them.
                    let oldest = self.hub.upgrade().map_or(self.last_seen, |hub| {
                        hub.state.lock().unwrap_or_else(|p| p.into_inner()).oldest
                    });
                    return Err(Error::TooOldResourceVersion {
                        requested: self.after,
                        oldest: oldest.max(self.after + 1),
                    });
                }
                Err(broadcast::error::RecvError::Closed) => return Err(Error::Closed),
            }
        }
    }

    /// Whether this subscriber has fallen further behind than the hub keeps
    /// (its next read fails with [`Error::TooOldResourceVersion`]): for a
    /// reader that is itself waiting, on a slow client say, to notice
    /// without reading.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use setpoint::store::{Backend, Condition, MemoryBackend};
    /// use setpoint::watch::WatchHub;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let store = Arc::new(MemoryBackend::new());
    /// let hub = WatchHub::start(store.clone(), 4).await?;
    /// let slow = hub.subscribe("/", 0)?;
    /// for i in 0..8 {
    ///     store.put(&format!("/k{i}"), b"{}".to_vec(), Condition::Any).await?;
    /// }
    /// hub.wait_for(8).await;
    /// assert!(slow.fell_behind(&hub));
    /// # Ok(()) }
    /// ```
    pub fn fell_behind(&self, hub: &WatchHub) -> bool {
        self.receiver.len() > hub.max_lag()
    }

    /// How many bytes of objects (as stored) the hub has received that
    /// this subscriber has not read yet, to within about a MiB: changes
    /// under other prefixes count too, as the hub holds them for it all
    /// the same. For cutting off a subscriber that stopped reading while
    /// fat objects are written, long before it is [`Self::fell_behind`] in
    /// changes.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use setpoint::store::{Backend, Condition, MemoryBackend};
    /// use setpoint::watch::WatchHub;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let store = Arc::new(MemoryBackend::new());
    /// let hub = WatchHub::start(store.clone(), 1024).await?;
    /// let mut reader = hub.subscribe("/", 0)?;
    /// let idle = hub.subscribe("/", 0)?;
    /// for i in 0..4 {
    ///     let fat = format!(r#"{{"pad": "{}"}}"#, "x".repeat(1 << 20));
    ///     store.put(&format!("/k{i}"), fat.into_bytes(), Condition::Any).await?;
    /// }
    /// hub.wait_for(4).await;
    /// for _ in 0..4 {
    ///     reader.next().await?;
    /// }
    /// assert!(idle.bytes_behind(&hub) >= 3 << 20);
    /// assert_eq!(reader.bytes_behind(&hub), 0);
    /// # Ok(()) }
    /// ```
    pub fn bytes_behind(&self, hub: &WatchHub) -> u64 {
        // What it read past `after` (other prefixes) it does not hold.
        let read = if self.receiver.is_empty() && self.backlog.is_empty() {
            self.last_seen.max(self.after)
        } else {
            self.after
        };
        hub.written_since(read)
    }

    /// The revision of the last change delivered (or the starting point).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use setpoint::store::{Backend, Condition, MemoryBackend};
    /// use setpoint::watch::{EventType, WatchHub};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let store = Arc::new(MemoryBackend::new());
    /// let hub = WatchHub::start(store.clone(), 16).await?;
    ///
    /// let changes = hub.subscribe("/", 0)?;
    /// assert_eq!(changes.revision(), 0, "the starting point, before any change");
    /// # Ok(()) }
    /// ```
    pub fn revision(&self) -> Revision {
        self.after
    }

    /// The revision this subscriber has seen every change up to — the
    /// revision a bookmark may carry. It moves past `revision()` when the
    /// hub has seen changes under other prefixes and this subscriber has
    /// nothing left to read.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use setpoint::store::{Backend, Condition, MemoryBackend};
    /// use setpoint::watch::{EventType, WatchHub};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let store = Arc::new(MemoryBackend::new());
    /// let hub = WatchHub::start(store.clone(), 16).await?;
    ///
    /// let mut pods = hub.subscribe("/pods/", 0)?;
    /// store.put("/other/x", b"{}".to_vec(), Condition::Any).await?;
    /// hub.wait_for(1).await;
    /// assert_eq!(pods.progress(&hub), 0, "a change is still unread");
    /// // Reading skips the change under another prefix and finds nothing more.
    /// let idle = tokio::time::timeout(std::time::Duration::from_millis(10), pods.next()).await;
    /// assert!(idle.is_err());
    /// assert_eq!(pods.revision(), 0, "nothing delivered");
    /// assert_eq!(pods.progress(&hub), 1, "but nothing missed up to 1: a bookmark may say so");
    /// # Ok(()) }
    /// ```
    pub fn progress(&self, hub: &WatchHub) -> Revision {
        if !self.backlog.is_empty() {
            return self.after;
        }
        // Publishing sends under the state lock, so under it the channel
        // length and the hub's last revision are consistent.
        let state = hub.lock();
        if self.receiver.is_empty() {
            self.after.max(state.last)
        } else {
            self.after
        }
    }
}
