//! The `setpoint` binary: parse the command line, run it, map errors to an
//! exit code.

#![forbid(unsafe_code)]

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

fn main() -> ExitCode {
    let cli = setpoint_cli::Cli::parse();
    match setpoint_cli::run(cli) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}
