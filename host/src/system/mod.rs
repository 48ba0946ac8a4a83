//! Controllers the host runs for itself, above the informer layer: garbage
//! collection through owner references ([`gc`]), compaction of the store's
//! history ([`compactor`]), expiry of Events ([`event_expiry`]) and
//! following the stored definitions into the kind registry
//! ([`definitions`]). Each follows the store through the one
//! list-watch primitive, [`crate::informer::watcher`]; the garbage
//! collector works through the real workqueue ([`crate::queue`]). What a
//! write means stays `api`'s: these controllers only call it.

pub mod compactor;
pub mod definitions;
pub mod event_expiry;
pub mod gc;

pub use gc::{DEFAULT_GC_RESYNC, GarbageCollector, GcConfig, GcHealth};
