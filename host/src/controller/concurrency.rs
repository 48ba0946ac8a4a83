//! How many keys a controller reconciles at once. Fixed when configured
//! so ([`Concurrency::Fixed`]); by default it adapts by itself between a
//! floor and [`Config::workers`](super::Config::workers), so nobody has to
//! tune workers to get the store's throughput.
//!
//! A reconcile turn mostly waits: on the store's group commit for its
//! writes, far less on the call itself. More keys in flight then mean more
//! reconciles per second (the commits batch them), until the CPU (or the
//! store) is full; past that they only make each turn slower. So the limit
//! climbs the throughput curve: while keys wait in the queue it tries a
//! limit half again as high and keeps it if throughput rose with it, and
//! (taking turns) a quarter lower and keeps that if throughput stayed, so it
//! settles near the knee whether the calls or the commits are what take the
//! time. It does not try higher while the reconcile call pool overflows
//! (see `pool`: the calls already outnumber its threads), and does nothing
//! while the queue keeps up (demand, not the limit, sets the pace).
//!
//! It never goes below [`default_floor`] while keys wait: with the CPU
//! full, the turns share the async workers with everything else the host
//! does (the HTTP API's writes while clients load it), and the keys in
//! flight set the reconciles' share. Window by window a lower limit then
//! keeps nearly all of the throughput it is compared with, so the rule
//! alone walked down to a few dozen keys and the queue fell behind the
//! clients by tens of seconds (docs/benchmarks/scale.md, "The concurrency
//! floor"). Calls that compute long are not what the floor lets in: past
//! their first epoch tick they take turns on half the cores, however many
//! keys are in flight (see `runtime`).
//!
//! The rule is [`Adaptive::observe`], a pure function of one window of
//! completed turns; [`Gate`] collects the windows and parks the workers
//! above the limit.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use tokio::sync::watch;

/// Whether a controller's concurrency adapts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Concurrency {
    /// Between 8 keys per reconcile pool thread (or [`Config::workers`](super::Config::workers)
    /// when lower) and `workers` keys at once, adapted to the measured
    /// throughput (the default).
    #[default]
    Adaptive,
    /// Exactly [`Config::workers`](super::Config::workers) keys at once
    /// when that many are queued.
    Fixed,
}

/// The most keys in flight per controller unless configured: 16 per
/// reconcile pool thread (64 per core). A turn that writes spends most of
/// its time waiting for the group commit, so many turns share each pool
/// thread; the adaptation stops well below this when calls are heavy.
pub(crate) fn default_max() -> usize {
    super::pool::default_threads() * 16
}

/// The fewest keys in flight while keys wait (unless `workers` is lower),
/// and where adaptation starts: 8 per reconcile pool thread, half of
/// [`default_max`]. A quarter of the maximum still left the queue 16 s
/// behind 32 clients loading 100k Pods, half of it 2.5–4.3 s (see the
/// module's doc).
pub(crate) fn default_floor() -> usize {
    super::pool::default_threads() * 8
}
/// A higher limit is kept when throughput rose by at least this share of
/// the limit's rise (a quarter: 50 % more keys must bring 12.5 % more
/// reconciles), so noise does not walk it up.
const GAIN_SHARE: f64 = 0.25;
/// A lower limit is kept when throughput stayed above this share of
/// the base's.
const KEEP_SHARE: f64 = 0.95;

/// What one window of completed turns showed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Window {
    /// Turns that called the reconciler.
    pub(crate) completions: u32,
    /// Of them, turns that ended with keys still ready in the queue.
    pub(crate) backlogged: u32,
    /// How long the window lasted.
    pub(crate) elapsed: Duration,
    /// Reconciler calls that found every pool thread busy meanwhile (pool
    /// wide, so other controllers' calls count too).
    pub(crate) overflowed: u64,
}

/// What the limit of the window being measured is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// The base: its throughput is measured again.
    Base,
    /// Higher than the base.
    Up,
    /// Lower than the base.
    Down,
}

/// The adaptation rule: a limit between `min` and `max`, moved once per
/// window. Deterministic, so tests drive it with a model of the system.
#[derive(Debug, Clone)]
pub(crate) struct Adaptive {
    /// The limit in force (the base, or a probe).
    limit: usize,
    /// The limit kept, and the throughput measured at it (turns/s).
    base: usize,
    base_throughput: Option<f64>,
    phase: Phase,
    /// Which way the next probe from the base goes.
    next_down: bool,
    min: usize,
    max: usize,
}

impl Adaptive {
    pub(crate) fn new(initial: usize, min: usize, max: usize) -> Self {
        let max = max.max(1);
        let min = min.clamp(1, max);
        let initial = initial.clamp(min, max);
        Self {
            limit: initial,
            base: initial,
            base_throughput: None,
            phase: Phase::Base,
            next_down: false,
            min,
            max,
        }
    }

    pub(crate) fn limit(&self) -> usize {
        self.limit
    }

    fn up(&self, from: usize) -> usize {
        (from + (from / 2).max(1)).min(self.max)
    }

    fn down(&self, from: usize) -> usize {
        from.saturating_sub((from / 4).max(1)).max(self.min)
    }

    /// Move the limit after `window`, and return it.
    ///
    /// - No turn completed: no news, the limit stays.
    /// - Fewer than half the turns left keys waiting: demand sets the
    ///   pace, so the window says nothing about the limit: back to the
    ///   base, whose throughput is measured afresh once keys wait again.
    /// - A window at the base measures it, then probes: up (unless the
    ///   pool overflowed on more than a tenth of the calls, or the base is
    ///   the maximum) or down, taking turns.
    /// - An upward probe that paid (see [`GAIN_SHARE`]) becomes the base
    ///   and the next probe goes higher still; one that did not goes back.
    /// - A downward probe that kept the throughput (see [`KEEP_SHARE`])
    ///   becomes the base and the next goes lower; one that lost goes back.
    pub(crate) fn observe(&mut self, window: &Window) -> usize {
        if window.completions == 0 {
            return self.limit;
        }
        let throughput = f64::from(window.completions) / window.elapsed.as_secs_f64().max(1e-6);
        let saturated = window.backlogged * 2 >= window.completions;
        let overflowing = window.overflowed * 10 > u64::from(window.completions);
        if !saturated {
            self.limit = self.base;
            self.phase = Phase::Base;
            self.base_throughput = None;
            return self.limit;
        }
        let base = self.base_throughput;
        match (self.phase, base) {
            (Phase::Up, Some(base))
                if !overflowing
                    && throughput
                        >= base
                            * (1.0 + GAIN_SHARE * (self.limit as f64 / self.base as f64 - 1.0)) =>
            {
                self.base = self.limit;
                self.base_throughput = Some(throughput);
                self.limit = self.up(self.base);
                // At the maximum there is nothing higher to try.
                self.phase = if self.limit > self.base {
                    Phase::Up
                } else {
                    Phase::Base
                };
            }
            (Phase::Down, Some(base)) if throughput >= base * KEEP_SHARE => {
                self.base = self.limit;
                self.base_throughput = Some(throughput);
                self.limit = self.down(self.base);
                self.phase = if self.limit < self.base {
                    Phase::Down
                } else {
                    Phase::Base
                };
            }
            (Phase::Up | Phase::Down, _) => {
                // Not better: back to the base, measured again first.
                self.limit = self.base;
                self.phase = Phase::Base;
            }
            (Phase::Base, _) => {
                // Averaged with what the base measured before: one window
                // is noisy.
                self.base_throughput = Some(base.map_or(throughput, |b| (b + throughput) / 2.0));
                let (up, down) = (self.up(self.base), self.down(self.base));
                let can_go_up = up > self.base && !overflowing;
                let can_go_down = down < self.base;
                if (self.next_down || !can_go_up) && can_go_down {
                    self.limit = down;
                    self.phase = Phase::Down;
                } else if can_go_up {
                    self.limit = up;
                    self.phase = Phase::Up;
                }
                self.next_down = !self.next_down;
            }
        }
        self.limit
    }
}

/// A window closes after this long once each key in flight turned over
/// twice (and at least [`WINDOW_TURNS`] turns)...
const WINDOW: Duration = Duration::from_millis(100);
const WINDOW_TURNS: u32 = 8;
/// ...or after this long with any.
const LONG_WINDOW: Duration = Duration::from_secs(1);

/// The running side: which of a controller's workers may take a key, and
/// the current window.
pub(crate) struct Gate {
    limit: watch::Sender<usize>,
    max: usize,
    /// Set by [`Gate::open`]: the limit stays at `max` from then on.
    opened: std::sync::atomic::AtomicBool,
    /// `None` when fixed.
    sampler: Option<Mutex<Sampler>>,
}

struct Sampler {
    rule: Adaptive,
    started: Instant,
    completions: u32,
    backlogged: u32,
    /// The pool's overflow count when the window started.
    overflow_mark: u64,
}

impl Gate {
    /// A gate for `workers` workers, adapting from [`default_floor`] up
    /// unless `concurrency` is fixed.
    pub(crate) fn new(concurrency: Concurrency, workers: usize) -> Self {
        Self::with_floor(concurrency, workers, default_floor())
    }

    /// A gate for `workers` workers, adapting between `floor` (or
    /// `workers`, when lower) and `workers` unless `concurrency` is fixed.
    fn with_floor(concurrency: Concurrency, workers: usize, floor: usize) -> Self {
        let max = workers.max(1);
        let rule = match concurrency {
            Concurrency::Fixed => None,
            Concurrency::Adaptive => Some(Adaptive::new(floor, floor, max)),
        };
        let initial = rule.as_ref().map_or(max, Adaptive::limit);
        Self {
            limit: watch::Sender::new(initial),
            max,
            opened: std::sync::atomic::AtomicBool::new(false),
            sampler: rule.map(|rule| {
                Mutex::new(Sampler {
                    rule,
                    started: Instant::now(),
                    completions: 0,
                    backlogged: 0,
                    overflow_mark: 0,
                })
            }),
        }
    }

    /// Workers to spawn (the upper bound).
    pub(crate) fn workers(&self) -> usize {
        self.max
    }

    /// Keys that may be in flight now.
    pub(crate) fn limit(&self) -> usize {
        *self.limit.borrow()
    }

    pub(crate) fn subscribe(&self) -> watch::Receiver<usize> {
        self.limit.subscribe()
    }

    /// Wait until worker `index` (from 0) is within the limit.
    pub(crate) async fn admit(index: usize, limit: &mut watch::Receiver<usize>) {
        // An error means the gate is gone with its controller: let the
        // worker find the queue shut.
        let _ = limit.wait_for(|limit| index < *limit).await;
    }

    /// A turn that called the reconciler ended; `backlogged` when keys
    /// were still ready in the queue, `overflowed` is the pool's overflow
    /// count now.
    pub(crate) fn record(&self, backlogged: bool, overflowed: u64) {
        let Some(sampler) = &self.sampler else {
            return;
        };
        let mut s = sampler.lock().unwrap_or_else(|p| p.into_inner());
        s.completions += 1;
        s.backlogged += u32::from(backlogged);
        let elapsed = s.started.elapsed();
        let turns = WINDOW_TURNS.max(2 * u32::try_from(s.rule.limit()).unwrap_or(u32::MAX));
        if !(elapsed >= WINDOW && s.completions >= turns || elapsed >= LONG_WINDOW) {
            return;
        }
        let window = Window {
            completions: s.completions,
            backlogged: s.backlogged,
            elapsed,
            overflowed: overflowed.saturating_sub(s.overflow_mark),
        };
        let before = s.rule.limit();
        let after = s.rule.observe(&window);
        s.started = Instant::now();
        s.completions = 0;
        s.backlogged = 0;
        s.overflow_mark = overflowed;
        drop(s);
        if after != before {
            // Under the channel's lock, as `open` sets the flag: a turn
            // that ends after the gate opened must not close it again
            // (a worker parked then never saw the queue shut down, and a
            // stop waited out its whole timeout).
            let moved = self.limit.send_if_modified(|limit| {
                if self.opened.load(std::sync::atomic::Ordering::Acquire) {
                    return false;
                }
                *limit = after;
                true
            });
            if moved {
                tracing::debug!(before, after, ?window, "concurrency limit moved");
            }
        }
    }

    /// Let every worker through, for good (stopping: they must all see
    /// the queue shut down).
    pub(crate) fn open(&self) {
        self.limit.send_modify(|limit| {
            self.opened
                .store(true, std::sync::atomic::Ordering::Release);
            *limit = self.max;
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The floor of the gates under test: low, so that they have room to
    /// move and to park workers.
    const FLOOR: usize = 2;

    /// A model of a controller's system: a turn waits `wait` (the group
    /// commit) and computes `cpu` on two cores, shared when more turns
    /// compute at once; keys always wait. Throughput comes with noise of
    /// up to `noise` either way (a fixed pseudo-random sequence).
    struct Model {
        wait: f64,
        cpu: f64,
        noise: f64,
        seed: u64,
    }

    impl Model {
        fn throughput(&self, limit: usize) -> f64 {
            let latency = (self.wait + self.cpu).max(limit as f64 * self.cpu / 2.0);
            limit as f64 / latency
        }

        /// One 100 ms window at `limit`.
        fn window(&mut self, limit: usize) -> Window {
            self.seed = self
                .seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let unit = (self.seed >> 11) as f64 / (1u64 << 53) as f64; // [0, 1)
            let noisy = self.throughput(limit) * (1.0 + self.noise * (2.0 * unit - 1.0));
            let completions = (noisy * 0.1).round().max(1.0) as u32;
            Window {
                completions,
                backlogged: completions,
                elapsed: Duration::from_millis(100),
                overflowed: 0,
            }
        }

        /// Limits after each of `windows` windows.
        fn run(&mut self, rule: &mut Adaptive, windows: usize) -> Vec<usize> {
            (0..windows)
                .map(|_| {
                    let window = self.window(rule.limit());
                    rule.observe(&window)
                })
                .collect()
        }
    }

    #[test]
    fn climbs_while_the_commit_wait_dominates_and_stays_near_the_knee() {
        // 2 ms commit, 0.1 ms of CPU per turn: at most 20k turns/s, from
        // 42 keys in flight on.
        let mut model = Model {
            wait: 0.002,
            cpu: 0.0001,
            noise: 0.1,
            seed: 7,
        };
        let mut rule = Adaptive::new(2, 1, 1024);
        let trace = model.run(&mut rule, 300);
        assert!(
            model.throughput(trace[12]) >= 0.9 * 20_000.0,
            "near the top within 1.3 s of windows: {trace:?}"
        );
        let late = &trace[100..];
        let mean = late.iter().map(|l| model.throughput(*l)).sum::<f64>() / late.len() as f64;
        assert!(mean >= 0.85 * 20_000.0, "{mean} {trace:?}");
        assert!(late.iter().all(|l| *l <= 200), "no walk upwards: {trace:?}");
    }

    #[test]
    fn stays_low_when_the_calls_are_cpu_bound() {
        // 5 ms of CPU per turn and no wait: two keys fill two cores.
        let mut model = Model {
            wait: 0.0,
            cpu: 0.005,
            noise: 0.1,
            seed: 11,
        };
        let mut rule = Adaptive::new(32, 1, 1024);
        let trace = model.run(&mut rule, 300);
        let late = &trace[100..];
        assert!(late.iter().all(|l| *l <= 8), "{trace:?}");
        let mean = late.iter().sum::<usize>() as f64 / late.len() as f64;
        assert!(mean <= 4.0, "{mean} {trace:?}");
    }

    #[test]
    fn stays_within_its_bounds() {
        let mut model = Model {
            wait: 0.002,
            cpu: 0.000_01,
            noise: 0.0,
            seed: 1,
        };
        let mut rule = Adaptive::new(2, 1, 16);
        let trace = model.run(&mut rule, 50);
        assert!(trace.iter().all(|l| *l <= 16), "{trace:?}");
        assert!(
            trace[20..].iter().all(|l| *l >= 12),
            "held near the top: {trace:?}"
        );
        let mut model = Model {
            wait: 0.0,
            cpu: 0.01,
            noise: 0.0,
            seed: 1,
        };
        let mut rule = Adaptive::new(4, 3, 16);
        let trace = model.run(&mut rule, 50);
        assert!(trace.iter().all(|l| *l >= 3), "{trace:?}");
        assert_eq!(Adaptive::new(0, 0, 0).limit(), 1, "at least one");
    }

    #[test]
    fn holds_when_the_queue_keeps_up_or_nothing_completed() {
        let mut rule = Adaptive::new(5, 1, 64);
        let window = Window {
            completions: 40,
            backlogged: 10,
            elapsed: Duration::from_millis(100),
            overflowed: 0,
        };
        for _ in 0..10 {
            assert_eq!(rule.observe(&window), 5, "demand sets the pace");
        }
        let empty = Window {
            completions: 0,
            ..window
        };
        assert_eq!(rule.observe(&empty), 5);
    }

    #[test]
    fn does_not_go_higher_while_the_pool_overflows() {
        // Throughput proportional to the limit, so every rise would pay.
        let mut rule = Adaptive::new(8, 1, 64);
        let mut trace = Vec::new();
        for _ in 0..20 {
            let completions = 10 * rule.limit() as u32;
            let window = Window {
                completions,
                backlogged: completions,
                elapsed: Duration::from_millis(100),
                overflowed: u64::from(completions),
            };
            trace.push(rule.observe(&window));
        }
        assert!(trace.iter().all(|l| *l <= 8), "{trace:?}");
    }

    #[test]
    fn an_upward_probe_that_pays_is_kept_and_one_that_does_not_is_undone() {
        let at = |limit: usize, per_key: f64| {
            let completions = (limit as f64 * per_key) as u32;
            Window {
                completions,
                backlogged: completions,
                elapsed: Duration::from_millis(100),
                overflowed: 0,
            }
        };
        let mut rule = Adaptive::new(4, 1, 64);
        assert_eq!(rule.observe(&at(4, 10.0)), 6, "base measured, probe up");
        assert_eq!(rule.observe(&at(6, 10.0)), 9, "paid: kept, higher still");
        // 9 keys brought no more than 6 did.
        assert_eq!(rule.observe(&at(9, 60.0 / 9.0)), 6, "undone");
        assert_eq!(
            rule.observe(&at(6, 10.0)),
            5,
            "base again, then a probe down"
        );
        assert_eq!(rule.observe(&at(5, 10.0)), 6, "lost a sixth: undone");
        assert_eq!(rule.observe(&at(6, 10.0)), 9, "and up again");
    }

    #[tokio::test]
    async fn the_gate_parks_workers_above_the_limit_until_opened() {
        let gate = Gate::with_floor(Concurrency::Adaptive, 8, FLOOR);
        assert_eq!((gate.workers(), gate.limit()), (8, FLOOR));
        let mut rx = gate.subscribe();
        Gate::admit(FLOOR - 1, &mut rx).await;
        let mut parked = spawn_admit(&gate, FLOOR);
        assert!(
            tokio::time::timeout(Duration::from_millis(20), &mut parked)
                .await
                .is_err(),
            "worker {FLOOR} passed a limit of {FLOOR}"
        );
        gate.open();
        tokio::time::timeout(Duration::from_secs(5), parked)
            .await
            .expect("opened")
            .unwrap();
        let fixed = Gate::new(Concurrency::Fixed, 3);
        assert_eq!(fixed.limit(), 3);
        for _ in 0..100 {
            fixed.record(true, 0);
        }
        assert_eq!(fixed.limit(), 3, "a fixed gate never moves");
    }

    #[tokio::test]
    async fn an_opened_gate_stays_open_when_a_turn_ends_after_it() {
        let gate = Gate::with_floor(Concurrency::Adaptive, 64, FLOOR);
        // Turns that would move the limit once their window closes.
        for _ in 0..WINDOW_TURNS {
            gate.record(true, 0);
        }
        gate.open();
        std::thread::sleep(WINDOW);
        // A turn that was in flight when the gate opened ends now.
        gate.record(true, 0);
        assert_eq!(gate.limit(), 64, "the limit moved after the gate opened");
        tokio::time::timeout(Duration::from_secs(5), spawn_admit(&gate, 63))
            .await
            .expect("the last worker is let through")
            .unwrap();
    }

    #[test]
    fn by_default_the_gate_starts_at_the_floor_and_stays_above_it_while_keys_wait() {
        let floor = default_floor();
        assert!(floor >= 2 && floor < default_max(), "{floor}");
        let gate = Gate::new(Concurrency::Adaptive, default_max());
        assert_eq!(gate.limit(), floor);
        // Throughput that a lower limit keeps whole: the rule alone would
        // walk down (see `stays_low_when_the_calls_are_cpu_bound`).
        let mut rule = Adaptive::new(floor, floor, default_max());
        let mut model = Model {
            wait: 0.0,
            cpu: 0.005,
            noise: 0.1,
            seed: 3,
        };
        let trace = model.run(&mut rule, 300);
        assert!(trace.iter().all(|l| *l >= floor), "{trace:?}");
        // Fewer workers than the floor: all of them, always.
        let few = Gate::new(Concurrency::Adaptive, floor / 2);
        assert_eq!(few.limit(), floor / 2);
        for _ in 0..WINDOW_TURNS {
            few.record(true, 0);
        }
        std::thread::sleep(WINDOW);
        few.record(true, 0);
        assert_eq!(few.limit(), floor / 2, "nowhere to go");
    }

    fn spawn_admit(gate: &Gate, index: usize) -> tokio::task::JoinHandle<()> {
        let mut rx = gate.subscribe();
        tokio::spawn(async move { Gate::admit(index, &mut rx).await })
    }

    #[test]
    fn the_gate_moves_the_limit_once_a_window_closes() {
        let gate = Gate::with_floor(Concurrency::Adaptive, 64, FLOOR);
        let rx = gate.subscribe();
        for _ in 0..WINDOW_TURNS {
            gate.record(true, 0);
        }
        assert_eq!(gate.limit(), FLOOR, "the window is still open");
        std::thread::sleep(WINDOW);
        gate.record(true, 0);
        assert_eq!(
            gate.limit(),
            FLOOR + 1,
            "measured, then a probe up by half of 2"
        );
        assert_eq!(*rx.borrow(), FLOOR + 1, "published to the workers");
    }
}
