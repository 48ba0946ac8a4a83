//! Object semantics, written once above any [`Backend`]: create, get, list,
//! update with a `resourceVersion` precondition, status update, merge patch
//! and delete with finalizers. Owns the rules Kubernetes clients rely on:
//! `uid` and `creationTimestamp` set by the host, `generation` bumped only by
//! spec changes, status written only through its sub-resource, no-op writes
//! suppressed, and a size limit per object.

mod error;
pub mod kinds;
mod list;
mod validate;

use std::sync::Arc;

use serde_json::{Value, json};

pub use error::{Cause, Error};
pub use kinds::KindRegistry;
pub use list::{ListOptions, ObjectList};

use crate::object::{KindInfo, Object, codec, meta, patch, time};
use crate::store::{self, Backend, Condition, KeyValue, Revision};
use crate::watch::WatchHub;

/// Result alias for object operations.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The largest encoded object accepted, as in Kubernetes (etcd's request limit).
pub const DEFAULT_MAX_OBJECT_BYTES: usize = 1536 * 1024;

/// Preconditions on a delete.
#[derive(Debug, Clone, Default)]
pub struct DeleteOptions {
    /// Delete only if the object is at this resource version.
    pub resource_version: Option<String>,
    /// Delete only if the object has this uid.
    pub uid: Option<String>,
}

/// The object API over one store. Cheap to clone.
#[derive(Clone)]
pub struct Api {
    backend: Arc<dyn Backend>,
    hub: WatchHub,
    kinds: KindRegistry,
    max_object_bytes: usize,
}

impl Api {
    /// Open the object API on a backend: start its watch hub and load the
    /// kinds registered by stored `CustomResourceDefinition`s.
    pub async fn open(backend: Arc<dyn Backend>) -> Result<Self> {
        let hub = WatchHub::start(backend.clone(), crate::watch::DEFAULT_HISTORY).await?;
        let api = Self {
            backend,
            hub,
            kinds: KindRegistry::with_builtins(),
            max_object_bytes: DEFAULT_MAX_OBJECT_BYTES,
        };
        let crd_kind = api.crd_kind();
        for crd in api.list(&crd_kind, &ListOptions::default()).await?.items {
            match kinds::kind_from_crd(&crd) {
                Ok(info) => api.kinds.insert(info),
                Err(err) => tracing::warn!(%err, "stored CustomResourceDefinition ignored"),
            }
        }
        Ok(api)
    }

    /// The registered kinds.
    pub fn kinds(&self) -> &KindRegistry {
        &self.kinds
    }

    /// The watch hub over this store.
    pub fn hub(&self) -> &WatchHub {
        &self.hub
    }

    /// The backend.
    pub fn backend(&self) -> &Arc<dyn Backend> {
        &self.backend
    }

    fn crd_kind(&self) -> Arc<KindInfo> {
        self.kinds
            .by_plural(kinds::CRD_GROUP, "customresourcedefinitions")
            .expect("built-in kind")
    }

    /// The store key prefix of a kind, optionally narrowed to one namespace.
    pub fn prefix(kind: &KindInfo, namespace: Option<&str>) -> String {
        let group = if kind.group.is_empty() {
            "core"
        } else {
            &kind.group
        };
        match namespace.filter(|_| kind.namespaced) {
            Some(ns) => format!("/registry/{group}/{}/{ns}/", kind.plural),
            None => format!("/registry/{group}/{}/", kind.plural),
        }
    }

    /// The store key of one object.
    pub fn key(kind: &KindInfo, namespace: Option<&str>, name: &str) -> String {
        let mut key = Self::prefix(kind, namespace);
        key.push_str(name);
        key
    }

    fn not_found(kind: &KindInfo, name: &str) -> Error {
        Error::NotFound {
            kind: kind.plural.clone(),
            name: name.to_owned(),
        }
    }

    fn conflict(kind: &KindInfo, name: &str, err: store::Error) -> Error {
        match err {
            store::Error::Conflict { .. } => Error::Conflict {
                kind: kind.plural.clone(),
                name: name.to_owned(),
                message: "the object has been modified; please apply your changes to the latest version and try again".into(),
            },
            other => Error::Store(other),
        }
    }

    fn decode(kv: &KeyValue) -> Result<Object> {
        codec::decode(&kv.value, kv.mod_revision)
            .map_err(|e| Error::Store(store::Error::Corrupt(format!("{}: {e}", kv.key))))
    }

    fn encode_checked(&self, object: &Object) -> Result<Vec<u8>> {
        let bytes = codec::encode(object);
        if bytes.len() > self.max_object_bytes {
            return Err(Error::TooLarge {
                size: bytes.len(),
                limit: self.max_object_bytes,
            });
        }
        Ok(bytes)
    }

    /// Create an object. The host sets `uid`, `creationTimestamp`,
    /// `generation` and `resourceVersion`; a namespaced object without a
    /// namespace goes to `default`.
    pub async fn create(&self, kind: &KindInfo, mut object: Object) -> Result<Object> {
        validate::for_create(kind, &mut object)?;
        let name = meta::name(&object).to_owned();
        let namespace = meta::namespace(&object).map(str::to_owned);
        {
            let m = meta::metadata_mut(&mut object);
            m.insert(
                "uid".into(),
                Value::String(uuid::Uuid::new_v4().to_string()),
            );
            m.insert(
                "creationTimestamp".into(),
                Value::String(time::now_rfc3339()),
            );
            m.insert("generation".into(), json!(1));
            m.remove("resourceVersion");
            m.remove("deletionTimestamp");
        }
        if self.is_crd(kind) {
            let info = kinds::kind_from_crd(&object)?;
            object["status"] = crd_status(&info);
            let bytes = self.encode_checked(&object)?;
            let kv = self
                .put_new(kind, namespace.as_deref(), &name, bytes)
                .await?;
            self.kinds.insert(info);
            return Self::decode(&kv);
        }
        if kind.status_subresource {
            // As in Kubernetes: status is set through its sub-resource only.
            if let Some(map) = object.as_object_mut() {
                map.remove("status");
            }
        }
        let bytes = self.encode_checked(&object)?;
        let kv = self
            .put_new(kind, namespace.as_deref(), &name, bytes)
            .await?;
        Self::decode(&kv)
    }

    async fn put_new(
        &self,
        kind: &KindInfo,
        namespace: Option<&str>,
        name: &str,
        bytes: Vec<u8>,
    ) -> Result<KeyValue> {
        let key = Self::key(kind, namespace, name);
        match self.backend.put(&key, bytes, Condition::Absent).await {
            Ok(kv) => Ok(kv),
            Err(store::Error::Conflict { .. }) => Err(Error::AlreadyExists {
                kind: kind.plural.clone(),
                name: name.to_owned(),
            }),
            Err(e) => Err(e.into()),
        }
    }

    fn is_crd(&self, kind: &KindInfo) -> bool {
        kind.group == kinds::CRD_GROUP && kind.plural == "customresourcedefinitions"
    }

    /// Read one object.
    pub async fn get(
        &self,
        kind: &KindInfo,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Object> {
        let kv = self.get_kv(kind, namespace, name).await?;
        Self::decode(&kv)
    }

    async fn get_kv(
        &self,
        kind: &KindInfo,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<KeyValue> {
        let namespace = validate::namespace_for(kind, namespace);
        self.backend
            .get(&Self::key(kind, namespace, name))
            .await?
            .ok_or_else(|| Self::not_found(kind, name))
    }

    /// Replace an object's spec and metadata. A `resourceVersion` in the
    /// object is a precondition; without one the update applies to whatever
    /// is stored. Status is kept as stored when the kind has a status
    /// sub-resource. An update that changes nothing writes nothing.
    pub async fn update(&self, kind: &KindInfo, object: Object) -> Result<Object> {
        let name = meta::name(&object).to_owned();
        let namespace = meta::namespace(&object).map(str::to_owned);
        let expected = validate::parse_resource_version(kind, &object)?;
        loop {
            let current_kv = self.get_kv(kind, namespace.as_deref(), &name).await?;
            let current = Self::decode(&current_kv)?;
            if let Some(rv) = expected
                && rv != current_kv.mod_revision
            {
                return Err(Self::conflict(
                    kind,
                    &name,
                    store::Error::Conflict {
                        key: current_kv.key.clone(),
                        expected: Some(rv),
                        actual: Some(current_kv.mod_revision),
                    },
                ));
            }
            let mut next = object.clone();
            validate::for_update(kind, &current, &mut next)?;
            if kind.status_subresource {
                match current.get("status") {
                    Some(status) => next["status"] = status.clone(),
                    None => {
                        if let Some(map) = next.as_object_mut() {
                            map.remove("status");
                        }
                    }
                }
            }
            match self.write_over(kind, &current_kv, &current, next).await {
                Err(Error::Conflict { .. }) if expected.is_none() => continue,
                other => return other,
            }
        }
    }

    /// Write only `.status` of an object; spec and metadata stay as stored.
    /// A `resourceVersion` in the object is a precondition.
    pub async fn update_status(&self, kind: &KindInfo, object: Object) -> Result<Object> {
        let name = meta::name(&object).to_owned();
        let namespace = meta::namespace(&object).map(str::to_owned);
        let expected = validate::parse_resource_version(kind, &object)?;
        let current_kv = self.get_kv(kind, namespace.as_deref(), &name).await?;
        if let Some(rv) = expected
            && rv != current_kv.mod_revision
        {
            return Err(Self::conflict(
                kind,
                &name,
                store::Error::Conflict {
                    key: current_kv.key.clone(),
                    expected: Some(rv),
                    actual: Some(current_kv.mod_revision),
                },
            ));
        }
        let current = Self::decode(&current_kv)?;
        let mut next = current.clone();
        match object.get("status") {
            Some(status) => next["status"] = status.clone(),
            None => {
                if let Some(map) = next.as_object_mut() {
                    map.remove("status");
                }
            }
        }
        self.write_over(kind, &current_kv, &current, next).await
    }

    /// Apply a JSON merge patch to an object, or to its status when `status`
    /// is true. Retries internally on conflicts unless the patch itself
    /// names a `resourceVersion`.
    pub async fn merge_patch(
        &self,
        kind: &KindInfo,
        namespace: Option<&str>,
        name: &str,
        patch_doc: &Value,
        status: bool,
    ) -> Result<Object> {
        if !patch_doc.is_object() {
            return Err(Error::BadRequest(
                "a merge patch must be a JSON object".into(),
            ));
        }
        let pinned = patch_doc["metadata"]["resourceVersion"].is_string();
        loop {
            let mut next = self.get(kind, namespace, name).await?;
            patch::merge(&mut next, patch_doc);
            let result = if status {
                self.update_status(kind, next).await
            } else {
                self.update(kind, next).await
            };
            match result {
                Err(Error::Conflict { .. }) if !pinned => continue,
                other => return other,
            }
        }
    }

    /// Compare-and-swap `next` over `current`, applying the rules every write
    /// shares: immutable metadata, generation on spec change, finalizers,
    /// no-op suppression.
    async fn write_over(
        &self,
        kind: &KindInfo,
        current_kv: &KeyValue,
        current: &Object,
        mut next: Object,
    ) -> Result<Object> {
        let name = meta::name(current).to_owned();
        {
            let cur_meta = current["metadata"].as_object().cloned().unwrap_or_default();
            let m = meta::metadata_mut(&mut next);
            for field in [
                "uid",
                "creationTimestamp",
                "deletionTimestamp",
                "namespace",
                "name",
                "generation",
            ] {
                match cur_meta.get(field) {
                    Some(v) => m.insert(field.into(), v.clone()),
                    None => m.remove(field),
                };
            }
            m.remove("resourceVersion");
        }
        if meta::deletion_timestamp(current).is_some() {
            let before: std::collections::HashSet<&str> =
                meta::finalizers(current).into_iter().collect();
            if let Some(added) = meta::finalizers(&next)
                .into_iter()
                .find(|f| !before.contains(f))
            {
                return Err(Error::invalid(
                    &kind.kind,
                    &name,
                    "metadata.finalizers",
                    format!(
                        "no new finalizers can be added while the object is being deleted: {added}"
                    ),
                ));
            }
        }
        if spec_changed(current, &next) {
            meta::metadata_mut(&mut next)
                .insert("generation".into(), json!(meta::generation(current) + 1));
        }
        let mut current_cmp = current.clone();
        meta::metadata_mut(&mut current_cmp).remove("resourceVersion");
        if current_cmp == next {
            return Ok(current.clone());
        }
        if meta::deletion_timestamp(&next).is_some() && meta::finalizers(&next).is_empty() {
            // The last finalizer is gone: deletion completes now.
            let deleted = self
                .backend
                .delete(
                    &current_kv.key,
                    Condition::ModRevision(current_kv.mod_revision),
                )
                .await
                .map_err(|e| Self::conflict(kind, &name, e))?;
            meta::metadata_mut(&mut next).insert(
                "resourceVersion".into(),
                Value::String(deleted.revision.to_string()),
            );
            self.after_delete(kind, &next);
            return Ok(next);
        }
        if self.is_crd(kind) {
            self.kinds.insert(kinds::kind_from_crd(&next)?);
        }
        let bytes = self.encode_checked(&next)?;
        let kv = self
            .backend
            .put(
                &current_kv.key,
                bytes,
                Condition::ModRevision(current_kv.mod_revision),
            )
            .await
            .map_err(|e| Self::conflict(kind, &name, e))?;
        Self::decode(&kv)
    }

    /// Delete an object. With finalizers the object only gets a
    /// `deletionTimestamp` and goes away when the last finalizer is removed.
    /// Returns the object as it is after the call.
    pub async fn delete(
        &self,
        kind: &KindInfo,
        namespace: Option<&str>,
        name: &str,
        options: &DeleteOptions,
    ) -> Result<Object> {
        loop {
            let kv = self.get_kv(kind, namespace, name).await?;
            let current = Self::decode(&kv)?;
            if let Some(rv) = &options.resource_version
                && Some(rv.as_str()) != meta::resource_version(&current)
            {
                return Err(Error::Conflict {
                    kind: kind.plural.clone(),
                    name: name.to_owned(),
                    message: format!(
                        "precondition failed: resourceVersion {rv}, stored {}",
                        kv.mod_revision
                    ),
                });
            }
            if let Some(uid) = &options.uid
                && uid != meta::uid(&current)
            {
                return Err(Error::Conflict {
                    kind: kind.plural.clone(),
                    name: name.to_owned(),
                    message: format!(
                        "precondition failed: uid {uid}, stored {}",
                        meta::uid(&current)
                    ),
                });
            }
            if !meta::finalizers(&current).is_empty() {
                if meta::deletion_timestamp(&current).is_some() {
                    return Ok(current);
                }
                let mut next = current.clone();
                meta::metadata_mut(&mut next).insert(
                    "deletionTimestamp".into(),
                    Value::String(time::now_rfc3339()),
                );
                let bytes = self.encode_checked(&next)?;
                match self
                    .backend
                    .put(&kv.key, bytes, Condition::ModRevision(kv.mod_revision))
                    .await
                {
                    Ok(kv) => return Self::decode(&kv),
                    Err(store::Error::Conflict { .. }) => continue,
                    Err(e) => return Err(e.into()),
                }
            }
            match self
                .backend
                .delete(&kv.key, Condition::ModRevision(kv.mod_revision))
                .await
            {
                Ok(deleted) => {
                    let mut last = current;
                    meta::metadata_mut(&mut last).insert(
                        "resourceVersion".into(),
                        Value::String(deleted.revision.to_string()),
                    );
                    self.after_delete(kind, &last);
                    return Ok(last);
                }
                Err(store::Error::Conflict { .. }) => continue,
                Err(store::Error::NotFound { .. }) => return Err(Self::not_found(kind, name)),
                Err(e) => return Err(e.into()),
            }
        }
    }

    fn after_delete(&self, kind: &KindInfo, object: &Object) {
        if self.is_crd(kind)
            && let Ok(info) = kinds::kind_from_crd(object)
        {
            self.kinds.remove(&info.group, &info.plural);
        }
    }

    /// The revision of the last write to the store.
    pub async fn current_revision(&self) -> Result<Revision> {
        Ok(self.backend.current_revision().await?)
    }
}

/// Whether anything outside `metadata` and `status` differs.
fn spec_changed(current: &Object, next: &Object) -> bool {
    let fields = |o: &Object| -> Vec<(String, Value)> {
        o.as_object()
            .map(|m| {
                m.iter()
                    .filter(|(k, _)| !matches!(k.as_str(), "metadata" | "status"))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut a = fields(current);
    let mut b = fields(next);
    a.sort_by(|x, y| x.0.cmp(&y.0));
    b.sort_by(|x, y| x.0.cmp(&y.0));
    a != b
}

fn crd_status(info: &KindInfo) -> Value {
    let now = time::now_rfc3339();
    json!({
        "acceptedNames": {"kind": info.kind, "plural": info.plural, "singular": info.singular,
                          "shortNames": info.short_names, "listKind": info.list_kind},
        "storedVersions": [info.version],
        "conditions": [
            {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts",
             "message": "no conflicts found", "lastTransitionTime": now},
            {"type": "Established", "status": "True", "reason": "InitialNamesAccepted",
             "message": "the initial names have been accepted", "lastTransitionTime": now},
        ]
    })
}
