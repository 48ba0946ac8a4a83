//! [`Ctx`]: everything a reconcile may know besides the object itself: the
//! children it owns, the host's clock, and read-only host services behind the
//! [`Host`] trait (real imports in Wasm, a fake in unit tests, native calls
//! when the host runs a reconciler in-process).

use std::fmt;

use crate::{DynamicObject, Error, ObjectRef, Time};

/// Severity of a log line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LogLevel {
    /// Very detailed tracing.
    Trace,
    /// Debugging detail.
    Debug,
    /// Routine information.
    Info,
    /// Something unexpected that the reconciler handled.
    Warn,
    /// Something failed.
    Error,
}

/// The services a host offers a reconcile: logging and read-only views of its
/// caches. There is no write: a reconciler changes the world only through its
/// [`Response`](crate::Response).
///
/// Plugin authors do not implement this; the export macro connects it to the
/// Wasm imports and [`FakeCtx`](crate::testing::FakeCtx) fakes it.
pub trait Host {
    /// Records a log line with the plugin's name and the object's key.
    fn log(&self, level: LogLevel, message: &str);

    /// One object from the host's cache, if present.
    fn get(&self, object: &ObjectRef) -> Result<Option<DynamicObject>, Error>;

    /// Objects of one kind from the host's cache, optionally in one namespace
    /// and matching a label selector (`"app=web,tier!=db"`; empty matches
    /// everything).
    fn list(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        label_selector: &str,
    ) -> Result<Vec<DynamicObject>, Error>;
}

/// The context of one reconcile call.
pub struct Ctx {
    pub(crate) owned: Vec<DynamicObject>,
    pub(crate) finalizing: bool,
    pub(crate) now: Time,
    pub(crate) host: Box<dyn Host>,
}

impl Ctx {
    /// A context; used by the export macro and by hosts that run a reconciler
    /// natively. Tests use [`FakeCtx`](crate::testing::FakeCtx) instead.
    pub fn new(
        owned: Vec<DynamicObject>,
        finalizing: bool,
        now: Time,
        host: impl Host + 'static,
    ) -> Self {
        Self {
            owned,
            finalizing,
            now,
            host: Box::new(host),
        }
    }

    /// Every child the object owns (children of all owned kinds), as the
    /// host's cache currently sees them.
    pub fn owned(&self) -> &[DynamicObject] {
        &self.owned
    }

    /// The owned children of one kind.
    pub fn owned_of_kind<'a>(
        &'a self,
        api_version: &'a str,
        kind: &'a str,
    ) -> impl Iterator<Item = &'a DynamicObject> + 'a {
        self.owned
            .iter()
            .filter(move |child| child.is_kind(api_version, kind))
    }

    /// Whether the object is being deleted and still carries this plugin's
    /// finalizer: do the pre-delete work, then answer with
    /// [`Response::remove_finalizer`](crate::Response::remove_finalizer).
    pub fn finalizing(&self) -> bool {
        self.finalizing
    }

    /// The host's clock at the start of this reconcile. Use this rather than a
    /// clock of your own: a reconcile is then a pure function of its inputs.
    pub fn now(&self) -> Time {
        self.now
    }

    /// Records a log line.
    pub fn log(&self, level: LogLevel, message: impl AsRef<str>) {
        self.host.log(level, message.as_ref());
    }

    /// Records a debug line.
    pub fn debug(&self, message: impl AsRef<str>) {
        self.log(LogLevel::Debug, message);
    }

    /// Records an info line.
    pub fn info(&self, message: impl AsRef<str>) {
        self.log(LogLevel::Info, message);
    }

    /// Records a warning.
    pub fn warn(&self, message: impl AsRef<str>) {
        self.log(LogLevel::Warn, message);
    }

    /// Records an error line.
    pub fn error(&self, message: impl AsRef<str>) {
        self.log(LogLevel::Error, message);
    }

    /// One object from the host's cache, if present.
    pub fn get(&self, object: &ObjectRef) -> Result<Option<DynamicObject>, Error> {
        self.host.get(object)
    }

    /// Objects of one kind from the host's cache, optionally in one namespace
    /// and matching a label selector (`"app=web,tier!=db"`; `""` matches
    /// everything).
    pub fn list(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        label_selector: &str,
    ) -> Result<Vec<DynamicObject>, Error> {
        self.host.list(api_version, kind, namespace, label_selector)
    }
}

impl fmt::Debug for Ctx {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ctx")
            .field("owned", &self.owned)
            .field("finalizing", &self.finalizing)
            .field("now", &self.now)
            .finish_non_exhaustive()
    }
}
