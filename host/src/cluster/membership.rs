//! The membership loop of one host: its lease (grant, keep-alive, loss),
//! the shared settings, and the step that takes the shards this host should
//! own and hands over the ones it should not.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use etcd_client::{Compare, CompareOp, GetOptions, PutOptions, Txn, TxnOp};

use super::{
    Error, Held, Inner, Lease, MEMBERS, ROOT, SETTINGS, SHARDS, State, assign, etcd_error,
};
use crate::store::{Fence, Revision};

impl Inner {
    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn full(&self, key: &str) -> Vec<u8> {
        self.etcd.full_key(key)
    }

    /// How long one etcd call may take before it counts as failed.
    pub(super) fn call_timeout(&self) -> Duration {
        self.config.lease_ttl / 3
    }

    pub(super) async fn timed<T>(
        &self,
        call: impl std::future::Future<Output = Result<T, etcd_client::Error>>,
    ) -> Result<T, Error> {
        tokio::time::timeout(self.call_timeout(), call)
            .await
            .map_err(|_| Error::Etcd("request timed out".into()))?
            .map_err(etcd_error)
    }

    /// Record the shard count on first join; refuse to join a cluster that
    /// divides keys differently.
    pub(super) async fn check_settings(&self) -> Result<(), Error> {
        let settings = serde_json::json!({"shards": self.config.shards});
        let key = self.full(SETTINGS);
        let txn = Txn::new()
            .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(key.clone(), settings.to_string(), None)])
            .or_else([TxnOp::get(key, None)]);
        let mut kv = self.etcd.client().kv_client();
        let response = self.timed(kv.txn(txn)).await?;
        if response.succeeded() {
            return Ok(());
        }
        let stored = response.op_responses().into_iter().find_map(|r| match r {
            etcd_client::TxnOpResponse::Get(get) => get.kvs().first().map(|kv| kv.value().to_vec()),
            _ => None,
        });
        let shards = stored
            .and_then(|v| serde_json::from_slice::<serde_json::Value>(&v).ok())
            .and_then(|v| v["shards"].as_u64());
        match shards {
            Some(n) if n == u64::from(self.config.shards) => Ok(()),
            Some(n) => Err(Error::Settings(format!(
                "this host divides keys into {} shards but the cluster uses {n}",
                self.config.shards
            ))),
            None => Err(Error::Settings(format!("{SETTINGS} is unreadable"))),
        }
    }

    /// Take a new lease, register as a member under it and keep it alive.
    pub(super) async fn grant_lease(self: &Arc<Self>) -> Result<(), Error> {
        let ttl = self.config.lease_ttl.as_secs() as i64;
        let mut leases = self.etcd.client().lease_client();
        let sent = Instant::now();
        let grant = self.timed(leases.grant(ttl, None)).await?;
        let id = grant.id();
        let member = serde_json::json!({
            "host": self.config.host_id,
            "version": env!("CARGO_PKG_VERSION"),
        });
        let mut kv = self.etcd.client().kv_client();
        self.timed(kv.put(
            self.full(&format!("{MEMBERS}{}", self.config.host_id)),
            member.to_string(),
            Some(PutOptions::new().with_lease(id)),
        ))
        .await?;
        self.lock().lease = Some(Lease {
            id,
            valid_until: sent + Duration::from_secs(grant.ttl().max(0) as u64),
        });
        let keeper = tokio::spawn(self.clone().keep_alive(id));
        self.tasks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(keeper);
        tracing::info!(host = %self.config.host_id, lease = id, "cluster lease granted");
        Ok(())
    }

    /// Renew the lease every third of its TTL until it is lost: then drop
    /// every shard and let `run` take a new lease.
    pub(super) async fn keep_alive(self: Arc<Self>, id: i64) {
        let period = self.config.lease_ttl / 3;
        let mut stream = None;
        loop {
            tokio::time::sleep(period).await;
            let valid_until = match self.lock().lease.as_ref() {
                Some(lease) if lease.id == id => lease.valid_until,
                _ => return,
            };
            let sent = Instant::now();
            let renewed = async {
                let Some((keeper, responses)) = stream.as_mut() else {
                    // Opening the stream renews once (it reads that answer
                    // itself and fails if the lease is gone).
                    let mut leases = self.etcd.client().lease_client();
                    stream = Some(self.timed(leases.keep_alive(id)).await?);
                    return Ok(self.config.lease_ttl.as_secs() as i64);
                };
                self.timed(keeper.keep_alive()).await?;
                match self.timed(responses.message()).await? {
                    Some(response) => Ok(response.ttl()),
                    None => Err(Error::Etcd("keep-alive stream ended".into())),
                }
            }
            .await;
            match renewed {
                Ok(ttl) if ttl > 0 => {
                    if let Some(lease) = self.lock().lease.as_mut().filter(|l| l.id == id) {
                        lease.valid_until = sent + Duration::from_secs(ttl as u64);
                    }
                }
                Ok(_) => {
                    self.lose_lease(id, "etcd says the lease expired");
                    return;
                }
                Err(err) => {
                    stream = None;
                    if Instant::now() >= valid_until {
                        self.lose_lease(id, &format!("cannot renew it ({err})"));
                        return;
                    }
                    tracing::warn!(%err, "renewing the cluster lease failed; retrying");
                }
            }
        }
    }

    pub(super) fn lose_lease(&self, id: i64, why: &str) {
        {
            let mut state = self.lock();
            if state.lease.as_ref().is_none_or(|l| l.id != id) {
                return;
            }
            state.lease = None;
            for shard in &mut state.shards {
                shard.held = None;
            }
        }
        self.leader.send_replace(false);
        tracing::warn!(host = %self.config.host_id, lease = id, "lost the cluster lease: {why}; stopped reconciling until it rejoins");
        self.wake.notify_one();
    }

    /// The control loop: interrupt (cluster key changes, a drained shard, a
    /// lost lease) plus poll (a third of the lease TTL).
    pub(super) async fn run(self: Arc<Self>) {
        let hub = self.api.hub().clone();
        let mut changes = hub.subscribe(ROOT, hub.last_revision()).ok();
        loop {
            if self.stopping.load(Ordering::SeqCst) {
                return;
            }
            if let Err(err) = self.step().await {
                tracing::warn!(%err, "cluster step failed; retrying");
            }
            let poll = tokio::time::sleep(self.config.lease_ttl / 3);
            tokio::select! {
                () = poll => {}
                () = self.wake.notified() => {}
                change = async {
                    match changes.as_mut() {
                        Some(sub) => sub.next().await.map(|_| ()),
                        None => std::future::pending().await,
                    }
                } => {
                    if change.is_err() {
                        changes = hub.subscribe(ROOT, hub.last_revision()).ok();
                    }
                }
            }
        }
    }

    /// One pass: make sure of the lease, read members and claims, take the
    /// shards this host should own and hand over those it should not.
    pub(super) async fn step(self: &Arc<Self>) -> Result<(), Error> {
        if self.lock().lease.is_none() {
            self.grant_lease().await?;
        }
        let mut kv = self.etcd.client().kv_client();
        let response = self
            .timed(kv.get(self.full(ROOT), Some(GetOptions::new().with_prefix())))
            .await?;
        let mut members = Vec::new();
        let mut claims: BTreeMap<u32, (String, Revision)> = BTreeMap::new();
        for item in response.kvs() {
            let key = String::from_utf8_lossy(item.key());
            let key = key.strip_prefix(self.etcd.prefix()).unwrap_or(&key);
            if let Some(id) = key.strip_prefix(MEMBERS) {
                members.push(id.to_owned());
            } else if let Some(n) = key.strip_prefix(SHARDS)
                && let Ok(n) = n.parse::<u32>()
            {
                let holder = serde_json::from_slice::<serde_json::Value>(item.value())
                    .ok()
                    .and_then(|v| v["holder"].as_str().map(str::to_owned))
                    .unwrap_or_default();
                claims.insert(n, (holder, from_etcd(item.create_revision())));
            }
        }
        members.sort();
        let me = self.config.host_id.clone();
        let (lease_id, to_take, to_release) = {
            let mut state = self.lock();
            let Some(lease_id) = state.lease.as_ref().map(|l| l.id) else {
                return Ok(());
            };
            if !members.contains(&me) {
                drop(state);
                self.lose_lease(lease_id, "its member key is gone");
                return Ok(());
            }
            state.members = members.clone();
            let mut to_take = Vec::new();
            let mut to_release = Vec::new();
            for (n, shard) in state.shards.iter_mut().enumerate() {
                let n = n as u32;
                let claim = claims.get(&n);
                if let Some(held) = &shard.held
                    && claim.is_none_or(|(holder, rev)| {
                        *holder != me || *rev != held.fence.create_revision
                    })
                {
                    tracing::warn!(shard = n, "shard claim lost");
                    shard.held = None;
                }
                let mine = assign::owner_of(n, &members) == Some(me.as_str());
                match (&mut shard.held, mine) {
                    (None, true) if claim.is_none() => to_take.push(n),
                    (Some(held), false) => {
                        held.draining = true;
                        if held.in_flight == 0 {
                            to_release.push((n, held.fence.clone()));
                        }
                    }
                    (Some(held), true) => held.draining = false,
                    _ => {}
                }
            }
            (lease_id, to_take, to_release)
        };

        for (n, fence) in to_release {
            let key = self.full(&fence.key);
            let txn = Txn::new()
                .when([Compare::create_revision(
                    key.clone(),
                    CompareOp::Equal,
                    fence.create_revision + 1,
                )])
                .and_then([TxnOp::delete(key, None)]);
            self.timed(kv.txn(txn)).await?;
            let mut state = self.lock();
            if state.shards[n as usize]
                .held
                .as_ref()
                .is_some_and(|h| h.fence == fence)
            {
                state.shards[n as usize].held = None;
            }
            tracing::debug!(shard = n, "shard handed over");
        }

        let mut took = 0;
        for n in to_take {
            let claim_key = format!("{SHARDS}{n:05}");
            let key = self.full(&claim_key);
            let value = serde_json::json!({"holder": me}).to_string();
            let txn = Txn::new()
                .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
                .and_then([TxnOp::put(
                    key,
                    value,
                    Some(PutOptions::new().with_lease(lease_id)),
                )]);
            let response = self.timed(kv.txn(txn)).await?;
            if !response.succeeded() {
                continue;
            }
            let created = from_etcd(response.header().map_or(0, |h| h.revision()));
            let fence = Fence {
                key: claim_key,
                create_revision: created,
            };
            let mut state = self.lock();
            if state.lease.as_ref().is_none_or(|l| l.id != lease_id) {
                // The lease went while we were taking the shard: the claim
                // dies with it.
                break;
            }
            state.shards[n as usize].held = Some(Held {
                api: self.api.fenced(fence.clone()),
                fence,
                in_flight: 0,
                draining: false,
            });
            took += 1;
        }
        if took > 0 {
            tracing::info!(host = %me, took, "took shards");
            self.acquired.send_modify(|n| *n += 1);
        }
        let leads = self.lock().shards[0]
            .held
            .as_ref()
            .is_some_and(|h| !h.draining);
        self.leader
            .send_if_modified(|l| std::mem::replace(l, leads) != leads);
        Ok(())
    }
}

/// Contract revisions are etcd's minus one (see `store::etcd`).
fn from_etcd(revision: i64) -> Revision {
    (revision - 1).max(0)
}
