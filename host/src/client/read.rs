//! Reading through a [`Resource`]: get, list, watch and `wait_until`,
//! each decoding into the handle's type.

use serde::de::DeserializeOwned;

use super::{Error, List, Resource, Result, WatchStream};
use crate::api::{self, Api, ListOptions};
use crate::object::{Object, meta};
use crate::store::Revision;

impl<T: DeserializeOwned> Resource<T> {
    pub(super) fn decode(&self, object: Object) -> Result<T> {
        let name = meta::name(&object).to_owned();
        serde_json::from_value(object).map_err(|source| Error::Decode {
            kind: self.kind.clone(),
            name,
            source,
        })
    }

    /// Read one object.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let api = setpoint::api::Api::open(std::sync::Arc::new(setpoint::store::MemoryBackend::new())).await?;
    /// # let client = setpoint::Client::new(api);
    /// # for crd in setpoint_plugin_sdk::Reconciler::manifest(&replicaset::ReplicaSetReconciler).definitions {
    /// #     client.apply(&crd).await?;
    /// # }
    /// use setpoint::client::Error;
    ///
    /// let sets = client.resource("demo.setpoint.dev/v1", "ReplicaSet");
    /// match sets.get("web").await {
    ///     Ok(web) => println!("generation {}", web["metadata"]["generation"]),
    ///     Err(Error::NotFound { .. }) => println!("no web yet"),
    ///     Err(other) => return Err(other.into()),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn get(&self, name: &str) -> Result<T> {
        let info = self.kind_info()?;
        let namespace = self.namespace_of(&info, name)?;
        let object = self
            .api
            .get(&info, namespace, name)
            .await
            .map_err(|e| self.err(&info, namespace, e))?;
        self.decode(object)
    }

    /// Read one object, or `None` if it does not exist.
    pub async fn get_opt(&self, name: &str) -> Result<Option<T>> {
        match self.get(name).await {
            Ok(object) => Ok(Some(object)),
            Err(Error::NotFound { .. }) => Ok(None),
            Err(err) => Err(err),
        }
    }

    /// List the handle's objects: label and field selectors, and pages of
    /// `limit` objects continued with the previous page's `continue_token`,
    /// every page from the first page's snapshot. The options' `namespace`
    /// must be unset or the handle's.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let api = setpoint::api::Api::open(std::sync::Arc::new(setpoint::store::MemoryBackend::new())).await?;
    /// # let client = setpoint::Client::new(api);
    /// # for crd in setpoint_plugin_sdk::Reconciler::manifest(&replicaset::ReplicaSetReconciler).definitions {
    /// #     client.apply(&crd).await?;
    /// # }
    /// # for i in 0..5 {
    /// #     client.apply(&serde_json::json!({"apiVersion": "demo.setpoint.dev/v1", "kind": "Pod",
    /// #         "metadata": {"name": format!("web-{i}"), "labels": {"app": "web"}}})).await?;
    /// # }
    /// use setpoint::api::ListOptions;
    ///
    /// let pods = client.resource("demo.setpoint.dev/v1", "Pod");
    /// let mut options = ListOptions::default().with_label_selector("app=web").with_limit(2);
    /// let mut names = Vec::new();
    /// loop {
    ///     let page = pods.list(&options).await?;
    ///     names.extend(page.items.iter().map(|pod| pod["metadata"]["name"].clone()));
    ///     match page.continue_token {
    ///         Some(token) => options = options.with_continue_token(token),
    ///         None => break,
    ///     }
    /// }
    /// assert_eq!(names.len(), 5);
    /// # Ok(()) }
    /// ```
    pub async fn list(&self, options: &ListOptions) -> Result<List<T>> {
        let info = self.kind_info()?;
        let mut options = options.clone();
        if info.namespaced {
            match (&self.namespace, &options.namespace) {
                (Some(mine), Some(theirs)) if mine != theirs => {
                    return Err(Error::NamespaceMismatch {
                        kind: self.kind.clone(),
                        name: String::new(),
                        expected: mine.clone(),
                        found: theirs.clone(),
                    });
                }
                (Some(mine), _) => options.namespace = Some(mine.clone()),
                (None, _) => {}
            }
        } else {
            options.namespace = None;
        }
        let list = self
            .api
            .list(&info, &options)
            .await
            .map_err(|e| self.err(&info, options.namespace.as_deref(), e))?;
        Ok(List {
            items: list
                .items
                .into_iter()
                .map(|o| self.decode(o))
                .collect::<Result<_>>()?,
            resource_version: list.resource_version,
            continue_token: list.continue_token,
        })
    }

    /// Follow the handle's objects: every change after revision `after`
    /// (typically a list's `resource_version`), as a [`WatchStream`].
    /// Fails at once with [`Error::Expired`] when `after` is older than the
    /// history kept.
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
    /// use setpoint::client::WatchEvent;
    /// use tokio_stream::StreamExt;
    ///
    /// let sets = client.resource("demo.setpoint.dev/v1", "ReplicaSet");
    /// let from = sets.list(&Default::default()).await?.resource_version;
    /// let mut changes = sets.watch(from)?;
    /// # let web = serde_json::json!({"apiVersion": "demo.setpoint.dev/v1", "kind": "ReplicaSet",
    /// #     "metadata": {"name": "web"},
    /// #     "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
    /// #              "template": {"metadata": {"labels": {"app": "web"}}, "spec": {}}}});
    /// sets.apply(&web).await?;
    /// match changes.next().await.expect("a watch runs until dropped")? {
    ///     WatchEvent::Added(rs) => assert_eq!(rs["metadata"]["name"], "web"),
    ///     other => panic!("{other:?}"),
    /// }
    /// # Ok(()) }
    /// ```
    pub fn watch(&self, after: Revision) -> Result<WatchStream<T>> {
        let info = self.kind_info()?;
        let namespace = self.namespace.as_deref().filter(|_| info.namespaced);
        let subscription = self.api.watch(&Api::prefix(&info, namespace), after)?;
        Ok(WatchStream::new(subscription, self.kind.clone()))
    }

    /// Wait until the object `name` exists and `condition` holds for it, and
    /// return it: the object is read, then followed through the watch (and
    /// read again should the watch expire). Deletions are skipped: waiting
    /// goes on for the object to come back. Bound it with
    /// `tokio::time::timeout`.
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
    /// use std::time::Duration;
    /// use serde_json::json;
    /// use setpoint::client::Patch;
    ///
    /// let sets = client.resource("demo.setpoint.dev/v1", "ReplicaSet");
    /// // Someone else (a controller, say) reports progress later.
    /// let reporter = sets.clone();
    /// tokio::spawn(async move {
    ///     tokio::time::sleep(Duration::from_millis(20)).await;
    ///     let done = Patch::Merge(json!({"status": {"readyReplicas": 2}}));
    ///     reporter.patch_status("web", &done).await
    /// });
    /// let ready = tokio::time::timeout(
    ///     Duration::from_secs(30),
    ///     sets.wait_until("web", |rs| rs["status"]["readyReplicas"] == 2),
    /// )
    /// .await??;
    /// assert_eq!(ready["status"]["readyReplicas"], 2);
    /// # Ok(()) }
    /// ```
    pub async fn wait_until(&self, name: &str, mut condition: impl FnMut(&T) -> bool) -> Result<T> {
        let info = self.kind_info()?;
        let namespace = self.namespace_of(&info, name)?;
        let key = Api::key(&info, namespace, name);
        loop {
            // The revision first, then the read: a change between the two is
            // seen (again) through the watch, never missed.
            let from = self.api.current_revision().await.map_err(Error::Api)?;
            match self.api.get(&info, namespace, name).await {
                Ok(object) => {
                    let object = self.decode(object)?;
                    if condition(&object) {
                        return Ok(object);
                    }
                }
                Err(api::Error::NotFound { .. }) => {}
                Err(err) => return Err(self.err(&info, namespace, err)),
            }
            // The key is a prefix of longer names' keys too: compare exactly.
            let mut changes = match self.api.watch(&key, from) {
                Ok(changes) => changes,
                Err(crate::watch::Error::TooOldResourceVersion { .. }) => continue,
                Err(err) => return Err(err.into()),
            };
            loop {
                match changes.next().await {
                    Ok(event)
                        if event.key == key && event.kind != crate::watch::EventType::Deleted =>
                    {
                        let object = T::deserialize(event.object.as_ref()).map_err(|source| {
                            Error::Decode {
                                kind: self.kind.clone(),
                                name: name.to_owned(),
                                source,
                            }
                        })?;
                        if condition(&object) {
                            return Ok(object);
                        }
                    }
                    Ok(_) => {}
                    Err(crate::watch::Error::TooOldResourceVersion { .. }) => break,
                    Err(err) => return Err(err.into()),
                }
            }
        }
    }
}
