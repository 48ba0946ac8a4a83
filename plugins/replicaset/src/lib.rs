//! `replicaset`: keeps `spec.replicas` copies of a Pod template in existence.
//!
//! Each reconcile computes the full desired set of Pods from the spec alone and
//! hands it to the host, which creates, updates and deletes Pods to match,
//! sets their owner references and records the `SuccessfulCreate` /
//! `SuccessfulDelete` events. The status is counted from the Pods that
//! actually exist. The plugin brings the CRDs of both ReplicaSet and Pod, so
//! it works even where no `podsim` plugin is loaded (its Pods then just stay
//! un-started).

pub use demo_kinds::API_VERSION;
use demo_kinds::pod::Pod;
pub use demo_kinds::replicaset::{ReplicaSetSpec, ReplicaSetStatus};
use setpoint_plugin_sdk::{
    Ctx, DynamicObject, Error, Manifest, Object, Reconciler, Response, export_reconciler,
    find_condition,
};

/// The reconciler.
#[derive(Debug, Default)]
pub struct ReplicaSetReconciler;

impl Reconciler for ReplicaSetReconciler {
    type Spec = ReplicaSetSpec;
    type Status = ReplicaSetStatus;

    fn manifest(&self) -> Manifest {
        let replica_set = demo_kinds::replicaset::definition();
        Manifest::new(
            env!("CARGO_PKG_NAME"),
            env!("CARGO_PKG_VERSION"),
            replica_set.kind(),
        )
        .owns(demo_kinds::pod::kind())
        .define(replica_set)
        // Pods too, so replica sets work without podsim (their Pods then
        // just stay un-started).
        .define(demo_kinds::pod::definition())
    }

    fn reconcile(
        &self,
        rs: &Object<ReplicaSetSpec, ReplicaSetStatus>,
        ctx: &Ctx,
    ) -> Result<Response<ReplicaSetStatus>, Error> {
        // Garbage collection removes the Pods of a deleted ReplicaSet; creating
        // replacements now would only fight it.
        if rs.is_deleting() {
            return Ok(Response::new());
        }
        check_selector(&rs.spec)?;

        // Names are `<rs>-<index>`: the host's cache may lag behind its own
        // writes, and with stable names a reconcile that does not see a Pod
        // created a moment ago asks for the same Pod again instead of an extra.
        let desired = (0..rs.spec.replicas)
            .map(|index| pod(rs, index))
            .collect::<Result<Vec<_>, _>>()?;

        // Pods already being deleted count for nothing: not as replicas, and
        // not as something to delete again.
        let pods = ctx.owned::<Pod>()?;
        let live: Vec<_> = pods.iter().filter(|pod| !pod.is_deleting()).collect();

        let ready = live
            .iter()
            .filter(|pod| {
                find_condition(&pod.status.conditions, "Ready").is_some_and(|c| c.is_true())
            })
            .count();
        let status = ReplicaSetStatus {
            replicas: count(live.len()),
            ready_replicas: count(ready),
            available_replicas: count(ready),
            observed_generation: rs.metadata.generation,
        };
        Ok(Response::new().children(desired).status(status))
    }
}

/// The selector must be non-empty and the template must carry its labels,
/// or the Pods would not be selected by their own ReplicaSet. Only a change
/// to the spec fixes that, hence a permanent error.
fn check_selector(spec: &ReplicaSetSpec) -> Result<(), Error> {
    if spec.selector.match_labels.is_empty() {
        return Err(Error::permanent(
            "spec.selector.matchLabels must not be empty",
        ));
    }
    let missing: Vec<String> = spec
        .selector
        .missing(&spec.template.metadata.labels)
        .collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(Error::permanent(format!(
            "spec.template.metadata.labels do not match spec.selector.matchLabels: missing {}",
            missing.join(", ")
        )))
    }
}

/// The desired Pod at `index`. Namespace and owner reference are the host's job.
fn pod(rs: &Object<ReplicaSetSpec, ReplicaSetStatus>, index: u32) -> Result<DynamicObject, Error> {
    let name = format!("{}-{index}", rs.name());
    rs.spec.template.instantiate(API_VERSION, "Pod", name)
}

fn count(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

export_reconciler!(ReplicaSetReconciler);

#[cfg(test)]
mod tests {
    use super::*;
    use setpoint_plugin_sdk::KindRef;
    use setpoint_plugin_sdk::serde_json::{Value, json};
    use setpoint_plugin_sdk::testing::FakeCtx;

    fn replica_set(replicas: u32) -> Object<ReplicaSetSpec, ReplicaSetStatus> {
        Object::from_value(replica_set_json(replicas)).unwrap()
    }

    fn replica_set_json(replicas: u32) -> Value {
        json!({
            "apiVersion": API_VERSION, "kind": "ReplicaSet",
            "metadata": {"name": "web", "namespace": "default", "uid": "rs-uid", "generation": 4},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {
                    "metadata": {"labels": {"app": "web", "tier": "front"}},
                    "spec": {"startupDelayMs": 10, "containers": [{"image": "nginx"}]}
                }
            }
        })
    }

    /// A Pod as the host stores it: the desired child plus what the host and
    /// podsim add (namespace, uid, owner reference, status).
    fn stored(child: &DynamicObject, ready: bool) -> DynamicObject {
        let mut pod = child.to_value();
        pod["metadata"]["namespace"] = json!("default");
        pod["metadata"]["uid"] = json!(format!("uid-{}", child.name()));
        pod["metadata"]["ownerReferences"] = json!([{"apiVersion": API_VERSION, "kind": "ReplicaSet",
            "name": "web", "uid": "rs-uid", "controller": true}]);
        let ready = if ready { "True" } else { "False" };
        pod["status"] =
            json!({"phase": "Running", "conditions": [{"type": "Ready", "status": ready}]});
        DynamicObject::from_value(pod).unwrap()
    }

    fn names(children: &[DynamicObject]) -> Vec<&str> {
        children.iter().map(DynamicObject::name).collect()
    }

    #[test]
    fn a_new_replica_set_asks_for_all_its_pods() {
        let response = ReplicaSetReconciler
            .reconcile(&replica_set(3), &FakeCtx::new())
            .unwrap();
        let children = response.children.unwrap();
        assert_eq!(names(&children), ["web-0", "web-1", "web-2"]);
        assert_eq!(
            children[2].to_value(),
            json!({
                "apiVersion": API_VERSION, "kind": "Pod",
                "metadata": {"name": "web-2", "labels": {"app": "web", "tier": "front"}},
                "spec": {"startupDelayMs": 10, "containers": [{"image": "nginx"}]}
            })
        );
        // The host records `SuccessfulCreate` for each Pod it creates: the
        // plugin does not predict it.
        assert!(response.events.is_empty(), "{:?}", response.events);
        let status = response.status.unwrap();
        assert_eq!((status.replicas, status.ready_replicas), (0, 0));
        assert_eq!(status.observed_generation, Some(4));
    }

    #[test]
    fn a_converged_replica_set_reproduces_what_is_stored() {
        let mut rs = replica_set(2);
        let first = ReplicaSetReconciler
            .reconcile(&rs, &FakeCtx::new())
            .unwrap();
        let pods = first.children.clone().unwrap();
        let ctx = FakeCtx::new().with_owned(pods.iter().map(|p| stored(p, true)).collect());
        rs.status = ReplicaSetStatus {
            replicas: 2,
            ready_replicas: 2,
            available_replicas: 2,
            observed_generation: Some(4),
        };

        let response = ReplicaSetReconciler.reconcile(&rs, &ctx).unwrap();
        assert_eq!(response.children, Some(pods), "same children");
        assert_eq!(response.status.as_ref(), Some(&rs.status), "same status");
        assert!(response.events.is_empty(), "no events");
        assert_eq!(response.requeue_after, None);
    }

    #[test]
    fn only_ready_pods_count_as_ready() {
        let rs = replica_set(3);
        let pods = ReplicaSetReconciler
            .reconcile(&rs, &FakeCtx::new())
            .unwrap()
            .children
            .unwrap();
        let owned = vec![
            stored(&pods[0], true),
            stored(&pods[1], false),
            pods[2].clone(),
        ];
        let status = ReplicaSetReconciler
            .reconcile(&rs, &FakeCtx::new().with_owned(owned))
            .unwrap()
            .status
            .unwrap();
        assert_eq!(
            (
                status.replicas,
                status.ready_replicas,
                status.available_replicas
            ),
            (3, 1, 1)
        );
    }

    #[test]
    fn scaling_down_drops_the_highest_indexes() {
        let pods = ReplicaSetReconciler
            .reconcile(&replica_set(3), &FakeCtx::new())
            .unwrap()
            .children
            .unwrap();
        let ctx = FakeCtx::new().with_owned(pods.iter().map(|p| stored(p, true)).collect());
        let response = ReplicaSetReconciler
            .reconcile(&replica_set(1), &ctx)
            .unwrap();
        assert_eq!(names(&response.children.unwrap()), ["web-0"]);
        // The host records `SuccessfulDelete` for each Pod it deletes.
        assert!(response.events.is_empty(), "{:?}", response.events);
        // Until the host deletes them, the pods still exist.
        assert_eq!(response.status.unwrap().replicas, 3);
    }

    #[test]
    fn pods_being_deleted_are_not_counted_or_deleted_again() {
        let pods = ReplicaSetReconciler
            .reconcile(&replica_set(2), &FakeCtx::new())
            .unwrap()
            .children
            .unwrap();
        let mut leaving = stored(&pods[1], true).into_value();
        leaving["metadata"]["deletionTimestamp"] = json!("2025-01-02T03:04:05Z");
        let owned = vec![
            stored(&pods[0], true),
            DynamicObject::from_value(leaving).unwrap(),
        ];
        let response = ReplicaSetReconciler
            .reconcile(&replica_set(1), &FakeCtx::new().with_owned(owned))
            .unwrap();
        assert!(response.events.is_empty(), "{:?}", response.events);
        let status = response.status.unwrap();
        assert_eq!((status.replicas, status.ready_replicas), (1, 1));
    }

    #[test]
    fn replicas_default_to_one() {
        let mut value = replica_set_json(0);
        value["spec"].as_object_mut().unwrap().remove("replicas");
        let rs = Object::from_value(value).unwrap();
        let response = ReplicaSetReconciler
            .reconcile(&rs, &FakeCtx::new())
            .unwrap();
        assert_eq!(names(&response.children.unwrap()), ["web-0"]);
    }

    #[test]
    fn zero_replicas_means_no_pods() {
        let response = ReplicaSetReconciler
            .reconcile(&replica_set(0), &FakeCtx::new())
            .unwrap();
        assert_eq!(response.children, Some(Vec::new()));
    }

    #[test]
    fn a_template_that_does_not_match_the_selector_is_a_permanent_error() {
        let mut rs = replica_set(1);
        rs.spec
            .template
            .metadata
            .labels
            .insert("app".into(), "api".into());
        let err = ReplicaSetReconciler
            .reconcile(&rs, &FakeCtx::new())
            .unwrap_err();
        assert_eq!(
            err,
            Error::permanent(
                "spec.template.metadata.labels do not match spec.selector.matchLabels: missing app=web"
            )
        );
        rs.spec.selector.match_labels.clear();
        let err = ReplicaSetReconciler
            .reconcile(&rs, &FakeCtx::new())
            .unwrap_err();
        assert!(
            err.is_permanent() && err.message().contains("must not be empty"),
            "{err}"
        );
    }

    #[test]
    fn a_missing_selector_is_a_permanent_error_naming_the_field() {
        let mut value = replica_set_json(1);
        value["spec"].as_object_mut().unwrap().remove("selector");
        let err = Object::<ReplicaSetSpec, ReplicaSetStatus>::from_value(value).unwrap_err();
        assert_eq!(err, Error::permanent("spec: missing field `selector`"));
    }

    #[test]
    fn a_deleting_replica_set_leaves_its_pods_to_garbage_collection() {
        let mut rs = replica_set(3);
        rs.metadata.deletion_timestamp = Some(setpoint_plugin_sdk::Time::from_unix_ms(0));
        assert_eq!(
            ReplicaSetReconciler
                .reconcile(&rs, &FakeCtx::new())
                .unwrap(),
            Response::new()
        );
    }

    #[test]
    fn the_manifest_owns_pods_and_carries_both_definitions() {
        let manifest = ReplicaSetReconciler.manifest();
        assert_eq!(manifest.name, "replicaset");
        assert_eq!(manifest.reconciles, KindRef::new(API_VERSION, "ReplicaSet"));
        assert_eq!(manifest.owns, [KindRef::new(API_VERSION, "Pod")]);
        let kinds: Vec<&Value> = manifest
            .definitions
            .iter()
            .map(|crd| &crd["spec"]["names"]["kind"])
            .collect();
        assert_eq!(kinds, [&json!("ReplicaSet"), &json!("Pod")]);
        assert!(
            manifest
                .definitions
                .iter()
                .all(|crd| crd["spec"]["group"] == "demo.setpoint.dev")
        );
    }
}
