//! One read serves many objects: identical observations (the same plugin,
//! method, URL, headers and body *after* secrets are put in) within a
//! freshness window share one exchange.
//!
//! - **Single flight.** While an exchange for a key is waiting for its turn
//!   or on the wire, another request with the same key joins it and gets
//!   its answer, instead of sending its own.
//! - **A short cache.** An answer is served again while it is younger than
//!   the requester accepts: `Cache-Control: max-age=N` on the request
//!   (HTTP's own request directive; `max-age=0` or `no-cache` accepts only
//!   an exchange not sent yet), else the host's window
//!   (`EgressConfig::observe_window`).
//! - **An object reads its own writes.** After an object's write to a
//!   destination (any method but `GET`, `HEAD` and `OPTIONS`) finished,
//!   that object is handed only answers from exchanges sent after it: it
//!   sees what its write did, never an answer from before it. Others may
//!   still get the earlier answer while it is as fresh as they accept
//!   (session consistency, the session being the object): one object's
//!   write does not make every other object of the destination read
//!   again, which at thousands of objects and one write a few
//!   milliseconds would leave nothing to share (`docs/benchmarks/
//!   effects.md`, "Recovery"). A plugin that must see others' writes at
//!   once asks `max-age=0`. An exchange not sent yet is joinable by
//!   anyone: it will start after every write so far.
//!
//! Secrets: the key is a digest of the request as it goes on the wire, so
//! two objects whose Secrets differ never share, and an object shares only
//! an exchange its own grant let it make (the checks run per object
//! before the lookup). The answer is masked once, for the secrets it was
//! built with, which are every sharer's secrets.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use super::secrets::Wire;
use crate::contract::{HttpError, HttpResponse};

/// A digest of a request as sent.
pub(super) type Key = [u8; 32];

/// What one exchange came to, masked, shared by everyone who joined it.
pub(super) type Shared = Arc<Result<HttpResponse, HttpError>>;

/// The most answer bytes kept for reuse; past it answers are shared only
/// with those who joined the exchange.
const MAX_CACHED_BYTES: usize = 64 << 20;

/// The most (object, destination) writes remembered; past it every
/// object must read after every write so far (what is forgotten is
/// assumed of everyone).
const MAX_WRITERS: usize = 65_536;

/// The key of a request.
pub(super) fn key(plugin: &str, method: &str, wire: &Wire) -> Key {
    use sha2::Digest;
    let mut hash = sha2::Sha256::new();
    for part in [plugin.as_bytes(), method.as_bytes(), wire.url.as_bytes()] {
        hash.update((part.len() as u64).to_le_bytes());
        hash.update(part);
    }
    let mut headers: Vec<(String, &str)> = wire
        .headers
        .iter()
        .filter(|(n, _)| !n.eq_ignore_ascii_case("cache-control"))
        .map(|(n, v)| (n.to_ascii_lowercase(), v.as_str()))
        .collect();
    headers.sort();
    for (n, v) in headers {
        hash.update((n.len() as u64).to_le_bytes());
        hash.update(n.as_bytes());
        hash.update((v.len() as u64).to_le_bytes());
        hash.update(v.as_bytes());
    }
    let body = wire.body.as_deref().unwrap_or_default();
    hash.update((body.len() as u64).to_le_bytes());
    hash.update(body);
    hash.finalize().into()
}

/// How old an answer the request accepts, from its `Cache-Control`
/// header: `None` when it says nothing.
pub(super) fn max_age(headers: &[(String, String)]) -> Option<Duration> {
    let mut accepted = None;
    for (name, value) in headers {
        if !name.eq_ignore_ascii_case("cache-control") {
            continue;
        }
        for directive in value.split(',') {
            let directive = directive.trim().to_ascii_lowercase();
            if directive == "no-cache" || directive == "no-store" {
                return Some(Duration::ZERO);
            }
            if let Some(secs) = directive.strip_prefix("max-age=")
                && let Ok(secs) = secs.trim().parse::<u64>()
            {
                let secs = Duration::from_secs(secs);
                accepted = Some(accepted.map_or(secs, |a: Duration| a.min(secs)));
            }
        }
    }
    accepted
}

enum Entry {
    /// Waiting for its turn (`sent_at` `None`) or on the wire; the answer
    /// comes through the channel.
    Flying {
        id: u64,
        sent_at: Option<u64>,
        /// In the urgent lane: an urgent request joins only such a flight
        /// (or one on the wire), never one still queued behind others.
        urgent: bool,
        answer: watch::Receiver<Option<Shared>>,
    },
    /// Answered at `at`, from an exchange sent when `epoch` writes to the
    /// destination had finished.
    Done {
        at: Instant,
        epoch: u64,
        bytes: usize,
        answer: Shared,
    },
}

#[derive(Default)]
struct State {
    entries: HashMap<Key, Entry>,
    /// Per destination: how many writes to it have finished.
    epochs: HashMap<String, u64>,
    /// Per destination, per object: the epoch its last write there ended
    /// (keyed so that a lookup borrows its strings).
    writers: HashMap<String, HashMap<String, u64>>,
    /// How many (destination, object) writes `writers` holds.
    writer_count: usize,
    /// Per destination: the epoch everyone must read after, since
    /// `writers` was last forgotten.
    floor: HashMap<String, u64>,
    cached_bytes: usize,
    next_id: u64,
}

/// What a lookup found.
pub(super) enum Lookup {
    /// A fresh answer.
    Hit(Shared),
    /// An exchange to wait for.
    Join(watch::Receiver<Option<Shared>>),
    /// Nobody has it: the caller makes the exchange and must call
    /// [`Flight::sent`] when it goes and [`Flight::land`] with its answer.
    Lead(Flight),
}

/// The exchange a leader makes for everyone who joins it.
pub(super) struct Flight {
    table: Arc<Observations>,
    key: Key,
    id: u64,
    destination: String,
    sender: watch::Sender<Option<Shared>>,
    /// Sent as a circuit breaker's probe.
    probe: std::sync::atomic::AtomicBool,
}

impl Flight {
    /// The exchange goes on the wire now: from here on it reflects the
    /// destination as of now, and a write finishing after this makes it
    /// stale. A `probe` (the one request a failing destination's breaker
    /// lets through) that fails is not handed to those who joined: they go
    /// on waiting for the next, rather than every one of them failing (and
    /// calling its plugin) at every probe.
    pub(super) fn sent(&self, probe: bool) {
        self.probe
            .store(probe, std::sync::atomic::Ordering::Relaxed);
        let mut state = self.table.state();
        let epoch = state.epochs.get(&self.destination).copied().unwrap_or(0);
        if let Some(Entry::Flying { id, sent_at, .. }) = state.entries.get_mut(&self.key)
            && *id == self.id
        {
            *sent_at = Some(epoch);
        }
    }

    /// The answer: handed to everyone who joined, and kept for reuse while
    /// fresh when `keep` (an answer, not an error; not after a write
    /// started meanwhile).
    pub(super) fn land(self, answer: Shared, keep: bool) {
        let failed = match answer.as_ref() {
            Ok(response) => response.status >= 500,
            Err(_) => true,
        };
        if failed && self.probe.load(std::sync::atomic::Ordering::Relaxed) {
            // Dropped unlanded: the joiners look again.
            return;
        }
        let mut state = self.table.state();
        let ours = matches!(state.entries.get(&self.key), Some(Entry::Flying { id, .. }) if *id == self.id);
        if ours {
            let sent_at = match state.entries.remove(&self.key) {
                Some(Entry::Flying { sent_at, .. }) => sent_at,
                _ => None,
            };
            let bytes = answer.as_ref().as_ref().map_or(0, |r| r.body.len());
            if let Some(epoch) = sent_at
                && keep
                && state.cached_bytes + bytes <= MAX_CACHED_BYTES
            {
                state.cached_bytes += bytes;
                state.entries.insert(
                    self.key,
                    Entry::Done {
                        at: Instant::now(),
                        epoch,
                        bytes,
                        answer: answer.clone(),
                    },
                );
            }
        }
        drop(state);
        let _ = self.sender.send(Some(answer));
    }
}

impl Drop for Flight {
    fn drop(&mut self) {
        // Landed or abandoned: an abandoned flight's joiners see the
        // channel close and look again.
        let mut state = self.table.state();
        if matches!(state.entries.get(&self.key), Some(Entry::Flying { id, .. }) if *id == self.id)
        {
            state.entries.remove(&self.key);
        }
    }
}

/// The shared observations of a host.
#[derive(Default)]
pub(super) struct Observations {
    state: Mutex<State>,
}

impl Observations {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Find an answer or an exchange for `key`, or lead a new one, for
    /// `reader` (the object asking: it is handed nothing sent before its
    /// own last write to `destination` finished). `max_age` is how old an
    /// answer the requester accepts (zero: only an exchange not sent yet).
    pub(super) fn lookup(
        self: &Arc<Self>,
        key: Key,
        destination: &str,
        reader: &str,
        max_age: Duration,
        urgent: bool,
    ) -> Lookup {
        let mut state = self.state();
        let floor = state.floor.get(destination).copied().unwrap_or(0);
        let own = state
            .writers
            .get(destination)
            .and_then(|w| w.get(reader))
            .copied()
            .unwrap_or(0);
        let after = floor.max(own);
        let now = Instant::now();
        match state.entries.get(&key) {
            Some(Entry::Done {
                at,
                epoch: answered_in,
                answer,
                ..
            }) if *answered_in >= after && now.saturating_duration_since(*at) <= max_age => {
                return Lookup::Hit(answer.clone());
            }
            Some(Entry::Flying {
                sent_at,
                answer,
                urgent: flying_urgent,
                ..
            }) if (sent_at.is_none() && (*flying_urgent || !urgent))
                || (sent_at.is_some_and(|sent| sent >= after) && !max_age.is_zero()) =>
            {
                return Lookup::Join(answer.clone());
            }
            _ => {}
        }
        if let Some(Entry::Done { bytes, .. }) = state.entries.remove(&key) {
            state.cached_bytes -= bytes;
        }
        if state.entries.len() >= 1024 {
            Self::sweep(&mut state, now);
        }
        state.next_id += 1;
        let id = state.next_id;
        let (sender, receiver) = watch::channel(None);
        state.entries.insert(
            key,
            Entry::Flying {
                id,
                sent_at: None,
                urgent,
                answer: receiver,
            },
        );
        Lookup::Lead(Flight {
            table: self.clone(),
            key,
            id,
            destination: destination.to_owned(),
            sender,
            probe: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// A write of `writer` to `destination` finished (or failed): what was
    /// read from it before is not fresh any more for `writer`.
    pub(super) fn wrote(&self, destination: &str, writer: &str) {
        let mut state = self.state();
        let epoch = state.epochs.entry(destination.to_owned()).or_default();
        *epoch += 1;
        let epoch = *epoch;
        if state.writer_count >= MAX_WRITERS {
            state.writers.clear();
            state.writer_count = 0;
            state.floor = state.epochs.clone();
        }
        let writers = state.writers.entry(destination.to_owned()).or_default();
        if writers.insert(writer.to_owned(), epoch).is_none() {
            state.writer_count += 1;
        }
    }

    /// Drop answers older than any window a requester could still accept
    /// from them (a minute).
    fn sweep(state: &mut State, now: Instant) {
        let mut freed = 0;
        state.entries.retain(|_, e| match e {
            Entry::Done { at, bytes, .. }
                if now.saturating_duration_since(*at) > Duration::from_secs(60) =>
            {
                freed += *bytes;
                false
            }
            _ => true,
        });
        state.cached_bytes -= freed;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wire(url: &str, key: &str) -> Wire {
        Wire {
            url: url.into(),
            headers: vec![("X-API-Key".into(), key.into())],
            body: None,
            derived: Vec::new(),
        }
    }

    fn ok(body: &str) -> Shared {
        Arc::new(Ok(HttpResponse {
            status: 200,
            headers: Vec::new(),
            body: body.as_bytes().to_vec(),
        }))
    }

    #[test]
    fn different_secret_values_make_different_keys() {
        let a = key("p", "GET", &wire("http://a/z", "one-secret"));
        let b = key("p", "GET", &wire("http://a/z", "another-secret"));
        assert_ne!(a, b);
        assert_ne!(
            a,
            key("q", "GET", &wire("http://a/z", "one-secret")),
            "plugins never share"
        );
        let mut with_cache_control = wire("http://a/z", "one-secret");
        with_cache_control
            .headers
            .push(("Cache-Control".into(), "max-age=5".into()));
        assert_eq!(
            a,
            key("p", "GET", &with_cache_control),
            "Cache-Control is not the request"
        );
    }

    #[test]
    fn max_age_reads_the_request_directives() {
        let h = |v: &str| vec![("cache-control".to_owned(), v.to_owned())];
        assert_eq!(max_age(&h("max-age=15")), Some(Duration::from_secs(15)));
        assert_eq!(max_age(&h("no-cache")), Some(Duration::ZERO));
        assert_eq!(max_age(&[]), None);
    }

    #[tokio::test(start_paused = true)]
    async fn joiners_share_a_flight_and_a_write_ends_the_freshness() {
        let table = Arc::new(Observations::default());
        let k = key("p", "GET", &wire("http://a/z", "s3cret"));
        let window = Duration::from_secs(5);
        let Lookup::Lead(flight) = table.lookup(k, "http://a:80", "o", window, false) else {
            panic!("first leads")
        };
        let Lookup::Join(mut joined) = table.lookup(k, "http://a:80", "o", window, false) else {
            panic!("second joins")
        };
        flight.sent(false);
        flight.land(ok("one"), true);
        joined.changed().await.unwrap();
        assert!(joined.borrow().is_some());
        assert!(matches!(
            table.lookup(k, "http://a:80", "o", window, false),
            Lookup::Hit(_)
        ));
        tokio::time::advance(Duration::from_secs(6)).await;
        assert!(
            matches!(
                table.lookup(k, "http://a:80", "o", window, false),
                Lookup::Lead(_)
            ),
            "too old"
        );

        // Answered, then a write: not fresh any more.
        let Lookup::Lead(flight) = table.lookup(k, "http://a:80", "o", window, false) else {
            panic!()
        };
        flight.sent(false);
        flight.land(ok("two"), true);
        table.wrote("http://a:80", "o");
        assert!(
            matches!(
                table.lookup(k, "http://a:80", "other", window, false),
                Lookup::Hit(_)
            ),
            "another object may still have the answer while it is fresh"
        );
        let Lookup::Lead(_after) = table.lookup(k, "http://a:80", "o", window, false) else {
            panic!("the writer reads after its write")
        };
        assert!(
            matches!(
                table.lookup(k, "http://a:80", "other", window, false),
                Lookup::Join(_)
            ),
            "and the others may join that read"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn forgotten_writers_are_assumed_of_everyone() {
        let table = Arc::new(Observations::default());
        let k = key("p", "GET", &wire("http://a/z", "s3cret"));
        let window = Duration::from_secs(5);
        let Lookup::Lead(flight) = table.lookup(k, "d", "o", window, false) else {
            panic!()
        };
        flight.sent(false);
        flight.land(ok("one"), true);
        for i in 0..MAX_WRITERS {
            table.wrote("elsewhere", &format!("w{i}"));
        }
        table.wrote("d", "o");
        assert!(
            matches!(table.lookup(k, "d", "o", window, false), Lookup::Lead(_)),
            "its own write"
        );
        let table = Arc::new(Observations::default());
        let Lookup::Lead(flight) = table.lookup(k, "d", "o", window, false) else {
            panic!()
        };
        flight.sent(false);
        flight.land(ok("one"), true);
        table.wrote("d", "writer");
        for i in 0..MAX_WRITERS {
            table.wrote("elsewhere", &format!("w{i}"));
        }
        assert!(
            table.state().writer_count < MAX_WRITERS,
            "the writers are bounded"
        );
        assert!(
            matches!(
                table.lookup(k, "d", "anyone", window, false),
                Lookup::Lead(_)
            ),
            "once forgotten, the write is assumed of everyone"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_exchange_sent_before_a_write_is_not_joined_after_it_one_not_sent_yet_is() {
        let table = Arc::new(Observations::default());
        let k = key("p", "GET", &wire("http://a/z", "s3cret"));
        let window = Duration::from_secs(5);
        let Lookup::Lead(queued) = table.lookup(k, "d", "o", window, false) else {
            panic!()
        };
        table.wrote("d", "o");
        assert!(
            matches!(table.lookup(k, "d", "o", window, false), Lookup::Join(_)),
            "not sent yet: it will start after the write"
        );
        queued.sent(false);
        table.wrote("d", "o");
        let Lookup::Lead(fresh) = table.lookup(k, "d", "o", window, false) else {
            panic!("sent before the write: a new exchange")
        };
        queued.land(ok("old"), true);
        assert!(
            matches!(table.lookup(k, "d", "o", window, false), Lookup::Join(_)),
            "the older flight's answer does not replace the newer flight"
        );
        drop(fresh);
    }

    #[tokio::test(start_paused = true)]
    async fn an_urgent_read_does_not_wait_behind_a_queued_one() {
        let table = Arc::new(Observations::default());
        let k = key("p", "GET", &wire("http://a/z", "s3cret"));
        let window = Duration::from_secs(5);
        let Lookup::Lead(_queued) = table.lookup(k, "d", "o", window, false) else {
            panic!()
        };
        let Lookup::Lead(urgent) = table.lookup(k, "d", "o", window, true) else {
            panic!("an urgent read leads a flight of its own")
        };
        assert!(
            matches!(table.lookup(k, "d", "o", window, false), Lookup::Join(_)),
            "others may join the urgent one"
        );
        urgent.sent(false);
        assert!(matches!(
            table.lookup(k, "d", "o", window, true),
            Lookup::Join(_)
        ));
    }
}
