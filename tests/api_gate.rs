//! The HTTP API's gate, over plain HTTP: 401 without a token, 403 naming
//! verb and resource, 429 with `Retry-After`, 413 as a `Status`, 404 as a
//! `Status`, binding beyond loopback only with tokens, and `setpoint serve
//! --tokens` writing a kubeconfig that works.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use setpoint_server::auth::{Rule, Tokens, User};
use setpoint_server::{Config, RateLimit};

use crate::support::{TestHost, eventually, plugins_dir, pod, pods, setpoint_bin};

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
async fn requests_beyond_the_in_flight_bound_get_429_while_watches_and_unfinished_bodies_are_not_counted()
 {
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
    // Nor does a create whose body is still arriving: the body is read
    // before the request is admitted (a client stalling in its body used
    // to hold a slot for as long as it liked).
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
    tokio::time::sleep(Duration::from_millis(300)).await;
    for _ in 0..20 {
        let response = http.get(pods(&host, "default")).send().await.unwrap();
        assert_eq!(response.status(), 200, "the stalled body holds no slot");
    }
    // Requests handled at once beyond the bound are turned away.
    let refused = eventually(
        "a request is turned away",
        Duration::from_secs(10),
        || async {
            let answers =
                futures::future::join_all((0..20).map(|_| http.get(pods(&host, "default")).send()))
                    .await;
            match answers
                .into_iter()
                .map(Result::unwrap)
                .find(|r| r.status() == 429)
            {
                Some(response) => Ok(response),
                None => Err("20 at once all answered".to_owned()),
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
    let refused = setpoint_server::bind("0.0.0.0:0".parse().unwrap(), false).await;
    assert_eq!(
        refused.unwrap_err().kind(),
        std::io::ErrorKind::PermissionDenied
    );
    let listener = setpoint_server::bind("0.0.0.0:0".parse().unwrap(), true)
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

/// A child process killed (and reaped) when the test ends, pass or fail.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
