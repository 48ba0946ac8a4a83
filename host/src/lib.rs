//! # Setpoint
//!
//! An embeddable reconciliation engine: Kubernetes-style control loops
//! without a Kubernetes cluster. A [`Host`] owns an object store, the watch
//! fan-out over it and a workqueue per reconciler, and calls sandboxed
//! WebAssembly reconcile plugins (or native [`controller::Reconciler`]s).
//!
//! Start with [`Host::builder`]. A complete program that embeds a host with
//! a native reconciler beside a Wasm plugin is `host/examples/embed.rs`
//! (`cargo run -p setpoint --example embed`); in short:
//!
//! ```no_run
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! use serde_json::json;
//!
//! let host = setpoint::Host::builder().plugins_dir("plugins").build().await?;
//! let kind = host.api().kinds().require("demo.setpoint.dev/v1", "ReplicaSet")?;
//! host.api()
//!     .create(&kind, json!({
//!         "apiVersion": "demo.setpoint.dev/v1",
//!         "kind": "ReplicaSet",
//!         "metadata": {"name": "web"},
//!         "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}},
//!                  "template": {"metadata": {"labels": {"app": "web"}}, "spec": {}}},
//!     }))
//!     .await?;
//! host.shutdown().await;
//! # Ok(()) }
//! ```
//!
//! ## The parts
//!
//! - [`store`]: revisioned key-value backends (the shape of etcd v3).
//! - [`api`]: object semantics over a backend (versions, generation, status,
//!   finalizers, selectors, pagination).
//! - [`watch`]: one cache of recent changes fanned out to every watcher.
//! - [`informer`]: list-then-watch caches with an owner index.
//! - [`queue`]: the workqueue (client-go semantics).
//! - [`controller`]: the reconcile loop and response application.
//! - [`runtime`]: wasmtime, the sandbox and the plugin world bindings.
//! - [`plugins`]: the plugins directory.
//! - [`cluster`]: several hosts on one etcd sharing the work.
//! - [`server`]: the Kubernetes-style HTTP API.
//! - [`cli`]: the `setpoint` command line.

pub mod api;
pub mod cli;
pub mod cluster;
pub mod controller;
pub mod host;
pub mod informer;
mod metrics;
pub mod object;
pub mod plugins;
pub mod queue;
pub mod runtime;
pub mod server;
pub mod store;
pub mod watch;

pub use host::{Host, HostBuilder};
