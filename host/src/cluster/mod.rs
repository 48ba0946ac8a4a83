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

//!
//! All of it needs etcd, so it is built with the `etcd` feature (the
//! `setpoint` binary has it). Without the feature (`absent`) no cluster can
//! be joined: [`Cluster`] and [`ShardClaim`] have no values, so a host's
//! cluster is always `None`, and nothing of etcd is built.

#[cfg(not(feature = "etcd"))]
mod absent;
mod assign;
#[cfg(feature = "etcd")]
mod live;
#[cfg(feature = "etcd")]
mod membership;

use std::time::Duration;

#[cfg(not(feature = "etcd"))]
pub use absent::{Cluster, ShardClaim};
pub use assign::{owner_of, shard_of};
#[cfg(feature = "etcd")]
pub use live::{Cluster, ShardClaim};
#[cfg(feature = "etcd")]
use live::{Held, Inner, Lease, State};

use crate::store;

/// Where cluster keys live, beside (not under) the objects' `/registry/`.
pub const ROOT: &str = "/setpoint/cluster/";
#[cfg(feature = "etcd")]
const MEMBERS: &str = "/setpoint/cluster/members/";
#[cfg(feature = "etcd")]
const SHARDS: &str = "/setpoint/cluster/shards/";
#[cfg(feature = "etcd")]
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

#[cfg(feature = "etcd")]
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

impl From<Error> for store::Error {
    fn from(err: Error) -> Self {
        store::Error::Unavailable(err.to_string())
    }
}

#[cfg(all(test, feature = "etcd"))]
mod tests;
