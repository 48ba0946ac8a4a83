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

/// The binary with `args` against `server`, every stream piped.
fn spawn(server: &Server, args: &[&str]) -> std::process::Child {
    Command::new(setpoint_bin())
        .args(args)
        .env("SETPOINT_SERVER", &server.url)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn run(server: &Server, args: &[&str], stdin: Option<&str>) -> Output {
    let mut child = spawn(server, args);
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

/// A self-signed certificate for 127.0.0.1 and its key (openssl).
fn test_certificate(dir: &std::path::Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let (cert, key) = (dir.join("tls.crt"), dir.join("tls.key"));
    let out = Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
        ])
        .args(["-nodes", "-days", "1", "-subj", "/CN=setpoint"])
        .args(["-addext", "subjectAltName=IP:127.0.0.1"])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .expect("openssl makes a test certificate");
    assert!(out.status.success(), "{}", text(&out.stderr));
    (cert, key)
}

/// Run the binary with exactly `args` (no server from the environment).
fn setpoint(args: &[&str], stdin: Option<&str>) -> Output {
    let mut child = Command::new(setpoint_bin())
        .args(args)
        .env_remove("SETPOINT_SERVER")
        .env_remove("SETPOINT_TOKEN")
        .env_remove("SETPOINT_KUBECONFIG")
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

#[test]
fn the_cli_speaks_https_with_a_certificate_authority_or_the_kubeconfig_serve_writes() {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = test_certificate(dir.path());
    let tokens = dir.path().join("tokens.yaml");
    let plugins = plugins_dir(&["podsim"]);
    let process = ServeProcess::start([
        std::ffi::OsStr::new("--in-memory"),
        "--plugins".as_ref(),
        plugins.path().as_os_str(),
        "--tokens".as_ref(),
        tokens.as_os_str(),
        "--tls-cert".as_ref(),
        cert.as_os_str(),
        "--tls-key".as_ref(),
        key.as_os_str(),
    ]);
    assert!(
        process.url.starts_with("https://127.0.0.1:"),
        "{}",
        process.url
    );
    let url = process.url.as_str();
    // serve generated the tokens file and a kubeconfig (with the CA) beside it.
    let kubeconfig = dir.path().join("kubeconfig");
    let kubeconfig = kubeconfig.to_str().unwrap();
    let token = std::fs::read_to_string(&tokens)
        .unwrap()
        .lines()
        .find_map(|l| {
            l.trim()
                .strip_prefix("token:")
                .map(|t| t.trim().trim_matches('"').to_owned())
        })
        .expect("a generated token");
    let cert = cert.to_str().unwrap();

    let ok = |args: &[&str], stdin: Option<&str>| {
        let out = setpoint(args, stdin);
        assert!(
            out.status.success(),
            "setpoint {args:?}: {}{}",
            text(&out.stdout),
            text(&out.stderr)
        );
        text(&out.stdout)
    };
    // The CA and token as flags.
    let crds = ok(
        &[
            "get",
            "crds",
            "-o",
            "json",
            "--server",
            url,
            "--certificate-authority",
            cert,
            "--token",
            &token,
        ],
        None,
    );
    assert!(crds.contains("pods.demo.setpoint.dev"), "{crds}");
    // Everything from the kubeconfig: apply, get, plugins and describe.
    let pod = "apiVersion: demo.setpoint.dev/v1\nkind: Pod\nmetadata:\n  name: p1\nspec:\n  startupDelayMs: 10\n";
    let applied = ok(&["apply", "-f", "-", "--kubeconfig", kubeconfig], Some(pod));
    assert_eq!(applied.trim(), "pod.demo.setpoint.dev/p1 created");
    let table = ok(&["get", "pods", "--kubeconfig", kubeconfig], None);
    assert!(table.contains("p1"), "{table}");
    let plugins_list = ok(&["plugins", "--json", "--kubeconfig", kubeconfig], None);
    assert!(plugins_list.contains("podsim"), "{plugins_list}");
    let described = ok(&["describe", "pod", "p1", "--kubeconfig", kubeconfig], None);
    assert!(described.contains("p1"), "{described}");
    // Flags win over the kubeconfig: a wrong token is refused.
    let out = setpoint(
        &[
            "get",
            "pods",
            "--kubeconfig",
            kubeconfig,
            "--token",
            "not-a-known-token-at-all",
        ],
        None,
    );
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("HTTP 401"),
        "{}",
        text(&out.stderr)
    );

    // Without the CA the self-signed certificate is not trusted…
    let out = setpoint(&["get", "pods", "--server", url, "--token", &token], None);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("certificate"),
        "{}",
        text(&out.stderr)
    );
    // A trusted certificate must still name the server it is served by.
    let by_name = url.replacen("127.0.0.1", "localhost", 1);
    let out = setpoint(
        &[
            "get",
            "pods",
            "--server",
            &by_name,
            "--certificate-authority",
            cert,
            "--token",
            &token,
        ],
        None,
    );
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains(r#"certificate not valid for name "localhost""#),
        "{}",
        text(&out.stderr)
    );
    // …unless checking is turned off.
    let table = ok(
        &[
            "get",
            "pods",
            "--server",
            url,
            "--token",
            &token,
            "--insecure-skip-tls-verify",
        ],
        None,
    );
    assert!(table.contains("p1"), "{table}");
    // Plain HTTP to the HTTPS port gets no answer it can use.
    let plain = url.replacen("https://", "http://", 1);
    let out = setpoint(
        &["get", "pods", "--server", &plain, "--token", &token],
        None,
    );
    assert!(!out.status.success());
}

/// `setpoint get … | head`: the reader goes away after a line; the
/// command ends quietly, not with a panic about a broken pipe.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_that_goes_away_ends_the_command_quietly() {
    let server = serve(&["replicaset", "podsim"]);
    let many = RS.replace("replicas: 2", "replicas: 400");
    assert_ne!(many, RS, "the manifest names its replicas");
    let out = run(&server, &["apply", "-f", "-"], Some(&many));
    assert!(out.status.success(), "{}", text(&out.stderr));
    eventually("400 pods", Duration::from_secs(120), || async {
        let out = run(&server, &["get", "pods"], None);
        let n = text(&out.stdout).lines().count();
        (n > 400).then_some(()).ok_or(format!("{n} lines"))
    })
    .await;
    for args in [
        &["get", "pods", "-o", "yaml"][..],
        &["plan", "-f", "-", "-o", "json"][..],
    ] {
        let mut child = spawn(&server, args);
        {
            use std::io::Write;
            let mut stdin = child.stdin.take().unwrap();
            // The plan deletes the ReplicaSet's 400 Pods by scaling to none.
            let _ = stdin.write_all(RS.replace("replicas: 2", "replicas: 0").as_bytes());
        }
        let mut first = [0u8; 16];
        {
            use std::io::Read;
            let mut stdout = child.stdout.take().unwrap();
            stdout.read_exact(&mut first).unwrap();
            // Dropped here: the reader is gone.
        }
        let out = child.wait_with_output().unwrap();
        let stderr = text(&out.stderr);
        assert!(
            out.status.success() && !stderr.contains("panicked"),
            "{args:?}: {:?} {stderr}",
            out.status
        );
    }
}
