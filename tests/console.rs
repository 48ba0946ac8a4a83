//! The web console in a real headless Chromium: each test starts a host
//! in-process with the objects its scenario needs, then runs one script of
//! `tests/console/` (Node, playwright-core driving Debian's `chromium`,
//! axe-core for accessibility) against it and asserts that it passed.
//! `scripts/test` installs `chromium` and the scripts' npm packages
//! (`npm ci --prefix tests/console`).

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use setpoint_server::Config;
use setpoint_server::auth::{Rule, Tokens, User};

use crate::support::pdns::PowerDns;
use crate::support::{TestHost, eventually, replicaset_ready, workspace};

const ADMIN: &str = "console-admin-token-0123456789";
const VIEWER: &str = "console-viewer-token-0123456789";

/// How long a scenario's script may run.
const SCRIPT_TIMEOUT: Duration = Duration::from_secs(180);

/// The admin may do everything; the viewer may read every resource and call
/// `/setpoint/*` (so it may plan) but write nothing.
fn tokens() -> Arc<Tokens> {
    let everything = |verbs: &[&str]| Rule {
        verbs: verbs.iter().map(|v| (*v).to_owned()).collect(),
        api_groups: vec!["*".into()],
        resources: vec!["*".into()],
        ..Rule::default()
    };
    Arc::new(Tokens {
        users: vec![
            User {
                name: "admin".into(),
                token: ADMIN.into(),
                rules: vec![
                    everything(&["*"]),
                    Rule {
                        verbs: vec!["*".into()],
                        non_resource_urls: vec!["*".into()],
                        ..Rule::default()
                    },
                ],
            },
            User {
                name: "viewer".into(),
                token: VIEWER.into(),
                rules: vec![
                    everything(&["get", "list", "watch"]),
                    Rule {
                        verbs: vec!["get".into(), "post".into()],
                        non_resource_urls: vec!["/setpoint/*".into()],
                        ..Rule::default()
                    },
                ],
            },
        ],
    })
}

fn config() -> Config {
    Config {
        tokens: Some(tokens()),
        ..Config::default()
    }
}

async fn start(plugins: &[&str]) -> TestHost {
    TestHost::start_with(plugins, config()).await
}

/// Run `node tests/console/<scenario>.mjs` against `host` with the tokens
/// and `env`; panics with the script's output unless it exits 0.
async fn run_scenario(host: &TestHost, scenario: &str, env: &[(&str, String)]) {
    let dir = workspace().join("tests").join("console");
    assert!(
        dir.join("node_modules").join("playwright-core").exists(),
        "tests/console/node_modules is missing: run `npm ci --prefix tests/console` (scripts/test does)"
    );
    let mut command =
        tokio::process::Command::new(std::env::var("NODE").unwrap_or_else(|_| "node".into()));
    command
        .current_dir(workspace())
        .arg(dir.join(format!("{scenario}.mjs")))
        .env("SETPOINT_URL", &host.url)
        .env("SETPOINT_TOKEN", ADMIN)
        .env("SETPOINT_VIEWER_TOKEN", VIEWER)
        .env_remove("SETPOINT_SCREENSHOTS")
        .kill_on_drop(true);
    for (key, value) in env {
        command.env(key, value);
    }
    let output = tokio::time::timeout(SCRIPT_TIMEOUT, command.output())
        .await
        .unwrap_or_else(|_| {
            panic!("tests/console/{scenario}.mjs ran longer than {SCRIPT_TIMEOUT:?}")
        })
        .expect("running node (Debian package nodejs)");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    // Shown by the test runner for a failing test, and with --no-capture.
    println!("{stdout}");
    eprintln!("{stderr}");
    assert!(
        output.status.success(),
        "tests/console/{scenario}.mjs failed ({}):\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
        output.status
    );
}

/// Where the scenarios that take the README's screenshots write them: a
/// scratch directory, or the one `SETPOINT_SCREENSHOTS` names
/// (`SETPOINT_SCREENSHOTS=$PWD/docs/images cargo nextest run -p
/// setpoint-tests -E 'test(/^console::/)'` refreshes the README's), so a
/// test run does not change the checkout.
fn screenshots() -> ((&'static str, String), Option<tempfile::TempDir>) {
    match std::env::var("SETPOINT_SCREENSHOTS") {
        Ok(dir) if !dir.is_empty() => (("SETPOINT_SCREENSHOTS", dir), None),
        _ => {
            let dir = tempfile::tempdir().unwrap();
            (
                ("SETPOINT_SCREENSHOTS", dir.path().display().to_string()),
                Some(dir),
            )
        }
    }
}

/// The scenario wrote a PNG screenshot `file` into `dir`.
fn assert_screenshot(dir: &str, file: &str) {
    let bytes = std::fs::read(std::path::Path::new(dir).join(file))
        .unwrap_or_else(|e| panic!("the screenshot {file} was not written to {dir}: {e}"));
    assert!(
        bytes.starts_with(b"\x89PNG") && bytes.len() > 10_000,
        "{file} is not a screenshot ({} bytes)",
        bytes.len()
    );
}

/// `docs/examples/deployment.yaml`: the Deployment `shop` of four Pods.
fn shop() -> Value {
    json!({"apiVersion": "demo.setpoint.dev/v1", "kind": "Deployment",
        "metadata": {"name": "shop", "namespace": "default"},
        "spec": {"replicas": 4, "selector": {"matchLabels": {"app": "shop"}},
                 "strategy": {"rollingUpdate": {"maxSurge": 1, "maxUnavailable": 1}},
                 "template": {"metadata": {"labels": {"app": "shop"}},
                              "spec": {"image": "shop:1.0", "startupDelayMs": 1000}}}})
}

/// `docs/examples/web.yaml`: the ReplicaSet `web` of three Pods.
fn web() -> Value {
    json!({"apiVersion": "demo.setpoint.dev/v1", "kind": "ReplicaSet",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"image": "nginx:1.27", "startupDelayMs": 1500}}}})
}

/// Create the Deployment `shop` and wait until its four Pods are ready.
async fn shop_ready(host: &TestHost) {
    host.host
        .api()
        .create(&host.kind("Deployment"), shop())
        .await
        .unwrap();
    eventually(
        "Deployment shop has 4 ready Pods",
        Duration::from_secs(60),
        || async {
            let d = host
                .get("Deployment", "shop")
                .await
                .ok_or("no deployment")?;
            let ready = host
                .list("Pod")
                .await
                .iter()
                .filter(|p| {
                    p["metadata"]["labels"]["app"] == "shop" && crate::support::is_ready_pod(p)
                })
                .count();
            if d["status"]["readyReplicas"] == 4 && ready == 4 {
                Ok(())
            } else {
                Err(format!("{} ready pods; status {}", ready, d["status"]))
            }
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn console_tree_shows_the_deployment_its_replicaset_and_pods_live() {
    let host = start(&["replicaset", "podsim", "deployment"]).await;
    shop_ready(&host).await;
    let (shots, _scratch) = screenshots();
    run_scenario(&host, "tree", std::slice::from_ref(&shots)).await;
    assert_screenshot(&shots.1, "console-tree.png");
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn console_plan_of_web_scaled_shows_two_pods_to_create_and_changes_nothing() {
    let host = start(&["replicaset", "podsim"]).await;
    host.host
        .api()
        .create(&host.kind("ReplicaSet"), web())
        .await
        .unwrap();
    replicaset_ready(&host, "web", 3).await;
    let (shots, _scratch) = screenshots();
    run_scenario(&host, "plan", std::slice::from_ref(&shots)).await;
    assert_screenshot(&shots.1, "console-plan.png");
    let rs = host.get("ReplicaSet", "web").await.unwrap();
    assert_eq!(rs["spec"]["replicas"], 3, "the plan changed nothing");
    assert_eq!(host.list("Pod").await.len(), 3, "the plan created no Pod");
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn console_dns_record_page_lists_its_powerdns_requests_without_the_key() {
    let pdns = PowerDns::start().await;
    pdns.create_zone("example.test.").await;
    let host = start(&["dns"]).await;
    let api = host.host.api();
    api.create(
        &api.kinds().require("v1", "Secret").unwrap(),
        json!({"apiVersion": "v1", "kind": "Secret",
               "metadata": {"name": "pdns-api", "namespace": "default"},
               "stringData": {"api-key": pdns.api_key()}}),
    )
    .await
    .unwrap();
    api.create(
        &api.kinds().require("setpoint.dev/v1", "PluginGrant").unwrap(),
        json!({"apiVersion": "setpoint.dev/v1", "kind": "PluginGrant", "metadata": {"name": "dns"},
               "spec": {"destinations": [pdns.api_url()], "secrets": ["default/pdns-api/api-key"]}}),
    )
    .await
    .unwrap();
    let records = api
        .kinds()
        .require("dns.setpoint.dev/v1", "DnsRecord")
        .unwrap();
    api.create(
        &records,
        crate::support::pdns::dns_record(&pdns.api_url(), "www", &["192.0.2.1"], 120),
    )
    .await
    .unwrap();
    eventually(
        "DnsRecord www is Ready",
        Duration::from_secs(60),
        || async {
            let record = api
                .get(&records, Some("default"), "www")
                .await
                .map_err(|e| e.to_string())?;
            match crate::support::ready_condition(&record) {
                Some(c) if c["status"] == "True" => Ok(()),
                _ => Err(record["status"].to_string()),
            }
        },
    )
    .await;
    run_scenario(
        &host,
        "dns",
        &[
            ("SETPOINT_SECRET", pdns.api_key().to_owned()),
            ("SETPOINT_DNS_RECORD", "www".into()),
        ],
    )
    .await;
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn console_a_read_only_token_cannot_apply() {
    let host = start(&["replicaset", "podsim"]).await;
    run_scenario(
        &host,
        "readonly",
        &[("SETPOINT_READONLY_NAME", "console-readonly".into())],
    )
    .await;
    assert!(
        host.get("ReplicaSet", "console-readonly").await.is_none(),
        "the viewer created nothing"
    );
    host.stop().await;
}

/// Pods in namespace `big`.
const BIG: usize = 100_000;
/// Every this many Pods, one carries `tier=special` (the label filter's test).
const SPECIAL_EVERY: usize = 20_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn console_objects_page_of_100_000_pods_shows_one_page_pages_and_filters() {
    // How soon the first rows show is a benchmark, not this test's
    // assertion (BENCHMARKS.md "Web console at scale": the same test run
    // with SETPOINT_SCALE_LIMIT_MS=1000 judges it).
    use futures::StreamExt;
    // replicaset brings the Pod kind and watches Pods (all 100,000 in its
    // informer) but reconciles none without an owner: the host is as idle
    // as one that has converged. (With podsim, the debug build's first look
    // at 100,000 Pods keeps both cores busy for over a minute.)
    let host = start(&["replicaset"]).await;
    let api = host.host.api();
    let kind = host.kind("Pod");
    let started = std::time::Instant::now();
    futures::stream::iter(0..BIG)
        .map(|i| {
            let kind = kind.clone();
            async move {
                let mut labels = json!({"app": "big"});
                if i % SPECIAL_EVERY == 0 {
                    labels["tier"] = json!("special");
                }
                api.create(
                    &kind,
                    json!({"apiVersion": "demo.setpoint.dev/v1", "kind": "Pod",
                           "metadata": {"name": format!("big-{i:06}"), "namespace": "big", "labels": labels},
                           "spec": {"startupDelayMs": 600_000}}),
                )
                .await
                .unwrap();
            }
        })
        .buffer_unordered(64)
        .collect::<()>()
        .await;
    println!("created {BIG} Pods in {:?}", started.elapsed());
    run_scenario(
        &host,
        "scale",
        &[
            ("SETPOINT_SCALE_NAMESPACE", "big".into()),
            ("SETPOINT_SCALE_LABEL", "tier=special".into()),
            (
                "SETPOINT_SCALE_LABEL_COUNT",
                (BIG / SPECIAL_EVERY).to_string(),
            ),
        ]
        .into_iter()
        .chain(
            std::env::var("SETPOINT_SCALE_LIMIT_MS")
                .ok()
                .map(|limit| ("SETPOINT_SCALE_LIMIT_MS", limit)),
        )
        .collect::<Vec<_>>(),
    )
    .await;
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn console_pages_pass_axe_with_no_serious_violations() {
    let host = start(&["replicaset", "podsim", "deployment"]).await;
    host.host
        .api()
        .create(&host.kind("ReplicaSet"), web())
        .await
        .unwrap();
    shop_ready(&host).await;
    run_scenario(&host, "a11y", &[]).await;
    host.stop().await;
}
