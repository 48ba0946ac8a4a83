//! `OverlayBackend`: a [`Backend`] whose writes land in memory on top of
//! another backend, which is only ever read. It is what a plan
//! (`crate::plan`) runs the object API and the controllers over: every
//! write is answered as the real store would answer it (the same
//! conditions, conflicts and not-founds, a full disk's refusal), later reads
//! see it, and the store below never changes and no watcher of it wakes.
//!
//! The overlay keeps the changes it took in order ([`OverlayBackend::take_changes`])
//! for whoever plays the role of the watch, and can list what differs from
//! the store below ([`OverlayBackend::changed_keys`]).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;

use super::{
    Backend, Condition, Deleted, Error, EventKind, Fence, KeyValue, Range, RangeResult, Result,
    Revision, WatchEvent, WatchStream,
};

/// Writes kept in memory over a backend that is only read.
///
/// Revisions continue from the store's current revision when the overlay
/// was made, one per write, so the answers look like the store's own.
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// use std::sync::Arc;
/// use setpoint::store::{Backend, Condition, Error, MemoryBackend, OverlayBackend};
///
/// let store = Arc::new(MemoryBackend::new());
/// store.put("/a", b"1".to_vec(), Condition::Absent).await.unwrap();
/// let overlay = OverlayBackend::new(store.clone()).await.unwrap();
///
/// // Writes are answered as the store would answer them, and read back …
/// let err = overlay.put("/a", b"2".to_vec(), Condition::Absent).await.unwrap_err();
/// assert!(matches!(err, Error::Conflict { .. }));
/// overlay.put("/a", b"2".to_vec(), Condition::ModRevision(1)).await.unwrap();
/// overlay.put("/b", b"3".to_vec(), Condition::Absent).await.unwrap();
/// assert_eq!(&*overlay.get("/a").await.unwrap().unwrap().value, b"2");
/// overlay.delete("/a", Condition::Any).await.unwrap();
/// assert!(overlay.get("/a").await.unwrap().is_none());
/// assert_eq!(overlay.changed_keys(), ["/a", "/b"]);
///
/// // … while the store below is untouched.
/// assert_eq!(store.current_revision().await.unwrap(), 1);
/// assert_eq!(&*store.get("/a").await.unwrap().unwrap().value, b"1");
/// # });
/// ```
pub struct OverlayBackend {
    base: Arc<dyn Backend>,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// What the overlay holds for a key: its value, or `None` once deleted.
    entries: BTreeMap<String, Option<KeyValue>>,
    /// The last revision the overlay answered with.
    revision: Revision,
    /// Changes not yet taken by [`OverlayBackend::take_changes`].
    changes: Vec<WatchEvent>,
}

impl OverlayBackend {
    /// An empty overlay over `base`, continuing from its current revision.
    pub async fn new(base: Arc<dyn Backend>) -> Result<Self> {
        let revision = base.current_revision().await?;
        Ok(Self {
            base,
            state: Mutex::new(State {
                revision,
                ..State::default()
            }),
        })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The changes made since the last call, oldest first, as a watch of
    /// the overlay would deliver them.
    pub fn take_changes(&self) -> Vec<WatchEvent> {
        std::mem::take(&mut self.state().changes)
    }

    /// Every key the overlay wrote or deleted, in key order.
    pub fn changed_keys(&self) -> Vec<String> {
        self.state().entries.keys().cloned().collect()
    }

    /// What the overlay holds for `key`: `None` when it never wrote it,
    /// `Some(None)` when it deleted it.
    pub fn entry(&self, key: &str) -> Option<Option<KeyValue>> {
        self.state().entries.get(key).cloned()
    }

    /// What the overlay holds for every key under `prefix`, in key order
    /// (`None`: deleted).
    pub fn entries_under(&self, prefix: &str) -> Vec<(String, Option<KeyValue>)> {
        self.state()
            .entries
            .range::<str, _>((
                std::ops::Bound::Included(prefix),
                std::ops::Bound::Unbounded,
            ))
            .take_while(|(k, _)| k.starts_with(prefix))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    /// What the store below holds for `key` (the value before the overlay).
    pub async fn base_get(&self, key: &str) -> Result<Option<KeyValue>> {
        self.base.get(key).await
    }

    /// The key's current value: the overlay's, else the store's.
    async fn current(&self, key: &str) -> Result<Option<KeyValue>> {
        if let Some(entry) = self.state().entries.get(key) {
            return Ok(entry.clone());
        }
        self.base.get(key).await
    }

    async fn write(
        &self,
        key: &str,
        value: Option<Vec<u8>>,
        condition: Condition,
    ) -> Result<(Option<KeyValue>, Revision, Option<KeyValue>)> {
        // A store that cannot take writes refuses them here too: the plan
        // shows what the real write would meet.
        self.base.writable()?;
        let current = self.current(key).await?;
        let mut state = self.state();
        // The base read and the overlay's entry may have raced another
        // write of the overlay: decide on the overlay's latest.
        let current = match state.entries.get(key) {
            Some(entry) => entry.clone(),
            None => current,
        };
        condition.check(key, current.as_ref().map(|kv| kv.mod_revision))?;
        if value.is_none() && current.is_none() {
            return Err(Error::NotFound {
                key: key.to_owned(),
            });
        }
        state.revision += 1;
        let revision = state.revision;
        let next = value.map(|value| KeyValue {
            key: key.to_owned(),
            value: value.into(),
            create_revision: current.as_ref().map_or(revision, |kv| kv.create_revision),
            mod_revision: revision,
        });
        state.entries.insert(key.to_owned(), next.clone());
        let event = match (&next, &current) {
            (Some(kv), _) => WatchEvent {
                kind: EventKind::Put,
                kv: kv.clone(),
                created: current.is_none(),
            },
            (None, Some(prev)) => WatchEvent {
                kind: EventKind::Delete,
                kv: KeyValue {
                    mod_revision: revision,
                    ..prev.clone()
                },
                created: false,
            },
            (None, None) => unreachable!("checked above"),
        };
        state.changes.push(event);
        Ok((next, revision, current))
    }
}

#[async_trait]
impl Backend for OverlayBackend {
    async fn get(&self, key: &str) -> Result<Option<KeyValue>> {
        self.current(key).await
    }

    async fn range(&self, range: Range) -> Result<RangeResult> {
        // The store below is read at its latest revision: the overlay's
        // revisions are its own, not the store's.
        let base = self
            .base
            .range(Range {
                revision: None,
                ..range.clone()
            })
            .await?;
        let state = self.state();
        // Overlay keys up to the last key of the store's page belong in
        // this page (all of them when the store had no more).
        let upper = base
            .kvs
            .last()
            .filter(|_| base.more)
            .map(|kv| kv.key.clone());
        let mut merged: BTreeMap<String, KeyValue> = base
            .kvs
            .into_iter()
            .map(|kv| (kv.key.clone(), kv))
            .collect();
        use std::ops::Bound;
        let start = match range.start_after.as_deref() {
            Some(after) if after >= range.prefix.as_str() => Bound::Excluded(after),
            _ => Bound::Included(range.prefix.as_str()),
        };
        for (key, entry) in state
            .entries
            .range::<str, _>((start, Bound::Unbounded))
            .take_while(|(k, _)| k.starts_with(&range.prefix))
            .take_while(|(k, _)| upper.as_ref().is_none_or(|u| k.as_str() <= u.as_str()))
        {
            match entry {
                Some(kv) => {
                    merged.insert(key.clone(), kv.clone());
                }
                None => {
                    merged.remove(key);
                }
            }
        }
        let mut kvs: Vec<KeyValue> = merged.into_values().collect();
        let mut more = base.more;
        if range.limit > 0 && kvs.len() > range.limit {
            kvs.truncate(range.limit);
            more = true;
        }
        Ok(RangeResult {
            kvs,
            more,
            revision: state.revision,
        })
    }

    async fn put(&self, key: &str, value: Vec<u8>, condition: Condition) -> Result<KeyValue> {
        let (next, _, _) = self.write(key, Some(value), condition).await?;
        Ok(next.expect("a put leaves a value"))
    }

    async fn delete(&self, key: &str, condition: Condition) -> Result<Deleted> {
        let (_, revision, prev) = self.write(key, None, condition).await?;
        Ok(Deleted {
            revision,
            prev: prev.expect("a delete removes a value"),
        })
    }

    async fn current_revision(&self) -> Result<Revision> {
        Ok(self.state().revision)
    }

    async fn compact(&self, _revision: Revision) -> Result<()> {
        Ok(())
    }

    async fn watch(&self, _after: Revision) -> Result<WatchStream> {
        // Nothing watches an overlay: its changes are taken with
        // `take_changes`. A stream that ends at once says so.
        let (_tx, rx) = tokio::sync::mpsc::channel(1);
        Ok(rx)
    }

    async fn put_fenced(
        &self,
        key: &str,
        value: Vec<u8>,
        condition: Condition,
        _fence: &Fence,
    ) -> Result<KeyValue> {
        self.put(key, value, condition).await
    }

    async fn delete_fenced(
        &self,
        key: &str,
        condition: Condition,
        _fence: &Fence,
    ) -> Result<Deleted> {
        self.delete(key, condition).await
    }

    fn writable(&self) -> Result<()> {
        self.base.writable()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::MemoryBackend;

    async fn store_with(keys: &[&str]) -> Arc<MemoryBackend> {
        let store = Arc::new(MemoryBackend::new());
        for key in keys {
            store
                .put(key, key.as_bytes().to_vec(), Condition::Absent)
                .await
                .unwrap();
        }
        store
    }

    fn keys(result: &RangeResult) -> Vec<&str> {
        result.kvs.iter().map(|kv| kv.key.as_str()).collect()
    }

    #[tokio::test]
    async fn ranges_merge_the_overlay_into_every_page_of_the_store() {
        let store = store_with(&["/r/a", "/r/c", "/r/e", "/r/g", "/x/z"]).await;
        let overlay = OverlayBackend::new(store.clone()).await.unwrap();
        overlay
            .put("/r/b", vec![], Condition::Absent)
            .await
            .unwrap();
        overlay
            .put("/r/f", vec![], Condition::Absent)
            .await
            .unwrap();
        overlay.delete("/r/c", Condition::Any).await.unwrap();
        overlay
            .put("/r/h", vec![], Condition::Absent)
            .await
            .unwrap();

        let all = overlay
            .range(Range {
                prefix: "/r/".into(),
                ..Default::default()
            })
            .await
            .unwrap();
        assert_eq!(keys(&all), ["/r/a", "/r/b", "/r/e", "/r/f", "/r/g", "/r/h"]);
        assert!(!all.more);

        // Paged two at a time: every key once, in order, none lost.
        let mut paged = Vec::new();
        let mut start_after = None;
        loop {
            let page = overlay
                .range(Range {
                    prefix: "/r/".into(),
                    start_after: start_after.take(),
                    limit: 2,
                    revision: None,
                })
                .await
                .unwrap();
            assert!(page.kvs.len() <= 2);
            paged.extend(page.kvs.iter().map(|kv| kv.key.clone()));
            match page.kvs.last() {
                Some(last) if page.more => start_after = Some(last.key.clone()),
                _ => break,
            }
        }
        assert_eq!(paged, ["/r/a", "/r/b", "/r/e", "/r/f", "/r/g", "/r/h"]);
        assert_eq!(
            store.current_revision().await.unwrap(),
            5,
            "store untouched"
        );
    }

    #[tokio::test]
    async fn changes_are_kept_in_order_with_the_previous_value_on_delete() {
        let store = store_with(&["/a"]).await;
        let overlay = OverlayBackend::new(store).await.unwrap();
        overlay
            .put("/b", b"1".to_vec(), Condition::Absent)
            .await
            .unwrap();
        overlay
            .delete("/a", Condition::ModRevision(1))
            .await
            .unwrap();
        let changes = overlay.take_changes();
        assert_eq!(changes.len(), 2);
        assert_eq!(
            (changes[0].kind, changes[0].created),
            (EventKind::Put, true)
        );
        assert_eq!(changes[0].kv.mod_revision, 2);
        assert_eq!(changes[1].kind, EventKind::Delete);
        assert_eq!(&*changes[1].kv.value, b"/a", "the deleted key's last value");
        assert_eq!(changes[1].kv.mod_revision, 3);
        assert!(overlay.take_changes().is_empty(), "taken once");
        // A key deleted in the overlay is absent, and deleting it again is
        // the store's not-found.
        assert!(matches!(
            overlay.delete("/a", Condition::Any).await,
            Err(Error::NotFound { .. })
        ));
    }
}
