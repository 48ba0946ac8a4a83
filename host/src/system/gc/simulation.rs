//! The collector's decisions run to completion over an API whose changes
//! are handed in rather than watched: what a plan (`crate::plan`) runs over
//! its overlay to show what a deletion cascades to.

use std::collections::HashMap;
use std::sync::Arc;

use super::collector::{Collector, Item};
use crate::api::Api;
use crate::object::{Object, meta};
use crate::queue::{Config, WorkQueue};
use crate::watch::EventType;

/// Attempts at one item before a simulation gives up on it.
const SIMULATED_ATTEMPTS: u32 = 5;

/// The same code decides as in the running collector; only the waiting is
/// left out (work that fails is tried again at once, a bounded number of
/// times).
pub(crate) struct Simulation {
    collector: Collector,
    queue: WorkQueue<Item>,
    loaded: bool,
}

impl Simulation {
    /// A collector over `api` that has seen nothing yet.
    pub(crate) fn new(api: Api) -> Self {
        let queue = WorkQueue::new(Config::named("garbage-collector-simulation"));
        Self {
            collector: Collector::new(api, queue.clone(), Arc::default()),
            queue,
            loaded: false,
        }
    }

    /// A change made through the API. The first one that may need the
    /// collector (a deletion, or an object being deleted) makes it list
    /// the whole store through the API, the changes so far included.
    pub(crate) async fn on_change(
        &mut self,
        kind: EventType,
        key: &str,
        object: &Object,
    ) -> Result<(), String> {
        if !self.loaded {
            let deleting = kind == EventType::Deleted || meta::deletion_timestamp(object).is_some();
            if !deleting {
                return Ok(());
            }
            self.collector.index().await?;
            self.loaded = true;
        }
        self.collector.on_event(kind, key, object);
        Ok(())
    }

    /// Work the queue until it is empty; returns the items that kept
    /// failing, with their last error.
    pub(crate) async fn settle(&mut self) -> Vec<String> {
        let mut failed = Vec::new();
        // Counted here, not by the queue's rate limiter: retries are at
        // once, and every failure counts, an object gone included.
        let mut attempts: HashMap<Item, u32> = HashMap::new();
        while let Some(item) = self.queue.try_get() {
            if let Err(err) = self.collector.process(&item).await {
                let tried = attempts.entry(item.clone()).or_insert(0);
                *tried += 1;
                if *tried < SIMULATED_ATTEMPTS {
                    self.queue.add(item.clone());
                } else {
                    failed.push(format!(
                        "garbage collection of {item:?} kept failing: {err}"
                    ));
                }
            }
            self.queue.done(&item);
        }
        failed
    }
}
