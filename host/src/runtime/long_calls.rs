//! CPU for calls that run long, shared fairly, so that plugins computing
//! until their deadline slow down each other and not everyone.
//!
//! # Rule
//!
//! A call runs freely for its first epoch tick ([`EPOCH_TICK`], 10 ms): a
//! well-behaved reconcile is over long before, and never waits here. At
//! each tick after that the call is a *long call* and needs one of
//! [`LongCalls::permits`] (half the machine's cores, at least one) to go
//! on; it waits for one, in arrival order, and gives its permit back at its
//! next tick if another long call is waiting (round robin, one tick each).
//! So however many plugins spin, at most half the cores spin with them, and
//! the other half stays free for calls that finish quickly.
//!
//! The deadline is wall-clock time from the start of the call, waiting
//! included: a long call that waits past its deadline fails with it as
//! soon as it would have run again.
//!
//! [`EPOCH_TICK`]: super::EPOCH_TICK

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Instant;

/// The long-call permits of a runtime. Cheap to clone.
#[derive(Clone)]
pub(super) struct LongCalls {
    inner: Arc<Inner>,
}

struct Inner {
    permits: usize,
    state: Mutex<State>,
    turn: Condvar,
    /// Most long calls ever running at once (for tests and metrics).
    peak: AtomicUsize,
}

struct State {
    running: usize,
    /// Tickets of the waiting calls, in arrival order.
    waiting: VecDeque<u64>,
    next_ticket: u64,
}

/// A long call's hold on a permit (or not yet).
#[derive(Default)]
pub(super) struct Turn {
    holding: bool,
    inner: Option<Arc<Inner>>,
}

impl Drop for Turn {
    fn drop(&mut self) {
        if self.holding
            && let Some(inner) = &self.inner
        {
            inner.release();
        }
    }
}

impl Inner {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn release(&self) {
        let mut state = self.lock();
        state.running -= 1;
        if !state.waiting.is_empty() {
            self.turn.notify_all();
        }
    }
}

impl LongCalls {
    /// Permits for half of this machine's cores, at least one.
    pub(super) fn for_this_machine() -> Self {
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        Self::new((cores / 2).max(1))
    }

    pub(super) fn new(permits: usize) -> Self {
        Self {
            inner: Arc::new(Inner {
                permits: permits.max(1),
                state: Mutex::new(State {
                    running: 0,
                    waiting: VecDeque::new(),
                    next_ticket: 0,
                }),
                turn: Condvar::new(),
                peak: AtomicUsize::new(0),
            }),
        }
    }

    /// How many long calls may run at once.
    pub(super) fn permits(&self) -> usize {
        self.inner.permits
    }

    /// The most long calls that ever ran at once.
    pub(super) fn peak(&self) -> usize {
        self.inner.peak.load(Ordering::Relaxed)
    }

    /// A call reached an epoch tick: keep, give back and wait for, or take
    /// a permit. Returns `false` when `deadline` passed while waiting (the
    /// call must stop); blocks at most until `deadline`.
    pub(super) fn tick(&self, turn: &mut Turn, deadline: Instant) -> bool {
        let inner = &self.inner;
        let mut state = inner.lock();
        if turn.holding {
            if state.waiting.is_empty() {
                return true;
            }
            // Someone waits: go to the back of the line.
            turn.holding = false;
            state.running -= 1;
            inner.turn.notify_all();
        }
        let ticket = state.next_ticket;
        state.next_ticket += 1;
        state.waiting.push_back(ticket);
        loop {
            if state.running < inner.permits && state.waiting.front() == Some(&ticket) {
                state.waiting.pop_front();
                state.running += 1;
                inner.peak.fetch_max(state.running, Ordering::Relaxed);
                turn.holding = true;
                turn.inner = Some(inner.clone());
                if state.running < inner.permits && !state.waiting.is_empty() {
                    inner.turn.notify_all();
                }
                return true;
            }
            let now = Instant::now();
            if now >= deadline {
                state.waiting.retain(|t| *t != ticket);
                inner.turn.notify_all();
                return false;
            }
            state = inner
                .turn
                .wait_timeout(state, deadline - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn no_more_long_calls_run_at_once_than_there_are_permits() {
        let calls = LongCalls::new(2);
        let deadline = Instant::now() + Duration::from_secs(30);
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let calls = calls.clone();
                std::thread::spawn(move || {
                    let mut turn = Turn::default();
                    for _ in 0..20 {
                        assert!(calls.tick(&mut turn, deadline));
                        std::thread::sleep(Duration::from_millis(1));
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(calls.peak(), 2);
        assert_eq!(calls.inner.lock().running, 0, "every permit given back");
    }

    #[test]
    fn a_waiting_call_stops_at_its_deadline() {
        let calls = LongCalls::new(1);
        let mut holder = Turn::default();
        assert!(calls.tick(&mut holder, Instant::now() + Duration::from_secs(30)));
        let mut waiter = Turn::default();
        assert!(!calls.tick(&mut waiter, Instant::now() + Duration::from_millis(20)));
        assert!(calls.inner.lock().waiting.is_empty());
        drop(holder);
        assert!(calls.tick(&mut waiter, Instant::now() + Duration::from_secs(30)));
    }

    #[test]
    fn a_holder_gives_its_permit_to_a_waiter_at_its_next_tick() {
        let calls = LongCalls::new(1);
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut first = Turn::default();
        assert!(calls.tick(&mut first, deadline));
        let waiter = {
            let calls = calls.clone();
            std::thread::spawn(move || {
                let mut turn = Turn::default();
                assert!(calls.tick(&mut turn, deadline));
                // Holds it until the first comes back for it.
                while calls.inner.lock().waiting.is_empty() {
                    std::thread::yield_now();
                }
                assert!(calls.tick(&mut turn, deadline));
            })
        };
        while calls.inner.lock().waiting.is_empty() {
            std::thread::yield_now();
        }
        // The first gives way, and gets its turn back after the waiter's.
        assert!(calls.tick(&mut first, deadline));
        drop(first);
        waiter.join().unwrap();
    }
}
