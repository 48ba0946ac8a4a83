//! Plans against reality, with the real Wasm plugins: a change is planned,
//! then applied, and the objects that appear, change and go are exactly the
//! ones the plan listed, with the contents it predicted — no more and no
//! fewer. Time-based steps the plan marks pending are held off in reality
//! by giving new Pods a start-up delay of an hour, so the world stops where
//! the plan stops. Also: planning writes nothing, wakes no watcher and
//! sends no external write; bad input is reported per object and the rest
//! is still planned; a reconciler that never converges is a reported cycle.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Value, json};
use setpoint::plan::{Action, Document, Plan, Request};

use crate::support::recorder::Recorder;
use crate::support::{TestHost, eventually, replicaset_ready, setpoint_bin};

const CONVERGE: Duration = Duration::from_secs(60);
/// Pods that never start while a test looks: podsim's look again after
/// this long is the pending step the plan shows.
const NEVER_MS: u64 = 3_600_000;
const DEMO_KINDS: [&str; 4] = ["Deployment", "ReplicaSet", "Pod", "Stack"];

fn documents(objects: &[Value]) -> Request {
    Request::Apply(
        objects
            .iter()
            .enumerate()
            .map(|(i, object)| Document {
                origin: format!("test document {}", i + 1),
                object: object.clone(),
            })
            .collect(),
    )
}

/// An object with what differs between two runs of the same change taken
/// out: uids (owner references' too), resource versions, timestamps.
fn comparable(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(k, _)| {
                    !matches!(
                        k.as_str(),
                        "uid" | "resourceVersion" | "managedFields" | "creationTimestamp"
                    ) && !k.ends_with("Time")
                        && !k.ends_with("Timestamp")
                })
                .map(|(k, v)| (k.clone(), comparable(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(comparable).collect()),
        other => other.clone(),
    }
}

type State = BTreeMap<String, Value>;

/// Every object of the demo kinds, by `Kind ns/name`, comparable.
async fn state(host: &TestHost) -> State {
    let mut state = State::new();
    let kinds = host.host.api().kinds();
    for kind in DEMO_KINDS {
        if kinds.by_kind("demo.setpoint.dev/v1", kind).is_none() {
            continue;
        }
        for object in host.list(kind).await {
            let name = object["metadata"]["name"].as_str().unwrap_or("").to_owned();
            state.insert(format!("{kind} default/{name}"), comparable(&object));
        }
    }
    state
}

/// What the plan says the demo kinds' objects will be: `None` for deleted.
fn predicted(plan: &Plan) -> BTreeMap<String, Option<Value>> {
    plan.changes
        .iter()
        .filter(|c| DEMO_KINDS.contains(&c.object.kind.as_str()))
        .map(|c| (c.object.to_string(), c.after.as_ref().map(comparable)))
        .collect()
}

/// The keys that differ between two states, with their new value.
fn differences(before: &State, after: &State) -> BTreeMap<String, Option<Value>> {
    let mut changed = BTreeMap::new();
    for (key, value) in after {
        if before.get(key) != Some(value) {
            changed.insert(key.clone(), Some(value.clone()));
        }
    }
    for key in before.keys() {
        if !after.contains_key(key) {
            changed.insert(key.clone(), None);
        }
    }
    changed
}

/// Wait until what changed since `before` is exactly what `plan`
/// predicted, then wait for the host to fall quiet and check that it still
/// is: nothing the plan did not list appeared afterwards.
async fn reality_matches(host: &TestHost, before: &State, plan: &Plan) {
    let expected = predicted(plan);
    assert!(!expected.is_empty(), "the plan predicts changes: {plan:#?}");
    let show = |m: &BTreeMap<String, Option<Value>>| serde_json::to_string_pretty(m).unwrap();
    eventually("reality reaches the plan", CONVERGE, || async {
        let now = differences(before, &state(host).await);
        if now == expected {
            Ok(())
        } else {
            Err(format!(
                "\nreality: {}\nplan:    {}",
                show(&now),
                show(&expected)
            ))
        }
    })
    .await;
    let api = host.host.api();
    let mut last = api.current_revision().await.unwrap();
    let mut quiet_since = tokio::time::Instant::now();
    while quiet_since.elapsed() < Duration::from_millis(800) {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let now = api.current_revision().await.unwrap();
        if now != last {
            last = now;
            quiet_since = tokio::time::Instant::now();
        }
    }
    let settled = differences(before, &state(host).await);
    assert_eq!(
        settled, expected,
        "after the host fell quiet, reality still equals the plan"
    );
}

fn replicaset(replicas: u64, startup_delay_ms: u64) -> Value {
    json!({
        "apiVersion": "demo.setpoint.dev/v1", "kind": "ReplicaSet",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                "spec": {"image": "nginx:1.27", "startupDelayMs": startup_delay_ms}}}
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scaling_a_replicaset_does_what_its_plan_said() {
    let host = TestHost::start(&["replicaset", "podsim"]).await;
    let api = host.host.api();
    api.create(&host.kind("ReplicaSet"), replicaset(2, 10))
        .await
        .unwrap();
    replicaset_ready(&host, "web", 2).await;

    // Up: two Pods more, which podsim would start after an hour (pending).
    let before = state(&host).await;
    let plan = host
        .host
        .plan(documents(&[replicaset(4, NEVER_MS)]))
        .await
        .unwrap();
    assert!(plan.errors.is_empty(), "{:#?}", plan.errors);
    assert_eq!(plan.changes_of("Pod", Action::Create).len(), 2, "{plan:#?}");
    assert_eq!(plan.changes_of("ReplicaSet", Action::Update).len(), 1);
    assert_eq!(
        plan.pending
            .iter()
            .filter(|p| p.plugin == "podsim" && p.reason.contains("looks again after"))
            .count(),
        2,
        "the new Pods' start is pending: {:#?}",
        plan.pending
    );
    assert!(
        plan.events.iter().any(|e| e.reason == "SuccessfulCreate"),
        "{:#?}",
        plan.events
    );
    assert_eq!(state(&host).await, before, "planning changed nothing");
    host.host
        .api()
        .update(&host.kind("ReplicaSet"), {
            let live = host.get("ReplicaSet", "web").await.unwrap();
            setpoint::object::patch::applied_over(&live, &replicaset(4, NEVER_MS))
        })
        .await
        .unwrap();
    reality_matches(&host, &before, &plan).await;

    // Down: the plan names the Pods the reconciler deletes.
    let before = state(&host).await;
    let plan = host
        .host
        .plan(documents(&[replicaset(1, NEVER_MS)]))
        .await
        .unwrap();
    assert_eq!(plan.changes_of("Pod", Action::Delete).len(), 3, "{plan:#?}");
    let live = host.get("ReplicaSet", "web").await.unwrap();
    api.update(
        &host.kind("ReplicaSet"),
        setpoint::object::patch::applied_over(&live, &replicaset(1, NEVER_MS)),
    )
    .await
    .unwrap();
    reality_matches(&host, &before, &plan).await;
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deletion_plan_follows_each_propagation_policy() {
    let host = TestHost::start(&["replicaset", "podsim"]).await;
    let api = host.host.api();
    let kind = host.kind("ReplicaSet");
    for (policy, propagation) in [
        ("Orphan", setpoint::api::Propagation::Orphan),
        ("Foreground", setpoint::api::Propagation::Foreground),
        ("Background", setpoint::api::Propagation::Background),
    ] {
        api.create(&kind, replicaset(2, 10)).await.unwrap();
        replicaset_ready(&host, "web", 2).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        let before = state(&host).await;
        let plan = host
            .host
            .plan(Request::Delete(setpoint::plan::DeleteTarget {
                api_version: "demo.setpoint.dev/v1".into(),
                kind: "ReplicaSet".into(),
                namespace: Some("default".into()),
                name: "web".into(),
                propagation_policy: Some(policy.into()),
            }))
            .await
            .unwrap();
        assert!(plan.errors.is_empty(), "{policy}: {:#?}", plan.errors);
        let (kept, deleted) = (
            plan.changes_of("Pod", Action::Update).len(),
            plan.changes_of("Pod", Action::Delete).len(),
        );
        match propagation {
            setpoint::api::Propagation::Orphan => assert_eq!((kept, deleted), (2, 0), "{plan:#?}"),
            _ => assert_eq!((kept, deleted), (0, 2), "{policy}: {plan:#?}"),
        }
        api.delete(
            &kind,
            Some("default"),
            "web",
            &setpoint::api::DeleteOptions::default().with_propagation(propagation),
        )
        .await
        .unwrap();
        reality_matches(&host, &before, &plan).await;
        // Orphans stay; the next round starts from no Pods.
        for pod in host.list("Pod").await {
            let name = pod["metadata"]["name"].as_str().unwrap().to_owned();
            api.delete(
                &host.kind("Pod"),
                Some("default"),
                &name,
                &Default::default(),
            )
            .await
            .unwrap();
        }
        eventually("no pods left", CONVERGE, || async {
            let n = host.list("Pod").await.len();
            (n == 0).then_some(()).ok_or(format!("{n} pods"))
        })
        .await;
    }
    host.stop().await;
}

fn deployment(image: &str, startup_delay_ms: u64) -> Value {
    json!({
        "apiVersion": "demo.setpoint.dev/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"replicas": 4, "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                "spec": {"image": image, "startupDelayMs": startup_delay_ms}},
            "strategy": {"rollingUpdate": {"maxSurge": 1, "maxUnavailable": 1}}}
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rolling_a_deployment_to_a_new_template_does_what_its_plan_said() {
    let host = TestHost::start(&["replicaset", "podsim", "deployment"]).await;
    let api = host.host.api();
    let kind = host.kind("Deployment");
    api.create(&kind, deployment("v1", 10)).await.unwrap();
    eventually("v1 rolls out", CONVERGE, || async {
        let d = host.get("Deployment", "web").await.ok_or("none")?;
        (d["status"]["readyReplicas"] == 4 && d["status"]["updatedReplicas"] == 4)
            .then_some(())
            .ok_or_else(|| d["status"].to_string())
    })
    .await;
    // Let the last status writes land before the snapshot.
    tokio::time::sleep(Duration::from_millis(500)).await;

    let before = state(&host).await;
    let plan = host
        .host
        .plan(documents(&[deployment("v2", NEVER_MS)]))
        .await
        .unwrap();
    assert!(plan.errors.is_empty(), "{:#?}", plan.errors);
    assert_eq!(
        plan.changes_of("ReplicaSet", Action::Create).len(),
        1,
        "a ReplicaSet for the new template: {plan:#?}"
    );
    assert!(
        !plan.changes_of("Pod", Action::Create).is_empty(),
        "its first Pods, through the next level of the choreography"
    );
    let live = host.get("Deployment", "web").await.unwrap();
    api.update(
        &kind,
        setpoint::object::patch::applied_over(&live, &deployment("v2", NEVER_MS)),
    )
    .await
    .unwrap();
    reality_matches(&host, &before, &plan).await;
    host.stop().await;
}

fn stack() -> Value {
    let pod = |app: &str| {
        json!({"apiVersion": "demo.setpoint.dev/v1", "kind": "Pod",
        "metadata": {"labels": {"app": app}}, "spec": {"startupDelayMs": 10}})
    };
    json!({
        "apiVersion": "demo.setpoint.dev/v1", "kind": "Stack",
        "metadata": {"name": "blog", "namespace": "default"},
        "spec": {"resources": [
            {"name": "db", "template": pod("db")},
            {"name": "api", "dependsOn": ["db"], "template": {
                "apiVersion": "demo.setpoint.dev/v1", "kind": "ReplicaSet",
                "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "api"}},
                    "template": {"metadata": {"labels": {"app": "api"}},
                        "spec": {"startupDelayMs": 10}}}}},
            {"name": "web", "dependsOn": ["api"], "template": pod("web")},
        ]}
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_stack_does_what_its_plan_said() {
    let host = TestHost::start(&["replicaset", "podsim", "stack"]).await;
    let api = host.host.api();
    let kind = host.kind("Stack");
    api.create(&kind, stack()).await.unwrap();
    eventually("the stack is up", CONVERGE, || async {
        let pods = host.list("Pod").await;
        (pods.len() == 4
            && pods.iter().all(crate::support::is_ready_pod)
            && host
                .get("Stack", "blog")
                .await
                .is_some_and(|s| s["status"]["summary"] == "3/3"))
        .then_some(())
        .ok_or_else(|| format!("{} pods", pods.len()))
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;

    let before = state(&host).await;
    let plan = host
        .host
        .plan(Request::Delete(setpoint::plan::DeleteTarget {
            api_version: "demo.setpoint.dev/v1".into(),
            kind: "Stack".into(),
            namespace: Some("default".into()),
            name: "blog".into(),
            propagation_policy: None,
        }))
        .await
        .unwrap();
    assert!(plan.errors.is_empty(), "{:#?}", plan.errors);
    let deleted: Vec<String> = plan
        .changes
        .iter()
        .filter(|c| c.action == Action::Delete)
        .map(|c| c.object.to_string())
        .collect();
    assert_eq!(
        deleted.len(),
        before.len(),
        "everything goes, the stack through its finalizer: {deleted:?} of {:?}",
        before.keys()
    );
    api.delete(&kind, Some("default"), "blog", &Default::default())
        .await
        .unwrap();
    reality_matches(&host, &before, &plan).await;
    host.stop().await;
}

async fn grant(host: &TestHost, plugin: &str, destinations: &[String]) {
    crate::support::grant(host, plugin, json!({"destinations": destinations})).await;
}

fn effect(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "test.setpoint.dev/v1", "kind": "Effect",
        "metadata": {"name": name, "namespace": "default"}, "spec": spec})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn planning_writes_nothing_wakes_no_watcher_and_sends_no_external_write() {
    let host = TestHost::start(&["effector"]).await;
    let server = Recorder::echo().await;
    grant(&host, "effector", &[server.url()]).await;
    let api = host.host.api();
    let revision = api.current_revision().await.unwrap();
    let mut watcher = api.hub().subscribe("/registry/", revision).unwrap();

    let spec = json!({
        "reads": [
            {"id": "look", "url": format!("{}/look", server.url())},
            {"id": "sneaky", "method": "POST", "url": format!("{}/sneaky", server.url())},
        ],
        "writes": [
            {"id": "make", "method": "PUT", "url": format!("{}/thing", server.url()), "body": "{\"size\": 3}"},
            {"id": "gone", "method": "DELETE", "url": format!("{}/old", server.url())},
        ],
    });
    let plan = host
        .host
        .plan(documents(&[effect("one", spec.clone())]))
        .await
        .unwrap();

    // The external requests: the safe read made, the rest listed only.
    let methods: Vec<String> = server
        .requests()
        .iter()
        .map(|r| format!("{} {}", r.method, r.path))
        .collect();
    assert_eq!(
        methods,
        ["GET /look"],
        "only the safe read reached the server"
    );
    let writes: Vec<(String, String, Option<String>)> = plan
        .writes
        .iter()
        .map(|w| (w.method.clone(), w.url.clone(), w.body.clone()))
        .collect();
    assert_eq!(
        writes,
        [
            (
                "PUT".to_owned(),
                format!("{}/thing", server.url()),
                Some("{\"size\": 3}".to_owned())
            ),
            ("DELETE".to_owned(), format!("{}/old", server.url()), None),
        ]
    );
    let look = plan.observations.iter().find(|o| o.id == "look").unwrap();
    assert_eq!(look.result.as_deref(), Some("200"));
    assert!(
        plan.pending
            .iter()
            .any(|p| p.reason.contains("outcome of 2 external writes")),
        "{:#?}",
        plan.pending
    );
    assert!(
        plan.pending
            .iter()
            .any(|p| p.reason.contains("not sent while planning")),
        "the POST read is shown as not sent: {:#?}",
        plan.pending
    );

    // The store: no revision moved, and the first thing a watcher sees is
    // a write made after the plan.
    assert_eq!(api.current_revision().await.unwrap(), revision);
    let events = api.kinds().require("v1", "Event").unwrap();
    api.create(
        &events,
        json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "after-the-plan", "namespace": "default"}}),
    )
    .await
    .unwrap();
    let first = tokio::time::timeout(Duration::from_secs(10), watcher.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(first.key, "/registry/core/events/default/after-the-plan");

    // Applied for real, the same writes are sent, in the order planned.
    api.create(
        &api.kinds()
            .require("test.setpoint.dev/v1", "Effect")
            .unwrap(),
        effect("one", spec),
    )
    .await
    .unwrap();
    eventually("the writes are sent", CONVERGE, || async {
        let sent: Vec<String> = server
            .requests()
            .iter()
            .filter(|r| r.method != "GET")
            .map(|r| format!("{} {}", r.method, r.path))
            .collect();
        (sent.len() >= 3).then_some(()).ok_or(format!("{sent:?}"))
    })
    .await;
    let sent: Vec<String> = server
        .requests()
        .iter()
        .filter(|r| r.method != "GET")
        .map(|r| format!("{} {}", r.method, r.path))
        .collect();
    // The POST read comes first (a real reconcile sends it), then the
    // planned writes.
    assert_eq!(sent[..3], ["POST /sneaky", "PUT /thing", "DELETE /old"]);
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_objects_and_failing_plugins_are_reported_per_object_and_the_rest_is_planned() {
    let host = TestHost::start(&["replicaset", "podsim", "flaky", "zoo"]).await;
    let flaky = |name: &str, mode: &str| {
        json!({"apiVersion": "test.setpoint.dev/v1", "kind": "Flaky",
            "metadata": {"name": name, "namespace": "default"}, "spec": {"mode": mode}})
    };
    let zoo = |name: &str, fault: &str| {
        json!({"apiVersion": "test.setpoint.dev/v1", "kind": "Zoo",
            "metadata": {"name": name, "namespace": "default"}, "spec": {"fault": fault}})
    };
    let plan = host
        .host
        .plan(documents(&[
            json!("not an object"),
            json!({"apiVersion": "nowhere.dev/v1", "kind": "Ghost", "metadata": {"name": "boo"}}),
            json!({"apiVersion": "demo.setpoint.dev/v1", "kind": "ReplicaSet", "metadata": {}}),
            json!({"apiVersion": "demo.setpoint.dev/v1", "kind": "ReplicaSet",
                "metadata": {"name": "typo"}, "spec": {"replicas": "three"}}),
            flaky("down", "permanent"),
            zoo("boom", "panic"),
            zoo("loop", "flip"),
            replicaset(2, NEVER_MS),
        ]))
        .await
        .unwrap();
    let errors: Vec<(String, String)> = plan
        .errors
        .iter()
        .map(|e| (e.origin.clone(), e.message.clone()))
        .collect();
    let error_of = |origin: &str| {
        errors
            .iter()
            .find(|(o, _)| o == origin)
            .map(|(_, m)| m.as_str())
            .unwrap_or_else(|| panic!("no error for {origin}: {errors:#?}"))
    };
    assert_eq!(error_of("test document 1"), "not an object");
    assert!(
        error_of("test document 2").contains("unknown kind \"Ghost\""),
        "{errors:#?}"
    );
    assert!(error_of("test document 3").contains("metadata.name is required"));
    assert!(
        error_of("test document 4").contains("spec.replicas"),
        "{errors:#?}"
    );
    let by_plugin = |plugin: &str, name: &str| {
        plan.errors
            .iter()
            .find(|e| e.origin == plugin && e.object.as_ref().is_some_and(|o| o.name == name))
            .map(|e| e.message.clone())
            .unwrap_or_else(|| panic!("no error of {plugin} on {name}: {errors:#?}"))
    };
    assert!(by_plugin("flaky", "down").contains("cannot ever work"));
    assert!(by_plugin("zoo", "boom").contains("panicked"), "{errors:#?}");
    assert_eq!(
        plan.cycles
            .iter()
            .map(|c| c.name.as_str())
            .collect::<Vec<_>>(),
        ["loop"],
        "the flipping Zoo is a cycle"
    );
    // And the rest is planned: the good ReplicaSet and its Pods.
    assert_eq!(plan.changes_of("ReplicaSet", Action::Create).len(), 1);
    assert_eq!(plan.changes_of("Pod", Action::Create).len(), 2);
    assert!(
        plan.reconciles <= 2 * setpoint::plan::MAX_RECONCILES_PER_OBJECT + 16,
        "the cycle was cut short: {} calls",
        plan.reconciles
    );
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn setpoint_plan_shows_a_tree_or_json_and_fails_on_errors() {
    let host = TestHost::start(&["replicaset", "podsim"]).await;
    let dir = tempfile::tempdir().unwrap();
    let manifest = dir.path().join("web.yaml");
    std::fs::write(
        &manifest,
        "apiVersion: demo.setpoint.dev/v1\nkind: ReplicaSet\nmetadata: {name: web}\n\
         spec:\n  replicas: 2\n  selector: {matchLabels: {app: web}}\n  \
         template: {metadata: {labels: {app: web}}, spec: {startupDelayMs: 3600000}}\n",
    )
    .unwrap();
    let run = |args: &[&str]| {
        let output = std::process::Command::new(setpoint_bin())
            .args(args)
            .args(["--server", &host.url])
            .env("NO_COLOR", "1")
            .output()
            .unwrap();
        (
            output.status.code(),
            String::from_utf8_lossy(&output.stdout).into_owned(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    };
    let path = manifest.to_str().unwrap();
    let (code, text, err) = run(&["plan", "-f", path]);
    assert_eq!(code, Some(0), "{text}{err}");
    assert!(
        text.starts_with("Plan: 3 to create, 0 to change, 0 to delete"),
        "{text}"
    );
    assert!(
        text.contains("+ ReplicaSet default/web created; requested"),
        "{text}"
    );
    assert!(
        text.contains(
            "+ Pod default/web-0 created; plugin replicaset reconciling ReplicaSet default/web"
        ),
        "{text}"
    );
    assert!(text.contains("    + spec.replicas: 2"), "{text}");
    assert!(text.contains("Pending (shown, not planned):"), "{text}");

    let (code, json_text, _) = run(&["plan", "-f", path, "-o", "json"]);
    assert_eq!(code, Some(0));
    let plan: Plan = serde_json::from_str(&json_text).unwrap();
    assert_eq!(plan.changes.len(), 3);

    // A broken document is an error of the plan; the rest is still planned.
    std::fs::write(
        &manifest,
        format!(
            "{}---\nkind: [broken\n",
            std::fs::read_to_string(&manifest).unwrap()
        ),
    )
    .unwrap();
    let (code, text, _) = run(&["plan", "-f", path]);
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("(document 2): not valid YAML"), "{text}");
    assert!(text.contains("+ ReplicaSet default/web created"), "{text}");

    // A planned deletion.
    let (code, text, err) = run(&["plan", "--delete", "rs", "web"]);
    assert_eq!(code, Some(1), "nothing to delete yet: {text}{err}");
    assert!(err.contains("not found"), "{err}");
    assert!(
        host.list("ReplicaSet").await.is_empty(),
        "planning created nothing"
    );
    host.stop().await;
}

/// A plan over HTTP is cut to what the caller may read: an object it may
/// not `get` is listed with what happens to it, never with its contents.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_over_http_hides_the_contents_of_objects_the_caller_may_not_read() {
    use setpoint_server::auth::{Rule, Tokens, User};
    const ADMIN: &str = "admin-token-0123456789";
    const PLANNER: &str = "planner-token-0123456789";
    let may_plan = Rule {
        verbs: vec!["post".into()],
        non_resource_urls: vec!["/setpoint/v1/plan".into()],
        ..Rule::default()
    };
    let tokens = Tokens {
        users: vec![
            User {
                name: "admin".into(),
                token: ADMIN.into(),
                rules: vec![
                    Rule {
                        verbs: vec!["*".into()],
                        api_groups: vec!["*".into()],
                        resources: vec!["*".into()],
                        ..Rule::default()
                    },
                    may_plan.clone(),
                ],
            },
            User {
                name: "planner".into(),
                token: PLANNER.into(),
                rules: vec![
                    Rule {
                        verbs: vec!["get".into()],
                        api_groups: vec!["demo.setpoint.dev".into()],
                        resources: vec!["replicasets".into()],
                        ..Rule::default()
                    },
                    may_plan,
                ],
            },
        ],
    };
    let host = TestHost::start_with(
        &["replicaset", "podsim"],
        setpoint_server::Config {
            tokens: Some(std::sync::Arc::new(tokens)),
            ..setpoint_server::Config::default()
        },
    )
    .await;
    host.host
        .api()
        .create(&host.kind("ReplicaSet"), replicaset(1, 10))
        .await
        .unwrap();
    replicaset_ready(&host, "web", 1).await;

    let http = reqwest::Client::new();
    let plan_as = |token: &'static str| {
        let request = http
            .post(format!("{}/setpoint/v1/plan", host.url))
            .bearer_auth(token)
            .json(&json!({"apply": [{"object": replicaset(2, NEVER_MS)}]}));
        async move {
            let response = request.send().await.unwrap();
            assert_eq!(response.status(), 200);
            response.json::<setpoint::plan::Plan>().await.unwrap()
        }
    };

    let full = plan_as(ADMIN).await;
    let created = full.changes_of("Pod", Action::Create);
    assert_eq!(created.len(), 1, "{full:#?}");
    assert!(!created[0].hidden && created[0].after.is_some());

    let cut = plan_as(PLANNER).await;
    let scaled = cut.changes_of("ReplicaSet", Action::Update);
    assert_eq!(scaled.len(), 1, "{cut:#?}");
    assert!(!scaled[0].hidden, "the caller may read ReplicaSets");
    assert_eq!(scaled[0].after.as_ref().unwrap()["spec"]["replicas"], 2);
    let created = cut.changes_of("Pod", Action::Create);
    assert_eq!(created.len(), 1, "the new Pod is still listed: {cut:#?}");
    assert!(created[0].hidden);
    assert_eq!((&created[0].before, &created[0].after), (&None, &None));
    assert!(
        !serde_json::to_string(created[0]).unwrap().contains("nginx"),
        "no Pod contents: {cut:#?}"
    );
    for event in cut.events.iter().filter(|e| e.object.kind == "Pod") {
        assert!(event.hidden && event.message.is_empty(), "{event:?}");
    }
    host.stop().await;
}

/// A plan refuses a response wanting more children than an object may
/// have, as the controller would, and honours a grant that raises it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_refuses_too_many_children_unless_the_grant_raises_the_bound() {
    let host = TestHost::start(&["zoo"]).await;
    let wanted = setpoint::controller::MAX_CHILDREN + 1;
    let crowd = json!({"apiVersion": "test.setpoint.dev/v1", "kind": "Zoo",
        "metadata": {"name": "crowd", "namespace": "default"},
        "spec": {"fault": "children", "count": wanted}});
    let plan = host
        .host
        .plan(documents(std::slice::from_ref(&crowd)))
        .await
        .unwrap();
    assert!(
        plan.errors.iter().any(|e| e.origin == "zoo"
            && e.message
                .contains(&format!("at most {}", setpoint::controller::MAX_CHILDREN))),
        "{:#?}",
        plan.errors
    );
    assert!(plan.changes_of("ZooChild", Action::Create).is_empty());
    crate::support::grant(&host, "zoo", json!({"limits": {"children": 2000}})).await;
    let plan = host.host.plan(documents(&[crowd])).await.unwrap();
    assert!(plan.errors.is_empty(), "{:#?}", plan.errors);
    assert_eq!(plan.changes_of("ZooChild", Action::Create).len(), wanted);
    host.stop().await;
}
