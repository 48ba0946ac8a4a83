//! A controller's checkpoint, and its file: the store revision up to which
//! its handlers have been told every change of its kinds, and the keys it
//! still owes a reconcile (queued, in flight, waiting for a delay or a
//! destination, failed and waiting for a change), written every [`EVERY`]
//! or, while many keys are owed, every few ([`periods`]); when and from
//! what is `resume`'s. A controller that starts with a
//! valid checkpoint resumes:
//! its handlers are not told about every listed object; it replays the
//! store's changes since the checkpoint's revision through them instead,
//! and queues the keys owed, each when it is due. A restart after a crash
//! or a stop then reconciles what changed and what was owed, not every
//! object (docs/benchmarks/scale.md, "Restarts without a storm").
//!
//! Without a valid checkpoint the controller starts as it always did,
//! every object queued at low priority: none yet, a damaged file, another
//! version of the reconciler, a checkpoint ahead of the store (a store
//! restored from an older backup), or history compacted past it.
//!
//! A checkpoint is trusted whole or not at all: it is written beside the
//! last one, synced and renamed over it (a crash leaves the old or the
//! new), and carries its length and a CRC-32 of its body; anything else
//! is named in a warning and not used. An older checkpoint than could be
//! is still right (replaying more changes costs reconciles, never
//! correctness, as reconciles are level triggered), so one is skipped,
//! never forced, while more than [`MAX_OWED`] keys are owed.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::object::ObjectKey;
use crate::queue::WorkQueue;

/// How often a checkpoint is taken (when anything moved), while few
/// keys are owed ([`periods`]).
pub const EVERY: Duration = Duration::from_secs(1);

/// Owed keys a checkpoint may list every [`EVERY`]: each is copied out
/// of the queue under its lock, sorted and written, so a backlog of tens
/// of thousands taken every second was a steady share of the host's CPU
/// while it worked the backlog off (docs/benchmarks/scale.md, "Reading
/// your own writes").
const OWED_PER_EVERY: usize = 4_096;

/// The most periods [`periods`] stretches to: a crash replays at most
/// this much more history, small beside the backlog that stretched it.
const MOST_PERIODS: u32 = 16;

/// How many [`EVERY`] periods after the last checkpoint the next is taken
/// while `owed` keys are owed: one for up to `OWED_PER_EVERY`, one more
/// for each of them beyond, at most 16. A later checkpoint costs only
/// reconciles after a crash (see the module's note), never correctness.
pub(super) fn periods(owed: usize) -> u32 {
    u32::try_from(owed.div_ceil(OWED_PER_EVERY))
        .unwrap_or(MOST_PERIODS)
        .clamp(1, MOST_PERIODS)
}

/// The most keys a checkpoint lists as owed; with more (a burst of
/// changes, a reconciler swapped) the last one stands until fewer are.
pub const MAX_OWED: usize = 65_536;

/// The first line's start: the format, then the body's length and CRC.
const MAGIC: &str = "setpoint-checkpoint 1";

/// Where a controller keeps its checkpoint (a file; its directory is
/// made when needed). A host on the embedded store gives each plugin's
/// controller one in `DATA/checkpoints/`.
///
/// ```
/// use setpoint::controller::{Checkpoint, Config};
///
/// let config = Config {
///     checkpoint: Some(Checkpoint::at("/var/lib/setpoint/checkpoints/widgets")),
///     ..Config::default()
/// };
/// assert!(config.checkpoint.unwrap().path().ends_with("widgets"));
/// ```
#[derive(Debug, Clone)]
pub struct Checkpoint {
    path: PathBuf,
    /// Orders the writes of one controller's checkpoints (the periodic
    /// one and the last one at stop share the file beside).
    writing: Arc<Mutex<()>>,
}

impl Checkpoint {
    /// A checkpoint kept in the file `path`.
    pub fn at(path: impl Into<PathBuf>) -> Self {
        Self {
            path: path.into(),
            writing: Arc::default(),
        }
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The file a new checkpoint is written to before it is renamed.
    fn beside(&self) -> PathBuf {
        let mut name = self.path.file_name().unwrap_or_default().to_os_string();
        name.push(".new");
        self.path.with_file_name(name)
    }

    /// The checkpoint to resume from (`None`: none was written), or why
    /// the one there is not to be used.
    pub(super) fn load(
        &self,
        identity: &str,
        store_revision: i64,
    ) -> Result<Option<Saved>, String> {
        let bytes = match std::fs::read(&self.path) {
            Ok(bytes) => bytes,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(err) => return Err(format!("cannot read {}: {err}", self.path.display())),
        };
        let saved =
            decode(&bytes).map_err(|why| format!("{} is damaged ({why})", self.path.display()))?;
        if saved.identity != identity {
            return Err(format!(
                "it was taken with {}, this is {identity}",
                saved.identity
            ));
        }
        if saved.revision > store_revision {
            return Err(format!(
                "it is at revision {}, ahead of the store at {store_revision} (a store restored from an older backup?)",
                saved.revision
            ));
        }
        Ok(Some(saved))
    }

    /// Write `saved` as the checkpoint: beside, synced, renamed over the
    /// last one, the directory synced. Blocking.
    pub(super) fn save(&self, saved: &Saved) -> std::io::Result<()> {
        let _one_at_a_time = self.writing.lock().unwrap_or_else(|p| p.into_inner());
        crate::files::replace(&self.path, &self.beside(), &encode(saved))
    }
}

/// What a checkpoint holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Saved {
    /// The reconciler it was taken with ([`Reconciler::identity`](super::Reconciler::identity)).
    pub identity: String,
    /// Every change of the controller's kinds up to this store revision
    /// had been told to its handlers.
    pub revision: i64,
    /// Keys owed a reconcile: namespace, name, and when it is due in
    /// milliseconds since the Unix epoch (0: at once). Sorted.
    pub owed: Vec<(Option<String>, String, u64)>,
}

impl Saved {
    /// A checkpoint of a controller whose handlers have been told every
    /// change up to `revision`, and which owes reconciles to the keys of
    /// `queue` and to `others` (at once). `None` when more than
    /// [`MAX_OWED`] keys are owed. `revision` must be read before the
    /// keys: a change after it is replayed at the next start, one before
    /// it has queued its key by then.
    pub(super) fn take(
        identity: String,
        revision: i64,
        queue: &WorkQueue<ObjectKey>,
        others: impl IntoIterator<Item = ObjectKey>,
    ) -> Option<Self> {
        let (now, clock) = (tokio::time::Instant::now(), SystemTime::now());
        let mut owed: HashMap<ObjectKey, u64> = HashMap::new();
        for (key, due) in queue.owed_up_to(MAX_OWED)? {
            let due = due.map_or(0, |at| unix_ms(clock + at.saturating_duration_since(now)));
            owed.insert(key, due);
        }
        for key in others {
            owed.insert(key, 0);
        }
        if owed.len() > MAX_OWED {
            return None;
        }
        let mut owed: Vec<_> = owed
            .into_iter()
            .map(|(key, due)| (key.namespace, key.name, due))
            .collect();
        owed.sort();
        Some(Self {
            identity,
            revision,
            owed,
        })
    }

    /// Queue the keys owed: those due now (or past) at once, the others
    /// when they are due.
    pub(super) fn queue_owed(&self, queue: &WorkQueue<ObjectKey>) {
        let now = unix_ms(SystemTime::now());
        for (namespace, name, due) in &self.owed {
            let key = ObjectKey {
                namespace: namespace.clone(),
                name: name.clone(),
            };
            match due.checked_sub(now).filter(|wait| *wait > 0) {
                Some(wait) => queue.add_after(key, Duration::from_millis(wait)),
                None => queue.add(key),
            }
        }
    }
}

pub(super) fn unix_ms(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The file's bytes: a first line with the format, the body's length and
/// its CRC-32, then the body (JSON).
fn encode(saved: &Saved) -> Vec<u8> {
    let body = serde_json::to_vec(saved).expect("a checkpoint encodes");
    let mut out = format!("{MAGIC} {} {:08x}\n", body.len(), crc32fast::hash(&body)).into_bytes();
    out.extend_from_slice(&body);
    out
}

/// The checkpoint in `bytes`, or what is wrong with them.
fn decode(bytes: &[u8]) -> Result<Saved, String> {
    let newline = bytes
        .iter()
        .position(|b| *b == b'\n')
        .ok_or("no header line")?;
    let header = std::str::from_utf8(&bytes[..newline]).map_err(|_| "a header that is not text")?;
    let rest = header
        .strip_prefix(MAGIC)
        .and_then(|r| r.strip_prefix(' '))
        .ok_or_else(|| format!("not a checkpoint of this format: {header:?}"))?;
    let (len, crc) = rest
        .split_once(' ')
        .ok_or_else(|| format!("a header without length and checksum: {header:?}"))?;
    let len: usize = len
        .parse()
        .map_err(|_| format!("a length that is not a number: {len:?}"))?;
    let crc = u32::from_str_radix(crc, 16).map_err(|_| format!("a bad checksum field: {crc:?}"))?;
    let body = &bytes[newline + 1..];
    if body.len() != len {
        return Err(format!(
            "{} bytes of body, the header says {len}",
            body.len()
        ));
    }
    let actual = crc32fast::hash(body);
    if actual != crc {
        return Err(format!("checksum {actual:08x}, the header says {crc:08x}"));
    }
    serde_json::from_slice(body).map_err(|err| format!("a body that does not read: {err}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn saved() -> Saved {
        Saved {
            identity: "podsim@sha256:ab".into(),
            revision: 42,
            owed: vec![
                (Some("default".into()), "web-0".into(), 0),
                (None, "cluster-wide".into(), 1_900_000_000_000),
            ],
        }
    }

    #[test]
    fn checkpoints_are_taken_less_often_while_many_keys_are_owed() {
        assert_eq!(periods(0), 1);
        assert_eq!(periods(4_096), 1, "a few thousand: every period");
        assert_eq!(periods(4_097), 2);
        assert_eq!(periods(20_480), 5);
        assert_eq!(periods(MAX_OWED), 16);
        assert_eq!(periods(usize::MAX), 16, "never longer");
    }

    #[test]
    fn a_checkpoint_reads_back_as_written() {
        let dir = tempfile::tempdir().unwrap();
        let checkpoint = Checkpoint::at(dir.path().join("checkpoints").join("podsim"));
        checkpoint.save(&saved()).unwrap();
        assert_eq!(checkpoint.load("podsim@sha256:ab", 42), Ok(Some(saved())));
        assert!(!checkpoint.beside().exists(), "nothing is left beside");
    }

    #[test]
    fn none_of_another_reconciler_or_ahead_of_the_store_is_used() {
        let dir = tempfile::tempdir().unwrap();
        let checkpoint = Checkpoint::at(dir.path().join("podsim"));
        assert_eq!(checkpoint.load("x", 1), Ok(None), "none yet");
        checkpoint.save(&saved()).unwrap();
        let other = checkpoint.load("podsim@sha256:cd", 42).unwrap_err();
        assert!(
            other.contains("podsim@sha256:ab") && other.contains("podsim@sha256:cd"),
            "{other}"
        );
        let ahead = checkpoint.load("podsim@sha256:ab", 41).unwrap_err();
        assert!(ahead.contains("ahead of the store at 41"), "{ahead}");
    }

    /// Every way the file can be damaged is named and the file not used:
    /// cut at every length, each byte flipped in turn.
    #[test]
    fn a_damaged_checkpoint_is_named_and_never_used() {
        let dir = tempfile::tempdir().unwrap();
        let checkpoint = Checkpoint::at(dir.path().join("podsim"));
        checkpoint.save(&saved()).unwrap();
        let good = std::fs::read(checkpoint.path()).unwrap();
        for cut in 0..good.len() {
            std::fs::write(checkpoint.path(), &good[..cut]).unwrap();
            let why = checkpoint.load("podsim@sha256:ab", 42).unwrap_err();
            assert!(why.contains("is damaged"), "cut at {cut}: {why}");
        }
        for at in 0..good.len() {
            let mut bad = good.clone();
            bad[at] ^= 0x01;
            std::fs::write(checkpoint.path(), &bad).unwrap();
            assert!(
                checkpoint.load("podsim@sha256:ab", 42).is_err(),
                "byte {at} flipped was trusted"
            );
        }
    }

    /// A crash at each step of a write leaves the last checkpoint or the
    /// new one, and a half-written file beside is never read.
    #[test]
    fn a_crash_at_any_step_of_a_write_leaves_the_old_or_the_new() {
        let dir = tempfile::tempdir().unwrap();
        let checkpoint = Checkpoint::at(dir.path().join("podsim"));
        checkpoint.save(&saved()).unwrap();
        let newer = Saved {
            revision: 50,
            ..saved()
        };
        let bytes = encode(&newer);
        // Killed while writing beside: the old one stands.
        for cut in [0, 1, bytes.len() / 2, bytes.len() - 1, bytes.len()] {
            std::fs::write(checkpoint.beside(), &bytes[..cut]).unwrap();
            assert_eq!(checkpoint.load("podsim@sha256:ab", 60), Ok(Some(saved())));
        }
        // Killed after the rename: the new one.
        std::fs::rename(checkpoint.beside(), checkpoint.path()).unwrap();
        assert_eq!(
            checkpoint.load("podsim@sha256:ab", 60),
            Ok(Some(newer.clone()))
        );
        // And the next write replaces a leftover beside it.
        std::fs::write(checkpoint.beside(), b"torn").unwrap();
        checkpoint.save(&saved()).unwrap();
        assert_eq!(checkpoint.load("podsim@sha256:ab", 60), Ok(Some(saved())));
    }

    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn owed_keys_are_queued_when_due_and_too_many_are_not_checkpointed() {
        let queue: WorkQueue<ObjectKey> = WorkQueue::default();
        queue.add(ObjectKey::new(Some("default"), "now"));
        queue.add_after(
            ObjectKey::new(Some("default"), "later"),
            Duration::from_secs(30),
        );
        let taken = Saved::take(
            "x".into(),
            7,
            &queue,
            [ObjectKey::new(Some("default"), "failed")],
        )
        .unwrap();
        let names: Vec<(&str, bool)> = taken
            .owed
            .iter()
            .map(|(_, name, due)| (name.as_str(), *due > 0))
            .collect();
        assert_eq!(names, [("failed", false), ("later", true), ("now", false)]);

        let resumed: WorkQueue<ObjectKey> = WorkQueue::default();
        taken.queue_owed(&resumed);
        let mut now: Vec<String> = std::iter::from_fn(|| resumed.try_get())
            .map(|k| k.name)
            .collect();
        now.sort();
        assert_eq!(now, ["failed", "now"]);
        assert_eq!(
            resumed.owed_up_to(3).map(|owed| owed.len()),
            Some(3),
            "`later` waits for its time"
        );

        let crowded: WorkQueue<ObjectKey> = WorkQueue::default();
        for i in 0..=MAX_OWED {
            crowded.add(ObjectKey::new(Some("default"), &format!("p{i}")));
        }
        assert!(Saved::take("x".into(), 7, &crowded, []).is_none());
    }
}
