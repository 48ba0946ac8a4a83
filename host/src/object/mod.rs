//! The object model: Kubernetes-style objects as JSON, their kinds, keys,
//! metadata accessors and label selectors. Pure data, no IO.
//!
//! Objects stay `serde_json::Value` throughout the host: plugins, the HTTP
//! API and the store all speak JSON, and a typed copy per layer would cost a
//! conversion on every hop. The accessors here give typed views of the
//! metadata the host itself needs.

pub mod codec;
pub mod jsonpath;
mod key;
mod kind;
pub mod meta;
pub mod patch;
pub mod selector;
pub mod time;

pub use key::ObjectKey;
pub use kind::{GroupVersionKind, KindInfo, KindRef};

/// A Kubernetes-style object as JSON.
pub type Object = serde_json::Value;
