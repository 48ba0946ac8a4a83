//! Patches of stored objects: JSON merge patch and JSON patch, on the main
//! resource or on `status`. Both patch a copy of the stored object in one
//! read-modify-write (`Api::modify`); a conflict with a concurrent writer
//! re-reads and patches again, unless the patch itself pins a
//! `resourceVersion` (then the conflict is the answer). How a patch changes a document is
//! `object::patch`'s.

use serde_json::Value;

use super::{Api, Error, Next, Result, secret, validate};

/// What a failed `test` on a Secret reports instead of the values.
const HIDDEN: &str = "(hidden)";
use crate::object::patch::{self, Bounds, JsonPatch, PatchError};
use crate::object::{KindInfo, Object, meta};

impl Api {
    /// Apply a JSON merge patch to an object, or to its status when `status`
    /// is true. Retries internally on conflicts unless the patch itself
    /// names a `resourceVersion`.
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
    /// api.create(&widgets, json!({"apiVersion": "example.com/v1", "kind": "Widget",
    ///     "metadata": {"name": "w"}, "spec": {"replicas": 1, "image": "a"}})).await?;
    /// let patched = api.merge_patch(&widgets, None, "w", &json!({"spec": {"replicas": 3, "image": null}}), false).await?;
    /// assert_eq!(patched["spec"], json!({"replicas": 3}));
    /// let status = api.merge_patch(&widgets, None, "w", &json!({"status": {"ready": true}}), true).await?;
    /// assert_eq!(status["status"]["ready"], true);
    /// # Ok(()) }
    /// ```
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
        self.patch_with(kind, namespace, name, status, |object| {
            patch::merge(object, patch_doc);
            Ok(())
        })
        .await
    }

    /// Apply a strategic merge patch (what kubectl sends for Kubernetes'
    /// own kinds; see [`patch::strategic_merge`]) to an object, or to its
    /// status, with the conflict rules of [`Api::merge_patch`]. Custom
    /// resources refuse it, as in Kubernetes (415 on the API): they take a
    /// merge patch.
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
    /// api.create(&events, json!({"apiVersion": "v1", "kind": "Event",
    ///     "metadata": {"name": "e", "labels": {"a": "1", "b": "2"}}})).await?;
    /// let patched = api.strategic_merge_patch(&events, None, "e",
    ///     &json!({"metadata": {"labels": {"$retainKeys": ["a"], "c": "3"}}}), false).await?;
    /// assert_eq!(patched["metadata"]["labels"], json!({"a": "1", "c": "3"}));
    /// # Ok(()) }
    /// ```
    pub async fn strategic_merge_patch(
        &self,
        kind: &KindInfo,
        namespace: Option<&str>,
        name: &str,
        patch_doc: &Value,
        status: bool,
    ) -> Result<Object> {
        if !kind.takes_strategic_merge_patch() {
            return Err(Error::BadRequest(format!(
                "strategic merge patch is not supported for {}: send a merge patch \
                 (application/merge-patch+json) or apply",
                Api::resource(kind)
            )));
        }
        self.patch_with(kind, namespace, name, status, |object| {
            patch::strategic_merge(object, patch_doc).map_err(|e| Error::BadRequest(e.to_string()))
        })
        .await
    }

    /// Apply a JSON patch (RFC 6902) to an object, or to its status when
    /// `status` is true, with the conflict rules of [`Api::merge_patch`]: an
    /// operation writing `/metadata/resourceVersion` pins the version. An
    /// operation that cannot be applied (a missing path, a failed `test`)
    /// fails with [`Error::PatchFailed`] (422, as in Kubernetes) and writes
    /// nothing.
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
    /// use setpoint::object::patch::JsonPatch;
    /// let mut e = event("e");
    /// e["count"] = json!(1);
    /// api.create(&events, e).await?;
    /// let ops = JsonPatch::from_value(&json!([
    ///     {"op": "test", "path": "/count", "value": 1},
    ///     {"op": "replace", "path": "/count", "value": 2}]))?;
    /// assert_eq!(api.json_patch(&events, None, "e", &ops, false).await?["count"], 2);
    /// let err = api.json_patch(&events, None, "e", &ops, false).await.unwrap_err();
    /// assert!(matches!(err, Error::PatchFailed { .. }), "the test fails now: nothing written");
    /// # Ok(()) }
    /// ```
    pub async fn json_patch(
        &self,
        kind: &KindInfo,
        namespace: Option<&str>,
        name: &str,
        ops: &JsonPatch,
        status: bool,
    ) -> Result<Object> {
        let bounds = Bounds {
            max_bytes: self.max_object_bytes,
            ..Bounds::default()
        };
        self.patch_with(kind, namespace, name, status, |object| {
            ops.apply_within(object, bounds)
                .map_err(|source| match source {
                    PatchError::TooLarge { size, limit, .. } => Error::TooLarge { size, limit },
                    // A failed test would echo a Secret's value to a client
                    // that may patch but not read it.
                    PatchError::TestFailed { index, path, .. } if secret::is_secret(kind) => {
                        Error::PatchFailed {
                            kind: kind.plural.clone(),
                            name: name.to_owned(),
                            source: Box::new(PatchError::TestFailed {
                                index,
                                path,
                                expected: Value::String(HIDDEN.into()),
                                actual: Value::String(HIDDEN.into()),
                            }),
                        }
                    }
                    source => Error::PatchFailed {
                        kind: kind.plural.clone(),
                        name: name.to_owned(),
                        source: Box::new(source),
                    },
                })
        })
        .await
    }

    /// Patch a copy of the stored object with `apply` and write it (its
    /// status alone when `status`) in one read-modify-write
    /// ([`Api::modify`]). A conflict patches the newer object again, unless
    /// the patch pinned a `resourceVersion`: its precondition fails then.
    async fn patch_with(
        &self,
        kind: &KindInfo,
        namespace: Option<&str>,
        name: &str,
        status: bool,
        apply: impl Fn(&mut Object) -> Result<()>,
    ) -> Result<Object> {
        self.modify(kind, namespace, name, |current| {
            let mut next = current.clone();
            apply(&mut next)?;
            if meta::name(&next) != meta::name(current)
                || meta::namespace(&next) != meta::namespace(current)
            {
                return Err(Error::BadRequest(format!(
                    "a patch cannot change the name or namespace of {} {name:?}",
                    kind.kind
                )));
            }
            Ok(Some(if status {
                Next::Status {
                    resource_version: validate::parse_resource_version(kind, &next)?,
                    status: next.as_object_mut().and_then(|m| m.remove("status")),
                }
            } else {
                Next::Object(next)
            }))
        })
        .await
        .map(|written| written.expect("a patch always writes"))
    }
}
