//! `runtime::Error`: why loading or calling a plugin failed. The only place
//! that inspects wasmtime errors.

use std::time::Duration;

/// A plugin failure.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The file is not a complete WebAssembly binary (empty, truncated,
    /// text, or something else altogether); nothing parsed it.
    #[error("not a plugin file: {0}")]
    InvalidFile(String),
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
    /// The guest used up its fuel (instruction budget) for the call.
    #[error("plugin ran out of fuel ({0} units)")]
    FuelExhausted(u64),
    /// The guest trapped (panic, unreachable, stack overflow…).
    #[error("plugin trapped: {0}")]
    Trap(String),
    /// The guest returned something the host cannot use.
    #[error("plugin returned an invalid response: {0}")]
    BadResponse(String),
    /// No instance could be created right now (pool exhausted, say).
    #[error("cannot instantiate plugin: {0}")]
    Instantiate(String),
    /// The engine could not start (e.g. no virtual memory for the pool).
    #[error("wasm engine: {0}")]
    Engine(String),
    /// The on-disk cache of compiled components failed.
    #[error("compiled-component cache {path}: {detail}")]
    Cache {
        /// The cache file or directory.
        path: std::path::PathBuf,
        /// What went wrong.
        detail: String,
    },
}

impl Error {
    /// Whether retrying the same call cannot help: the guest itself
    /// misbehaved (deadline, memory, fuel, trap, bad response). Such errors
    /// are reported on the object and wait for the object or the plugin to
    /// change; instantiation and engine errors are retried.
    pub fn is_guest_fault(&self) -> bool {
        matches!(
            self,
            Error::DeadlineExceeded(_)
                | Error::MemoryExceeded(_)
                | Error::FuelExhausted(_)
                | Error::Trap(_)
                | Error::BadResponse(_)
        )
    }
}

/// What the store saw during the failed call, to classify the error.
pub(super) struct CallFacts<'a> {
    /// The call's deadline.
    pub deadline: Duration,
    /// The memory cap, if the limiter refused a growth.
    pub memory_exceeded: Option<usize>,
    /// The fuel given to the call, if metering is on.
    pub fuel: Option<u64>,
    /// The last lines the guest wrote to stderr (a Rust panic's message).
    pub stderr_tail: &'a str,
    /// The last message the guest logged at error level (where a guest
    /// without WASI reports its panic).
    pub last_error_log: Option<&'a str>,
    /// Whether the guest was already instantiated when the error happened.
    pub instantiated: bool,
}

/// Classify an error from instantiating or calling a guest.
pub(super) fn classify(err: wasmtime::Error, facts: CallFacts<'_>) -> Error {
    if let Some(cap) = facts.memory_exceeded {
        return Error::MemoryExceeded(cap);
    }
    let trap = err.downcast_ref::<wasmtime::Trap>().copied();
    match trap {
        Some(wasmtime::Trap::Interrupt) => return Error::DeadlineExceeded(facts.deadline),
        Some(wasmtime::Trap::OutOfFuel) => {
            return Error::FuelExhausted(facts.fuel.unwrap_or_default());
        }
        None if !facts.instantiated => return Error::Instantiate(format!("{err:#}")),
        _ => {}
    }
    let mut message = match trap {
        Some(trap) => trap.to_string(),
        None => format!("{err:#}"),
    };
    if !facts.stderr_tail.is_empty() {
        // A Rust guest's panic message goes to stderr just before the trap.
        message = format!("{message}; guest stderr: {}", facts.stderr_tail);
    }
    if let Some(logged) = facts.last_error_log {
        // The SDK's panic hook for guests without WASI logs it instead.
        let logged = logged.trim().replace('\n', " | ");
        message = format!("{message}; guest's last error log: {logged}");
    }
    Error::Trap(message)
}

/// A compile error's text.
pub(super) fn compile(err: wasmtime::Error) -> Error {
    Error::Compile(format!("{err:#}"))
}

/// A link (world mismatch) error's text.
pub(super) fn link(err: wasmtime::Error) -> Error {
    Error::Link {
        detail: format!("{err:#}"),
    }
}

/// An engine set-up error's text.
pub(super) fn engine(err: wasmtime::Error) -> Error {
    Error::Engine(format!("{err:#}"))
}
