//! The HTTP API's gate and plumbing, over plain HTTP: 401 without a token,
//! 403 naming verb and resource, 429 with `Retry-After`, 413 as a `Status`,
//! binding beyond loopback only with tokens, Table and OpenAPI responses,
//! and `setpoint serve --tokens` writing a kubeconfig that works.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use setpoint::server::auth::{Rule, Tokens, User};
use setpoint::server::{Config, RateLimit};

use crate::support::{TestHost, eventually, plugins_dir, setpoint_bin};

const ADMIN: &str = "admin-token-0123456789";
const VIEWER: &str = "viewer-token-0123456789";

fn tokens() -> Arc<Tokens> {
    Arc::new(Tokens {
        users: vec![
            User {
                name: "admin".into(),
                token: ADMIN.into(),
                rules: vec![Rule {
                    verbs: vec!["*".into()],
                    api_groups: vec!["*".into()],
                    resources: vec!["*".into()],
                    ..Rule::default()
                }],
            },
            User {
                name: "viewer".into(),
                token: VIEWER.into(),
                rules: vec![Rule {
                    verbs: vec!["get".into(), "list".into(), "watch".into()],
                    api_groups: vec!["demo.setpoint.dev".into()],
                    resources: vec!["pods".into()],
                    namespaces: vec!["default".into()],
                    ..Rule::default()
                }],
            },
        ],
    })
}

fn pods(host: &TestHost, namespace: &str) -> String {
    format!(
        "{}/apis/demo.setpoint.dev/v1/namespaces/{namespace}/pods",
        host.url
    )
}

fn pod(name: &str) -> Value {
    json!({"apiVersion": "demo.setpoint.dev/v1", "kind": "Pod",
           "metadata": {"name": name}, "spec": {"startupDelayMs": 100000}})
}

#[tokio::test(flavor = "multi_thread")]
async fn without_a_valid_token_requests_are_refused_with_401_but_health_checks_answer() {
    let host = TestHost::start_with(
        &["podsim"],
        Config {
            tokens: Some(tokens()),
            ..Config::default()
        },
    )
    .await;
    let http = reqwest::Client::new();
    for request in [
        http.get(pods(&host, "default")),
        http.get(pods(&host, "default"))
            .bearer_auth("not-a-known-token-at-all"),
        http.get(format!("{}/apis", host.url)),
    ] {
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), 401);
        let status: Value = response.json().await.unwrap();
        assert_eq!(
            (status["kind"].as_str(), status["reason"].as_str()),
            (Some("Status"), Some("Unauthorized"))
        );
    }
    let health = http
        .get(format!("{}/readyz", host.url))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), 200);
    let ok = http
        .get(pods(&host, "default"))
        .bearer_auth(ADMIN)
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), 200);
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_token_may_do_only_what_its_rules_allow_and_403_names_verb_and_resource() {
    let host = TestHost::start_with(
        &["podsim"],
        Config {
            tokens: Some(tokens()),
            ..Config::default()
        },
    )
    .await;
    let http = reqwest::Client::new();
    let listed = http
        .get(pods(&host, "default"))
        .bearer_auth(VIEWER)
        .send()
        .await
        .unwrap();
    assert_eq!(listed.status(), 200);
    let discovery = http
        .get(format!("{}/apis", host.url))
        .bearer_auth(VIEWER)
        .send()
        .await
        .unwrap();
    assert_eq!(discovery.status(), 200);

    let refused = http
        .get(pods(&host, "kube-system"))
        .bearer_auth(VIEWER)
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 403);
    let status: Value = refused.json().await.unwrap();
    assert_eq!(status["reason"], "Forbidden");
    assert_eq!(
        status["message"],
        r#"pods.demo.setpoint.dev is forbidden: User "viewer" cannot list resource "pods" in API group "demo.setpoint.dev" in the namespace "kube-system""#
    );

    let created = http
        .post(pods(&host, "default"))
        .bearer_auth(VIEWER)
        .json(&pod("p1"))
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 403);
    let status: Value = created.json().await.unwrap();
    assert!(
        status["message"]
            .as_str()
            .unwrap()
            .contains(r#"cannot create resource "pods""#),
        "{status}"
    );
    assert!(
        host.get("Pod", "p1").await.is_none(),
        "a refused create wrote nothing"
    );

    let created = http
        .post(pods(&host, "default"))
        .bearer_auth(ADMIN)
        .json(&pod("p1"))
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 201);
    let status_write = http
        .patch(format!("{}/p1/status", pods(&host, "default")))
        .bearer_auth(VIEWER)
        .header("content-type", "application/merge-patch+json")
        .body(r#"{"status":{"phase":"Running"}}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(status_write.status(), 403);
    let metrics = http
        .get(format!("{}/metrics", host.url))
        .bearer_auth(VIEWER)
        .send()
        .await
        .unwrap();
    assert_eq!(metrics.status(), 403);
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_user_over_its_rate_limit_gets_429_with_retry_after_and_others_are_unaffected() {
    let host = TestHost::start_with(
        &["podsim"],
        Config {
            tokens: Some(tokens()),
            rate_limit: Some(RateLimit { qps: 0.5, burst: 3 }),
            ..Config::default()
        },
    )
    .await;
    let http = reqwest::Client::new();
    for _ in 0..3 {
        let ok = http
            .get(pods(&host, "default"))
            .bearer_auth(VIEWER)
            .send()
            .await
            .unwrap();
        assert_eq!(ok.status(), 200);
    }
    let limited = http
        .get(pods(&host, "default"))
        .bearer_auth(VIEWER)
        .send()
        .await
        .unwrap();
    assert_eq!(limited.status(), 429);
    let retry_after: u64 = limited.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=2).contains(&retry_after), "Retry-After: {retry_after}");
    let status: Value = limited.json().await.unwrap();
    assert_eq!(
        (status["reason"].as_str(), status["code"].as_u64()),
        (Some("TooManyRequests"), Some(429))
    );
    let other = http
        .get(pods(&host, "default"))
        .bearer_auth(ADMIN)
        .send()
        .await
        .unwrap();
    assert_eq!(other.status(), 200, "another user's bucket is its own");
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn requests_beyond_the_in_flight_bound_get_429_while_watches_are_not_counted() {
    let host = TestHost::start_with(
        &["podsim"],
        Config {
            max_in_flight: 1,
            ..Config::default()
        },
    )
    .await;
    let http = reqwest::Client::new();
    // A watch holds its connection open but takes no in-flight slot.
    let watch = http
        .get(format!("{}?watch=true", pods(&host, "default")))
        .send()
        .await
        .unwrap();
    assert_eq!(watch.status(), 200);
    let ok = http.get(pods(&host, "default")).send().await.unwrap();
    assert_eq!(ok.status(), 200);
    // A create whose body is still arriving holds the only slot.
    let (body_tx, body_rx) = tokio::sync::mpsc::channel::<Result<Vec<u8>, std::io::Error>>(4);
    body_tx.send(Ok(b"{".to_vec())).await.unwrap();
    let slow = tokio::spawn(
        http.post(pods(&host, "default"))
            .header("content-type", "application/json")
            .body(reqwest::Body::wrap_stream(
                tokio_stream::wrappers::ReceiverStream::new(body_rx),
            ))
            .send(),
    );
    let refused = eventually(
        "a request is turned away",
        Duration::from_secs(10),
        || async {
            let response = http.get(pods(&host, "default")).send().await.unwrap();
            match response.status().as_u16() {
                429 => Ok(response),
                other => Err(format!("status {other}")),
            }
        },
    )
    .await;
    assert_eq!(refused.headers()["retry-after"], "1");
    let rest = serde_json::to_vec(&pod("slow")).unwrap();
    body_tx.send(Ok(rest[1..].to_vec())).await.unwrap();
    drop(body_tx);
    assert_eq!(slow.await.unwrap().unwrap().status(), 201);
    let ok = http.get(pods(&host, "default")).send().await.unwrap();
    assert_eq!(ok.status(), 200, "the slot is free again");
    drop(watch);
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_body_over_the_limit_is_refused_with_413_as_a_status() {
    let host = TestHost::start_with(
        &["podsim"],
        Config {
            max_body_bytes: 1024,
            ..Config::default()
        },
    )
    .await;
    let http = reqwest::Client::new();
    let mut big = pod("big");
    big["spec"]["padding"] = json!("x".repeat(4096));
    let refused = http
        .post(pods(&host, "default"))
        .json(&big)
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 413);
    let status: Value = refused.json().await.unwrap();
    assert_eq!(
        (status["kind"].as_str(), status["code"].as_u64()),
        (Some("Status"), Some(413))
    );
    // Without a declared length (chunked), the body limit still holds.
    let stream = futures_stream(serde_json::to_vec(&big).unwrap());
    let refused = http
        .post(pods(&host, "default"))
        .header("content-type", "application/json")
        .body(reqwest::Body::wrap_stream(stream))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 413);
    let status: Value = refused.json().await.unwrap();
    assert_eq!(status["reason"], "RequestEntityTooLarge");
    assert!(host.get("Pod", "big").await.is_none());
    host.stop().await;
}

fn futures_stream(
    bytes: Vec<u8>,
) -> impl tokio_stream::Stream<Item = Result<Vec<u8>, std::io::Error>> + Send + 'static {
    let chunks: Vec<Result<Vec<u8>, std::io::Error>> =
        bytes.chunks(512).map(|c| Ok(c.to_vec())).collect();
    tokio_stream::iter(chunks)
}

#[tokio::test]
async fn binding_beyond_loopback_needs_authentication() {
    let refused = setpoint::server::bind("0.0.0.0:0".parse().unwrap(), false).await;
    assert_eq!(
        refused.unwrap_err().kind(),
        std::io::ErrorKind::PermissionDenied
    );
    let listener = setpoint::server::bind("0.0.0.0:0".parse().unwrap(), true)
        .await
        .unwrap();
    assert!(listener.local_addr().unwrap().ip().is_unspecified());
}

#[tokio::test]
async fn an_unknown_path_is_a_404_status() {
    let host = TestHost::start(&[]).await;
    let response = reqwest::get(format!("{}/no/such/path", host.url))
        .await
        .unwrap();
    assert_eq!(response.status(), 404);
    let status: Value = response.json().await.unwrap();
    assert_eq!(status["reason"], "NotFound");
    host.stop().await;
}

#[test]
fn serve_with_a_new_tokens_file_listens_beyond_loopback_and_writes_a_working_kubeconfig() {
    let dir = tempfile::tempdir().unwrap();
    let plugins = plugins_dir(&[]);
    let tokens = dir.path().join("tokens.yaml");
    let mut child = Command::new(setpoint_bin())
        .args(["serve", "--in-memory", "--addr", "0.0.0.0:0", "--plugins"])
        .arg(plugins.path())
        .arg("--tokens")
        .arg(&tokens)
        .stderr(Stdio::piped())
        .spawn()
        .map(KillOnDrop)
        .unwrap();
    let mut lines = BufReader::new(child.0.stderr.take().unwrap()).lines();
    let mut seen = Vec::new();
    let url = loop {
        let line = lines
            .next()
            .expect("serve exited before listening")
            .unwrap();
        seen.push(line.clone());
        if let Some(rest) = line.split("listening on ").nth(1) {
            break rest
                .split_whitespace()
                .next()
                .unwrap()
                .replace("0.0.0.0", "127.0.0.1");
        }
    };
    let export = loop {
        let line = lines.next().expect("serve printed no kubeconfig").unwrap();
        seen.push(line.clone());
        if let Some(path) = line.trim().strip_prefix("export KUBECONFIG=") {
            break path.to_owned();
        }
    };
    std::thread::spawn(move || for _ in lines {});
    let generated = Tokens::load(&tokens).unwrap();
    let kubeconfig = std::fs::read_to_string(&export).unwrap();
    assert!(
        kubeconfig.contains(&generated.users[0].token),
        "{kubeconfig}"
    );

    // The CLI with the token is let in; without it, refused.
    let get = |token: Option<&str>| {
        let mut cmd = Command::new(setpoint_bin());
        cmd.args(["get", "customresourcedefinitions", "--server", &url]);
        if let Some(t) = token {
            cmd.args(["--token", t]);
        }
        cmd.output().unwrap()
    };
    let out = get(Some(&generated.users[0].token));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = get(None);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("Unauthorized"),
        "{seen:?}"
    );
}

/// The value of the sample `name{labels}` in a Prometheus text page.
fn sample(page: &str, series: &str) -> Option<f64> {
    page.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

#[tokio::test(flavor = "multi_thread")]
async fn metrics_report_workqueue_reconcile_request_and_watch_series() {
    let host = TestHost::start(&["podsim"]).await;
    let http = reqwest::Client::new();
    let created = http
        .post(pods(&host, "default"))
        .json(&pod("m1"))
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 201);
    let watch = http
        .get(format!("{}?watch=true", pods(&host, "default")))
        .send()
        .await
        .unwrap();
    let page = eventually("podsim reconciled m1", Duration::from_secs(20), || async {
        let page = reqwest::get(format!("{}/metrics", host.url))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        match sample(
            &page,
            r#"controller_runtime_reconcile_total{controller="podsim",result="success"}"#,
        ) {
            Some(n) if n >= 1.0 => Ok(page),
            _ => Err(page),
        }
    })
    .await;
    assert!(
        sample(&page, r#"workqueue_adds_total{name="podsim"}"#).unwrap() >= 1.0,
        "{page}"
    );
    assert!(
        sample(&page, r#"workqueue_depth{name="podsim"}"#).is_some(),
        "{page}"
    );
    assert!(
        sample(
            &page,
            r#"controller_runtime_reconcile_time_seconds_count{controller="podsim"}"#
        )
        .unwrap()
            >= 1.0,
        "{page}"
    );
    assert_eq!(
        sample(
            &page,
            r#"apiserver_request_total{verb="CREATE",resource="pods",code="201"}"#
        ),
        Some(1.0),
        "{page}"
    );
    assert_eq!(
        sample(&page, r#"apiserver_longrunning_requests{verb="WATCH"}"#),
        Some(1.0),
        "{page}"
    );
    drop(watch);
    eventually(
        "the closed watch is no longer counted",
        Duration::from_secs(10),
        || async {
            let page = reqwest::get(format!("{}/metrics", host.url))
                .await
                .unwrap()
                .text()
                .await
                .unwrap();
            match sample(&page, r#"apiserver_longrunning_requests{verb="WATCH"}"#) {
                Some(0.0) => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    host.stop().await;
}

/// A child process killed (and reaped) when the test ends, pass or fail.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// What kubectl ≥ 1.26 sends to `/api` and `/apis`.
const AGGREGATED_ACCEPT: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";

async fn discovery(url: &str, accept: Option<&str>) -> (String, String, Value) {
    let mut request = reqwest::Client::new().get(url);
    if let Some(accept) = accept {
        request = request.header("Accept", accept);
    }
    let response = request.send().await.unwrap();
    assert_eq!(response.status(), 200, "{url}");
    let content_type = response.headers()["content-type"]
        .to_str()
        .unwrap()
        .to_owned();
    let vary = response
        .headers()
        .get("vary")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    (content_type, vary, response.json().await.unwrap())
}

#[tokio::test(flavor = "multi_thread")]
async fn aggregated_discovery_describes_every_group_in_one_answer_when_asked_for() {
    let host = TestHost::start(&["podsim"]).await;
    let (content_type, vary, list) =
        discovery(&format!("{}/apis", host.url), Some(AGGREGATED_ACCEPT)).await;
    assert_eq!(
        content_type,
        "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
    );
    assert_eq!(vary, "Accept");
    assert_eq!(list["kind"], "APIGroupDiscoveryList");
    assert_eq!(list["apiVersion"], "apidiscovery.k8s.io/v2");
    let group = |name: &str| {
        list["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("no group {name} in {list}"))
            .clone()
    };
    let demo = group("demo.setpoint.dev");
    assert_eq!(demo["versions"][0]["version"], "v1");
    assert_eq!(demo["versions"][0]["freshness"], "Current");
    let pods = &demo["versions"][0]["resources"][0];
    assert_eq!(
        *pods,
        json!({
            "resource": "pods",
            "responseKind": {"group": "demo.setpoint.dev", "version": "v1", "kind": "Pod"},
            "scope": "Namespaced",
            "singularResource": "pod",
            "shortNames": ["po"],
            "verbs": ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"],
            "subresources": [{
                "subresource": "status",
                "responseKind": {"group": "demo.setpoint.dev", "version": "v1", "kind": "Pod"},
                "verbs": ["get", "patch", "update"],
            }],
        })
    );
    let crds = &group("apiextensions.k8s.io")["versions"][0]["resources"][0];
    assert_eq!(crds["resource"], "customresourcedefinitions");
    assert_eq!(crds["scope"], "Cluster");
    assert_eq!(crds["shortNames"], json!(["crd", "crds"]));

    // The core group has no name; its v1 carries Events.
    let (_, _, core) = discovery(&format!("{}/api", host.url), Some(AGGREGATED_ACCEPT)).await;
    assert_eq!(core["kind"], "APIGroupDiscoveryList");
    assert_eq!(core["items"].as_array().unwrap().len(), 1, "{core}");
    assert!(core["items"][0]["metadata"].get("name").is_none(), "{core}");
    let events = &core["items"][0]["versions"][0]["resources"][0];
    assert_eq!(
        (
            &events["resource"],
            &events["scope"],
            &events["responseKind"]["kind"]
        ),
        (&json!("events"), &json!("Namespaced"), &json!("Event"))
    );

    // v2beta1 when only that is accepted.
    let (content_type, _, beta) = discovery(
        &format!("{}/apis", host.url),
        Some("application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList"),
    )
    .await;
    assert_eq!(
        content_type,
        "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList"
    );
    assert_eq!(beta["apiVersion"], "apidiscovery.k8s.io/v2beta1");
    assert_eq!(beta["items"], list["items"]);

    // Any other Accept header gets the legacy lists.
    for accept in [
        None,
        Some("application/json"),
        Some("application/json, */*"),
        Some(
            "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList;q=0,application/json",
        ),
        Some(
            "application/json;g=apidiscovery.k8s.io;v=v9;as=APIGroupDiscoveryList,application/json",
        ),
    ] {
        let (content_type, _, legacy) = discovery(&format!("{}/apis", host.url), accept).await;
        assert_eq!(content_type, "application/json", "{accept:?}");
        assert_eq!(legacy["kind"], "APIGroupList", "{accept:?}");
        let (_, _, versions) = discovery(&format!("{}/api", host.url), accept).await;
        assert_eq!(versions["kind"], "APIVersions", "{accept:?}");
    }
    host.stop().await;
}

/// A `Widget` kind whose schema declares `spec.replicas` and `spec.color`.
async fn install_widgets(host: &TestHost) {
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com", "scope": "Namespaced",
            "names": {"kind": "Widget", "listKind": "WidgetList", "plural": "widgets", "singular": "widget"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "properties": {
                        "replicas": {"type": "integer"}, "color": {"type": "string"}}}}}}}]
        }
    });
    let created = reqwest::Client::new()
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

fn widgets(host: &TestHost) -> String {
    format!(
        "{}/apis/example.com/v1/namespaces/default/widgets",
        host.url
    )
}

/// Status, `Warning` headers and body of a response.
async fn answer(response: reqwest::Response) -> (u16, Vec<String>, Value) {
    let status = response.status().as_u16();
    let warnings = response
        .headers()
        .get_all("warning")
        .iter()
        .map(|v| v.to_str().unwrap().to_owned())
        .collect();
    (status, warnings, response.json().await.unwrap())
}

#[tokio::test(flavor = "multi_thread")]
async fn field_validation_strict_refuses_unknown_and_duplicate_fields_warn_reports_and_ignore_prunes()
 {
    let host = TestHost::start(&[]).await;
    install_widgets(&host).await;
    let http = reqwest::Client::new();
    let with_bogus = |name: &str| {
        json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": name},
               "spec": {"replicas": 1, "bogus": true, "deep": {"x": 1}}})
    };
    let strict_message = r#"Widget in version "v1" cannot be handled as a Widget: strict decoding error: unknown field "spec.bogus", unknown field "spec.deep""#;

    // Strict: 400 naming every unknown field, nothing written.
    let (status, _, body) = answer(
        http.post(format!("{}?fieldValidation=Strict", widgets(&host)))
            .json(&with_bogus("s1"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["reason"], "BadRequest");
    assert_eq!(body["message"], strict_message);
    let missing = http
        .get(format!("{}/s1", widgets(&host)))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 404);

    // A member given twice is refused too, even one the schema knows.
    let (status, _, body) = answer(
        http.post(format!("{}?fieldValidation=Strict", widgets(&host)))
            .header("content-type", "application/json")
            .body(r#"{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"s2"},"spec":{"replicas":1,"replicas":2}}"#)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .ends_with(r#"strict decoding error: duplicate field "spec.replicas""#),
        "{body}"
    );

    // Known fields only: Strict writes, without warnings.
    let known = json!({"apiVersion": "example.com/v1", "kind": "Widget",
                       "metadata": {"name": "w1", "labels": {"any": "label"}},
                       "spec": {"replicas": 1, "color": "red"}});
    let (status, warnings, _) = answer(
        http.post(format!("{}?fieldValidation=Strict", widgets(&host)))
            .json(&known)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!((status, warnings.len()), (201, 0));

    // Warn (also the default): written, pruned, one Warning per field.
    for (query, name) in [("?fieldValidation=Warn", "w2"), ("", "w3")] {
        let (status, warnings, body) = answer(
            http.post(format!("{}{query}", widgets(&host)))
                .json(&with_bogus(name))
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(status, 201, "{body}");
        assert_eq!(
            warnings,
            [
                r#"299 - "unknown field \"spec.bogus\"""#,
                r#"299 - "unknown field \"spec.deep\"""#
            ]
        );
        assert_eq!(body["spec"], json!({"replicas": 1}));
    }

    // Ignore: written and pruned without a word.
    let (status, warnings, body) = answer(
        http.post(format!("{}?fieldValidation=Ignore", widgets(&host)))
            .json(&with_bogus("w4"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!((status, warnings.len()), (201, 0), "{body}");
    assert_eq!(body["spec"], json!({"replicas": 1}));

    // Update, merge patch, JSON patch and apply are reviewed the same way.
    let mut replaced: Value = http
        .get(format!("{}/w1", widgets(&host)))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    replaced["spec"]["bogus"] = json!(1);
    let strict = format!("{}/w1?fieldValidation=Strict", widgets(&host));
    let refused = [
        http.put(&strict).json(&replaced),
        http.patch(&strict)
            .header("content-type", "application/merge-patch+json")
            .body(r#"{"spec":{"bogus":1}}"#),
        http.patch(&strict)
            .header("content-type", "application/json-patch+json")
            .body(r#"[{"op":"add","path":"/spec/bogus","value":1}]"#),
        http.patch(format!("{strict}&fieldManager=test"))
            .header("content-type", "application/apply-patch+yaml")
            .body("apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w1\nspec:\n  bogus: 1\n"),
    ];
    for request in refused {
        let (status, _, body) = answer(request.send().await.unwrap()).await;
        assert_eq!(status, 400, "{body}");
        assert!(
            body["message"]
                .as_str()
                .unwrap()
                .ends_with(r#"strict decoding error: unknown field "spec.bogus""#),
            "{body}"
        );
    }
    let (status, _, body) = answer(
        http.patch(format!("{strict}&fieldManager=test"))
            .header("content-type", "application/apply-patch+yaml")
            .body("apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w1\nspec:\n  color: a\n  color: b\n")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .ends_with(r#"duplicate field "spec.color""#),
        "{body}"
    );
    let unchanged: Value = http
        .get(format!("{}/w1", widgets(&host)))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(unchanged["spec"], json!({"replicas": 1, "color": "red"}));

    // Deleting an unknown field with a merge patch is no unknown field.
    let (status, warnings, body) = answer(
        http.patch(&strict)
            .header("content-type", "application/merge-patch+json")
            .body(r#"{"spec":{"bogus":null,"replicas":2}}"#)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!((status, warnings.len()), (200, 0), "{body}");
    assert_eq!(body["spec"]["replicas"], 2);
    // A JSON patch under Warn: written, pruned, warned about.
    let (status, warnings, body) = answer(
        http.patch(format!("{}/w1", widgets(&host)))
            .header("content-type", "application/json-patch+json")
            .body(r#"[{"op":"add","path":"/spec/bogus","value":1},{"op":"replace","path":"/spec/replicas","value":3}]"#)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(warnings, [r#"299 - "unknown field \"spec.bogus\"""#]);
    assert_eq!(body["spec"], json!({"replicas": 3, "color": "red"}));

    // Anything but the three values is refused.
    let (status, _, body) = answer(
        http.post(format!("{}?fieldValidation=Loose", widgets(&host)))
            .json(&known)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    host.stop().await;
}

async fn scrape(host: &TestHost) -> String {
    reqwest::get(format!("{}/metrics", host.url))
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn metrics_report_store_latencies_watchers_and_per_plugin_reconciles_and_faults() {
    let dir = plugins_dir(&["podsim", "zoo"]);
    std::fs::write(dir.path().join("zoo.toml"), "deadline_ms = 200\n").unwrap();
    let host = TestHost::start_in(dir, setpoint::runtime::RuntimeConfig::default()).await;
    let http = reqwest::Client::new();
    let zoos = format!(
        "{}/apis/test.setpoint.dev/v1/namespaces/default/zoos",
        host.url
    );
    for (name, fault) in [("spinner", "spin"), ("panicker", "panic"), ("calm", "none")] {
        let created = http
            .post(&zoos)
            .json(&json!({"apiVersion": "test.setpoint.dev/v1", "kind": "Zoo",
                          "metadata": {"name": name}, "spec": {"fault": fault}}))
            .send()
            .await
            .unwrap();
        assert_eq!(created.status(), 201);
    }
    let created = http
        .post(pods(&host, "default"))
        .json(&pod("p1"))
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 201);
    let watch = http
        .get(format!("{}?watch=true", pods(&host, "default")))
        .send()
        .await
        .unwrap();
    assert_eq!(watch.status(), 200);

    let faults = |page: &str, fault: &str| {
        sample(
            page,
            &format!(r#"setpoint_plugin_faults_total{{plugin="zoo",fault="{fault}"}}"#),
        )
        .unwrap_or(0.0)
    };
    let page = eventually(
        "zoo's timeout and trap are counted",
        Duration::from_secs(30),
        || async {
            let page = scrape(&host).await;
            if faults(&page, "timeout") >= 1.0 && faults(&page, "trap") >= 1.0 {
                Ok(page)
            } else {
                Err(page)
            }
        },
    )
    .await;
    assert_eq!(faults(&page, "memory"), 0.0, "{page}");
    assert_eq!(faults(&page, "fuel"), 0.0, "{page}");

    // Per plugin: calls (as `setpoint plugins` counts them), failures, and
    // the duration histogram of the Wasm calls.
    let series = |name: &str| sample(&page, name).unwrap_or_else(|| panic!("no {name} in\n{page}"));
    assert!(series(r#"setpoint_plugin_reconciles_total{plugin="zoo"}"#) >= 3.0);
    assert!(series(r#"setpoint_plugin_reconcile_errors_total{plugin="zoo"}"#) >= 2.0);
    let zoo_calls = series(r#"setpoint_plugin_reconcile_duration_seconds_count{plugin="zoo"}"#);
    assert!(zoo_calls >= 3.0, "{page}");
    assert_eq!(
        series(r#"setpoint_plugin_reconcile_duration_seconds_bucket{plugin="zoo",le="+Inf"}"#),
        zoo_calls
    );
    assert!(series(r#"setpoint_plugin_reconcile_duration_seconds_sum{plugin="zoo"}"#) > 0.0);
    let podsim = host.plugin("podsim").await.unwrap();
    assert!(podsim.reconciles >= 1);
    assert!(series(r#"setpoint_plugin_reconciles_total{plugin="podsim"}"#) >= 1.0);

    // The store: every operation timed; the writes above went through put.
    assert!(series(r#"setpoint_store_request_duration_seconds_count{operation="put"}"#) >= 5.0);
    assert!(series(r#"setpoint_store_request_duration_seconds_count{operation="get"}"#) >= 1.0);
    assert!(series(r#"setpoint_store_request_duration_seconds_count{operation="range"}"#) >= 1.0);
    assert!(series(r#"setpoint_store_request_duration_seconds_count{operation="watch"}"#) >= 1.0);
    assert_eq!(
        series(r#"setpoint_store_request_duration_seconds_bucket{operation="put",le="+Inf"}"#),
        series(r#"setpoint_store_request_duration_seconds_count{operation="put"}"#)
    );
    assert_eq!(
        series(r#"setpoint_store_request_errors_total{operation="put"}"#),
        0.0
    );

    // The open watch, by group and resource.
    assert_eq!(
        series(r#"setpoint_watchers{group="demo.setpoint.dev",resource="pods"}"#),
        1.0
    );
    drop(watch);
    eventually(
        "the closed watch is no longer counted",
        Duration::from_secs(10),
        || async {
            let page = scrape(&host).await;
            match sample(
                &page,
                r#"setpoint_watchers{group="demo.setpoint.dev",resource="pods"}"#,
            ) {
                Some(0.0) => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    host.stop().await;
}
