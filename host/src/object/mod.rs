//! The object model: Kubernetes-style objects as JSON, their kinds, keys,
//! metadata accessors, label selectors, patches, field ownership and
//! schemas. Pure data, no IO: the rules that need the store are in `api`.
//!
//! Objects stay `serde_json::Value` throughout the host: plugins, the HTTP
//! API and the store all speak JSON, and a typed copy per layer would cost a
//! conversion on every hop. The accessors here give typed views of the
//! metadata the host itself needs.

pub mod codec;
pub mod field;
pub mod jsonpath;
mod key;
mod kind;
pub mod managed;
pub mod meta;
pub mod patch;
pub mod pointer;
pub mod raw;
pub mod schema;
pub mod selector;
pub mod shape;
pub mod time;
pub mod yaml;

pub use key::ObjectKey;
pub use kind::{GroupVersionKind, KindInfo, KindRef};

/// A Kubernetes-style object as JSON.
///
/// ```
/// use setpoint::object::{Object, meta};
/// let pod: Object = serde_json::json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web-0"}});
/// assert_eq!(meta::name(&pod), "web-0");
/// ```
pub type Object = serde_json::Value;
