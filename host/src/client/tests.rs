//! The client over an in-memory store: a namespaced `Widget` kind with a
//! schema and a status sub-resource, registered through the client itself.

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio_stream::StreamExt;

use super::*;
use crate::api::{DeleteOptions, ListOptions, Propagation, kinds::CRD_GROUP};
use crate::store::MemoryBackend;

const WIDGETS: &str = "test.setpoint.dev/v1";

async fn client() -> Client {
    let api = Api::open(Arc::new(MemoryBackend::new())).await.unwrap();
    Client::new(api)
}

fn widget_crd() -> Value {
    json!({
        "apiVersion": format!("{CRD_GROUP}/v1"),
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
                        "replicas": {"type": "integer", "default": 1},
                    }},
                    "status": {"type": "object", "properties": {
                        "ready": {"type": "boolean"},
                    }},
                }}},
            }],
        },
    })
}

/// A client with the `Widget` kind registered.
async fn with_widgets() -> Client {
    let client = client().await;
    client.apply(&widget_crd()).await.unwrap();
    client
}

fn widget(name: &str, image: &str) -> Value {
    json!({"metadata": {"name": name}, "spec": {"image": image}})
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Widget {
    #[serde(rename = "apiVersion", default)]
    api_version: String,
    #[serde(default)]
    kind: String,
    metadata: setpoint_plugin_sdk::ObjectMeta,
    spec: WidgetSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    status: Option<WidgetStatus>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct WidgetSpec {
    image: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    replicas: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct WidgetStatus {
    ready: bool,
}

#[tokio::test]
async fn a_handle_made_before_its_kind_is_registered_works_once_it_is() {
    let client = client().await;
    let widgets = client.resource(WIDGETS, "Widget");
    let err = widgets.get("w").await.unwrap_err();
    assert!(
        matches!(&err, Error::UnknownKind { api_version, kind } if api_version == WIDGETS && kind == "Widget"),
        "{err:?}"
    );
    client.apply(&widget_crd()).await.unwrap();
    let created = widgets.create(&widget("w", "nginx")).await.unwrap();
    assert_eq!(created["apiVersion"], WIDGETS, "filled in from the handle");
    assert_eq!(created["metadata"]["namespace"], "default");
    assert_eq!(created["spec"]["replicas"], 1, "defaulted by the schema");
    assert_eq!(widgets.get("w").await.unwrap(), created);
}

#[tokio::test]
async fn errors_are_the_specific_variant_in_the_handles_terms() {
    let client = with_widgets().await;
    let widgets = client.resource(WIDGETS, "Widget").namespace("team-a");
    let missing = widgets.get("nope").await.unwrap_err();
    assert!(missing.is_not_found());
    assert_eq!(missing.to_string(), "Widget team-a/nope not found");
    assert_eq!(widgets.get_opt("nope").await.unwrap(), None);

    widgets.create(&widget("w", "nginx")).await.unwrap();
    let again = widgets.create(&widget("w", "nginx")).await.unwrap_err();
    assert!(
        matches!(&again, Error::AlreadyExists { namespace: Some(ns), name, .. } if ns == "team-a" && name == "w"),
        "{again:?}"
    );

    let invalid = widgets.create(&widget("bad", "")).await.unwrap_err();
    let Error::Invalid { causes, .. } = &invalid else {
        panic!("{invalid:?}")
    };
    assert_eq!(causes[0].field, "spec.image");

    let wrong_kind = widgets
        .create(&json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "x"}}))
        .await
        .unwrap_err();
    assert_eq!(
        wrong_kind.to_string(),
        "the object is a v1/Event, but the handle is for test.setpoint.dev/v1/Widget"
    );
    assert!(matches!(
        widgets
            .list(&ListOptions::default().with_label_selector("a in b"))
            .await
            .unwrap_err(),
        Error::Api(api::Error::BadRequest(_))
    ));
}

#[tokio::test]
async fn a_handle_keeps_to_its_namespace() {
    let client = with_widgets().await;
    let team_a = client.resource(WIDGETS, "Widget").namespace("team-a");
    let team_b = team_a.clone().namespace("team-b");
    team_a.create(&widget("w", "a")).await.unwrap();
    team_b.create(&widget("w", "b")).await.unwrap();
    assert_eq!(team_a.get("w").await.unwrap()["spec"]["image"], "a");
    assert_eq!(team_b.get("w").await.unwrap()["spec"]["image"], "b");

    let mut elsewhere = widget("x", "c");
    elsewhere["metadata"]["namespace"] = json!("team-b");
    let err = team_a.create(&elsewhere).await.unwrap_err();
    assert!(matches!(err, Error::NamespaceMismatch { .. }), "{err:?}");
    assert!(
        team_b.get_opt("x").await.unwrap().is_none(),
        "nothing written"
    );
    let err = team_a
        .list(&ListOptions::default().in_namespace("team-b"))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::NamespaceMismatch { .. }), "{err:?}");

    let everywhere = team_a.clone().all_namespaces();
    assert_eq!(
        everywhere
            .list(&ListOptions::default())
            .await
            .unwrap()
            .items
            .len(),
        2
    );
    assert_eq!(
        everywhere
            .list(&ListOptions::default().in_namespace("team-b"))
            .await
            .unwrap()
            .items
            .len(),
        1,
        "an all-namespaces handle takes the options' namespace"
    );
    let err = everywhere.get("w").await.unwrap_err();
    assert!(matches!(err, Error::NamespaceRequired { .. }), "{err:?}");
    everywhere.create(&elsewhere).await.unwrap();
    assert!(team_b.get_opt("x").await.unwrap().is_some());

    // Namespaces mean nothing to a cluster-scoped kind.
    let crds = client
        .resource(format!("{CRD_GROUP}/v1"), "CustomResourceDefinition")
        .namespace("team-a");
    let crd = crds.get("widgets.test.setpoint.dev").await.unwrap();
    assert!(crd["metadata"].get("namespace").is_none());
}

#[tokio::test]
async fn lists_select_by_label_and_field_and_page_through_one_snapshot() {
    let client = with_widgets().await;
    let widgets = client.resource(WIDGETS, "Widget");
    for i in 0..5 {
        let mut w = widget(&format!("w{i}"), "nginx");
        w["metadata"]["labels"] = json!({"parity": if i % 2 == 0 { "even" } else { "odd" }});
        widgets.create(&w).await.unwrap();
    }
    let even = widgets
        .list(&ListOptions::default().with_label_selector("parity=even"))
        .await
        .unwrap();
    let names: Vec<_> = even
        .items
        .iter()
        .map(|w| meta::name(w).to_owned())
        .collect();
    assert_eq!(names, ["w0", "w2", "w4"]);
    let one = widgets
        .list(&ListOptions::default().with_field_selector("metadata.name=w3"))
        .await
        .unwrap();
    assert_eq!(one.items.len(), 1);

    let mut options = ListOptions::default().with_limit(2);
    let first = widgets.list(&options).await.unwrap();
    // A write between pages does not show: every page is of the first snapshot.
    widgets.create(&widget("w5", "nginx")).await.unwrap();
    let mut seen: Vec<String> = first.items.iter().map(|w| meta::name(w).into()).collect();
    let mut token = first.continue_token;
    while let Some(t) = token {
        options = options.with_continue_token(t);
        let page = widgets.list(&options).await.unwrap();
        assert_eq!(page.resource_version, first.resource_version);
        seen.extend(page.items.iter().map(|w| meta::name(w).to_owned()));
        token = page.continue_token;
    }
    assert_eq!(seen, ["w0", "w1", "w2", "w3", "w4"]);
}

#[tokio::test]
async fn apply_creates_then_merges_and_guards_other_managers_fields() {
    let client = with_widgets().await;
    let alice = client
        .clone()
        .with_field_manager("alice")
        .resource(WIDGETS, "Widget");
    let bob = client
        .clone()
        .with_field_manager("bob")
        .resource(WIDGETS, "Widget");
    let created = alice
        .apply(&json!({"metadata": {"name": "w"}, "spec": {"image": "nginx", "replicas": 2}}))
        .await
        .unwrap();
    assert_eq!(created["metadata"]["managedFields"][0]["manager"], "alice");
    let rv = created["metadata"]["resourceVersion"].clone();
    let same = alice
        .apply(&json!({"metadata": {"name": "w"}, "spec": {"image": "nginx", "replicas": 2}}))
        .await
        .unwrap();
    assert_eq!(
        same["metadata"]["resourceVersion"], rv,
        "an unchanged apply writes nothing"
    );

    let err = bob
        .apply(&json!({"metadata": {"name": "w"}, "spec": {"image": "nginx", "replicas": 5}}))
        .await
        .unwrap_err();
    let Error::ApplyConflict { conflicts, .. } = &err else {
        panic!("{err:?}")
    };
    assert_eq!(
        (conflicts[0].manager.as_str(), conflicts[0].field.as_str()),
        ("alice", ".spec.replicas")
    );
    assert!(err.is_conflict());
    let forced = bob
        .force_apply(&json!({"metadata": {"name": "w"}, "spec": {"replicas": 5}}))
        .await
        .unwrap();
    assert_eq!(forced["spec"], json!({"image": "nginx", "replicas": 5}));

    // Alice stops applying the image; Bob never owned it, so it goes.
    let after = alice
        .apply(&json!({"metadata": {"name": "w"}, "spec": {"image": "httpd"}}))
        .await
        .unwrap();
    assert_eq!(after["spec"], json!({"image": "httpd", "replicas": 5}));
}

#[tokio::test]
async fn a_manifest_applies_to_its_own_kind_and_namespace() {
    let client = with_widgets().await;
    let mut manifest = widget("w", "nginx");
    manifest["apiVersion"] = json!(WIDGETS);
    manifest["kind"] = json!("Widget");
    manifest["metadata"]["namespace"] = json!("ops");
    client.apply(&manifest).await.unwrap();
    let ops = client.resource(WIDGETS, "Widget").namespace("ops");
    assert_eq!(ops.get("w").await.unwrap()["spec"]["image"], "nginx");
    let err = client.apply(&widget("x", "nginx")).await.unwrap_err();
    assert!(matches!(err, Error::Encode(_)), "{err:?}");
}

#[tokio::test]
async fn patches_replace_and_status_writes_follow_the_object_rules() {
    let client = with_widgets().await;
    let widgets = client.resource(WIDGETS, "Widget");
    let created = widgets.create(&widget("w", "nginx")).await.unwrap();

    let merged = widgets
        .patch("w", &Patch::Merge(json!({"spec": {"replicas": 3}})))
        .await
        .unwrap();
    assert_eq!(merged["spec"]["replicas"], 3);
    assert_eq!(merged["metadata"]["generation"], 2);

    let ops = json!([{"op": "test", "path": "/spec/replicas", "value": 3},
                     {"op": "replace", "path": "/spec/image", "value": "httpd"}]);
    let patched = widgets
        .patch("w", &Patch::json(&ops).unwrap())
        .await
        .unwrap();
    assert_eq!(patched["spec"]["image"], "httpd");
    let failing = json!([{"op": "test", "path": "/spec/replicas", "value": 9}]);
    let err = widgets
        .patch("w", &Patch::json(&failing).unwrap())
        .await
        .unwrap_err();
    assert!(matches!(err, Error::PatchFailed { .. }), "{err:?}");

    // The main resource never writes status; the status sub-resource does.
    let ignored = widgets
        .patch("w", &Patch::Merge(json!({"status": {"ready": true}})))
        .await
        .unwrap();
    assert!(ignored.get("status").is_none());
    let ready = widgets
        .patch_status("w", &Patch::Merge(json!({"status": {"ready": true}})))
        .await
        .unwrap();
    assert_eq!(ready["status"]["ready"], true);
    assert_eq!(
        ready["metadata"]["generation"], patched["metadata"]["generation"],
        "status does not move the generation"
    );

    // A stale resourceVersion is a conflict, and writes nothing.
    let mut stale = created.clone();
    stale["spec"]["image"] = json!("caddy");
    let err = widgets.replace(&stale).await.unwrap_err();
    assert!(
        matches!(err, Error::Conflict { .. }) && err.is_conflict(),
        "{err:?}"
    );
    let mut fresh = widgets.get("w").await.unwrap();
    fresh["spec"]["image"] = json!("caddy");
    fresh["status"] = json!({"ready": false});
    let replaced = widgets.replace(&fresh).await.unwrap();
    assert_eq!(replaced["spec"]["image"], "caddy");
    assert_eq!(
        replaced["status"]["ready"], true,
        "replace keeps the stored status"
    );
    let updated = widgets.update_status(&fresh).await.unwrap_err();
    assert!(updated.is_conflict(), "fresh is stale now: {updated:?}");
    let mut latest = widgets.get("w").await.unwrap();
    latest["status"]["ready"] = json!(false);
    let updated = widgets.update_status(&latest).await.unwrap();
    assert_eq!(updated["status"]["ready"], false);
}

#[tokio::test]
async fn deletes_say_whether_the_object_is_gone_or_pending() {
    let client = with_widgets().await;
    let widgets = client.resource(WIDGETS, "Widget");
    widgets.create(&widget("plain", "nginx")).await.unwrap();
    let mut held = widget("held", "nginx");
    held["metadata"]["finalizers"] = json!(["example.com/cleanup"]);
    widgets.create(&held).await.unwrap();

    let gone = widgets.delete("plain").await.unwrap();
    assert!(gone.is_removed());
    assert_eq!(meta::name(&gone.into_object()), "plain");
    assert!(widgets.get_opt("plain").await.unwrap().is_none());

    let pending = widgets.delete("held").await.unwrap();
    let Deletion::Pending(object) = pending else {
        panic!("a finalizer holds it: {pending:?}")
    };
    assert!(meta::deletion_timestamp(&object).is_some());
    // Removing the last finalizer completes the deletion.
    widgets
        .patch(
            "held",
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await
        .unwrap();
    assert!(widgets.get_opt("held").await.unwrap().is_none());

    widgets.create(&widget("fg", "nginx")).await.unwrap();
    let foreground = widgets
        .delete_with(
            "fg",
            &DeleteOptions::default().with_propagation(Propagation::Foreground),
        )
        .await
        .unwrap();
    assert!(
        !foreground.is_removed(),
        "foreground waits for the garbage collector"
    );
    let err = widgets
        .delete_with("missing", &DeleteOptions::default())
        .await
        .unwrap_err();
    assert!(err.is_not_found());
    widgets.create(&widget("pinned", "nginx")).await.unwrap();
    let err = widgets
        .delete_with("pinned", &DeleteOptions::default().with_uid("not-its-uid"))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Conflict { .. }), "{err:?}");
}

#[tokio::test]
async fn a_typed_handle_reads_and_writes_the_programs_own_types() {
    let client = with_widgets().await;
    let widgets = client.resource(WIDGETS, "Widget").typed::<Widget>();
    let created = widgets
        .create(&Widget {
            api_version: WIDGETS.into(),
            kind: "Widget".into(),
            metadata: setpoint_plugin_sdk::ObjectMeta {
                name: "typed".into(),
                ..Default::default()
            },
            spec: WidgetSpec {
                image: "nginx".into(),
                replicas: None,
            },
            status: None,
        })
        .await
        .unwrap();
    assert_eq!(created.spec.replicas, Some(1));
    assert!(!created.metadata.uid.is_empty());
    assert_eq!(created.metadata.namespace.as_deref(), Some("default"));

    // The plugin SDK's typed object reads the same object.
    let sdk = widgets
        .clone()
        .typed::<setpoint_plugin_sdk::Object<WidgetSpec, Option<WidgetStatus>>>();
    let read = sdk.get("typed").await.unwrap();
    assert_eq!(read.spec, created.spec);
    assert_eq!(read.metadata.uid, created.metadata.uid);

    // An object that does not fit the type is an error naming it.
    client
        .resource(WIDGETS, "Widget")
        .patch_status("typed", &Patch::Merge(json!({"status": {"ready": true}})))
        .await
        .unwrap();
    let bools = client
        .resource(WIDGETS, "Widget")
        .typed::<Widget>()
        .get("typed")
        .await
        .unwrap();
    assert_eq!(bools.status, Some(WidgetStatus { ready: true }));
    let strict = client.resource(WIDGETS, "Widget").typed::<Vec<String>>();
    let err = strict.get("typed").await.unwrap_err();
    assert!(
        matches!(&err, Error::Decode { name, .. } if name == "typed"),
        "{err:?}"
    );
}

#[tokio::test]
async fn a_watch_streams_the_handles_changes_in_order_from_a_revision() {
    let client = with_widgets().await;
    let widgets = client.resource(WIDGETS, "Widget");
    let elsewhere = widgets.clone().namespace("elsewhere");
    widgets.create(&widget("before", "nginx")).await.unwrap();
    let from = client.current_revision().await.unwrap();
    let mut changes = widgets.watch(from).unwrap();
    assert_eq!(changes.revision(), from);

    widgets.create(&widget("w", "nginx")).await.unwrap();
    elsewhere.create(&widget("other", "nginx")).await.unwrap();
    widgets
        .patch("w", &Patch::Merge(json!({"spec": {"image": "httpd"}})))
        .await
        .unwrap();
    let deleted = widgets.delete("w").await.unwrap().into_object();

    let mut seen = Vec::new();
    for _ in 0..3 {
        let event = tokio::time::timeout(Duration::from_secs(5), changes.next())
            .await
            .expect("an event")
            .expect("the stream goes on")
            .unwrap();
        let what = match &event {
            WatchEvent::Added(_) => "added",
            WatchEvent::Modified(_) => "modified",
            WatchEvent::Deleted(_) => "deleted",
        };
        seen.push((what, event.object()["spec"]["image"].clone()));
    }
    assert_eq!(
        seen,
        [
            ("added", json!("nginx")),
            ("modified", json!("httpd")),
            ("deleted", json!("httpd")),
        ],
        "only the handle's namespace, never `before`"
    );
    assert_eq!(
        changes.revision().to_string(),
        meta::resource_version(&deleted).unwrap(),
        "the stream's revision is the last change delivered"
    );

    // Typed, and resumed from where the first stream stopped.
    let mut typed = widgets
        .clone()
        .typed::<Widget>()
        .watch(changes.revision())
        .unwrap();
    widgets.create(&widget("next", "caddy")).await.unwrap();
    let event = typed.next().await.unwrap().unwrap();
    assert_eq!(event.into_object().spec.image, "caddy");
}

#[tokio::test]
async fn a_watch_from_a_compacted_revision_expires_and_one_cut_off_ends_after_saying_so() {
    let client = with_widgets().await;
    let widgets = client.resource(WIDGETS, "Widget");
    widgets.create(&widget("a", "nginx")).await.unwrap();
    let old = client.current_revision().await.unwrap();
    widgets.create(&widget("b", "nginx")).await.unwrap();
    client
        .api()
        .compact(client.current_revision().await.unwrap())
        .await
        .unwrap();
    let err = widgets.watch(old - 1).err().expect("too old");
    assert!(matches!(err, Error::Expired { .. }), "{err:?}");

    // A subscriber falling more than the hub's history behind is cut off.
    let small = Api::open_with_history(Arc::new(MemoryBackend::new()), 4)
        .await
        .unwrap();
    let events = Client::new(small).resource("v1", "Event");
    let mut changes = events.watch(0).unwrap();
    for i in 0..20 {
        events
            .create(&json!({"metadata": {"name": format!("e{i}")}}))
            .await
            .unwrap();
    }
    let mut results = Vec::new();
    while let Some(item) = tokio::time::timeout(Duration::from_secs(5), changes.next())
        .await
        .expect("the stream ends rather than hangs")
    {
        results.push(item);
    }
    let last = results.pop().expect("at least the error");
    assert!(matches!(last, Err(Error::Expired { .. })), "{last:?}");
    assert!(results.iter().all(Result::is_ok));
    assert!(results.len() < 20, "it was cut off: {}", results.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_until_returns_once_the_condition_holds_even_for_an_object_not_there_yet() {
    let client = with_widgets().await;
    let widgets = client.resource(WIDGETS, "Widget");
    // A namesake with a longer name must not satisfy the wait.
    let waiter = {
        let widgets = widgets.clone();
        tokio::spawn(async move {
            widgets
                .wait_until("w", |w| w["status"]["ready"] == true)
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    widgets.create(&widget("w-longer", "nginx")).await.unwrap();
    widgets
        .patch_status(
            "w-longer",
            &Patch::Merge(json!({"status": {"ready": true}})),
        )
        .await
        .unwrap();
    widgets.create(&widget("w", "nginx")).await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!waiter.is_finished(), "not ready yet");
    widgets
        .patch_status("w", &Patch::Merge(json!({"status": {"ready": true}})))
        .await
        .unwrap();
    let ready = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("the wait ends")
        .unwrap()
        .unwrap();
    assert_eq!(meta::name(&ready), "w");
    assert_eq!(ready["status"]["ready"], true);

    // Already true: returns at once.
    let now = widgets
        .wait_until("w", |w| w["spec"]["image"] == "nginx")
        .await
        .unwrap();
    assert_eq!(now["metadata"]["name"], "w");
    let err = widgets
        .clone()
        .all_namespaces()
        .wait_until("w", |_| true)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::NamespaceRequired { .. }), "{err:?}");
}
