//! Tests of the object API, one file per concern, sharing the fixtures
//! below: a namespaced `Widget` kind with a schema and a status
//! sub-resource, and a cluster-scoped `Gadget` kind that keeps any field.
//!
//! One suite for every backend: by default the in-memory one;
//! `SETPOINT_TEST_BACKEND=embedded` runs it on the durable embedded store,
//! `SETPOINT_TEST_BACKEND=etcd` (with `SETPOINT_TEST_ETCD=URL`) on a real
//! etcd, each test under a prefix of its own. `scripts/test` runs all three.

mod apply;
mod bounds;
mod crud;
mod delete;
mod dry_run;
mod limits;
mod list;
mod patch;
mod schema;
mod secret;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use super::{Api, Error};
use crate::object::{KindInfo, Object, meta};
use crate::store::MemoryBackend;

/// A fresh API over an empty store of the backend under test.
pub(crate) async fn api() -> Api {
    let backend: Arc<dyn crate::store::Backend> =
        match std::env::var("SETPOINT_TEST_BACKEND").as_deref() {
            Ok("embedded") => {
                // Left on disk for the life of the test process; the directory is
                // under the system temp dir.
                let dir = std::env::temp_dir()
                    .join(format!("setpoint-api-tests-{}", uuid::Uuid::new_v4()));
                Arc::new(crate::store::EmbeddedBackend::open(&dir).unwrap())
            }
            #[cfg(not(feature = "etcd"))]
            Ok("etcd") => panic!("SETPOINT_TEST_BACKEND=etcd needs the `etcd` feature"),
            #[cfg(feature = "etcd")]
            Ok("etcd") => {
                let url = std::env::var("SETPOINT_TEST_ETCD")
                    .expect("SETPOINT_TEST_ETCD=http://HOST:PORT");
                let config = crate::store::EtcdConfig {
                    endpoints: vec![url],
                    prefix: format!("/api-tests/{}", uuid::Uuid::new_v4()),
                    ..Default::default()
                };
                Arc::new(crate::store::EtcdBackend::connect(config).await.unwrap())
            }
            Ok("memory") | Err(_) => Arc::new(MemoryBackend::new()),
            Ok(other) => panic!("unknown SETPOINT_TEST_BACKEND {other:?}"),
        };
    Api::open(backend).await.unwrap()
}

pub(crate) fn crd_kind(api: &Api) -> Arc<KindInfo> {
    api.kinds()
        .by_plural("apiextensions.k8s.io", "customresourcedefinitions")
        .unwrap()
}

/// The `Widget` definition.
pub(crate) fn widget_crd() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.test.setpoint.dev"},
        "spec": {
            "group": "test.setpoint.dev",
            "scope": "Namespaced",
            "names": {"kind": "Widget", "plural": "widgets"},
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "required": ["image"], "properties": {
                        "image": {"type": "string", "minLength": 1},
                        "replicas": {"type": "integer", "format": "int32", "minimum": 0,
                                     "maximum": 100, "default": 1},
                        "color": {"type": "string", "enum": ["red", "green", "blue"]},
                        "tags": {"type": "array", "maxItems": 3, "items": {"type": "string"}},
                        "options": {"type": "object", "additionalProperties": {"type": "string"}},
                        "template": {"type": "object", "properties": {
                            "metadata": {"type": "object", "properties": {
                                "labels": {"type": "object",
                                           "additionalProperties": {"type": "string"}}}},
                            "spec": {"type": "object",
                                     "x-kubernetes-preserve-unknown-fields": true}}},
                        "ports": {"type": "array", "items": {"type": "object",
                            "required": ["port"], "properties": {
                                "port": {"type": "integer"},
                                "protocol": {"type": "string", "default": "TCP"}}}}}},
                    "status": {"type": "object", "properties": {
                        "phase": {"type": "string", "enum": ["Pending", "Running"]},
                        "replicas": {"type": "integer", "minimum": 0}}}}}}
            }]
        }
    })
}

/// Register `Widget` and return its kind.
pub(crate) async fn widgets(api: &Api) -> Arc<KindInfo> {
    api.create(&crd_kind(api), widget_crd()).await.unwrap();
    api.kinds()
        .require("test.setpoint.dev/v1", "Widget")
        .unwrap()
}

/// Register the cluster-scoped `Gadget` (any fields, no status
/// sub-resource) and return its kind.
pub(crate) async fn gadgets(api: &Api) -> Arc<KindInfo> {
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "gadgets.test.setpoint.dev"},
        "spec": {
            "group": "test.setpoint.dev",
            "scope": "Cluster",
            "names": {"kind": "Gadget", "plural": "gadgets"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object",
                    "x-kubernetes-preserve-unknown-fields": true}}}]
        }
    });
    api.create(&crd_kind(api), crd).await.unwrap();
    api.kinds()
        .require("test.setpoint.dev/v1", "Gadget")
        .unwrap()
}

/// A valid widget in `default`.
pub(crate) fn widget(name: &str) -> Object {
    json!({
        "apiVersion": "test.setpoint.dev/v1",
        "kind": "Widget",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"image": "nginx"}
    })
}

/// A gadget.
pub(crate) fn gadget(name: &str) -> Object {
    json!({"apiVersion": "test.setpoint.dev/v1", "kind": "Gadget", "metadata": {"name": name}})
}

/// `child` with an owner reference to `owner`.
pub(crate) fn owned_by(mut child: Object, owner: &Object, block: bool) -> Object {
    let reference = json!({
        "apiVersion": meta::api_version(owner), "kind": meta::kind(owner),
        "name": meta::name(owner), "uid": meta::uid(owner),
        "blockOwnerDeletion": block,
    });
    let m = meta::metadata_mut(&mut child);
    let refs = m.entry("ownerReferences").or_insert_with(|| json!([]));
    refs.as_array_mut().unwrap().push(reference);
    child
}

/// Whether the object exists.
pub(crate) async fn exists(api: &Api, kind: &KindInfo, name: &str) -> bool {
    match api.get(kind, Some("default"), name).await {
        Ok(_) => true,
        Err(Error::NotFound { .. }) => false,
        Err(err) => panic!("{err}"),
    }
}

/// Wait until `check` holds, re-checking after every change the watch hub
/// sees; fail after ten seconds with `what`.
pub(crate) async fn eventually<F, Fut>(api: &Api, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let mut subscription = api
        .hub()
        .subscribe("/registry/", api.hub().last_revision())
        .unwrap();
    loop {
        if check().await {
            return;
        }
        let next = tokio::time::timeout_at(deadline, subscription.next()).await;
        match next {
            Err(_) => panic!("not reached within 10 s: {what}"),
            Ok(Ok(_)) => {}
            Ok(Err(_)) => {
                subscription = api
                    .hub()
                    .subscribe("/registry/", api.hub().last_revision())
                    .unwrap();
            }
        }
    }
}
