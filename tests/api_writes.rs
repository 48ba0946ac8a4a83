//! Careless and hostile writes over HTTP, as real clients send them:
//! `dryRun=All` on every verb writes nothing and wakes no controller; JSON
//! patch bombs and over-deep objects get a clear 4xx while the host and the
//! kind stay usable; definitions cannot claim the built-in API groups; a
//! delete's options are honoured from the query string as from the body.

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::{TestHost, eventually, replicaset, replicaset_ready};

fn rs_url(host: &TestHost, name: Option<&str>) -> String {
    let base = format!(
        "{}/apis/demo.setpoint.dev/v1/namespaces/default/replicasets",
        host.url
    );
    match name {
        Some(name) => format!("{base}/{name}"),
        None => base,
    }
}

/// Waits until no write has happened for half a second, and returns the
/// revision then.
async fn settled_revision(host: &TestHost) -> i64 {
    let api = host.host.api();
    let mut last = api.current_revision().await.unwrap();
    for _ in 0..40 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let now = api.current_revision().await.unwrap();
        if now == last {
            return now;
        }
        last = now;
    }
    panic!("the host kept writing for 20 s")
}

async fn send(request: reqwest::RequestBuilder) -> (u16, Value) {
    let response = request.send().await.unwrap();
    let code = response.status().as_u16();
    (code, response.json().await.unwrap_or(Value::Null))
}

#[tokio::test(flavor = "multi_thread")]
async fn dry_run_on_every_verb_answers_like_the_write_and_stores_nothing() {
    let host = TestHost::start(&["replicaset", "podsim"]).await;
    let http = reqwest::Client::new();

    // A dry-run create: the object as it would be, and no controller woken.
    let start = host.host.api().current_revision().await.unwrap();
    let (code, answer) = send(
        http.post(format!("{}?dryRun=All", rs_url(&host, None)))
            .json(&replicaset("dry", 3, 10)),
    )
    .await;
    assert_eq!(code, 201, "{answer}");
    assert_eq!(answer["metadata"]["generation"], 1);
    assert!(answer["metadata"]["uid"].is_string());
    assert!(answer["metadata"].get("resourceVersion").is_none());
    assert_eq!(host.host.api().current_revision().await.unwrap(), start);
    let (code, _) = send(http.get(rs_url(&host, Some("dry")))).await;
    assert_eq!(code, 404);

    // A real one, converged.
    let (code, _) = send(
        http.post(rs_url(&host, None))
            .json(&replicaset("web", 2, 10)),
    )
    .await;
    assert_eq!(code, 201);
    replicaset_ready(&host, "web", 2).await;
    let revision = settled_revision(&host).await;
    let reconciles = host.plugin("replicaset").await.unwrap().reconciles;
    let stored = host.get("ReplicaSet", "web").await.unwrap();

    let mut scaled = stored.clone();
    scaled["spec"]["replicas"] = json!(5);
    let dry = |request: reqwest::RequestBuilder| request.query(&[("dryRun", "All")]);
    let writes = [
        (dry(http.put(rs_url(&host, Some("web")))).json(&scaled), 200),
        (
            dry(http.patch(rs_url(&host, Some("web"))))
                .header("content-type", "application/merge-patch+json")
                .body(r#"{"spec":{"replicas":6}}"#),
            200,
        ),
        (
            dry(http.patch(rs_url(&host, Some("web"))))
                .header("content-type", "application/json-patch+json")
                .body(r#"[{"op":"replace","path":"/spec/replicas","value":7}]"#),
            200,
        ),
        (
            dry(http.patch(rs_url(&host, Some("web"))))
                .query(&[("fieldManager", "tester"), ("force", "true")])
                .header("content-type", "application/apply-patch+yaml")
                .body(serde_json::to_string(&replicaset("web", 8, 10)).unwrap()),
            200,
        ),
        (
            dry(http.patch(format!("{}/status", rs_url(&host, Some("web")))))
                .header("content-type", "application/merge-patch+json")
                .body(r#"{"status":{"replicas":9}}"#),
            200,
        ),
        (dry(http.delete(rs_url(&host, Some("web")))), 200),
        (
            http.delete(rs_url(&host, Some("web"))).json(
                &json!({"kind": "DeleteOptions", "apiVersion": "v1", "dryRun": ["All"],
                              "propagationPolicy": "Foreground"}),
            ),
            200,
        ),
        // The real write's failures, too.
        (
            dry(http.post(rs_url(&host, None))).json(&replicaset("web", 1, 10)),
            409,
        ),
        (
            dry(http.patch(rs_url(&host, Some("web"))))
                .header("content-type", "application/merge-patch+json")
                .body(r#"{"spec":{"replicas":"many"}}"#),
            422,
        ),
        // A misspelt dryRun is refused rather than taken as a real write.
        (
            http.patch(rs_url(&host, Some("web")))
                .query(&[("dryRun", "true")])
                .header("content-type", "application/merge-patch+json")
                .body(r#"{"spec":{"replicas":1}}"#),
            400,
        ),
        (
            http.delete(rs_url(&host, Some("web")))
                .query(&[("dryRun", "yes")]),
            400,
        ),
    ];
    let mut answers = Vec::new();
    for (request, expected) in writes {
        let (code, body) = send(request).await;
        assert_eq!(code, expected, "{body}");
        answers.push(body);
    }
    assert_eq!(answers[0]["spec"]["replicas"], 5);
    assert_eq!(answers[1]["spec"]["replicas"], 6);
    assert_eq!(answers[2]["spec"]["replicas"], 7);
    assert_eq!(answers[3]["spec"]["replicas"], 8);
    assert_eq!(answers[4]["status"]["replicas"], 9);
    assert!(answers[6]["metadata"]["deletionTimestamp"].is_string());
    assert!(answers[10]["message"].as_str().unwrap().contains("dryRun"));

    // Nothing stored, nothing woken.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(host.host.api().current_revision().await.unwrap(), revision);
    assert_eq!(host.get("ReplicaSet", "web").await.unwrap(), stored);
    assert_eq!(host.list("Pod").await.len(), 2);
    assert_eq!(
        host.plugin("replicaset").await.unwrap().reconciles,
        reconciles,
        "no reconcile for a dry run"
    );
    host.stop().await;
}

fn gadget_crd() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "gadgets.example.dev"},
        "spec": {"group": "example.dev", "scope": "Namespaced",
            "names": {"kind": "Gadget", "plural": "gadgets"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object",
                    "x-kubernetes-preserve-unknown-fields": true}}}]}
    })
}

fn crds_url(host: &TestHost) -> String {
    format!(
        "{}/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        host.url
    )
}

fn gadgets_url(host: &TestHost) -> String {
    format!(
        "{}/apis/example.dev/v1/namespaces/default/gadgets",
        host.url
    )
}

async fn with_gadgets() -> (TestHost, reqwest::Client) {
    let host = TestHost::start(&[]).await;
    let http = reqwest::Client::new();
    let (code, body) = send(http.post(crds_url(&host)).json(&gadget_crd())).await;
    assert_eq!(code, 201, "{body}");
    (host, http)
}

#[tokio::test(flavor = "multi_thread")]
async fn json_patch_bombs_and_over_deep_objects_are_refused_and_the_kind_stays_usable() {
    let (host, http) = with_gadgets().await;
    let gadget = json!({"apiVersion": "example.dev/v1", "kind": "Gadget",
        "metadata": {"name": "g"}, "spec": {"a": {"b": {"c": "x".repeat(1024)}}}});
    let (code, _) = send(http.post(gadgets_url(&host)).json(&gadget)).await;
    assert_eq!(code, 201);
    let patch = |ops: Value| {
        http.patch(format!("{}/g", gadgets_url(&host)))
            .header("content-type", "application/json-patch+json")
            .body(ops.to_string())
    };

    // Copies of /spec into its own deepest leaf (this one aborted the host
    // with a stack overflow) and copies that double it (this one took the
    // host to gigabytes): refused at the operation that crosses the bound.
    let into_itself: Vec<Value> = (0..10)
        .map(|i| json!({"op": "copy", "from": "/spec", "path": format!("/spec{}", "/a/b/c".repeat(1 << i))}))
        .collect();
    let doubling: Vec<Value> = (0..40)
        .map(|i| json!({"op": "copy", "from": "/spec", "path": format!("/spec/b{i}")}))
        .collect();
    // A 60-level value at a 60-level path: each half is a valid body, the
    // object they make is not (this one made the whole kind unreadable).
    let deep_value = (0..60).fold(json!(1), |v, _| json!({ "k": v }));
    let deep_path = format!("/spec/deep{}", "/k".repeat(59));
    let deep_add = vec![
        json!({"op": "add", "path": "/spec/deep", "value": (0..60).fold(json!({}), |v, _| json!({ "k": v }))}),
        json!({"op": "add", "path": deep_path, "value": deep_value}),
    ];
    for (ops, expected, words) in [
        (into_itself, 422, "nested"),
        (doubling, 413, "over the limit"),
        (deep_add, 422, "nested"),
    ] {
        let (code, status) = send(patch(json!(ops))).await;
        assert_eq!(code, expected, "{status}");
        assert_eq!(status["kind"], "Status");
        assert!(
            status["message"].as_str().unwrap().contains(words),
            "{status}"
        );
    }
    // A body nested past the bound is refused as well, naming where.
    let mut deep_body = gadget.clone();
    deep_body["metadata"]["name"] = json!("deep");
    deep_body["spec"] = (0..110).fold(json!(1), |v, _| json!([v]));
    let (code, status) = send(http.post(gadgets_url(&host)).json(&deep_body)).await;
    assert_eq!(code, 422, "{status}");
    assert!(
        status["details"]["causes"][0]["field"]
            .as_str()
            .unwrap()
            .starts_with("spec[0][0]"),
        "{status}"
    );

    // The host is up and the kind fully usable.
    let (code, object) = send(http.get(format!("{}/g", gadgets_url(&host)))).await;
    assert_eq!(code, 200);
    assert_eq!(object["spec"], gadget["spec"], "unchanged");
    let (code, list) = send(http.get(gadgets_url(&host))).await;
    assert_eq!((code, list["items"].as_array().unwrap().len()), (200, 1));
    let (code, _) = send(http.delete(format!("{}/g", gadgets_url(&host)))).await;
    assert_eq!(code, 200);
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_definition_cannot_claim_a_built_in_api_group() {
    let host = TestHost::start(&[]).await;
    let http = reqwest::Client::new();
    let claim = |group: &str, plural: &str, kind: &str, annotations: Value| {
        json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": format!("{plural}.{group}"), "annotations": annotations},
            "spec": {"group": group, "scope": "Cluster",
                "names": {"kind": kind, "plural": plural},
                "versions": [{"name": "v1", "served": true, "storage": true,
                    "schema": {"openAPIV3Schema": {"type": "object"}}}]}
        })
    };
    let approved = json!({"api-approved.kubernetes.io": "https://github.com/kubernetes/enhancements/pull/1111"});
    for (crd, field) in [
        (
            claim(
                "apiextensions.k8s.io",
                "customresourcedefinitions",
                "CustomResourceDefinition",
                approved.clone(),
            ),
            "spec.group",
        ),
        (
            claim(
                "apiregistration.k8s.io",
                "apiservices",
                "APIService",
                approved.clone(),
            ),
            "spec.group",
        ),
        (
            claim("widgets.k8s.io", "things", "Thing", json!({})),
            "metadata.annotations[api-approved.kubernetes.io]",
        ),
        (
            claim("x.kubernetes.io", "things", "Thing", json!({})),
            "metadata.annotations[api-approved.kubernetes.io]",
        ),
    ] {
        let (code, status) = send(http.post(crds_url(&host)).json(&crd)).await;
        assert_eq!(code, 422, "{status}");
        assert_eq!(status["details"]["causes"][0]["field"], field, "{status}");
    }
    // Definitions keep working, including an approved one in a protected group.
    let (code, body) = send(http.post(crds_url(&host)).json(&gadget_crd())).await;
    assert_eq!(code, 201, "{body}");
    let (code, body) = send(http.post(crds_url(&host)).json(&claim(
        "widgets.k8s.io",
        "things",
        "Thing",
        approved,
    )))
    .await;
    assert_eq!(code, 201, "{body}");
    let (code, _) = send(http.get(format!(
        "{}/apis/apiextensions.k8s.io/v1/customresourcedefinitions/gadgets.example.dev",
        host.url
    )))
    .await;
    assert_eq!(code, 200);
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn delete_options_in_the_query_string_are_honoured() {
    let (host, http) = with_gadgets().await;
    let create = |name: &str, owner: Option<&Value>| {
        let mut g = json!({"apiVersion": "example.dev/v1", "kind": "Gadget",
            "metadata": {"name": name}});
        if let Some(owner) = owner {
            g["metadata"]["ownerReferences"] = json!([{
                "apiVersion": "example.dev/v1", "kind": "Gadget",
                "name": owner["metadata"]["name"], "uid": owner["metadata"]["uid"],
                "blockOwnerDeletion": true}]);
        }
        http.post(gadgets_url(&host)).json(&g)
    };
    let get = |name: &str| http.get(format!("{}/{name}", gadgets_url(&host)));

    // Orphan, as the Python client sends it: the dependent stays, let go.
    let (_, owner) = send(create("keeper", None)).await;
    send(create("kept", Some(&owner))).await;
    let (code, _) = send(
        http.delete(format!("{}/keeper", gadgets_url(&host)))
            .query(&[("propagationPolicy", "Orphan")]),
    )
    .await;
    assert_eq!(code, 200);
    eventually("the owner is gone", Duration::from_secs(10), || async {
        match send(get("keeper")).await.0 {
            404 => Ok(()),
            code => Err(code.to_string()),
        }
    })
    .await;
    eventually(
        "the dependent is orphaned",
        Duration::from_secs(10),
        || async {
            let (code, kept) = send(get("kept")).await;
            match (code, kept["metadata"].get("ownerReferences")) {
                (200, None) => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;

    // Foreground from the query: the owner waits for its dependent.
    let (_, owner) = send(create("parent", None)).await;
    send(create("child", Some(&owner))).await;
    let (code, pending) = send(
        http.delete(format!("{}/parent", gadgets_url(&host)))
            .query(&[("propagationPolicy", "Foreground")]),
    )
    .await;
    assert_eq!(code, 200);
    assert_eq!(
        pending["metadata"]["finalizers"],
        json!(["foregroundDeletion"]),
        "{pending}"
    );
    eventually("both are gone", Duration::from_secs(10), || async {
        match (send(get("parent")).await.0, send(get("child")).await.0) {
            (404, 404) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;

    // A policy that does not exist is refused, and deletes nothing.
    send(create("stays", None)).await;
    let (code, status) = send(
        http.delete(format!("{}/stays", gadgets_url(&host)))
            .query(&[("propagationPolicy", "Sideways")]),
    )
    .await;
    assert_eq!(code, 400, "{status}");
    assert_eq!(send(get("stays")).await.0, 200);
    host.stop().await;
}

/// `metadata.generateName` without a name is served as Kubernetes serves
/// it: the prefix and five random characters, a new name each time (a
/// ReplicaSet so named is reconciled like any other); a prefix that
/// cannot make a valid name is refused naming the field, and a name given
/// wins over the prefix.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn generate_name_names_new_objects_as_kubernetes_does() {
    let host = TestHost::start(&["replicaset", "podsim"]).await;
    let http = reqwest::Client::new();
    let mut generated = json!({
        "apiVersion": "demo.setpoint.dev/v1", "kind": "ReplicaSet",
        "metadata": {"generateName": "web-"},
        "spec": replicaset("x", 2, 0)["spec"].clone(),
    });
    let (status, first) = send(http.post(rs_url(&host, None)).json(&generated)).await;
    assert_eq!(status, 201, "{first}");
    let name = first["metadata"]["name"].as_str().unwrap().to_owned();
    assert!(
        name.len() == 9
            && name.starts_with("web-")
            && name[4..]
                .chars()
                .all(|c| "bcdfghjklmnpqrstvwxz2456789".contains(c)),
        "{name}"
    );
    let (status, second) = send(http.post(rs_url(&host, None)).json(&generated)).await;
    assert_eq!(status, 201, "{second}");
    assert_ne!(second["metadata"]["name"], first["metadata"]["name"]);
    replicaset_ready(&host, &name, 2).await;

    generated["metadata"]["generateName"] = json!("Not_A_Name-");
    let (status, refused) = send(http.post(rs_url(&host, None)).json(&generated)).await;
    assert_eq!(status, 422, "{refused}");
    assert!(
        refused["message"]
            .as_str()
            .unwrap()
            .contains("metadata.name"),
        "{refused}"
    );

    generated["metadata"]["name"] = json!("given");
    let (status, named) = send(http.post(rs_url(&host, None)).json(&generated)).await;
    assert_eq!(status, 201, "{named}");
    assert_eq!(named["metadata"]["name"], "given");
    host.stop().await;
}

/// A name that decodes to `/` or to nothing (`%2F`, an empty segment)
/// names no object: 404, and never the collection (before, a GET of
/// `replicasets/%2F` answered the list, and a DELETE took the path of a
/// delete of the whole collection).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slash_or_empty_name_in_the_path_is_not_the_collection() {
    let host = TestHost::start(&["replicaset", "podsim"]).await;
    let http = reqwest::Client::new();
    let (status, _) = send(
        http.post(rs_url(&host, None))
            .json(&replicaset("kept", 1, 0)),
    )
    .await;
    assert_eq!(status, 201);
    for name in ["%2F", "%2F%2F", "a%2Fb"] {
        let url = format!("{}/{name}", rs_url(&host, None));
        let (status, body) = send(http.get(&url)).await;
        assert_eq!(status, 404, "GET {name}: {body}");
        assert_ne!(body["kind"], "ReplicaSetList", "GET {name}: {body}");
        let (status, body) = send(http.delete(&url)).await;
        assert_eq!(status, 404, "DELETE {name}: {body}");
    }
    let (status, list) = send(http.get(rs_url(&host, None))).await;
    assert_eq!(status, 200);
    assert_eq!(
        list["items"].as_array().unwrap().len(),
        1,
        "nothing deleted: {list}"
    );
    // A trailing slash still names the collection, as before.
    let (status, list) = send(http.get(format!("{}/", rs_url(&host, None)))).await;
    assert_eq!(
        (status, list["kind"].as_str()),
        (200, Some("ReplicaSetList"))
    );
    host.stop().await;
}
