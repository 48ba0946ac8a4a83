//! The reconcile call pool: a few long-lived threads that run reconciler
//! calls off the async workers, so a call costs a channel send and (only
//! when the thread had gone to sleep) one wake-up, instead of a tokio
//! blocking-pool task per call.
//!
//! The pool is a fast path, never a bottleneck: a call goes to a pool
//! thread only when one is idle, and to tokio's blocking pool otherwise. A
//! plugin that computes until its deadline on every pool thread therefore
//! slows nobody else down; their calls overflow. Pool threads enter the
//! tokio runtime the pool was made in, so a reconciler (or its cache view)
//! may use `Handle::current()` there as on a blocking thread.

use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::thread::JoinHandle;

use crossbeam_channel::{Receiver, Sender};
use tokio::sync::oneshot;

/// A call; a pool thread passes its idle count, which the call increments
/// before it answers (see `CallPool::call`), an overflow thread `None`.
type Job = Box<dyn FnOnce(Option<&AtomicUsize>) + Send>;

/// Runs reconciler calls on a fixed set of threads, overflowing to tokio's
/// blocking pool when all of them are busy. Clones share the threads; they
/// stop with [`CallPool::shutdown`] or when the last clone is dropped.
#[derive(Clone)]
pub(crate) struct CallPool {
    inner: Arc<Inner>,
}

struct Inner {
    /// `None` once shut down: calls then all overflow. A lock (read per
    /// call, uncontended) rather than a flag, so that no call can be sent
    /// after the threads were told to stop and be left unanswered.
    sender: RwLock<Option<Sender<Job>>>,
    /// Threads waiting for a call. A caller takes one (decrements) before
    /// sending, so the channel never holds more calls than threads are
    /// free to take them: a sent call never waits behind a busy thread.
    idle: Arc<AtomicUsize>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    overflowed: AtomicU64,
}

/// Counters of a pool, for tests and metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PoolStats {
    pub(crate) threads: usize,
    /// Calls that found every pool thread busy and went to tokio's
    /// blocking pool.
    pub(crate) overflowed: u64,
}

/// Threads of a pool unless configured: four per core, at least 4 and at
/// most 64. One per core sent many of the loop benchmark's calls to the
/// overflow (many workers hand over calls in bursts, faster than two
/// threads take them), 4 per core far fewer and was faster than 1, 2 or 8
/// per core (docs/benchmarks/loop.md#branch-loop-pool-reconcile-thread-pool-and-fewer-copies-per-write-2026-11-21);
/// idle threads only cost their stacks.
pub(crate) fn default_threads() -> usize {
    std::thread::available_parallelism()
        .map_or(4, |n| n.get() * 4)
        .clamp(4, 64)
}

/// Where a controller's call is charged: its plugin's pace, and its tally
/// (which counts what was charged).
pub(crate) struct Charge {
    pub(crate) pace: Arc<super::Pace>,
    pub(crate) tally: super::Tally,
}

/// Run `call` here and charge `charge` the CPU time it took on this
/// thread: neither waiting for a thread nor the time the OS gave other
/// threads meanwhile is the plugin's spending.
fn charged<T>(charge: Option<&Charge>, call: impl FnOnce() -> T) -> T {
    let Some(charge) = charge else {
        return call();
    };
    let started = thread_cpu_time();
    let answer = call();
    let cpu = thread_cpu_time().saturating_sub(started);
    charge.pace.charge_call(cpu);
    charge.tally.called(cpu);
    answer
}

/// The CPU time the calling thread has used. A call's cost to the host is
/// this, not its wall time: with more calls in flight than cores, wall
/// time charged each call for its neighbours' turns on the CPU, and a
/// plugin's share of the cores (see `pace`) shrank with the host's load
/// (docs/benchmarks/effects.md, "The pace charged wall time").
fn thread_cpu_time() -> std::time::Duration {
    let now = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    std::time::Duration::new(
        u64::try_from(now.tv_sec).unwrap_or(0),
        u32::try_from(now.tv_nsec).unwrap_or(0),
    )
}

/// What a reconcile call gives back: the request (to call again with more
/// observations) and the reconciler's answer; `Err` when the call itself
/// failed (its thread panicked or went away).
pub(crate) type ReconcileCall = Result<
    (
        super::Request,
        Result<super::Response, super::ReconcileError>,
    ),
    super::ReconcileError,
>;

impl CallPool {
    /// Call `callee` on `request` with `view` on one of the pool's threads,
    /// or right here when `inline` (see [`super::Reconciler::runs_inline`]).
    /// What the controllers and plans call plugins through.
    pub(crate) async fn reconcile(
        &self,
        callee: &Arc<dyn super::Reconciler>,
        inline: bool,
        view: &Arc<dyn super::CacheView>,
        request: super::Request,
        charge: Option<Charge>,
    ) -> ReconcileCall {
        let (callee, view) = (callee.clone(), view.clone());
        let call = move || {
            let response = charged(charge.as_ref(), || callee.reconcile(&request, &view));
            (request, response)
        };
        if inline {
            return Ok(call());
        }
        self.call(call)
            .await
            .map_err(|e| super::ReconcileError::Transient(format!("reconcile task failed: {e}")))
    }

    /// Start `threads` threads (at least one). Inside a tokio runtime, the
    /// threads enter it.
    pub(crate) fn new(threads: usize) -> Self {
        let threads = threads.max(1);
        // Never more calls queued than threads (see `Inner::idle`), so a
        // bounded channel of that size never makes a sender wait.
        let (sender, receiver) = crossbeam_channel::bounded::<Job>(threads);
        // Idle from the start: a call sent before a thread reaches `recv`
        // waits in the channel for it.
        let idle = Arc::new(AtomicUsize::new(threads));
        let runtime = tokio::runtime::Handle::try_current().ok();
        let handles = (0..threads)
            .map(|i| {
                let (receiver, idle, runtime) = (receiver.clone(), idle.clone(), runtime.clone());
                std::thread::Builder::new()
                    .name(format!("setpoint-reconcile-{i}"))
                    .spawn(move || run(&receiver, &idle, runtime))
                    .expect("spawning a reconcile thread")
            })
            .collect();
        Self {
            inner: Arc::new(Inner {
                sender: RwLock::new(Some(sender)),
                idle,
                threads: Mutex::new(handles),
                overflowed: AtomicU64::new(0),
            }),
        }
    }

    /// Run `f` on an idle pool thread, or on tokio's blocking pool if none
    /// is idle. A panic in `f` comes back as `Err` with its message.
    pub(crate) async fn call<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, String> {
        let (tx, rx) = oneshot::channel();
        let job: Job = Box::new(move |idle| {
            let result = std::panic::catch_unwind(AssertUnwindSafe(f));
            // Idle again before answering, not after: the caller may send
            // its next call as soon as it has the answer, and should find
            // this thread free rather than overflow.
            if let Some(idle) = idle {
                idle.fetch_add(1, Ordering::AcqRel);
            }
            let _ = tx.send(result);
        });
        if let Err(job) = self.try_send(job) {
            self.inner.overflowed.fetch_add(1, Ordering::Relaxed);
            // The job catches its own panic and answers through `rx`; the
            // join handle can only add "cancelled" (runtime shutting down),
            // which `rx` reports as a dropped sender.
            drop(tokio::task::spawn_blocking(move || job(None)));
        }
        match rx.await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(panic)) => Err(format!("panicked with message {:?}", panic_message(&panic))),
            Err(_) => Err("the call was dropped unrun (shutting down)".to_owned()),
        }
    }

    /// Hand `job` to an idle pool thread, or give it back.
    fn try_send(&self, job: Job) -> Result<(), Job> {
        let sender = self
            .inner
            .sender
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        let Some(sender) = sender.as_ref() else {
            return Err(job);
        };
        let taken = self
            .inner
            .idle
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
        if taken.is_err() {
            return Err(job);
        }
        sender.try_send(job).map_err(|e| e.into_inner())
    }

    /// Stop the threads once they have run the calls already sent to them;
    /// later calls all go to tokio's blocking pool. Waits for the threads
    /// to exit (off the async threads).
    pub(crate) async fn shutdown(&self) {
        self.inner
            .sender
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        let threads = std::mem::take(
            &mut *self
                .inner
                .threads
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        );
        if threads.is_empty() {
            return;
        }
        let joined = tokio::task::spawn_blocking(move || {
            for thread in threads {
                let _ = thread.join();
            }
        });
        let _ = joined.await;
    }

    /// Calls that overflowed so far ([`PoolStats::overflowed`], without
    /// the lock `stats` takes).
    pub(crate) fn overflowed(&self) -> u64 {
        self.inner.overflowed.load(Ordering::Relaxed)
    }

    pub(crate) fn stats(&self) -> PoolStats {
        PoolStats {
            threads: self
                .inner
                .threads
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .len(),
            overflowed: self.inner.overflowed.load(Ordering::Relaxed),
        }
    }
}

impl std::fmt::Debug for CallPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallPool")
            .field("stats", &self.stats())
            .finish()
    }
}

/// One pool thread: take a call and run it (the call announces the thread
/// idle again); until every sender is gone (shutdown, or the last pool
/// clone dropped); after a second with no call, it gives back what it
/// freed ([`crate::memory`]). `recv_timeout`
/// spins briefly before it sleeps, so a thread that finishes a call while
/// the next is being sent takes it without a futex wake.
fn run(receiver: &Receiver<Job>, idle: &AtomicUsize, runtime: Option<tokio::runtime::Handle>) {
    let _entered = runtime.as_ref().map(tokio::runtime::Handle::enter);
    // The calls' decoded objects and outputs are freed on this thread;
    // give them back once the controllers go quiet.
    let mut released = crate::memory::IdleRelease::default();
    loop {
        match receiver.recv_timeout(crate::memory::IDLE_AFTER) {
            Ok(job) => {
                job(Some(idle));
                released.worked();
            }
            Err(crossbeam_channel::RecvTimeoutError::Timeout) => released.idle(),
            Err(crossbeam_channel::RecvTimeoutError::Disconnected) => break,
        }
    }
}

fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> &str {
    panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("Box<dyn Any>")
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;

    use super::*;

    fn on_pool_thread() -> bool {
        std::thread::current()
            .name()
            .is_some_and(|n| n.starts_with("setpoint-reconcile-"))
    }

    #[test]
    fn a_call_is_charged_the_cpu_it_used_not_the_time_it_took() {
        use super::super::{Pace, PaceLimits, Tally};
        use std::time::Duration;
        // Half a core's share would be 2 s of burst; a twentieth's is 0.2 s.
        let limits = PaceLimits {
            cores: 0.05,
            write_bytes_per_second: 1e9,
        };
        let charge = Charge {
            pace: Arc::new(Pace::new(limits)),
            tally: Tally::default(),
        };
        let pace = &charge.pace;
        // Off the CPU for longer than the whole burst (as a call is when
        // the OS runs other threads): charged next to nothing.
        charged(Some(&charge), || {
            std::thread::sleep(Duration::from_millis(400));
        });
        assert!(pace.wait().is_none(), "a call that waited was charged");
        assert!(charge.tally.snapshot().call_cpu < Duration::from_millis(100));
        // On the CPU for longer than the burst: in debt.
        charged(Some(&charge), || {
            let started = thread_cpu_time();
            while thread_cpu_time() - started < Duration::from_millis(400) {
                std::hint::black_box(started);
            }
        });
        let (wait, _) = pace.wait().expect("a call that computed was not charged");
        assert!(wait > Duration::from_secs(1), "{wait:?}");
        let counted = charge.tally.snapshot().call_cpu;
        assert!(
            counted >= Duration::from_millis(400),
            "the tally counted {counted:?}"
        );
        // No pace: nothing to charge, the call still runs.
        assert_eq!(charged(None, || 7), 7);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn runs_calls_on_its_threads_inside_the_runtime() {
        let pool = CallPool::new(2);
        for i in 0..100 {
            let (value, pooled) = pool.call(move || (i * 2, on_pool_thread())).await.unwrap();
            assert_eq!(value, i * 2);
            assert!(pooled, "call {i} overflowed with idle threads");
        }
        // The view's store reads block on the runtime from the call.
        let read = pool
            .call(|| tokio::runtime::Handle::current().block_on(async { 7 }))
            .await;
        assert_eq!(read, Ok(7));
        assert_eq!(pool.stats().overflowed, 0);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_thread_gives_back_its_freed_memory_once_it_has_been_idle() {
        crate::memory::testing::install();
        let pool = CallPool::new(1);
        let (thread, pooled) = pool
            .call(|| {
                // Something to free.
                std::hint::black_box(vec![0u8; 1 << 20]);
                (std::thread::current().id(), on_pool_thread())
            })
            .await
            .unwrap();
        assert!(pooled);
        assert!(
            !crate::memory::testing::released_by(thread),
            "gave back while the call was still being answered"
        );
        let deadline = std::time::Instant::now() + crate::memory::IDLE_AFTER * 20;
        while !crate::memory::testing::released_by(thread) {
            assert!(
                std::time::Instant::now() < deadline,
                "the pool's idle thread never gave back"
            );
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_call_that_blocks_every_thread_does_not_stop_other_calls() {
        let pool = CallPool::new(1);
        let (started_tx, started) = mpsc::channel();
        let (release, release_rx) = mpsc::channel::<()>();
        let blocked = tokio::spawn({
            let pool = pool.clone();
            async move {
                pool.call(move || {
                    started_tx.send(()).unwrap();
                    release_rx.recv().unwrap();
                    on_pool_thread()
                })
                .await
            }
        });
        tokio::task::spawn_blocking(move || started.recv().unwrap())
            .await
            .unwrap();
        // The one pool thread is held: this call must still finish.
        let pooled = pool.call(on_pool_thread).await.unwrap();
        assert!(!pooled, "ran on the blocked pool's thread");
        assert_eq!(pool.stats().overflowed, 1);
        release.send(()).unwrap();
        assert_eq!(blocked.await.unwrap(), Ok(true));
        // The thread is back: the next call is the pool's again.
        assert_eq!(pool.call(on_pool_thread).await, Ok(true));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_panic_comes_back_as_an_error_and_the_thread_survives() {
        let pool = CallPool::new(1);
        let err = pool
            .call(|| -> u32 { panic!("reconciler bug {}", 42) })
            .await
            .unwrap_err();
        assert!(err.contains("reconciler bug 42"), "{err}");
        assert_eq!(pool.call(on_pool_thread).await, Ok(true));
        assert_eq!(pool.stats().overflowed, 0);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn shutdown_stops_the_threads_and_later_calls_overflow() {
        let pool = CallPool::new(3);
        let clone = pool.clone();
        assert_eq!(pool.call(on_pool_thread).await, Ok(true));
        pool.shutdown().await;
        assert_eq!(pool.stats().threads, 0, "every thread joined");
        assert_eq!(clone.call(on_pool_thread).await, Ok(false));
        assert_eq!(pool.stats().overflowed, 1);
        pool.shutdown().await; // twice is harmless
    }

    #[test]
    fn dropping_the_last_clone_stops_the_threads() {
        let pool = CallPool::new(2);
        let handles = std::mem::take(&mut *pool.inner.threads.lock().unwrap());
        drop(pool);
        for handle in handles {
            handle.join().unwrap();
        }
    }
}
