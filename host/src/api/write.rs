//! Create, update, status update and the narrow status patch (all but
//! create through one read-modify-write, `Api::modify`), and the rules
//! every write shares (`write_over`): immutable metadata, schema admission, generation on spec
//! change, finalizers during deletion, no-op suppression and the size
//! limit. Patches and apply are built on these (`patch`, `apply`); deletion
//! is `delete`'s.

use std::collections::HashSet;

use serde_json::{Value, json};

use super::{Api, Error, Result, crd, kinds, secret, validate};
use crate::object::{KindInfo, Object, meta, patch, time};
use crate::store::{self, Condition, KeyValue};

/// What a read-modify-write ([`Api::modify`]) puts over the stored object.
pub(crate) enum Next {
    /// A new object, as [`Api::update`] takes it: spec and metadata (and
    /// status, for a kind without a status sub-resource). Its
    /// `resourceVersion`, if any, is a precondition.
    Object(Object),
    /// A new `.status` (`None`: none), all else as stored, as
    /// [`Api::update_status`] takes it.
    Status {
        status: Option<Value>,
        /// The version the status was computed from, if it must be the
        /// stored one.
        resource_version: Option<i64>,
    },
}

/// Where a stored object is: its key and the revision of its last write,
/// the condition a write over it is made on.
#[derive(Debug, Clone, Copy)]
pub(super) struct At<'a> {
    pub key: &'a str,
    pub mod_revision: store::Revision,
}

impl<'a> From<&'a KeyValue> for At<'a> {
    fn from(kv: &'a KeyValue) -> Self {
        Self {
            key: &kv.key,
            mod_revision: kv.mod_revision,
        }
    }
}

/// Kubernetes' `maxGeneratedNameLength`: a generated name's prefix is cut
/// to this, leaving room for the suffix within a 63-character label.
const GENERATED_PREFIX_MAX: usize = 58;

/// How many generated names a create tries before reporting the clash
/// (kube-apiserver's `RetryGenerateName` tries 8).
const GENERATE_NAME_TRIES: usize = 8;

/// Five characters from Kubernetes' alphabet for generated names (no
/// vowels, no confusable digits).
fn random_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    uuid::Uuid::new_v4().as_bytes()[..5]
        .iter()
        .map(|b| ALPHABET[*b as usize % ALPHABET.len()] as char)
        .collect()
}

/// Metadata a write can never change: kept from the stored object.
const IMMUTABLE_METADATA: [&str; 7] = [
    "uid",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "namespace",
    "name",
    "generation",
];

impl Api {
    /// Create an object. The host sets `uid`, `creationTimestamp`,
    /// `generation` and `resourceVersion`; a namespaced object without a
    /// namespace goes to `default`. Objects of kinds with a schema are
    /// pruned, defaulted and validated first. An object without a name but
    /// with `metadata.generateName` is named as Kubernetes does: the prefix
    /// (cut to 58 characters) and five random characters, tried again with
    /// new ones on a clash (up to eight names).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use serde_json::json;
    /// use setpoint::api::Api;
    /// use setpoint::store::MemoryBackend;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let api = Api::open(Arc::new(MemoryBackend::new())).await?;
    /// let events = api.kinds().require("v1", "Event")?;
    /// let event = json!({"apiVersion": "v1", "kind": "Event", "metadata": {"generateName": "web-"}});
    /// let a = api.create(&events, event.clone()).await?;
    /// let b = api.create(&events, event).await?;
    /// let name = a["metadata"]["name"].as_str().unwrap();
    /// assert!(name.starts_with("web-") && name.len() == 9, "{name}");
    /// assert_ne!(a["metadata"]["name"], b["metadata"]["name"]);
    /// # Ok(()) }
    /// ```
    pub async fn create(&self, kind: &KindInfo, object: Object) -> Result<Object> {
        let prefix = match object["metadata"]["generateName"].as_str() {
            Some(prefix) if meta::name(&object).is_empty() && !prefix.is_empty() => prefix
                .chars()
                .take(GENERATED_PREFIX_MAX)
                .collect::<String>(),
            _ => return self.create_named(kind, object).await,
        };
        let mut attempt = 0;
        loop {
            let mut named = object.clone();
            meta::metadata_mut(&mut named).insert(
                "name".into(),
                Value::String(format!("{prefix}{}", random_suffix())),
            );
            match self.create_named(kind, named).await {
                Err(Error::AlreadyExists { .. }) if attempt + 1 < GENERATE_NAME_TRIES => {
                    attempt += 1;
                }
                other => return other,
            }
        }
    }

    async fn create_named(&self, kind: &KindInfo, mut object: Object) -> Result<Object> {
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
            for field in [
                "resourceVersion",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
            ] {
                m.remove(field);
            }
            if m.get("managedFields")
                .and_then(Value::as_array)
                .is_some_and(Vec::is_empty)
            {
                m.remove("managedFields");
            }
        }
        if self.is_crd(kind) {
            let info = kinds::kind_from_crd(&object)?;
            self.check_names_free(&info)?;
            object["status"] = crd_status(&info);
            let bytes = self.encode_checked(&object)?;
            let kv = self
                .put_new(kind, namespace.as_deref(), &name, bytes)
                .await?;
            if !self.dry_run {
                self.kinds.insert(info);
            }
            return Ok(self.created(object, &kv));
        }
        if kind.status_subresource {
            // As in Kubernetes: status is set through its sub-resource only.
            if let Some(map) = object.as_object_mut() {
                map.remove("status");
            }
        }
        if secret::is_secret(kind) {
            secret::prepare(None, &mut object)?;
        }
        self.admit(kind, &mut object)?;
        let bytes = self.encode_checked(&object)?;
        let kv = self
            .put_new(kind, namespace.as_deref(), &name, bytes)
            .await?;
        Ok(self.created(object, &kv))
    }

    /// The answer to a create that stored `object`'s encoding as `kv`: the
    /// stored object, or in a dry run the object as it would be stored,
    /// without a `resourceVersion` (none exists yet), as Kubernetes
    /// answers. `object` with the new revision is what decoding `kv` would
    /// give, without parsing it back (as `write_over` answers).
    fn created(&self, mut object: Object, kv: &KeyValue) -> Object {
        if !self.dry_run {
            meta::metadata_mut(&mut object).insert(
                "resourceVersion".into(),
                Value::String(kv.mod_revision.to_string()),
            );
        }
        object
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
                kind: Api::resource(kind),
                name: name.to_owned(),
            }),
            Err(e) => Err(e.into()),
        }
    }

    /// A definition's kind and list kind must not be served already under
    /// another resource of its group: with two, which resource an
    /// `apiVersion`/`kind` names would depend on a hash map's order (the
    /// garbage collector and owner lookups go by kind).
    fn check_names_free(&self, info: &KindInfo) -> Result<()> {
        let taken = self.kinds.all().into_iter().find(|other| {
            other.group == info.group
                && other.plural != info.plural
                && (other.kind == info.kind || other.list_kind == info.list_kind)
        });
        match taken {
            None => Ok(()),
            Some(other) => Err(Error::invalid(
                "CustomResourceDefinition",
                &format!("{}.{}", info.plural, info.group),
                "spec.names.kind",
                format!(
                    "{:?} is already in use by {}.{}: a kind and its list kind name one resource per group",
                    info.kind, other.plural, other.group
                ),
            )),
        }
    }

    /// Prune, default and validate against the kind's schema, if it has one.
    pub(super) fn admit(&self, kind: &KindInfo, object: &mut Object) -> Result<()> {
        let Some(schema) = self.kinds.schema_for(kind)? else {
            return Ok(());
        };
        schema
            .admit(object)
            .map_err(|errors| Error::invalid_fields(&kind.kind, meta::name(object), &errors))
    }

    /// Replace an object's spec and metadata. A `resourceVersion` in the
    /// object is a precondition; without one the update applies to whatever
    /// is stored. Status is kept as stored when the kind has a status
    /// sub-resource; `metadata.managedFields` is kept when the object has
    /// none. An update that changes nothing writes nothing.
    pub async fn update(&self, kind: &KindInfo, object: Object) -> Result<Object> {
        let name = meta::name(&object).to_owned();
        let namespace = meta::namespace(&object).map(str::to_owned);
        self.modify(kind, namespace.as_deref(), &name, |_| {
            Ok(Some(Next::Object(object.clone())))
        })
        .await
        .map(|written| written.expect("an update always writes"))
    }

    /// Write only `.status` of an object; spec and metadata stay as stored.
    /// A `resourceVersion` in the object is a precondition.
    pub async fn update_status(&self, kind: &KindInfo, object: Object) -> Result<Object> {
        let name = meta::name(&object).to_owned();
        let namespace = meta::namespace(&object).map(str::to_owned);
        let resource_version = validate::parse_resource_version(kind, &object)?;
        let status = object.get("status");
        self.modify(kind, namespace.as_deref(), &name, |_| {
            Ok(Some(Next::Status {
                status: status.cloned(),
                resource_version,
            }))
        })
        .await
        .map(|written| written.expect("a status update always writes"))
    }

    /// The narrow status write: merge `patch` into the stored object's
    /// `.status` (a JSON merge patch of the status sub-resource: `null`
    /// removes a field), nothing else. `resource_version`, when given, is a
    /// precondition: a status computed from an old object must not
    /// overwrite a newer one ([`Error::Conflict`] then). Without one, a
    /// concurrent write is retried over. A patch that changes nothing writes
    /// nothing and returns the stored object.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use serde_json::json;
    /// use setpoint::api::{Api, Error};
    /// use setpoint::object::meta;
    /// use setpoint::store::MemoryBackend;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let api = Api::open(Arc::new(MemoryBackend::new())).await?;
    /// let events = api.kinds().require("v1", "Event")?;
    /// let event = api.create(&events, json!({"apiVersion": "v1", "kind": "Event",
    ///     "metadata": {"name": "e", "namespace": "default"}})).await?;
    /// let seen = meta::resource_version(&event).map(str::to_owned);
    /// let patched = api.patch_status(&events, Some("default"), "e", seen.as_deref(),
    ///     &json!({"seen": true, "error": null})).await?;
    /// assert_eq!(patched["status"], json!({"seen": true}));
    /// // The version seen is gone now: a second patch made from it conflicts.
    /// let stale = api.patch_status(&events, Some("default"), "e", seen.as_deref(),
    ///     &json!({"seen": false})).await;
    /// assert!(matches!(stale, Err(Error::Conflict { .. })));
    /// # Ok(()) }
    /// ```
    pub async fn patch_status(
        &self,
        kind: &KindInfo,
        namespace: Option<&str>,
        name: &str,
        resource_version: Option<&str>,
        patch: &Value,
    ) -> Result<Object> {
        let resource_version = resource_version
            .map(|rv| {
                rv.parse::<i64>().map_err(|_| {
                    Error::invalid(
                        &kind.kind,
                        name,
                        "metadata.resourceVersion",
                        format!("{rv:?} is not a valid resource version"),
                    )
                })
            })
            .transpose()?;
        self.patch_status_with(kind, namespace, name, resource_version, |_| {
            Some(patch.clone())
        })
        .await
        .map(|written| written.expect("a status patch always writes"))
    }

    /// [`Api::patch_status`] with the patch computed from the stored object
    /// (again after a concurrent write), for a patch that replaces a list
    /// it must first read (conditions, say); `None` from `patch` writes
    /// nothing and returns `None`.
    pub(crate) async fn patch_status_with(
        &self,
        kind: &KindInfo,
        namespace: Option<&str>,
        name: &str,
        resource_version: Option<i64>,
        mut patch: impl FnMut(&Object) -> Option<Value>,
    ) -> Result<Option<Object>> {
        self.modify(kind, namespace, name, |current| {
            let Some(patch) = patch(current) else {
                return Ok(None);
            };
            let mut status = current.get("status").cloned().unwrap_or_else(|| json!({}));
            patch::merge(&mut status, &patch);
            Ok(Some(Next::Status {
                status: Some(status),
                resource_version,
            }))
        })
        .await
    }

    /// Writes `status` as the `.status` of `seen`, the stored object at its
    /// `metadata.resourceVersion` as an informer or a read returned it,
    /// without reading it again: the write is conditional on that version
    /// still being the stored one, so a write since is
    /// [`Error::Conflict`] and a deletion since [`Error::NotFound`], as
    /// [`Api::patch_status`] with that resource version would answer. A
    /// controller's status write thus costs no read and no decode of the
    /// object it reconciled (docs/benchmarks/scale.md, "A status written
    /// over the object seen"). Kinds whose stored form is not what a
    /// reader sees (Secrets), CRDs, and an object without a resource
    /// version take `patch_status`'s path.
    ///
    /// `seen` must not have been changed since it was read: its other
    /// fields are written back as they are. Returns what is stored and
    /// about how many bytes were written.
    pub(crate) async fn write_status_seen(
        &self,
        kind: &KindInfo,
        seen: &Object,
        status: Value,
    ) -> Result<(Object, usize)> {
        let name = meta::name(seen);
        let namespace = meta::namespace(seen);
        let version = meta::resource_version(seen).and_then(|rv| rv.parse::<i64>().ok());
        let Some(mod_revision) = version.filter(|_| !self.is_crd(kind) && !secret::is_secret(kind))
        else {
            let written = self
                .modify(kind, namespace, name, |_| {
                    Ok(Some(Next::Status {
                        status: Some(status.clone()),
                        resource_version: version,
                    }))
                })
                .await?;
            let written = written.expect("a status write always writes");
            let bytes = crate::object::shape::encoded_len(&written);
            return Ok((written, bytes));
        };
        let key = Self::key(kind, validate::namespace_for(kind, namespace), name);
        let at = At {
            key: &key,
            mod_revision,
        };
        let mut next = seen.clone();
        next["status"] = status;
        match self.write_over(kind, at, seen, next).await {
            // Changed or gone since: a read tells which.
            Err(conflict @ Error::Conflict { .. }) => {
                match self.get_kv(kind, namespace, name).await {
                    Err(gone @ Error::NotFound { .. }) => Err(gone),
                    _ => Err(conflict),
                }
            }
            other => other,
        }
    }

    /// The one read-modify-write every write of a stored object goes
    /// through: read it, let `change` say what replaces it (given the
    /// stored object; `None`: nothing, and `None` is returned), and
    /// compare-and-swap that over it with the rules of `write_over`. A
    /// concurrent write in between reads and asks `change` again; a
    /// `resourceVersion` precondition in `change`'s answer that the stored
    /// object no longer has is [`Error::Conflict`].
    pub(crate) async fn modify(
        &self,
        kind: &KindInfo,
        namespace: Option<&str>,
        name: &str,
        mut change: impl FnMut(&Object) -> Result<Option<Next>>,
    ) -> Result<Option<Object>> {
        loop {
            let current_kv = self.get_kv(kind, namespace, name).await?;
            let current = Self::decode(&current_kv)?;
            let Some(next) = change(&current)? else {
                return Ok(None);
            };
            let next = match next {
                Next::Object(mut next) => {
                    let expected = validate::parse_resource_version(kind, &next)?;
                    check_precondition(kind, name, expected, &current_kv)?;
                    validate::for_update(kind, &current, &mut next)?;
                    if kind.status_subresource {
                        copy_member(&current, &mut next, "status");
                    }
                    if !meta::metadata_mut(&mut next).contains_key("managedFields")
                        && let Some(managed) = current["metadata"].get("managedFields")
                    {
                        meta::metadata_mut(&mut next)
                            .insert("managedFields".into(), managed.clone());
                    }
                    next
                }
                Next::Status {
                    status,
                    resource_version,
                } => {
                    check_precondition(kind, name, resource_version, &current_kv)?;
                    let mut next = current.clone();
                    match status {
                        Some(status) => next["status"] = status,
                        None => {
                            if let Some(map) = next.as_object_mut() {
                                map.remove("status");
                            }
                        }
                    }
                    next
                }
            };
            match self
                .write_over(kind, At::from(&current_kv), &current, next)
                .await
            {
                // The next round reads again; a precondition fails there.
                Err(Error::Conflict { .. }) => continue,
                other => return other.map(|(object, _)| Some(object)),
            }
        }
    }

    /// Compare-and-swap `next` over `current`, applying the rules every write
    /// shares: immutable metadata, finalizers, schema, generation on spec
    /// change, no-op suppression, the size limit. Returns what is stored
    /// and the bytes written (0 when nothing was: no change, or the last
    /// finalizer gone and the object with it).
    pub(super) async fn write_over(
        &self,
        kind: &KindInfo,
        at: At<'_>,
        current: &Object,
        mut next: Object,
    ) -> Result<(Object, usize)> {
        let name = meta::name(current).to_owned();
        {
            let cur_meta = current["metadata"].as_object();
            let m = meta::metadata_mut(&mut next);
            for field in IMMUTABLE_METADATA {
                match cur_meta.and_then(|c| c.get(field)) {
                    Some(v) => m.insert(field.into(), v.clone()),
                    None => m.remove(field),
                };
            }
            m.remove("resourceVersion");
            if m.get("managedFields")
                .and_then(Value::as_array)
                .is_some_and(Vec::is_empty)
            {
                m.remove("managedFields");
            }
        }
        if meta::deletion_timestamp(current).is_some() {
            let before: HashSet<&str> = meta::finalizers(current).into_iter().collect();
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
            if meta::finalizers(&next).is_empty() {
                // The last finalizer is gone: deletion completes now.
                return Ok((self.remove_stored(kind, at, next).await?, 0));
            }
        }
        if self.is_crd(kind) {
            let problems = crd::check_update(current, &next);
            if !problems.is_empty() {
                return Err(Error::invalid_fields(&kind.kind, &name, &problems));
            }
        } else {
            if secret::is_secret(kind) {
                secret::prepare(Some(current), &mut next)?;
            }
            self.admit(kind, &mut next)?;
        }
        if spec_changed(current, &next) {
            meta::metadata_mut(&mut next)
                .insert("generation".into(), json!(meta::generation(current) + 1));
        }
        if same_but_resource_version(current, &next) {
            return Ok((current.clone(), 0));
        }
        let info = if self.is_crd(kind) {
            let info = kinds::kind_from_crd(&next)?;
            self.check_names_free(&info)?;
            Some(info)
        } else {
            None
        };
        let bytes = self.encode_checked(&next)?;
        let size = bytes.len();
        let kv = self
            .backend
            .put(at.key, bytes, Condition::ModRevision(at.mod_revision))
            .await
            .map_err(|e| Self::conflict(kind, &name, e))?;
        if let Some(info) = info
            && !self.dry_run
        {
            self.kinds.insert(info);
        }
        // What was stored is `next`'s encoding: `next` with the new revision
        // is what decoding it would give, without parsing it back.
        meta::metadata_mut(&mut next).insert(
            "resourceVersion".into(),
            Value::String(kv.mod_revision.to_string()),
        );
        Ok((next, size))
    }

    /// Delete the stored key if it is still at `at`'s revision;
    /// returns `last` with the deletion's resource version.
    pub(super) async fn remove_stored(
        &self,
        kind: &KindInfo,
        at: At<'_>,
        mut last: Object,
    ) -> Result<Object> {
        let name = meta::name(&last).to_owned();
        let deleted = self
            .backend
            .delete(at.key, Condition::ModRevision(at.mod_revision))
            .await
            .map_err(|e| match e {
                store::Error::NotFound { .. } => Self::not_found(kind, &name),
                other => Self::conflict(kind, &name, other),
            })?;
        meta::metadata_mut(&mut last).insert(
            "resourceVersion".into(),
            Value::String(deleted.revision.to_string()),
        );
        if self.is_crd(kind)
            && !self.dry_run
            && let Ok(info) = kinds::kind_from_crd(&last)
        {
            self.kinds.remove(&info.group, &info.plural);
        }
        Ok(last)
    }
}

/// A stale `resourceVersion` precondition is a conflict.
fn check_precondition(
    kind: &KindInfo,
    name: &str,
    expected: Option<i64>,
    current_kv: &KeyValue,
) -> Result<()> {
    match expected {
        Some(rv) if rv != current_kv.mod_revision => Err(Api::conflict(
            kind,
            name,
            store::Error::Conflict {
                key: current_kv.key.clone(),
                expected: Some(rv),
                actual: Some(current_kv.mod_revision),
            },
        )),
        _ => Ok(()),
    }
}

/// Make `to[member]` what `from[member]` is, absent included.
fn copy_member(from: &Object, to: &mut Object, member: &str) {
    match from.get(member) {
        Some(value) => to[member] = value.clone(),
        None => {
            if let Some(map) = to.as_object_mut() {
                map.remove(member);
            }
        }
    }
}

/// Whether anything outside `metadata` and `status` differs. Compares in
/// place: every write asks, and copying the spec to compare it showed in
/// the loop benchmark's profile.
fn spec_changed(current: &Object, next: &Object) -> bool {
    fn outside(o: &Object) -> impl Iterator<Item = (&String, &Value)> {
        o.as_object()
            .into_iter()
            .flatten()
            .filter(|(k, _)| !matches!(k.as_str(), "metadata" | "status"))
    }
    outside(current).count() != outside(next).count()
        || outside(current).any(|(k, v)| next.get(k) != Some(v))
}

/// Whether `next` (whose `resourceVersion` was removed) equals `current`
/// but for `current`'s `resourceVersion`: a write that would change
/// nothing. Compares in place rather than on a copy of `current`.
fn same_but_resource_version(current: &Object, next: &Object) -> bool {
    let (Some(c), Some(n)) = (current.as_object(), next.as_object()) else {
        return current == next;
    };
    let (Some(c_meta), Some(n_meta)) = (
        c.get("metadata").and_then(Value::as_object),
        n.get("metadata").and_then(Value::as_object),
    ) else {
        // Odd shapes: compare as the rule says, on a copy.
        let mut copy = current.clone();
        meta::metadata_mut(&mut copy).remove("resourceVersion");
        return copy == *next;
    };
    let c_meta_len = c_meta.len() - usize::from(c_meta.contains_key("resourceVersion"));
    c.len() == n.len()
        && c_meta_len == n_meta.len()
        && !n_meta.contains_key("resourceVersion")
        && c_meta
            .iter()
            .filter(|(k, _)| *k != "resourceVersion")
            .all(|(k, v)| n_meta.get(k) == Some(v))
        && c.iter()
            .filter(|(k, _)| *k != "metadata")
            .all(|(k, v)| n.get(k) == Some(v))
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
