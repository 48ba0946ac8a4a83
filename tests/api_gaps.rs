//! Issue #17 items 10–12 through the HTTP API and the binary: YAML bombs
//! answered at once, garbage collection after a mixed workload with its
//! progress on `/metrics`, `deletecollection`, Kubernetes' error wording,
//! OpenAPI v3 documents that pass a real validator and are cacheable, and
//! list parameters that are checked rather than ignored.

use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::{ServeProcess, TestHost, eventually, plugins_dir, setpoint_bin};

const WIDGETS: &str = "/apis/example.dev/v1/namespaces/default/widgets";

/// A client that gives up on a request that never answers (today's fault
/// in item 10), so that the test fails instead of hanging.
fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap()
}

/// `Widget` in `example.dev`: a schema and a status sub-resource.
async fn install_widgets(host: &TestHost) {
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.dev"},
        "spec": {"group": "example.dev", "scope": "Namespaced",
            "names": {"kind": "Widget", "plural": "widgets"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "properties": {
                        "replicas": {"type": "integer", "minimum": 0},
                        "color": {"type": "string"},
                        "tags": {"type": "array", "items": {"type": "string"}}}},
                    "status": {"type": "object", "properties": {
                        "phase": {"type": "string"}}}}}}}]}
    });
    let created = http()
        .post(format!(
            "{}/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
            host.url
        ))
        .json(&crd)
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 201);
}

fn widget(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "example.dev/v1", "kind": "Widget",
           "metadata": {"name": name}, "spec": spec})
}

/// Status and body of a request.
async fn call(request: reqwest::RequestBuilder) -> (u16, Value) {
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

fn deep_yaml(depth: usize) -> String {
    format!("{}{}", "[".repeat(depth), "]".repeat(depth))
}

fn billion_laughs() -> String {
    let mut text = String::from(
        "apiVersion: example.dev/v1\nkind: Widget\nmetadata: {name: lol}\nl0: &l0 [x, x, x, x, x, x, x, x, x]\n",
    );
    for level in 1..=9 {
        let items = vec![format!("*l{}", level - 1); 9].join(", ");
        text.push_str(&format!("l{level}: &l{level} [{items}]\n"));
    }
    text
}

#[tokio::test(flavor = "multi_thread")]
async fn yaml_bombs_in_an_apply_body_are_refused_at_once_and_the_host_keeps_answering() {
    let host = TestHost::start(&[]).await;
    install_widgets(&host).await;
    let apply = |body: String| {
        http()
            .patch(format!("{}{WIDGETS}/bomb?fieldManager=t", host.url))
            .header("content-type", "application/apply-patch+yaml")
            .body(body)
    };
    for depth in [10_000, 100_000] {
        let (status, body) = call(apply(deep_yaml(depth))).await;
        assert_eq!(status, 400, "{body}");
        assert_eq!(
            body["message"],
            "request body is not valid YAML or JSON: nesting deeper than 128 levels"
        );
    }
    let (status, body) = call(apply(billion_laughs())).await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .ends_with("values once aliases are expanded"),
        "{body}"
    );
    let (status, _) = call(http().get(format!("{}{WIDGETS}", host.url))).await;
    assert_eq!(status, 200);
    let (status, _) = call(http().get(format!("{}{WIDGETS}/bomb", host.url))).await;
    assert_eq!(status, 404, "nothing was written");
    host.stop().await;
}

#[test]
fn setpoint_apply_of_a_yaml_bomb_fails_with_a_clear_message() {
    let dir = plugins_dir(&[]);
    let serve = ServeProcess::start([
        std::ffi::OsStr::new("--in-memory"),
        "--plugins".as_ref(),
        dir.path().as_os_str(),
    ]);
    let files = tempfile::tempdir().unwrap();
    for (name, text, expected) in [
        (
            "deep.yaml",
            deep_yaml(100_000),
            "nesting deeper than 128 levels",
        ),
        (
            "laughs.yaml",
            billion_laughs(),
            "values once aliases are expanded",
        ),
    ] {
        let path = files.path().join(name);
        std::fs::write(&path, text).unwrap();
        let mut child = Command::new(setpoint_bin())
            .args(["apply", "-f"])
            .arg(&path)
            .env("SETPOINT_SERVER", &serve.url)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Today's fault is a command that never ends: give up eventually.
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while child.try_wait().unwrap().is_none() {
            if std::time::Instant::now() > deadline {
                child.kill().unwrap();
                panic!("setpoint apply -f {name} did not finish");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success());
        assert!(
            stderr.contains(&format!("{name} (document 1) is not valid YAML"))
                && stderr.contains(expected),
            "{stderr}"
        );
    }
}

/// The sequence of issue #17 item 11 (a client's conformance run), then an
/// owner deleted with each propagation policy: its dependents are
/// collected, and `/metrics` shows a collector that is caught up.
#[tokio::test(flavor = "multi_thread")]
async fn garbage_collection_works_after_a_mixed_workload_and_reports_its_progress() {
    let host = TestHost::start(&[]).await;
    install_widgets(&host).await;
    let url = |path: &str| format!("{}{WIDGETS}{path}", host.url);
    let creates: Vec<_> = (0..120)
        .map(|i| {
            let request = http()
                .post(url(""))
                .json(&widget(&format!("w-{i}"), json!({"replicas": 1})));
            tokio::spawn(async move { request.send().await.unwrap().status().as_u16() })
        })
        .collect();
    for create in creates {
        assert_eq!(create.await.unwrap(), 201);
    }
    let (_, page) = call(http().get(url("?limit=50"))).await;
    let token = page["metadata"]["continue"].as_str().unwrap().to_owned();
    let (status, _) = call(http().get(url(&format!("?limit=50&continue={token}")))).await;
    assert_eq!(status, 200);
    let (_, mut current) = call(http().get(url("/w-0"))).await;
    let mut stale = current.clone();
    current["spec"]["color"] = json!("red");
    assert_eq!(call(http().put(url("/w-0")).json(&current)).await.0, 200);
    stale["spec"]["color"] = json!("blue");
    assert_eq!(call(http().put(url("/w-0")).json(&stale)).await.0, 409);
    let merge = |name: &str, body: Value| {
        http()
            .patch(url(name))
            .header("content-type", "application/merge-patch+json")
            .body(body.to_string())
    };
    assert_eq!(
        call(merge("/w-1", json!({"spec": {"color": "green"}})))
            .await
            .0,
        200
    );
    assert_eq!(
        call(merge("/w-1", json!({"spec": {"color": null}})))
            .await
            .0,
        200
    );
    let json_patch = |body: Value| {
        http()
            .patch(url("/w-2"))
            .header("content-type", "application/json-patch+json")
            .body(body.to_string())
    };
    let failing = json!([{"op": "test", "path": "/spec/replicas", "value": 7}]);
    assert_eq!(call(json_patch(failing)).await.0, 422);
    let invalid = json!([{"op": "replace", "path": "/spec/replicas", "value": -1}]);
    assert_eq!(call(json_patch(invalid)).await.0, 422);
    let apply = |manager: &str, force: bool, spec: Value| {
        http()
            .patch(url(&format!(
                "/applied?fieldManager={manager}&force={force}"
            )))
            .header("content-type", "application/apply-patch+yaml")
            .body(widget("applied", spec).to_string())
    };
    assert_eq!(
        call(apply(
            "alice",
            false,
            json!({"color": "red", "tags": ["a"]})
        ))
        .await
        .0,
        201
    );
    assert_eq!(
        call(apply("bob", false, json!({"color": "blue"}))).await.0,
        409
    );
    assert_eq!(
        call(apply("bob", true, json!({"color": "blue"}))).await.0,
        200
    );
    let (status, removed) = call(apply("alice", false, json!({"color": "blue"}))).await;
    assert_eq!(status, 200);
    assert!(removed["spec"].get("tags").is_none(), "{removed}");
    assert_eq!(
        call(merge(
            "/w-3/status",
            json!({"status": {"phase": "Running"}})
        ))
        .await
        .0,
        200
    );
    let (_, mut with_status) = call(http().get(url("/w-3"))).await;
    with_status["status"] = json!({"phase": "Pending"});
    assert_eq!(
        call(http().put(url("/w-3/status")).json(&with_status))
            .await
            .0,
        200
    );

    for policy in ["Foreground", "Orphan", "Background"] {
        let owner_name = format!("{}-owner", policy.to_lowercase());
        let child_name = format!("{}-child", policy.to_lowercase());
        let (_, owner) = call(http().post(url("")).json(&widget(&owner_name, json!({})))).await;
        let mut child = widget(&child_name, json!({}));
        child["metadata"]["ownerReferences"] = json!([{"apiVersion": "example.dev/v1",
            "kind": "Widget", "name": owner_name, "uid": owner["metadata"]["uid"],
            "controller": true, "blockOwnerDeletion": true}]);
        assert_eq!(call(http().post(url("")).json(&child)).await.0, 201);
        let (status, _) = call(
            http()
                .delete(url(&format!("/{owner_name}")))
                .json(&json!({"propagationPolicy": policy})),
        )
        .await;
        assert_eq!(status, 200);
        eventually(
            &format!("{policy} deletion completes"),
            Duration::from_secs(20),
            || async {
                let (owner_status, owner) = call(http().get(url(&format!("/{owner_name}")))).await;
                let (child_status, child) = call(http().get(url(&format!("/{child_name}")))).await;
                let done = owner_status == 404
                    && match policy {
                        "Orphan" => {
                            child_status == 200
                                && child["metadata"].get("ownerReferences").is_none()
                        }
                        _ => child_status == 404,
                    };
                if done {
                    Ok(())
                } else {
                    Err(format!("owner {owner}, child {child}"))
                }
            },
        )
        .await;
    }
    eventually(
        "the collector is caught up on /metrics",
        Duration::from_secs(20),
        || async {
            let page = http()
                .get(format!("{}/metrics", host.url))
                .send()
                .await
                .unwrap()
                .text()
                .await
                .unwrap();
            let value = |name: &str| {
                page.lines()
                    .find_map(|l| l.strip_prefix(&format!("{name} ")))
                    .and_then(|v| v.parse::<f64>().ok())
            };
            match (
                value("setpoint_gc_last_progress_timestamp_seconds"),
                value("setpoint_gc_restarts_total"),
                value("setpoint_gc_lag_revisions"),
                value("setpoint_gc_pending_items"),
            ) {
                (Some(t), Some(r), Some(l), Some(p))
                    if t > 0.0 && r == 0.0 && l == 0.0 && p == 0.0 =>
                {
                    Ok(())
                }
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn deletecollection_deletes_what_the_selectors_pick_through_the_same_delete() {
    let host = TestHost::start(&[]).await;
    install_widgets(&host).await;
    let url = |path: &str| format!("{}{WIDGETS}{path}", host.url);
    for (name, tier, finalizer) in [("a", "web", false), ("b", "web", true), ("c", "db", false)] {
        let mut w = widget(name, json!({}));
        w["metadata"]["labels"] = json!({"tier": tier});
        if finalizer {
            w["metadata"]["finalizers"] = json!(["example.dev/hold"]);
        }
        assert_eq!(call(http().post(url("")).json(&w)).await.0, 201);
    }
    let (status, list) = call(http().delete(url("?labelSelector=tier%3Dweb"))).await;
    assert_eq!(status, 200, "{list}");
    assert_eq!(list["kind"], "WidgetList");
    let names: Vec<&str> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["a", "b"]);
    assert_eq!(call(http().get(url("/a"))).await.0, 404);
    let (status, held) = call(http().get(url("/b"))).await;
    assert_eq!(status, 200, "a finalizer holds it, as for a single delete");
    assert!(held["metadata"]["deletionTimestamp"].is_string());
    assert_eq!(call(http().get(url("/c"))).await.0, 200, "not selected");

    let (status, list) = call(http().delete(url("?fieldSelector=metadata.name%3Dc"))).await;
    assert_eq!((status, list["items"].as_array().unwrap().len()), (200, 1));
    assert_eq!(call(http().get(url("/c"))).await.0, 404);
    let (status, body) = call(http().delete(url("?labelSelector=%3D%3D%3D"))).await;
    assert_eq!(status, 400, "{body}");
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn not_found_already_exists_and_conflict_name_the_group_as_kubernetes_does() {
    let host = TestHost::start(&[]).await;
    install_widgets(&host).await;
    let url = |path: &str| format!("{}{WIDGETS}{path}", host.url);
    let (status, body) = call(http().get(url("/nope"))).await;
    assert_eq!(status, 404);
    assert_eq!(body["message"], r#"widgets.example.dev "nope" not found"#);
    assert_eq!(
        body["details"],
        json!({"name": "nope", "group": "example.dev", "kind": "widgets"})
    );
    let alpha = widget("alpha", json!({}));
    assert_eq!(call(http().post(url("")).json(&alpha)).await.0, 201);
    let (status, body) = call(http().post(url("")).json(&alpha)).await;
    assert_eq!(
        (status, body["reason"].as_str()),
        (409, Some("AlreadyExists"))
    );
    assert_eq!(
        body["message"],
        r#"widgets.example.dev "alpha" already exists"#
    );
    assert_eq!(body["details"]["group"], "example.dev");
    let mut stale = alpha.clone();
    stale["metadata"]["resourceVersion"] = json!("1");
    let (status, body) = call(http().put(url("/alpha")).json(&stale)).await;
    assert_eq!((status, body["reason"].as_str()), (409, Some("Conflict")));
    assert_eq!(
        body["message"],
        r#"Operation cannot be fulfilled on widgets.example.dev "alpha": the object has been modified; please apply your changes to the latest version and try again"#
    );
    assert_eq!(
        body["details"],
        json!({"name": "alpha", "group": "example.dev", "kind": "widgets"})
    );
    let (_, body) = call(http().get(format!(
        "{}/api/v1/namespaces/default/events/nope",
        host.url
    )))
    .await;
    assert_eq!(body["message"], r#"events "nope" not found"#);
    assert_eq!(
        body["details"],
        json!({"name": "nope", "kind": "events"}),
        "no empty group"
    );
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn list_and_watch_refuse_a_bad_timeout_or_resource_version() {
    let host = TestHost::start(&[]).await;
    install_widgets(&host).await;
    for query in [
        "timeoutSeconds=-1",
        "timeoutSeconds=soon",
        "resourceVersion=abc",
        "resourceVersion=-5",
        "watch=true&timeoutSeconds=-1",
        "watch=true&resourceVersion=abc",
    ] {
        let (status, body) = call(http().get(format!("{}{WIDGETS}?{query}", host.url))).await;
        assert_eq!(
            (status, body["reason"].as_str()),
            (400, Some("BadRequest")),
            "{query}: {body}"
        );
    }
    for query in ["timeoutSeconds=0", "resourceVersion=0", "resourceVersion=1"] {
        let (status, body) = call(http().get(format!("{}{WIDGETS}?{query}", host.url))).await;
        assert_eq!(status, 200, "{query}: {body}");
    }
    host.stop().await;
}

/// The documents of `/openapi/v3`: index, then each group-version.
async fn openapi_documents(host: &TestHost) -> Vec<(String, Value)> {
    let (_, index) = call(http().get(format!("{}/openapi/v3", host.url))).await;
    let mut docs = Vec::new();
    for (name, entry) in index["paths"].as_object().unwrap() {
        let url = entry["serverRelativeURL"].as_str().unwrap();
        let (status, doc) = call(http().get(format!("{}{url}", host.url))).await;
        assert_eq!(status, 200, "{url}");
        docs.push((name.clone(), doc));
    }
    docs
}

#[tokio::test(flavor = "multi_thread")]
async fn openapi_v3_documents_pass_an_openapi_validator() {
    let host = TestHost::start(&["podsim"]).await;
    install_widgets(&host).await;
    let docs = openapi_documents(&host).await;
    assert!(docs.iter().any(|(name, _)| name == "apis/example.dev/v1"));
    let dir = tempfile::tempdir().unwrap();
    for (name, doc) in &docs {
        let file = dir.path().join(format!("{}.json", name.replace('/', "_")));
        std::fs::write(&file, serde_json::to_vec_pretty(doc).unwrap()).unwrap();
        // openapi-spec-validator (scripts/test installs it from PyPI).
        let out = Command::new("python3")
            .args(["-m", "openapi_spec_validator"])
            .arg(&file)
            .output()
            .expect("python3 runs");
        assert!(
            out.status.success(),
            "{name} is not valid OpenAPI 3 (is openapi-spec-validator installed? scripts/test installs it): {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let (_, widgets) = docs
        .iter()
        .find(|(name, _)| name == "apis/example.dev/v1")
        .unwrap();
    let item = &widgets["paths"]["/apis/example.dev/v1/namespaces/{namespace}/widgets/{name}"];
    for method in ["get", "put", "patch", "delete"] {
        assert!(item[method].is_object(), "{method} documented");
    }
    let collection = &widgets["paths"]["/apis/example.dev/v1/namespaces/{namespace}/widgets"];
    for method in ["get", "post", "delete"] {
        assert!(collection[method].is_object(), "{method} documented");
    }
    assert!(
        widgets["paths"]["/apis/example.dev/v1/namespaces/{namespace}/widgets/{name}/status"]["patch"]
            .is_object()
    );
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn openapi_v3_documents_carry_an_etag_and_hashed_urls_are_immutable() {
    let host = TestHost::start(&[]).await;
    install_widgets(&host).await;
    let (_, index) = call(http().get(format!("{}/openapi/v3", host.url))).await;
    let hashed = index["paths"]["apis/example.dev/v1"]["serverRelativeURL"]
        .as_str()
        .unwrap()
        .to_owned();
    let response = http()
        .get(format!("{}{hashed}", host.url))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let etag = response.headers()["etag"].to_str().unwrap().to_owned();
    let cache = response.headers()["cache-control"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(
        cache.contains("immutable") && cache.contains("public"),
        "{cache}"
    );
    let plain = http()
        .get(format!("{}/openapi/v3/apis/example.dev/v1", host.url))
        .send()
        .await
        .unwrap();
    assert_eq!(plain.headers()["etag"].to_str().unwrap(), etag);
    assert!(
        !plain.headers()["cache-control"]
            .to_str()
            .unwrap()
            .contains("immutable")
    );
    let revalidated = http()
        .get(format!("{}/openapi/v3/apis/example.dev/v1", host.url))
        .header("if-none-match", &etag)
        .send()
        .await
        .unwrap();
    assert_eq!(revalidated.status(), 304);
    let old = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
        .get(format!(
            "{}/openapi/v3/apis/example.dev/v1?hash=0000",
            host.url
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(old.status(), 301);
    assert_eq!(old.headers()["location"].to_str().unwrap(), hashed);
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_watcher_that_stops_reading_is_cut_off_without_reading_again() {
    let host = TestHost::start(&[]).await;
    let api = host.host.api().clone();
    let events = api.kinds().require("v1", "Event").unwrap();
    // The host's own informers (grants, secrets) subscribe as they start:
    // count from when they have.
    let mut before = api.hub().subscribers();
    let mut steady = 0;
    while steady < 10 {
        tokio::time::sleep(Duration::from_millis(20)).await;
        let now = api.hub().subscribers();
        steady = if now == before { steady + 1 } else { 0 };
        before = now;
    }
    let watch = http()
        .get(format!(
            "{}/api/v1/namespaces/default/events?watch=true&resourceVersion={}",
            host.url,
            api.current_revision().await.unwrap()
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(watch.status(), 200);
    assert_eq!(api.hub().subscribers(), before + 1, "the watch subscribed");
    // More changes than the watch cache keeps, large enough to fill every
    // buffer between the server and this client, which reads nothing.
    let message = "x".repeat(1024);
    for i in 0..2 * api.hub().max_lag() {
        api.create(
            &events,
            json!({"apiVersion": "v1", "kind": "Event",
                   "metadata": {"name": format!("e-{i}")}, "message": message}),
        )
        .await
        .unwrap();
    }
    eventually(
        "the slow watcher is cut off",
        Duration::from_secs(30),
        || async {
            match api.hub().subscribers() {
                n if n == before => Ok(()),
                n => Err(format!("{n} subscribers")),
            }
        },
    )
    .await;
    drop(watch);
    host.stop().await;
}
