//! The WASI calls a guest could block in, made so that none can hold a
//! reconcile thread past the call's deadline, and the guest's randomness,
//! made a function of the request.
//!
//! Epoch interruption (the deadline) only stops a guest while it runs
//! WebAssembly; a host call in progress is never interrupted. Of the WASI
//! imports a plugin gets (no files, sockets or stdin), only the monotonic
//! clock's `subscribe-duration` and `subscribe-instant` (a sleep, or a
//! `poll` on one) wait. They are replaced:
//!
//! - With the clocks standing still (the default): the pollable is ready at
//!   once, and the clock has not moved. A sleep returns immediately; a guest
//!   that waits for its clock to move spins in WebAssembly until its
//!   deadline stops it.
//! - With the host's clocks granted ([`Limits::host_clock`]): the
//!   pollable is ready when asked, or at the call's deadline, whichever
//!   comes first; the guest then meets the deadline as soon as it runs again.
//!
//! `wasi:random` (secure and insecure) is a deterministic stream seeded
//! from the object's key, its resource version and the request's time, so
//! the same request gets the same numbers ([`seeded_random`]); the insecure
//! seed likewise.
//!
//! [`Limits::host_clock`]: super::Limits::host_clock

use std::time::Duration;

use wasmtime::StoreContextMut;
use wasmtime::component::{Linker, Resource};
use wasmtime_wasi::p2::{DynPollable, Pollable, subscribe};

use super::host_api::HostState;

/// The monotonic clock interface whose waits are replaced. It must name the
/// version `wasmtime_wasi` links (a test checks that it does).
const MONOTONIC_CLOCK: &str = "wasi:clocks/monotonic-clock@0.2.12";

/// Replace the waiting functions of the monotonic clock (see the module
/// documentation). Call after the WASI imports are linked.
pub(super) fn link(linker: &mut Linker<HostState>) -> wasmtime::Result<()> {
    linker.allow_shadowing(true);
    let mut clock = linker.instance(MONOTONIC_CLOCK)?;
    clock.func_wrap(
        "subscribe-duration",
        |mut store: StoreContextMut<'_, HostState>, (nanos,): (u64,)| {
            let pollable = wait(store.data_mut(), Duration::from_nanos(nanos))?;
            Ok((pollable,))
        },
    )?;
    clock.func_wrap(
        "subscribe-instant",
        |mut store: StoreContextMut<'_, HostState>, (when,): (u64,)| {
            let state = store.data_mut();
            let now = state.monotonic_now();
            let pollable = wait(state, Duration::from_nanos(when.saturating_sub(now)))?;
            Ok((pollable,))
        },
    )?;
    linker.allow_shadowing(false);
    Ok(())
}

/// Ready at once (clocks standing still), or after `duration` but never
/// past the call's deadline (host clocks).
fn wait(state: &mut HostState, duration: Duration) -> wasmtime::Result<Resource<DynPollable>> {
    let until = state
        .host_clock_deadline()
        .map(|deadline| deadline.min(tokio::time::Instant::now() + duration));
    let resource = state.table.push(Wait(until))?;
    subscribe(&mut state.table, resource)
}

/// A pollable ready at the instant it holds, or at once.
struct Wait(Option<tokio::time::Instant>);

#[wasmtime_wasi::async_trait]
impl Pollable for Wait {
    async fn ready(&mut self) {
        if let Some(until) = self.0 {
            tokio::time::sleep_until(until).await;
        }
    }
}

/// The guest's monotonic clock when the host's clocks are granted:
/// nanoseconds since this process first read it (the same origin for every
/// call, so `subscribe-instant` and `now` agree).
pub(super) struct HostMonotonic;

fn origin() -> std::time::Instant {
    static ORIGIN: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    *ORIGIN.get_or_init(std::time::Instant::now)
}

impl wasmtime_wasi::HostMonotonicClock for HostMonotonic {
    fn resolution(&self) -> u64 {
        1
    }

    fn now(&self) -> u64 {
        u64::try_from(origin().elapsed().as_nanos()).unwrap_or(u64::MAX)
    }
}

/// Bytes of the deterministic random stream; the stream cycles through them.
const RANDOM_BYTES: usize = 1024;

/// A deterministic random stream for a guest, from `seed`: SHA-256 in
/// counter mode, so nearby seeds give unrelated streams.
pub(super) fn seeded_random(seed: u64) -> wasmtime_wasi::Deterministic {
    use sha2::Digest;
    let mut bytes = Vec::with_capacity(RANDOM_BYTES);
    for block in 0..(RANDOM_BYTES / 32) as u64 {
        let mut hasher = sha2::Sha256::new();
        hasher.update(seed.to_le_bytes());
        hasher.update(block.to_le_bytes());
        bytes.extend_from_slice(&hasher.finalize());
    }
    wasmtime_wasi::Deterministic::new(bytes)
}

/// The seed of a call: the object's key, its resource version and the
/// request's time.
pub(super) fn seed_of(key: &str, resource_version: &str, now_unix_ms: u64) -> u64 {
    use std::hash::{Hash, Hasher};
    // SipHash with fixed keys: the same in every process of one build.
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    (key, resource_version, now_unix_ms).hash(&mut hasher);
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasmtime_wasi::Rng;

    #[test]
    fn the_same_request_gets_the_same_numbers_and_another_other_ones() {
        let draw = |seed| {
            let mut rng = seeded_random(seed);
            (0..64).map(|_| rng.next_u64()).collect::<Vec<_>>()
        };
        let a = seed_of("default/web", "12", 1_700_000_000_000);
        assert_eq!(draw(a), draw(a));
        let b = seed_of("default/web", "13", 1_700_000_000_000);
        let c = seed_of("default/web", "12", 1_700_000_000_001);
        assert_ne!(draw(a), draw(b));
        assert_ne!(draw(a), draw(c));
        let numbers = draw(a);
        let distinct: std::collections::HashSet<_> = numbers.iter().collect();
        assert_eq!(distinct.len(), numbers.len(), "not a short cycle");
    }

    #[test]
    fn the_replaced_interface_is_the_one_wasi_links() {
        let engine = wasmtime::Engine::default();
        let mut linker = Linker::<HostState>::new(&engine);
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker).unwrap();
        // Shadowing is off: defining a name that is already linked fails,
        // one that is not (a version the WASI linker does not use) would not.
        let err = linker
            .root()
            .func_wrap(
                MONOTONIC_CLOCK,
                |_: StoreContextMut<'_, HostState>, (): ()| Ok(()),
            )
            .unwrap_err();
        assert!(format!("{err:#}").contains("defined twice"), "{err:#}");
        link(&mut linker).unwrap();
    }

    #[test]
    fn the_host_monotonic_clock_moves_forward() {
        use wasmtime_wasi::HostMonotonicClock;
        let a = HostMonotonic.now();
        std::thread::sleep(Duration::from_millis(2));
        assert!(HostMonotonic.now() >= a + 2_000_000);
    }
}
