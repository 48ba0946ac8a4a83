//! Writing through a [`Resource`]: create, replace, status, merge and JSON
//! patches, server-side apply and delete, each answering with the object as
//! stored, decoded into the handle's type.

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::{Deletion, Patch, Resource, Result};
use crate::api::{self, Api, DeleteOptions};
use crate::object::{KindInfo, Object, meta};

impl<T: DeserializeOwned> Resource<T> {
    /// Delete the object `name` in the background propagation policy
    /// (dependents are garbage-collected after it).
    pub async fn delete(&self, name: &str) -> Result<Deletion<T>> {
        self.delete_with(name, &DeleteOptions::default()).await
    }

    /// Delete the object `name` with preconditions (`resource_version`,
    /// `uid`: a mismatch is [`Error::Conflict`](super::Error::Conflict)) and a propagation policy.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let api = setpoint::api::Api::open(std::sync::Arc::new(setpoint::store::MemoryBackend::new())).await?;
    /// # let client = setpoint::Client::new(api);
    /// # for crd in setpoint_plugin_sdk::Reconciler::manifest(&replicaset::ReplicaSetReconciler).definitions {
    /// #     client.apply(&crd).await?;
    /// # }
    /// # let web = serde_json::json!({"apiVersion": "demo.setpoint.dev/v1", "kind": "ReplicaSet",
    /// #     "metadata": {"name": "web"},
    /// #     "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
    /// #              "template": {"metadata": {"labels": {"app": "web"}}, "spec": {}}}});
    /// # client.apply(&web).await?;
    /// use setpoint::api::{DeleteOptions, Propagation};
    ///
    /// let sets = client.resource("demo.setpoint.dev/v1", "ReplicaSet");
    /// let options = DeleteOptions::default().with_propagation(Propagation::Foreground);
    /// // Foreground: the ReplicaSet stays (pending) until the garbage collector
    /// // has removed its pods.
    /// let deletion = sets.delete_with("web", &options).await?;
    /// assert!(!deletion.is_removed());
    /// # Ok(()) }
    /// ```
    pub async fn delete_with(&self, name: &str, options: &DeleteOptions) -> Result<Deletion<T>> {
        let info = self.kind_info()?;
        let namespace = self.namespace_of(&info, name)?;
        let last = self
            .api
            .delete(&info, namespace, name, options)
            .await
            .map_err(|e| self.err(&info, namespace, e))?;
        let pending = meta::deletion_timestamp(&last).is_some();
        let last = self.decode(last)?;
        Ok(if pending {
            Deletion::Pending(last)
        } else {
            Deletion::Removed(last)
        })
    }

    /// Patch the object `name` (not its status when the kind has a status
    /// sub-resource: see [`Resource::patch_status`]).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let api = setpoint::api::Api::open(std::sync::Arc::new(setpoint::store::MemoryBackend::new())).await?;
    /// # let client = setpoint::Client::new(api);
    /// # for crd in setpoint_plugin_sdk::Reconciler::manifest(&replicaset::ReplicaSetReconciler).definitions {
    /// #     client.apply(&crd).await?;
    /// # }
    /// # let web = serde_json::json!({"apiVersion": "demo.setpoint.dev/v1", "kind": "ReplicaSet",
    /// #     "metadata": {"name": "web"},
    /// #     "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
    /// #              "template": {"metadata": {"labels": {"app": "web"}}, "spec": {}}}});
    /// # client.apply(&web).await?;
    /// use serde_json::json;
    /// use setpoint::client::Patch;
    ///
    /// let sets = client.resource("demo.setpoint.dev/v1", "ReplicaSet");
    /// sets.patch("web", &Patch::Merge(json!({"spec": {"replicas": 5}}))).await?;
    /// let ops = json!([{"op": "test", "path": "/spec/replicas", "value": 5},
    ///                  {"op": "replace", "path": "/spec/replicas", "value": 3}]);
    /// let web = sets.patch("web", &Patch::json(&ops)?).await?;
    /// assert_eq!(web["spec"]["replicas"], 3);
    /// # Ok(()) }
    /// ```
    pub async fn patch(&self, name: &str, patch: &Patch) -> Result<T> {
        self.patch_to(name, patch, false).await
    }

    /// Patch the status of the object `name` (its `status` sub-resource).
    pub async fn patch_status(&self, name: &str, patch: &Patch) -> Result<T> {
        self.patch_to(name, patch, true).await
    }

    async fn patch_to(&self, name: &str, patch: &Patch, status: bool) -> Result<T> {
        let info = self.kind_info()?;
        let namespace = self.namespace_of(&info, name)?;
        let patched = match patch {
            Patch::Merge(doc) => {
                self.api
                    .merge_patch(&info, namespace, name, doc, status)
                    .await
            }
            Patch::Json(ops) => {
                self.api
                    .json_patch(&info, namespace, name, ops, status)
                    .await
            }
        }
        .map_err(|e| self.err(&info, namespace, e))?;
        self.decode(patched)
    }

    /// Server-side apply `config` as the client's field manager: create the
    /// object if absent, else set the fields `config` names, remove those
    /// this manager applied before and no longer names, and refuse
    /// ([`Error::ApplyConflict`](super::Error::ApplyConflict)) to change a field another manager applied
    /// with another value. Applying the same `config` again writes nothing.
    ///
    /// `config` may be partial: it needs `metadata.name`, and the fields
    /// this manager wants to own.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let api = setpoint::api::Api::open(std::sync::Arc::new(setpoint::store::MemoryBackend::new())).await?;
    /// # let client = setpoint::Client::new(api);
    /// # for crd in setpoint_plugin_sdk::Reconciler::manifest(&replicaset::ReplicaSetReconciler).definitions {
    /// #     client.apply(&crd).await?;
    /// # }
    /// use serde_json::json;
    ///
    /// let sets = client.resource("demo.setpoint.dev/v1", "ReplicaSet");
    /// let config = json!({"metadata": {"name": "web"},
    ///                     "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
    ///                              "template": {"metadata": {"labels": {"app": "web"}}}}});
    /// let web = sets.apply(&config).await?;
    /// assert_eq!(web["metadata"]["managedFields"][0]["manager"], "setpoint-client");
    /// let again = sets.apply(&config).await?;
    /// assert_eq!(again["metadata"]["resourceVersion"], web["metadata"]["resourceVersion"]);
    /// # Ok(()) }
    /// ```
    pub async fn apply(&self, config: &impl Serialize) -> Result<T> {
        self.apply_as(config, false).await
    }

    /// [`Resource::apply`], taking over the fields other managers own where
    /// `config` sets them to other values.
    pub async fn force_apply(&self, config: &impl Serialize) -> Result<T> {
        self.apply_as(config, true).await
    }

    async fn apply_as(&self, config: &impl Serialize, force: bool) -> Result<T> {
        let info = self.kind_info()?;
        let config = self.prepare(&info, config)?;
        let namespace = meta::namespace(&config).map(str::to_owned);
        let applied = self
            .api
            .apply(&info, config, &self.field_manager, force)
            .await
            .map_err(|e| self.err(&info, namespace.as_deref(), e))?;
        self.decode(applied)
    }
}

impl<T: Serialize + DeserializeOwned> Resource<T> {
    /// Create `object`; [`Error::AlreadyExists`](super::Error::AlreadyExists) if it exists. The host
    /// sets `uid`, `resourceVersion`, `generation` and `creationTimestamp`.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let api = setpoint::api::Api::open(std::sync::Arc::new(setpoint::store::MemoryBackend::new())).await?;
    /// # let client = setpoint::Client::new(api);
    /// # for crd in setpoint_plugin_sdk::Reconciler::manifest(&replicaset::ReplicaSetReconciler).definitions {
    /// #     client.apply(&crd).await?;
    /// # }
    /// use serde_json::json;
    ///
    /// let events = client.resource("v1", "Event");
    /// let created = events.create(&json!({"metadata": {"name": "boot"}, "reason": "Started"})).await?;
    /// assert_eq!(created["metadata"]["generation"], 1);
    /// assert!(events.create(&created).await.is_err(), "it exists");
    /// # Ok(()) }
    /// ```
    pub async fn create(&self, object: &T) -> Result<T> {
        self.write(object, async |api, info, object| {
            api.create(info, object).await
        })
        .await
    }

    /// Replace the object with `object` (its status stays as stored when
    /// the kind has a status sub-resource). A `metadata.resourceVersion` in
    /// `object` is a precondition: [`Error::Conflict`](super::Error::Conflict) if the object moved on.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let api = setpoint::api::Api::open(std::sync::Arc::new(setpoint::store::MemoryBackend::new())).await?;
    /// # let client = setpoint::Client::new(api);
    /// # for crd in setpoint_plugin_sdk::Reconciler::manifest(&replicaset::ReplicaSetReconciler).definitions {
    /// #     client.apply(&crd).await?;
    /// # }
    /// # let web = serde_json::json!({"apiVersion": "demo.setpoint.dev/v1", "kind": "ReplicaSet",
    /// #     "metadata": {"name": "web"},
    /// #     "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
    /// #              "template": {"metadata": {"labels": {"app": "web"}}, "spec": {}}}});
    /// # client.apply(&web).await?;
    /// let sets = client.resource("demo.setpoint.dev/v1", "ReplicaSet");
    /// let scaled = loop {
    ///     let mut web = sets.get("web").await?;
    ///     web["spec"]["replicas"] = 4.into();
    ///     match sets.replace(&web).await {
    ///         Err(err) if err.is_conflict() => continue, // someone else wrote first
    ///         other => break other?,
    ///     }
    /// };
    /// assert_eq!(scaled["spec"]["replicas"], 4);
    /// # Ok(()) }
    /// ```
    pub async fn replace(&self, object: &T) -> Result<T> {
        self.write(object, async |api, info, object| {
            api.update(info, object).await
        })
        .await
    }

    /// Write the status of `object` (and nothing else) through the status
    /// sub-resource, with the `resourceVersion` precondition of
    /// [`Resource::replace`].
    pub async fn update_status(&self, object: &T) -> Result<T> {
        self.write(object, async |api, info, object| {
            api.update_status(info, object).await
        })
        .await
    }

    /// Prepare `object` for this handle's kind, hand it to `write` (one of
    /// the API's whole-object writes) and decode what was stored.
    async fn write(
        &self,
        object: &T,
        write: impl AsyncFnOnce(&Api, &KindInfo, Object) -> api::Result<Object>,
    ) -> Result<T> {
        let info = self.kind_info()?;
        let object = self.prepare(&info, object)?;
        let namespace = meta::namespace(&object).map(str::to_owned);
        let stored = write(&self.api, &info, object)
            .await
            .map_err(|e| self.err(&info, namespace.as_deref(), e))?;
        self.decode(stored)
    }
}
