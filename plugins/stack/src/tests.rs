//! Native tests of the stack reconciler: ordering, readiness, cycles, and
//! the reverse-order teardown.

use setpoint_plugin_sdk::serde_json::{Value, json};
use setpoint_plugin_sdk::testing::FakeCtx;

use super::*;

/// db ← api ← web, and cache independent.
fn stack_json() -> Value {
    json!({
        "apiVersion": API_VERSION, "kind": "Stack",
        "metadata": {"name": "shop", "namespace": "default", "uid": "s-uid", "generation": 2},
        "spec": {"resources": [
            {"name": "web", "dependsOn": ["api"], "template": pod_template()},
            {"name": "api", "dependsOn": ["db"], "template": {
                "apiVersion": API_VERSION, "kind": "ReplicaSet",
                "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "api"}},
                    "template": {"metadata": {"labels": {"app": "api"}}, "spec": {}}}}},
            {"name": "db", "template": pod_template()},
            {"name": "cache", "template": pod_template()}
        ]}
    })
}

fn pod_template() -> Value {
    json!({"apiVersion": API_VERSION, "kind": "Pod", "metadata": {"labels": {"tier": "x"}},
        "spec": {"startupDelayMs": 10}})
}

fn stack(value: Value) -> Object<StackSpec, StackStatus> {
    Object::from_value(value).unwrap()
}

/// A child as stored, ready or not.
fn stored(child: &DynamicObject, ready: bool) -> DynamicObject {
    let mut value = child.to_value();
    value["metadata"]["namespace"] = json!("default");
    value["metadata"]["generation"] = json!(1);
    if child.kind() == "ReplicaSet" {
        let n = if ready { 2 } else { 1 };
        value["status"] = json!({"readyReplicas": n, "observedGeneration": 1});
    } else {
        let s = if ready { "True" } else { "False" };
        value["status"] = json!({"conditions": [{"type": "Ready", "status": s}]});
    }
    DynamicObject::from_value(value).unwrap()
}

fn names(response: &Response<StackStatus>) -> Vec<String> {
    let mut names: Vec<String> = response
        .children
        .as_ref()
        .unwrap()
        .iter()
        .map(|c| c.name().to_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn only_resources_without_pending_dependencies_are_created_first() {
    let response = StackReconciler
        .reconcile(&stack(stack_json()), &FakeCtx::new())
        .unwrap();
    assert_eq!(names(&response), ["shop-cache", "shop-db"], "in parallel");
    let status = response.status.unwrap();
    assert_eq!(status.summary, "0/4");
    assert_eq!(status.resources[0].state, "Waiting");
    assert_eq!(status.resources[0].waiting_for, ["api"]);
    assert!(!status.conditions[0].is_true());
}

#[test]
fn a_resource_is_created_once_its_dependencies_are_ready() {
    let first = StackReconciler
        .reconcile(&stack(stack_json()), &FakeCtx::new())
        .unwrap()
        .children
        .unwrap();
    // db exists but is not Ready yet: api still waits.
    let owned: Vec<DynamicObject> = first.iter().map(|c| stored(c, false)).collect();
    let response = StackReconciler
        .reconcile(&stack(stack_json()), &FakeCtx::new().with_owned(owned))
        .unwrap();
    assert_eq!(names(&response), ["shop-cache", "shop-db"]);

    let owned: Vec<DynamicObject> = first.iter().map(|c| stored(c, true)).collect();
    let response = StackReconciler
        .reconcile(
            &stack(stack_json()),
            &FakeCtx::new().with_owned(owned.clone()),
        )
        .unwrap();
    assert_eq!(names(&response), ["shop-api", "shop-cache", "shop-db"]);

    // The api ReplicaSet with 1 of 2 ready is not Ready: web still waits.
    let api = response
        .children
        .unwrap()
        .into_iter()
        .find(|c| c.name() == "shop-api")
        .unwrap();
    let mut with_api = owned.clone();
    with_api.push(stored(&api, false));
    let response = StackReconciler
        .reconcile(&stack(stack_json()), &FakeCtx::new().with_owned(with_api))
        .unwrap();
    assert!(!names(&response).contains(&"shop-web".to_owned()));

    let mut all = owned;
    all.push(stored(&api, true));
    let response = StackReconciler
        .reconcile(&stack(stack_json()), &FakeCtx::new().with_owned(all))
        .unwrap();
    assert_eq!(names(&response).len(), 4);
}

#[test]
fn a_stack_whose_resources_are_all_ready_is_ready() {
    let mut value = stack_json();
    value["spec"]["resources"] = json!([{"name": "db", "template": pod_template()}]);
    let s = stack(value);
    let children = StackReconciler
        .reconcile(&s, &FakeCtx::new())
        .unwrap()
        .children
        .unwrap();
    let owned = vec![stored(&children[0], true)];
    let status = StackReconciler
        .reconcile(&s, &FakeCtx::new().with_owned(owned))
        .unwrap()
        .status
        .unwrap();
    assert_eq!(status.summary, "1/1");
    assert!(status.conditions[0].is_true());
}

#[test]
fn a_dependency_cycle_is_a_permanent_error_naming_the_cycle() {
    let mut value = stack_json();
    value["spec"]["resources"][2]["dependsOn"] = json!(["web"]);
    let err = StackReconciler
        .reconcile(&stack(value), &FakeCtx::new())
        .unwrap_err();
    assert!(err.is_permanent());
    assert_eq!(err.message(), "dependency cycle: web -> api -> db -> web");
}

#[test]
fn a_dependency_on_an_unknown_resource_is_a_permanent_error() {
    let mut value = stack_json();
    value["spec"]["resources"][3]["dependsOn"] = json!(["queue"]);
    let err = StackReconciler
        .reconcile(&stack(value), &FakeCtx::new())
        .unwrap_err();
    assert!(
        err.is_permanent() && err.message().contains("queue"),
        "{err}"
    );
}

#[test]
fn teardown_removes_leaves_first_and_then_releases_the_finalizer() {
    let s = stack(stack_json());
    let children = ["web", "api", "db", "cache"].map(|n| {
        stored(
            &child(
                s.spec.resources.iter().find(|r| r.name == n).unwrap(),
                &format!("shop-{n}"),
            )
            .unwrap(),
            true,
        )
    });
    let mut owned = children.to_vec();
    let mut order = Vec::new();
    for _ in 0..5 {
        let response = StackReconciler
            .reconcile(
                &s,
                &FakeCtx::new()
                    .with_owned(owned.clone())
                    .with_finalizing(true),
            )
            .unwrap();
        if response.remove_finalizer {
            assert!(owned.is_empty());
            break;
        }
        let kept = names(&response);
        let mut removed: Vec<String> = owned
            .iter()
            .map(|o| o.name().to_owned())
            .filter(|n| !kept.contains(n))
            .collect();
        removed.sort();
        order.push(removed);
        owned.retain(|o| kept.contains(&o.name().to_owned()));
    }
    assert_eq!(
        order,
        [
            vec!["shop-cache", "shop-web"],
            vec!["shop-api"],
            vec!["shop-db"]
        ]
    );
}

#[test]
fn the_manifest_declares_the_finalizer_and_owned_kinds() {
    let manifest = StackReconciler.manifest();
    assert_eq!(manifest.finalizer.as_deref(), Some(FINALIZER));
    assert_eq!(
        manifest.owns,
        [
            KindRef::new(API_VERSION, "ReplicaSet"),
            KindRef::new(API_VERSION, "Pod")
        ]
    );
}
