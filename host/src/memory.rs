//! Giving freed memory back to the OS when the host's threads go idle.
//!
//! The library picks no allocator; a binary that picks one whose threads
//! keep what they free (mimalloc keeps freed pages in the freeing thread's
//! heap until that thread next allocates) installs a hook here that gives
//! back what the calling thread holds. The host's own long-lived threads
//! (the store's writer and applier, the reconcile pool) call it once they
//! have been idle for a second after doing work: a load leaves its
//! transient buffers (redb's transaction pages, decoded objects) freed in
//! those threads' heaps, and without a call they stay in the process's
//! RSS for as long as the host stays idle (docs/benchmarks/scale.md, "Freed
//! memory given back by idle threads").
//!
//! ```
//! fn give_back() {
//!     // e.g. `unsafe { libmimalloc_sys::mi_collect(true) }`
//! }
//! setpoint::memory::install_release(give_back);
//! ```

use std::sync::OnceLock;
use std::time::Duration;

static RELEASE: OnceLock<fn()> = OnceLock::new();

/// How long one of the host's threads waits with nothing to do before it
/// gives back what it freed: long enough that a busy thread never pays for
/// it between jobs, short enough that an idle host shrinks soon.
pub(crate) const IDLE_AFTER: Duration = Duration::from_secs(1);

/// Installs the hook that gives back what the calling thread holds freed.
/// The first installed hook stays; returns whether this one was installed.
pub fn install_release(hook: fn()) -> bool {
    RELEASE.set(hook).is_ok()
}

/// Gives back what the calling thread holds freed, if a hook is installed.
pub fn release() {
    if let Some(hook) = RELEASE.get() {
        hook();
    }
}

/// One thread's record of whether it worked since it last gave back: a
/// thread that stays idle gives back once, not at every timeout.
#[derive(Debug, Default)]
pub(crate) struct IdleRelease {
    worked: bool,
}

impl IdleRelease {
    /// The thread did some work (and may have freed memory).
    pub(crate) fn worked(&mut self) {
        self.worked = true;
    }

    /// The thread has been idle for [`IDLE_AFTER`]: gives back once.
    pub(crate) fn idle(&mut self) {
        if std::mem::take(&mut self.worked) {
            release();
        }
    }
}

/// A hook for tests: counts calls on each thread and records which
/// threads gave back. Tests share the process, and the first installed
/// hook stays, so every test installs this one.
#[cfg(test)]
pub(crate) mod testing {
    use std::cell::Cell;
    use std::sync::Mutex;
    use std::thread::ThreadId;

    thread_local! {
        static CALLS: Cell<usize> = const { Cell::new(0) };
    }

    static RELEASED_BY: Mutex<Vec<ThreadId>> = Mutex::new(Vec::new());

    fn hook() {
        CALLS.with(|calls| calls.set(calls.get() + 1));
        RELEASED_BY
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(std::thread::current().id());
    }

    /// Installs the counting hook (again: only the first install counts).
    pub(crate) fn install() {
        super::install_release(hook);
    }

    /// How often the calling thread has given back.
    pub(crate) fn calls_here() -> usize {
        CALLS.with(Cell::get)
    }

    /// Whether `thread` has given back at least once.
    pub(crate) fn released_by(thread: ThreadId) -> bool {
        RELEASED_BY
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .contains(&thread)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_idle_thread_gives_back_once_after_work_and_not_again_until_it_works() {
        testing::install();
        assert!(!install_release(|| {}), "the first hook stays");
        let mut idle = IdleRelease::default();
        idle.idle();
        assert_eq!(
            testing::calls_here(),
            0,
            "nothing done, nothing to give back"
        );
        idle.worked();
        idle.worked();
        idle.idle();
        idle.idle();
        assert_eq!(testing::calls_here(), 1, "once per spell of work");
        idle.worked();
        idle.idle();
        assert_eq!(testing::calls_here(), 2);
        assert!(testing::released_by(std::thread::current().id()));
    }
}
