//! Write [Setpoint] reconcilers as typed Rust functions.
//!
//! A reconciler drives objects of one kind towards their `spec`: it is handed
//! the whole current object and the children it owns, and answers with the
//! children that should exist, the status to record, events, and when to look
//! again. The host does the writing. This crate hides the WebAssembly
//! plumbing: you implement [`Reconciler`], call [`export_reconciler!`] once,
//! and build for `wasm32-unknown-unknown` (or `wasm32-wasip2`, below).
//!
//! [Setpoint]: https://example.invalid/setpoint
//!
//! # A complete reconciler
//!
//! A `Greeting` says hello to `spec.name` in `status.message`:
//!
//! ```
//! use schemars::JsonSchema;
//! use serde::{Deserialize, Serialize};
//! use setpoint_plugin_sdk::{
//!     Ctx, Definition, Error, Event, KindRef, Manifest, Object, Reconciler, Response,
//!     export_reconciler,
//! };
//!
//! /// Whom to greet.
//! #[derive(Deserialize, JsonSchema)]
//! struct GreetingSpec {
//!     /// The name to greet.
//!     name: String,
//! }
//!
//! #[derive(Serialize, Deserialize, Default, Debug, PartialEq, JsonSchema)]
//! #[serde(rename_all = "camelCase")]
//! struct GreetingStatus {
//!     /// The greeting.
//!     message: String,
//! }
//!
//! #[derive(Default)]
//! struct Greeter;
//!
//! impl Reconciler for Greeter {
//!     type Spec = GreetingSpec;
//!     type Status = GreetingStatus;
//!
//!     fn manifest(&self) -> Manifest {
//!         let greeting = KindRef::new("demo.setpoint.dev/v1", "Greeting");
//!         // The kind's CustomResourceDefinition, generated from the types.
//!         let definition = Definition::of::<GreetingSpec, GreetingStatus>(greeting.clone());
//!         Manifest::new("greeter", env!("CARGO_PKG_VERSION"), greeting).define(definition)
//!     }
//!
//!     fn reconcile(
//!         &self,
//!         greeting: &Object<GreetingSpec, GreetingStatus>,
//!         _ctx: &Ctx,
//!     ) -> Result<Response<GreetingStatus>, Error> {
//!         if greeting.spec.name.is_empty() {
//!             // Retrying will not help: say so, and the host reports it.
//!             return Err(Error::permanent("spec.name must not be empty"));
//!         }
//!         let message = format!("Hello, {}!", greeting.spec.name);
//!         let mut response = Response::new();
//!         // An event only when something changes: a converged object must
//!         // produce exactly what is stored, so the host writes nothing.
//!         if greeting.status.message != message {
//!             response = response.event(Event::normal("Greeted", &message));
//!         }
//!         Ok(response.status(GreetingStatus { message }))
//!     }
//! }
//!
//! export_reconciler!(Greeter);
//! #
//! # fn main() {
//! #     use setpoint_plugin_sdk::testing::FakeCtx;
//! #     let greeting = Object::from_value(serde_json::json!({
//! #         "apiVersion": "demo.setpoint.dev/v1", "kind": "Greeting",
//! #         "metadata": {"name": "hi"}, "spec": {"name": "world"},
//! #     })).unwrap();
//! #     let response = Greeter.reconcile(&greeting, &FakeCtx::new()).unwrap();
//! #     assert_eq!(response.status.unwrap().message, "Hello, world!");
//! #     assert_eq!(response.events.len(), 1);
//! # }
//! ```
//!
//! The plugin crate is a `cdylib` (the component) and an `rlib` (for native
//! tests), depending on this crate, `serde` and `schemars` (for the
//! `JsonSchema` derive, see [`Definition`]):
//!
//! ```toml
//! [lib]
//! crate-type = ["cdylib", "rlib"]
//!
//! [dependencies]
//! setpoint-plugin-sdk = "0.1"
//! serde = { version = "1", features = ["derive"] }
//! schemars = "1"
//! ```
//!
//! In Wasm the SDK sets the global allocator (a bump arena: each call's
//! instance is thrown away) and exports a faster `memcmp`; the cargo
//! features `allocator` and `memcmp` (both default) turn them on, so a
//! plugin that brings its own sets `default-features = false` and names
//! the one it keeps.
//!
//! `cargo build --release --target wasm32-unknown-unknown` then writes the
//! plugin to `target/wasm32-unknown-unknown/release/<crate>.wasm`; drop it
//! into the host's `plugins/` directory. It is a core module carrying the
//! plugin world's types, which the host wraps into a component when it loads
//! the file.
//!
//! ## Which target
//!
//! - `wasm32-unknown-unknown` (the default of Setpoint's plugins and of
//!   `setpoint new-plugin`): no WASI, so each call instantiates one core
//!   module with only the plugin world's imports, cheaper per call than with
//!   WASI (docs/benchmarks/plugins.md#plugins-built-without-wasi-2026-11-22-0752). There is no stdout or stderr: log with [`Ctx::log`]
//!   (a panic's message reaches the host through the log, and ends up in the
//!   error on the object). `std::time` and randomness are not there either:
//!   [`Ctx::now`] is the clock, and crates that need an entropy source (say
//!   `uuid` with `v4`) do not build.
//! - `wasm32-wasip2`: a component that imports WASI; `println!` and
//!   `eprintln!` become log lines, and crates that need WASI build. The host
//!   grants no files, network or environment either way.
//!
//! # Testing
//!
//! A reconcile is an ordinary function, so `cargo test` runs it natively with
//! a [`testing::FakeCtx`] standing in for the host: choose the owned
//! children, the clock and the objects [`Ctx::get`] and [`Ctx::list`] see, then
//! inspect the [`Response`] and the captured logs.
//!
//! ```
//! # use setpoint_plugin_sdk::{Object, Time, testing::FakeCtx};
//! # type Spec = serde_json::Value;
//! # type Status = serde_json::Value;
//! let object: Object<Spec, Status> = Object::from_value(serde_json::json!({
//!     "apiVersion": "demo.setpoint.dev/v1", "kind": "Greeting", "metadata": {"name": "hi"},
//! })).unwrap();
//! let ctx = FakeCtx::new().with_now(Time::from_unix_ms(1_000));
//! // let response = MyReconciler.reconcile(&object, &ctx)?;
//! # assert_eq!(ctx.now().unix_ms(), 1_000);
//! ```
//!
//! # The rules
//!
//! - **Level-triggered.** You always get the whole object and all owned
//!   children, never a change. Compute the desired state from scratch.
//! - **Full desired state.** [`Response::children`] is the complete set of
//!   children; the host creates, updates and deletes to match, and sets
//!   namespaces and owner references. [`Response::status`] is the whole
//!   status, sent as a merge patch: a field it leaves out is kept, so name
//!   one that must go with [`Response::clear_status`]. Give children deterministic names: the host's cache may lag
//!   behind its writes, and a stable name makes a repeated reconcile harmless.
//! - **Idempotent.** An object at its setpoint yields exactly what is stored
//!   and no events. Use [`set_condition`] so `lastTransitionTime` only moves
//!   on a real transition.
//! - **Pure and non-blocking.** No clocks (use [`Ctx::now`]), no sleeping
//!   (use [`Response::requeue_after`]), no memory between calls: each call
//!   runs in a fresh instance.
//! - **Errors say whether to retry.** [`Error::transient`] is retried with
//!   backoff; [`Error::permanent`] is reported on the object until it changes.
//!   A spec that does not parse is a permanent error naming the field.

// Lets the generated bindings and the export macro use the same absolute
// paths (`::setpoint_plugin_sdk::...`) inside this crate and in plugins.
extern crate self as setpoint_plugin_sdk;

#[cfg(any(all(target_arch = "wasm32", feature = "allocator"), test))]
mod arena;
mod conditions;
mod ctx;
mod definition;
mod error;
mod export;
mod http;
mod manifest;
mod memcmp;
mod object;
mod reconciler;
mod response;
mod template;
pub mod testing;
mod time;
pub mod wire;

pub use conditions::{Condition, ConditionStatus, find_condition, set_condition};
pub use ctx::{Ctx, Host, LogLevel};
pub use definition::{Definition, PrinterColumn};
pub use error::Error;
pub use http::{
    BASIC_AUTH_PASSWORD, BASIC_AUTH_USERNAME, HttpError, HttpErrorKind, HttpRequest, HttpResponse,
    HttpResult, SecretKeyRef, SecretTarget, SecretUse,
};
pub use manifest::Manifest;
pub use object::{
    DynamicObject, KindRef, Object, ObjectMeta, ObjectOf, ObjectRef, OwnerReference, Resource,
};
pub use reconciler::Reconciler;
pub use response::{Event, Response, Severity};
pub use template::{LabelSelector, Template, TemplateMetadata};
pub use time::Time;

/// The function-first form: a reconcile function becomes a plugin.
///
/// ```
/// use schemars::JsonSchema;
/// use serde::{Deserialize, Serialize};
/// use setpoint_plugin_sdk::{Ctx, Definition, Error, KindRef, Manifest, Object, Response};
///
/// #[derive(Deserialize, JsonSchema)]
/// struct GreetingSpec {
///     name: String,
/// }
///
/// #[derive(Serialize, Deserialize, Default, JsonSchema)]
/// struct GreetingStatus {
///     message: String,
/// }
///
/// fn manifest() -> Manifest {
///     let greeting = Definition::of::<GreetingSpec, GreetingStatus>(KindRef::new(
///         "demo.setpoint.dev/v1",
///         "Greeting",
///     ));
///     Manifest::new("greeter", "1.0.0", greeting.kind()).define(greeting)
/// }
///
/// /// Says hello to `spec.name`.
/// #[setpoint_plugin_sdk::reconciler(manifest = manifest, name = Greeter)]
/// fn reconcile(
///     greeting: &Object<GreetingSpec, GreetingStatus>,
///     _ctx: &Ctx,
/// ) -> Result<Response<GreetingStatus>, Error> {
///     let message = format!("Hello, {}!", greeting.spec.name);
///     Ok(Response::new().status(GreetingStatus { message }))
/// }
/// # fn main() {
/// #     use setpoint_plugin_sdk::Reconciler;
/// #     let object = Object::from_value(serde_json::json!({"apiVersion": "demo.setpoint.dev/v1",
/// #         "kind": "Greeting", "metadata": {"name": "hi"}, "spec": {"name": "world"}})).unwrap();
/// #     let ctx = setpoint_plugin_sdk::testing::FakeCtx::new();
/// #     assert_eq!(reconcile(&object, &ctx).unwrap().status.unwrap().message, "Hello, world!");
/// #     assert_eq!(Greeter.manifest().name, "greeter");
/// # }
/// ```
///
/// `#[reconciler(manifest = manifest)]` on a function `fn(&Object<Spec,
/// Status>, &Ctx) -> Result<Response<Status>, Error>` writes the unit
/// struct (`name = ...`, `Plugin` by default) that implements
/// [`Reconciler`] with them, and exports it as [`export_reconciler!`]
/// does. The function stays as written: unit tests call it directly.
pub use setpoint_plugin_sdk_macros::reconciler;

/// The schema library kind types derive `JsonSchema` with (see
/// [`Definition`]), re-exported for its types (`schemars::Schema`); the
/// derive itself needs `schemars` among the plugin's dependencies.
pub use schemars;

/// The JSON library objects are built with, re-exported so plugins need no
/// direct dependency on it (`setpoint_plugin_sdk::serde_json::json!`).
pub use serde_json;

#[cfg(target_arch = "wasm32")]
#[doc(hidden)]
#[path = "bindings.rs"]
// The generated glue passes a flattened 0.2 request as many arguments.
#[allow(clippy::too_many_arguments)]
pub mod __bindings;

#[cfg(target_arch = "wasm32")]
#[doc(hidden)]
pub use export::__export;

/// Wasm plugins built with the SDK allocate from a bump arena: each call
/// runs in a fresh instance whose memory is discarded afterwards (`arena`).
/// The `allocator` feature (on by default) turns it on.
#[cfg(all(target_arch = "wasm32", feature = "allocator"))]
#[global_allocator]
pub(crate) static ALLOCATOR: arena::Arena = arena::Arena::new();

/// The bindings runtime, for the generated code's `runtime_path`.
#[cfg(target_arch = "wasm32")]
#[doc(hidden)]
pub use wit_bindgen as __wit_bindgen;
