//! The web console's server side, through HTTP: the page is served to
//! everyone with a strict content policy and its data only to tokens; the
//! ownership tree goes up and down, folds large families and hides what
//! the caller may not read; the overview counts kinds and calls out hot
//! loops and refused requests; the plugins view shows grants and pending
//! rights; manifests are read with errors naming the document. (The page
//! itself is driven in a real browser by `console.rs`.)

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use setpoint_server::auth::{Rule, Tokens, User};

use crate::support::{TestHost, eventually, replicaset, replicaset_ready};

const ADMIN: &str = "console-admin-token-0001";
const VIEWER: &str = "console-viewer-token-001";
/// May read ReplicaSets only (and the console's endpoints).
const RS_ONLY: &str = "console-rs-only-token-01";
const WAIT: Duration = Duration::from_secs(60);

fn tokens() -> Tokens {
    let setpoint_paths = Rule {
        verbs: vec!["get".into(), "post".into()],
        non_resource_urls: vec!["/setpoint/*".into()],
        ..Rule::default()
    };
    let user = |name: &str, token: &str, rules: Vec<Rule>| User {
        name: name.into(),
        token: token.into(),
        rules,
    };
    Tokens {
        users: vec![
            user(
                "admin",
                ADMIN,
                vec![
                    Rule {
                        verbs: vec!["*".into()],
                        api_groups: vec!["*".into()],
                        resources: vec!["*".into()],
                        ..Rule::default()
                    },
                    setpoint_paths.clone(),
                ],
            ),
            user(
                "viewer",
                VIEWER,
                vec![
                    Rule {
                        verbs: vec!["get".into(), "list".into(), "watch".into()],
                        api_groups: vec!["*".into()],
                        resources: vec!["*".into()],
                        ..Rule::default()
                    },
                    setpoint_paths.clone(),
                ],
            ),
            user(
                "rs-only",
                RS_ONLY,
                vec![
                    Rule {
                        verbs: vec!["get".into()],
                        api_groups: vec!["demo.setpoint.dev".into()],
                        resources: vec!["replicasets".into()],
                        ..Rule::default()
                    },
                    setpoint_paths,
                ],
            ),
        ],
    }
}

async fn start(plugins: &[&str], console: setpoint_server::console::Source) -> TestHost {
    TestHost::start_with(
        plugins,
        setpoint_server::Config {
            tokens: Some(Arc::new(tokens())),
            console,
            ..setpoint_server::Config::default()
        },
    )
    .await
}

async fn get(host: &TestHost, path: &str, token: Option<&str>) -> reqwest::Response {
    let mut request = reqwest::Client::new().get(format!("{}{path}", host.url));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    request.send().await.unwrap()
}

async fn get_json(host: &TestHost, path: &str, token: &str) -> Value {
    let response = get(host, path, Some(token)).await;
    assert_eq!(response.status(), 200, "GET {path}");
    response.json().await.unwrap()
}

fn tree_path(kind: &str, name: &str) -> String {
    format!(
        "/setpoint/v1/console/tree?apiVersion=demo.setpoint.dev/v1&kind={kind}&namespace=default&name={name}"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_is_served_to_everyone_and_its_data_only_with_a_token() {
    let host = start(&[], Default::default()).await;
    let page = get(&host, "/", None).await;
    assert_eq!(page.status(), 200);
    let headers = page.headers().clone();
    assert_eq!(headers["content-type"], "text/html; charset=utf-8");
    let policy = headers["content-security-policy"].to_str().unwrap();
    assert!(
        policy.contains("default-src 'self'") && !policy.contains("unsafe-inline"),
        "{policy}"
    );
    assert!(page.text().await.unwrap().contains("/console/app.js"));
    for (file, media) in [
        ("app.js", "text/javascript"),
        ("app.css", "text/css"),
        ("favicon.svg", "image/svg+xml"),
    ] {
        let response = get(&host, &format!("/console/{file}"), None).await;
        assert_eq!(response.status(), 200, "{file}");
        assert!(
            response.headers()["content-type"]
                .to_str()
                .unwrap()
                .starts_with(media)
        );
    }
    for missing in ["/console/nope.js", "/console/..%2FCargo.toml", "/console/"] {
        assert_eq!(get(&host, missing, None).await.status(), 404, "{missing}");
    }

    for data in [
        "/setpoint/v1/console/overview",
        "/setpoint/v1/console/plugins",
        "/setpoint/v1/console/whoami",
        &tree_path("ReplicaSet", "web"),
    ] {
        assert_eq!(get(&host, data, None).await.status(), 401, "{data}");
        assert_eq!(
            get(&host, data, Some("not-a-token-at-all-000"))
                .await
                .status(),
            401,
            "{data}"
        );
    }
    let admin = get_json(&host, "/setpoint/v1/console/whoami", ADMIN).await;
    assert_eq!(
        (&admin["user"], &admin["mayWrite"], &admin["mayPlan"]),
        (&json!("admin"), &json!(true), &json!(true))
    );
    let viewer = get_json(&host, "/setpoint/v1/console/whoami", VIEWER).await;
    assert_eq!(
        (&viewer["user"], &viewer["mayWrite"], &viewer["mayPlan"]),
        (&json!("viewer"), &json!(false), &json!(true))
    );
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_console_there_is_no_page_but_its_data_stays_api() {
    let host = start(&[], setpoint_server::console::Source::Off).await;
    assert_eq!(get(&host, "/", None).await.status(), 404);
    assert_eq!(get(&host, "/console/app.js", None).await.status(), 404);
    get_json(&host, "/setpoint/v1/console/overview", ADMIN).await;
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_can_be_served_from_a_directory_while_it_is_worked_on() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("index.html"), "<p>edited</p>").unwrap();
    let host = start(
        &[],
        setpoint_server::console::Source::Dir(dir.path().into()),
    )
    .await;
    assert_eq!(
        get(&host, "/", None).await.text().await.unwrap(),
        "<p>edited</p>"
    );
    // A file of the console that the directory lacks is an error, named.
    let response = get(&host, "/console/app.js", None).await;
    assert_eq!(response.status(), 500);
    assert!(response.text().await.unwrap().contains("app.js"));
    host.stop().await;
}

/// The Ready states the tree reports for the node's children, shown and
/// folded.
fn states(node: &Value) -> (usize, usize, usize) {
    let children = node["children"].as_array().unwrap();
    let ready = children.iter().filter(|c| c["ready"] == "True").count();
    let folded = &node["folded"];
    (
        children.len(),
        ready + folded["ready"].as_u64().unwrap_or(0) as usize,
        folded["count"].as_u64().unwrap_or(0) as usize,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tree_goes_up_and_down_folds_large_families_and_hides_what_the_caller_may_not_read() {
    const PODS: usize = 30;
    let host = start(&["replicaset", "podsim"], Default::default()).await;
    host.host
        .api()
        .create(&host.kind("ReplicaSet"), replicaset("web", PODS as i64, 10))
        .await
        .unwrap();
    replicaset_ready(&host, "web", PODS as i64).await;

    let tree = get_json(&host, &tree_path("ReplicaSet", "web"), ADMIN).await;
    let root = &tree["root"];
    assert_eq!(
        (&root["kind"], &root["name"]),
        (&json!("ReplicaSet"), &json!("web"))
    );
    assert_eq!(root["summary"], format!("{PODS}/{PODS} ready"));
    assert_eq!(tree["ancestors"], json!([]));
    assert_eq!(tree["truncated"], false);
    let (shown, ready, folded) = states(root);
    assert_eq!((shown, folded), (20, PODS - 20), "{root:#}");
    assert_eq!(ready, PODS, "every Pod is Ready, shown or folded");
    let pod = &root["children"][0];
    assert_eq!(
        (&pod["kind"], &pod["phase"], &pod["hidden"]),
        (&json!("Pod"), &json!("Running"), &json!(false))
    );

    // Up from a Pod: its ReplicaSet.
    let name = pod["name"].as_str().unwrap();
    let up = get_json(&host, &tree_path("Pod", name), ADMIN).await;
    let ancestors = up["ancestors"].as_array().unwrap();
    assert_eq!(ancestors.len(), 1, "{up:#}");
    assert_eq!(ancestors[0]["name"], "web");
    assert_eq!(up["root"]["children"], json!([]));

    // A caller who may read ReplicaSets only sees the Pods' names, not their state.
    let cut = get_json(&host, &tree_path("ReplicaSet", "web"), RS_ONLY).await;
    assert_eq!(cut["root"]["hidden"], false);
    let pod = &cut["root"]["children"][0];
    assert_eq!(pod["hidden"], true);
    assert!(pod["ready"].is_null() && pod["phase"].is_null(), "{pod:#}");
    // … and may not start from a Pod at all.
    let refused = get(&host, &tree_path("Pod", name), Some(RS_ONLY)).await;
    assert_eq!(refused.status(), 200, "the tree endpoint is non-resource");
    let refused: Value = refused.json().await.unwrap();
    assert_eq!(refused["root"]["hidden"], true);

    // Unknown kinds and objects are named.
    let missing = get(&host, &tree_path("ReplicaSet", "nope"), Some(ADMIN)).await;
    assert_eq!(missing.status(), 404);
    let unknown = get(
        &host,
        "/setpoint/v1/console/tree?apiVersion=x.dev/v1&kind=Nope&name=a",
        Some(ADMIN),
    )
    .await;
    assert_eq!(unknown.status(), 404);
    let bad = get(&host, "/setpoint/v1/console/tree?kind=Pod", Some(ADMIN)).await;
    assert_eq!(bad.status(), 400);
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_overview_counts_kinds_and_calls_out_hot_loops() {
    let host = start(&["replicaset", "podsim", "zoo"], Default::default()).await;
    let api = host.host.api();
    api.create(&host.kind("ReplicaSet"), replicaset("web", 3, 10))
        .await
        .unwrap();
    // Pods that take an hour to start: not Ready meanwhile.
    api.create(&host.kind("ReplicaSet"), replicaset("slow", 2, 3_600_000))
        .await
        .unwrap();
    let zoo = api.kinds().require("test.setpoint.dev/v1", "Zoo").unwrap();
    api.create(
        &zoo,
        json!({"apiVersion": "test.setpoint.dev/v1", "kind": "Zoo",
            "metadata": {"name": "flipper", "namespace": "default"}, "spec": {"fault": "flip"}}),
    )
    .await
    .unwrap();
    replicaset_ready(&host, "web", 3).await;

    let overview = eventually("the hot loop is called out", WAIT, || async {
        let overview = get_json(&host, "/setpoint/v1/console/overview", VIEWER).await;
        let hot = &overview["attention"]["hotLoops"];
        if hot
            .as_array()
            .is_some_and(|h| h.iter().any(|o| o["name"] == "flipper"))
        {
            Ok(overview)
        } else {
            Err(format!("{hot}"))
        }
    })
    .await;
    let kind = |name: &str| {
        overview["kinds"]
            .as_array()
            .unwrap()
            .iter()
            .find(|k| k["kind"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("no kind {name} in {overview:#}"))
    };
    let pods = kind("Pod");
    assert_eq!(pods["count"], 5, "{pods}");
    assert_eq!(pods["notReady"], 2, "the two slow Pods: {pods}");
    assert_eq!(pods["plural"], "pods");
    // Events are not held by an informer: no count, still listed.
    assert!(kind("Event")["count"].is_null());
    let hot = overview["attention"]["hotLoops"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["name"] == "flipper")
        .unwrap()
        .clone();
    assert_eq!(
        (&hot["kind"], &hot["reason"]),
        (&json!("Zoo"), &json!("HotLoop"))
    );
    let zoo_plugin = overview["plugins"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "zoo")
        .unwrap()
        .clone();
    assert!(
        zoo_plugin["hotLoops"].as_u64().unwrap() >= 1,
        "{zoo_plugin}"
    );
    assert!(
        zoo_plugin["p99Seconds"].as_f64().unwrap() > 0.0,
        "{zoo_plugin}"
    );
    assert_eq!(zoo_plugin["state"], "Running");
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_plugins_view_shows_declarations_grants_pending_rights_and_refusals() {
    let host = start(&["dns"], Default::default()).await;
    let plugin = |view: &Value| {
        view["plugins"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == "dns")
            .cloned()
            .unwrap()
    };
    let before = plugin(&get_json(&host, "/setpoint/v1/console/plugins", VIEWER).await);
    assert_eq!(
        before["declares"]["reconciles"],
        "dns.setpoint.dev/v1 DnsRecord"
    );
    assert_eq!(before["grant"]["exists"], false);
    let limits = &before["limits"];
    assert_eq!(limits["deadlineSeconds"], 1.0, "{limits}");
    assert_eq!(limits["memoryBytes"], 64 << 20, "{limits}");
    assert!(limits["cores"].as_f64().unwrap() > 0.0, "{limits}");
    assert!(
        !before["grant"]["pending"].as_array().unwrap().is_empty(),
        "everything declared is pending without a grant: {before:#}"
    );

    // A grant for one PowerDNS; a record pointing at another is refused.
    let api = host.host.api();
    let grants = api
        .kinds()
        .require("setpoint.dev/v1", "PluginGrant")
        .unwrap();
    api.create(
        &grants,
        json!({"apiVersion": "setpoint.dev/v1", "kind": "PluginGrant", "metadata": {"name": "dns"},
               "spec": {"destinations": ["http://127.0.0.1:9"], "secrets": ["default/pdns-api/api-key"]}}),
    )
    .await
    .unwrap();
    let records = api
        .kinds()
        .require("dns.setpoint.dev/v1", "DnsRecord")
        .unwrap();
    api.create(
        &records,
        crate::support::pdns::dns_record("http://127.0.0.1:8", "www", &["192.0.2.1"], 60),
    )
    .await
    .unwrap();
    let after = eventually("the refusal is listed", WAIT, || async {
        let dns = plugin(&get_json(&host, "/setpoint/v1/console/plugins", VIEWER).await);
        if dns["recentRefusals"]
            .as_array()
            .is_some_and(|r| !r.is_empty())
        {
            Ok(dns)
        } else {
            Err(format!("{dns:#}"))
        }
    })
    .await;
    assert_eq!(after["grant"]["exists"], true);
    assert_eq!(
        after["grant"]["spec"]["destinations"],
        json!(["http://127.0.0.1:9"])
    );
    let refusal = &after["recentRefusals"][0];
    assert_eq!(refusal["object"], "DnsRecord/default/www", "{refusal}");
    assert_eq!(refusal["destination"], "http://127.0.0.1:8", "{refusal}");
    assert!(
        refusal["reason"].as_str().unwrap().contains("NotGranted"),
        "{refusal}"
    );
    let refused = after["effects"]["refused"].as_array().unwrap();
    assert!(
        refused.iter().any(|c| c["count"].as_u64() >= Some(1)),
        "{after:#}"
    );
    let overview = get_json(&host, "/setpoint/v1/console/overview", VIEWER).await;
    assert!(
        overview["attention"]["refusedEffects"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["plugin"] == "dns"),
        "{overview:#}"
    );
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn manifests_are_read_with_errors_naming_the_document_and_what_the_caller_may_apply() {
    let host = start(&["replicaset", "podsim"], Default::default()).await;
    let post = |token: &'static str, body: &'static str| {
        let request = reqwest::Client::new()
            .post(format!("{}/setpoint/v1/manifests", host.url))
            .bearer_auth(token)
            .header("content-type", "application/yaml")
            .body(body);
        async move {
            let response = request.send().await.unwrap();
            (
                response.status().as_u16(),
                response.json::<Value>().await.unwrap(),
            )
        }
    };
    let manifest = "apiVersion: demo.setpoint.dev/v1\nkind: ReplicaSet\nmetadata: {name: web}\nspec: {replicas: 1}\n---\napiVersion: v1\nkind: Secret\nmetadata: {name: s}\n";
    let (status, read) = post(ADMIN, manifest).await;
    assert_eq!(status, 200, "{read}");
    assert_eq!(read["objects"].as_array().unwrap().len(), 2);
    assert_eq!(read["objects"][1]["origin"], "document 2");
    assert_eq!(read["mayApply"], true);
    let (_, read) = post(VIEWER, manifest).await;
    assert_eq!(read["mayApply"], false, "a viewer may not write");

    let (status, error) = post(
        ADMIN,
        "apiVersion: nope.dev/v1\nkind: Thing\nmetadata: {name: a}\n",
    )
    .await;
    assert_eq!(status, 400);
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .starts_with("document 1: unknown kind \"Thing\""),
        "{error}"
    );
    let (status, error) = post(
        ADMIN,
        "apiVersion: v1\nkind: Secret\nmetadata: {name: a}\n---\n: : :\n",
    )
    .await;
    assert_eq!(status, 400);
    assert!(
        error["message"].as_str().unwrap().contains("document 2"),
        "{error}"
    );
    // Reading a manifest writes nothing.
    assert!(host.get("ReplicaSet", "web").await.is_none());
    host.stop().await;
}
