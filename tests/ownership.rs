//! Ownership of kinds through the real binary and its embedded store: the
//! first claimant keeps a kind across restarts, a squatter that came first
//! hands the kind and the definition over the moment it goes, and a pin in
//! a `PluginGrant` settles a contested kind at once.

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::{ServeProcess, built_plugins, eventually, replicaset};

const WAIT: Duration = Duration::from_secs(60);

fn copy_plugin(name: &str, dir: &Path) {
    std::fs::copy(
        built_plugins().join(format!("{name}.wasm")),
        dir.join(format!("{name}.wasm")),
    )
    .unwrap();
}

fn serve(data: &Path, plugins: &Path) -> ServeProcess {
    ServeProcess::start([
        "--data".as_ref(),
        data.as_os_str(),
        "--plugins".as_ref(),
        plugins.as_os_str(),
    ])
}

/// The plugin named `name` as `GET /setpoint/v1/plugins` lists it.
async fn plugin(url: &str, name: &str) -> Value {
    let list: Value = reqwest::get(format!("{url}/setpoint/v1/plugins"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    list["plugins"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == name)
        .cloned()
        .unwrap_or(Value::Null)
}

/// Wait until the plugin `name` is in `state` ("Running" or "Failed").
async fn plugin_in(url: &str, name: &str, state: &str) -> Value {
    eventually(&format!("plugin {name} {state}"), WAIT, || async {
        let p = plugin(url, name).await;
        (p["state"] == state)
            .then_some(p.clone())
            .ok_or(p.to_string())
    })
    .await
}

/// Whether `plugin`'s listing says `other` contests what it holds.
fn contested_by(plugin: &Value, other: &str) -> bool {
    plugin["contested"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .any(|line| line.contains(&format!("{other:?}")))
}

async fn definition(url: &str, name: &str) -> Value {
    reqwest::get(format!(
        "{url}/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}"
    ))
    .await
    .unwrap()
    .json()
    .await
    .unwrap()
}

/// Create a ReplicaSet through the API; its HTTP status.
async fn create_replicaset(url: &str, name: &str, replicas: i64) -> u16 {
    reqwest::Client::new()
        .post(format!(
            "{url}/apis/demo.setpoint.dev/v1/namespaces/default/replicasets"
        ))
        .json(&replicaset(name, replicas, 0))
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

async fn ready_replicas(url: &str, name: &str, n: i64) {
    eventually(&format!("replicaset {name} ready"), WAIT, || async {
        let rs: Value = reqwest::get(format!(
            "{url}/apis/demo.setpoint.dev/v1/namespaces/default/replicasets/{name}"
        ))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
        (rs["status"]["readyReplicas"] == json!(n))
            .then_some(())
            .ok_or(rs["status"].to_string())
    })
    .await;
}

/// `squat` brings a narrower definition of ReplicaSets (at most one
/// replica, no `rs` short name) and runs before the replicaset plugin
/// comes: the replicaset plugin is refused, naming it, and both show the
/// contest. When the squatter goes, the replicaset plugin runs at once,
/// its own definition is applied over the stored one (objects of the kind
/// exist), and a ReplicaSet of three is accepted; after a `kill -9` and a
/// restart it still is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_squatter_that_came_first_hands_kind_and_definition_over_when_it_goes() {
    let data = tempfile::tempdir().unwrap();
    let plugins = tempfile::tempdir().unwrap();
    copy_plugin("podsim", plugins.path());
    copy_plugin("squat", plugins.path());
    let server = serve(data.path(), plugins.path());
    let url = server.url.clone();
    plugin_in(&url, "squat", "Running").await;
    assert_eq!(create_replicaset(&url, "small", 1).await, 201);
    assert_eq!(
        create_replicaset(&url, "too-big", 3).await,
        422,
        "the squatter's definition allows one replica"
    );

    copy_plugin("replicaset", plugins.path());
    let refused = plugin_in(&url, "replicaset", "Failed").await;
    let reason = refused["reason"].as_str().unwrap();
    assert!(
        reason.contains("replicasets.demo.setpoint.dev") && reason.contains("\"squat\""),
        "{reason}"
    );
    let squat = plugin(&url, "squat").await;
    assert!(contested_by(&squat, "replicaset"), "{squat}");

    std::fs::remove_file(plugins.path().join("squat.wasm")).unwrap();
    plugin_in(&url, "replicaset", "Running").await;
    let stored = definition(&url, "replicasets.demo.setpoint.dev").await;
    assert_eq!(
        stored["spec"]["names"]["shortNames"],
        json!(["rs"]),
        "{stored}"
    );
    assert_eq!(
        stored["metadata"]["annotations"]["setpoint.dev/defined-by"],
        "replicaset"
    );
    assert_eq!(create_replicaset(&url, "web", 3).await, 201);
    ready_replicas(&url, "web", 3).await;
    ready_replicas(&url, "small", 1).await;

    server.kill9();
    let server = serve(data.path(), plugins.path());
    let url = server.url.clone();
    plugin_in(&url, "replicaset", "Running").await;
    let stored = definition(&url, "replicasets.demo.setpoint.dev").await;
    assert_eq!(
        stored["spec"]["names"]["shortNames"],
        json!(["rs"]),
        "{stored}"
    );
    assert_eq!(create_replicaset(&url, "after", 3).await, 201);
    ready_replicas(&url, "after", 3).await;
}

/// `hijack` reconciles podsim's kind (Pods) and came first. The first
/// claimant keeps the kind: podsim is refused, and still after a restart
/// with both files present (without the recorded claim podsim would win,
/// as the one that brings the kind's definition). A pin in podsim's
/// `PluginGrant` hands the kind over at once: hijack is stopped and
/// refused, naming the pin, and Pods are podsim's again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_claimant_keeps_a_kind_across_restarts_until_a_pin_hands_it_over() {
    let data = tempfile::tempdir().unwrap();
    let plugins = tempfile::tempdir().unwrap();
    copy_plugin("replicaset", plugins.path());
    copy_plugin("hijack", plugins.path());
    let server = serve(data.path(), plugins.path());
    let url = server.url.clone();
    plugin_in(&url, "hijack", "Running").await;
    copy_plugin("podsim", plugins.path());
    let refused = plugin_in(&url, "podsim", "Failed").await;
    assert!(
        refused["reason"].as_str().unwrap().contains("\"hijack\""),
        "{refused}"
    );

    server.kill9();
    let server = serve(data.path(), plugins.path());
    let url = server.url.clone();
    plugin_in(&url, "hijack", "Running").await;
    let refused = plugin_in(&url, "podsim", "Failed").await;
    assert!(
        refused["reason"].as_str().unwrap().contains("spec.kinds"),
        "the refusal says how to settle it: {refused}"
    );
    let hijack = plugin(&url, "hijack").await;
    assert!(contested_by(&hijack, "podsim"), "{hijack}");

    let status = reqwest::Client::new()
        .post(format!("{url}/apis/setpoint.dev/v1/plugingrants"))
        .json(
            &json!({"apiVersion": "setpoint.dev/v1", "kind": "PluginGrant",
            "metadata": {"name": "podsim"}, "spec": {"kinds": ["demo.setpoint.dev/Pod"]}}),
        )
        .send()
        .await
        .unwrap()
        .status();
    assert_eq!(status.as_u16(), 201);
    plugin_in(&url, "podsim", "Running").await;
    let evicted = plugin_in(&url, "hijack", "Failed").await;
    assert!(
        evicted["reason"]
            .as_str()
            .unwrap()
            .contains("pinned to plugin \"podsim\""),
        "{evicted}"
    );
    assert_eq!(create_replicaset(&url, "web", 3).await, 201);
    ready_replicas(&url, "web", 3).await;
}
