//! Several hosts on one etcd sharing the work: lease-based membership, a
//! deterministic division of object keys into shards, shard claims held
//! under the host's lease, and fenced writes. etcd provides the consensus;
//! this module only uses its leases and transactions.
//!
//! # How work is divided
//!
//! - Each host grants an etcd lease (`lease_ttl`) and keeps it alive; its
//!   member key `/setpoint/cluster/members/{id}` lives under that lease, so
//!   a host that dies or is cut off drops out of the member list when its
//!   lease expires.
//! - Object keys fall into a fixed number of shards (a hash of the store
//!   key, the same on every host). Every host computes the same owner for
//!   each shard from the member list (rendezvous hashing, `assign`).
//! - A host works on a shard only while it holds the shard's claim key
//!   `/setpoint/cluster/shards/{n}`, created under its lease with a
//!   transaction that requires the key to be absent. So at most one host
//!   holds a shard at any moment, whatever the member lists say.
//! - When the owner of a shard changes (a host joins), the holder stops
//!   starting reconciles of that shard, waits for the ones in flight, then
//!   deletes the claim; the new owner takes it and queues the shard's keys.
//!   When a host dies its claims vanish with its lease and the survivors
//!   take them.
//!
//! # Fencing
//!
//! Every write a controller makes through a claim ([`ShardClaim::api`]) is
//! an etcd transaction that also requires the claim key to exist with the
//! create revision it had when taken ([`store::Fence`]). A host that lost
//! its lease therefore cannot write, even if it has not noticed yet.
//! Besides, a host starts a reconcile only while its lease has at least
//! half its time to live left, by its own clock, measured from before the
//! keep-alive was sent: etcd expires the lease no earlier than that.
//!
//! Cluster-wide singletons (the garbage collector, the compactor) run on the
//! host that holds shard 0 ([`Cluster::leadership`]).

mod assign;
mod membership;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;

pub use assign::{owner_of, shard_of};

use crate::api::Api;
use crate::store::{self, EtcdBackend, Fence, Revision};

/// Where cluster keys live, beside (not under) the objects' `/registry/`.
pub const ROOT: &str = "/setpoint/cluster/";
const MEMBERS: &str = "/setpoint/cluster/members/";
const SHARDS: &str = "/setpoint/cluster/shards/";
const SETTINGS: &str = "/setpoint/cluster/settings";

/// Why a host could not join a cluster.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// etcd refused or could not be reached.
    #[error("etcd: {0}")]
    Etcd(String),
    /// The settings disagree with the cluster's.
    #[error("cluster settings: {0}")]
    Settings(String),
}

fn etcd_error(err: impl std::fmt::Display) -> Error {
    Error::Etcd(err.to_string())
}

/// How this host takes part in a cluster.
///
/// ```
/// use std::time::Duration;
/// let config = setpoint::cluster::Config {
///     host_id: "web-1".into(),
///     lease_ttl: Duration::from_secs(10),
///     ..Default::default()
/// };
/// assert_eq!(config.shards, 64);
/// ```
#[derive(Debug, Clone)]
pub struct Config {
    /// This host's name in the member list; unique per running host.
    pub host_id: String,
    /// The lease's time to live: how long a dead host's keys wait before
    /// others take them. Whole seconds, at least 2.
    pub lease_ttl: Duration,
    /// How many shards object keys are divided into. Must be the same on
    /// every host (the first host records it; others must agree).
    pub shards: u32,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            host_id: default_host_id(),
            lease_ttl: Duration::from_secs(10),
            shards: 64,
        }
    }
}

/// `hostname-pid-xxxx`: unique enough for a member list, readable in logs.
///
/// ```
/// let id = setpoint::cluster::default_host_id();
/// assert!(id.contains(&std::process::id().to_string()));
/// ```
pub fn default_host_id() -> String {
    let hostname = std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "host".into());
    let random = uuid::Uuid::new_v4().simple().to_string();
    format!("{hostname}-{}-{}", std::process::id(), &random[..4])
}

/// What a worker may do with a key right now; see [`Cluster::claim`].
pub enum Ownership {
    /// No cluster: this host owns every key and writes unfenced.
    Local,
    /// This host holds the key's shard: reconcile, writing through the claim.
    Owned(ShardClaim),
    /// Another host owns (or will own) the key: leave it to them.
    NotMine,
    /// This host holds the shard but its lease is too close to expiry to
    /// start work; try again shortly.
    NotNow,
}

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

/// A snapshot of this host's view of the cluster.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Status {
    /// This host's id.
    pub host_id: String,
    /// The etcd lease this host holds, if any.
    pub lease_id: Option<i64>,
    /// Milliseconds the lease is known to stay valid.
    pub lease_valid_ms: u64,
    /// The members, as last read from etcd.
    pub members: Vec<String>,
    /// The number of shards.
    pub shards: u32,
    /// The shards this host holds.
    pub held: Vec<u32>,
    /// Whether this host runs the cluster-wide singletons.
    pub leader: bool,
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
    inner: Arc<Inner>,
}

struct Inner {
    etcd: EtcdBackend,
    api: Api,
    config: Config,
    state: std::sync::Mutex<State>,
    wake: Notify,
    acquired: watch::Sender<u64>,
    leader: watch::Sender<bool>,
    stopping: AtomicBool,
    tasks: std::sync::Mutex<Vec<JoinHandle<()>>>,
}

#[derive(Default)]
struct State {
    lease: Option<Lease>,
    members: Vec<String>,
    shards: Vec<Shard>,
}

struct Lease {
    id: i64,
    valid_until: Instant,
}

#[derive(Default)]
struct Shard {
    held: Option<Held>,
}

struct Held {
    fence: Fence,
    api: Api,
    in_flight: usize,
    draining: bool,
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

impl From<Error> for store::Error {
    fn from(err: Error) -> Self {
        store::Error::Unavailable(err.to_string())
    }
}

#[cfg(test)]
mod tests;
