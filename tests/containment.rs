//! No plugin can hurt the host or its neighbours (issue 18): each fault is
//! a misbehaving plugin loaded beside well-behaved ones (replicaset and
//! podsim), and each test asserts both containment (the neighbours
//! converge) and what the user sees (the plugin's state, the object's
//! condition and events).

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};
use setpoint::plugins::{PluginState, PluginStatus};
use setpoint::runtime::RuntimeConfig;

use crate::support::{
    TestHost, built_plugins, eventually, logs, plugins_dir, replicaset, replicaset_ready,
};

const WAIT: Duration = Duration::from_secs(60);

fn copy_plugin(name: &str, dir: &Path, file: &str) {
    std::fs::copy(built_plugins().join(format!("{name}.wasm")), dir.join(file)).unwrap();
}

fn failure(status: &PluginStatus) -> &str {
    match &status.state {
        PluginState::Failed(reason) => reason,
        PluginState::Running => panic!("{} should have been refused: {status:?}", status.name),
    }
}

/// A ReplicaSet of 3 becomes ready, and none of its Pods was touched by
/// anyone but podsim.
async fn neighbours_converge(host: &TestHost, name: &str) {
    host.host
        .api()
        .create(&host.kind("ReplicaSet"), replicaset(name, 3, 0))
        .await
        .unwrap();
    replicaset_ready(host, name, 3).await;
    for pod in host.list("Pod").await {
        assert_ne!(pod["status"]["phase"], "Failed", "{pod}");
        assert!(pod["status"]["hijackedBy"].is_null(), "{pod}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_plugin_for_a_kind_is_refused_naming_the_owner_whichever_sorts_first() {
    let dir = plugins_dir(&["replicaset", "podsim"]);
    // Sorts before podsim: loading first must not make it the owner.
    copy_plugin("hijack", dir.path(), "a-hijack.wasm");
    let host = TestHost::start_in(dir, RuntimeConfig::default()).await;

    let refused = host.plugin("a-hijack").await.unwrap();
    let reason = failure(&refused);
    assert!(
        reason.contains("already reconciled by plugin \"podsim\""),
        "{reason}"
    );
    assert!(reason.contains("demo.setpoint.dev/v1 Pod"), "{reason}");
    assert_eq!(
        host.plugin("podsim").await.unwrap().state,
        PluginState::Running
    );
    assert_eq!(
        host.host.reconcilers().await,
        ["podsim".to_owned(), "replicaset".to_owned()]
    );
    neighbours_converge(&host, "web").await;

    // Added to a running host, it is refused the same way.
    copy_plugin("hijack", host.plugins_path(), "z-hijack.wasm");
    host.host
        .load_plugins_dir(host.plugins_path())
        .await
        .unwrap();
    let late = host.plugin("z-hijack").await.unwrap();
    assert!(
        failure(&late).contains("already reconciled by plugin \"podsim\""),
        "{late:?}"
    );
    neighbours_converge(&host, "later").await;
    host.stop().await;
}

async fn stored_definition(host: &TestHost, name: &str) -> Option<Value> {
    let api = host.host.api();
    let crds = api
        .kinds()
        .by_plural("apiextensions.k8s.io", "customresourcedefinitions")
        .unwrap();
    api.get(&crds, None, name).await.ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_that_brings_a_different_definition_of_a_taken_kind_is_refused() {
    let dir = plugins_dir(&["replicaset", "podsim"]);
    copy_plugin("squat", dir.path(), "a-squat.wasm");
    let host = TestHost::start_in(dir, RuntimeConfig::default()).await;

    let refused = host.plugin("a-squat").await.unwrap();
    let reason = failure(&refused);
    assert!(
        reason.contains("replicasets.demo.setpoint.dev")
            && reason.contains("plugin \"replicaset\""),
        "{reason}"
    );
    // The replicaset plugin's definition stands: three replicas are
    // accepted, and the `rs` short name is there.
    neighbours_converge(&host, "web").await;
    let definition = stored_definition(&host, "replicasets.demo.setpoint.dev")
        .await
        .unwrap();
    assert_eq!(definition["spec"]["names"]["shortNames"], json!(["rs"]));
    // Nothing of the refused plugin was registered.
    assert!(
        stored_definition(&host, "squats.test.setpoint.dev")
            .await
            .is_none()
    );
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_removed_plugins_definitions_go_with_it_unless_objects_of_their_kind_remain() {
    let host = TestHost::start(&["zoo"]).await;
    let api = host.host.api();
    let zoo = api.kinds().require("test.setpoint.dev/v1", "Zoo").unwrap();
    api.create(
        &zoo,
        json!({"apiVersion": "test.setpoint.dev/v1", "kind": "Zoo",
            "metadata": {"name": "kept", "namespace": "default"}, "spec": {}}),
    )
    .await
    .unwrap();
    std::fs::remove_file(host.plugins_path().join("zoo.wasm")).unwrap();
    host.host
        .load_plugins_dir(host.plugins_path())
        .await
        .unwrap();
    assert!(host.plugin("zoo").await.is_none());
    // ZooChild has no objects: its definition went with the plugin.
    assert!(
        stored_definition(&host, "zoochildren.test.setpoint.dev")
            .await
            .is_none()
    );
    // Zoo has one: its definition (and the object) stay.
    assert!(
        stored_definition(&host, "zoos.test.setpoint.dev")
            .await
            .is_some()
    );
    assert!(api.get(&zoo, Some("default"), "kept").await.is_ok());
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn truncated_empty_and_foreign_plugin_files_are_reported_clearly_and_a_complete_one_loads() {
    logs::capture();
    let dir = plugins_dir(&["replicaset", "podsim"]);
    let whole = std::fs::read(built_plugins().join("deployment.wasm")).unwrap();
    let noise: Vec<u8> = {
        let mut rng = fastrand::Rng::with_seed(18);
        (0..100_000).map(|_| rng.u8(..)).collect()
    };
    let cases: [(&str, Vec<u8>, &str); 5] = [
        ("empty", vec![], "the file is empty (0 bytes)"),
        ("noise", noise, "not a WebAssembly binary"),
        ("text", b"(module)".to_vec(), "it looks like text"),
        ("header", whole[..6].to_vec(), "the file is truncated"),
        (
            "half",
            whole[..whole.len() / 2].to_vec(),
            "the file is truncated or damaged",
        ),
    ];
    for (name, bytes, _) in &cases {
        std::fs::write(dir.path().join(format!("{name}.wasm")), bytes).unwrap();
    }
    let host = TestHost::start_in(dir, RuntimeConfig::default()).await;
    for (name, _, expected) in &cases {
        let status = host.plugin(name).await.unwrap();
        let reason = failure(&status);
        assert!(reason.contains(expected), "{name}: {reason}");
        assert!(!reason.contains("panic"), "{name}: {reason}");
        assert!(
            !reason.contains("expected at least one module field")
                && !reason.contains("aren't valid utf-8"),
            "{name}: a text parser's message: {reason}"
        );
    }
    assert!(logs::lines_with(&["panicked"]).is_empty());
    neighbours_converge(&host, "web").await;

    // The rest of the file arrives: it loads.
    std::fs::write(host.plugins_path().join("half.wasm"), &whole).unwrap();
    host.host
        .load_plugins_dir(host.plugins_path())
        .await
        .unwrap();
    eventually("the completed file loads", WAIT, || async {
        let status = host.plugin("half").await.unwrap();
        match status.state {
            PluginState::Running => Ok(()),
            _ => Err(format!("{status:?}")),
        }
    })
    .await;
    host.stop().await;
}

async fn create_zoo(host: &TestHost, name: &str, spec: Value) {
    let api = host.host.api();
    let info = api.kinds().require("test.setpoint.dev/v1", "Zoo").unwrap();
    api.create(
        &info,
        json!({"apiVersion": "test.setpoint.dev/v1", "kind": "Zoo",
            "metadata": {"name": name, "namespace": "default"}, "spec": spec}),
    )
    .await
    .unwrap();
}

async fn zoo(host: &TestHost, name: &str) -> Value {
    let api = host.host.api();
    let info = api.kinds().require("test.setpoint.dev/v1", "Zoo").unwrap();
    api.get(&info, Some("default"), name).await.unwrap()
}

async fn events_about(host: &TestHost, name: &str, reason: &str) -> Vec<Value> {
    crate::support::warnings_about(host, name)
        .await
        .into_iter()
        .filter(|e| e["reason"] == reason)
        .collect()
}

/// Wait until the requeues of the Zoo `name` are slowed to the throttle's
/// ceiling; the ceiling.
async fn requeues_reach_the_ceiling(host: &TestHost, name: &str) -> Duration {
    let key = setpoint::object::ObjectKey::new(Some("default"), name);
    let ceiling = setpoint::controller::RequeueConfig::default().ceiling;
    eventually("the requeues reach the ceiling", WAIT, || async {
        let history = host.host.history("test.setpoint.dev/v1", "Zoo", &key).await;
        match history.last() {
            Some(last) if last.next_in == Some(ceiling) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    ceiling
}

/// The zoo's `requeue0` object asks to be called again at once, forever,
/// with nothing to do. Its requeues are slowed down to the ceiling and the
/// user is told; the neighbours converge.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_that_always_asks_for_an_immediate_requeue_is_slowed_down_and_reported() {
    let host = TestHost::start(&["replicaset", "podsim", "zoo"]).await;
    create_zoo(&host, "eager", json!({"fault": "requeue0"})).await;
    let ceiling = requeues_reach_the_ceiling(&host, "eager").await;
    // At the ceiling, a 2 s window holds at most one of its calls, where
    // the hot loop made thousands: the host's CPU is its neighbours'.
    let before = host.host.controller_stats("zoo").await.unwrap().reconciles;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let during = host.host.controller_stats("zoo").await.unwrap().reconciles - before;
    assert!(
        during <= 1 && ceiling >= Duration::from_secs(2),
        "{during} reconciles in 2 s with requeues at the {ceiling:?} ceiling"
    );
    let warned = events_about(&host, "eager", "RequeueThrottled").await;
    assert_eq!(warned.len(), 1, "{warned:?}");
    assert!(
        warned[0]["message"]
            .as_str()
            .unwrap()
            .contains("asking to be called again after 0ns"),
        "{warned:?}"
    );
    neighbours_converge(&host, "web").await;
    host.stop().await;
}

/// The zoo's `burst` objects ask to be called again at once and write a
/// small status every few calls: their own writes are no progress, so
/// their requeues are slowed to the ceiling like `requeue0`'s, where they
/// used to reset the count and cost 150 % CPU forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requeueing_at_once_with_small_status_writes_is_slowed_down_too() {
    const OBJECTS: usize = 20;
    let host = TestHost::start(&["zoo"]).await;
    for i in 0..OBJECTS {
        create_zoo(&host, &format!("burst-{i}"), json!({"fault": "burst"})).await;
    }
    let mut ceiling = Duration::ZERO;
    for i in 0..OBJECTS {
        ceiling = requeues_reach_the_ceiling(&host, &format!("burst-{i}")).await;
    }
    let before = host.host.controller_stats("zoo").await.unwrap().reconciles;
    tokio::time::sleep(Duration::from_secs(4)).await;
    let during = host.host.controller_stats("zoo").await.unwrap().reconciles - before;
    assert!(
        during <= 2 * OBJECTS as u64,
        "{during} reconciles of {OBJECTS} objects in 4 s with requeues at the {ceiling:?} ceiling"
    );
    let warned = events_about(&host, "burst-0", "RequeueThrottled").await;
    assert_eq!(warned.len(), 1, "{warned:?}");
    host.stop().await;
}

/// The zoo's `flip` object changes its one child on every call, so every
/// call changes the children it sees: only its own writes do. The breaker
/// counts them and stops it; the neighbours converge.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_whose_child_flips_on_every_call_is_stopped_by_the_breaker() {
    let host = TestHost::start(&["replicaset", "podsim", "zoo"]).await;
    create_zoo(&host, "flipper", json!({"fault": "flip"})).await;
    eventually("the breaker opens", WAIT, || async {
        let object = zoo(&host, "flipper").await;
        match crate::support::ready_condition(&object) {
            Some(c) if c["reason"] == "HotLoop" && c["status"] == "False" => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    assert!(!events_about(&host, "flipper", "HotLoop").await.is_empty());
    // Once open, nothing more is written: the store stands still.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let api = host.host.api();
    let settled = api.current_revision().await.unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        api.current_revision().await.unwrap(),
        settled,
        "writes went on after the breaker opened"
    );
    assert_eq!(
        host.host.controller_stats("zoo").await.unwrap().hot_loops,
        1
    );
    neighbours_converge(&host, "web").await;
    host.stop().await;
}

/// A WASI plugin that sleeps an hour, reads its clocks and draws random
/// numbers: its clocks stand still at the request's time, so the sleep
/// returns at once and the reconcile completes; the neighbours converge.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sleeping_wasi_plugin_sees_time_stand_still_and_holds_no_worker() {
    let host = TestHost::start(&["replicaset", "podsim", "zoo"]).await;
    create_zoo(&host, "sleepy", json!({"fault": "sleep"})).await;
    create_zoo(&host, "sleepy2", json!({"fault": "sleep"})).await;
    create_zoo(&host, "calm", json!({"fault": "none"})).await;
    let status = eventually("the sleeper's report", WAIT, || async {
        let object = zoo(&host, "sleepy").await;
        if object["status"]["wallMs"].is_u64() {
            Ok(object["status"].clone())
        } else {
            Err(object.to_string())
        }
    })
    .await;
    assert_eq!(status["sleptNs"], json!(0), "{status}");
    assert_eq!(status["wallMs"], status["requestMs"], "{status}");
    neighbours_converge(&host, "web").await;
    eventually("a calm neighbour of the same plugin", WAIT, || async {
        let calm = zoo(&host, "calm").await;
        (calm["status"]["fine"] == json!(true))
            .then_some(())
            .ok_or_else(|| calm.to_string())
    })
    .await;
    host.stop().await;
}

/// With the host's clocks granted, a sleep takes real time, but never past
/// the call's deadline: the call fails with the deadline, not an hour
/// later, and the plugin's other objects are reconciled meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_host_clocks_a_sleep_ends_at_the_calls_deadline() {
    let dir = plugins_dir(&["zoo"]);
    std::fs::write(
        dir.path().join("zoo.toml"),
        "deadline_ms = 300\nhost_clock = true\n",
    )
    .unwrap();
    let host = TestHost::start_in(dir, RuntimeConfig::default()).await;
    for name in ["sleepy", "sleepy2", "sleepy3"] {
        create_zoo(&host, name, json!({"fault": "sleep"})).await;
    }
    create_zoo(&host, "calm", json!({"fault": "none"})).await;
    for name in ["sleepy", "sleepy2", "sleepy3"] {
        let message = eventually("the deadline", WAIT, || async {
            let object = zoo(&host, name).await;
            match crate::support::ready_condition(&object) {
                Some(c) if c["status"] == "False" => Ok(c["message"].as_str().unwrap().to_owned()),
                other => Err(format!("{other:?}")),
            }
        })
        .await;
        assert!(
            message.contains("exceeded its deadline of 300ms"),
            "{message}"
        );
    }
    eventually("a calm neighbour of the same plugin", WAIT, || async {
        let calm = zoo(&host, "calm").await;
        (calm["status"]["fine"] == json!(true))
            .then_some(())
            .ok_or_else(|| calm.to_string())
    })
    .await;
    host.stop().await;
}

/// The reconcile of one request is a function of it: a WASI plugin that
/// sleeps, reads its clocks and draws random numbers answers the same
/// request the same way, and another request (a newer version of the
/// object) with other numbers.
#[test]
fn a_wasi_plugin_answers_the_same_request_with_the_same_clocks_and_random_numbers() {
    use std::sync::Arc;

    use setpoint::controller::{CacheView, Reconciler, Request};

    /// The zoo's `sleep` fault reads nothing from the host's caches.
    struct NoCache;
    impl CacheView for NoCache {
        fn get(&self, _: &str, _: &str, _: Option<&str>, _: &str) -> Option<Arc<Value>> {
            None
        }
        fn list(
            &self,
            _: &str,
            _: &str,
            _: Option<&str>,
            _: &str,
        ) -> Result<Vec<Arc<Value>>, String> {
            Ok(Vec::new())
        }
    }

    let bytes = std::fs::read(crate::support::built_wasi_plugins().join("zoo.wasm")).unwrap();
    let runtime = setpoint::runtime::Runtime::new(RuntimeConfig::default()).unwrap();
    let plugin = runtime.load(&bytes, None).unwrap();
    let cache: Arc<dyn CacheView> = Arc::new(NoCache);
    let request = |rv: &str| Request {
        object: Arc::new(json!({
            "apiVersion": "test.setpoint.dev/v1", "kind": "Zoo",
            "metadata": {"name": "dice", "namespace": "default", "uid": "u-1", "resourceVersion": rv},
            "spec": {"fault": "sleep", "seconds": 3600},
        })),
        owned: vec![],
        finalizing: false,
        now_unix_ms: 1_700_000_000_000,
        observations: vec![],
        outcomes: vec![],
        round: 0,
    };
    let answer = |rv: &str| {
        let response = plugin.reconcile(&request(rv), &cache).unwrap();
        response.status.unwrap()
    };
    let first = answer("7");
    assert_eq!(first, answer("7"));
    assert_eq!(first["sleptNs"], json!(0), "{first}");
    assert_eq!(first["wallMs"], json!(1_700_000_000_000u64), "{first}");
    let other = answer("8");
    assert_ne!(first["random"], other["random"], "{first} {other}");
}

/// The zoo's `clash` object wants three children; another object already
/// holds the name of one. The other two are created, the clash is reported
/// on the object naming the holder, and once the holder is gone the third
/// child is created and the report goes, with no edit of the object.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_clash_on_one_child_holds_back_only_that_child_and_heals_when_it_clears() {
    let host = TestHost::start(&["replicaset", "podsim", "zoo"]).await;
    let api = host.host.api();
    let child_kind = api
        .kinds()
        .require("test.setpoint.dev/v1", "ZooChild")
        .unwrap();
    api.create(
        &child_kind,
        json!({"apiVersion": "test.setpoint.dev/v1", "kind": "ZooChild",
            "metadata": {"name": "dup-b", "namespace": "default"}, "data": {"mine": "yes"}}),
    )
    .await
    .unwrap();
    create_zoo(&host, "dup", json!({"fault": "clash"})).await;
    let children = || async {
        let list = api
            .list(
                &child_kind,
                &setpoint::api::ListOptions::default().in_namespace("default"),
            )
            .await
            .unwrap()
            .items;
        let mut owned: Vec<String> = list
            .iter()
            .filter(|c| !setpoint::object::meta::owner_references(c).is_empty())
            .map(|c| setpoint::object::meta::name(c).to_owned())
            .collect();
        owned.sort();
        owned
    };
    let condition = eventually("the clash is reported", WAIT, || async {
        let object = zoo(&host, "dup").await;
        let condition = object["status"]["conditions"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["type"] == "ChildrenApplied").cloned());
        match condition {
            Some(c) if c["status"] == "False" => Ok(c),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    let message = condition["message"].as_str().unwrap();
    assert!(
        message.contains("ZooChild \"dup-b\" already exists") && message.contains("no controller"),
        "{message}"
    );
    assert_eq!(children().await, ["dup-a", "dup-c"]);
    let warned = events_about(&host, "dup", "ChildNameClash").await;
    assert!(!warned.is_empty());
    assert!(
        warned[0]["message"].as_str().unwrap().contains("dup-b"),
        "{warned:?}"
    );

    // The holder goes: the third child follows and the report clears.
    api.delete(&child_kind, Some("default"), "dup-b", &Default::default())
        .await
        .unwrap();
    eventually("the clash heals", WAIT, || async {
        let object = zoo(&host, "dup").await;
        let reported = object["status"]["conditions"]
            .as_array()
            .is_some_and(|c| c.iter().any(|c| c["type"] == "ChildrenApplied"));
        let owned = children().await;
        if !reported && owned == ["dup-a", "dup-b", "dup-c"] {
            Ok(())
        } else {
            Err(format!("{owned:?} {}", object["status"]))
        }
    })
    .await;
    neighbours_converge(&host, "web").await;
    host.stop().await;
}

async fn get_json(url: String) -> Value {
    reqwest::get(url).await.unwrap().json().await.unwrap()
}

async fn get_text(url: String) -> String {
    reqwest::get(url).await.unwrap().text().await.unwrap()
}

/// What the user sees: a call that does not return is shown in progress, a
/// refused response counts as an error in `setpoint plugins`, and a kind
/// whose plugin was removed is listed as having no reconciler.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_books_show_refused_responses_the_call_in_progress_and_kinds_left_without_a_reconciler()
{
    let dir = plugins_dir(&["zoo"]);
    std::fs::write(
        dir.path().join("zoo.toml"),
        "deadline_ms = 10000\nhost_clock = true\n",
    )
    .unwrap();
    let host = TestHost::start_in(dir, RuntimeConfig::default()).await;
    create_zoo(&host, "stuck", json!({"fault": "sleep"})).await;
    let history = format!(
        "{}/setpoint/v1/history?apiVersion=test.setpoint.dev/v1&kind=Zoo&namespace=default&name=stuck",
        host.url
    );
    eventually("the call in progress", WAIT, || async {
        let body = get_json(history.clone()).await;
        let records = body["records"].as_array().cloned().unwrap_or_default();
        match records.last() {
            Some(r) if r["outcome"] == "InProgress" => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;

    create_zoo(&host, "refused", json!({"fault": "undeclared"})).await;
    eventually("the refused response counted", WAIT, || async {
        let body = get_json(format!("{}/setpoint/v1/plugins", host.url)).await;
        let zoo = body["plugins"]
            .as_array()
            .and_then(|p| p.iter().find(|p| p["name"] == "zoo").cloned())
            .unwrap_or_default();
        (zoo["errors"].as_u64() >= Some(1))
            .then_some(())
            .ok_or_else(|| zoo.to_string())
    })
    .await;

    std::fs::remove_file(host.plugins_path().join("zoo.wasm")).unwrap();
    host.host
        .load_plugins_dir(host.plugins_path())
        .await
        .unwrap();
    let body = get_json(format!("{}/setpoint/v1/plugins", host.url)).await;
    assert_eq!(
        body["unreconciledKinds"],
        json!(["test.setpoint.dev/v1 Zoo"]),
        "{body}"
    );
    let body = get_json(history).await;
    assert_eq!(body["reconciler"], json!(false), "{body}");
    host.stop().await;
}

/// This process's threads that are running or ready to run right now
/// (state `R` in `/proc/self/task/*/stat`), the sampling thread included.
fn runnable_threads() -> usize {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0;
    };
    tasks
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("stat")).ok())
        .filter(|stat| {
            // "pid (name) S …": the state follows the name's closing bracket.
            stat.rsplit_once(')')
                .is_some_and(|(_, rest)| rest.trim_start().starts_with('R'))
        })
        .count()
}

/// Twelve or more calls of one plugin spin until their deadline at once, on a
/// machine with fewer cores. Calls that run long take turns on half the
/// cores: sampled from outside (the kernel's thread states), no more of the
/// host's threads compete for the CPU than that, where without the turns
/// every spinner does (12 runnable threads on 2 cores, the tester's 17 s
/// for a ReplicaSet beside them). The ReplicaSet beside them converges.
/// How long it takes is a timing, measured by `scripts/bench spin`
/// (BENCHMARKS.md, "Plugins that spin").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugins_that_spin_share_half_the_cores_and_leave_the_rest_to_their_neighbours() {
    // Half the cores take turns; make sure far more than that spin.
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    let turns = (cores / 2).max(1);
    let spinners_count = (2 * cores + 8).max(12);
    let dir = plugins_dir(&["replicaset", "podsim", "zoo"]);
    std::fs::write(dir.path().join("zoo.toml"), "deadline_ms = 4000\n").unwrap();
    let spinners = setpoint::controller::Config {
        workers: spinners_count,
        // Every spinner in its call at once, not what adapting would pick.
        concurrency: setpoint::controller::Concurrency::Fixed,
        ..Default::default()
    };
    let host = std::sync::Arc::new(
        setpoint::Host::builder()
            .plugins_dir(dir.path())
            .controller_for("zoo", spinners)
            .build()
            .await
            .unwrap(),
    );
    let api = host.api();
    let zoo_kind = api.kinds().require("test.setpoint.dev/v1", "Zoo").unwrap();
    for i in 0..spinners_count {
        api.create(
            &zoo_kind,
            json!({"apiVersion": "test.setpoint.dev/v1", "kind": "Zoo",
                "metadata": {"name": format!("spin-{i}"), "namespace": "default"},
                "spec": {"fault": "spin"}}),
        )
        .await
        .unwrap();
    }
    // The spinners' first epoch tick (10 ms) is long past once every one
    // of them shows as in progress; sample while they are within their
    // 4 s deadline.
    eventually("every spinner is in its call", WAIT, || async {
        let mut in_progress = 0;
        for i in 0..spinners_count {
            let key = setpoint::object::ObjectKey::new(Some("default"), &format!("spin-{i}"));
            if host
                .in_progress("test.setpoint.dev/v1", "Zoo", &key)
                .await
                .is_some()
            {
                in_progress += 1;
            }
        }
        (in_progress == spinners_count)
            .then_some(())
            .ok_or_else(|| format!("{in_progress} of {spinners_count} calls in progress"))
    })
    .await;
    let mut samples: Vec<usize> = Vec::new();
    for _ in 0..50 {
        samples.push(runnable_threads());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    samples.sort_unstable();
    let median = samples[samples.len() / 2];
    // The spinners holding a turn, the sampler, and slack for threads
    // caught waking up (a spinner handing over its turn, a runtime worker).
    assert!(
        median <= turns + 4,
        "{median} threads runnable at the median sample (all samples: {samples:?}) \
         with {spinners_count} spinners on {cores} cores: spinners are not taking turns \
         on half the cores"
    );
    assert_eq!(host.runtime().long_call_stats().permits, turns);
    let rs_kind = api
        .kinds()
        .require("demo.setpoint.dev/v1", "ReplicaSet")
        .unwrap();
    api.create(&rs_kind, replicaset("web", 3, 0)).await.unwrap();
    eventually(
        "the replicaset beside the spinners is ready",
        WAIT,
        || async {
            let rs = api
                .get(&rs_kind, Some("default"), "web")
                .await
                .map_err(|e| e.to_string())?;
            (rs["status"]["readyReplicas"] == json!(3))
                .then_some(())
                .ok_or_else(|| rs["status"].to_string())
        },
    )
    .await;
    eventually("every spinner hit its deadline", WAIT, || async {
        let mut stuck = Vec::new();
        for i in 0..spinners_count {
            let object = api
                .get(&zoo_kind, Some("default"), &format!("spin-{i}"))
                .await
                .map_err(|e| e.to_string())?;
            match crate::support::ready_condition(&object) {
                Some(c)
                    if c["message"]
                        .as_str()
                        .is_some_and(|m| m.contains("exceeded its deadline")) => {}
                other => stuck.push(format!("spin-{i}: {other:?}")),
            }
        }
        stuck
            .is_empty()
            .then_some(())
            .ok_or_else(|| stuck.join("; "))
    })
    .await;
    let stats = host.runtime().long_call_stats();
    assert!(stats.peak >= 1, "{stats:?}");
    assert!(stats.peak <= stats.permits, "{stats:?}");
    host.shutdown().await;
}

/// Lines of the zoo's floods in the captured log.
fn flood_log_bytes() -> usize {
    logs::lines_with(&["zzzzzzzzzzzzzzzz"])
        .iter()
        .map(|l| l.len() + 1)
        .sum()
}

/// A plugin that logs in a loop (the `log` import and stdout, 3 MB a
/// call) grows the host's log by its budget, not by what it writes, and
/// the log says how many lines were dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_logging_in_a_loop_grows_the_log_by_its_budget_and_says_what_it_dropped() {
    logs::capture();
    let host = TestHost::start(&["zoo"]).await;
    create_zoo(&host, "chatty", json!({"fault": "logflood", "count": 3000})).await;
    eventually("lines dropped", WAIT, || async {
        let dropped = host
            .host
            .runtime()
            .plugin_call_stats()
            .into_iter()
            .find(|s| s.plugin == "zoo")
            .map_or(0, |s| s.log_lines_dropped);
        let object = zoo(&host, "chatty").await;
        (dropped > 3000)
            .then_some(())
            .ok_or(format!("{dropped} dropped; {}", object["status"]))
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let limits = setpoint::runtime::Limits::default();
    let elapsed_allowance = 10 * limits.log_bytes_per_second as usize;
    let written = flood_log_bytes();
    assert!(
        written <= limits.log_burst_bytes as usize + elapsed_allowance,
        "{written} bytes of flood in the log"
    );
    assert!(written > 0, "the first lines went through");
    eventually("the drop told", WAIT, || async {
        let told = logs::lines_with(&["log lines of the plugin dropped", "plugin=\"zoo\""]);
        (!told.is_empty())
            .then_some(())
            .ok_or_else(|| "not told".to_owned())
    })
    .await;
    let metrics = get_text(format!("{}/metrics", host.url)).await;
    assert!(
        metrics.lines().any(|l| l
            .starts_with("setpoint_plugin_log_lines_dropped_total{plugin=\"zoo\"}")
            && !l.ends_with(" 0")),
        "{metrics}"
    );
    host.stop().await;
}

/// A reconcile that emits 10,000 events records at most its share, an
/// object holds at most its budget, and one aggregated warning says
/// events were dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_flood_is_cut_to_the_budget_and_said_once() {
    use setpoint::controller::events::{DROPPED_REASON, MAX_PER_RECONCILE, OBJECT_BURST};
    let host = TestHost::start(&["zoo"]).await;
    create_zoo(
        &host,
        "loud",
        json!({"fault": "eventflood", "count": 10_000}),
    )
    .await;
    let about_loud = || crate::support::events_about(&host, "loud");
    eventually("the object's budget spent", WAIT, || async {
        let n = about_loud().await.len();
        (n > OBJECT_BURST as usize)
            .then_some(())
            .ok_or(format!("{n} events"))
    })
    .await;
    // The flood goes on (a call every 100 ms); the store does not grow.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let stored = about_loud().await;
    let dropped: Vec<_> = stored
        .iter()
        .filter(|e| e["reason"] == DROPPED_REASON)
        .collect();
    assert_eq!(dropped.len(), 1, "one aggregated warning");
    assert!(dropped[0]["count"].as_i64() > Some(1), "{:?}", dropped[0]);
    let flood = stored.iter().filter(|e| e["reason"] == "Flood").count();
    assert_eq!(
        flood, OBJECT_BURST as usize,
        "the burst (the refill adds one in 7 s)"
    );
    let tally = host.host.tallies().await;
    let zoo = tally.iter().find(|(c, _)| c.contains("zoo")).unwrap();
    assert!(
        zoo.1.events_dropped >= 10_000 - MAX_PER_RECONCILE as u64,
        "{:?}",
        zoo.1
    );
    host.stop().await;
}

/// The grant raises the event budget (`spec.limits.events`): a fifth of it
/// a reconcile, all of it at once per object.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_grant_raises_the_event_budget() {
    let host = TestHost::start(&["zoo"]).await;
    crate::support::grant(&host, "zoo", json!({"limits": {"events": 2000}})).await;
    create_zoo(
        &host,
        "louder",
        json!({"fault": "eventflood", "count": 10_000}),
    )
    .await;
    let flood = || async {
        crate::support::events_about(&host, "louder")
            .await
            .into_iter()
            .filter(|e| e["reason"] == "Flood")
            .count()
    };
    eventually("the raised burst spent", WAIT, || async {
        let n = flood().await;
        // Four times the default's burst of 500.
        (n == 2000).then_some(()).ok_or(format!("{n} events"))
    })
    .await;
    let dropped = events_about(&host, "louder", "EventsDropped").await;
    let message = dropped[0]["message"].as_str().unwrap();
    assert!(
        message.contains("at most 400 a reconcile, and 2000 at once"),
        "{message}"
    );
    host.stop().await;
}

/// A response that wants more children than an object may have is
/// refused, with the way to raise the bound; the grant raises it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn too_many_children_are_refused_until_the_grant_raises_the_bound() {
    use setpoint::controller::MAX_CHILDREN;
    let host = TestHost::start(&["zoo"]).await;
    let wanted = MAX_CHILDREN + 1;
    create_zoo(
        &host,
        "crowd",
        json!({"fault": "children", "count": wanted}),
    )
    .await;
    let api = host.host.api();
    let children = api
        .kinds()
        .require("test.setpoint.dev/v1", "ZooChild")
        .unwrap();
    eventually("the refusal reported", WAIT, || async {
        let object = zoo(&host, "crowd").await;
        let message = object["status"]["conditions"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["type"] == "Ready"))
            .and_then(|c| c["message"].as_str())
            .unwrap_or_default()
            .to_owned();
        message
            .contains(&format!("at most {MAX_CHILDREN}"))
            .then_some(())
            .ok_or(message)
    })
    .await;
    let none = api
        .list(&children, &setpoint::api::ListOptions::default())
        .await
        .unwrap();
    assert!(none.items.is_empty(), "nothing created");
    crate::support::grant(&host, "zoo", json!({"limits": {"children": 2000}})).await;
    // The grant alone is enough: the refusal named it, and a changed
    // grant retries what failed permanently (the object is not touched).
    eventually("the children created", Duration::from_secs(120), || async {
        let n = api
            .list(&children, &setpoint::api::ListOptions::default())
            .await
            .unwrap()
            .items
            .len();
        (n == wanted).then_some(()).ok_or(format!("{n} children"))
    })
    .await;
    host.stop().await;
}

/// A plugin whose statuses are fat (1 MiB, new on every call) writes at
/// its share of bytes, not at the rate its requeues and objects allow:
/// past the burst its keys wait, a `Paced` warning names the grant field
/// that raises the share, and `/metrics` counts the waits. Raising the
/// share in the grant lets it write faster at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fat_status_writes_are_paced_to_the_plugins_share_of_bytes() {
    let host = TestHost::start(&["zoo"]).await;
    // A burst of 16 MiB (64 s of the rate), then a quarter MiB a second.
    crate::support::grant(&host, "zoo", json!({"limits": {"writeMiBPerSecond": 0.25}})).await;
    for i in 0..24 {
        create_zoo(
            &host,
            &format!("fat-{i}"),
            json!({"fault": "fatstatus", "count": 1024}),
        )
        .await;
    }
    let written = || async {
        let tallies = host.host.tallies().await;
        let zoo = tallies.iter().find(|(c, _)| c.contains("zoo")).unwrap().1;
        (zoo.written_bytes, zoo.paced_writes)
    };
    eventually("the plugin paced on its writes", WAIT, || async {
        let (bytes, paced) = written().await;
        (paced > 0)
            .then_some(())
            .ok_or(format!("{bytes} bytes written, not paced"))
    })
    .await;
    let mut paced_events = Vec::new();
    for i in 0..24 {
        paced_events.extend(events_about(&host, &format!("fat-{i}"), "Paced").await);
    }
    assert_eq!(paced_events.len(), 1, "said once: {paced_events:?}");
    let message = paced_events[0]["message"].as_str().unwrap();
    assert!(
        message.contains("spec.limits.writeMiBPerSecond") && message.contains("0.25 MiB"),
        "{message}"
    );
    // Held to the share: over 4 s at most a quarter MiB a second, plus
    // the writes of calls that were under way when the debt was seen.
    let (before, _) = written().await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    let (after, _) = written().await;
    let mib = 1 << 20;
    assert!(
        after - before <= 8 * mib,
        "{} MiB written in 4 s at a share of 0.25 MiB/s",
        (after - before) / mib
    );
    // Raised: the debt is repaid sixty times faster and writes go on.
    crate::support::grant(&host, "zoo", json!({"limits": {"writeMiBPerSecond": 64}})).await;
    let (raised, _) = written().await;
    eventually("writes go on at the raised share", WAIT, || async {
        let (now, _) = written().await;
        (now - raised > 24 * mib)
            .then_some(())
            .ok_or(format!("{} MiB since the raise", (now - raised) / mib))
    })
    .await;
    host.stop().await;
}

/// Plugins whose calls are long and many (20 objects computing for a
/// while, requeueing at once with a small status write) spend their share
/// of call time, not what their requeues and objects would allow: past the
/// burst their keys wait, a `Paced` warning names the grant field that
/// raises the share, and `/metrics` counts the waits. (What the default
/// share costs the host is measured by `scripts/bench` "burst",
/// BENCHMARKS.md.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_calls_are_paced_to_the_plugins_share_of_call_time() {
    let host = TestHost::start(&["zoo"]).await;
    // A tenth of a core: a burst of 0.4 s of calls.
    crate::support::grant(&host, "zoo", json!({"limits": {"cpu": 0.1}})).await;
    for i in 0..20 {
        create_zoo(
            &host,
            &format!("busy-{i}"),
            json!({"fault": "busy", "count": 40}),
        )
        .await;
    }
    let tally = || async {
        let tallies = host.host.tallies().await;
        tallies.iter().find(|(c, _)| c.contains("zoo")).unwrap().1
    };
    let call_time = || {
        host.host
            .runtime()
            .plugin_call_stats()
            .into_iter()
            .find(|s| s.plugin == "zoo")
            .map(|s| s.duration)
            .unwrap_or_default()
    };
    eventually("the plugin paced on its call time", WAIT, || async {
        let t = tally().await;
        (t.paced_cpu > 0)
            .then_some(())
            .ok_or(format!("{} reconciles, not paced", t.reconciles))
    })
    .await;
    let mut paced_events = Vec::new();
    for i in 0..20 {
        paced_events.extend(events_about(&host, &format!("busy-{i}"), "Paced").await);
    }
    assert_eq!(paced_events.len(), 1, "said once: {paced_events:?}");
    let message = paced_events[0]["message"].as_str().unwrap();
    assert!(
        message.contains("spec.limits.cpu") && message.contains("0.1 cores"),
        "{message}"
    );
    // Held to the share over 6 s: 0.6 s of the calls' CPU time (what the
    // share is of: their wall time also holds the time the OS gave the
    // other tests' threads), plus the calls under way when the debt was
    // seen (at most one a pool thread) and the debt they leave behind.
    let (before, cpu_before) = (call_time(), tally().await.call_cpu);
    tokio::time::sleep(Duration::from_secs(6)).await;
    let (after, cpu_after) = (call_time(), tally().await.call_cpu);
    let spent = cpu_after - cpu_before;
    let slack = after.max * 4;
    assert!(
        spent <= Duration::from_millis(600) + slack,
        "{spent:?} of calls' CPU in 6 s at a share of 0.1 core (longest call {:?}, {} calls)",
        after.max,
        after.count - before.count
    );
    assert!(cpu_after > Duration::ZERO, "the calls' CPU is counted");
    assert!(tally().await.paced_cpu > 0);
    let metrics = get_text(format!("{}/metrics", host.url)).await;
    let exported = metrics
        .lines()
        .find_map(|l| l.strip_prefix("setpoint_plugin_call_cpu_seconds_total{plugin=\"zoo\"} "))
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap_or_else(|| panic!("no call CPU of zoo in {metrics}"));
    assert!(
        exported >= cpu_after.as_secs_f64(),
        "{exported} s exported, {cpu_after:?} counted before"
    );
    host.stop().await;
}
