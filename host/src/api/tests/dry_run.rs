//! Server-side dry run ([`Api::dry_run`]): every kind of write answers as
//! the real write would — success or the same error — while nothing is
//! stored, no revision moves, no watcher sees an event and no kind is
//! registered or removed.

use serde_json::json;

use super::*;
use crate::api::{DeleteOptions, Propagation};
use crate::object::patch::JsonPatch;

/// The store's revision and a subscription that must stay silent.
struct Quiet {
    revision: i64,
    subscription: crate::watch::Subscription,
}

impl Quiet {
    async fn start(api: &Api) -> Self {
        // Subscribed after the store's revision rather than after waiting
        // for the hub to reach it: on a shared etcd that revision may come
        // from another prefix, which this hub never sees.
        let revision = api.current_revision().await.unwrap();
        Self {
            revision,
            subscription: api.hub().subscribe("/registry/", revision).unwrap(),
        }
    }

    /// Nothing was written since `start`: the revision did not move and a
    /// watcher saw no event.
    async fn assert_nothing_written(mut self, api: &Api, what: &str) {
        assert_eq!(
            api.current_revision().await.unwrap(),
            self.revision,
            "{what}: the revision moved"
        );
        let next = tokio::time::timeout(Duration::from_millis(50), self.subscription.next()).await;
        assert!(next.is_err(), "{what}: a watcher saw a change");
    }
}

/// The answer without what differs between any two writes of the same
/// object (uid, timestamps, resource version).
fn comparable(mut object: Object) -> Object {
    let m = meta::metadata_mut(&mut object);
    for field in [
        "uid",
        "creationTimestamp",
        "resourceVersion",
        "deletionTimestamp",
    ] {
        m.remove(field);
    }
    if let Some(fields) = m.get_mut("managedFields").and_then(|f| f.as_array_mut()) {
        for entry in fields {
            entry.as_object_mut().unwrap().remove("time");
        }
    }
    object
}

/// The object without its `resourceVersion` precondition.
fn unpinned(mut object: Object) -> Object {
    meta::metadata_mut(&mut object).remove("resourceVersion");
    object
}

#[tokio::test]
async fn every_dry_run_write_answers_as_the_real_one_and_writes_nothing() {
    let api = api().await;
    let kind = widgets(&api).await;
    let dry = api.dry_run();
    assert!(dry.is_dry_run() && !api.is_dry_run());

    // Create: the defaulted, admitted object, with no resource version.
    let quiet = Quiet::start(&api).await;
    let answer = dry.create(&kind, widget("w")).await.unwrap();
    quiet.assert_nothing_written(&api, "create").await;
    assert!(answer["metadata"].get("resourceVersion").is_none());
    assert!(!exists(&api, &kind, "w").await);
    let real = api.create(&kind, widget("w")).await.unwrap();
    assert_eq!(comparable(answer), comparable(real.clone()));
    assert_eq!(real["spec"]["replicas"], 1, "defaulted in both");

    // Update, merge patch, JSON patch, status, apply: the same answers.
    let mut changed = real.clone();
    changed["spec"]["image"] = json!("redis");
    let merge = json!({"spec": {"color": "red"}});
    let ops = JsonPatch::from_value(&json!([{"op": "add", "path": "/spec/tags", "value": ["a"]}]))
        .unwrap();
    let mut status = real.clone();
    status["status"] = json!({"phase": "Running"});
    let mut applied = widget("w");
    applied["spec"]["replicas"] = json!(7);
    let quiet = Quiet::start(&api).await;
    let answers = [
        dry.update(&kind, changed.clone()).await.unwrap(),
        dry.merge_patch(&kind, Some("default"), "w", &merge, false)
            .await
            .unwrap(),
        dry.json_patch(&kind, Some("default"), "w", &ops, false)
            .await
            .unwrap(),
        dry.update_status(&kind, status.clone()).await.unwrap(),
        dry.apply(&kind, applied.clone(), "tester", false)
            .await
            .unwrap(),
    ];
    quiet.assert_nothing_written(&api, "updates").await;
    for answer in &answers {
        assert_eq!(
            meta::resource_version(answer),
            meta::resource_version(&real),
            "an updated object keeps the stored version"
        );
    }
    assert_eq!(api.get(&kind, Some("default"), "w").await.unwrap(), real);
    let reals = [
        api.update(&kind, changed).await.unwrap(),
        api.merge_patch(&kind, Some("default"), "w", &merge, false)
            .await
            .unwrap(),
        api.json_patch(&kind, Some("default"), "w", &ops, false)
            .await
            .unwrap(),
        api.update_status(&kind, unpinned(status)).await.unwrap(),
        api.apply(&kind, applied, "tester", false).await.unwrap(),
    ];
    // Each real write builds on the previous one, each dry run on `real`:
    // compare what each changed.
    assert_eq!(answers[0]["spec"]["image"], reals[0]["spec"]["image"]);
    assert_eq!(answers[0]["metadata"]["generation"], 2);
    assert_eq!(answers[1]["spec"]["color"], "red");
    assert_eq!(answers[2]["spec"]["tags"], json!(["a"]));
    assert_eq!(answers[3]["status"], reals[3]["status"]);
    assert_eq!(answers[4]["spec"]["replicas"], 7);
    assert_eq!(
        comparable(answers[4].clone())["metadata"]["managedFields"],
        comparable(reals[4].clone())["metadata"]["managedFields"]
    );

    // Delete: the answer of a delete, the object still there.
    let quiet = Quiet::start(&api).await;
    let gone = dry
        .delete(&kind, Some("default"), "w", &DeleteOptions::default())
        .await
        .unwrap();
    quiet.assert_nothing_written(&api, "delete").await;
    assert_eq!(meta::name(&gone), "w");
    assert!(exists(&api, &kind, "w").await);
}

#[tokio::test]
async fn a_dry_run_fails_exactly_where_the_real_write_would() {
    let api = api().await;
    let kind = widgets(&api).await;
    let dry = api.dry_run().with_max_object_bytes(4096);
    let stored = api.create(&kind, widget("w")).await.unwrap();

    let mut invalid = widget("bad");
    invalid["spec"]["replicas"] = json!(1000);
    let mut stale = stored.clone();
    stale["metadata"]["resourceVersion"] = json!("1");
    stale["spec"]["image"] = json!("x");
    let mut big = widget("big");
    big["spec"]["image"] = json!("x".repeat(8192));
    let failing_test =
        JsonPatch::from_value(&json!([{"op": "test", "path": "/spec/image", "value": "no"}]))
            .unwrap();

    let quiet = Quiet::start(&api).await;
    let errors = [
        dry.create(&kind, widget("w")).await.unwrap_err(),
        dry.create(&kind, invalid).await.unwrap_err(),
        dry.update(&kind, stale).await.unwrap_err(),
        dry.create(&kind, big).await.unwrap_err(),
        dry.json_patch(&kind, Some("default"), "w", &failing_test, false)
            .await
            .unwrap_err(),
        dry.delete(&kind, Some("default"), "nope", &DeleteOptions::default())
            .await
            .unwrap_err(),
        dry.delete(
            &kind,
            Some("default"),
            "w",
            &DeleteOptions::default().with_uid("another-uid"),
        )
        .await
        .unwrap_err(),
    ];
    quiet.assert_nothing_written(&api, "failed dry runs").await;
    let codes: Vec<u16> = errors.iter().map(Error::code).collect();
    assert_eq!(codes, [409, 422, 409, 413, 422, 404, 409], "{errors:?}");
}

#[tokio::test]
async fn a_dry_run_delete_with_finalizers_or_propagation_changes_nothing() {
    let api = api().await;
    let kind = widgets(&api).await;
    let mut held = widget("held");
    held["metadata"]["finalizers"] = json!(["example.com/cleanup"]);
    let owner = api.create(&kind, held).await.unwrap();
    let child = api
        .create(&kind, owned_by(widget("child"), &owner, true))
        .await
        .unwrap();
    let gc = crate::system::GarbageCollector::new(api.clone(), Default::default()).start();
    let dry = api.dry_run();

    let quiet = Quiet::start(&api).await;
    for policy in [
        Propagation::Background,
        Propagation::Foreground,
        Propagation::Orphan,
    ] {
        let answer = dry
            .delete(
                &kind,
                Some("default"),
                "held",
                &DeleteOptions::default().with_propagation(policy),
            )
            .await
            .unwrap();
        assert!(
            answer["metadata"]["deletionTimestamp"].is_string(),
            "{policy:?}: the answer shows the pending deletion"
        );
    }
    quiet.assert_nothing_written(&api, "deletes").await;
    assert_eq!(
        api.get(&kind, Some("default"), "held").await.unwrap(),
        owner
    );
    assert_eq!(
        api.get(&kind, Some("default"), "child").await.unwrap(),
        child
    );
    gc.abort();
}

#[tokio::test]
async fn a_dry_run_definition_registers_and_removes_no_kind() {
    let api = api().await;
    let dry = api.dry_run();
    let quiet = Quiet::start(&api).await;
    let answer = dry.create(&crd_kind(&api), widget_crd()).await.unwrap();
    quiet
        .assert_nothing_written(&api, "definition create")
        .await;
    assert_eq!(answer["status"]["conditions"][1]["type"], "Established");
    assert!(
        api.kinds()
            .by_plural("test.setpoint.dev", "widgets")
            .is_none(),
        "no kind registered by a dry run"
    );

    let kind = widgets(&api).await;
    api.create(&kind, widget("w")).await.unwrap();
    let quiet = Quiet::start(&api).await;
    dry.delete(
        &crd_kind(&api),
        None,
        "widgets.test.setpoint.dev",
        &DeleteOptions::default(),
    )
    .await
    .unwrap();
    quiet
        .assert_nothing_written(&api, "definition delete")
        .await;
    assert!(
        api.kinds()
            .by_plural("test.setpoint.dev", "widgets")
            .is_some()
    );
    assert!(exists(&api, &kind, "w").await);
}
