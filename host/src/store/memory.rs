//! The in-memory backend: the reference semantics of the [`Backend`]
//! contract, multi-version so that reads at a past revision and watches from
//! one work exactly as on durable backends. Nothing survives the process.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use tokio::sync::watch;

use super::pump::{self, WATCH_BUFFER};
use super::{
    Backend, Condition, Deleted, Error, EventKind, KeyValue, Range, RangeResult, Result, Revision,
    WatchEvent, WatchStream,
};

/// An in-memory, multi-version key-value store.
///
/// ```
/// # tokio_test_block_on(async {
/// use setpoint::store::{Backend, Condition, MemoryBackend};
/// let store = MemoryBackend::new();
/// let kv = store.put("/a", b"1".to_vec(), Condition::Absent).await.unwrap();
/// assert_eq!(kv.mod_revision, 1);
/// assert!(store.put("/a", b"2".to_vec(), Condition::Absent).await.is_err());
/// # });
/// # fn tokio_test_block_on<F: std::future::Future>(f: F) -> F::Output {
/// #     tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(f)
/// # }
/// ```
#[derive(Clone)]
pub struct MemoryBackend {
    inner: Arc<Inner>,
}

struct Inner {
    state: Mutex<State>,
    /// Carries the current revision; watchers wait on it.
    revision_tx: watch::Sender<Revision>,
}

#[derive(Default)]
struct State {
    revision: Revision,
    compacted: Revision,
    /// Every version of every key since compaction, oldest first.
    keys: BTreeMap<String, Vec<Version>>,
    /// Every change since compaction, in revision order.
    log: Vec<WatchEvent>,
}

#[derive(Clone)]
struct Version {
    mod_revision: Revision,
    create_revision: Revision,
    /// `None` marks a deletion.
    value: Option<Arc<[u8]>>,
}

impl Default for MemoryBackend {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryBackend {
    /// An empty store at revision 0.
    ///
    /// ```
    /// use setpoint::store::{Backend, MemoryBackend};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// assert_eq!(MemoryBackend::new().current_revision().await.unwrap(), 0);
    /// # }
    /// ```
    pub fn new() -> Self {
        let (revision_tx, _) = watch::channel(0);
        Self {
            inner: Arc::new(Inner {
                state: Mutex::new(State::default()),
                revision_tx,
            }),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave the maps half-written
        // (every mutation is a push after all checks), so poisoning is ignored.
        self.inner.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl State {
    fn latest(&self, key: &str) -> Option<KeyValue> {
        let version = self.keys.get(key)?.last()?;
        version.to_kv(key)
    }

    fn check(&self, key: &str, condition: Condition) -> Result<Option<KeyValue>> {
        let current = self.latest(key);
        condition.check(key, current.as_ref().map(|kv| kv.mod_revision))?;
        Ok(current)
    }
}

impl Version {
    fn to_kv(&self, key: &str) -> Option<KeyValue> {
        Some(KeyValue {
            key: key.to_owned(),
            value: self.value.clone()?,
            create_revision: self.create_revision,
            mod_revision: self.mod_revision,
        })
    }
}

#[async_trait]
impl Backend for MemoryBackend {
    async fn get(&self, key: &str) -> Result<Option<KeyValue>> {
        Ok(self.state().latest(key))
    }

    async fn range(&self, range: Range) -> Result<RangeResult> {
        let state = self.state();
        let revision = match range.revision {
            None | Some(0) => state.revision,
            Some(rev) if rev <= state.compacted => {
                return Err(Error::Compacted {
                    requested: rev,
                    compacted: state.compacted,
                });
            }
            Some(rev) if rev > state.revision => {
                return Err(Error::FutureRevision {
                    requested: rev,
                    current: state.revision,
                });
            }
            Some(rev) => rev,
        };
        let start = match &range.start_after {
            Some(after) if after.as_str() >= range.prefix.as_str() => {
                std::ops::Bound::Excluded(after.clone())
            }
            _ => std::ops::Bound::Included(range.prefix.clone()),
        };
        let mut kvs = Vec::new();
        let mut more = false;
        for (key, versions) in state.keys.range((start, std::ops::Bound::Unbounded)) {
            if !key.starts_with(&range.prefix) {
                break;
            }
            let at = versions.iter().rev().find(|v| v.mod_revision <= revision);
            let Some(kv) = at.and_then(|v| v.to_kv(key)) else {
                continue;
            };
            if range.limit != 0 && kvs.len() == range.limit {
                more = true;
                break;
            }
            kvs.push(kv);
        }
        Ok(RangeResult {
            kvs,
            more,
            revision,
        })
    }

    async fn put(&self, key: &str, value: Vec<u8>, condition: Condition) -> Result<KeyValue> {
        let kv = {
            let mut state = self.state();
            let current = state.check(key, condition)?;
            state.revision += 1;
            let revision = state.revision;
            let kv = KeyValue {
                key: key.to_owned(),
                value: value.into(),
                create_revision: current.as_ref().map_or(revision, |c| c.create_revision),
                mod_revision: revision,
            };
            state.keys.entry(key.to_owned()).or_default().push(Version {
                mod_revision: revision,
                create_revision: kv.create_revision,
                value: Some(kv.value.clone()),
            });
            state.log.push(WatchEvent {
                kind: EventKind::Put,
                kv: kv.clone(),
                created: current.is_none(),
            });
            kv
        };
        self.inner.revision_tx.send_replace(kv.mod_revision);
        Ok(kv)
    }

    async fn delete(&self, key: &str, condition: Condition) -> Result<Deleted> {
        let deleted = {
            let mut state = self.state();
            let Some(prev) = state.check(key, condition)? else {
                return Err(Error::NotFound {
                    key: key.to_owned(),
                });
            };
            state.revision += 1;
            let revision = state.revision;
            state.keys.entry(key.to_owned()).or_default().push(Version {
                mod_revision: revision,
                create_revision: 0,
                value: None,
            });
            state.log.push(WatchEvent {
                kind: EventKind::Delete,
                kv: KeyValue {
                    mod_revision: revision,
                    ..prev.clone()
                },
                created: false,
            });
            Deleted { revision, prev }
        };
        self.inner.revision_tx.send_replace(deleted.revision);
        Ok(deleted)
    }

    async fn current_revision(&self) -> Result<Revision> {
        Ok(self.state().revision)
    }

    async fn compact(&self, revision: Revision) -> Result<()> {
        let mut state = self.state();
        if revision > state.revision {
            return Err(Error::FutureRevision {
                requested: revision,
                current: state.revision,
            });
        }
        if revision <= state.compacted {
            return Ok(());
        }
        state.compacted = revision;
        state.keys.retain(|_, versions| {
            // Keep the newest version at or before the compaction point (reads
            // at later revisions need it) unless it is a deletion.
            let keep_from = versions
                .iter()
                .rposition(|v| v.mod_revision <= revision)
                .unwrap_or(0);
            versions.drain(..keep_from);
            if versions
                .first()
                .is_some_and(|v| v.mod_revision <= revision && v.value.is_none())
            {
                versions.remove(0);
            }
            !versions.is_empty()
        });
        let cut = state.log.partition_point(|e| e.revision() <= revision);
        state.log.drain(..cut);
        Ok(())
    }

    async fn watch(&self, after: Revision) -> Result<WatchStream> {
        {
            let state = self.state();
            if after < state.compacted {
                return Err(Error::Compacted {
                    requested: after,
                    compacted: state.compacted,
                });
            }
        }
        let backend = self.clone();
        // Subscribed before the first read, so that no commit is missed.
        let revisions = self.inner.revision_tx.subscribe();
        Ok(pump::spawn(after, revisions, move |last| {
            let state = backend.state();
            let events = if last < state.compacted {
                Err(Error::Compacted {
                    requested: last,
                    compacted: state.compacted,
                })
            } else {
                let from = state.log.partition_point(|e| e.revision() <= last);
                Ok(state.log[from..]
                    .iter()
                    .take(WATCH_BUFFER)
                    .cloned()
                    .collect())
            };
            std::future::ready(events)
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kv(store: &MemoryBackend, key: &str, val: &str) -> KeyValue {
        futures_block(store.put(key, val.as_bytes().to_vec(), Condition::Any)).unwrap()
    }

    fn futures_block<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(f)
    }

    #[tokio::test]
    async fn revisions_are_gap_free_and_conditions_are_checked() {
        let store = MemoryBackend::new();
        let a = store
            .put("/a", b"1".to_vec(), Condition::Absent)
            .await
            .unwrap();
        assert_eq!((a.create_revision, a.mod_revision), (1, 1));
        let err = store
            .put("/a", b"x".to_vec(), Condition::Absent)
            .await
            .unwrap_err();
        assert!(matches!(
            err,
            Error::Conflict {
                actual: Some(1),
                ..
            }
        ));
        let err = store
            .put("/a", b"x".to_vec(), Condition::ModRevision(7))
            .await
            .unwrap_err();
        assert!(matches!(
            err,
            Error::Conflict {
                expected: Some(7),
                actual: Some(1),
                ..
            }
        ));
        let a2 = store
            .put("/a", b"2".to_vec(), Condition::ModRevision(1))
            .await
            .unwrap();
        assert_eq!((a2.create_revision, a2.mod_revision), (1, 2));
        let del = store.delete("/a", Condition::ModRevision(2)).await.unwrap();
        assert_eq!(del.revision, 3);
        assert!(matches!(
            store.delete("/a", Condition::Any).await,
            Err(Error::NotFound { .. })
        ));
        assert_eq!(store.current_revision().await.unwrap(), 3);
    }

    #[tokio::test]
    async fn range_reads_a_past_revision_with_pagination() {
        let store = MemoryBackend::new();
        for i in 0..5 {
            store
                .put(&format!("/p/{i}"), vec![i], Condition::Any)
                .await
                .unwrap();
        }
        store.put("/q/x", vec![9], Condition::Any).await.unwrap();
        store.delete("/p/0", Condition::Any).await.unwrap();
        let page = store
            .range(Range {
                prefix: "/p/".into(),
                limit: 2,
                revision: Some(5),
                ..Range::default()
            })
            .await
            .unwrap();
        assert_eq!(page.revision, 5);
        assert_eq!(
            page.kvs.iter().map(|k| k.key.as_str()).collect::<Vec<_>>(),
            ["/p/0", "/p/1"]
        );
        assert!(page.more);
        let rest = store
            .range(Range {
                prefix: "/p/".into(),
                start_after: Some("/p/1".into()),
                revision: Some(5),
                ..Range::default()
            })
            .await
            .unwrap();
        assert_eq!(rest.kvs.len(), 3);
        assert!(!rest.more);
        let now = store
            .range(Range {
                prefix: "/p/".into(),
                ..Range::default()
            })
            .await
            .unwrap();
        assert_eq!(
            now.kvs.len(),
            4,
            "the delete is visible at the current revision"
        );
    }

    #[tokio::test]
    async fn compaction_removes_old_revisions_but_keeps_current_state() {
        let store = MemoryBackend::new();
        kv_async(&store, "/a", "1").await;
        kv_async(&store, "/a", "2").await;
        kv_async(&store, "/b", "1").await;
        store.delete("/b", Condition::Any).await.unwrap();
        store.compact(3).await.unwrap();
        let err = store
            .range(Range {
                prefix: "/".into(),
                revision: Some(2),
                ..Range::default()
            })
            .await
            .unwrap_err();
        assert!(matches!(
            err,
            Error::Compacted {
                requested: 2,
                compacted: 3
            }
        ));
        assert!(matches!(store.watch(1).await, Err(Error::Compacted { .. })));
        let all = store
            .range(Range {
                prefix: "/".into(),
                ..Range::default()
            })
            .await
            .unwrap();
        assert_eq!(all.kvs.len(), 1);
        assert_eq!(&*all.kvs[0].value, b"2");
    }

    async fn kv_async(store: &MemoryBackend, key: &str, val: &str) -> KeyValue {
        store
            .put(key, val.as_bytes().to_vec(), Condition::Any)
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn watch_replays_history_then_follows_live_writes_in_order() {
        let store = MemoryBackend::new();
        kv_async(&store, "/a", "1").await;
        kv_async(&store, "/b", "1").await;
        let mut watch = store.watch(1).await.unwrap();
        store.delete("/a", Condition::Any).await.unwrap();
        let revs: Vec<(Revision, EventKind)> = [
            watch.recv().await.unwrap().unwrap(),
            watch.recv().await.unwrap().unwrap(),
        ]
        .iter()
        .map(|e| (e.revision(), e.kind))
        .collect();
        assert_eq!(revs, [(2, EventKind::Put), (3, EventKind::Delete)]);
    }

    #[test]
    fn sync_helper_works_outside_a_runtime() {
        let store = MemoryBackend::new();
        assert_eq!(kv(&store, "/x", "y").mod_revision, 1);
    }
}
