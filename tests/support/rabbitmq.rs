//! A throw-away RabbitMQ broker (Debian's `rabbitmq-server`, with its
//! `rabbitmq_management` plugin) for the RabbitMQ provider's tests: a node
//! of its own (its own name, AMQP, distribution and management ports on
//! loopback, its own data, log and cookie folder), so it never meets the
//! system service or another test's broker. As root the broker runs as the
//! `rabbitmq` user (the folders are handed to it), as the packaged server
//! does; as another user it runs as that user. It is killed on drop.
//! `scripts/test` installs the package.
//!
//! Besides the management API the tests check the broker itself: a user's
//! password with `rabbitmqctl authenticate_user`, and messages published to
//! and taken from queues through the management API.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::process::{Child, Command};

/// The packaged server's scripts (Debian puts the real ones here; the
/// `/usr/sbin` wrappers insist on the system service's folders).
const RABBITMQ_BIN: &str = "/usr/lib/rabbitmq/bin";

/// A running broker.
pub struct RabbitMq {
    dir: tempfile::TempDir,
    child: Option<Child>,
    node: String,
    web_port: u16,
    admin_password: String,
    /// Whether the broker runs as the `rabbitmq` user (the tests run as
    /// root).
    as_rabbitmq: bool,
}

/// The name of the administrator the tests create (`guest` is kept for
/// the harness alone).
pub const ADMIN: &str = "setpoint-admin";

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn is_root() -> bool {
    std::process::Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|out| out.stdout.trim_ascii() == b"0")
}

impl RabbitMq {
    /// Configure and start a node; returns once its management API
    /// answers, with an administrator [`ADMIN`] made (its password:
    /// [`RabbitMq::admin_password`]).
    pub async fn start() -> Self {
        assert!(
            Path::new(RABBITMQ_BIN).join("rabbitmq-server").exists(),
            "{RABBITMQ_BIN}/rabbitmq-server is missing (Debian package rabbitmq-server; \
             scripts/test installs it)"
        );
        let dir = tempfile::Builder::new()
            .prefix("setpoint-rabbitmq-")
            .tempdir()
            .unwrap();
        let (amqp_port, web_port) = (free_port(), free_port());
        let config = format!(
            "listeners.tcp.default = 127.0.0.1:{amqp_port}\n\
             management.tcp.port = {web_port}\n\
             management.tcp.ip = 127.0.0.1\n\
             loopback_users = none\n\
             collect_statistics_interval = 500\n\
             log.console = true\n\
             log.console.level = warning\n\
             log.file = false\n"
        );
        std::fs::write(dir.path().join("rabbitmq.conf"), config).unwrap();
        std::fs::write(
            dir.path().join("enabled_plugins"),
            "[rabbitmq_management].\n",
        )
        .unwrap();
        let as_rabbitmq = is_root();
        if as_rabbitmq {
            // The broker drops to its own user; it must own its folders
            // (and the temporary directory must let it in).
            let status = std::process::Command::new("chown")
                .args(["-R", "rabbitmq:rabbitmq"])
                .arg(dir.path())
                .status()
                .unwrap();
            assert!(status.success(), "chown to rabbitmq");
        }
        let mut broker = Self {
            node: format!("setpoint-test-{amqp_port}@localhost"),
            dir,
            child: None,
            web_port,
            admin_password: format!("admin-{}", fastrand::u64(..)),
            as_rabbitmq,
        };
        broker.launch().await;
        let made = broker
            .request(reqwest::Method::PUT, &format!("/api/users/{ADMIN}"))
            .basic_auth("guest", Some("guest"))
            .json(&json!({"password": broker.admin_password, "tags": "administrator"}))
            .send()
            .await
            .unwrap();
        assert!(made.status().is_success(), "{}", made.text().await.unwrap());
        let allowed = broker
            .request(
                reqwest::Method::PUT,
                &format!("/api/permissions/%2F/{ADMIN}"),
            )
            .basic_auth("guest", Some("guest"))
            .json(&json!({"configure": ".*", "write": ".*", "read": ".*"}))
            .send()
            .await
            .unwrap();
        assert!(allowed.status().is_success());
        broker
    }

    /// The environment every `rabbitmq-*` command of this node needs.
    fn command(&self, program: &str) -> Command {
        let path = self.dir.path();
        let mut command = if self.as_rabbitmq {
            let mut command = Command::new("setpriv");
            command
                .args(["--reuid=rabbitmq", "--regid=rabbitmq", "--init-groups"])
                .arg(Path::new(RABBITMQ_BIN).join(program));
            command
        } else {
            Command::new(Path::new(RABBITMQ_BIN).join(program))
        };
        command
            .env_clear()
            .env("PATH", "/usr/bin:/bin:/usr/sbin:/sbin")
            .env("HOME", path)
            .env("LANG", "C.UTF-8")
            .env("RABBITMQ_NODENAME", &self.node)
            .env("RABBITMQ_DIST_PORT", free_port().to_string())
            .env("RABBITMQ_CONFIG_FILE", path.join("rabbitmq.conf"))
            .env(
                "RABBITMQ_ENABLED_PLUGINS_FILE",
                path.join("enabled_plugins"),
            )
            .env("RABBITMQ_MNESIA_BASE", path.join("mnesia"))
            .env("RABBITMQ_LOG_BASE", path.join("log"))
            .current_dir(path);
        command
    }

    async fn launch(&mut self) {
        let log = std::fs::File::create(self.dir.path().join("broker.log")).unwrap();
        let child = self
            .command("rabbitmq-server")
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            // Its own process group: the node's helpers (erl_child_setup,
            // inet_gethost) go with it on drop.
            .process_group(0)
            .kill_on_drop(true)
            .spawn()
            .expect("starting rabbitmq-server");
        self.child = Some(child);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(Ok(Some(status))) = self.child.as_mut().map(Child::try_wait) {
                panic!("rabbitmq-server exited ({status}): {}", self.log());
            }
            let answer = self
                .request(reqwest::Method::GET, "/api/overview")
                .basic_auth("guest", Some("guest"))
                .send()
                .await;
            match answer {
                Ok(r) if r.status().is_success() => return,
                other if tokio::time::Instant::now() > deadline => {
                    panic!(
                        "RabbitMQ did not answer within 60 s: {other:?}\n{}",
                        self.log()
                    )
                }
                _ => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
    }

    /// The management API's base URL, e.g. `http://127.0.0.1:15672`.
    pub fn api_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.web_port)
    }

    /// [`ADMIN`]'s password.
    pub fn admin_password(&self) -> &str {
        &self.admin_password
    }

    /// What the broker logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("broker.log")).unwrap_or_default()
    }

    fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        reqwest::Client::new().request(method, format!("{}{path}", self.api_url()))
    }

    /// A request to the management API as [`ADMIN`].
    pub fn admin(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        self.request(method, path)
            .basic_auth(ADMIN, Some(&self.admin_password))
    }

    /// `GET path` as [`ADMIN`]: `None` for 404, the JSON otherwise.
    pub async fn get(&self, path: &str) -> Option<Value> {
        let response = self.admin(reqwest::Method::GET, path).send().await.unwrap();
        match response.status().as_u16() {
            404 => None,
            200 => Some(response.json().await.unwrap()),
            other => panic!("GET {path}: {other} {}", response.text().await.unwrap()),
        }
    }

    /// `method path` with `body` as [`ADMIN`] (a change behind the
    /// controller's back); panics unless the broker accepts it.
    pub async fn send(&self, method: reqwest::Method, path: &str, body: Option<Value>) {
        let mut request = self.admin(method.clone(), path);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.unwrap();
        assert!(
            response.status().is_success(),
            "{method} {path}: {} {}",
            response.status(),
            response.text().await.unwrap()
        );
    }

    /// Publish `payload` to `exchange` in `vhost` with `routing_key`, as
    /// `user`/`password` (the management API's publish, which needs the
    /// user to have a management tag and write permission); whether the
    /// message was routed to a queue.
    pub async fn publish(
        &self,
        (user, password): (&str, &str),
        vhost: &str,
        exchange: &str,
        routing_key: &str,
        payload: &str,
    ) -> Result<bool, String> {
        let path = format!(
            "/api/exchanges/{}/{}/publish",
            encode(vhost),
            encode(exchange)
        );
        let response = self
            .request(reqwest::Method::POST, &path)
            .basic_auth(user, Some(password))
            .json(&json!({"properties": {}, "routing_key": routing_key,
                "payload": payload, "payload_encoding": "string"}))
            .send()
            .await
            .map_err(|e| e.to_string())?;
        let status = response.status();
        let body: Value = response.json().await.map_err(|e| e.to_string())?;
        if !status.is_success() {
            return Err(format!("{status}: {body}"));
        }
        Ok(body["routed"] == true)
    }

    /// Take up to `count` messages from `queue` (acknowledged), as
    /// `user`/`password`: their payloads.
    pub async fn take(
        &self,
        (user, password): (&str, &str),
        vhost: &str,
        queue: &str,
        count: u32,
    ) -> Result<Vec<String>, String> {
        let path = format!("/api/queues/{}/{}/get", encode(vhost), encode(queue));
        let response = self
            .request(reqwest::Method::POST, &path)
            .basic_auth(user, Some(password))
            .json(&json!({"count": count, "ackmode": "ack_requeue_false",
                "encoding": "auto"}))
            .send()
            .await
            .map_err(|e| e.to_string())?;
        let status = response.status();
        let body: Value = response.json().await.map_err(|e| e.to_string())?;
        if !status.is_success() {
            return Err(format!("{status}: {body}"));
        }
        Ok(body
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|m| m["payload"].as_str().map(str::to_owned))
            .collect())
    }

    /// Whether the broker accepts `password` for `user`, asked of the
    /// broker itself (`rabbitmqctl authenticate_user`), not of the
    /// management API.
    pub async fn authenticates(&self, user: &str, password: &str) -> bool {
        let out = self
            .command("rabbitmqctl")
            .args(["-n", &self.node, "authenticate_user", user, password])
            .output()
            .await
            .expect("rabbitmqctl");
        let said = String::from_utf8_lossy(&out.stdout);
        let err = String::from_utf8_lossy(&out.stderr);
        match out.status.code() {
            Some(0) => true,
            // Refused credentials exit with "data error".
            Some(65) => false,
            other => panic!("rabbitmqctl authenticate_user: {other:?}: {said} {err}"),
        }
    }
}

/// A name as one path segment of the management API (`/` is `%2F`).
pub fn encode(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for b in name.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

impl Drop for RabbitMq {
    fn drop(&mut self) {
        if let Some(child) = &self.child
            && let Some(pid) = child.id()
        {
            // The whole group: the shell script, the Erlang VM, its helpers.
            let _ = std::process::Command::new("kill")
                .args(["-KILL", "--", &format!("-{pid}")])
                .status();
        }
    }
}
