//! Three `setpoint serve --cluster` processes on one real etcd share the
//! work: objects spread over the hosts by shard, a `kill -9`ed host's
//! objects are taken over within the lease time, a host cut off from etcd
//! stops reconciling until it rejoins, everything converges, and — checked
//! from the record every reconcile leaves in its host's log — no object is
//! ever reconciled by two hosts at the same time.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::broadcast;

use crate::support::{EtcdProcess, ServeProcess, eventually, plugins_dir, replicaset};

const SHARDS: u32 = 16;
const LEASE_TTL_S: u64 = 3;
const REPLICASETS: &str = "/apis/demo.setpoint.dev/v1/namespaces/default/replicasets";

/// A TCP proxy in front of etcd that can be cut (every connection dropped,
/// new ones refused) and healed: a network partition between one host and
/// etcd.
struct Proxy {
    url: String,
    cut: Arc<AtomicBool>,
    kill: broadcast::Sender<()>,
}

impl Proxy {
    async fn start(target_url: &str) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let target = target_url.trim_start_matches("http://").to_owned();
        let cut = Arc::new(AtomicBool::new(false));
        let (kill, _) = broadcast::channel(1);
        let (is_cut, killer) = (cut.clone(), kill.clone());
        tokio::spawn(async move {
            loop {
                let Ok((mut inbound, _)) = listener.accept().await else {
                    return;
                };
                if is_cut.load(Ordering::SeqCst) {
                    continue; // dropped: connection reset
                }
                let mut killed = killer.subscribe();
                let target = target.clone();
                tokio::spawn(async move {
                    let Ok(mut outbound) = TcpStream::connect(&target).await else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                        _ = killed.recv() => {}
                    }
                });
            }
        });
        Self { url, cut, kill }
    }

    fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
        let _ = self.kill.send(());
    }

    fn heal(&self) {
        self.cut.store(false, Ordering::SeqCst);
    }
}

/// One reconcile, as its host logged it.
#[derive(Debug, Clone)]
struct Record {
    host: String,
    object: String,
    start_us: u64,
    end_us: u64,
}

/// `name=value` out of a tracing line (values may be quoted).
fn field<'a>(line: &'a str, name: &str) -> Option<&'a str> {
    let at = line.find(&format!(" {name}="))? + name.len() + 2;
    let rest = &line[at..];
    let value = match rest.strip_prefix('"') {
        Some(quoted) => &quoted[..quoted.find('"')?],
        None => rest.split_whitespace().next()?,
    };
    Some(value)
}

fn records(host: &ServeProcess) -> Vec<Record> {
    host.log
        .lock()
        .unwrap()
        .iter()
        .filter(|l| l.contains("setpoint::reconcile") && l.contains(" reconciled"))
        .map(|line| Record {
            host: field(line, "host").expect(line).to_owned(),
            object: format!(
                "{}:{}",
                field(line, "kind").expect(line),
                field(line, "object").expect(line)
            ),
            start_us: field(line, "start_us").expect(line).parse().unwrap(),
            end_us: field(line, "end_us").expect(line).parse().unwrap(),
        })
        .collect()
}

/// On a failure, the hosts' logs say why: dump them.
struct DumpLogsOnPanic(Vec<(&'static str, Arc<std::sync::Mutex<Vec<String>>>)>);

impl Drop for DumpLogsOnPanic {
    fn drop(&mut self) {
        if std::thread::panicking() {
            for (id, log) in &self.0 {
                for line in log.lock().unwrap().iter() {
                    if !line.contains("setpoint::reconcile") {
                        eprintln!("[{id}] {line}");
                    }
                }
            }
        }
    }
}

fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64
}

fn serve(etcd_url: &str, id: &str, plugins: &std::path::Path) -> ServeProcess {
    ServeProcess::start_with_env(
        [
            "--etcd",
            etcd_url,
            "--cluster",
            "--host-id",
            id,
            "--lease-ttl",
            &LEASE_TTL_S.to_string(),
            "--shards",
            &SHARDS.to_string(),
            "--plugins",
            &plugins.display().to_string(),
        ],
        &[("SETPOINT_LOG", "info,setpoint::reconcile=debug")],
    )
}

async fn cluster_status(http: &reqwest::Client, host: &ServeProcess) -> Result<Value, String> {
    http.get(format!("{}/setpoint/v1/cluster", host.url))
        .send()
        .await
        .map_err(|e| e.to_string())?
        .json()
        .await
        .map_err(|e| e.to_string())
}

/// Wait until every host in `hosts` sees exactly `ids` as members and holds
/// exactly the shards the rendezvous assigns it.
async fn settled(http: &reqwest::Client, hosts: &[(&str, &ServeProcess)]) {
    let ids: Vec<String> = {
        let mut ids: Vec<String> = hosts.iter().map(|(id, _)| id.to_string()).collect();
        ids.sort();
        ids
    };
    eventually(
        &format!("{ids:?} settle the shards"),
        Duration::from_secs(30),
        || async {
            for (id, host) in hosts {
                let status = cluster_status(http, host).await?;
                if status["members"] != json!(ids) {
                    return Err(format!("{id} sees {}", status["members"]));
                }
                let expected: Vec<u32> = (0..SHARDS)
                    .filter(|s| setpoint::cluster::owner_of(*s, &ids) == Some(*id))
                    .collect();
                if status["held"] != json!(expected) {
                    return Err(format!(
                        "{id} holds {}, expected {expected:?}",
                        status["held"]
                    ));
                }
            }
            Ok(())
        },
    )
    .await;
}

/// Wait until every ReplicaSet has `n` ready replicas for its current spec.
async fn converged(http: &reqwest::Client, host: &ServeProcess, names: &[String], n: i64) {
    eventually(
        &format!("every replicaset has {n} ready replicas"),
        Duration::from_secs(60),
        || async {
            let list: Value = http
                .get(format!("{}{REPLICASETS}", host.url))
                .send()
                .await
                .map_err(|e| e.to_string())?
                .json()
                .await
                .map_err(|e| e.to_string())?;
            let items = list["items"].as_array().cloned().unwrap_or_default();
            let done = items
                .iter()
                .filter(|rs| {
                    rs["status"]["readyReplicas"] == json!(n)
                        && rs["status"]["observedGeneration"] == rs["metadata"]["generation"]
                })
                .count();
            if items.len() == names.len() && done == names.len() {
                Ok(())
            } else {
                Err(format!("{done} of {} converged", items.len()))
            }
        },
    )
    .await;
}

async fn scale(http: &reqwest::Client, host: &ServeProcess, names: &[String], n: i64) {
    for name in names {
        let response = http
            .patch(format!("{}{REPLICASETS}/{name}", host.url))
            .header("Content-Type", "application/merge-patch+json")
            .json(&json!({"spec": {"replicas": n}}))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "scaling {name}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_hosts_share_the_work_survive_a_kill_and_a_partition_and_never_overlap() {
    let etcd = EtcdProcess::start().await;
    let proxy = Proxy::start(&etcd.url).await;
    let plugins = plugins_dir(&["replicaset", "podsim"]);
    let http = reqwest::Client::new();

    let h1 = serve(&etcd.url, "h1", plugins.path());
    let h2 = serve(&etcd.url, "h2", plugins.path());
    let h3 = serve(&proxy.url, "h3", plugins.path());
    let _dump = DumpLogsOnPanic(vec![
        ("h1", h1.log.clone()),
        ("h2", h2.log.clone()),
        ("h3", h3.log.clone()),
    ]);
    settled(&http, &[("h1", &h1), ("h2", &h2), ("h3", &h3)]).await;

    // Twelve ReplicaSets whose keys fall on all three hosts.
    let members = ["h1".to_owned(), "h2".to_owned(), "h3".to_owned()];
    let names: Vec<String> = (0..12).map(|i| format!("rs-{i}")).collect();
    let owner = |name: &str| {
        let key = format!("/registry/demo.setpoint.dev/replicasets/default/{name}");
        setpoint::cluster::owner_of(setpoint::cluster::shard_of(&key, SHARDS), &members)
            .unwrap()
            .to_owned()
    };
    let owners: BTreeSet<String> = names.iter().map(|n| owner(n)).collect();
    assert_eq!(owners.len(), 3, "the chosen names land on every host");
    for name in &names {
        let response = http
            .post(format!("{}{REPLICASETS}", h1.url))
            .json(&replicaset(name, 2, 0))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 201);
    }
    converged(&http, &h1, &names, 2).await;
    // Each ReplicaSet was reconciled by the host that owns its shard, and
    // only by it.
    let all: Vec<Record> = [&h1, &h2, &h3].into_iter().flat_map(records).collect();
    for name in &names {
        let object = format!("ReplicaSet:default/{name}");
        let hosts: BTreeSet<&str> = all
            .iter()
            .filter(|r| r.object == object)
            .map(|r| r.host.as_str())
            .collect();
        assert_eq!(hosts, BTreeSet::from([owner(name).as_str()]), "{object}");
    }

    // kill -9 one host: its objects are taken over once its lease expires.
    let h2_records = records(&h2);
    h2.kill9();
    settled(&http, &[("h1", &h1), ("h3", &h3)]).await;
    scale(&http, &h1, &names, 3).await;
    converged(&http, &h1, &names, 3).await;

    // Cut h3 off from etcd: it loses its lease and stops reconciling; h1
    // takes everything and keeps converging.
    let cut_at = now_us();
    proxy.cut();
    settled(&http, &[("h1", &h1)]).await;
    scale(&http, &h1, &names, 1).await;
    converged(&http, &h1, &names, 1).await;
    eventually(
        "h3 reports the lost lease",
        Duration::from_secs(30),
        || async {
            let lost = h3
                .log
                .lock()
                .unwrap()
                .iter()
                .any(|l| l.contains("lost the cluster lease"));
            if lost {
                Ok(())
            } else {
                Err("not yet".to_owned())
            }
        },
    )
    .await;
    let healed_at = now_us();
    let lease_us = LEASE_TTL_S * 1_000_000;
    let while_cut: Vec<Record> = records(&h3)
        .into_iter()
        .filter(|r| r.start_us > cut_at + lease_us && r.start_us < healed_at)
        .collect();
    assert!(
        while_cut.is_empty(),
        "h3 reconciled after its lease ran out: {while_cut:?}"
    );

    // Heal: h3 rejoins with a new lease and takes its shards back.
    proxy.heal();
    settled(&http, &[("h1", &h1), ("h3", &h3)]).await;
    scale(&http, &h1, &names, 2).await;
    converged(&http, &h1, &names, 2).await;
    let h3_after: Vec<Record> = records(&h3)
        .into_iter()
        .filter(|r| r.start_us > healed_at)
        .collect();
    assert!(!h3_after.is_empty(), "h3 works again after rejoining");

    // No object was ever reconciled by two hosts at once.
    let mut by_object: BTreeMap<String, Vec<Record>> = BTreeMap::new();
    for record in h2_records
        .into_iter()
        .chain(records(&h1))
        .chain(records(&h3))
    {
        by_object
            .entry(record.object.clone())
            .or_default()
            .push(record);
    }
    let mut reconciles = 0;
    for (object, list) in by_object {
        reconciles += list.len();
        for (i, a) in list.iter().enumerate() {
            for b in &list[i + 1..] {
                assert!(
                    a.host == b.host || a.end_us <= b.start_us || b.end_us <= a.start_us,
                    "{object} reconciled by {} and {} at once: {a:?} {b:?}",
                    a.host,
                    b.host
                );
            }
        }
    }
    assert!(reconciles > 24, "only {reconciles} reconcile records");
}
