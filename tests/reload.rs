//! Hot reload: the host follows its plugins directory while it runs. A
//! replaced file takes over in place (reconciles in flight finish on the old
//! version, queued keys are kept, every object is reconciled again); a broken
//! replacement leaves the old version serving; a removed file stops its
//! controller and leaves its objects alone; a new kind gets a new controller.

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};
use setpoint::plugins::PluginState;
use setpoint::runtime::RuntimeConfig;

use crate::support::{TestHost, built_plugins, eventually, plugins_dir};

const WAIT: Duration = Duration::from_secs(60);

fn wasm(name: &str) -> Vec<u8> {
    std::fs::read(built_plugins().join(format!("{name}.wasm"))).unwrap()
}

/// Replace `dir/versioned.wasm` the way deploy tools do: write a hidden
/// temporary beside it, then rename it over the old file.
fn replace_atomically(dir: &Path, bytes: &[u8]) {
    let tmp = dir.join(".versioned.wasm.tmp");
    std::fs::write(&tmp, bytes).unwrap();
    std::fs::rename(&tmp, dir.join("versioned.wasm")).unwrap();
}

async fn create(host: &TestHost, kind: &str, name: &str, spec: Value) {
    let api = host.host.api();
    let info = api.kinds().require("test.setpoint.dev/v1", kind).unwrap();
    api.create(
        &info,
        json!({"apiVersion": "test.setpoint.dev/v1", "kind": kind,
            "metadata": {"name": name, "namespace": "default"}, "spec": spec}),
    )
    .await
    .unwrap();
}

async fn objects(host: &TestHost, kind: &str) -> Vec<Value> {
    let api = host.host.api();
    let info = api.kinds().require("test.setpoint.dev/v1", kind).unwrap();
    let options = setpoint::api::ListOptions {
        namespace: Some("default".into()),
        ..Default::default()
    };
    api.list(&info, &options).await.unwrap().items
}

/// Wait until every object of `kind` has a status written by `version` from
/// its current spec.
async fn all_reconciled_by(host: &TestHost, kind: &str, version: &str, count: usize) {
    eventually(
        &format!("every {kind} reconciled by {version}"),
        WAIT,
        || async {
            let objects = objects(host, kind).await;
            let behind: Vec<String> = objects
                .iter()
                .filter(|o| o["status"]["version"] != version || o["status"]["n"] != o["spec"]["n"])
                .map(|o| format!("{}={}", o["metadata"]["name"], o["status"]))
                .collect();
            if objects.len() == count && behind.is_empty() {
                Ok(())
            } else {
                Err(format!("{} objects, behind: {behind:?}", objects.len()))
            }
        },
    )
    .await
}

async fn start_with_versioned() -> TestHost {
    TestHost::start_in(plugins_dir(&["versioned"]), RuntimeConfig::default()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_replaced_while_reconciles_are_in_flight_takes_over_every_object_and_loses_no_key() {
    let host = start_with_versioned().await;
    const OBJECTS: usize = 30;
    for i in 0..OBJECTS {
        create(
            &host,
            "Versioned",
            &format!("o{i}"),
            json!({"n": 1, "work": 5_000_000}),
        )
        .await;
    }
    all_reconciled_by(&host, "Versioned", "1.0.0", OBJECTS).await;
    let old = host.plugin("versioned").await.unwrap();

    // Queue every object with a new spec, then replace the plugin while
    // those reconciles run: first a torn, non-atomic write, then the rest.
    let api = host.host.api();
    let info = api
        .kinds()
        .require("test.setpoint.dev/v1", "Versioned")
        .unwrap();
    for mut object in objects(&host, "Versioned").await {
        object["spec"]["n"] = json!(2);
        api.update(&info, object).await.unwrap();
    }
    let v2 = wasm("versioned2");
    let path = host.plugins_path().join("versioned.wasm");
    {
        use std::io::Write;
        let mut file = std::fs::File::create(&path).unwrap();
        file.write_all(&v2[..v2.len() / 2]).unwrap();
        file.flush().unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        file.write_all(&v2[v2.len() / 2..]).unwrap();
    }

    all_reconciled_by(&host, "Versioned", "2.0.0", OBJECTS).await;
    let new = host.plugin("versioned").await.unwrap();
    assert_eq!(new.state, PluginState::Running);
    assert_eq!(new.version.as_deref(), Some("2.0.0"));
    assert_ne!(new.content_hash, old.content_hash);
    assert_eq!(host.host.reconcilers().await, vec!["versioned".to_owned()]);
    assert!(new.reconciles >= 2 * OBJECTS as u64, "{new:?}");
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_replacement_is_reported_and_the_old_version_keeps_serving() {
    let host = start_with_versioned().await;
    create(&host, "Versioned", "before", json!({"n": 1})).await;
    all_reconciled_by(&host, "Versioned", "1.0.0", 1).await;

    replace_atomically(host.plugins_path(), b"\0asm this is not a component");
    let status = eventually("the broken file is reported", WAIT, || async {
        let status = host.plugin("versioned").await.unwrap();
        match &status.last_error {
            Some(_) => Ok(status),
            None => Err(format!("{status:?}")),
        }
    })
    .await;
    assert_eq!(status.state, PluginState::Running);
    assert_eq!(status.version.as_deref(), Some("1.0.0"));
    assert!(
        status
            .last_error
            .as_deref()
            .unwrap()
            .contains("not a plugin file: unknown WebAssembly version"),
        "{status:?}"
    );

    // Version 1 still serves, old objects and new.
    create(&host, "Versioned", "after", json!({"n": 1})).await;
    all_reconciled_by(&host, "Versioned", "1.0.0", 2).await;

    // A good file afterwards clears the error and takes over.
    replace_atomically(host.plugins_path(), &wasm("versioned2"));
    all_reconciled_by(&host, "Versioned", "2.0.0", 2).await;
    let status = host.plugin("versioned").await.unwrap();
    assert_eq!(status.last_error, None);
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_removed_plugin_stops_without_touching_its_objects_and_comes_back_when_re_added() {
    let host = start_with_versioned().await;
    create(&host, "Versioned", "kept", json!({"n": 1})).await;
    all_reconciled_by(&host, "Versioned", "1.0.0", 1).await;

    std::fs::remove_file(host.plugins_path().join("versioned.wasm")).unwrap();
    eventually("the controller stops", WAIT, || async {
        let running = host.host.reconcilers().await;
        let known = host.plugin("versioned").await;
        if running.is_empty() && known.is_none() {
            Ok(())
        } else {
            Err(format!("{running:?} {known:?}"))
        }
    })
    .await;
    // Its objects stay as they are, and its kind stays registered.
    let kept = objects(&host, "Versioned").await;
    assert_eq!(kept.len(), 1);
    assert_eq!(kept[0]["status"]["version"], "1.0.0");
    create(&host, "Versioned", "while-away", json!({"n": 7})).await;

    std::fs::write(
        host.plugins_path().join("versioned.wasm"),
        wasm("versioned2"),
    )
    .unwrap();
    all_reconciled_by(&host, "Versioned", "2.0.0", 2).await;
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replacement_that_reconciles_another_kind_gets_a_controller_of_its_own() {
    let host = start_with_versioned().await;
    create(&host, "Versioned", "a", json!({"n": 1})).await;
    all_reconciled_by(&host, "Versioned", "1.0.0", 1).await;

    replace_atomically(host.plugins_path(), &wasm("versioned3"));
    let status = eventually("version 3 runs", WAIT, || async {
        let status = host.plugin("versioned").await.unwrap();
        if status.version.as_deref() == Some("3.0.0") {
            Ok(status)
        } else {
            Err(format!("{status:?}"))
        }
    })
    .await;
    assert_eq!(
        status.kind.as_deref(),
        Some("test.setpoint.dev/v1/VersionedB")
    );
    create(&host, "VersionedB", "b", json!({"n": 5})).await;
    all_reconciled_by(&host, "VersionedB", "3.0.0", 1).await;
    // The old kind's objects are left as the old version wrote them.
    assert_eq!(
        objects(&host, "Versioned").await[0]["status"]["version"],
        "1.0.0"
    );
    host.stop().await;
}

/// Run `setpoint serve ARGS… --plugins PLUGINS` with `XDG_CACHE_HOME` set to
/// `xdg` until it listens, then stop it; its log up to that point.
fn serve_until_listening(args: &[&std::ffi::OsStr], plugins: &Path, xdg: &Path) -> String {
    use std::io::{BufRead, BufReader};
    let mut child = std::process::Command::new(crate::support::setpoint_bin())
        .arg("serve")
        .args(args)
        .arg("--plugins")
        .arg(plugins)
        .args(["--addr", "127.0.0.1:0"])
        .env("XDG_CACHE_HOME", xdg)
        .env("NO_COLOR", "1")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("starting setpoint serve");
    let mut log = String::new();
    for line in BufReader::new(child.stderr.take().unwrap()).lines() {
        let line = line.unwrap();
        log.push_str(&line);
        log.push('\n');
        if line.contains("listening on ") {
            break;
        }
    }
    let _ = child.kill();
    child.wait().unwrap();
    assert!(log.contains("listening on "), "serve did not start:\n{log}");
    log
}

fn files_under(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|entry| match entry.file_type() {
                    Ok(t) if t.is_dir() => files_under(&entry.path()),
                    Ok(_) => 1,
                    Err(_) => 0,
                })
                .sum()
        })
        .unwrap_or(0)
}

#[test]
fn a_restarted_serve_loads_its_plugins_from_the_compiled_code_cache() {
    let plugins = plugins_dir(&["replicaset"]);
    let data = tempfile::tempdir().unwrap();
    let xdg = tempfile::tempdir().unwrap();
    // The embedded store keeps the cache in its data directory; without one
    // it goes to the user's cache directory.
    let cases: [(Vec<&std::ffi::OsStr>, std::path::PathBuf); 2] = [
        (
            vec!["--data".as_ref(), data.path().as_os_str()],
            data.path().join("cache"),
        ),
        (vec!["--in-memory".as_ref()], xdg.path().join("setpoint")),
    ];
    for (args, cache) in cases {
        let first = serve_until_listening(&args, plugins.path(), xdg.path());
        assert!(
            first.contains("component loaded from compilation (now cached)"),
            "{first}"
        );
        assert!(
            files_under(&cache) > 0,
            "nothing cached in {}",
            cache.display()
        );
        let second = serve_until_listening(&args, plugins.path(), xdg.path());
        assert!(
            second.contains("component loaded from the compiled-code cache"),
            "the second start compiled again:\n{second}"
        );
    }
}
