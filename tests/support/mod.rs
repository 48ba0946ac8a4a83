//! The test harness: build the plugins once per run, start real hosts, poll
//! for convergence with a failure message that shows the last state seen.

pub mod logs;
pub mod pdns;
pub mod rabbitmq;
pub mod recorder;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use serde_json::Value;
use setpoint::Host;
use setpoint::object::KindInfo;

/// The workspace root.
pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_owned()
}

/// Every plugin the tests use: the examples in `plugins/` and the test guests.
const PLUGINS: &[&str] = &[
    "replicaset",
    "podsim",
    "deployment",
    "stack",
    "flaky",
    "zoo",
    "hijack",
    "squat",
    "rawjson",
    "oldworld",
    "noworld",
    "versioned",
    "versioned2",
    "versioned3",
    "effector",
    "effector2",
    "dns",
    "world01",
    "rabbitmq_vhost",
    "rabbitmq_queue",
    "rabbitmq_exchange",
    "rabbitmq_binding",
    "rabbitmq_user",
    "rabbitmq_permission",
    "rabbitmq_policy",
];

/// The plugins [`plugins_dir`] takes from the WASI build: the zoo's escape
/// attempts and clock report go through WASI's file system, sockets and
/// clocks, which a plugin built without WASI cannot even ask for, and
/// `noworld` is a WASI command (a component with no plugin world).
const WASI_PLUGINS: &[&str] = &["zoo", "noworld"];

/// Build the plugins for `wasm32-unknown-unknown` (the SDK's lean target,
/// core modules the host wraps into components) once per test run; returns
/// the directory holding `<name>.wasm`.
pub fn built_plugins() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| build_plugins("wasm32-unknown-unknown", PLUGINS))
}

/// Build [`WASI_PLUGINS`] for `wasm32-wasip2` (components that import WASI)
/// once per test run; returns the directory holding `<name>.wasm`.
pub fn built_wasi_plugins() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| build_plugins("wasm32-wasip2", WASI_PLUGINS))
}

/// Uses its own target directory so that it never waits on the lock of the
/// cargo that runs the tests.
fn build_plugins(target: &str, plugins: &[&str]) -> PathBuf {
    let target_dir = workspace().join("target").join("wasm");
    let mut cmd = Command::new(env!("CARGO"));
    cmd.current_dir(workspace())
        .args([
            "build",
            "--profile",
            "plugin",
            "--target",
            target,
            "--target-dir",
        ])
        .arg(&target_dir);
    for p in plugins {
        // A crate `rabbitmq-queue` builds `rabbitmq_queue.wasm`.
        cmd.args(["-p", &p.replace('_', "-")]);
    }
    let status = cmd.status().expect("running cargo to build the plugins");
    assert!(
        status.success(),
        "building the Wasm plugins for {target} failed"
    );
    target_dir.join(target).join("plugin")
}

/// A directory holding copies of the named plugins: the zoo built with WASI,
/// the others without.
pub fn plugins_dir(names: &[&str]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for name in names {
        let built = if WASI_PLUGINS.contains(name) {
            built_wasi_plugins()
        } else {
            built_plugins()
        };
        let from = built.join(format!("{name}.wasm"));
        std::fs::copy(&from, dir.path().join(format!("{name}.wasm")))
            .unwrap_or_else(|e| panic!("copying {}: {e}", from.display()));
    }
    dir
}

/// Build the Python plugin (`plugins/python-greeting/build.sh`, with
/// componentize-py) once per test run into `target/python-plugin/`; returns
/// the directory holding `python-greeting.wasm` and its settings file.
pub fn built_python_plugin() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let out = workspace().join("target").join("python-plugin");
        let status = Command::new("bash")
            .arg(workspace().join("plugins/python-greeting/build.sh"))
            .arg(&out)
            .status()
            .expect("running plugins/python-greeting/build.sh");
        assert!(
            status.success(),
            "building the Python plugin failed (is componentize-py installed? scripts/test installs it)"
        );
        out
    })
}

/// A running host with its HTTP API on an ephemeral loopback port.
pub struct TestHost {
    pub host: Arc<Host>,
    pub url: String,
    _plugins: tempfile::TempDir,
    server: tokio::task::JoinHandle<()>,
}

impl TestHost {
    /// Start a host with the named plugins, every one of which must load.
    pub async fn start(plugins: &[&str]) -> Self {
        Self::start_with(plugins, setpoint_server::Config::default()).await
    }

    /// Start a host with the named plugins, every one of which must load,
    /// its API behind the gate `config` (tokens, rate limits, body limit).
    pub async fn start_with(plugins: &[&str], config: setpoint_server::Config) -> Self {
        let host = Self::start_in_with(
            plugins_dir(plugins),
            setpoint::runtime::RuntimeConfig::default(),
            config,
        )
        .await;
        for plugin in host.host.plugins().await {
            assert_eq!(
                plugin.state,
                setpoint::plugins::PluginState::Running,
                "plugin {} failed",
                plugin.name
            );
        }
        host
    }

    /// Start a host on a prepared plugins directory, whatever becomes of its
    /// plugins.
    pub async fn start_in(
        dir: tempfile::TempDir,
        runtime: setpoint::runtime::RuntimeConfig,
    ) -> Self {
        Self::start_in_with(dir, runtime, setpoint_server::Config::default()).await
    }

    /// [`TestHost::start_in`] with the API behind the gate `config`.
    pub async fn start_in_with(
        dir: tempfile::TempDir,
        runtime: setpoint::runtime::RuntimeConfig,
        config: setpoint_server::Config,
    ) -> Self {
        Self::start_in_with_egress(dir, runtime, config, Default::default()).await
    }

    /// [`TestHost::start`] with these egress settings.
    pub async fn start_with_egress(
        plugins: &[&str],
        egress: setpoint::egress::EgressConfig,
    ) -> Self {
        Self::start_in_with_egress(
            plugins_dir(plugins),
            setpoint::runtime::RuntimeConfig::default(),
            setpoint_server::Config::default(),
            egress,
        )
        .await
    }

    /// [`TestHost::start_in_with`] with these egress settings.
    pub async fn start_in_with_egress(
        dir: tempfile::TempDir,
        runtime: setpoint::runtime::RuntimeConfig,
        config: setpoint_server::Config,
        egress: setpoint::egress::EgressConfig,
    ) -> Self {
        let controller = setpoint::controller::Config {
            workers: 2,
            ..Default::default()
        };
        let host = Arc::new(
            Host::builder()
                .plugins_dir(dir.path())
                .controller(controller)
                .runtime(runtime)
                .egress(egress)
                .build()
                .await
                .expect("host starts"),
        );
        let listener = setpoint_server::bind_loopback("127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(
            setpoint_server::serve_with(listener, host.clone(), config, std::future::pending())
                .map_unit(),
        );
        Self {
            host,
            url: format!("http://{addr}"),
            _plugins: dir,
            server,
        }
    }

    /// The host's plugins directory.
    pub fn plugins_path(&self) -> &Path {
        self._plugins.path()
    }

    /// The status of the plugin loaded from `NAME.wasm`.
    pub async fn plugin(&self, file_stem: &str) -> Option<setpoint::plugins::PluginStatus> {
        let path = self.plugins_path().join(format!("{file_stem}.wasm"));
        self.host
            .plugins()
            .await
            .into_iter()
            .find(|p| p.path == path)
    }

    /// A registered kind.
    pub fn kind(&self, kind: &str) -> Arc<KindInfo> {
        self.host
            .api()
            .kinds()
            .require("demo.setpoint.dev/v1", kind)
            .expect("kind registered")
    }

    /// All objects of a kind in `default`.
    pub async fn list(&self, kind: &str) -> Vec<Value> {
        let options = setpoint::api::ListOptions {
            namespace: Some("default".into()),
            ..Default::default()
        };
        self.host
            .api()
            .list(&self.kind(kind), &options)
            .await
            .unwrap()
            .items
    }

    /// One object in `default`, if it exists.
    pub async fn get(&self, kind: &str, name: &str) -> Option<Value> {
        self.host
            .api()
            .get(&self.kind(kind), Some("default"), name)
            .await
            .ok()
    }

    /// Stop the host and its server.
    pub async fn stop(self) {
        self.server.abort();
        self.host.shutdown().await;
    }
}

trait MapUnit {
    fn map_unit(self) -> impl std::future::Future<Output = ()> + Send;
}

impl<F: std::future::Future<Output = std::io::Result<()>> + Send> MapUnit for F {
    async fn map_unit(self) {
        self.await.expect("server failed");
    }
}

/// Poll `check` until it returns `Ok`, or fail after `timeout` showing the
/// last `Err` it returned (the state that did not converge).
pub async fn eventually<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, String>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        match check().await {
            Ok(value) => return value,
            Err(last) => {
                if tokio::time::Instant::now() > deadline {
                    panic!("{what}: not reached within {timeout:?}; last state: {last}");
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// One series of a server's `/metrics` (its name and labels as printed,
/// e.g. `workqueue_depth{name="podsim"}`), if it is there.
pub async fn metric(url: &str, series: &str) -> Option<f64> {
    let text = reqwest::get(format!("{url}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .find(|l| l.starts_with(series))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// A ReplicaSet manifest.
pub fn replicaset(name: &str, replicas: i64, startup_delay_ms: u64) -> Value {
    serde_json::json!({
        "apiVersion": "demo.setpoint.dev/v1",
        "kind": "ReplicaSet",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"startupDelayMs": startup_delay_ms, "image": "nginx"}
            }
        }
    })
}

/// The path of the `setpoint` binary, built if needed.
pub fn setpoint_bin() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        // `scripts/test` builds the whole workspace first and names the
        // binary it built: building it again here with `-p setpoint-cli` would
        // resolve features differently and compile the dependency tree a
        // second time.
        if let Some(bin) = std::env::var_os("SETPOINT_BIN").map(PathBuf::from)
            && bin.exists()
        {
            return bin;
        }
        // The test executable lives in target/<profile>/deps/.
        let exe = std::env::current_exe().unwrap();
        let profile_dir = exe.parent().and_then(Path::parent).unwrap().to_owned();
        let bin = profile_dir.join("setpoint");
        let status = Command::new(env!("CARGO"))
            .current_dir(workspace())
            .args([
                "build",
                "-p",
                "setpoint-cli",
                "--bin",
                "setpoint",
                "--target-dir",
            ])
            .arg(profile_dir.parent().unwrap())
            .status()
            .expect("running cargo to build the setpoint binary");
        assert!(
            status.success() && bin.exists(),
            "building the setpoint binary failed"
        );
        bin
    })
    .clone()
}

/// A `setpoint serve` process started by a test; SIGKILLed on drop.
pub struct ServeProcess {
    pub child: std::process::Child,
    pub url: String,
    /// Every line the process wrote to stderr so far.
    pub log: Arc<std::sync::Mutex<Vec<String>>>,
}

impl ServeProcess {
    /// Run `setpoint serve ARGS… --addr 127.0.0.1:0` and wait until it listens.
    pub fn start<I, S>(args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<std::ffi::OsStr>,
    {
        Self::start_with_env(args, &[])
    }

    /// [`ServeProcess::start`] with extra environment variables.
    pub fn start_with_env<I, S>(args: I, env: &[(&str, &str)]) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<std::ffi::OsStr>,
    {
        use std::io::{BufRead, BufReader};
        let mut child = Command::new(setpoint_bin())
            .arg("serve")
            .args(args)
            .args(["--addr", "127.0.0.1:0"])
            .env("NO_COLOR", "1")
            .envs(env.iter().copied())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("starting setpoint serve");
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let mut before = Vec::new();
        let url = loop {
            let line = lines
                .next()
                .expect("serve exited before listening")
                .unwrap();
            if let Some(rest) = line.split("listening on ").nth(1) {
                break rest.split_whitespace().next().unwrap().to_owned();
            }
            before.push(line);
        };
        // Keep draining the log so the server never blocks on a full pipe.
        let log = Arc::new(std::sync::Mutex::new(before));
        let sink = log.clone();
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                sink.lock().unwrap().push(line);
            }
        });
        Self { child, url, log }
    }

    /// Kill the process the way a crash would: SIGKILL, no shutdown.
    pub fn kill9(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }
}

impl Drop for ServeProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A throw-away etcd (Debian's `etcd-server`) on free loopback ports; killed
/// and its data removed on drop.
pub struct EtcdProcess {
    child: std::process::Child,
    _data: tempfile::TempDir,
    pub url: String,
}

impl EtcdProcess {
    pub async fn start() -> Self {
        let free_port = || {
            std::net::TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port()
        };
        let data = tempfile::tempdir().unwrap();
        let url = format!("http://127.0.0.1:{}", free_port());
        let peer = format!("http://127.0.0.1:{}", free_port());
        let child = Command::new(std::env::var("ETCD_BIN").unwrap_or_else(|_| "etcd".into()))
            .args(["--name", "test", "--data-dir"])
            .arg(data.path())
            .args([
                "--listen-client-urls",
                &url,
                "--advertise-client-urls",
                &url,
            ])
            .args([
                "--listen-peer-urls",
                &peer,
                "--initial-advertise-peer-urls",
                &peer,
            ])
            .args(["--initial-cluster", &format!("test={peer}")])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("starting etcd (Debian package etcd-server; scripts/test installs it)");
        let process = Self {
            child,
            _data: data,
            url,
        };
        eventually("etcd answers", Duration::from_secs(20), || async {
            match reqwest::get(format!("{}/health", process.url)).await {
                Ok(r) if r.status().is_success() => Ok(()),
                other => Err(format!("{other:?}")),
            }
        })
        .await;
        process
    }
}

impl Drop for EtcdProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Wait until the ReplicaSet `name` reports `n` ready replicas for its
/// current generation.
pub async fn replicaset_ready(host: &TestHost, name: &str, n: i64) {
    eventually(
        &format!("replicaset {name} has {n} ready replicas"),
        Duration::from_secs(60),
        || async {
            let rs = host.get("ReplicaSet", name).await.ok_or("no replicaset")?;
            if rs["status"]["readyReplicas"] == serde_json::json!(n)
                && rs["status"]["observedGeneration"] == rs["metadata"]["generation"]
            {
                Ok(())
            } else {
                Err(rs["status"].to_string())
            }
        },
    )
    .await
}

/// The `Ready` condition of an object, if any.
pub fn ready_condition(object: &Value) -> Option<Value> {
    object["status"]["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == "Ready").cloned())
}

/// Create or replace the `PluginGrant` of `plugin` with `spec`.
pub async fn grant(host: &TestHost, plugin: &str, spec: Value) {
    let api = host.host.api();
    let kind = api
        .kinds()
        .require("setpoint.dev/v1", "PluginGrant")
        .unwrap();
    let object = serde_json::json!({"apiVersion": "setpoint.dev/v1", "kind": "PluginGrant",
        "metadata": {"name": plugin}, "spec": spec});
    match api.get(&kind, None, plugin).await {
        Ok(current) => {
            let mut next = current.clone();
            next["spec"] = object["spec"].clone();
            api.update(&kind, next).await.unwrap();
        }
        Err(_) => {
            api.create(&kind, object).await.unwrap();
        }
    }
}

/// Warning events recorded about the object named `name` in `default`.
pub async fn warnings_about(host: &TestHost, name: &str) -> Vec<Value> {
    events_about(host, name)
        .await
        .into_iter()
        .filter(|e| e["type"] == "Warning")
        .collect()
}

/// Every event recorded about the object named `name` in `default`.
pub async fn events_about(host: &TestHost, name: &str) -> Vec<Value> {
    let api = host.host.api();
    api.list(
        &api.kinds().by_plural("", "events").unwrap(),
        &setpoint::api::ListOptions {
            namespace: Some("default".into()),
            ..Default::default()
        },
    )
    .await
    .unwrap()
    .items
    .into_iter()
    .filter(|e| e["involvedObject"]["name"] == name)
    .collect()
}

/// The URL of the demo Pods collection in `namespace` on `host`.
pub fn pods(host: &TestHost, namespace: &str) -> String {
    format!(
        "{}/apis/demo.setpoint.dev/v1/namespaces/{namespace}/pods",
        host.url
    )
}

/// A demo Pod that stays `Pending` for the length of a test (podsim starts
/// it only after 100 s).
pub fn pod(name: &str) -> serde_json::Value {
    serde_json::json!({"apiVersion": "demo.setpoint.dev/v1", "kind": "Pod",
           "metadata": {"name": name}, "spec": {"startupDelayMs": 100000}})
}

/// Every change to the demo group's objects from `revision` on, in order.
pub fn record(
    host: &setpoint::Host,
    revision: i64,
) -> Arc<std::sync::Mutex<Vec<Arc<setpoint::watch::Event>>>> {
    let events: Arc<std::sync::Mutex<Vec<Arc<setpoint::watch::Event>>>> = Arc::default();
    let mut subscription = host
        .api()
        .hub()
        .subscribe("/registry/demo.setpoint.dev/", revision)
        .expect("subscribe");
    let sink = events.clone();
    tokio::spawn(async move {
        while let Ok(event) = subscription.next().await {
            sink.lock().unwrap().push(event);
        }
    });
    events
}

/// Whether a Pod is ready and not being deleted.
pub fn is_ready_pod(pod: &serde_json::Value) -> bool {
    setpoint::object::meta::deletion_timestamp(pod).is_none()
        && pod["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "Ready" && c["status"] == "True")
}
