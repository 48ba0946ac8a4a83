//! Membership, division and fencing against a real etcd (Debian's
//! `etcd-server`), one private etcd per test.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use super::{Cluster, Config, Error, Ownership};
use crate::api::{self, Api};
use crate::store::etcd::tests::{EtcdProcess, start_etcd};
use crate::store::{self, EtcdBackend, EtcdConfig};

async fn connect(etcd: &EtcdProcess) -> (EtcdBackend, Api) {
    let backend = EtcdBackend::connect(EtcdConfig {
        endpoints: vec![etcd.url.clone()],
        prefix: "/cluster-test".into(),
        ..Default::default()
    })
    .await
    .unwrap();
    let api = Api::open(Arc::new(backend.clone())).await.unwrap();
    (backend, api)
}

async fn join(etcd: &EtcdProcess, id: &str, shards: u32) -> Result<(Cluster, Api), Error> {
    let (backend, api) = connect(etcd).await;
    let config = Config {
        host_id: id.into(),
        lease_ttl: Duration::from_secs(2),
        shards,
    };
    Ok((Cluster::join(backend, api.clone(), config).await?, api))
}

/// Poll `check` until it holds (10 s at most).
async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    for _ in 0..200 {
        if check() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("timed out waiting for: {what}");
}

fn event(name: &str) -> serde_json::Value {
    json!({
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": name, "namespace": "default"},
        "reason": "Test",
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hosts_divide_the_shards_and_take_over_from_one_that_leaves() {
    let etcd = start_etcd().await;
    let (a, _) = join(&etcd, "host-a", 16).await.unwrap();
    eventually("a alone holds every shard", || a.status().held.len() == 16).await;
    assert!(a.status().leader);

    let (b, _) = join(&etcd, "host-b", 16).await.unwrap();
    eventually("a and b split the shards", || {
        let (sa, sb) = (a.status(), b.status());
        sa.held.len() + sb.held.len() == 16 && !sa.held.is_empty() && !sb.held.is_empty()
    })
    .await;
    let (sa, sb) = (a.status(), b.status());
    assert!(
        sa.held.iter().all(|s| !sb.held.contains(s)),
        "{sa:?} {sb:?}"
    );
    assert_eq!(sa.members, ["host-a", "host-b"]);
    // Each holds exactly the shards the rendezvous assigns it.
    for shard in 0..16 {
        let owner = super::owner_of(shard, &sa.members).unwrap();
        assert_eq!(sa.held.contains(&shard), owner == "host-a", "shard {shard}");
    }

    b.leave().await;
    eventually("a takes b's shards back at once", || {
        a.status().held.len() == 16
    })
    .await;
    assert_eq!(a.status().members, ["host-a"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_hosts_shards_are_taken_after_its_lease_expires() {
    let etcd = start_etcd().await;
    let (a, _) = join(&etcd, "host-a", 8).await.unwrap();
    let (b, _) = join(&etcd, "host-b", 8).await.unwrap();
    eventually("both hold shards", || {
        a.status().held.len() + b.status().held.len() == 8 && !b.status().held.is_empty()
    })
    .await;
    // "Kill" b: stop its tasks without revoking anything, as kill -9 would.
    for task in b.inner.tasks.lock().unwrap().drain(..) {
        task.abort();
    }
    eventually("a takes every shard once b's lease is gone", || {
        a.status().held.len() == 8
    })
    .await;
    assert_eq!(a.status().members, ["host-a"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_through_a_lost_claim_are_fenced_out() {
    let etcd = start_etcd().await;
    let (a, api) = join(&etcd, "host-a", 4).await.unwrap();
    eventually("a holds every shard", || a.status().held.len() == 4).await;
    let kind = api.kinds().require("v1", "Event").unwrap();
    let key = Api::key(&kind, Some("default"), "e1");
    let Ownership::Owned(claim) = a.claim(&key) else {
        panic!("a should own {key}");
    };
    claim.api().create(&kind, event("e1")).await.unwrap();

    // The lease expires behind the host's back (a long pause, a partition).
    let lease = a.status().lease_id.unwrap();
    let (backend, _) = connect(&etcd).await;
    backend.client().lease_client().revoke(lease).await.unwrap();

    let err = claim.api().create(&kind, event("e2")).await.unwrap_err();
    assert!(
        matches!(err, api::Error::Store(store::Error::Fenced { .. })),
        "{err:?}"
    );
    assert!(
        matches!(
            api.get(&kind, Some("default"), "e2").await,
            Err(api::Error::NotFound { .. })
        ),
        "a fenced write changes nothing"
    );
    // An update and a delete are fenced too.
    let mut e1 = api.get(&kind, Some("default"), "e1").await.unwrap();
    e1["reason"] = json!("Changed");
    assert!(matches!(
        claim.api().update(&kind, e1).await,
        Err(api::Error::Store(store::Error::Fenced { .. }))
    ));
    assert!(matches!(
        claim
            .api()
            .delete(&kind, Some("default"), "e1", &Default::default())
            .await,
        Err(api::Error::Store(store::Error::Fenced { .. }))
    ));
    drop(claim);

    // The host notices, takes a new lease and its shards again; new claims
    // write, the old one stays fenced out.
    eventually("a rejoins with a new lease", || {
        let s = a.status();
        s.lease_id.is_some_and(|l| l != lease) && s.held.len() == 4
    })
    .await;
    let Ownership::Owned(claim) = a.claim(&key) else {
        panic!("a should own {key} again");
    };
    claim.api().create(&kind, event("e2")).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_dividing_keys_differently_is_refused() {
    let etcd = start_etcd().await;
    let (_a, _) = join(&etcd, "host-a", 16).await.unwrap();
    let err = join(&etcd, "host-b", 32).await.err().expect("refused");
    assert!(
        err.to_string()
            .contains("32 shards but the cluster uses 16"),
        "{err}"
    );
    let err = join(&etcd, "bad/id", 16).await.err().expect("refused");
    assert!(matches!(err, Error::Settings(_)), "{err}");
}
