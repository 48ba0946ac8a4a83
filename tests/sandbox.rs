//! The sandbox: the fault zoo (`tests/guests/zoo`, `rawjson`, `oldworld`,
//! `noworld`) runs on a real host beside well-behaved plugins. Every fault
//! ends as an error on its own object (a `Ready=False` condition and a
//! warning event) and a log line; none stops the host or the others.

use std::time::Duration;

use serde_json::{Value, json};
use setpoint::plugins::PluginState;
use setpoint::runtime::RuntimeConfig;

use crate::support::{
    TestHost, eventually, logs, plugins_dir, ready_condition, replicaset, replicaset_ready,
    warnings_about,
};

const WAIT: Duration = Duration::from_secs(60);

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

/// Wait for a `Ready=False` condition on a test object and return its message.
async fn failure_message(host: &TestHost, kind: &str, name: &str) -> String {
    let api = host.host.api();
    let info = api.kinds().require("test.setpoint.dev/v1", kind).unwrap();
    eventually(
        &format!("{kind} {name} reports its failure"),
        WAIT,
        || async {
            let object = api
                .get(&info, Some("default"), name)
                .await
                .map_err(|e| e.to_string())?;
            match ready_condition(&object) {
                Some(c) if c["status"] == "False" => {
                    Ok(c["message"].as_str().unwrap_or("").to_owned())
                }
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await
}

/// Allocating four times the memory cap in small blocks, freed out of order,
/// is not a fault: the guest allocator reuses freed memory. Waits for the
/// `churn` object's status to say so.
async fn churn_succeeds(host: &TestHost) {
    let api = host.host.api();
    let zoo = api.kinds().require("test.setpoint.dev/v1", "Zoo").unwrap();
    eventually("the churning object's status", WAIT, || async {
        let churn = api
            .get(&zoo, Some("default"), "churn")
            .await
            .map_err(|e| e.to_string())?;
        match churn["status"]["churnedBytes"].as_u64() {
            Some(bytes) if bytes == 64 << 20 => Ok(()),
            _ => Err(format!("{churn}")),
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_fault_in_the_zoo_ends_as_an_error_on_its_object_while_a_replicaset_converges() {
    logs::capture();
    let dir = plugins_dir(&[
        "replicaset",
        "podsim",
        "zoo",
        "rawjson",
        "oldworld",
        "noworld",
    ]);
    // Per-plugin settings: a short deadline, small memory and response caps.
    std::fs::write(
        dir.path().join("zoo.toml"),
        "deadline_ms = 300\nmemory_mib = 16\nresponse_kib = 512\n",
    )
    .unwrap();
    let host = TestHost::start_in(dir, RuntimeConfig::default()).await;

    for broken in ["oldworld", "noworld"] {
        let status = host.plugin(broken).await.unwrap();
        match &status.state {
            PluginState::Failed(reason) => assert!(
                reason.contains("does not implement the setpoint:plugin@0.2.0 reconciler world"),
                "{broken}: {reason}"
            ),
            other => panic!("{broken} should have failed to load, is {other:?}"),
        }
        assert!(
            !logs::lines_with(&["plugin failed to load", broken]).is_empty(),
            "no log line for {broken}"
        );
    }
    for fine in ["replicaset", "podsim", "zoo", "rawjson"] {
        assert_eq!(
            host.plugin(fine).await.unwrap().state,
            PluginState::Running,
            "{fine}"
        );
    }

    let faults = [
        ("spin", "exceeded its deadline of 300ms"),
        ("membomb", "exceeded its memory limit of 16777216 bytes"),
        ("smallbomb", "exceeded its memory limit of 16777216 bytes"),
        ("panic", "zoo panicked on purpose in panic"),
        ("badstatus", "status patch is not a JSON object"),
        ("oversized", "over the limit of 524288 bytes"),
        ("undeclared", "is not a kind the plugin declared in `owns`"),
        ("crossns", "children must live in their owner's namespace"),
        ("escape", "escape attempt: file: "),
    ];
    for (fault, _) in faults {
        create(&host, "Zoo", fault, json!({"fault": fault})).await;
    }
    create(&host, "Zoo", "churn", json!({"fault": "churn"})).await;
    create(&host, "RawJson", "raw", json!({})).await;
    // The well-behaved plugins keep converging their own objects meanwhile.
    host.host
        .api()
        .create(&host.kind("ReplicaSet"), replicaset("web", 3, 0))
        .await
        .unwrap();

    for (fault, expected) in faults {
        let message = failure_message(&host, "Zoo", fault).await;
        assert!(message.contains(expected), "{fault}: {message}");
        assert!(
            !warnings_about(&host, fault).await.is_empty(),
            "{fault}: no warning event"
        );
        let key = format!("default/{fault}");
        assert!(
            !logs::lines_with(&["plugin=\"zoo\"", &key]).is_empty()
                || !logs::lines_with(&["plugin=zoo", &key]).is_empty(),
            "{fault}: no log line tagged with the plugin and the object"
        );
    }
    let message = failure_message(&host, "RawJson", "raw").await;
    assert!(message.contains("status is not JSON"), "{message}");
    assert!(!warnings_about(&host, "raw").await.is_empty());

    // The escape attempt was refused on both counts, and saw no environment.
    let escape = failure_message(&host, "Zoo", "escape").await;
    assert!(escape.contains("socket: "), "{escape}");
    assert!(escape.contains("0 environment variables"), "{escape}");
    assert!(
        !escape.contains("read ") && !escape.contains("connected"),
        "{escape}"
    );

    churn_succeeds(&host).await;

    replicaset_ready(&host, "web", 3).await;
    // And the host still takes new work.
    host.host
        .api()
        .create(&host.kind("ReplicaSet"), replicaset("after", 2, 0))
        .await
        .unwrap();
    replicaset_ready(&host, "after", 2).await;
    // Each fault failed once, and was not called again for the host's own
    // Ready=False write; `undeclared` and `crossns` are refused by the host
    // after a call that succeeded, and count as failures all the same.
    let zoo = host.plugin("zoo").await.unwrap();
    assert_eq!(zoo.errors, faults.len() as u64, "{zoo:?}");
    host.stop().await;
}

/// The zoo above imports WASI (`wasm32-wasip2`); plugins built with the SDK
/// for `wasm32-unknown-unknown` are core modules without WASI, with the
/// SDK's arena on their spare initial memory and its panic hook instead of
/// stderr. The same faults must end the same way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_zoo_built_without_wasi_faults_alike_and_keeps_its_panic_message() {
    logs::capture();
    let dir = tempfile::tempdir().unwrap();
    let lean = crate::support::built_plugins().join("zoo.wasm");
    let bytes = std::fs::read(&lean).unwrap();
    assert!(bytes.starts_with(b"\0asm\x01\0\0\0"), "not a core module");
    std::fs::write(dir.path().join("zoo.wasm"), bytes).unwrap();
    std::fs::write(
        dir.path().join("zoo.toml"),
        "deadline_ms = 300\nmemory_mib = 16\nresponse_kib = 512\n",
    )
    .unwrap();
    let host = TestHost::start_in(dir, RuntimeConfig::default()).await;
    assert_eq!(
        host.plugin("zoo").await.unwrap().state,
        PluginState::Running
    );

    let faults = [
        ("spin", "exceeded its deadline of 300ms"),
        ("membomb", "exceeded its memory limit of 16777216 bytes"),
        ("smallbomb", "exceeded its memory limit of 16777216 bytes"),
        (
            "panic",
            "guest's last error log: panicked at tests/guests/zoo/src/lib.rs",
        ),
        ("oversized", "over the limit of 524288 bytes"),
        // Without WASI, `std::env::vars` panics: there is no environment.
        ("escape", "not supported on this platform"),
    ];
    for (fault, _) in faults {
        create(&host, "Zoo", fault, json!({"fault": fault})).await;
    }
    create(&host, "Zoo", "churn", json!({"fault": "churn"})).await;
    for (fault, expected) in faults {
        let message = failure_message(&host, "Zoo", fault).await;
        assert!(message.contains(expected), "{fault}: {message}");
    }
    let panic = failure_message(&host, "Zoo", "panic").await;
    assert!(
        panic.contains("zoo panicked on purpose in panic"),
        "{panic}"
    );
    churn_succeeds(&host).await;
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guest_logs_and_stdout_become_tracing_events_tagged_with_plugin_and_object() {
    logs::capture();
    let host = TestHost::start(&["zoo"]).await;
    create(&host, "Zoo", "chatty", json!({"fault": "log"})).await;
    eventually("the log lines", WAIT, || async {
        let import = logs::lines_with(&["zoo log import for chatty", "zoo", "default/chatty"]);
        let stdout = logs::lines_with(&["zoo stdout for chatty", "default/chatty", "stdout"]);
        if import.is_empty() || stdout.is_empty() {
            Err(format!("import={import:?} stdout={stdout:?}"))
        } else {
            Ok(())
        }
    })
    .await;
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_fuel_metering_an_endless_loop_runs_out_of_fuel_before_its_deadline() {
    let dir = plugins_dir(&["zoo"]);
    std::fs::write(
        dir.path().join("zoo.toml"),
        "deadline_ms = 60000\nfuel = 5000000\n",
    )
    .unwrap();
    let runtime = RuntimeConfig {
        fuel_metering: true,
        ..Default::default()
    };
    let host = TestHost::start_in(dir, runtime).await;
    create(&host, "Zoo", "spin", json!({"fault": "spin"})).await;
    create(&host, "Zoo", "calm", json!({"fault": "none"})).await;
    let message = failure_message(&host, "Zoo", "spin").await;
    assert!(
        message.contains("ran out of fuel (5000000 units)"),
        "{message}"
    );
    let api = host.host.api();
    let info = api.kinds().require("test.setpoint.dev/v1", "Zoo").unwrap();
    eventually(
        "a well-behaved object within the same budget",
        WAIT,
        || async {
            let calm = api
                .get(&info, Some("default"), "calm")
                .await
                .map_err(|e| e.to_string())?;
            if calm["status"]["fine"] == json!(true) {
                Ok(())
            } else {
                Err(calm["status"].to_string())
            }
        },
    )
    .await;
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_runtime_loads_compiled_plugins_from_the_disk_cache() {
    let cache = tempfile::tempdir().unwrap();
    let bytes = std::fs::read(crate::support::built_plugins().join("zoo.wasm")).unwrap();
    let config = RuntimeConfig {
        cache_dir: Some(cache.path().to_owned()),
        ..Default::default()
    };
    let first = setpoint::runtime::Runtime::new(config.clone()).unwrap();
    first.load(&bytes, None).unwrap();
    assert_eq!(first.cache_stats().hits, 0);
    assert!(first.cache_stats().misses >= 1, "{:?}", first.cache_stats());
    drop(first);
    let restarted = setpoint::runtime::Runtime::new(config).unwrap();
    restarted.load(&bytes, None).unwrap();
    let stats = restarted.cache_stats();
    assert_eq!(stats.misses, 0, "{stats:?}");
    assert!(stats.hits >= 1, "{stats:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guest_sees_the_request_time_on_its_wall_clock_and_a_monotonic_clock_that_stands_still() {
    let host = TestHost::start(&["zoo"]).await;
    create(&host, "Zoo", "clock", json!({"fault": "clock"})).await;
    let api = host.host.api();
    let info = api.kinds().require("test.setpoint.dev/v1", "Zoo").unwrap();
    let status = eventually("the clock report", WAIT, || async {
        let object = api
            .get(&info, Some("default"), "clock")
            .await
            .map_err(|e| e.to_string())?;
        if object["status"]["wallMs"].is_u64() {
            Ok(object["status"].clone())
        } else {
            Err(object["status"].to_string())
        }
    })
    .await;
    assert_eq!(status["elapsedNs"], json!(0), "{status}");
    assert_eq!(status["wallMs"], status["requestMs"], "{status}");
    host.stop().await;
}

/// The SDK asks for some memory past the initial memory for its `manifest`
/// call (so that the definitions it builds stay out of the memory reconciles
/// use). Under a cap that leaves no room for it, the growth is refused the
/// WebAssembly way and the plugin still loads; a refused
/// growth is never a fault by itself.
#[test]
fn a_plugin_loads_under_a_memory_cap_with_no_room_past_its_initial_memory() {
    use setpoint::controller::Reconciler;

    let bytes = std::fs::read(crate::support::built_plugins().join("replicaset.wasm")).unwrap();
    let runtime = setpoint::runtime::Runtime::new(RuntimeConfig::default()).unwrap();
    // The example plugins start with 512 KiB of memory.
    let limits = setpoint::runtime::Limits {
        memory_bytes: 600 << 10,
        ..Default::default()
    };
    let plugin = runtime.load(&bytes, Some(limits)).unwrap();
    assert_eq!(plugin.manifest().name, "replicaset");
}
