//! A cluster on etcd: the membership this host holds, the shards it
//! claims, and the fenced APIs it writes through (see the module above for
//! how work is divided).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;

use super::{Config, Error, Ownership, Status, shard_of};
use crate::api::Api;
use crate::store::{EtcdBackend, Fence, Revision};

/// Permission to reconcile one key of a held shard. Reconciles in flight
/// are counted, so a shard handed over waits for them.
///
/// ```no_run
/// # async fn example(cluster: setpoint::cluster::Cluster, kind: &setpoint::object::KindInfo,
/// #                  object: serde_json::Value) -> Result<(), setpoint::api::Error> {
/// use setpoint::api::Api;
/// use setpoint::cluster::Ownership;
///
/// let key = Api::key(kind, Some("default"), "web");
/// if let Ownership::Owned(claim) = cluster.claim(&key) {
///     // Refused with `store::Error::Fenced` if the shard is lost meanwhile.
///     claim.api().update(kind, object).await?;
/// }
/// # Ok(()) }
/// ```
pub struct ShardClaim {
    inner: Arc<Inner>,
    shard: u32,
    fence_revision: Revision,
    api: Api,
}

impl ShardClaim {
    /// The object API whose writes are fenced by this claim.
    pub fn api(&self) -> &Api {
        &self.api
    }

    /// Whether the claim is still held under a lease with at least half its
    /// time to live left: safe to start (more) work under it.
    pub fn is_fresh(&self) -> bool {
        let state = self.inner.lock();
        let held = state.shards[self.shard as usize]
            .held
            .as_ref()
            .is_some_and(|h| h.fence.create_revision == self.fence_revision && !h.draining);
        held && state.lease.as_ref().is_some_and(|l| {
            l.valid_until.saturating_duration_since(Instant::now())
                >= self.inner.config.lease_ttl / 2
        })
    }
}

impl Drop for ShardClaim {
    fn drop(&mut self) {
        let mut state = self.inner.lock();
        if let Some(held) = state.shards[self.shard as usize].held.as_mut()
            && held.fence.create_revision == self.fence_revision
        {
            held.in_flight -= 1;
            if held.draining && held.in_flight == 0 {
                self.inner.wake.notify_one();
            }
        }
    }
}

/// Membership of one host in a cluster; cheap to clone. Usually made by
/// [`HostBuilder::cluster`](crate::HostBuilder::cluster).
///
/// ```no_run
/// # async fn example() -> Result<(), Box<dyn std::error::Error>> {
/// use std::sync::Arc;
/// use setpoint::api::Api;
/// use setpoint::cluster::{Cluster, Config};
/// use setpoint::store::{EtcdBackend, EtcdConfig};
///
/// let etcd = EtcdBackend::connect(EtcdConfig {
///     endpoints: vec!["http://127.0.0.1:2379".into()],
///     ..Default::default()
/// })
/// .await?;
/// let api = Api::open(Arc::new(etcd.clone())).await?;
/// let cluster = Cluster::join(etcd, api, Config::default()).await?;
/// println!("{:?}", cluster.status());
/// cluster.leave().await;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Cluster {
    pub(super) inner: Arc<Inner>,
}

pub(super) struct Inner {
    pub(super) etcd: EtcdBackend,
    pub(super) api: Api,
    pub(super) config: Config,
    pub(super) state: std::sync::Mutex<State>,
    pub(super) wake: Notify,
    pub(super) acquired: watch::Sender<u64>,
    pub(super) leader: watch::Sender<bool>,
    pub(super) stopping: AtomicBool,
    pub(super) tasks: std::sync::Mutex<Vec<JoinHandle<()>>>,
}

#[derive(Default)]
pub(super) struct State {
    pub(super) lease: Option<Lease>,
    pub(super) members: Vec<String>,
    pub(super) shards: Vec<Shard>,
}

pub(super) struct Lease {
    pub(super) id: i64,
    pub(super) valid_until: Instant,
}

#[derive(Default)]
pub(super) struct Shard {
    pub(super) held: Option<Held>,
}

pub(super) struct Held {
    pub(super) fence: Fence,
    pub(super) api: Api,
    pub(super) in_flight: usize,
    pub(super) draining: bool,
}

impl Cluster {
    /// Join the cluster on `etcd` (the same store `api` writes to): record
    /// or check the cluster settings, take a lease, register as a member and
    /// start taking shards in the background.
    pub async fn join(etcd: EtcdBackend, api: Api, config: Config) -> Result<Self, Error> {
        if config.lease_ttl < Duration::from_secs(2) {
            return Err(Error::Settings(format!(
                "lease TTL {:?} is below etcd's practical minimum of 2 s",
                config.lease_ttl
            )));
        }
        if config.shards == 0 || config.host_id.is_empty() || config.host_id.contains('/') {
            return Err(Error::Settings(
                "shards must be positive and the host id non-empty without '/'".into(),
            ));
        }
        let (acquired, _) = watch::channel(0);
        let (leader, _) = watch::channel(false);
        let inner = Arc::new(Inner {
            state: std::sync::Mutex::new(State {
                shards: (0..config.shards).map(|_| Shard::default()).collect(),
                ..State::default()
            }),
            etcd,
            api,
            config,
            wake: Notify::new(),
            acquired,
            leader,
            stopping: AtomicBool::new(false),
            tasks: std::sync::Mutex::default(),
        });
        inner.check_settings().await?;
        inner.grant_lease().await?;
        let task = tokio::spawn(inner.clone().run());
        inner
            .tasks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(task);
        tracing::info!(host = %inner.config.host_id, shards = inner.config.shards, ttl = ?inner.config.lease_ttl, "joined the cluster");
        Ok(Self { inner })
    }

    /// This host's id.
    pub fn host_id(&self) -> &str {
        &self.inner.config.host_id
    }

    /// The shard of a store key.
    pub fn shard_of(&self, store_key: &str) -> u32 {
        shard_of(store_key, self.inner.config.shards)
    }

    /// Whether this host holds the key's shard (and is not handing it
    /// over): worth queueing the key.
    pub fn owns(&self, store_key: &str) -> bool {
        let shard = self.shard_of(store_key) as usize;
        let state = self.inner.lock();
        state.lease.is_some()
            && state.shards[shard]
                .held
                .as_ref()
                .is_some_and(|h| !h.draining)
    }

    /// May this host reconcile the key now? See [`Ownership`].
    pub fn claim(&self, store_key: &str) -> Ownership {
        let shard = self.shard_of(store_key);
        let mut state = self.inner.lock();
        let Some(valid_until) = state.lease.as_ref().map(|l| l.valid_until) else {
            return Ownership::NotMine;
        };
        let Some(held) = state.shards[shard as usize].held.as_mut() else {
            return Ownership::NotMine;
        };
        if held.draining {
            return Ownership::NotMine;
        }
        if valid_until.saturating_duration_since(Instant::now()) < self.inner.config.lease_ttl / 2 {
            return Ownership::NotNow;
        }
        held.in_flight += 1;
        Ownership::Owned(ShardClaim {
            inner: self.inner.clone(),
            shard,
            fence_revision: held.fence.create_revision,
            api: held.api.clone(),
        })
    }

    /// Changes each time this host takes shards: their keys need queueing.
    pub fn acquisitions(&self) -> watch::Receiver<u64> {
        self.inner.acquired.subscribe()
    }

    /// Whether this host runs the cluster-wide singletons (it holds shard 0).
    pub fn leadership(&self) -> watch::Receiver<bool> {
        self.inner.leader.subscribe()
    }

    /// This host's view of the cluster.
    pub fn status(&self) -> Status {
        let state = self.inner.lock();
        Status {
            host_id: self.inner.config.host_id.clone(),
            lease_id: state.lease.as_ref().map(|l| l.id),
            lease_valid_ms: state.lease.as_ref().map_or(0, |l| {
                l.valid_until
                    .saturating_duration_since(Instant::now())
                    .as_millis() as u64
            }),
            members: state.members.clone(),
            shards: self.inner.config.shards,
            held: state
                .shards
                .iter()
                .enumerate()
                .filter(|(_, s)| s.held.is_some())
                .map(|(n, _)| n as u32)
                .collect(),
            leader: *self.inner.leader.borrow(),
        }
    }

    /// Leave the cluster: release every shard and revoke the lease, so the
    /// other hosts take over at once instead of after the lease time. Call
    /// after the controllers have stopped.
    pub async fn leave(&self) {
        self.inner.stopping.store(true, Ordering::SeqCst);
        for task in self
            .inner
            .tasks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .drain(..)
        {
            task.abort();
        }
        let lease = {
            let mut state = self.inner.lock();
            for shard in &mut state.shards {
                shard.held = None;
            }
            state.lease.take()
        };
        self.inner.leader.send_replace(false);
        if let Some(lease) = lease {
            let mut leases = self.inner.etcd.client().lease_client();
            match tokio::time::timeout(self.inner.call_timeout(), leases.revoke(lease.id)).await {
                Ok(Ok(_)) => tracing::info!(host = %self.host_id(), "left the cluster"),
                Ok(Err(err)) => tracing::warn!(%err, "revoking the cluster lease failed"),
                Err(_) => tracing::warn!("revoking the cluster lease timed out"),
            }
        }
    }
}
