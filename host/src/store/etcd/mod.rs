//! The etcd backend: a thin translation of the [`Backend`] contract to etcd
//! v3 through `etcd-client`, for users who run several hosts on one etcd
//! cluster. etcd does the hard parts (consensus, revisions, MVCC, watch);
//! this module only maps them.
//!
//! - Object revisions are etcd revisions, shifted by one: an empty etcd is at
//!   revision 1 where the contract starts at 0, so revision `r` here is
//!   etcd's `r + 1` (every host on one etcd shifts the same way). A
//!   [`Condition`] is a transaction
//!   comparing the key's `create_revision` (absent) or `mod_revision`.
//! - Every key lives under a configurable prefix (default `""`), so several
//!   independent Setpoint stores can share one etcd.
//! - Watches are etcd watches from `after + 1` with `prev_kv` (so a delete
//!   carries the last value) and progress notifications; a watch below
//!   etcd's compaction point becomes [`Error::Compacted`].
//! - Unlike the embedded store, revisions are only gap-free when nothing else
//!   writes to the same etcd: etcd counts every write in the cluster.
//! - Authentication (user and password) and TLS come from [`EtcdConfig`].

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use etcd_client::{
    Client, CompactionOptions, Compare, CompareOp, ConnectOptions, EventType, GetOptions,
    PutOptions, TlsOptions, Txn, TxnOp, TxnOpResponse, WatchOptions,
};
use tokio::sync::mpsc;

use super::{
    Backend, Condition, Deleted, Error, EventKind, Fence, KeyValue, Range, RangeResult, Result,
    Revision, WatchEvent, WatchStream,
};

/// How many events a watch stream buffers before the forwarder waits.
const WATCH_BUFFER: usize = 1024;

/// How to reach etcd.
#[derive(Debug, Clone, Default)]
pub struct EtcdConfig {
    /// Client URLs, e.g. `http://127.0.0.1:2379`.
    pub endpoints: Vec<String>,
    /// Every key is stored under this prefix.
    pub prefix: String,
    /// User name and password, when etcd has authentication enabled.
    pub user: Option<(String, String)>,
    /// PEM of the CA that signed etcd's certificate (enables TLS).
    pub ca_pem: Option<Vec<u8>>,
    /// PEM client certificate and key, for mutual TLS.
    pub client_identity_pem: Option<(Vec<u8>, Vec<u8>)>,
}

/// A [`Backend`] on an etcd cluster. Cheap to clone.
#[derive(Clone)]
pub struct EtcdBackend {
    client: Client,
    prefix: Arc<str>,
    /// The highest compaction point this backend has seen or made.
    compacted: Arc<AtomicI64>,
}

/// etcd's revision for a contract revision.
fn to_etcd(revision: Revision) -> i64 {
    revision + 1
}

/// The contract revision for an etcd revision (0 stays 0: "none").
fn from_etcd(revision: i64) -> Revision {
    (revision - 1).max(0)
}

fn unavailable(err: etcd_client::Error) -> Error {
    Error::Unavailable(format!("etcd: {err}"))
}

impl EtcdBackend {
    /// Connect to etcd.
    pub async fn connect(config: EtcdConfig) -> Result<Self> {
        if config.endpoints.is_empty() {
            return Err(Error::Unavailable("no etcd endpoints given".into()));
        }
        let mut options = ConnectOptions::new()
            .with_connect_timeout(Duration::from_secs(5))
            .with_keep_alive(Duration::from_secs(10), Duration::from_secs(5));
        if let Some((user, password)) = &config.user {
            options = options.with_user(user.clone(), password.clone());
        }
        if config.ca_pem.is_some() || config.client_identity_pem.is_some() {
            let mut tls = TlsOptions::new();
            if let Some(ca) = &config.ca_pem {
                tls = tls.ca_certificate(etcd_client::Certificate::from_pem(ca));
            }
            if let Some((cert, key)) = &config.client_identity_pem {
                tls = tls.identity(etcd_client::Identity::from_pem(cert, key));
            }
            options = options.with_tls(tls);
        }
        let client = Client::connect(&config.endpoints, Some(options))
            .await
            .map_err(unavailable)?;
        let backend = Self {
            client,
            prefix: Arc::from(config.prefix.as_str()),
            compacted: Arc::default(),
        };
        // Fail now, with a clear message, rather than on the first request.
        backend.current_revision().await?;
        Ok(backend)
    }

    /// The etcd client, for the cluster membership (leases, claims).
    pub(crate) fn client(&self) -> &Client {
        &self.client
    }

    /// The key prefix every key is stored under.
    pub(crate) fn prefix(&self) -> &str {
        &self.prefix
    }

    /// A contract key as etcd stores it (with the prefix).
    pub(crate) fn full_key(&self, key: &str) -> Vec<u8> {
        self.full(key)
    }

    fn full(&self, key: &str) -> Vec<u8> {
        let mut full = Vec::with_capacity(self.prefix.len() + key.len());
        full.extend_from_slice(self.prefix.as_bytes());
        full.extend_from_slice(key.as_bytes());
        full
    }

    fn convert(&self, kv: &etcd_client::KeyValue) -> Result<KeyValue> {
        let key = kv
            .key()
            .strip_prefix(self.prefix.as_bytes())
            .unwrap_or(kv.key());
        let key = std::str::from_utf8(key).map_err(|_| {
            Error::Corrupt(format!(
                "etcd key {:?} is not UTF-8",
                String::from_utf8_lossy(kv.key())
            ))
        })?;
        Ok(KeyValue {
            key: key.to_owned(),
            value: kv.value().into(),
            create_revision: from_etcd(kv.create_revision()),
            mod_revision: from_etcd(kv.mod_revision()),
        })
    }

    /// Map a read error: compaction and future revisions have their own errors.
    fn read_error(&self, err: etcd_client::Error, requested: Revision) -> Error {
        let message = err.to_string();
        if message.contains("required revision has been compacted") {
            let compacted = self.compacted.load(Ordering::SeqCst).max(requested);
            Error::Compacted {
                requested,
                compacted,
            }
        } else if message.contains("required revision is a future revision") {
            Error::FutureRevision {
                requested,
                current: requested - 1,
            }
        } else {
            unavailable(err)
        }
    }

    async fn conditional(
        &self,
        key: &str,
        condition: Condition,
        fence: Option<&Fence>,
        then: TxnOp,
    ) -> Result<(bool, Vec<TxnOpResponse>, Revision)> {
        let full = self.full(key);
        let compare = match condition {
            Condition::Any => None,
            Condition::Absent => Some(Compare::create_revision(full, CompareOp::Equal, 0)),
            Condition::ModRevision(rev) => {
                Some(Compare::mod_revision(full, CompareOp::Equal, to_etcd(rev)))
            }
        };
        self.txn(key, compare, fence, then).await
    }

    /// `then` if `compare` and `fence` hold (or always), else read the key
    /// (and the fence's key) back.
    async fn txn(
        &self,
        key: &str,
        compare: Option<Compare>,
        fence: Option<&Fence>,
        then: TxnOp,
    ) -> Result<(bool, Vec<TxnOpResponse>, Revision)> {
        let mut compares: Vec<Compare> = compare.into_iter().collect();
        let mut otherwise = vec![TxnOp::get(self.full(key), None)];
        if let Some(fence) = fence {
            compares.push(Compare::create_revision(
                self.full(&fence.key),
                CompareOp::Equal,
                to_etcd(fence.create_revision),
            ));
            otherwise.push(TxnOp::get(self.full(&fence.key), None));
        }
        let txn = Txn::new()
            .when(compares)
            .and_then([then])
            .or_else(otherwise);
        let response = self
            .client
            .kv_client()
            .txn(txn)
            .await
            .map_err(unavailable)?;
        let revision = from_etcd(response.header().map_or(0, |h| h.revision()));
        Ok((response.succeeded(), response.op_responses(), revision))
    }

    /// Whether a failed transaction failed because its fence no longer holds.
    fn fenced_out(&self, fence: Option<&Fence>, responses: &[TxnOpResponse]) -> Option<Error> {
        let fence = fence?;
        let full = self.full(&fence.key);
        let held = responses.iter().any(|r| match r {
            TxnOpResponse::Get(get) => get.kvs().iter().any(|kv| {
                kv.key() == full.as_slice()
                    && kv.create_revision() == to_etcd(fence.create_revision)
            }),
            _ => false,
        });
        (!held).then(|| Error::Fenced {
            key: fence.key.clone(),
            create_revision: fence.create_revision,
        })
    }

    async fn write(
        &self,
        key: &str,
        value: Vec<u8>,
        condition: Condition,
        fence: Option<&Fence>,
    ) -> Result<KeyValue> {
        let then = TxnOp::put(
            self.full(key),
            value.clone(),
            Some(PutOptions::new().with_prev_key()),
        );
        let (succeeded, responses, revision) =
            self.conditional(key, condition, fence, then).await?;
        if !succeeded {
            if let Some(fenced) = self.fenced_out(fence, &responses) {
                return Err(fenced);
            }
            return Err(self.conflict(key, condition, &responses));
        }
        let previous = responses.iter().find_map(|r| match r {
            TxnOpResponse::Put(put) => put.prev_key().map(|kv| from_etcd(kv.create_revision())),
            _ => None,
        });
        Ok(KeyValue {
            key: key.to_owned(),
            value: value.into(),
            create_revision: previous.unwrap_or(revision),
            mod_revision: revision,
        })
    }

    async fn remove(
        &self,
        key: &str,
        condition: Condition,
        fence: Option<&Fence>,
    ) -> Result<Deleted> {
        let full = self.full(key);
        let then = TxnOp::delete(
            full,
            Some(etcd_client::DeleteOptions::new().with_prev_key()),
        );
        // A delete of a missing key must fail even without a condition.
        let condition_or_exists = match condition {
            Condition::Any => None,
            other => Some(other),
        };
        let (succeeded, responses, revision) = match condition_or_exists {
            Some(c) => self.conditional(key, c, fence, then).await?,
            None => {
                let exists = Compare::create_revision(self.full(key), CompareOp::Greater, 0);
                self.txn(key, Some(exists), fence, then).await?
            }
        };
        if !succeeded {
            if let Some(fenced) = self.fenced_out(fence, &responses) {
                return Err(fenced);
            }
            let exists = responses
                .iter()
                .any(|r| matches!(r, TxnOpResponse::Get(g) if !g.kvs().is_empty()));
            return Err(
                if matches!(condition, Condition::ModRevision(_))
                    || (exists && condition != Condition::Any)
                {
                    self.conflict(key, condition, &responses)
                } else {
                    Error::NotFound {
                        key: key.to_owned(),
                    }
                },
            );
        }
        let prev = responses
            .iter()
            .find_map(|r| match r {
                TxnOpResponse::Delete(d) => d.prev_kvs().first().map(|kv| self.convert(kv)),
                _ => None,
            })
            .transpose()?;
        match prev {
            Some(prev) => Ok(Deleted { revision, prev }),
            None => Err(Error::NotFound {
                key: key.to_owned(),
            }),
        }
    }

    fn conflict(&self, key: &str, condition: Condition, responses: &[TxnOpResponse]) -> Error {
        let full = self.full(key);
        let actual = responses.iter().find_map(|r| match r {
            TxnOpResponse::Get(get) => get
                .kvs()
                .iter()
                .find(|kv| kv.key() == full.as_slice())
                .map(|kv| from_etcd(kv.mod_revision())),
            _ => None,
        });
        Error::Conflict {
            key: key.to_owned(),
            expected: match condition {
                Condition::ModRevision(rev) => Some(rev),
                _ => None,
            },
            actual,
        }
    }
}

/// The first key after every key that starts with `prefix`.
fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0] // every key
}

#[async_trait]
impl Backend for EtcdBackend {
    async fn get(&self, key: &str) -> Result<Option<KeyValue>> {
        let response = self
            .client
            .kv_client()
            .get(self.full(key), None)
            .await
            .map_err(unavailable)?;
        response
            .kvs()
            .first()
            .map(|kv| self.convert(kv))
            .transpose()
    }

    async fn range(&self, range: Range) -> Result<RangeResult> {
        let start = self.full(&range.prefix);
        let end = prefix_end(&start);
        let from = match &range.start_after {
            Some(after) if after.as_str() >= range.prefix.as_str() => {
                let mut key = self.full(after);
                key.push(0); // the first key strictly after `after`
                key
            }
            _ => start,
        };
        let mut options = GetOptions::new().with_range(end);
        if range.limit != 0 {
            options = options.with_limit(range.limit as i64);
        }
        let requested = range.revision.filter(|r| *r != 0);
        let compacted = self.compacted.load(Ordering::SeqCst);
        if let Some(rev) = requested
            && (rev < 0 || rev <= compacted)
        {
            return Err(Error::Compacted {
                requested: rev,
                compacted,
            });
        }
        if let Some(rev) = requested {
            options = options.with_revision(to_etcd(rev));
        }
        let response = match self.client.kv_client().get(from, Some(options)).await {
            Ok(response) => response,
            Err(err) => {
                let err = self.read_error(err, requested.unwrap_or(0));
                if let Error::FutureRevision { requested, .. } = err {
                    let current = self.current_revision().await?;
                    return Err(Error::FutureRevision { requested, current });
                }
                return Err(err);
            }
        };
        let kvs = response
            .kvs()
            .iter()
            .map(|kv| self.convert(kv))
            .collect::<Result<Vec<_>>>()?;
        let revision =
            requested.unwrap_or_else(|| from_etcd(response.header().map_or(0, |h| h.revision())));
        Ok(RangeResult {
            kvs,
            more: response.more(),
            revision,
        })
    }

    async fn put(&self, key: &str, value: Vec<u8>, condition: Condition) -> Result<KeyValue> {
        self.write(key, value, condition, None).await
    }

    async fn delete(&self, key: &str, condition: Condition) -> Result<Deleted> {
        self.remove(key, condition, None).await
    }

    async fn put_fenced(
        &self,
        key: &str,
        value: Vec<u8>,
        condition: Condition,
        fence: &Fence,
    ) -> Result<KeyValue> {
        self.write(key, value, condition, Some(fence)).await
    }

    async fn delete_fenced(
        &self,
        key: &str,
        condition: Condition,
        fence: &Fence,
    ) -> Result<Deleted> {
        self.remove(key, condition, Some(fence)).await
    }

    async fn current_revision(&self) -> Result<Revision> {
        let options = GetOptions::new().with_count_only();
        let response = self
            .client
            .kv_client()
            .get(self.full("\u{0}"), Some(options))
            .await
            .map_err(unavailable)?;
        Ok(from_etcd(response.header().map_or(0, |h| h.revision())))
    }

    async fn compact(&self, revision: Revision) -> Result<()> {
        let current = self.current_revision().await?;
        if revision > current {
            return Err(Error::FutureRevision {
                requested: revision,
                current,
            });
        }
        if revision <= self.compacted.load(Ordering::SeqCst) {
            return Ok(());
        }
        // etcd keeps the compaction revision itself readable; the contract
        // removes it too, so compact etcd one further (never past current).
        let target = to_etcd(revision + 1).min(to_etcd(current));
        match self
            .client
            .kv_client()
            .compact(target, Some(CompactionOptions::new().with_physical()))
            .await
        {
            Ok(_) => {}
            Err(e)
                if e.to_string()
                    .contains("required revision has been compacted") => {}
            Err(e) => return Err(unavailable(e)),
        }
        self.compacted.fetch_max(revision, Ordering::SeqCst);
        Ok(())
    }

    async fn watch(&self, after: Revision) -> Result<WatchStream> {
        let compacted = self.compacted.load(Ordering::SeqCst);
        if after < compacted {
            return Err(Error::Compacted {
                requested: after,
                compacted,
            });
        }
        let start = self.full("");
        let options = WatchOptions::new()
            .with_range(prefix_end(&start))
            .with_start_revision(to_etcd(after + 1))
            .with_prev_key()
            .with_progress_notify();
        let mut client = self.client.watch_client();
        let mut stream = client
            .watch(start, Some(options))
            .await
            .map_err(unavailable)?;
        let (tx, rx) = mpsc::channel(WATCH_BUFFER);
        let backend = self.clone();
        tokio::spawn(async move {
            let _client = client; // keeps the watch's request stream open
            loop {
                let message = tokio::select! {
                    m = stream.message() => m,
                    () = tx.closed() => return,
                };
                let response = match message {
                    Ok(Some(r)) => r,
                    Ok(None) => {
                        let _ = tx
                            .send(Err(Error::Unavailable("etcd watch ended".into())))
                            .await;
                        return;
                    }
                    Err(e) => {
                        let _ = tx.send(Err(unavailable(e))).await;
                        return;
                    }
                };
                if response.compact_revision() > 0 {
                    let compacted = from_etcd(response.compact_revision()) - 1;
                    backend.compacted.fetch_max(compacted, Ordering::SeqCst);
                    let _ = tx
                        .send(Err(Error::Compacted {
                            requested: after,
                            compacted,
                        }))
                        .await;
                    return;
                }
                if response.canceled() {
                    let reason = response.cancel_reason().to_owned();
                    let _ = tx
                        .send(Err(Error::Unavailable(format!(
                            "etcd watch canceled: {reason}"
                        ))))
                        .await;
                    return;
                }
                for event in response.events() {
                    let Some(kv) = event.kv() else { continue };
                    let converted = match event.event_type() {
                        EventType::Put => backend.convert(kv).map(|kv| WatchEvent {
                            created: kv.create_revision == kv.mod_revision,
                            kind: EventKind::Put,
                            kv,
                        }),
                        EventType::Delete => {
                            let last = event.prev_kv().unwrap_or(kv);
                            backend.convert(last).map(|prev| WatchEvent {
                                kind: EventKind::Delete,
                                kv: KeyValue {
                                    mod_revision: from_etcd(kv.mod_revision()),
                                    ..prev
                                },
                                created: false,
                            })
                        }
                    };
                    if tx.send(converted).await.is_err() {
                        return;
                    }
                }
            }
        });
        Ok(rx)
    }
}

#[cfg(test)]
pub(crate) mod tests;
