//! Server-side apply, simplified: a field manager sends the fields it wants
//! set (a partial object); they are merged into the live object, the fields
//! each manager applied are recorded in `metadata.managedFields` (Kubernetes
//! shape, `operation: Apply`, `fieldsType: FieldsV1`), and changing a field
//! another manager applied with a different value is a conflict unless
//! forced. The ownership data and its encoding are `object::managed`'s.
//!
//! # Rules
//!
//! - A field is a path of map members to a scalar or a list; lists are
//!   owned whole (every list is treated as atomic). Maps only lead to
//!   fields: an empty map in the applied object is created if absent but
//!   owned by no one.
//! - Applying a value for a field that another manager owns with a
//!   different value is [`Error::ApplyConflict`] (409) naming each field and
//!   its manager. With `force` the fields move to the applying manager.
//!   Several managers applying the same value share the field.
//! - A field the manager applied before and omits now is removed from the
//!   object, unless another manager still owns it (or something inside it).
//! - Applying an unchanged configuration writes nothing.
//! - `apiVersion`, `kind`, the identity and system metadata (`name`,
//!   `namespace`, `uid`, `resourceVersion`, `generation`, timestamps,
//!   `managedFields`) are never owned; `status` is ignored when the kind has
//!   a status sub-resource. A `resourceVersion` in the applied object is a
//!   precondition.
//!
//! # Simplifications
//!
//! Only apply records ownership: creates, updates and patches leave
//! `managedFields` as they are (Kubernetes records them as `Update`
//! entries), so they neither own fields nor conflict with apply. Lists are
//! atomic (no `listType: map`/`set` merging). `null` in an applied object
//! means "not set". There is no apply to the status sub-resource.

use serde_json::{Map, Value};

use super::{Api, Error, FieldConflict, Result, validate};

/// The most `metadata.managedFields` entries an object may have: an apply
/// by yet another manager is refused (422) past it. Every apply reads and
/// rewrites every entry, so without a bound one client inventing a
/// manager per request makes each request, and the object, grow without
/// end (Kubernetes bounds its `Update` entries at 10 and the rest only by
/// the object's size).
pub const MAX_FIELD_MANAGERS: usize = 100;
use crate::object::managed::{self, FieldSet, ManagedFieldsEntry};
use crate::object::patch::json_equal;
use crate::object::{KindInfo, Object, meta, time};

/// Metadata members that are never owned (identity and system fields).
const SYSTEM_METADATA: [&str; 9] = [
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "managedFields",
];

impl Api {
    /// Server-side apply `object` as `field_manager` (see the module docs):
    /// create it if absent, else merge its fields into the live object.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use serde_json::json;
    /// use setpoint::api::{Api, Error};
    /// use setpoint::store::MemoryBackend;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let api = Api::open(Arc::new(MemoryBackend::new())).await?;
    /// let events = api.kinds().require("v1", "Event")?;
    /// let event = |name: &str| json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": name}});
    ///
    /// # let crds = api.kinds().require("apiextensions.k8s.io/v1", "CustomResourceDefinition")?;
    /// # api.create(&crds, json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    /// #     "metadata": {"name": "widgets.example.com"},
    /// #     "spec": {"group": "example.com", "scope": "Namespaced",
    /// #         "names": {"kind": "Widget", "plural": "widgets"},
    /// #         "versions": [{"name": "v1", "served": true, "storage": true, "subresources": {"status": {}},
    /// #             "schema": {"openAPIV3Schema": {"type": "object", "properties": {
    /// #                 "spec": {"type": "object", "properties": {"replicas": {"type": "integer"}, "image": {"type": "string"}}},
    /// #                 "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}}}]}})).await?;
    /// let widgets = api.kinds().require("example.com/v1", "Widget")?;
    ///
    /// let config = json!({"apiVersion": "example.com/v1", "kind": "Widget",
    ///     "metadata": {"name": "w"}, "spec": {"replicas": 2}});
    /// let created = api.apply(&widgets, config.clone(), "alice", false).await?;
    /// assert_eq!(created["metadata"]["managedFields"][0]["manager"], "alice");
    ///
    /// let mut theirs = config.clone();
    /// theirs["spec"]["replicas"] = json!(5);
    /// let err = api.apply(&widgets, theirs.clone(), "bob", false).await.unwrap_err();
    /// assert!(matches!(err, Error::ApplyConflict { .. }), "alice owns spec.replicas");
    /// let forced = api.apply(&widgets, theirs, "bob", true).await?;
    /// assert_eq!(forced["spec"]["replicas"], 5);
    /// # Ok(()) }
    /// ```
    pub async fn apply(
        &self,
        kind: &KindInfo,
        object: Object,
        field_manager: &str,
        force: bool,
    ) -> Result<Object> {
        if field_manager.is_empty() {
            return Err(Error::BadRequest(
                "a field manager is required for apply".into(),
            ));
        }
        let mut applied = object;
        validate::for_create(kind, &mut applied)?;
        let name = meta::name(&applied).to_owned();
        let namespace = meta::namespace(&applied).map(str::to_owned);
        let expected_rv = validate::parse_resource_version(kind, &applied)?;
        let expected_uid = Some(meta::uid(&applied).to_owned()).filter(|u| !u.is_empty());
        if kind.status_subresource
            && let Some(map) = applied.as_object_mut()
        {
            map.remove("status");
        }
        if let Some(schema) = self.kinds.schema_for(kind)? {
            schema.prune(&mut applied);
        }
        let config = configuration(&applied);
        let fields = FieldSet::leaves_of(&config);
        loop {
            let current = match self.get(kind, namespace.as_deref(), &name).await {
                Ok(current) => current,
                Err(Error::NotFound { .. }) if expected_rv.is_none() => {
                    let mut new = applied.clone();
                    let entry = entry_for(kind, field_manager, &fields);
                    meta::metadata_mut(&mut new).insert(
                        "managedFields".into(),
                        Value::Array(entry.into_iter().map(to_value).collect()),
                    );
                    match self.create(kind, new).await {
                        Err(Error::AlreadyExists { .. }) => continue,
                        other => return other,
                    }
                }
                Err(err) => return Err(err),
            };
            if let Some(rv) = expected_rv
                && meta::resource_version(&current) != Some(rv.to_string().as_str())
            {
                return Err(Error::Conflict {
                    kind: Api::resource(kind),
                    name,
                    message: format!(
                        "precondition failed: resourceVersion {rv}, stored {}",
                        meta::resource_version(&current).unwrap_or("")
                    ),
                });
            }
            if let Some(uid) = &expected_uid
                && uid != meta::uid(&current)
            {
                return Err(Error::Conflict {
                    kind: Api::resource(kind),
                    name,
                    message: format!(
                        "precondition failed: uid {uid}, stored {}",
                        meta::uid(&current)
                    ),
                });
            }
            let Some(next) = merge(kind, &current, &config, &fields, field_manager, force)? else {
                return Ok(current);
            };
            match self.update(kind, next).await {
                Err(Error::Conflict { .. }) if expected_rv.is_none() => continue,
                other => return other,
            }
        }
    }
}

/// The part of an applied object that can be owned: everything but
/// `apiVersion`, `kind` and the system metadata.
fn configuration(applied: &Object) -> Value {
    let mut config = applied.as_object().cloned().unwrap_or_default();
    config.remove("apiVersion");
    config.remove("kind");
    if let Some(Value::Object(m)) = config.get_mut("metadata") {
        for field in SYSTEM_METADATA {
            m.remove(field);
        }
    }
    Value::Object(config)
}

fn entry_for(kind: &KindInfo, manager: &str, fields: &FieldSet) -> Option<ManagedFieldsEntry> {
    (!fields.is_empty()).then(|| ManagedFieldsEntry {
        manager: manager.to_owned(),
        operation: "Apply".into(),
        api_version: kind.api_version(),
        time: Some(time::now_rfc3339()),
        fields_type: "FieldsV1".into(),
        fields_v1: fields.to_fields_v1(),
        subresource: None,
    })
}

fn to_value(entry: ManagedFieldsEntry) -> Value {
    serde_json::to_value(entry).expect("an entry always serialises")
}

/// One `managedFields` entry as found on the live object.
struct Owner {
    /// The entry as stored, written back unchanged unless `touched`.
    raw: Value,
    /// The entry, if it parses.
    entry: Option<ManagedFieldsEntry>,
    /// The fields it owns (empty if it does not parse).
    owned: FieldSet,
    /// Whether a forced apply took fields from it.
    touched: bool,
}

/// The object after applying `config` as `manager` over `live`, or `None`
/// when nothing would change.
fn merge(
    kind: &KindInfo,
    live: &Object,
    config: &Value,
    fields: &FieldSet,
    manager: &str,
    force: bool,
) -> Result<Option<Object>> {
    let mut owners: Vec<Owner> = live["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|raw| {
            let entry = serde_json::from_value::<ManagedFieldsEntry>(raw.clone()).ok();
            let owned = entry
                .as_ref()
                .map(ManagedFieldsEntry::fields)
                .unwrap_or_default();
            Owner {
                raw: raw.clone(),
                entry,
                owned,
                touched: false,
            }
        })
        .collect();
    let mine_at = owners.iter().position(|o| {
        o.entry.as_ref().is_some_and(|e| {
            e.manager == manager && e.operation == "Apply" && e.subresource.is_none()
        })
    });
    if mine_at.is_none() && owners.len() >= MAX_FIELD_MANAGERS {
        return Err(Error::Invalid {
            kind: Api::resource(kind),
            name: meta::name(live).to_owned(),
            causes: vec![super::Cause {
                field: "metadata.managedFields".into(),
                message: format!(
                    "Too many: {}: must have at most {MAX_FIELD_MANAGERS} field managers; apply as one of the managers listed, or remove stale entries from metadata.managedFields",
                    owners.len() + 1
                ),
                reason: super::CauseType::TooMany,
            }],
        });
    }
    let previous = mine_at.map(|i| owners[i].owned.clone()).unwrap_or_default();

    let mut next = live.clone();
    for path in fields.iter() {
        let value = managed::get(config, path).cloned().unwrap_or(Value::Null);
        managed::set(&mut next, path, value);
    }
    create_empty_maps(config, &mut next, &mut Vec::new());

    let mut conflicts = Vec::new();
    for (i, owner) in owners.iter_mut().enumerate() {
        if Some(i) == mine_at {
            continue;
        }
        let changed: Vec<_> = owner
            .owned
            .iter()
            .filter(|path| fields.overlaps(path))
            .filter(|path| !same(managed::get(live, path), managed::get(&next, path)))
            .cloned()
            .collect();
        for path in changed {
            if force {
                owner.owned.remove(&path);
                owner.touched = true;
            } else {
                conflicts.push(FieldConflict {
                    manager: owner
                        .entry
                        .as_ref()
                        .map(|e| e.manager.clone())
                        .unwrap_or_default(),
                    field: managed::display(&path),
                });
            }
        }
    }
    if !conflicts.is_empty() {
        return Err(Error::ApplyConflict {
            kind: Api::resource(kind),
            name: meta::name(live).to_owned(),
            conflicts,
        });
    }

    for path in previous.iter() {
        let still_wanted = fields.overlaps(path);
        let owned_by_other = owners
            .iter()
            .enumerate()
            .any(|(i, o)| Some(i) != mine_at && o.owned.overlaps(path));
        if !still_wanted && !owned_by_other {
            managed::remove(&mut next, path);
        }
    }

    let transferred = owners.iter().any(|o| o.touched);
    // A Secret's `stringData` is folded into `data` when it is stored, so
    // the live object never has it: compare as it would be stored. A
    // write would restamp the manager's entry with the time, so this is
    // the only way the same apply writes nothing in a later second.
    let unchanged = if super::secret::is_secret(kind) {
        let mut stored = next.clone();
        super::secret::prepare(Some(live), &mut stored).is_ok() && stored == *live
    } else {
        next == *live
    };
    if unchanged && previous == *fields && !transferred {
        return Ok(None);
    }

    let mut managed_fields = Vec::new();
    for (i, owner) in owners.into_iter().enumerate() {
        if Some(i) == mine_at {
            managed_fields.extend(entry_for(kind, manager, fields).map(to_value));
        } else if !owner.touched {
            managed_fields.push(owner.raw);
        } else if let Some(mut entry) = owner.entry.filter(|_| !owner.owned.is_empty()) {
            entry.fields_v1 = owner.owned.to_fields_v1();
            managed_fields.push(to_value(entry));
        }
    }
    if mine_at.is_none() {
        managed_fields.extend(entry_for(kind, manager, fields).map(to_value));
    }
    meta::metadata_mut(&mut next).insert("managedFields".into(), Value::Array(managed_fields));
    Ok(Some(next))
}

/// Create the empty maps of `config` that `next` lacks.
fn create_empty_maps(config: &Value, next: &mut Value, path: &mut managed::Path) {
    let Some(map) = config.as_object() else {
        return;
    };
    if map.is_empty() {
        if !path.is_empty() && managed::get(next, path).is_none() {
            managed::set(next, path, Value::Object(Map::new()));
        }
        return;
    }
    for (name, member) in map {
        path.push(name.clone());
        create_empty_maps(member, next, path);
        path.pop();
    }
}

fn same(a: Option<&Value>, b: Option<&Value>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => json_equal(a, b),
        (None, None) => true,
        _ => false,
    }
}
