//! [`Manifest`]: what a plugin is and what it may touch.

use serde_json::Value;

use crate::KindRef;

/// What a plugin is and what it may touch; the host refuses writes outside
/// what is declared here.
///
/// ```
/// use setpoint_plugin_sdk::{KindRef, Manifest};
///
/// let manifest = Manifest::new(
///     env!("CARGO_PKG_NAME"),
///     env!("CARGO_PKG_VERSION"),
///     KindRef::new("demo.setpoint.dev/v1", "ReplicaSet"),
/// )
/// .owns(KindRef::new("demo.setpoint.dev/v1", "Pod"))
/// .definition_json(r#"{"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition"}"#);
/// assert_eq!(manifest.definitions.len(), 1);
/// ```
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Manifest {
    /// Unique plugin name, e.g. `"replicaset"`.
    pub name: String,
    /// The plugin's own version; pass `env!("CARGO_PKG_VERSION")`.
    pub version: String,
    /// The one kind this plugin reconciles.
    pub reconciles: KindRef,
    /// Child kinds. Children carry an owner reference to the reconciled
    /// object, and their changes requeue it.
    pub owns: Vec<KindRef>,
    /// CustomResourceDefinitions (`apiextensions.k8s.io/v1`) this plugin
    /// brings; the host registers each one whose kind it does not know yet.
    pub definitions: Vec<Value>,
    /// A finalizer the host adds to every reconciled object; the plugin is
    /// then called with [`Ctx::finalizing`](crate::Ctx::finalizing) once
    /// deletion starts.
    pub finalizer: Option<String>,
    /// External destinations the plugin talks to, as `scheme://host:port`
    /// patterns (`https://*.example.com:443`, `http://127.0.0.1:8081`). The
    /// host sends only to destinations declared here *and* granted by the
    /// operator.
    pub destinations: Vec<String>,
    /// The secrets its requests name, as `name` or `name/key` patterns in
    /// the reconciled object's namespace (`*` for any); also subject to the
    /// operator's grant.
    pub secrets: Vec<String>,
}

impl Manifest {
    /// A plugin named `name` at `version` that reconciles `reconciles`.
    pub fn new(name: impl Into<String>, version: impl Into<String>, reconciles: KindRef) -> Self {
        Self {
            name: name.into(),
            version: version.into(),
            reconciles,
            owns: Vec::new(),
            definitions: Vec::new(),
            finalizer: None,
            destinations: Vec::new(),
            secrets: Vec::new(),
        }
    }

    /// Declares an external destination (`scheme://host:port`, `*.` allowed
    /// at the start of the host).
    pub fn destination(mut self, pattern: impl Into<String>) -> Self {
        self.destinations.push(pattern.into());
        self
    }

    /// Declares a secret the plugin's requests name (`name` or `name/key`).
    pub fn secret(mut self, pattern: impl Into<String>) -> Self {
        self.secrets.push(pattern.into());
        self
    }

    /// Declares a child kind.
    pub fn owns(mut self, kind: KindRef) -> Self {
        self.owns.push(kind);
        self
    }

    /// Adds a CustomResourceDefinition written as JSON; a kind with Rust
    /// types is better defined with [`Manifest::define`].
    pub fn definition(mut self, definition: Value) -> Self {
        self.definitions.push(definition);
        self
    }

    /// Adds the CustomResourceDefinition generated from a kind's Rust types.
    pub fn define(self, definition: crate::Definition) -> Self {
        self.definition(definition.to_crd())
    }

    /// Adds a CustomResourceDefinition from JSON text (a kind without Rust
    /// types; otherwise see [`Manifest::define`]).
    ///
    /// # Panics
    ///
    /// If `json` is not valid JSON. The text is part of the plugin, so a unit
    /// test that calls `manifest()` catches this before the plugin ships.
    pub fn definition_json(self, json: &str) -> Self {
        match serde_json::from_str(json) {
            Ok(definition) => self.definition(definition),
            Err(err) => panic!("invalid CustomResourceDefinition JSON: {err}"),
        }
    }

    /// Sets the finalizer the host manages for this plugin.
    pub fn finalizer(mut self, finalizer: impl Into<String>) -> Self {
        self.finalizer = Some(finalizer.into());
        self
    }
}
