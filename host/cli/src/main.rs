//! The `setpoint` binary: parse the command line, run it, map errors to an
//! exit code.

#![deny(unsafe_code)]

use std::process::ExitCode;

use clap::Parser;

/// mimalloc rather than glibc's allocator: the host's loop allocates and
/// frees JSON values on many threads, where glibc spent a large share of the
/// loop's CPU (`malloc_consolidate`, cross-thread frees). With it the loop
/// benchmark's update phase takes less CPU per reconcile with a Wasm plugin
/// (docs/benchmarks/loop.md#mimalloc-adopted-without-transparent-huge-pages-2026-11-22). Embedders of the library pick
/// their own allocator. Built without the `mimalloc` feature, the binary
/// uses the system allocator, which heap profilers such as heaptrack see
/// (`scripts/bench heap`).
#[cfg(all(feature = "mimalloc", not(feature = "heap-profile")))]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// jemalloc, for its sampling heap profiler (`heap-profile`, which takes
/// the place of mimalloc when both are on: one
/// allocation in about each 2^`lg_prof_sample` bytes is recorded with its
/// stack, and a dump scales them up), configured by `_RJEM_MALLOC_CONF`
/// (`scripts/bench heap-sampled` sets it).
#[cfg(feature = "heap-profile")]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// Writes a profile of the heap as it is, each time the process gets
/// SIGUSR2, where the profiler's `prof_prefix` names (`<prefix>.<pid>.
/// <seq>.m<seq>.heap`); read it with `jeprof`.
#[cfg(feature = "heap-profile")]
#[allow(unsafe_code)]
fn dump_heap_on_sigusr2() {
    let mut signals = match signal_hook::iterator::Signals::new([signal_hook::consts::SIGUSR2]) {
        Ok(signals) => signals,
        Err(err) => {
            eprintln!("heap-profile: cannot wait for SIGUSR2: {err}");
            return;
        }
    };
    let spawned = std::thread::Builder::new()
        .name("heap-dump".into())
        .spawn(move || {
            for _ in signals.forever() {
                // SAFETY: `prof.dump` takes a C string or null (the
                // configured prefix); null is what is written.
                let dumped = unsafe {
                    tikv_jemalloc_ctl::raw::write(
                        b"prof.dump\0",
                        std::ptr::null::<std::ffi::c_char>(),
                    )
                };
                match dumped {
                    Ok(()) => eprintln!("heap-profile: dumped"),
                    // jemalloc refuses while profiling is off (no `prof:true`).
                    Err(err) => eprintln!("heap-profile: no dump: {err}"),
                }
            }
        });
    if let Err(err) = spawned {
        eprintln!("heap-profile: {err}");
    }
}

/// Gives back to the OS what mimalloc holds freed on this thread: its
/// pages are otherwise purged only when the thread next allocates, so an
/// idle host kept the memory of clients long gone.
#[cfg(all(feature = "mimalloc", not(feature = "heap-profile")))]
#[allow(unsafe_code)]
fn collect_freed() {
    // SAFETY: `mi_collect` takes no pointers and may run on any thread at
    // any time.
    unsafe { libmimalloc_sys::mi_collect(false) }
}

/// Gives back to the OS all that mimalloc holds freed on this thread,
/// pages with free room included; for the host's threads that have gone
/// idle (`setpoint::memory`), where the non-forced collect returned
/// almost nothing (docs/benchmarks/scale.md, "Freed memory given back by
/// idle threads").
#[cfg(all(feature = "mimalloc", not(feature = "heap-profile")))]
#[allow(unsafe_code)]
fn release_freed() {
    // SAFETY: as in `collect_freed`.
    unsafe { libmimalloc_sys::mi_collect(true) }
}

fn main() -> ExitCode {
    let cli = setpoint_cli::Cli::parse();
    #[cfg(feature = "heap-profile")]
    dump_heap_on_sigusr2();
    let allocator = setpoint_cli::Allocator {
        #[cfg(all(feature = "mimalloc", not(feature = "heap-profile")))]
        collect: Some(collect_freed),
        #[cfg(not(all(feature = "mimalloc", not(feature = "heap-profile"))))]
        collect: None,
        #[cfg(all(feature = "mimalloc", not(feature = "heap-profile")))]
        release: Some(release_freed),
        #[cfg(not(all(feature = "mimalloc", not(feature = "heap-profile"))))]
        release: None,
    };
    match setpoint_cli::run_with(cli, allocator) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}
