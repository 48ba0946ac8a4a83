//! Work kept off a reconcile's critical path: instantiating plugins ahead of
//! their calls and dropping used stores (which resets their pool slots).
//!
//! One thread per [`Runtime`](super::Runtime) with prepared instances on
//! ([`RuntimeConfig::prepared_instances`](super::RuntimeConfig)). Every call
//! still gets an instance nobody used before and every used instance is
//! discarded: this only moves *when* the fixed cost of a fresh instance is
//! paid, not whether. The CPU time is the same (it is spent on this thread
//! instead); on a machine whose cores are all busy it buys nothing, which is
//! why the plugin benchmark reports CPU per call next to wall-clock time.

use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Condvar, Mutex, Weak};

use super::plugin::Core;

/// A job for the background thread.
pub(super) enum Job {
    /// Drop this (a used store and the pool slot it holds).
    Dispose(Box<dyn Send>),
    /// Top up this plugin's prepared instances.
    Refill(Weak<Core>),
}

/// Start the background thread; it ends when every sender is gone.
pub(super) fn start() -> Sender<Job> {
    let (tx, rx) = channel();
    std::thread::Builder::new()
        .name("setpoint-plugin-prep".into())
        .spawn(move || run(rx))
        .expect("spawning the plugin preparation thread");
    tx
}

fn run(jobs: Receiver<Job>) {
    // Used stores first: each holds a pool slot that a caller may be
    // waiting for, and dropping one is cheaper than preparing one.
    let mut refills: Vec<Weak<Core>> = Vec::new();
    loop {
        let job = if refills.is_empty() {
            match jobs.recv() {
                Ok(job) => job,
                Err(_) => return,
            }
        } else {
            match jobs.try_recv() {
                Ok(job) => job,
                Err(_) => {
                    for core in refills.drain(..) {
                        if let Some(core) = core.upgrade() {
                            core.refill();
                        }
                    }
                    continue;
                }
            }
        };
        match job {
            Job::Dispose(used) => drop(used),
            Job::Refill(core) => refills.push(core),
        }
    }
}

/// A counting semaphore over pool slots: an exhausted pool makes
/// instantiation fail, so callers wait for a slot instead.
///
/// `Condvar::notify_one` makes a `futex` system call even when nobody waits
/// (about 1 µs on the development VM, once per reconcile), so a slot is
/// only signalled when a caller is actually waiting.
pub(super) struct Slots {
    state: Mutex<SlotCounts>,
    available: Condvar,
}

#[derive(Default)]
struct SlotCounts {
    free: usize,
    waiting: usize,
}

impl Slots {
    pub(super) fn new(count: usize) -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::new(SlotCounts {
                free: count,
                waiting: 0,
            }),
            available: Condvar::new(),
        })
    }

    /// Wait for a slot.
    pub(super) fn acquire(self: &Arc<Self>) -> SlotGuard {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        while state.free == 0 {
            state.waiting += 1;
            state = self
                .available
                .wait(state)
                .unwrap_or_else(|p| p.into_inner());
            state.waiting -= 1;
        }
        state.free -= 1;
        SlotGuard(self.clone())
    }

    /// A slot if one is free now.
    pub(super) fn try_acquire(self: &Arc<Self>) -> Option<SlotGuard> {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if state.free == 0 {
            return None;
        }
        state.free -= 1;
        Some(SlotGuard(self.clone()))
    }
}

/// One pool slot, given back when dropped (after the store holding it).
pub(super) struct SlotGuard(Arc<Slots>);

impl Drop for SlotGuard {
    fn drop(&mut self) {
        let mut state = self.0.state.lock().unwrap_or_else(|p| p.into_inner());
        state.free += 1;
        if state.waiting > 0 {
            self.0.available.notify_one();
        }
    }
}
