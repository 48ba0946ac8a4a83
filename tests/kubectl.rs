//! A real kubectl against a running host: CRDs, apply, table/JSON/YAML
//! output, watches, patches, server-side apply, finalizers, describe with
//! events, discovery, and the error codes kubectl users see.
//!
//! The kubectl used is, in order: `$SETPOINT_KUBECTL`, the newest real
//! kubectl shipped beside the gcloud dispatcher (`kubectl.1.NN`), Debian's
//! `kubernetes-client` (installed, or unpacked by `scripts/test` into
//! `target/tools/kubernetes-client` when another package owns
//! `/usr/bin/kubectl`), then `kubectl` on `PATH` unless it is the gcloud
//! dispatcher. Without one the tests fail and say how to get one.

use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

use crate::support::{TestHost, eventually, workspace};

/// Whether `bin` is a real kubectl (not the gcloud dispatcher).
fn is_real_kubectl(bin: &Path) -> bool {
    std::process::Command::new(bin)
        .args(["version", "--client"])
        .output()
        .is_ok_and(|o| {
            o.status.success() && !String::from_utf8_lossy(&o.stdout).contains("dispatcher")
        })
}

/// The kubectl binary to test with (see the module doc).
fn kubectl_bin() -> PathBuf {
    if let Some(bin) = std::env::var_os("SETPOINT_KUBECTL") {
        return PathBuf::from(bin);
    }
    let mut candidates = Vec::new();
    let gcloud = Path::new("/usr/lib/google-cloud-sdk/bin");
    if let Ok(entries) = std::fs::read_dir(gcloud) {
        let mut versioned: Vec<(u32, PathBuf)> = entries
            .filter_map(Result::ok)
            .filter_map(|e| {
                let name = e.file_name().into_string().ok()?;
                let minor = name.strip_prefix("kubectl.1.")?.parse().ok()?;
                Some((minor, e.path()))
            })
            .collect();
        versioned.sort();
        candidates.extend(versioned.into_iter().rev().map(|(_, p)| p));
    }
    candidates.push(workspace().join("target/tools/kubernetes-client/usr/bin/kubectl"));
    candidates.push(PathBuf::from("/usr/bin/kubectl"));
    candidates.push(PathBuf::from("kubectl"));
    candidates.into_iter().find(|c| is_real_kubectl(c)).expect(
        "no real kubectl found: run scripts/test (it installs Debian's kubernetes-client) \
             or set SETPOINT_KUBECTL to a kubectl binary",
    )
}

/// kubectl pointed at one test host, with its own kubeconfig and caches.
struct Kubectl {
    bin: PathBuf,
    home: tempfile::TempDir,
}

impl Kubectl {
    fn new(server: &str) -> Self {
        Self::with_user(server, "{}")
    }

    fn with_user(server: &str, user: &str) -> Self {
        let home = tempfile::tempdir().unwrap();
        let kubeconfig = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: setpoint\n  cluster:\n    server: {server}\n\
             users:\n- name: setpoint\n  user: {user}\ncontexts:\n- name: setpoint\n  context:\n    cluster: setpoint\n    user: setpoint\n    namespace: default\n\
             current-context: setpoint\n"
        );
        std::fs::write(home.path().join("kubeconfig"), kubeconfig).unwrap();
        Self {
            bin: kubectl_bin(),
            home,
        }
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(&self.bin);
        cmd.env("HOME", self.home.path())
            .env("KUBECONFIG", self.home.path().join("kubeconfig"))
            .arg("--cache-dir")
            .arg(self.home.path().join("cache"))
            .args(args)
            .stdin(Stdio::null())
            .kill_on_drop(true);
        cmd
    }

    /// Run kubectl to completion (at most 60 s).
    async fn run(&self, args: &[&str]) -> Output {
        tokio::time::timeout(Duration::from_secs(60), self.command(args).output())
            .await
            .unwrap_or_else(|_| panic!("kubectl {args:?} did not finish within 60 s"))
            .expect("kubectl runs")
    }

    /// Run kubectl and expect success; its stdout.
    async fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args).await;
        assert!(
            out.status.success(),
            "kubectl {args:?} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// Run kubectl and expect failure; its stderr.
    async fn fails(&self, args: &[&str]) -> String {
        let out = self.run(args).await;
        assert!(
            !out.status.success(),
            "kubectl {args:?} succeeded: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        String::from_utf8(out.stderr).unwrap()
    }

    /// The client's minor version (`33` for kubectl 1.33).
    async fn minor(&self) -> u32 {
        let version: Value =
            serde_json::from_str(&self.ok(&["version", "--client", "-o", "json"]).await).unwrap();
        version["clientVersion"]["minor"]
            .as_str()
            .and_then(|m| m.trim_end_matches('+').parse().ok())
            .unwrap()
    }

    /// Write `manifest` to `name` in kubectl's home; the file's path.
    fn manifest_file(&self, name: &str, manifest: &Value) -> String {
        let file = self.home.path().join(name);
        std::fs::write(&file, serde_json::to_vec(manifest).unwrap()).unwrap();
        file.to_str().unwrap().to_owned()
    }

    /// Write `manifest` to a file and `kubectl apply` it with `extra` flags.
    async fn apply(&self, manifest: &Value, extra: &[&str]) -> Output {
        let file = self
            .home
            .path()
            .join(format!("m-{}.json", fastrand::u64(..)));
        std::fs::write(&file, serde_json::to_vec_pretty(manifest).unwrap()).unwrap();
        let mut args = vec!["apply", "-f", file.to_str().unwrap()];
        args.extend_from_slice(extra);
        self.run(&args).await
    }
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// A namespaced `Widget` kind with printer columns and a schema.
fn widget_crd() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com",
            "names": {"kind": "Widget", "listKind": "WidgetList", "plural": "widgets", "singular": "widget", "shortNames": ["wd"]},
            "scope": "Namespaced",
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "additionalPrinterColumns": [
                    {"name": "Replicas", "type": "integer", "jsonPath": ".spec.replicas"},
                    {"name": "Color", "type": "string", "jsonPath": ".spec.color"},
                    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}
                ],
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "properties": {
                        "spec": {"type": "object", "properties": {
                            "replicas": {"type": "integer", "minimum": 0},
                            "color": {"type": "string"}
                        }},
                        "status": {"type": "object", "properties": {"phase": {"type": "string"}}}
                    }
                }}
            }]
        }
    })
}

fn widget(name: &str, replicas: Value, color: &str) -> Value {
    json!({
        "apiVersion": "example.com/v1", "kind": "Widget",
        "metadata": {"name": name},
        "spec": {"replicas": replicas, "color": color}
    })
}

/// Apply the Widget CRD and wait until kubectl sees it established.
async fn install_widgets(kubectl: &Kubectl) {
    let out = kubectl.apply(&widget_crd(), &[]).await;
    assert!(out.status.success(), "applying the CRD: {}", text(&out));
    kubectl
        .ok(&[
            "wait",
            "--for",
            "condition=established",
            "--timeout=30s",
            "crd/widgets.example.com",
        ])
        .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn kubectl_applies_a_crd_and_objects_and_reads_them_as_table_json_and_yaml() {
    let host = TestHost::start(&[]).await;
    let kubectl = Kubectl::new(&host.url);
    install_widgets(&kubectl).await;

    let out = kubectl.apply(&widget("w1", json!(3), "blue"), &[]).await;
    assert!(
        text(&out).contains("widget.example.com/w1 created"),
        "{}",
        text(&out)
    );
    let out = kubectl.apply(&widget("w1", json!(4), "blue"), &[]).await;
    assert!(
        text(&out).contains("widget.example.com/w1 configured"),
        "{}",
        text(&out)
    );

    let table = kubectl.ok(&["get", "widgets"]).await;
    let mut lines = table.lines();
    let header: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(header, ["NAME", "REPLICAS", "COLOR", "AGE"], "{table}");
    let row: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(&row[..3], ["w1", "4", "blue"], "{table}");

    let object: Value =
        serde_json::from_str(&kubectl.ok(&["get", "widget", "w1", "-o", "json"]).await).unwrap();
    assert_eq!(object["kind"], "Widget");
    assert_eq!(object["spec"]["replicas"], 4);
    let list: Value =
        serde_json::from_str(&kubectl.ok(&["get", "widgets", "-o", "json"]).await).unwrap();
    assert_eq!(list["items"][0]["metadata"]["name"], "w1");
    let yaml = kubectl.ok(&["get", "wd", "w1", "-o", "yaml"]).await;
    assert!(
        yaml.contains("kind: Widget") && yaml.contains("replicas: 4"),
        "{yaml}"
    );

    let resources = kubectl.ok(&["api-resources"]).await;
    let widgets = resources
        .lines()
        .find(|l| l.starts_with("widgets "))
        .unwrap_or_else(|| panic!("no widgets in api-resources:\n{resources}"));
    assert!(
        widgets.contains("example.com/v1") && widgets.contains("Widget") && widgets.contains("wd"),
        "{widgets}"
    );
    // kubectl ≥ 1.26 asks `/api` and `/apis` for aggregated discovery; served,
    // it needs no request per group-version.
    if kubectl.minor().await >= 26 {
        let out = kubectl.run(&["api-resources", "-v=6"]).await;
        let log = text(&out);
        assert!(out.status.success(), "{log}");
        assert!(
            log.contains("/apis?timeout=") && log.contains("/api?timeout="),
            "{log}"
        );
        assert!(
            !log.contains("/apis/example.com/v1") && !log.contains("/api/v1?"),
            "kubectl fell back to per-group discovery:\n{log}"
        );
        assert!(log.contains("widgets"), "{log}");
    }
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn kubectl_reports_not_found_conflict_and_invalid_field_errors() {
    let host = TestHost::start(&[]).await;
    let kubectl = Kubectl::new(&host.url);
    install_widgets(&kubectl).await;

    let err = kubectl.fails(&["get", "widget", "nope"]).await;
    assert!(
        err.contains("NotFound") && err.contains("\"nope\" not found"),
        "{err}"
    );

    let out = kubectl
        .apply(&widget("bad", json!("three"), "red"), &[])
        .await;
    assert!(!out.status.success());
    let err = text(&out);
    assert!(
        err.contains("spec.replicas") && err.contains("invalid"),
        "{err}"
    );

    kubectl.apply(&widget("w1", json!(1), "red"), &[]).await;
    let mut stale: Value =
        serde_json::from_str(&kubectl.ok(&["get", "widget", "w1", "-o", "json"]).await).unwrap();
    kubectl
        .ok(&[
            "patch",
            "widget",
            "w1",
            "--type",
            "merge",
            "-p",
            r#"{"spec":{"color":"green"}}"#,
        ])
        .await;
    stale["spec"]["replicas"] = json!(9);
    let file = kubectl.home.path().join("stale.json");
    std::fs::write(&file, stale.to_string()).unwrap();
    let err = kubectl
        .fails(&["replace", "-f", file.to_str().unwrap()])
        .await;
    assert!(
        err.contains("Conflict") && err.contains("the object has been modified"),
        "{err}"
    );
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn kubectl_refuses_unknown_fields_by_default_and_only_warns_with_validate_warn() {
    let host = TestHost::start(&[]).await;
    let kubectl = Kubectl::new(&host.url);
    install_widgets(&kubectl).await;
    if kubectl.minor().await < 27 {
        // Older clients validate on their side, against /openapi/v2 only.
        host.stop().await;
        return;
    }
    let mut bogus = widget("w1", json!(1), "red");
    bogus["spec"]["bogus"] = json!(true);
    let strict = r#"strict decoding error: unknown field "spec.bogus""#;

    // Create (client-side apply of a new object), server-side apply, and
    // client-side apply over an existing object (a merge patch).
    let out = kubectl.apply(&bogus, &[]).await;
    assert!(!out.status.success());
    assert!(
        text(&out).contains("BadRequest") && text(&out).contains(strict),
        "{}",
        text(&out)
    );
    let out = kubectl.apply(&bogus, &["--server-side"]).await;
    assert!(!out.status.success());
    assert!(text(&out).contains(strict), "{}", text(&out));
    let err = kubectl.fails(&["get", "widget", "w1"]).await;
    assert!(err.contains("NotFound"), "{err}");
    let out = kubectl.apply(&widget("w1", json!(1), "red"), &[]).await;
    assert!(out.status.success(), "{}", text(&out));
    bogus["spec"]["replicas"] = json!(2);
    let out = kubectl.apply(&bogus, &[]).await;
    assert!(!out.status.success());
    assert!(text(&out).contains(strict), "{}", text(&out));

    // --validate=warn: written without the field, and kubectl shows why.
    let out = kubectl.apply(&bogus, &["--validate=warn"]).await;
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(r#"Warning: unknown field "spec.bogus""#),
        "{}",
        text(&out)
    );
    let object: Value =
        serde_json::from_str(&kubectl.ok(&["get", "widget", "w1", "-o", "json"]).await).unwrap();
    assert_eq!(object["spec"], json!({"replicas": 2, "color": "red"}));
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn kubectl_patches_with_merge_and_json_patch_and_applies_server_side_with_conflicts() {
    let host = TestHost::start(&[]).await;
    let kubectl = Kubectl::new(&host.url);
    install_widgets(&kubectl).await;
    kubectl.apply(&widget("w1", json!(1), "red"), &[]).await;

    kubectl
        .ok(&[
            "patch",
            "widget",
            "w1",
            "--type",
            "merge",
            "-p",
            r#"{"spec":{"color":"green"}}"#,
        ])
        .await;
    kubectl
        .ok(&[
            "patch",
            "widget",
            "w1",
            "--type",
            "json",
            "-p",
            r#"[{"op":"replace","path":"/spec/replicas","value":5}]"#,
        ])
        .await;
    let object: Value =
        serde_json::from_str(&kubectl.ok(&["get", "widget", "w1", "-o", "json"]).await).unwrap();
    assert_eq!(object["spec"], json!({"replicas": 5, "color": "green"}));

    // A strategic merge patch (kubectl's default) is refused the way the
    // Kubernetes API refuses it for custom resources.
    let err = kubectl
        .fails(&[
            "patch",
            "widget",
            "w1",
            "-p",
            r#"{"spec":{"color":"blue"}}"#,
        ])
        .await;
    // (kubectl 1.32 rewords it as "… is not supported by …"; 1.20 prints
    // the Status as is.)
    assert!(
        (err.contains("not supported") || err.contains("UnsupportedMediaType"))
            && err.contains("application/merge-patch+json"),
        "{err}"
    );

    let applied = widget("s1", json!(2), "red");
    let out = kubectl.apply(&applied, &["--server-side"]).await;
    assert!(text(&out).contains("serverside-applied"), "{}", text(&out));
    let out = kubectl
        .apply(
            &widget("s1", json!(7), "red"),
            &["--server-side", "--field-manager", "other"],
        )
        .await;
    assert!(!out.status.success());
    assert!(
        text(&out).contains("conflict") && text(&out).contains("spec.replicas"),
        "{}",
        text(&out)
    );
    let out = kubectl
        .apply(
            &widget("s1", json!(7), "red"),
            &[
                "--server-side",
                "--field-manager",
                "other",
                "--force-conflicts",
            ],
        )
        .await;
    assert!(out.status.success(), "{}", text(&out));
    // Read through the library: kubectl ≥ 1.21 hides managedFields.
    let kind = host
        .host
        .api()
        .kinds()
        .require("example.com/v1", "Widget")
        .unwrap();
    let object = host
        .host
        .api()
        .get(&kind, Some("default"), "s1")
        .await
        .unwrap();
    assert_eq!(object["spec"]["replicas"], 7);
    let managers: Vec<&str> = object["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["manager"].as_str())
        .collect();
    assert!(managers.contains(&"other"), "{managers:?}");
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn kubectl_delete_waits_until_another_client_removes_the_finalizer() {
    let host = TestHost::start(&[]).await;
    let kubectl = Kubectl::new(&host.url);
    install_widgets(&kubectl).await;
    let mut held = widget("held", json!(1), "red");
    held["metadata"]["finalizers"] = json!(["example.com/hold"]);
    let out = kubectl.apply(&held, &[]).await;
    assert!(out.status.success(), "{}", text(&out));

    let mut delete = kubectl
        .command(&["delete", "widget", "held", "--timeout=60s"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let kind = host
        .host
        .api()
        .kinds()
        .require("example.com/v1", "Widget")
        .unwrap();
    eventually("deletion started", Duration::from_secs(20), || async {
        match host.host.api().get(&kind, Some("default"), "held").await {
            Ok(o) if o["metadata"]["deletionTimestamp"].is_string() => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        delete.try_wait().unwrap().is_none(),
        "kubectl delete returned while the finalizer was still there"
    );

    kubectl
        .ok(&[
            "patch",
            "widget",
            "held",
            "--type",
            "json",
            "-p",
            r#"[{"op":"remove","path":"/metadata/finalizers"}]"#,
        ])
        .await;
    let out = tokio::time::timeout(Duration::from_secs(30), delete.wait_with_output())
        .await
        .expect("kubectl delete returns once the finalizer is gone")
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("\"held\" deleted"), "{}", text(&out));
    assert!(
        host.host
            .api()
            .get(&kind, Some("default"), "held")
            .await
            .is_err()
    );
    host.stop().await;
}

/// Read lines from `reader` until one satisfies `found`, for at most 30 s.
async fn read_until(
    lines: &mut tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
    seen: &mut Vec<String>,
    found: impl Fn(&str) -> bool,
) {
    let result = tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(line) = lines.next_line().await.unwrap() {
            let hit = found(&line);
            seen.push(line);
            if hit {
                return;
            }
        }
        panic!("the watch ended; lines: {seen:?}");
    })
    .await;
    assert!(result.is_ok(), "not seen within 30 s; lines: {seen:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn kubectl_get_watch_sees_podsim_move_a_pod_to_running_and_describe_shows_its_events() {
    let host = TestHost::start(&["podsim"]).await;
    let kubectl = Kubectl::new(&host.url);
    // Warm discovery first so that the watch starts promptly.
    kubectl.ok(&["get", "pods"]).await;
    let mut watch = kubectl
        .command(&["get", "pods", "-w"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(watch.stdout.take().unwrap()).lines();

    let pod = json!({
        "apiVersion": "demo.setpoint.dev/v1", "kind": "Pod",
        "metadata": {"name": "web-0"},
        "spec": {"startupDelayMs": 300, "image": "nginx"}
    });
    let out = kubectl.apply(&pod, &[]).await;
    assert!(out.status.success(), "{}", text(&out));

    let mut seen = Vec::new();
    read_until(&mut lines, &mut seen, |l| l.starts_with("NAME")).await;
    assert_eq!(
        seen[0].split_whitespace().collect::<Vec<_>>(),
        ["NAME", "PHASE", "READY", "AGE"]
    );
    read_until(&mut lines, &mut seen, |l| {
        l.starts_with("web-0") && l.split_whitespace().nth(1) == Some("Running")
    })
    .await;
    watch.kill().await.unwrap();

    let described = kubectl.ok(&["describe", "pod", "web-0"]).await;
    assert!(
        described.contains("Name:") && described.contains("web-0"),
        "{described}"
    );
    let events = described
        .split("Events:")
        .nth(1)
        .unwrap_or_else(|| panic!("no Events section:\n{described}"));
    assert!(
        events.contains("Started") && events.contains("Started pod web-0"),
        "{described}"
    );
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn kubectl_explain_describes_the_fields_of_a_registered_kind_from_openapi_v3() {
    let host = TestHost::start(&[]).await;
    let kubectl = Kubectl::new(&host.url);
    install_widgets(&kubectl).await;
    let minor = kubectl.minor().await;
    let index: Value = reqwest::get(format!("{}/openapi/v3", host.url))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(
        index["paths"]["apis/example.com/v1"]["serverRelativeURL"]
            .as_str()
            .is_some_and(|u| u.starts_with("/openapi/v3/apis/example.com/v1?hash=")),
        "{index}"
    );
    // kubectl before 1.27 explains from /openapi/v2 only, whose minimal
    // document carries no schemas.
    if minor >= 27 {
        let explained = kubectl.ok(&["explain", "widgets.spec"]).await;
        assert!(
            explained.contains("replicas")
                && explained.contains("<integer>")
                && explained.contains("color"),
            "{explained}"
        );
    }
    host.stop().await;
}

#[test]
fn kubectl_reaches_serve_over_https_with_its_token_and_a_limited_token_is_refused_in_kubernetes_words()
 {
    // kubectl sends bearer tokens over HTTPS only, so token tests need TLS.
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
    let openssl = std::process::Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=setpoint",
        ])
        .args(["-addext", "subjectAltName=IP:127.0.0.1"])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .expect("openssl makes a test certificate");
    assert!(
        openssl.status.success(),
        "{}",
        String::from_utf8_lossy(&openssl.stderr)
    );
    // An existing tokens file: serve writes the kubeconfig for its first user.
    let viewer = "viewer-token-0123456789";
    std::fs::write(
        dir.path().join("tokens.yaml"),
        format!(
            "users:\n- name: admin\n  token: admin-token-0123456789\n  rules:\n  - {{verbs: ['*'], apiGroups: ['*'], resources: ['*']}}\n\
             - name: viewer\n  token: {viewer}\n  rules:\n  - {{verbs: [get, list], apiGroups: [apiextensions.k8s.io], resources: [customresourcedefinitions]}}\n"
        ),
    )
    .unwrap();
    let plugins = crate::support::plugins_dir(&["podsim"]);
    let mut serve = std::process::Command::new(crate::support::setpoint_bin())
        .args(["serve", "--in-memory", "--addr", "127.0.0.1:0", "--plugins"])
        .arg(plugins.path())
        .arg("--tokens")
        .arg(dir.path().join("tokens.yaml"))
        .arg("--tls-cert")
        .arg(&cert)
        .arg("--tls-key")
        .arg(&key)
        .stderr(Stdio::piped())
        .spawn()
        .map(KillOnDrop)
        .unwrap();
    let mut lines =
        std::io::BufRead::lines(std::io::BufReader::new(serve.0.stderr.take().unwrap()));
    let mut seen = Vec::new();
    let kubeconfig = loop {
        let line = lines.next().expect("serve printed no kubeconfig").unwrap();
        seen.push(line.clone());
        if let Some(path) = line.trim().strip_prefix("export KUBECONFIG=") {
            break path.to_owned();
        }
    };
    std::thread::spawn(move || for _ in lines {});
    assert!(
        seen.iter().any(|l| l.contains("listening on https://")),
        "{seen:?}"
    );
    let run = |kubeconfig: &str, args: &[&str]| {
        std::process::Command::new(kubectl_bin())
            .env("HOME", dir.path())
            .env("KUBECONFIG", kubeconfig)
            .args(["--cache-dir"])
            .arg(dir.path().join("cache"))
            .args(args)
            .arg("--request-timeout=20s")
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    let kubectl = |kubeconfig: &str| run(kubeconfig, &["get", "crds", "-o", "name"]);
    let out = kubectl(&kubeconfig);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("pods.demo.setpoint.dev"),
        "{}",
        text(&out)
    );

    let generated = std::fs::read_to_string(&kubeconfig).unwrap();
    assert!(
        generated.contains("token: admin-token-0123456789"),
        "{generated}"
    );
    let viewer_path = dir.path().join("viewer");
    std::fs::write(
        &viewer_path,
        generated.replace("admin-token-0123456789", viewer),
    )
    .unwrap();
    let viewer_path = viewer_path.to_str().unwrap();
    let out = kubectl(viewer_path);
    assert!(out.status.success(), "{}", text(&out));
    let out = run(viewer_path, &["get", "pods", "-n", "kube-system"]);
    assert!(!out.status.success());
    assert!(
        text(&out).contains(
            r#"User "viewer" cannot list resource "pods" in API group "demo.setpoint.dev" in the namespace "kube-system""#
        ),
        "{}",
        text(&out)
    );
    // The same server without the token is refused.
    let anonymous = std::fs::read_to_string(&kubeconfig)
        .unwrap()
        .lines()
        .filter(|l| !l.trim_start().starts_with("token:"))
        .collect::<Vec<_>>()
        .join("\n")
        .replace("  user:\n", "  user: {}\n");
    let anonymous_path = dir.path().join("anonymous");
    std::fs::write(&anonymous_path, anonymous).unwrap();
    let out = kubectl(anonymous_path.to_str().unwrap());
    assert!(!out.status.success());
    // kubectl asks for credentials after a 401 (and, without a terminal, gives up).
    assert!(
        ["Unauthorized", "provide credentials", "Username"]
            .iter()
            .any(|m| text(&out).contains(m)),
        "{}",
        text(&out)
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

/// The store's revision now, and a subscription from it that must stay
/// silent: what "nothing changed" means for a dry run.
async fn quiet_from_here(host: &TestHost) -> (i64, setpoint::watch::Subscription) {
    let api = host.host.api();
    let revision = api.current_revision().await.unwrap();
    api.hub().wait_for(revision).await;
    (
        revision,
        api.hub().subscribe("/registry/", revision).unwrap(),
    )
}

async fn assert_nothing_changed(
    host: &TestHost,
    (revision, mut watcher): (i64, setpoint::watch::Subscription),
    what: &str,
) {
    assert_eq!(
        host.host.api().current_revision().await.unwrap(),
        revision,
        "{what} moved the store's revision"
    );
    let seen = tokio::time::timeout(Duration::from_millis(200), watcher.next()).await;
    assert!(seen.is_err(), "{what}: a watcher saw a change: {seen:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn kubectl_diff_and_server_side_dry_runs_change_nothing() {
    let host = TestHost::start(&[]).await;
    let kubectl = Kubectl::new(&host.url);
    install_widgets(&kubectl).await;
    let out = kubectl.apply(&widget("w1", json!(3), "blue"), &[]).await;
    assert!(out.status.success(), "{}", text(&out));
    let before: Value =
        serde_json::from_str(&kubectl.ok(&["get", "widget", "w1", "-o", "json"]).await).unwrap();

    // kubectl diff shows the change it would make (exit 1: differences)…
    let file = kubectl.manifest_file("changed.json", &widget("w1", json!(5), "green"));
    let file = file.as_str();
    let quiet = quiet_from_here(&host).await;
    let out = kubectl.run(&["diff", "-f", file]).await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let diff = String::from_utf8_lossy(&out.stdout);
    assert!(
        diff.contains("-  replicas: 3") && diff.contains("+  replicas: 5"),
        "{diff}"
    );
    assert!(diff.contains("+  color: green"), "{diff}");
    assert_nothing_changed(&host, quiet, "kubectl diff").await;

    // … and every --dry-run=server answers as the write would, writing nothing.
    let new_file = kubectl.manifest_file("new.json", &widget("w2", json!(1), "red"));
    let new_file = new_file.as_str();
    let quiet = quiet_from_here(&host).await;
    for (args, says) in [
        (
            vec!["apply", "--dry-run=server", "-f", file],
            "widget.example.com/w1 configured (server dry run)",
        ),
        (
            vec!["apply", "--server-side", "--dry-run=server", "-f", file],
            "widget.example.com/w1 serverside-applied (server dry run)",
        ),
        (
            vec!["apply", "--dry-run=server", "-f", new_file],
            "widget.example.com/w2 created (server dry run)",
        ),
        (
            vec!["create", "--dry-run=server", "-f", new_file],
            "widget.example.com/w2 created (server dry run)",
        ),
        (
            vec![
                "patch",
                "widget",
                "w1",
                "--dry-run=server",
                "--type=merge",
                "-p",
                r#"{"spec":{"replicas":9}}"#,
            ],
            // Not every kubectl version adds "(server dry run)" here.
            "widget.example.com/w1 patched",
        ),
        (
            vec!["delete", "widget", "w1", "--dry-run=server"],
            "widget.example.com \"w1\" deleted (server dry run)",
        ),
    ] {
        let out = kubectl.run(&args).await;
        assert!(out.status.success(), "kubectl {args:?}: {}", text(&out));
        assert!(
            text(&out).contains(says),
            "kubectl {args:?}: {}",
            text(&out)
        );
    }
    // A dry run that the real write would refuse is refused the same way.
    let invalid = kubectl
        .fails(&[
            "patch",
            "widget",
            "w1",
            "--dry-run=server",
            "--type=merge",
            "-p",
            r#"{"spec":{"replicas":-1}}"#,
        ])
        .await;
    assert!(invalid.contains("spec.replicas"), "{invalid}");
    assert_nothing_changed(&host, quiet, "kubectl --dry-run=server").await;

    let after: Value =
        serde_json::from_str(&kubectl.ok(&["get", "widget", "w1", "-o", "json"]).await).unwrap();
    assert_eq!(after, before);
    kubectl.fails(&["get", "widget", "w2"]).await;
    host.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn kubectl_creates_a_generic_secret_from_literals_and_reads_it_back_as_yaml() {
    let host = TestHost::start(&[]).await;
    let kubectl = Kubectl::new(&host.url);
    let out = kubectl
        .ok(&[
            "create",
            "secret",
            "generic",
            "pdns-api",
            "--from-literal=apiKey=s3cr3t",
            "--from-literal=user=admin",
        ])
        .await;
    assert!(out.contains("secret/pdns-api created"), "{out}");

    let yaml = kubectl
        .ok(&["get", "secret", "pdns-api", "-o", "yaml"])
        .await;
    for line in [
        "kind: Secret",
        "apiKey: czNjcjN0",
        "user: YWRtaW4=",
        "type: Opaque",
    ] {
        assert!(yaml.contains(line), "no {line:?} in\n{yaml}");
    }
    let table = kubectl.ok(&["get", "secrets"]).await;
    let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(header, ["NAME", "TYPE", "AGE"], "{table}");

    // stringData through a server-side apply lands in data, base64-encoded.
    let out = kubectl
        .apply(
            &json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "pdns-api"},
                    "stringData": {"apiKey": "rotated"}}),
            &["--server-side", "--force-conflicts"],
        )
        .await;
    assert!(out.status.success(), "{}", text(&out));
    let secret: Value = serde_json::from_str(
        &kubectl
            .ok(&["get", "secret", "pdns-api", "-o", "json"])
            .await,
    )
    .unwrap();
    assert_eq!(secret["data"]["apiKey"], "cm90YXRlZA==");
    assert!(secret.get("stringData").is_none(), "{secret}");

    let err = kubectl
        .fails(&[
            "patch",
            "secret",
            "pdns-api",
            "--type=merge",
            "-p",
            r#"{"data":{"apiKey":"not base64!"}}"#,
        ])
        .await;
    assert!(err.contains("data[apiKey]"), "{err}");
    assert!(!err.contains("not base64!"), "{err}");
    host.stop().await;
}

/// Client-side `kubectl apply` and `kubectl patch` of a built-in kind send
/// a strategic merge patch, which is taken; a custom resource's is
/// refused with 415, as in Kubernetes.
#[tokio::test(flavor = "multi_thread")]
async fn kubectl_applies_and_patches_a_secret_client_side_with_strategic_merge_patches() {
    let host = TestHost::start(&[]).await;
    let kubectl = Kubectl::new(&host.url);
    let secret = |data: Value| {
        json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "creds", "labels": {"team": "a"}}, "data": data})
    };
    let first = kubectl
        .apply(&secret(json!({"user": "YWRtaW4=", "old": "eA=="})), &[])
        .await;
    assert!(first.status.success(), "{}", text(&first));
    // Again, one key changed and one dropped: kubectl diffs against its
    // last-applied annotation and sends a strategic merge patch.
    let again = kubectl
        .apply(&secret(json!({"user": "cm9vdA=="})), &[])
        .await;
    assert!(again.status.success(), "{}", text(&again));
    assert!(
        text(&again).contains("secret/creds configured"),
        "{}",
        text(&again)
    );
    let get = ["get", "secret", "creds", "-o", "json"];
    let stored: Value = serde_json::from_str(&kubectl.ok(&get).await).unwrap();
    assert_eq!(stored["data"], json!({"user": "cm9vdA=="}), "{stored}");
    kubectl
        .ok(&[
            "patch",
            "secret",
            "creds",
            "-p",
            r#"{"metadata":{"labels":{"tier":"db"}}}"#,
        ])
        .await;
    let stored: Value = serde_json::from_str(&kubectl.ok(&get).await).unwrap();
    assert_eq!(
        stored["metadata"]["labels"],
        json!({"team": "a", "tier": "db"})
    );
    host.stop().await;
}
