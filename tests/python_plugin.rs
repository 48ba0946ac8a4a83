//! A reconciler written in Python: `plugins/python-greeting` built with
//! componentize-py, loaded by a real host with its settings file, reconciles a
//! Greeting into `status.message` and `status.observedGeneration`, and reads
//! its salutation through an observed request when the spec names a URL.

use std::time::Duration;

use serde_json::json;
use setpoint::runtime::RuntimeConfig;

use crate::support::recorder::{Recorder, Reply};
use crate::support::{TestHost, built_python_plugin, eventually};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_plugin_greets_and_follows_spec_changes() {
    let built = built_python_plugin();
    let plugins = tempfile::tempdir().unwrap();
    for file in ["python-greeting.wasm", "python-greeting.toml"] {
        std::fs::copy(built.join(file), plugins.path().join(file)).unwrap();
    }
    let host = TestHost::start_in(plugins, RuntimeConfig::default()).await;
    let status = host
        .plugin("python-greeting")
        .await
        .expect("the plugin is listed");
    assert_eq!(
        status.state,
        setpoint::plugins::PluginState::Running,
        "{status:?}"
    );

    let api = host.host.api();
    let kind = api
        .kinds()
        .require("demo.setpoint.dev/v1", "Greeting")
        .unwrap();
    api.create(
        &kind,
        json!({"apiVersion": "demo.setpoint.dev/v1", "kind": "Greeting",
            "metadata": {"name": "hi", "namespace": "default"},
            "spec": {"name": "Ada"}}),
    )
    .await
    .unwrap();
    let greeted = |message: &'static str| {
        let api = api.clone();
        let kind = kind.clone();
        move || {
            let api = api.clone();
            let kind = kind.clone();
            async move {
                let object = api
                    .get(&kind, Some("default"), "hi")
                    .await
                    .map_err(|e| e.to_string())?;
                let generation = &object["metadata"]["generation"];
                if object["status"]["message"] == message
                    && &object["status"]["observedGeneration"] == generation
                {
                    Ok(object)
                } else {
                    Err(object.to_string())
                }
            }
        }
    };
    eventually(
        "the Greeting is greeted",
        Duration::from_secs(60),
        greeted("Hello, Ada"),
    )
    .await;

    // A spec change is a new generation: the plugin greets the new name.
    let mut object = api.get(&kind, Some("default"), "hi").await.unwrap();
    object["spec"]["name"] = json!("Grace");
    api.update(&kind, object).await.unwrap();
    let object = eventually(
        "the new name is greeted",
        Duration::from_secs(60),
        greeted("Hello, Grace"),
    )
    .await;
    assert_eq!(object["metadata"]["generation"], 2, "{object}");
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_plugin_reads_its_salutation_through_an_observed_request() {
    let built = built_python_plugin();
    let plugins = tempfile::tempdir().unwrap();
    for file in ["python-greeting.wasm", "python-greeting.toml"] {
        std::fs::copy(built.join(file), plugins.path().join(file)).unwrap();
    }
    let host = TestHost::start_in(plugins, RuntimeConfig::default()).await;
    let server = Recorder::start(|_, _| Reply::text(200, "Bonjour\n")).await;
    let api = host.host.api();
    let grants = api
        .kinds()
        .require("setpoint.dev/v1", "PluginGrant")
        .unwrap();
    api.create(
        &grants,
        json!({"apiVersion": "setpoint.dev/v1", "kind": "PluginGrant",
               "metadata": {"name": "python-greeting"},
               "spec": {"destinations": [server.url()]}}),
    )
    .await
    .unwrap();
    let kind = api
        .kinds()
        .require("demo.setpoint.dev/v1", "Greeting")
        .unwrap();
    api.create(
        &kind,
        json!({"apiVersion": "demo.setpoint.dev/v1", "kind": "Greeting",
            "metadata": {"name": "salut", "namespace": "default"},
            "spec": {"name": "Ada", "salutationUrl": format!("{}/salutation", server.url())}}),
    )
    .await
    .unwrap();
    eventually(
        "the Greeting is greeted with the salutation read",
        Duration::from_secs(60),
        || async {
            let object = api
                .get(&kind, Some("default"), "salut")
                .await
                .map_err(|e| e.to_string())?;
            if object["status"]["message"] == "Bonjour, Ada" {
                Ok(())
            } else {
                Err(object.to_string())
            }
        },
    )
    .await;
    let requests = server.requests();
    assert!(!requests.is_empty());
    assert!(
        requests
            .iter()
            .all(|r| r.method == "GET" && r.path == "/salutation"),
        "{requests:?}"
    );
    host.stop().await;
}
