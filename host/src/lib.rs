//! # Setpoint
//!
//! An embeddable reconciliation engine: Kubernetes-style control loops
//! without a Kubernetes cluster. A [`Host`] owns an object store, the watch
//! fan-out over it and a workqueue per reconciler, and calls sandboxed
//! WebAssembly reconcile plugins (or native [`controller::Reconciler`]s).
//!
//! ## Embedding a host
//!
//! This program (`host/examples/embed.rs`, run with `cargo run -p setpoint
//! --example embed` after building the podsim plugin as its header says)
//! is the way in: it builds a [`Host`] with [`Host::builder`] on the
//! durable embedded store, runs a native reconciler
//! ([`controller::Native`], the replicaset example compiled in) beside a
//! Wasm plugin from a plugins directory, applies a ReplicaSet through the
//! typed [`Client`] ([`Host::client`]), follows the pods it creates
//! through a watch [`Stream`](client::WatchStream) until they run, waits
//! for the ReplicaSet's status, and shuts the host down.
//!
#![doc = concat!("```no_run\n", include_str!("../examples/embed.rs"), "```")]
//!
//! The [`client`] module documents every call of the client: get, list
//! (selectors, pages), create, replace, server-side apply, merge and JSON
//! patches, status, delete with propagation, watch and `wait_until`.
//! Everything else an embedding program may need is below it, in the
//! parts of the host.
//!
//! The library sets no global allocator. The `setpoint` binary uses
//! mimalloc, which took CPU per reconcile off the loop benchmark against
//! glibc's allocator (docs/benchmarks/loop.md#mimalloc-adopted-without-transparent-huge-pages-2026-11-22); a program that embeds a busy
//! host may want to do the same (`#[global_allocator]`).
//!
//! ## The parts
//!
//! - [`client`]: the typed client handle for embedding programs.
//! - [`store`]: revisioned key-value backends (the shape of etcd v3).
//! - [`api`]: object semantics over a backend (versions, generation, status,
//!   finalizers, selectors, pagination).
//! - [`watch`]: one cache of recent changes fanned out to every watcher.
//! - [`informer`]: list-then-watch caches with an owner index, on the one
//!   list-watch primitive ([`informer::watcher`]).
//! - [`queue`]: the workqueue (client-go semantics).
//! - [`controller`]: the reconcile loop and response application.
//! - [`system`]: controllers the host runs for itself (garbage collection,
//!   compaction, following stored definitions).
//! - [`egress`]: the external HTTP requests plugins ask for, under grants.
//! - [`runtime`]: wasmtime, the sandbox and the plugin world bindings.
//! - [`plugins`]: the plugins directory.
//! - [`cluster`]: several hosts on one etcd sharing the work.
//! - [`plan`]: what a change would do, planned over an overlay of the store.
//!
//! The Kubernetes-style HTTP API is the `setpoint-server` crate, the
//! `setpoint` command line the `setpoint-cli` crate: an embedder that
//! depends on this crate alone builds neither (nor clap, axum or, without
//! the `notify` feature, a file-event library).

#![forbid(unsafe_code)]

pub mod api;
pub mod client;
pub mod cluster;
pub mod contract;
pub mod controller;
pub mod egress;
mod files;
pub mod informer;
pub mod manager;
pub mod memory;
mod metrics;
pub mod object;
pub mod plan;
pub mod plugins;
pub mod queue;
pub mod runtime;
pub mod store;
pub mod system;
pub mod watch;

pub use client::Client;
pub use manager::{Host, HostBuilder};
