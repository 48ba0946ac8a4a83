//! Deployment → ReplicaSet → Pod with the real Wasm plugins, checked from a
//! watch recorded while it happens: a rolling update never has too many or
//! too few Pods, a template changed back scales the old ReplicaSet up
//! again, and a deleted Deployment's ReplicaSets and Pods are collected.

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use serde_json::{Value, json};
use setpoint::object::meta;
use setpoint::watch::EventType;

use crate::support::{TestHost, eventually, is_ready_pod, record};

const CONVERGE: Duration = Duration::from_secs(60);

fn deployment(replicas: u32, image: &str, surge: u32, unavailable: u32) -> Value {
    json!({
        "apiVersion": "demo.setpoint.dev/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                "spec": {"image": image, "startupDelayMs": 30}},
            "strategy": {"rollingUpdate": {"maxSurge": surge, "maxUnavailable": unavailable}}
        }
    })
}

/// Change the `web` Deployment's image, retrying when a status write got in between.
async fn set_image(api: &setpoint::api::Api, kind: &setpoint::object::KindInfo, image: &str) {
    loop {
        let mut next = api.get(kind, Some("default"), "web").await.unwrap();
        next["spec"]["template"]["spec"]["image"] = json!(image);
        match api.update(kind, next).await {
            Ok(_) => return,
            Err(setpoint::api::Error::Conflict { .. }) => continue,
            Err(err) => panic!("{err}"),
        }
    }
}

/// Wait until the Deployment reports `replicas` updated, ready and available
/// Pods of its current generation, and exactly that many Pods exist.
async fn rolled_out(host: &TestHost, replicas: u32) -> Value {
    eventually("the deployment rolls out", CONVERGE, || async {
        let d = host.get("Deployment", "web").await.ok_or("no deployment")?;
        let pods = host.list("Pod").await;
        let s = &d["status"];
        let done = s["observedGeneration"] == d["metadata"]["generation"]
            && s["updatedReplicas"] == replicas
            && s["readyReplicas"] == replicas
            && s["availableReplicas"] == replicas
            && s["replicas"] == replicas
            && pods.len() == replicas as usize;
        if done {
            Ok(d)
        } else {
            Err(format!("status={s} pods={}", pods.len()))
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_update_converges_and_the_watch_never_sees_too_many_or_too_few_pods() {
    let host = TestHost::start(&["replicaset", "podsim", "deployment"]).await;
    let kind = host.kind("Deployment");
    let api = host.host.api();
    api.create(&kind, deployment(4, "v1", 1, 1)).await.unwrap();
    rolled_out(&host, 4).await;

    let start = api.current_revision().await.unwrap();
    let mut pods: BTreeMap<String, Value> = host
        .list("Pod")
        .await
        .into_iter()
        .map(|p| (meta::name(&p).to_owned(), p))
        .collect();
    let events = record(&host.host, start);
    set_image(api, &kind, "v2").await;
    let done = rolled_out(&host, 4).await;
    let rs_names: Vec<String> = host
        .list("ReplicaSet")
        .await
        .iter()
        .filter(|rs| rs["spec"]["replicas"] == 4)
        .map(|rs| meta::name(rs).to_owned())
        .collect();
    assert_eq!(rs_names.len(), 1, "one replica set carries every pod");
    assert_eq!(done["status"]["updatedReplicas"], 4);

    // Replay the pods' history as the watch saw it.
    let (mut most, mut fewest_ready, mut steps) = (pods.len(), usize::MAX, 0);
    for event in events.lock().unwrap().iter() {
        if meta::kind(&event.object) != "Pod" {
            continue;
        }
        let name = meta::name(&event.object).to_owned();
        match event.kind {
            EventType::Deleted => pods.remove(&name),
            EventType::Added | EventType::Modified => pods.insert(name, (*event.object).clone()),
        };
        steps += 1;
        most = most.max(pods.len());
        fewest_ready = fewest_ready.min(pods.values().filter(|p| is_ready_pod(p)).count());
    }
    assert!(steps > 8, "the watch saw the rollout ({steps} pod changes)");
    assert!(
        most <= 4 + 1,
        "at most replicas + maxSurge pods, saw {most}"
    );
    assert!(
        fewest_ready >= 4 - 1,
        "at least replicas - maxUnavailable ready pods, saw {fewest_ready}"
    );
    let images: HashSet<String> = pods
        .values()
        .map(|p| p["spec"]["image"].as_str().unwrap_or("").to_owned())
        .collect();
    assert_eq!(images, HashSet::from(["v2".to_owned()]));
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changing_the_template_back_scales_the_old_replica_set_up_again() {
    let host = TestHost::start(&["replicaset", "podsim", "deployment"]).await;
    let kind = host.kind("Deployment");
    let api = host.host.api();
    api.create(&kind, deployment(2, "v1", 1, 0)).await.unwrap();
    rolled_out(&host, 2).await;
    let first_uids: HashSet<String> = host
        .list("ReplicaSet")
        .await
        .iter()
        .map(|rs| meta::uid(rs).to_owned())
        .collect();
    for image in ["v2", "v1"] {
        set_image(api, &kind, image).await;
        rolled_out(&host, 2).await;
    }
    let sets = host.list("ReplicaSet").await;
    assert_eq!(sets.len(), 2, "the roll back made no third replica set");
    let serving: Vec<&Value> = sets
        .iter()
        .filter(|rs| rs["spec"]["replicas"] == 2)
        .collect();
    assert_eq!(serving.len(), 1);
    assert!(
        first_uids.contains(meta::uid(serving[0])),
        "the original replica set serves again"
    );
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_deployment_s_replica_sets_and_pods_are_collected() {
    let host = TestHost::start(&["replicaset", "podsim", "deployment"]).await;
    let kind = host.kind("Deployment");
    host.host
        .api()
        .create(&kind, deployment(3, "v1", 1, 0))
        .await
        .unwrap();
    rolled_out(&host, 3).await;
    host.host
        .api()
        .delete(&kind, Some("default"), "web", &Default::default())
        .await
        .unwrap();
    eventually("the children are collected", CONVERGE, || async {
        let (sets, pods) = (host.list("ReplicaSet").await, host.list("Pod").await);
        if sets.is_empty() && pods.is_empty() {
            Ok(())
        } else {
            Err(format!("{} replica sets, {} pods", sets.len(), pods.len()))
        }
    })
    .await;
    host.stop().await;
}
