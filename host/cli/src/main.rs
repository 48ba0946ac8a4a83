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
#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Gives back to the OS what mimalloc holds freed on this thread: its
/// pages are otherwise purged only when the thread next allocates, so an
/// idle host kept the memory of clients long gone.
#[cfg(feature = "mimalloc")]
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
#[cfg(feature = "mimalloc")]
#[allow(unsafe_code)]
fn release_freed() {
    // SAFETY: as in `collect_freed`.
    unsafe { libmimalloc_sys::mi_collect(true) }
}

fn main() -> ExitCode {
    let cli = setpoint_cli::Cli::parse();
    let allocator = setpoint_cli::Allocator {
        #[cfg(feature = "mimalloc")]
        collect: Some(collect_freed),
        #[cfg(not(feature = "mimalloc"))]
        collect: None,
        #[cfg(feature = "mimalloc")]
        release: Some(release_freed),
        #[cfg(not(feature = "mimalloc"))]
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
