//! Where an informer's cache reads its objects back from: the store's
//! single-version reads ([`VersionReader`]) for one kind, with what the
//! cache needs of them (an object, its text, its index terms).

use std::sync::Arc;

use super::super::terms::Terms;
use crate::api::Api;
use crate::object::{KindInfo, Object, ObjectKey};
use crate::store::{KeyValue, VersionReader};

/// The store a cache reads its objects back from.
pub(in crate::informer) struct Source {
    reader: Arc<dyn VersionReader>,
    kind: Arc<KindInfo>,
    /// Whether a failed read was logged as a warning already (a closed or
    /// failed store fails every read; once is enough).
    warned: std::sync::atomic::AtomicBool,
}

impl Source {
    pub(in crate::informer) fn new(reader: Arc<dyn VersionReader>, kind: Arc<KindInfo>) -> Self {
        Self {
            reader,
            kind,
            warned: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// The object `key` as stored at `revision`; `None` if that version
    /// is gone (a later write replaced it and history was compacted past
    /// it: the watch is about to tell the change).
    pub(super) fn read(&self, key: &ObjectKey, revision: i64) -> Option<KeyValue> {
        let store_key = self.store_key(key);
        self.logged(&store_key, self.reader.read_version(&store_key, revision))
    }

    /// The live version of `key`, decoded: what a reader gets of an
    /// object whose cached version is gone ([`Source::read`]).
    pub(super) fn live(&self, key: &ObjectKey) -> Option<Arc<Object>> {
        let store_key = self.store_key(key);
        let kv = self.logged(&store_key, self.reader.read_current(&store_key))?;
        Api::decode(&kv).ok().map(Arc::new)
    }

    /// The kind its objects are of.
    pub(super) fn kind(&self) -> &KindInfo {
        &self.kind
    }

    fn store_key(&self, key: &ObjectKey) -> String {
        Api::key(&self.kind, key.namespace.as_deref(), &key.name)
    }

    /// The read's value; a store that cannot be read is logged, once as a
    /// warning (a closed or failed store fails every read).
    fn logged(
        &self,
        store_key: &str,
        read: crate::store::Result<Option<KeyValue>>,
    ) -> Option<KeyValue> {
        read.unwrap_or_else(|err| {
            if self.warned.swap(true, std::sync::atomic::Ordering::Relaxed) {
                tracing::debug!(key = %store_key, %err, "informer cannot read a cached object back from the store");
            } else {
                tracing::warn!(key = %store_key, %err, "informer cannot read a cached object back from the store (further failures are logged at debug)");
            }
            None
        })
    }

    /// The text of `key` at `revision` as the API writes it.
    pub(super) fn text(&self, key: &ObjectKey, revision: i64) -> Option<Vec<u8>> {
        let kv = self.read(key, revision)?;
        let mut text = Vec::with_capacity(kv.value.len() + 40);
        Api::write_stored(&kv, &mut text).ok()?;
        Some(text)
    }

    /// What the indexes hold of `key` at `revision`, read from the bytes
    /// as stored (no text written for it).
    pub(super) fn terms(&self, key: &ObjectKey, revision: i64) -> Option<Terms> {
        Terms::of_stored(&self.read(key, revision)?.value, revision)
    }

    /// The object `key` at `revision`, decoded.
    pub(super) fn object(&self, key: &ObjectKey, revision: i64) -> Option<Object> {
        Api::decode(&self.read(key, revision)?).ok()
    }

    /// The revision up to which the store reads every write.
    pub(super) fn readable(&self) -> i64 {
        self.reader.readable()
    }
}
