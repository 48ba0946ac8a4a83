//! `runtime::Error`: why loading or calling a plugin failed. The only place
//! that inspects wasmtime errors.

use std::time::Duration;

/// A plugin failure.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The file is not a valid component for this engine.
    #[error("cannot compile plugin: {0}")]
    Compile(String),
    /// The component does not implement the `setpoint:plugin/reconciler` world
    /// this host speaks (missing or mismatched imports or exports).
    #[error(
        "plugin does not implement the setpoint:plugin@{} reconciler world: {detail}",
        super::WIT_VERSION
    )]
    Link {
        /// What did not match.
        detail: String,
    },
    /// The call ran past its deadline.
    #[error("plugin exceeded its deadline of {0:?}")]
    DeadlineExceeded(Duration),
    /// The guest tried to grow memory past its cap.
    #[error("plugin exceeded its memory limit of {0} bytes")]
    MemoryExceeded(usize),
    /// The guest trapped (panic, unreachable, stack overflow…).
    #[error("plugin trapped: {0}")]
    Trap(String),
    /// The guest returned something the host cannot use.
    #[error("plugin returned an invalid response: {0}")]
    BadResponse(String),
    /// The engine could not start (e.g. no virtual memory for the pool).
    #[error("wasm engine: {0}")]
    Engine(String),
}

/// Classify an error from instantiating or calling a guest.
pub(super) fn classify(
    err: wasmtime::Error,
    deadline: Duration,
    memory_exceeded: Option<usize>,
    stderr_tail: &str,
) -> Error {
    if let Some(cap) = memory_exceeded {
        return Error::MemoryExceeded(cap);
    }
    if let Some(trap) = err.downcast_ref::<wasmtime::Trap>()
        && *trap == wasmtime::Trap::Interrupt
    {
        return Error::DeadlineExceeded(deadline);
    }
    let mut message = match err.downcast_ref::<wasmtime::Trap>() {
        Some(trap) => trap.to_string(),
        None => format!("{err:#}"),
    };
    if !stderr_tail.is_empty() {
        // A Rust guest's panic message goes to stderr just before the trap.
        message = format!("{message}; guest stderr: {stderr_tail}");
    }
    Error::Trap(message)
}
