//! Without the `etcd` feature there is no cluster to join: [`Cluster`] and
//! [`ShardClaim`] are types without values. A host's `Option<Cluster>` is
//! therefore always `None`, and the code that would use a cluster is
//! unreachable by construction (each method is an empty `match`), so the
//! host needs no `cfg` of its own around it.

use tokio::sync::watch;

use super::{Ownership, Status};
use crate::api::Api;

/// Membership in a cluster: needs the `etcd` feature; without it no value
/// of this type exists.
#[derive(Debug)]
pub enum Cluster {}

/// Permission to reconcile one key of a held shard: needs the `etcd`
/// feature; without it no value of this type exists.
#[derive(Debug)]
pub enum ShardClaim {}

impl Clone for Cluster {
    fn clone(&self) -> Self {
        match *self {}
    }
}

// As the live claim, which counts reconciles in flight until dropped.
impl Drop for ShardClaim {
    fn drop(&mut self) {
        match *self {}
    }
}

impl ShardClaim {
    /// The object API whose writes are fenced by this claim.
    pub fn api(&self) -> &Api {
        match *self {}
    }

    /// Whether the claim is safe to start work under.
    pub fn is_fresh(&self) -> bool {
        match *self {}
    }
}

impl Cluster {
    /// This host's id.
    pub fn host_id(&self) -> &str {
        match *self {}
    }

    /// The shard of a store key.
    pub fn shard_of(&self, _store_key: &str) -> u32 {
        match *self {}
    }

    /// Whether this host holds the key's shard.
    pub fn owns(&self, _store_key: &str) -> bool {
        match *self {}
    }

    /// May this host reconcile the key now?
    pub fn claim(&self, _store_key: &str) -> Ownership {
        match *self {}
    }

    /// Changes each time this host takes shards.
    pub fn acquisitions(&self) -> watch::Receiver<u64> {
        match *self {}
    }

    /// Whether this host runs the cluster-wide singletons.
    pub fn leadership(&self) -> watch::Receiver<bool> {
        match *self {}
    }

    /// This host's view of the cluster.
    pub fn status(&self) -> Status {
        match *self {}
    }

    /// Leave the cluster.
    pub async fn leave(&self) {
        match *self {}
    }
}
