//! Turns that wait on the network without their worker: the parked
//! turns a controller carries on in tasks of their own (counted, bounded in
//! how many call their plugin at once, ended when the controller stops),
//! and the turns in progress whose waits a change of their object ends.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use crate::egress;
use crate::object::{ObjectKey, meta};

/// Turns that let their worker go while they wait on the network
/// ([`egress::Parker`]): counted, so that stopping waits for them.
pub(super) struct Parked {
    count: std::sync::atomic::AtomicUsize,
    idle: tokio::sync::Notify,
    /// Set when the controller stops: parked turns end where they wait.
    stopping: tokio::sync::watch::Sender<bool>,
    /// Parked turns call the reconciler again when their answers come,
    /// thousands at once when one shared read answers them all: this many
    /// at a time, as many as the call pool has threads.
    calls: tokio::sync::Semaphore,
}

impl Default for Parked {
    fn default() -> Self {
        Self {
            count: Default::default(),
            idle: Default::default(),
            stopping: tokio::sync::watch::Sender::new(false),
            calls: tokio::sync::Semaphore::new(super::pool::default_threads()),
        }
    }
}

impl Parked {
    /// Carry on `turn`, which waits on the network, in a task of its own,
    /// ended where it waits if the controller stops.
    pub(super) fn carry_on(
        self: &Arc<Self>,
        turn: impl std::future::Future<Output = ()> + Send + 'static,
    ) {
        let tracker = self.clone();
        tracker.count.fetch_add(1, Ordering::AcqRel);
        let mut stopping = tracker.stopping.subscribe();
        tokio::spawn(async move {
            tokio::select! {
                () = turn => {}
                _ = stopping.wait_for(|stop| *stop) => {}
            }
            if tracker.count.fetch_sub(1, Ordering::AcqRel) == 1 {
                tracker.idle.notify_waiters();
            }
        });
    }

    /// Leave to call the reconciler again from a parked turn.
    pub(super) async fn call_permit(&self) -> Option<tokio::sync::SemaphorePermit<'_>> {
        self.calls.acquire().await.ok()
    }

    /// End every parked turn where it waits (its requests not sent yet are
    /// not sent; one on the wire is dropped, and the next start observes
    /// again), then wait until none is left.
    pub(super) async fn stop(&self) {
        self.stopping.send_replace(true);
        self.idle().await;
    }

    /// Until no parked turn is left.
    pub(super) async fn idle(&self) {
        loop {
            let notified = self.idle.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.count.load(Ordering::Acquire) == 0 {
                return;
            }
            notified.await;
        }
    }
}

/// A turn in progress: its parker, and what it decided on (the object's
/// generation and whether it was being deleted), once it read it.
type InProgress = (egress::Parker, Option<(i64, bool)>);

/// The parkers of the turns in progress, by key: a change of what the
/// reconciler decided on (the spec, or a deletion) supersedes its turn's
/// waits ([`egress::Parker::supersede`]). Status and metadata changes by
/// others do not: a noisy co-writer must not keep an object's requests
/// from ever going.
#[derive(Default)]
pub(super) struct Turns(std::sync::Mutex<std::collections::HashMap<ObjectKey, InProgress>>);

impl Turns {
    fn lock(&self) -> std::sync::MutexGuard<'_, std::collections::HashMap<ObjectKey, InProgress>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn start(&self, key: &ObjectKey, parker: egress::Parker) {
        self.lock().insert(key.clone(), (parker, None));
    }

    /// The turn of `key` decides on `object`.
    pub(super) fn decides_on(&self, key: &ObjectKey, object: &crate::object::Object) {
        if let Some(turn) = self.lock().get_mut(key) {
            turn.1 = Some((
                meta::generation(object),
                meta::deletion_timestamp(object).is_some(),
            ));
        }
    }

    /// `key` changed to `object` (not by the turn's own write): a turn in
    /// progress that decided on another generation, or before a deletion,
    /// stops waiting for requests decided on it.
    pub(super) fn changed(&self, key: &ObjectKey, object: &crate::object::Object) {
        if let Some((parker, decided)) = self.lock().get(key) {
            let now = (
                meta::generation(object),
                meta::deletion_timestamp(object).is_some(),
            );
            if decided.is_none_or(|d| d != now) {
                parker.supersede();
            }
        }
    }

    /// The turn of `key` is over.
    pub(super) fn end(&self, key: &ObjectKey) {
        self.lock().remove(key);
    }

    /// `key` is gone: a turn in progress stops waiting.
    pub(super) fn deleted(&self, key: &ObjectKey) {
        if let Some((parker, _)) = self.lock().get(key) {
            parker.supersede();
        }
    }
}
