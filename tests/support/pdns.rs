//! A throw-away PowerDNS authoritative server (Debian's `pdns-server` with
//! `pdns-backend-sqlite3`) for the DNS provider's tests: started as the
//! current user from a config directory of its own, on free loopback ports
//! (DNS and the HTTP API), with a fresh SQLite database; no system service
//! is used or touched. It can be stopped and started again on the same
//! ports and data (PowerDNS going away and coming back), and is killed on
//! drop. `scripts/test` installs the packages.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::process::{Child, Command};

/// Where Debian's `pdns-backend-sqlite3` keeps the database schema.
const SCHEMA: &str = "/usr/share/pdns-backend-sqlite3/schema/schema.sqlite3.sql";

/// A running (or stopped) PowerDNS.
pub struct PowerDns {
    dir: tempfile::TempDir,
    child: Option<Child>,
    dns_port: u16,
    web_port: u16,
    api_key: String,
}

/// A loopback port free for both UDP and TCP (DNS listens on both).
fn free_port() -> u16 {
    loop {
        let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let port = udp.local_addr().unwrap().port();
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

/// `pdns_server`: `$SETPOINT_PDNS_SERVER`, else `/usr/sbin/pdns_server`
/// (not on a non-root user's `PATH` on Debian), else the `PATH`'s.
fn pdns_server_bin() -> PathBuf {
    if let Some(bin) = std::env::var_os("SETPOINT_PDNS_SERVER") {
        return bin.into();
    }
    let debian = PathBuf::from("/usr/sbin/pdns_server");
    if debian.exists() {
        debian
    } else {
        "pdns_server".into()
    }
}

impl PowerDns {
    /// Create the database and configuration and start the server; returns
    /// once its API answers.
    pub async fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let database = dir.path().join("pdns.sqlite3");
        let schema = std::fs::read(SCHEMA).unwrap_or_else(|e| {
            panic!("{SCHEMA}: {e} (Debian package pdns-backend-sqlite3; scripts/test installs it)")
        });
        let mut sqlite = std::process::Command::new("sqlite3")
            .arg(&database)
            .stdin(Stdio::piped())
            .spawn()
            .expect("sqlite3 (Debian package sqlite3; scripts/test installs it)");
        std::io::Write::write_all(&mut sqlite.stdin.take().unwrap(), &schema).unwrap();
        assert!(sqlite.wait().unwrap().success(), "creating the schema");

        let (dns_port, web_port) = (free_port(), free_port());
        let api_key = format!("test-key-{}", fastrand::u64(..));
        // No caches: a test reads what the last write left, at once.
        let config = format!(
            "launch=gsqlite3\n\
             gsqlite3-database={database}\n\
             gsqlite3-pragma-journal-mode=WAL\n\
             local-address=127.0.0.1\n\
             local-port={dns_port}\n\
             api=yes\n\
             api-key={api_key}\n\
             webserver=yes\n\
             webserver-address=127.0.0.1\n\
             webserver-port={web_port}\n\
             webserver-allow-from=127.0.0.1\n\
             daemon=no\n\
             guardian=no\n\
             socket-dir={socket_dir}\n\
             disable-syslog=yes\n\
             cache-ttl=0\n\
             negquery-cache-ttl=0\n\
             query-cache-ttl=0\n\
             zone-cache-refresh-interval=0\n\
             security-poll-suffix=\n\
             loglevel=4\n",
            database = database.display(),
            socket_dir = dir.path().display(),
        );
        std::fs::write(dir.path().join("pdns.conf"), config).unwrap();
        let mut pdns = Self {
            dir,
            child: None,
            dns_port,
            web_port,
            api_key,
        };
        pdns.resume().await;
        pdns
    }

    /// The API's base URL, e.g. `http://127.0.0.1:8081`.
    pub fn api_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.web_port)
    }

    /// The API key (`X-API-Key`).
    pub fn api_key(&self) -> &str {
        &self.api_key
    }

    /// Stop the server (SIGKILL, as a crash would); the data stays.
    pub async fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill().await;
        }
    }

    /// Start the server again on the same ports and data.
    pub async fn resume(&mut self) {
        assert!(self.child.is_none(), "PowerDNS is running already");
        let log = std::fs::File::create(self.dir.path().join("pdns.log")).unwrap();
        let child = Command::new(pdns_server_bin())
            .arg(format!("--config-dir={}", self.dir.path().display()))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .expect("starting pdns_server (Debian package pdns-server; scripts/test installs it)");
        self.child = Some(child);
        let http = reqwest::Client::new();
        let url = format!("{}/api/v1/servers/localhost", self.api_url());
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(Ok(Some(status))) = self.child.as_mut().map(Child::try_wait) {
                panic!("pdns_server exited ({status}): {}", self.log());
            }
            let answer = http
                .get(&url)
                .header("X-API-Key", &self.api_key)
                .send()
                .await;
            match answer {
                Ok(r) if r.status().is_success() => return,
                other if tokio::time::Instant::now() > deadline => {
                    panic!(
                        "PowerDNS did not answer within 20 s: {other:?}\n{}",
                        self.log()
                    )
                }
                _ => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    }

    /// What the server logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("pdns.log")).unwrap_or_default()
    }

    /// A request to the API, with the key.
    fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        reqwest::Client::new()
            .request(
                method,
                format!("{}/api/v1/servers/localhost{path}", self.api_url()),
            )
            .header("X-API-Key", &self.api_key)
    }

    /// Create a native zone (`zone` with its trailing dot) with no records
    /// but its SOA.
    pub async fn create_zone(&self, zone: &str) {
        let response = self
            .request(reqwest::Method::POST, "/zones")
            .json(&json!({"name": zone, "kind": "Native", "nameservers": []}))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 201, "{}", response.text().await.unwrap());
    }

    /// Change RRsets of `zone` directly (as someone editing PowerDNS behind
    /// the controller's back would): `rrsets` as the API takes them.
    pub async fn patch_rrsets(&self, zone: &str, rrsets: Value) {
        let response = self
            .request(reqwest::Method::PATCH, &format!("/zones/{zone}"))
            .json(&json!({ "rrsets": rrsets }))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 204, "{}", response.text().await.unwrap());
    }

    /// The RRset `name`/`rtype` of `zone` as the API shows it, if any.
    pub async fn rrset(&self, zone: &str, name: &str, rtype: &str) -> Option<Value> {
        self.rrsets(zone)
            .await
            .into_iter()
            .find(|r| r["name"] == name && r["type"] == rtype)
    }

    /// Every RRset of `zone` as the API shows it (one read of the zone).
    pub async fn rrsets(&self, zone: &str) -> Vec<Value> {
        let zone: Value = self
            .request(reqwest::Method::GET, &format!("/zones/{zone}"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        zone["rrsets"].as_array().cloned().unwrap_or_default()
    }

    /// Ask the server over DNS (`dig +short`): the answers' data, sorted.
    pub async fn query(&self, name: &str, rtype: &str) -> Vec<String> {
        let out = Command::new("dig")
            .arg("@127.0.0.1")
            .args(["-p", &self.dns_port.to_string()])
            .args(["+short", "+tries=1", "+time=2", name, rtype])
            .output()
            .await
            .expect("dig (Debian package dnsutils; scripts/test installs it)");
        assert!(
            out.status.success(),
            "dig {name} {rtype}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let mut answers: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_owned)
            .collect();
        answers.sort();
        answers
    }

    /// Ask over DNS for the TTL of the first answer to `name`/`rtype`.
    pub async fn query_ttl(&self, name: &str, rtype: &str) -> Option<u32> {
        let out = Command::new("dig")
            .arg("@127.0.0.1")
            .args(["-p", &self.dns_port.to_string()])
            .args(["+noall", "+answer", "+tries=1", "+time=2", name, rtype])
            .output()
            .await
            .expect("dig");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .next()
            .and_then(|line| line.split_whitespace().nth(1)?.parse().ok())
    }
}

/// A `DnsRecord` `name` in `default` for zone `example.test`: an A record
/// of `records` with `ttl`, kept in the PowerDNS at `server_url` with the
/// API key of Secret `default/pdns-api` (key `api-key`).
pub fn dns_record(server_url: &str, name: &str, records: &[&str], ttl: u32) -> Value {
    json!({"apiVersion": "dns.setpoint.dev/v1", "kind": "DnsRecord",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"zone": "example.test", "name": name, "type": "A", "ttl": ttl,
                 "records": records,
                 "server": {"url": server_url,
                            "apiKeySecretRef": {"name": "pdns-api", "key": "api-key"}}}})
}
