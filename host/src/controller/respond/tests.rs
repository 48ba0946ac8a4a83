//! The applier against a store: child events, the status patch.

use super::*;
use crate::api::ListOptions;
use crate::object::KindRef;
use crate::store::MemoryBackend;

fn manifest() -> Manifest {
    Manifest {
        name: "keeper".to_owned(),
        version: "1".to_owned(),
        reconciles: KindRef::new("v1", "Secret"),
        owns: vec![KindRef::new("v1", "Secret")],
        definitions: vec![],
        finalizer: None,
        destinations: vec![],
        secrets: vec![],
    }
}

/// A store with a parent Secret "p"; the Secret kind.
async fn store() -> (Api, Arc<KindInfo>, Object) {
    let api = Api::open(Arc::new(MemoryBackend::new())).await.unwrap();
    let kind = api.kinds().require("v1", "Secret").unwrap();
    let parent = api.create(&kind, secret("p")).await.unwrap();
    (api, kind, parent)
}

fn secret(name: &str) -> Object {
    json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": "default"}})
}

/// (reason, message) of the events recorded, sorted.
async fn events(api: &Api) -> Vec<(String, String)> {
    let kind = api.kinds().require("v1", "Event").unwrap();
    let mut events: Vec<_> = api
        .list(&kind, &ListOptions::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(|e| {
            let text = |f: &str| e[f].as_str().unwrap_or_default().to_owned();
            (text("reason"), text("message"))
        })
        .collect();
    events.sort();
    events
}

fn children(names: &[&str]) -> Response {
    Response {
        children: Some(names.iter().map(|n| secret(n)).collect()),
        ..Response::default()
    }
}

#[tokio::test]
async fn the_host_records_an_event_per_child_it_creates_or_deletes_and_none_when_converged() {
    let (api, kind, parent) = store().await;
    let (manifest, owned_kinds) = (manifest(), [kind.clone()]);
    let applier = Applier::new(&api, &manifest, &owned_kinds, &kind, None);

    applier
        .apply(&parent, &[], &children(&["p-0", "p-1", "p-2"]))
        .await
        .unwrap();
    let created = |name: &str| {
        (
            "SuccessfulCreate".to_owned(),
            format!("Created secret: {name}"),
        )
    };
    let deleted = |name: &str| {
        (
            "SuccessfulDelete".to_owned(),
            format!("Deleted secret: {name}"),
        )
    };
    assert_eq!(
        events(&api).await,
        [created("p-0"), created("p-1"), created("p-2")]
    );

    // p-1 is on its way out already: neither counted as deleted again
    // nor recreated; p-2 goes.
    let get = |name: &'static str| {
        let api = api.clone();
        let kind = kind.clone();
        async move { Arc::new(api.get(&kind, Some("default"), name).await.unwrap()) }
    };
    let mut leaving = (*get("p-1").await).clone();
    leaving["metadata"]["deletionTimestamp"] = json!("2025-01-02T03:04:05Z");
    let owned = [get("p-0").await, Arc::new(leaving), get("p-2").await];
    let applier = Applier::new(&api, &manifest, &owned_kinds, &kind, None);
    applier
        .apply(&parent, &owned, &children(&["p-0"]))
        .await
        .unwrap();
    assert_eq!(
        events(&api).await,
        [
            created("p-0"),
            created("p-1"),
            created("p-2"),
            deleted("p-2")
        ]
    );

    // Converged: nothing written, nothing said.
    let owned = [get("p-0").await];
    let applier = Applier::new(&api, &manifest, &owned_kinds, &kind, None);
    applier
        .apply(&parent, &owned, &children(&["p-0"]))
        .await
        .unwrap();
    assert_eq!(events(&api).await.len(), 4);
    assert!(applier.written.lock().unwrap().is_empty());
}

#[tokio::test]
async fn a_plan_keeps_the_child_events_instead_of_recording_them() {
    let (api, kind, parent) = store().await;
    let (manifest, owned_kinds) = (manifest(), [kind.clone()]);
    let applier = Applier::new(&api, &manifest, &owned_kinds, &kind, None).keeping_events();
    applier
        .apply(&parent, &[], &children(&["p-0"]))
        .await
        .unwrap();
    assert!(events(&api).await.is_empty());
    let kept = applier.child_events.lock().unwrap();
    assert_eq!(kept.len(), 1);
    assert_eq!(
        (kept[0].reason.as_str(), kept[0].message.as_str()),
        ("SuccessfulCreate", "Created secret: p-0")
    );
}

#[tokio::test]
async fn the_status_patch_is_made_on_the_version_the_reconciler_saw() {
    let (api, kind, parent) = store().await;
    let (manifest, owned_kinds) = (manifest(), [kind.clone()]);
    let applier = Applier::new(&api, &manifest, &owned_kinds, &kind, None);
    let status = |patch: Value| Response {
        status: Some(patch),
        ..Response::default()
    };
    applier
        .apply(
            &parent,
            &[],
            &status(json!({"phase": "Ready", "error": null})),
        )
        .await
        .unwrap();
    let stored = api.get(&kind, Some("default"), "p").await.unwrap();
    assert_eq!(stored["status"], json!({"phase": "Ready"}));
    // The reconciler decided on `parent`, which is no longer stored.
    let stale = applier
        .apply(&parent, &[], &status(json!({"phase": "Failed"})))
        .await;
    assert!(
        matches!(stale, Err(Error::Api(api::Error::Conflict { .. }))),
        "{stale:?}"
    );
    // Clearing a field is a merge patch's null.
    applier
        .apply(&stored, &[], &status(json!({"phase": null})))
        .await
        .unwrap();
    let cleared = api.get(&kind, Some("default"), "p").await.unwrap();
    assert_eq!(cleared["status"], json!({}));
}

#[tokio::test]
async fn a_status_patch_that_sets_conditions_keeps_the_hosts_own() {
    let (api, kind, _) = store().await;
    let (manifest, owned_kinds) = (manifest(), [kind.clone()]);
    let applier = Applier::new(&api, &manifest, &owned_kinds, &kind, None);
    let stored = api.get(&kind, Some("default"), "p").await.unwrap();
    let host_set = api
        .patch_status(
            &kind,
            Some("default"),
            "p",
            meta::resource_version(&stored),
            &json!({"conditions": [
                {"type": "EffectsAllowed", "status": "False", "reason": "GrantPending"},
                {"type": "Ready", "status": "False", "reason": "Old"},
            ]}),
        )
        .await
        .unwrap();
    let response = Response {
        status: Some(
            json!({"conditions": [{"type": "Ready", "status": "True", "reason": "Fine"}]}),
        ),
        ..Response::default()
    };
    applier.apply(&host_set, &[], &response).await.unwrap();
    let after = api.get(&kind, Some("default"), "p").await.unwrap();
    let types: Vec<(&str, &str)> = after["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["type"].as_str().unwrap(), c["reason"].as_str().unwrap()))
        .collect();
    assert_eq!(
        types,
        [("Ready", "Fine"), ("EffectsAllowed", "GrantPending")],
        "the plugin's Ready replaced, the host's condition kept"
    );
}
