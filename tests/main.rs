//! Integration tests of Setpoint: a real host with real plugins compiled to
//! WebAssembly, driven through the library, the HTTP API and the binary.
#![allow(missing_docs)]

mod support;

/// Issue #17 items 10–12: YAML bombs, garbage collection after a mixed
/// workload, deletecollection, error wording, OpenAPI validity and caching.
mod api_gaps;
/// The HTTP API's gate: 401/403/429/413, binding, tokens and kubeconfig.
mod api_gate;
/// Careless and hostile writes: dry run, patch bombs, deep objects,
/// reserved API groups, delete options in the query string.
mod api_writes;
/// The `setpoint` binary: serve, apply, get, delete, and bad input.
mod cli;
/// Hostile HTTP clients: unread watches, stalled bodies, many managers.
mod clients;
/// Three hosts sharing work on one etcd: kill -9, partition, no overlap.
mod cluster;
/// The web console in a real headless Chromium (`tests/console/`): the
/// ownership tree live, plans, a DnsRecord's requests, read-only tokens,
/// 100,000 objects, accessibility.
mod console;
/// The web console's server side: page, tree, overview, plugins, manifests.
mod console_api;
/// No plugin can hurt the host or its neighbours: kinds and definitions
/// with one owner, plugin files checked before they are parsed, hot loops,
/// blocking calls, clashes.
mod containment;
/// Durability of the embedded store: kill -9 and restart, damaged data.
mod crash;
/// Discovery documents, aggregated and legacy.
mod discovery;
/// The DNS provider plugin against a real PowerDNS.
mod dns;
/// The embedded store's data directory: clean stops, backups, a damaged or
/// missing log, a full disk.
mod durability;
/// A controller's own status write does not wake it again; others' do.
mod echo;
/// External effects: grants, secrets, limits and the previous contract
/// series, against real HTTP servers on loopback.
mod effects;
/// Embedding the host as a library: native and Wasm reconcilers, two hosts.
mod embedding;
/// The host on a real etcd.
mod etcd;
/// Field validation: Strict, Warn, Ignore.
mod field_validation;
/// The Rust `kube` crate against a running host.
mod kube_client;
/// A real kubectl against a running host.
mod kubectl;
/// `/metrics`: workqueue, reconcile, request, watch, store and plugin series.
mod metrics;
/// `setpoint new-plugin` and `setpoint plugins`.
mod new_plugin;
/// Who owns a kind, through the binary: claims that outlive restarts, a
/// squatter's hand-over when it goes, and the operator's pins.
mod ownership;
/// `setpoint plan`: plans compared with what applying them does, nothing
/// written or sent while planning, bad input reported per object.
mod plan;
/// A plugin written in Python (componentize-py) on a real host.
mod python_plugin;
/// The RabbitMQ provider plugins against a real broker.
mod rabbitmq;
/// The reconcile loop's guarantees with native reconcilers: coalescing,
/// per-key exclusion, the hot-loop breaker, inline calls, stale statuses.
mod reconcile_loop;
/// Hot reload of the plugins directory.
mod reload;
/// Restarts without a reconcile storm: controllers resume from their
/// checkpoints after a stop or a kill -9, and miss nothing.
mod restart;
/// Deployment rollouts and garbage collection with the real plugins.
mod rollouts;
/// The sandbox: the fault zoo beside well-behaved plugins.
mod sandbox;
/// Core Secrets: who may read them, and values kept out of logs.
mod secrets;
/// The walking skeleton: ReplicaSet and podsim choreography end to end.
mod skeleton;
/// Stacks: dependency order, cycles, the reverse-order finalizer.
mod stacks;
/// Watch streams over HTTP and the watch hub.
mod watch;
/// The plugin contract's versions: which the host accepts, and what it says.
mod wit_versions;
