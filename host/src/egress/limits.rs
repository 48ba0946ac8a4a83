//! When each external request may go: a fair queue per plugin.
//!
//! A request over a limit waits its turn instead of being refused: every
//! plugin has one lane, and in it one first-in-first-out queue per
//! destination (`scheme://host:port`), with a lane of its own for urgent
//! requests (those of an object being deleted) served first. A dispatcher
//! task per plugin hands out turns, round robin across the destinations
//! that have waiters, so one busy destination never holds back another.
//! A turn is given only when every limit agrees:
//!
//! - the plugin's token bucket (default 50/s, or the grant's `rps`);
//! - the destination's token bucket (20/s, or the grant's `rps`);
//! - the plugin's concurrency cap (8, or the grant's `concurrency`);
//! - the destination's own concurrency, which adapts: it starts at one,
//!   is raised by one after a run of successes and halved when the
//!   destination answers 5xx or not at all (the next run to earn a raise is
//!   then twice as long), never above the cap. A server that cannot take
//!   parallel writes (PowerDNS on SQLite answers "database is locked") is
//!   then sent one at a time, and costs a failed request only rarely;
//! - a `Retry-After` the destination gave;
//! - the destination's circuit breaker: consecutive failures open it, then
//!   one waiter is let through every `breaker_probe_every` as a probe, and
//!   the first answer closes it, so the queue drains as soon as the
//!   destination is back.
//!
//! Waiting costs nothing: the waiter sleeps on a channel until its turn or
//! its deadline. A waiter whose turn would plainly come after its deadline
//! is told so at once ([`Held`]), with the time it should come back, and
//! takes no token; a turn taken but not used (the waiter gave up in the
//! meantime) gives its tokens back. Tokens are therefore spent only on
//! requests that are sent.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::sync::{Notify, oneshot};
use tokio::time::Instant;

/// Defaults of the limits (a `PluginGrant`'s `spec.limits` overrides the
/// per-plugin rate and concurrency).
#[derive(Debug, Clone, Copy)]
pub struct LimitsConfig {
    /// Requests per second per plugin.
    pub plugin_rps: f64,
    /// Requests in flight per plugin.
    pub plugin_concurrency: usize,
    /// Requests per second per plugin and destination, unless the grant
    /// sets the plugin's rate (which then applies per destination too).
    pub destination_rps: f64,
    /// Consecutive failures (no answer, or 5xx) that open a destination's
    /// breaker.
    pub breaker_failures: u32,
    /// While a destination's breaker is open, one waiting request is let
    /// through this often to try it; the first that is answered closes the
    /// breaker. Short, so that the requests held meanwhile go soon after
    /// the destination is back: a probe is one request, no burden.
    pub breaker_probe_every: Duration,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        Self {
            plugin_rps: 50.0,
            plugin_concurrency: 8,
            destination_rps: 20.0,
            breaker_failures: 5,
            breaker_probe_every: Duration::from_secs(1),
        }
    }
}

/// Why a request may not go before its deadline, and when to try again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Held {
    /// What holds it: `rate limit`, `Retry-After`, `circuit breaker`,
    /// `concurrency limit`.
    pub reason: &'static str,
    /// When to try again.
    pub after: Duration,
}

/// What a request asks of the limits.
#[derive(Debug, Clone, Copy)]
pub struct Ask<'a> {
    /// The plugin.
    pub plugin: &'a str,
    /// The destination, `scheme://host:port`.
    pub destination: &'a str,
    /// The grant's rate, if it sets one.
    pub granted_rps: Option<f64>,
    /// The grant's concurrency, if it sets one.
    pub granted_concurrency: Option<usize>,
    /// Served before the destination's other waiters (an object being
    /// deleted: its user waits on it).
    pub urgent: bool,
    /// When the requester stops waiting.
    pub deadline: Instant,
}

/// A token bucket kept as its theoretical arrival time (GCRA): `rate`
/// requests a second, bursts of up to `rate` (at least one).
#[derive(Debug)]
struct Bucket {
    tat: Instant,
}

impl Bucket {
    fn new(now: Instant) -> Self {
        Self { tat: now }
    }

    fn interval(rate: f64) -> Duration {
        Duration::from_secs_f64(1.0 / rate.max(0.001))
    }

    /// The earliest time a request conforms.
    fn ready_at(&self, rate: f64) -> Instant {
        let tolerance = Self::interval(rate).mul_f64(rate.max(1.0) - 1.0);
        self.tat.checked_sub(tolerance).unwrap_or(self.tat)
    }

    fn take(&mut self, rate: f64, now: Instant) {
        self.tat = self.tat.max(now) + Self::interval(rate);
    }

    fn give_back(&mut self, rate: f64) {
        self.tat = self
            .tat
            .checked_sub(Self::interval(rate))
            .unwrap_or(self.tat);
    }
}

/// One destination of one plugin, as [`Limits::destinations`] reports it.
#[derive(Debug, Clone, PartialEq)]
pub struct DestinationState {
    /// The plugin.
    pub plugin: String,
    /// The destination (`scheme://host:port`).
    pub destination: String,
    /// `closed`, `open` (refusing until its probe is due) or `half-open`
    /// (a probe is due or out).
    pub breaker: &'static str,
    /// Requests waiting for their turn.
    pub waiting: usize,
    /// Requests sent and not answered yet.
    pub in_flight: usize,
    /// Requests it is given at once, as learnt from its answers.
    pub concurrency: usize,
    /// Requests per second granted.
    pub rate: f64,
    /// Failures in a row.
    pub consecutive_failures: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Breaker {
    Closed,
    /// Refusing until then; then one probe.
    Open(Instant),
    /// A probe is out; the others wait for its outcome.
    Probing,
}

/// How many requests a destination gets at once, learnt from its answers.
#[derive(Debug)]
struct Adaptive {
    limit: usize,
    streak: u32,
    needed: u32,
}

/// Successes in a row before a destination is first given one more
/// request at once. Trying more costs a failed request when the server
/// cannot take it (PowerDNS on SQLite), so the run is long, and it doubles
/// after every cut.
const FIRST_STREAK: u32 = 64;

/// Destinations a plugin's lane remembers before it forgets idle ones.
const MAX_IDLE_DESTINATIONS: usize = 1024;
const LONGEST_STREAK: u32 = 4096;

impl Adaptive {
    fn new() -> Self {
        Self {
            limit: 1,
            streak: 0,
            needed: FIRST_STREAK,
        }
    }

    fn record(&mut self, failed: bool, cap: usize) {
        if failed {
            self.limit = (self.limit / 2).max(1);
            self.streak = 0;
            self.needed = (self.needed * 2).min(LONGEST_STREAK);
        } else {
            self.streak += 1;
            if self.streak >= self.needed {
                self.streak = 0;
                self.limit = (self.limit + 1).min(cap.max(1));
            }
        }
        self.limit = self.limit.min(cap.max(1));
    }
}

struct Waiter {
    turn: oneshot::Sender<Turn>,
}

struct Destination {
    bucket: Bucket,
    rate: f64,
    urgent: VecDeque<Waiter>,
    normal: VecDeque<Waiter>,
    retry_after: Option<Instant>,
    breaker: Breaker,
    failures: u32,
    in_flight: usize,
    adaptive: Adaptive,
    /// Turns given while another request to it was in flight: a turn
    /// that sees this move ran alongside another.
    overlaps: u64,
}

impl Destination {
    fn new(now: Instant, rate: f64) -> Self {
        Self {
            bucket: Bucket::new(now),
            rate,
            urgent: VecDeque::new(),
            normal: VecDeque::new(),
            retry_after: None,
            breaker: Breaker::Closed,
            failures: 0,
            in_flight: 0,
            adaptive: Adaptive::new(),
            overlaps: 0,
        }
    }

    /// Nothing waits, runs or is held: forgetting it loses nothing.
    fn is_idle(&self, now: Instant) -> bool {
        self.waiting() == 0
            && self.in_flight == 0
            && self.breaker == Breaker::Closed
            && self.failures == 0
            && self.retry_after.is_none_or(|until| until <= now)
            && self.bucket.tat <= now
    }

    fn waiting(&self) -> usize {
        self.urgent.len() + self.normal.len()
    }

    fn drop_gone(&mut self) {
        while self.urgent.front().is_some_and(|w| w.turn.is_closed()) {
            self.urgent.pop_front();
        }
        while self.normal.front().is_some_and(|w| w.turn.is_closed()) {
            self.normal.pop_front();
        }
    }

    /// When its next waiter may go as far as this destination is
    /// concerned, and what holds it until then; `None`: not by time (a
    /// probe or the requests in flight must come back first).
    fn open_at(&self, now: Instant) -> (Option<Instant>, &'static str) {
        if let Some(until) = self.retry_after
            && until > now
        {
            return (Some(until), "Retry-After");
        }
        match self.breaker {
            Breaker::Open(until) if until > now => return (Some(until), "circuit breaker"),
            Breaker::Probing => return (None, "circuit breaker"),
            _ => {}
        }
        if self.in_flight >= self.adaptive.limit {
            return (None, "concurrency limit");
        }
        let ready = self.bucket.ready_at(self.rate);
        (Some(ready.max(now)), "rate limit")
    }
}

struct LaneState {
    bucket: Bucket,
    rate: f64,
    cap: usize,
    in_flight: usize,
    destinations: HashMap<String, Destination>,
    /// Destinations with waiters, in round-robin order.
    order: VecDeque<String>,
    /// Whether the dispatcher task runs.
    running: bool,
}

/// One plugin's queues and limits.
struct Lane {
    plugin: String,
    state: Mutex<LaneState>,
    wake: Notify,
    config: LimitsConfig,
    recovered: tokio::sync::broadcast::Sender<(String, String)>,
}

/// A turn to send one request: holds its place in the concurrency limits
/// until dropped. [`Turn::finish`] tells the limits how it went.
pub struct Turn {
    lane: Weak<Lane>,
    destination: String,
    /// Still to be given back if never handed to its waiter.
    unused: bool,
    /// The one request an open breaker lets through.
    probe: bool,
    /// The destination's `overlaps` before this turn was given: a move
    /// since says another request to it ran alongside (given before this
    /// one, counting it, or after).
    overlaps: u64,
}

impl std::fmt::Debug for Turn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Turn")
            .field("destination", &self.destination)
            .finish_non_exhaustive()
    }
}

impl Turn {
    /// Whether this is the one request an open breaker lets through to try
    /// the destination.
    pub fn is_probe(&self) -> bool {
        self.probe
    }

    /// How the request went: `failed` (no answer, or 5xx) counts towards
    /// the breaker and halves the destination's concurrency, anything else
    /// closes the breaker; a `retry_after` holds the destination's
    /// requests until it passes.
    ///
    /// Returns whether another request to the destination ran at the same
    /// time as this one: a failure then may be the server refusing
    /// parallel work (PowerDNS on SQLite answers 500 "database is
    /// locked"), which the halved concurrency now avoids, so the request
    /// is worth sending once more.
    pub fn finish(self, failed: bool, retry_after: Option<Duration>) -> bool {
        let Some(lane) = self.lane.upgrade() else {
            return false;
        };
        let mut state = lane.state();
        let now = Instant::now();
        let cap = state.cap;
        let mut crowded = false;
        if let Some(d) = state.destinations.get_mut(&self.destination) {
            crowded = d.overlaps != self.overlaps;
            if let Some(after) = retry_after {
                d.retry_after = Some(now + after);
            }
            d.adaptive.record(failed, cap);
            if failed {
                d.failures += 1;
                if d.breaker == Breaker::Probing || d.failures >= lane.config.breaker_failures {
                    d.breaker = Breaker::Open(now + lane.config.breaker_probe_every);
                }
            } else {
                d.failures = 0;
                if d.breaker != Breaker::Closed {
                    d.breaker = Breaker::Closed;
                    let _ = lane
                        .recovered
                        .send((lane.plugin.clone(), self.destination.clone()));
                }
            }
        }
        drop(state);
        // Drop (below) releases the concurrency and wakes the dispatcher.
        crowded
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        let Some(lane) = self.lane.upgrade() else {
            return;
        };
        let mut state = lane.state();
        state.in_flight = state.in_flight.saturating_sub(1);
        let rate = state.rate;
        if self.unused {
            state.bucket.give_back(rate);
        }
        if let Some(d) = state.destinations.get_mut(&self.destination) {
            d.in_flight = d.in_flight.saturating_sub(1);
            if self.unused {
                let rate = d.rate;
                d.bucket.give_back(rate);
                if d.breaker == Breaker::Probing {
                    // The probe was never sent: let the next waiter try.
                    d.breaker = Breaker::Open(Instant::now());
                }
            }
        }
        drop(state);
        lane.wake.notify_one();
    }
}

impl Lane {
    fn state(&self) -> std::sync::MutexGuard<'_, LaneState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Hand out every turn that may go now; when the next one may, or
    /// `None` when nobody waits.
    fn pump(self: &Arc<Self>, state: &mut LaneState, now: Instant) -> Option<Instant> {
        loop {
            state.order.retain(|name| {
                state.destinations.get_mut(name).is_some_and(|d| {
                    d.drop_gone();
                    d.waiting() > 0
                })
            });
            if state.order.is_empty() {
                return None;
            }
            let far = now + Duration::from_secs(3600);
            if state.in_flight >= state.cap {
                return Some(far);
            }
            let plugin_ready = state.bucket.ready_at(state.rate);
            if plugin_ready > now {
                return Some(plugin_ready);
            }
            // Urgent waiters of any destination first, then round robin.
            let mut chosen = None;
            let mut next = far;
            'passes: for urgent in [true, false] {
                for (i, name) in state.order.iter().enumerate() {
                    let d = &state.destinations[name];
                    let has = if urgent {
                        !d.urgent.is_empty()
                    } else {
                        !d.normal.is_empty()
                    };
                    if !has {
                        continue;
                    }
                    match d.open_at(now).0 {
                        Some(at) if at <= now => {
                            chosen = Some((i, urgent));
                            break 'passes;
                        }
                        Some(at) => next = next.min(at),
                        None => {}
                    }
                }
            }
            let Some((i, urgent)) = chosen else {
                return Some(next);
            };
            let name = state.order.remove(i).expect("index from the same order");
            state.order.push_back(name.clone());
            let (plugin_rate, cap) = (state.rate, state.cap);
            let d = state
                .destinations
                .get_mut(&name)
                .expect("destinations in order exist");
            let waiter = if urgent {
                d.urgent.pop_front()
            } else {
                d.normal.pop_front()
            }
            .expect("chosen for its waiter");
            let probe = matches!(d.breaker, Breaker::Open(_));
            if probe {
                d.breaker = Breaker::Probing;
            }
            let rate = d.rate;
            d.bucket.take(rate, now);
            let overlaps = d.overlaps;
            if d.in_flight > 0 {
                d.overlaps += 1;
            }
            d.in_flight += 1;
            d.adaptive.limit = d.adaptive.limit.min(cap.max(1));
            state.bucket.take(plugin_rate, now);
            state.in_flight += 1;
            let turn = Turn {
                lane: Arc::downgrade(self),
                destination: name,
                unused: true,
                probe,
                overlaps,
            };
            if let Err(mut turn) = waiter.turn.send(turn) {
                // Gave up a moment ago: its tokens and place go back
                // (when `turn` drops, outside the lock: see below).
                turn.unused = true;
                // Drop takes the lock: undo by hand here instead.
                turn.lane = Weak::new();
                state.in_flight -= 1;
                state.bucket.give_back(plugin_rate);
                if let Some(d) = state.destinations.get_mut(&turn.destination) {
                    d.in_flight -= 1;
                    let rate = d.rate;
                    d.bucket.give_back(rate);
                    if d.breaker == Breaker::Probing {
                        d.breaker = Breaker::Open(now);
                    }
                }
            }
        }
    }

    async fn dispatch(self: Arc<Self>) {
        loop {
            let notified = self.wake.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let next = {
                let mut state = self.state();
                match self.pump(&mut state, Instant::now()) {
                    Some(next) => next,
                    None => {
                        state.running = false;
                        return;
                    }
                }
            };
            tokio::select! {
                () = tokio::time::sleep_until(next) => {}
                () = notified => {}
            }
        }
    }
}

/// The limits of every plugin and destination.
pub struct Limits {
    config: LimitsConfig,
    lanes: Mutex<HashMap<String, Arc<Lane>>>,
    recovered: tokio::sync::broadcast::Sender<(String, String)>,
}

impl Limits {
    /// Limits with these defaults.
    pub fn new(config: LimitsConfig) -> Self {
        Self {
            config,
            lanes: Mutex::default(),
            recovered: tokio::sync::broadcast::Sender::new(256),
        }
    }

    /// `(plugin, destination)` each time a destination's breaker closes.
    pub fn recovered(&self) -> tokio::sync::broadcast::Receiver<(String, String)> {
        self.recovered.subscribe()
    }

    fn lane(&self, plugin: &str) -> Arc<Lane> {
        let mut lanes = self.lanes.lock().unwrap_or_else(|p| p.into_inner());
        lanes
            .entry(plugin.to_owned())
            .or_insert_with(|| {
                Arc::new(Lane {
                    plugin: plugin.to_owned(),
                    recovered: self.recovered.clone(),
                    state: Mutex::new(LaneState {
                        bucket: Bucket::new(Instant::now()),
                        rate: self.config.plugin_rps,
                        cap: self.config.plugin_concurrency,
                        in_flight: 0,
                        destinations: HashMap::new(),
                        order: VecDeque::new(),
                        running: false,
                    }),
                    wake: Notify::new(),
                    config: self.config,
                })
            })
            .clone()
    }

    /// Wait for a turn to send one request, until `ask.deadline`; or say
    /// at once what holds it when its turn would plainly come too late.
    /// Must be called inside a tokio runtime (a plugin's dispatcher task
    /// is started on demand).
    pub async fn turn(&self, ask: Ask<'_>) -> Result<Turn, Held> {
        let lane = self.lane(ask.plugin);
        let now = Instant::now();
        let plugin_rate = ask.granted_rps.unwrap_or(self.config.plugin_rps);
        // A grant's rate is the operator's word for this plugin's
        // destinations too; without one, each destination gets less than
        // the plugin as a whole.
        let destination_rate = match ask.granted_rps {
            Some(granted) => granted,
            None => self.config.destination_rps.min(plugin_rate),
        };
        let cap = ask
            .granted_concurrency
            .unwrap_or(self.config.plugin_concurrency)
            .max(1);
        let (receiver, start) = {
            let mut state = lane.state();
            state.rate = plugin_rate;
            state.cap = cap;
            if state.destinations.len() >= MAX_IDLE_DESTINATIONS {
                // A grant with a wildcard lets a plugin name any number of
                // hosts: forget the ones with nothing to remember.
                state.destinations.retain(|_, d| !d.is_idle(now));
            }
            let d = state
                .destinations
                .entry(ask.destination.to_owned())
                .or_insert_with(|| Destination::new(now, destination_rate));
            d.rate = destination_rate;
            // Those ahead go first, one interval apart at best.
            let ahead = if ask.urgent {
                d.urgent.len()
            } else {
                d.waiting()
            };
            let (open, reason) = d.open_at(now);
            let by_rate = Bucket::interval(destination_rate.min(plugin_rate)).mul_f64(ahead as f64);
            let earliest = open.unwrap_or(now) + by_rate;
            if earliest > ask.deadline {
                return Err(Held {
                    reason,
                    after: earliest.saturating_duration_since(now),
                });
            }
            let (sender, receiver) = oneshot::channel();
            let waiter = Waiter { turn: sender };
            if ask.urgent {
                d.urgent.push_back(waiter);
            } else {
                d.normal.push_back(waiter);
            }
            if !state.order.iter().any(|n| n == ask.destination) {
                state.order.push_back(ask.destination.to_owned());
            }
            let start = !state.running;
            state.running = true;
            (receiver, start)
        };
        if start {
            tokio::spawn(lane.clone().dispatch());
        } else {
            lane.wake.notify_one();
        }
        match tokio::time::timeout_at(ask.deadline, receiver).await {
            Ok(Ok(mut turn)) => {
                turn.unused = false;
                Ok(turn)
            }
            _ => {
                let state = lane.state();
                let (open, reason) = state
                    .destinations
                    .get(ask.destination)
                    .map_or((None, "rate limit"), |d| d.open_at(Instant::now()));
                let after = open
                    .map_or(self.config.breaker_probe_every, |at| {
                        at.saturating_duration_since(Instant::now())
                    })
                    .max(Duration::from_millis(100));
                Err(Held { reason, after })
            }
        }
    }

    /// Every plugin's lane, taken out of the map's lock so that reading
    /// one lane's state does not hold up the others.
    fn lanes_now(&self) -> Vec<(String, Arc<Lane>)> {
        self.lanes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    /// Each plugin's destinations as its lane sees them now: breaker,
    /// requests waiting and running, the concurrency learnt, the rate.
    pub fn destinations(&self) -> Vec<DestinationState> {
        let now = Instant::now();
        let mut out = Vec::new();
        for (plugin, lane) in self.lanes_now() {
            let state = lane.state();
            for (name, d) in &state.destinations {
                out.push(DestinationState {
                    plugin: plugin.clone(),
                    destination: name.clone(),
                    breaker: match d.breaker {
                        Breaker::Closed => "closed",
                        Breaker::Open(until) if until > now => "open",
                        Breaker::Open(_) | Breaker::Probing => "half-open",
                    },
                    waiting: d.waiting(),
                    in_flight: d.in_flight,
                    concurrency: d.adaptive.limit,
                    rate: d.rate,
                    consecutive_failures: d.failures,
                });
            }
        }
        out.sort_by(|a, b| (&a.plugin, &a.destination).cmp(&(&b.plugin, &b.destination)));
        out
    }

    /// How many requests wait, per plugin and destination (for `/metrics`).
    pub fn waiting(&self) -> Vec<(String, String, usize)> {
        let mut out = Vec::new();
        for (plugin, lane) in self.lanes_now() {
            let state = lane.state();
            for (name, d) in &state.destinations {
                out.push((plugin.clone(), name.clone(), d.waiting()));
            }
        }
        out.sort();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ask<'a>(plugin: &'a str, destination: &'a str, rps: f64, within: Duration) -> Ask<'a> {
        Ask {
            plugin,
            destination,
            granted_rps: Some(rps),
            granted_concurrency: Some(64),
            urgent: false,
            deadline: Instant::now() + within,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn requests_over_the_rate_wait_their_turn_in_order_instead_of_being_refused() {
        let limits = Arc::new(Limits::new(LimitsConfig::default()));
        let started = Instant::now();
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        for i in 0..10 {
            let (limits, order) = (limits.clone(), order.clone());
            tasks.push(tokio::spawn(async move {
                let turn = limits
                    .turn(ask("p", "http://a:1", 5.0, Duration::from_secs(30)))
                    .await
                    .expect("waits rather than refused");
                order.lock().unwrap().push(i);
                turn.finish(false, None);
                Instant::now()
            }));
            tokio::task::yield_now().await;
        }
        let mut times = Vec::new();
        for t in tasks {
            times.push(t.await.unwrap());
        }
        assert_eq!(
            *order.lock().unwrap(),
            (0..10).collect::<Vec<_>>(),
            "first come, first served"
        );
        // A burst of 5, then one every 200 ms.
        let last = times.iter().max().unwrap().duration_since(started);
        assert!(
            last >= Duration::from_millis(950) && last <= Duration::from_millis(1100),
            "{last:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_turn_that_would_come_after_the_deadline_is_refused_at_once_without_a_token() {
        let limits = Limits::new(LimitsConfig::default());
        let first = limits
            .turn(ask("p", "http://a:1", 1.0, Duration::from_secs(1)))
            .await;
        drop(first.expect("the burst"));
        let before = Instant::now();
        let refused = limits
            .turn(ask("p", "http://a:1", 1.0, Duration::from_millis(500)))
            .await
            .expect_err("the next token comes in 1 s: too late");
        assert_eq!(refused.reason, "rate limit");
        assert!(refused.after >= Duration::from_millis(900), "{refused:?}");
        assert_eq!(Instant::now(), before, "answered without waiting");
        // No token was taken: the next waiter is served when the first
        // token comes, not a second later.
        limits
            .turn(ask("p", "http://a:1", 1.0, Duration::from_secs(2)))
            .await
            .expect("served");
        assert!(Instant::now().duration_since(before) <= Duration::from_millis(1050));
    }

    #[tokio::test(start_paused = true)]
    async fn a_busy_destination_does_not_hold_back_another() {
        let limits = Arc::new(Limits::new(LimitsConfig::default()));
        // 100 waiters on a destination served 10 a second.
        let mut busy = Vec::new();
        for _ in 0..100 {
            let limits = limits.clone();
            busy.push(tokio::spawn(async move {
                let turn = limits
                    .turn(ask("p", "http://busy:1", 10.0, Duration::from_secs(60)))
                    .await;
                drop(turn);
            }));
        }
        tokio::task::yield_now().await;
        tokio::time::sleep(Duration::from_millis(100)).await;
        let started = Instant::now();
        // Another destination of the same plugin (same grant rate).
        let quiet = limits
            .turn(ask("p", "http://quiet:1", 10.0, Duration::from_secs(60)))
            .await
            .expect("served");
        drop(quiet);
        assert!(
            started.elapsed() <= Duration::from_millis(250),
            "{:?}",
            started.elapsed()
        );
        for t in busy {
            t.abort();
        }
    }

    #[tokio::test(start_paused = true)]
    async fn urgent_requests_go_before_the_queue() {
        let limits = Arc::new(Limits::new(LimitsConfig::default()));
        let mut busy = Vec::new();
        for _ in 0..50 {
            let limits = limits.clone();
            busy.push(tokio::spawn(async move {
                let _ = limits
                    .turn(ask("p", "http://a:1", 5.0, Duration::from_secs(60)))
                    .await;
            }));
        }
        tokio::task::yield_now().await;
        let started = Instant::now();
        let mut urgent = ask("p", "http://a:1", 5.0, Duration::from_secs(60));
        urgent.urgent = true;
        drop(limits.turn(urgent).await.expect("served"));
        assert!(
            started.elapsed() <= Duration::from_millis(500),
            "{:?}",
            started.elapsed()
        );
        for t in busy {
            t.abort();
        }
    }

    #[tokio::test(start_paused = true)]
    async fn an_open_breaker_lets_one_probe_through_per_interval_and_its_answer_releases_the_queue()
    {
        let config = LimitsConfig {
            breaker_failures: 2,
            breaker_probe_every: Duration::from_millis(500),
            ..LimitsConfig::default()
        };
        let limits = Arc::new(Limits::new(config));
        for _ in 0..2 {
            let turn = limits
                .turn(ask("p", "d", 100.0, Duration::from_secs(5)))
                .await
                .unwrap();
            turn.finish(true, None);
        }
        // Open: the next waits for the probe time, then is the probe.
        let started = Instant::now();
        let probe = limits
            .turn(ask("p", "d", 100.0, Duration::from_secs(5)))
            .await
            .unwrap();
        assert!(
            started.elapsed() >= Duration::from_millis(450),
            "{:?}",
            started.elapsed()
        );
        // Others wait while the probe is out.
        let others: Vec<_> = (0..5)
            .map(|_| {
                let limits = limits.clone();
                tokio::spawn(async move {
                    limits
                        .turn(ask("p", "d", 100.0, Duration::from_secs(5)))
                        .await
                        .map(|t| t.finish(false, None))
                })
            })
            .collect();
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(
            others.iter().all(|t| !t.is_finished()),
            "held while the probe is out"
        );
        let mut recovered = limits.recovered();
        let answered = Instant::now();
        probe.finish(false, None);
        assert_eq!(
            recovered.try_recv().unwrap(),
            ("p".to_owned(), "d".to_owned()),
            "the breaker's closing is told"
        );
        for t in others {
            t.await.unwrap().expect("released");
        }
        assert!(
            answered.elapsed() <= Duration::from_millis(100),
            "{:?}",
            answered.elapsed()
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_destinations_concurrency_grows_with_successes_and_halves_on_failure() {
        let limits = Arc::new(Limits::new(LimitsConfig {
            breaker_failures: 100,
            ..LimitsConfig::default()
        }));
        let at_once = |n: usize| {
            let limits = limits.clone();
            async move {
                let mut turns = Vec::new();
                for _ in 0..n {
                    match limits
                        .turn(ask("p", "d", 1000.0, Duration::from_millis(50)))
                        .await
                    {
                        Ok(turn) => turns.push(turn),
                        Err(held) => {
                            assert_eq!(held.reason, "concurrency limit");
                            break;
                        }
                    }
                }
                turns
            }
        };
        let first = at_once(4).await;
        assert_eq!(first.len(), 1, "starts one at a time");
        drop(first);
        for _ in 0..FIRST_STREAK {
            let turn = limits
                .turn(ask("p", "d", 1000.0, Duration::from_secs(1)))
                .await
                .unwrap();
            assert!(!turn.finish(false, None), "alone: not crowded");
        }
        let two = at_once(4).await;
        assert_eq!(two.len(), 2, "a run of successes raises it");
        // Both ran alongside the other, the first given as much as the
        // second: a 5xx of either may be the crowding's.
        for turn in two {
            assert!(turn.finish(true, None), "ran alongside another");
        }
        let one = at_once(4).await;
        assert_eq!(one.len(), 1, "failures halve it");
        for turn in one {
            assert!(!turn.finish(true, None), "alone again");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn retry_after_holds_the_destination() {
        let limits = Limits::new(LimitsConfig::default());
        let turn = limits
            .turn(ask("p", "e", 100.0, Duration::from_secs(1)))
            .await
            .unwrap();
        turn.finish(false, Some(Duration::from_secs(5)));
        let held = limits
            .turn(ask("p", "e", 100.0, Duration::from_secs(1)))
            .await
            .unwrap_err();
        assert_eq!(held.reason, "Retry-After");
        assert!(held.after > Duration::from_secs(4), "{held:?}");
        // Another destination is not held.
        limits
            .turn(ask("p", "other", 100.0, Duration::from_secs(1)))
            .await
            .unwrap();
    }
}
