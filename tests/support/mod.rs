//! The test harness: build the plugins once per run, start real hosts, poll
//! for convergence with a failure message that shows the last state seen.

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
const PLUGINS: &[&str] = &["replicaset", "podsim", "flaky"];

/// Build the plugins for wasm32-wasip2 once per test run; returns the
/// directory holding `<name>.wasm`. Uses its own target directory so that it
/// never waits on the lock of the cargo that runs the tests.
pub fn built_plugins() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let target = workspace().join("target").join("wasm");
        let mut cmd = Command::new(env!("CARGO"));
        cmd.current_dir(workspace())
            .args([
                "build",
                "--profile",
                "plugin",
                "--target",
                "wasm32-wasip2",
                "--target-dir",
            ])
            .arg(&target);
        for p in PLUGINS {
            cmd.args(["-p", p]);
        }
        let status = cmd.status().expect("running cargo to build the plugins");
        assert!(status.success(), "building the Wasm plugins failed");
        target.join("wasm32-wasip2").join("plugin")
    })
}

/// A directory holding copies of the named plugins.
pub fn plugins_dir(names: &[&str]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for name in names {
        let from = built_plugins().join(format!("{name}.wasm"));
        std::fs::copy(&from, dir.path().join(format!("{name}.wasm")))
            .unwrap_or_else(|e| panic!("copying {}: {e}", from.display()));
    }
    dir
}

/// A running host with its HTTP API on an ephemeral loopback port.
pub struct TestHost {
    pub host: Arc<Host>,
    pub url: String,
    _plugins: tempfile::TempDir,
    server: tokio::task::JoinHandle<()>,
}

impl TestHost {
    /// Start a host with the named plugins.
    pub async fn start(plugins: &[&str]) -> Self {
        Self::start_with(plugins, setpoint::server::Config::default()).await
    }

    /// Start a host with the named plugins, its API behind the gate `config`
    /// (tokens, rate limits, body limit).
    pub async fn start_with(plugins: &[&str], config: setpoint::server::Config) -> Self {
        let dir = plugins_dir(plugins);
        let controller = setpoint::controller::Config {
            workers: 2,
            ..Default::default()
        };
        let host = Arc::new(
            Host::builder()
                .plugins_dir(dir.path())
                .controller(controller)
                .build()
                .await
                .expect("host starts"),
        );
        for plugin in host.plugins().await {
            assert_eq!(
                plugin.state,
                setpoint::plugins::PluginState::Running,
                "plugin {} failed",
                plugin.name
            );
        }
        let listener = setpoint::server::bind_loopback("127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(
            setpoint::server::serve_with(listener, host.clone(), config, std::future::pending())
                .map_unit(),
        );
        Self {
            host,
            url: format!("http://{addr}"),
            _plugins: dir,
            server,
        }
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
        // The test executable lives in target/<profile>/deps/.
        let exe = std::env::current_exe().unwrap();
        let profile_dir = exe.parent().and_then(Path::parent).unwrap().to_owned();
        let bin = profile_dir.join("setpoint");
        let status = Command::new(env!("CARGO"))
            .current_dir(workspace())
            .args([
                "build",
                "-p",
                "setpoint",
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
