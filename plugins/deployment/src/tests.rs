//! Native tests of the deployment reconciler: single decisions, and whole
//! rollouts against a small simulation of the replicaset and podsim plugins.

use std::collections::BTreeMap;

use setpoint_plugin_sdk::serde_json::{Value, json};
use setpoint_plugin_sdk::testing::FakeCtx;

use super::*;

fn deployment(replicas: u32, image: &str, surge: u32, unavailable: u32) -> Value {
    json!({
        "apiVersion": API_VERSION, "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "default", "uid": "d-uid", "generation": 1},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"image": image}},
            "strategy": {"rollingUpdate": {"maxSurge": surge, "maxUnavailable": unavailable}}
        }
    })
}

/// The replicaset and podsim plugins, reduced to counts: each replica set
/// keeps Pods `0..n` (ready or not) and reports them in its status.
#[derive(Default)]
struct World {
    /// Replica set name → (stored object, Pods' readiness by index).
    sets: BTreeMap<String, (Value, Vec<bool>)>,
    next_uid: u32,
}

impl World {
    fn owned(&self) -> Vec<DynamicObject> {
        self.sets
            .values()
            .map(|(rs, _)| DynamicObject::from_value(rs.clone()).unwrap())
            .collect()
    }

    fn pods(&self) -> Vec<DynamicObject> {
        let mut pods = Vec::new();
        for (name, (rs, ready)) in &self.sets {
            for (i, r) in ready.iter().enumerate() {
                let status = if *r { "True" } else { "False" };
                pods.push(
                    DynamicObject::from_value(json!({
                        "apiVersion": API_VERSION, "kind": "Pod",
                        "metadata": {"name": format!("{name}-{i}"), "namespace": "default",
                            "labels": {"app": "web"},
                            "ownerReferences": [{"apiVersion": API_VERSION, "kind": "ReplicaSet",
                                "name": name, "uid": rs["metadata"]["uid"], "controller": true}]},
                        "status": {"conditions": [{"type": "Ready", "status": status}]}
                    }))
                    .unwrap(),
                );
            }
        }
        pods
    }

    /// One deployment reconcile, its children applied.
    fn reconcile(&mut self, deploy: &Value) -> Response<DeploymentStatus> {
        let mut ctx = FakeCtx::new().with_owned(self.owned());
        for pod in self.pods() {
            ctx = ctx.with_object(pod);
        }
        let deploy = Object::from_value(deploy.clone()).unwrap();
        let response = DeploymentReconciler.reconcile(&deploy, &ctx).unwrap();
        for child in response.children.clone().unwrap() {
            let mut value = child.into_value();
            let name = value["metadata"]["name"].as_str().unwrap().to_owned();
            match self.sets.get_mut(&name) {
                Some((rs, _)) => rs["spec"] = value["spec"].clone(),
                None => {
                    self.next_uid += 1;
                    value["metadata"]["uid"] = json!(format!("rs-{}", self.next_uid));
                    self.sets.insert(name, (value, Vec::new()));
                }
            }
        }
        response
    }

    /// The replica sets create or delete Pods to match their spec (new Pods
    /// start unready), then report their status.
    fn replica_sets_act(&mut self) {
        for (rs, pods) in self.sets.values_mut() {
            let want = rs["spec"]["replicas"].as_u64().unwrap() as usize;
            pods.resize(want, false);
        }
        self.replica_sets_report();
    }

    fn replica_sets_report(&mut self) {
        for (rs, pods) in self.sets.values_mut() {
            let ready = pods.iter().filter(|r| **r).count();
            rs["status"] = json!({"replicas": pods.len(), "readyReplicas": ready,
                "availableReplicas": ready, "observedGeneration": 1});
        }
    }

    /// Every Pod becomes ready.
    fn pods_start(&mut self) {
        for (_, pods) in self.sets.values_mut() {
            pods.iter_mut().for_each(|r| *r = true);
        }
        self.replica_sets_report();
    }

    fn total_pods(&self) -> usize {
        self.sets.values().map(|(_, p)| p.len()).sum()
    }

    fn ready_pods(&self) -> usize {
        self.sets
            .values()
            .map(|(_, p)| p.iter().filter(|r| **r).count())
            .sum()
    }

    fn replicas_of(&self, image: &str) -> usize {
        self.sets
            .values()
            .filter(|(rs, _)| rs["spec"]["template"]["spec"]["image"] == image)
            .map(|(_, p)| p.len())
            .sum()
    }
}

/// Runs reconcile / replica sets / Pods rounds until nothing changes,
/// checking the rollout bounds after every step.
fn roll(world: &mut World, deploy: &Value, surge: usize, unavailable: usize) -> usize {
    let replicas = deploy["spec"]["replicas"].as_u64().unwrap() as usize;
    // From a converged state readiness must hold throughout; a first rollout starts at zero.
    let check_ready = world.ready_pods() + unavailable >= replicas;
    for round in 0..100 {
        let before: Vec<Value> = world.sets.values().map(|(rs, _)| rs.clone()).collect();
        world.reconcile(deploy);
        world.replica_sets_act();
        assert!(
            world.total_pods() <= replicas + surge,
            "round {round}: {} pods",
            world.total_pods()
        );
        assert!(
            !check_ready || world.ready_pods() + unavailable >= replicas,
            "round {round}: {} ready",
            world.ready_pods()
        );
        world.pods_start();
        let after: Vec<Value> = world.sets.values().map(|(rs, _)| rs.clone()).collect();
        if before == after {
            return round;
        }
    }
    panic!("the rollout did not converge");
}

#[test]
fn a_new_deployment_asks_for_one_replica_set_with_every_replica() {
    let mut world = World::default();
    let response = world.reconcile(&deployment(3, "v1", 1, 0));
    let children = response.children.unwrap();
    assert_eq!(children.len(), 1);
    let rs = children[0].to_value();
    let hash = template_hash(&deployment(3, "v1", 1, 0)["spec"]["template"]);
    assert_eq!(rs["metadata"]["name"], format!("web-{hash}"));
    assert_eq!(rs["spec"]["replicas"], 3);
    assert_eq!(
        rs["spec"]["selector"]["matchLabels"][TEMPLATE_HASH_LABEL],
        hash
    );
    assert_eq!(
        rs["spec"]["template"]["metadata"]["labels"],
        json!({"app": "web", TEMPLATE_HASH_LABEL: hash})
    );
    assert_eq!(response.events[0].reason, "ScalingReplicaSet");
}

#[test]
fn a_converged_deployment_reproduces_what_is_stored_and_reports_its_counts() {
    let mut world = World::default();
    let deploy = deployment(3, "v1", 1, 0);
    roll(&mut world, &deploy, 1, 0);
    let stored = world.owned();
    let response = world.reconcile(&deploy);
    let children: Vec<Value> = response
        .children
        .unwrap()
        .into_iter()
        .map(DynamicObject::into_value)
        .collect();
    let rs = stored[0].to_value();
    assert_eq!(children[0]["spec"], rs["spec"], "no change to write");
    assert!(response.events.is_empty(), "{:?}", response.events);
    assert_eq!(
        response.status.unwrap(),
        DeploymentStatus {
            replicas: 3,
            updated_replicas: 3,
            ready_replicas: 3,
            available_replicas: 3,
            observed_generation: Some(1),
        }
    );
}

#[test]
fn a_rolling_update_stays_within_max_surge_and_max_unavailable() {
    for (surge, unavailable) in [(1, 0), (2, 0), (0, 1), (2, 2)] {
        let mut world = World::default();
        roll(&mut world, &deployment(5, "v1", surge, unavailable), 5, 0);
        let rounds = roll(
            &mut world,
            &deployment(5, "v2", surge, unavailable),
            surge as usize,
            unavailable as usize,
        );
        assert!(rounds > 1, "it rolled in steps");
        assert_eq!(world.replicas_of("v2"), 5);
        assert_eq!(
            world.replicas_of("v1"),
            0,
            "surge {surge} unavailable {unavailable}"
        );
        assert_eq!(world.sets.len(), 2, "the old replica set is kept at zero");
    }
}

#[test]
fn ready_pods_never_drop_below_replicas_minus_max_unavailable() {
    let mut world = World::default();
    roll(&mut world, &deployment(4, "v1", 1, 1), 1, 1);
    let deploy = deployment(4, "v2", 1, 1);
    for _ in 0..30 {
        world.reconcile(&deploy);
        world.replica_sets_act();
        assert!(world.ready_pods() >= 3, "{} ready", world.ready_pods());
        assert!(world.total_pods() <= 5, "{} pods", world.total_pods());
        world.pods_start();
    }
    assert_eq!(world.replicas_of("v2"), 4);
}

#[test]
fn changing_the_template_back_scales_the_old_replica_set_up_again() {
    let mut world = World::default();
    roll(&mut world, &deployment(3, "v1", 1, 0), 1, 0);
    let first: Vec<String> = world.sets.keys().cloned().collect();
    roll(&mut world, &deployment(3, "v2", 1, 0), 1, 0);
    roll(&mut world, &deployment(3, "v1", 1, 0), 1, 0);
    assert_eq!(world.sets.len(), 2, "no third replica set");
    assert_eq!(world.sets[&first[0]].1.len(), 3, "the v1 set is back to 3");
    assert_eq!(world.replicas_of("v2"), 0);
}

#[test]
fn scaling_without_a_template_change_sets_the_replica_count() {
    let mut world = World::default();
    roll(&mut world, &deployment(3, "v1", 1, 0), 1, 0);
    roll(&mut world, &deployment(6, "v1", 1, 0), 1, 0);
    assert_eq!(world.replicas_of("v1"), 6);
    roll(&mut world, &deployment(2, "v1", 1, 0), 1, 0);
    assert_eq!(world.replicas_of("v1"), 2);
    assert_eq!(world.sets.len(), 1);
}

#[test]
fn an_empty_selector_is_a_permanent_error() {
    let mut value = deployment(1, "v1", 1, 0);
    value["spec"]["selector"]["matchLabels"] = json!({});
    let deploy = Object::from_value(value).unwrap();
    let err = DeploymentReconciler
        .reconcile(&deploy, &FakeCtx::new())
        .unwrap_err();
    assert!(err.is_permanent(), "{err}");
}

#[test]
fn the_template_hash_ignores_key_order() {
    let a = json!({"metadata": {"labels": {"a": "1", "b": "2"}}, "spec": {"x": 1}});
    let b = json!({"spec": {"x": 1}, "metadata": {"labels": {"b": "2", "a": "1"}}});
    assert_eq!(template_hash(&a), template_hash(&b));
    assert_ne!(template_hash(&a), template_hash(&json!({"spec": {"x": 2}})));
}

#[test]
fn the_manifest_owns_replica_sets_and_carries_the_definitions() {
    let manifest = DeploymentReconciler.manifest();
    assert_eq!(manifest.owns, [KindRef::new(API_VERSION, "ReplicaSet")]);
    let kinds: Vec<&Value> = manifest
        .definitions
        .iter()
        .map(|crd| &crd["spec"]["names"]["kind"])
        .collect();
    assert_eq!(
        kinds,
        [&json!("Deployment"), &json!("ReplicaSet"), &json!("Pod")]
    );
}
