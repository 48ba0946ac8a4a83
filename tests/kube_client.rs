//! A second real client: the Rust `kube` crate (kube-rs), as an operator
//! author would use it against Kubernetes, talking to a running host: a
//! typed CRD from `k8s-openapi`, dynamic objects, list, a kube-runtime
//! `watcher`, and a status patch.

use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams, PostParams,
};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;

use crate::support::TestHost;

async fn client(host: &TestHost) -> kube::Client {
    let config = kube::Config::new(host.url.parse().unwrap());
    kube::Client::try_from(config).expect("a kube client for the host")
}

fn pods(client: kube::Client) -> (Api<DynamicObject>, ApiResource) {
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("demo.setpoint.dev", "v1", "Pod"),
        "pods",
    );
    (Api::namespaced_with(client, "default", &resource), resource)
}

#[tokio::test(flavor = "multi_thread")]
async fn kube_rs_lists_crds_and_creates_and_lists_custom_objects() {
    let host = TestHost::start(&["podsim"]).await;
    let client = client(&host).await;

    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let names: Vec<String> = crds
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|crd| crd.metadata.name)
        .collect();
    assert!(
        names.contains(&"pods.demo.setpoint.dev".to_owned()),
        "{names:?}"
    );
    let pod_crd = crds.get("pods.demo.setpoint.dev").await.unwrap();
    assert_eq!(pod_crd.spec.names.kind, "Pod");

    let (pods, resource) = pods(client);
    let mut pod = DynamicObject::new("kube-0", &resource);
    pod.data = json!({"spec": {"startupDelayMs": 100000}});
    let created = pods.create(&PostParams::default(), &pod).await.unwrap();
    assert!(created.metadata.uid.is_some());
    assert!(created.metadata.resource_version.is_some());

    let listed = pods.list(&ListParams::default()).await.unwrap();
    let names: Vec<_> = listed
        .items
        .iter()
        .filter_map(|p| p.metadata.name.clone())
        .collect();
    assert_eq!(names, ["kube-0"]);
    let err = pods.get("missing").await.unwrap_err();
    assert!(
        matches!(&err, kube::Error::Api(status) if status.code == 404),
        "{err:?}"
    );
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn kube_runtime_watcher_sees_podsim_start_a_pod_and_a_status_patch_lands() {
    let host = TestHost::start(&["podsim"]).await;
    let (pods, resource) = pods(client(&host).await);
    let mut stream = watcher(pods.clone(), watcher::Config::default())
        .applied_objects()
        .boxed();

    let mut pod = DynamicObject::new("web-0", &resource);
    pod.data = json!({"spec": {"startupDelayMs": 200}});
    pods.create(&PostParams::default(), &pod).await.unwrap();

    let phase = |p: &DynamicObject| p.data["status"]["phase"].as_str().map(str::to_owned);
    let mut seen = Vec::new();
    let running = tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(pod) = stream.try_next().await.expect("the watcher keeps going") {
            seen.push(phase(&pod));
            if phase(&pod).as_deref() == Some("Running") {
                return pod;
            }
        }
        panic!("the watch stream ended");
    })
    .await
    .unwrap_or_else(|_| panic!("no Running pod within 30 s; phases seen: {seen:?}"));
    assert_eq!(running.metadata.name.as_deref(), Some("web-0"));
    assert!(seen.contains(&Some("Pending".to_owned())), "{seen:?}");

    let patched = pods
        .patch_status(
            "web-0",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Succeeded"}})),
        )
        .await
        .unwrap();
    assert_eq!(phase(&patched).as_deref(), Some("Succeeded"));
    let succeeded = tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(pod) = stream.try_next().await.unwrap() {
            if phase(&pod).as_deref() == Some("Succeeded") {
                return pod;
            }
        }
        panic!("the watch stream ended");
    })
    .await
    .expect("the watcher sees the status patch");
    assert_eq!(
        succeeded.data["spec"]["startupDelayMs"], 200,
        "spec untouched"
    );
    host.stop().await;
}
