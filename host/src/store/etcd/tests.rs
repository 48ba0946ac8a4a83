//! The conformance suite against a real etcd (Debian's `etcd-server`),
//! one private etcd process per test on free loopback ports.

use std::process::{Child, Command, Stdio};
use std::sync::Arc;

use super::{EtcdBackend, EtcdConfig};
use crate::store::Backend;

/// A throw-away etcd; killed (and its data removed) on drop.
pub(crate) struct EtcdProcess {
    child: Child,
    _data: tempfile::TempDir,
    pub url: String,
}

impl Drop for EtcdProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub(crate) async fn start_etcd() -> EtcdProcess {
    let data = tempfile::tempdir().unwrap();
    let (client, peer) = (free_port(), free_port());
    let url = format!("http://127.0.0.1:{client}");
    let peer_url = format!("http://127.0.0.1:{peer}");
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
            &peer_url,
            "--initial-advertise-peer-urls",
            &peer_url,
        ])
        .args(["--initial-cluster", &format!("test={peer_url}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("starting etcd (Debian package etcd-server; scripts/test installs it)");
    let process = EtcdProcess {
        child,
        _data: data,
        url,
    };
    for _ in 0..200 {
        if EtcdBackend::connect(EtcdConfig {
            endpoints: vec![process.url.clone()],
            ..Default::default()
        })
        .await
        .is_ok()
        {
            return process;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("etcd did not come up at {}", process.url);
}

async fn make() -> (Arc<dyn Backend>, EtcdProcess) {
    let etcd = start_etcd().await;
    let config = EtcdConfig {
        endpoints: vec![etcd.url.clone()],
        prefix: "/setpoint-test".into(),
        ..Default::default()
    };
    (Arc::new(EtcdBackend::connect(config).await.unwrap()), etcd)
}

crate::store::conformance::conformance_tests!(make);
