//! The `setpoint` binary as a user runs it: `serve` with real plugins, then
//! `apply`, `get` and `delete` against it, and bad input that must be
//! refused with a clear message while writing nothing.

use std::process::{Command, Output, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::support::{ServeProcess, eventually, plugins_dir, setpoint_bin};

/// A `setpoint serve --in-memory` with the named plugins.
struct Server {
    _process: ServeProcess,
    url: String,
    _plugins: tempfile::TempDir,
}

fn serve(plugins: &[&str]) -> Server {
    let dir = plugins_dir(plugins);
    let process = ServeProcess::start([
        std::ffi::OsStr::new("--in-memory"),
        "--plugins".as_ref(),
        dir.path().as_os_str(),
    ]);
    let url = process.url.clone();
    Server {
        _process: process,
        url,
        _plugins: dir,
    }
}

fn run(server: &Server, args: &[&str], stdin: Option<&str>) -> Output {
    let mut child = Command::new(setpoint_bin())
        .args(args)
        .env("SETPOINT_SERVER", &server.url)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    if let Some(input) = stdin {
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
    }
    drop(child.stdin.take());
    child.wait_with_output().unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

async fn revision(server: &Server) -> String {
    let list: Value = reqwest::get(format!(
        "{}/apis/demo.setpoint.dev/v1/replicasets",
        server.url
    ))
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    list["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned()
}

const RS: &str = "apiVersion: demo.setpoint.dev/v1
kind: ReplicaSet
metadata:
  name: web
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec: {startupDelayMs: 10}
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_get_and_delete_through_the_binary() {
    let server = serve(&["replicaset", "podsim"]);
    let out = run(&server, &["apply", "-f", "-"], Some(RS));
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout).trim(),
        "replicaset.demo.setpoint.dev/web created"
    );

    let pods = eventually("two pods are Running", Duration::from_secs(60), || async {
        let out = run(&server, &["get", "pods"], None);
        let table = text(&out.stdout);
        if table.matches("Running").count() == 2 {
            Ok(table)
        } else {
            Err(table)
        }
    })
    .await;
    let header = pods.lines().next().unwrap();
    assert!(
        header.starts_with("NAME") && header.ends_with("AGE"),
        "{pods}"
    );
    assert!(pods.contains("web-0") && pods.contains("web-1"), "{pods}");

    let out = run(&server, &["get", "rs", "web", "-o", "json"], None);
    let rs: Value = serde_json::from_slice(&out.stdout).expect("get -o json prints JSON");
    assert_eq!(rs["spec"]["replicas"], 2);
    let out = run(&server, &["get", "replicaset", "web", "-o", "yaml"], None);
    assert!(
        text(&out.stdout).contains("kind: ReplicaSet"),
        "{}",
        text(&out.stdout)
    );

    let out = run(&server, &["apply", "-f", "-"], Some(RS));
    assert_eq!(
        text(&out.stdout).trim(),
        "replicaset.demo.setpoint.dev/web unchanged"
    );
    let scaled = RS.replace("replicas: 2", "replicas: 1");
    let out = run(&server, &["apply", "-f", "-"], Some(&scaled));
    assert_eq!(
        text(&out.stdout).trim(),
        "replicaset.demo.setpoint.dev/web configured"
    );
    eventually("one pod is left", Duration::from_secs(60), || async {
        let table = text(&run(&server, &["get", "pods"], None).stdout);
        if table.lines().count() == 2 {
            Ok(())
        } else {
            Err(table)
        }
    })
    .await;

    let out = run(&server, &["delete", "rs", "web"], None);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = run(&server, &["get", "rs", "web"], None);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("not found"),
        "{}",
        text(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_manifests_are_refused_with_a_clear_error_and_write_nothing() {
    let server = serve(&["replicaset"]);
    let before = revision(&server).await;
    let cases: &[(&str, &str)] = &[
        ("kind: [unclosed\n", "(document 1) is not valid YAML"),
        (
            "apiVersion: demo.setpoint.dev/v1\nkind: ReplicaSet\nmetadata: {}\nspec: {}\n",
            "ReplicaSet has no metadata.name",
        ),
        (
            "metadata: {name: x}\n",
            "missing required field \"apiVersion\"",
        ),
        (
            // A valid object followed by one of an unknown kind: nothing is written.
            &format!(
                "{RS}---\napiVersion: demo.setpoint.dev/v1\nkind: Gadget\nmetadata: {{name: g}}\n"
            ),
            "(document 2): unknown kind \"Gadget\"",
        ),
        (
            "apiVersion: demo.setpoint.dev/v1\nkind: ReplicaSet\nmetadata: {name: Bad_Name}\nspec: {}\n",
            "metadata.name",
        ),
    ];
    for (manifest, expected) in cases {
        let out = run(&server, &["apply", "-f", "-"], Some(manifest));
        assert!(!out.status.success(), "accepted: {manifest}");
        let stderr = text(&out.stderr);
        assert!(
            stderr.contains(expected),
            "expected {expected:?} in: {stderr}"
        );
    }
    assert_eq!(
        revision(&server).await,
        before,
        "bad input must write nothing"
    );
    let out = run(&server, &["get", "gadgets"], None);
    assert!(
        text(&out.stderr).contains("doesn't have a resource type \"gadgets\""),
        "{}",
        text(&out.stderr)
    );
    let out = run(&server, &["apply", "-f", "/definitely/not/here.yaml"], None);
    assert!(
        text(&out.stderr).contains("cannot read /definitely/not/here.yaml"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn serve_refuses_to_listen_beyond_loopback() {
    let out = Command::new(setpoint_bin())
        .args([
            "serve",
            "--in-memory",
            "--addr",
            "0.0.0.0:0",
            "--plugins",
            "/nonexistent",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("only binds to loopback"),
        "{}",
        text(&out.stderr)
    );
}
