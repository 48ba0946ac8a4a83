//! `setpoint new-plugin`: the generated crate builds to a component, its
//! native unit tests pass, and a host loads it and reconciles its example
//! object; `setpoint plugins` then lists it with its reconcile count.

use std::process::Command;
use std::time::Duration;

use serde_json::json;
use setpoint::runtime::RuntimeConfig;

use crate::support::{TestHost, eventually, ready_condition, setpoint_bin, workspace};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_generated_plugin_builds_passes_its_own_tests_and_reconciles_on_a_host() {
    let dir = tempfile::tempdir().unwrap();
    let status = Command::new(setpoint_bin())
        .args(["new-plugin", "hello-world", "--dir"])
        .arg(dir.path())
        .arg("--sdk")
        .arg(workspace().join("plugin-sdk"))
        .status()
        .unwrap();
    assert!(status.success());
    let krate = dir.path().join("hello-world");
    // Pin the dependencies to the workspace's versions: no network needed,
    // and the shared target directory keeps them compiled between runs.
    std::fs::copy(workspace().join("Cargo.lock"), krate.join("Cargo.lock")).unwrap();
    let target = workspace().join("target").join("new-plugin");
    let cargo = |args: &[&str]| {
        let output = Command::new(env!("CARGO"))
            .current_dir(&krate)
            .args(args)
            .arg("--target-dir")
            .arg(&target)
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "cargo {args:?} failed:\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    };
    let tests = cargo(&["test", "--offline"]);
    assert!(
        tests.contains("a_new_greeting_is_published_and_ready ... ok"),
        "{tests}"
    );
    cargo(&[
        "build",
        "--offline",
        "--release",
        "--target",
        "wasm32-unknown-unknown",
    ]);

    let plugins = tempfile::tempdir().unwrap();
    std::fs::copy(
        target.join("wasm32-unknown-unknown/release/hello_world.wasm"),
        plugins.path().join("hello-world.wasm"),
    )
    .unwrap();
    let host = TestHost::start_in(plugins, RuntimeConfig::default()).await;
    let api = host.host.api();
    let kind = api
        .kinds()
        .require("example.setpoint.dev/v1", "HelloWorld")
        .unwrap();
    api.create(
        &kind,
        json!({"apiVersion": "example.setpoint.dev/v1", "kind": "HelloWorld",
            "metadata": {"name": "hello", "namespace": "default"},
            "spec": {"greeting": "Hello, world!"}}),
    )
    .await
    .unwrap();
    eventually(
        "the example object is ready",
        Duration::from_secs(60),
        || async {
            let object = api
                .get(&kind, Some("default"), "hello")
                .await
                .map_err(|e| e.to_string())?;
            match ready_condition(&object) {
                Some(c)
                    if c["status"] == "True"
                        && object["status"]["published"] == "Hello, world!" =>
                {
                    Ok(())
                }
                _ => Err(object["status"].to_string()),
            }
        },
    )
    .await;

    let output = Command::new(setpoint_bin())
        .args(["plugins", "--server", &host.url])
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{table}");
    let row = table
        .lines()
        .find(|l| l.starts_with("hello-world"))
        .unwrap_or_else(|| panic!("no row for the plugin:\n{table}"));
    assert!(row.contains("example.setpoint.dev/v1/HelloWorld"), "{row}");
    assert!(row.contains("Running"), "{row}");
    host.stop().await;
}
