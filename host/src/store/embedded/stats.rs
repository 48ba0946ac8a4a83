//! The embedded store's running totals: counters the writer, the applier
//! and the log's thread add to, and the snapshot of them
//! [`EmbeddedBackend::stats`](super::EmbeddedBackend::stats) returns.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use crate::store::{EngineMetric, MetricKind};

/// The writer's running totals.
#[derive(Default)]
pub(super) struct Stats {
    pub(super) commits: AtomicU64,
    pub(super) writes: AtomicU64,
    pub(super) decide_nanos: AtomicU64,
    pub(super) commit_nanos: AtomicU64,
    pub(super) applies: AtomicU64,
    pub(super) apply_nanos: AtomicU64,
    pub(super) db_commit_nanos: AtomicU64,
    pub(super) gather_nanos: AtomicU64,
    pub(super) checkpoints: AtomicU64,
    pub(super) checkpoint_nanos: AtomicU64,
    pub(super) settles: AtomicU64,
    /// Shared with the log's thread.
    pub(super) log_nanos: Arc<AtomicU64>,
}

/// Running totals of the embedded store's writer, for metrics.
///
/// ```
/// use setpoint::store::{Backend, Condition, EmbeddedBackend};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let dir = tempfile::tempdir()?;
///
/// let store = EmbeddedBackend::open(dir.path())?;
/// store.put("/a", vec![], Condition::Any).await?;
/// let stats = store.stats();
/// assert_eq!((stats.commits, stats.writes), (1, 1));
/// store.close().await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct EmbeddedStats {
    /// Batches committed, each made durable by one append to the
    /// write-ahead log and one fsync.
    pub commits: u64,
    /// Puts and deletes committed (revisions assigned).
    pub writes: u64,
    /// Time the writer spent deciding batches: conditions, revisions, the
    /// log record.
    pub decide_time: Duration,
    /// Time the writer spent waiting for batches' log records to be synced.
    pub commit_time: Duration,
    /// Database transactions the applier committed (each holds every batch
    /// that queued up meanwhile).
    pub applies: u64,
    /// Time the applier spent writing batches into its transactions.
    pub apply_time: Duration,
    /// Time the applier spent in (non-durable) database commits.
    pub db_commit_time: Duration,
    /// Time spent waiting for concurrent writers to join a batch.
    pub gather_time: Duration,
    /// Checkpoints: durable database commits, after which the log restarts.
    pub checkpoints: u64,
    /// Time spent in checkpoints (flushing the database file).
    pub checkpoint_time: Duration,
    /// Durable commits of a store gone quiet after commits no checkpoint
    /// followed (compaction cleanup): they keep reads off redb's write
    /// buffer (`commit/apply.rs`, `Applier::settle`).
    pub settles: u64,
    /// Time the log's thread spent writing and syncing records.
    pub log_time: Duration,
    /// Versions of keys held in the in-memory index (every change since
    /// the compaction point, plus each key's newest version below it).
    pub versions: u64,
    /// Acknowledged revisions the applier has not committed to the
    /// database yet (reads wait for them; the writer holds back past
    /// 64k changes).
    pub unapplied: u64,
    /// The open found `store.redb` as sealed but for the blocks its journal
    /// says were written since, after a clean close or a crash, and so
    /// skipped the integrity check of every page (a start with the seal or
    /// journal missing or not matching runs it).
    pub opened_sealed: bool,
}

impl EmbeddedStats {
    /// These numbers as `/metrics` series (`setpoint_embedded_*`).
    pub(super) fn metrics(&self) -> Vec<EngineMetric> {
        use MetricKind::{Counter, Gauge};
        let count = |name, help, value: u64| EngineMetric {
            name,
            help,
            kind: Counter,
            value: value as f64,
        };
        let seconds = |name, help, value: Duration| EngineMetric {
            name,
            help,
            kind: Counter,
            value: value.as_secs_f64(),
        };
        let gauge = |name, help, value: u64| EngineMetric {
            name,
            help,
            kind: Gauge,
            value: value as f64,
        };
        vec![
            count(
                "setpoint_embedded_commits_total",
                "Batches of writes the embedded store made durable (one log append and fsync each).",
                self.commits,
            ),
            count(
                "setpoint_embedded_writes_total",
                "Puts and deletes the embedded store committed.",
                self.writes,
            ),
            count(
                "setpoint_embedded_applies_total",
                "Database transactions the embedded store's applier committed.",
                self.applies,
            ),
            count(
                "setpoint_embedded_checkpoints_total",
                "Durable database commits after which the write-ahead log restarts.",
                self.checkpoints,
            ),
            count(
                "setpoint_embedded_settles_total",
                "Durable database commits of a quiet store after commits no checkpoint followed.",
                self.settles,
            ),
            seconds(
                "setpoint_embedded_decide_seconds_total",
                "Time the writer spent deciding batches (conditions, revisions, log records).",
                self.decide_time,
            ),
            seconds(
                "setpoint_embedded_sync_wait_seconds_total",
                "Time the writer waited for batches' log records to be synced.",
                self.commit_time,
            ),
            seconds(
                "setpoint_embedded_gather_seconds_total",
                "Time spent waiting for concurrent writers to join a batch.",
                self.gather_time,
            ),
            seconds(
                "setpoint_embedded_log_seconds_total",
                "Time the write-ahead log's thread spent writing and syncing records.",
                self.log_time,
            ),
            seconds(
                "setpoint_embedded_apply_seconds_total",
                "Time the applier spent writing batches into database transactions.",
                self.apply_time,
            ),
            seconds(
                "setpoint_embedded_db_commit_seconds_total",
                "Time the applier spent in (non-durable) database commits.",
                self.db_commit_time,
            ),
            seconds(
                "setpoint_embedded_checkpoint_seconds_total",
                "Time spent in checkpoints (flushing the database file).",
                self.checkpoint_time,
            ),
            gauge(
                "setpoint_embedded_versions",
                "Key versions held in the embedded store's in-memory index.",
                self.versions,
            ),
            gauge(
                "setpoint_embedded_unapplied_revisions",
                "Acknowledged revisions not yet committed to the database (reads wait for them).",
                self.unapplied,
            ),
        ]
    }
}
