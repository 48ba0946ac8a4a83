//! The whole host on etcd: `setpoint serve --etcd URL` with the example
//! plugins converges a ReplicaSet exactly as on the embedded store, and its
//! state outlives the host.

use std::time::Duration;

use serde_json::Value;

use crate::support::{EtcdProcess, ServeProcess, eventually, plugins_dir, replicaset};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_on_etcd_converges_and_its_state_outlives_the_host() {
    let etcd = EtcdProcess::start().await;
    let plugins = plugins_dir(&["replicaset", "podsim"]);
    let args = |prefix: &str| {
        vec![
            "--etcd".to_owned(),
            etcd.url.clone(),
            "--etcd-prefix".to_owned(),
            prefix.to_owned(),
            "--plugins".to_owned(),
            plugins.path().display().to_string(),
        ]
    };
    let http = reqwest::Client::new();
    let pods = "/apis/demo.setpoint.dev/v1/namespaces/default/pods";
    let host = ServeProcess::start(args("/a"));
    let response = http
        .post(format!(
            "{}/apis/demo.setpoint.dev/v1/namespaces/default/replicasets",
            host.url
        ))
        .json(&replicaset("web", 3, 10))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 201);
    let running = |url: String| {
        let http = http.clone();
        async move {
            let list: Value = http
                .get(format!("{url}{pods}"))
                .send()
                .await
                .map_err(|e| e.to_string())?
                .json()
                .await
                .map_err(|e| e.to_string())?;
            let items = list["items"].as_array().cloned().unwrap_or_default();
            let running = items
                .iter()
                .filter(|p| p["status"]["phase"] == "Running")
                .count();
            if running == 3 {
                Ok(items)
            } else {
                Err(format!("{running} running of {}", items.len()))
            }
        }
    };
    let before = eventually("three pods run on etcd", Duration::from_secs(60), || {
        running(host.url.clone())
    })
    .await;
    host.kill9();

    // A new host on the same etcd and prefix sees the same objects.
    let again = ServeProcess::start(args("/a"));
    let after = eventually("the pods are still there", Duration::from_secs(60), || {
        running(again.url.clone())
    })
    .await;
    let uids = |items: &[Value]| {
        let mut u: Vec<String> = items
            .iter()
            .map(|p| p["metadata"]["uid"].as_str().unwrap().to_owned())
            .collect();
        u.sort();
        u
    };
    assert_eq!(uids(&before), uids(&after), "the same pods, not new ones");

    // Another prefix on the same etcd is another, empty store.
    let other = ServeProcess::start(args("/b"));
    let list: Value = http
        .get(format!("{}{pods}", other.url))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(list["items"].as_array().unwrap().len(), 0);
}
