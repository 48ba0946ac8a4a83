//! [`Ctx`]: everything a reconcile may know besides the object itself: the
//! children it owns, the host's clock, and read-only host services behind the
//! [`Host`] trait (real imports in Wasm, a fake in unit tests, native calls
//! when the host runs a reconciler in-process).

use std::cell::RefCell;
use std::fmt;

use crate::http::{HttpRequest, HttpResult};
use crate::{DynamicObject, Error, ObjectOf, ObjectRef, Resource, Time};

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
    pub(crate) effects: Effects,
}

/// What a reconcile knows of the outside world: the answers to its reads
/// so far, the outcomes of the previous reconcile's writes, and the reads
/// it asked for in this round that have no answer yet.
#[derive(Debug, Default)]
pub(crate) struct Effects {
    pub(crate) observations: Vec<(String, HttpResult)>,
    pub(crate) outcomes: Vec<(String, HttpResult)>,
    pub(crate) round: u32,
    /// Reads asked for without an answer: they end the round.
    pub(crate) pending: RefCell<Vec<HttpRequest>>,
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
            effects: Effects::default(),
        }
    }

    /// The same context with the answers of earlier rounds and the
    /// outcomes of the previous reconcile's writes; used by the export
    /// macro and by hosts that run a reconciler natively.
    pub fn with_effects(
        mut self,
        observations: Vec<(String, HttpResult)>,
        outcomes: Vec<(String, HttpResult)>,
        round: u32,
    ) -> Self {
        self.effects.observations = observations;
        self.effects.outcomes = outcomes;
        self.effects.round = round;
        self
    }

    /// Every child the object owns (children of all owned kinds), as the
    /// host's cache currently sees them, untyped.
    pub fn owned_objects(&self) -> &[DynamicObject] {
        &self.owned
    }

    /// The owned children of kind `R`, parsed into its types:
    ///
    /// ```
    /// # use serde::Deserialize;
    /// # use setpoint_plugin_sdk::{Ctx, Error, KindRef, Resource};
    /// # #[derive(Deserialize)] struct PodSpec {}
    /// # #[derive(Deserialize, Default)] struct PodStatus { #[serde(default)] phase: String }
    /// # struct Pod;
    /// # impl Resource for Pod {
    /// #     type Spec = PodSpec; type Status = PodStatus;
    /// #     fn kind() -> KindRef { KindRef::new("demo.setpoint.dev/v1", "Pod") }
    /// # }
    /// fn running(ctx: &Ctx) -> Result<usize, Error> {
    ///     let pods = ctx.owned::<Pod>()?;
    ///     Ok(pods.iter().filter(|pod| pod.status.phase == "Running").count())
    /// }
    /// ```
    ///
    /// A child that does not parse is a permanent error naming it and the
    /// field, e.g. `Pod default/web-0: spec.startupDelayMs: invalid type:
    /// string "soon", expected u64`.
    pub fn owned<R: Resource>(&self) -> Result<Vec<ObjectOf<R>>, Error> {
        let kind = R::kind();
        self.owned_of_kind(&kind.api_version, &kind.kind)
            .map(|child| {
                child.parse().map_err(|err: Error| {
                    let namespace = child
                        .namespace()
                        .map(|ns| format!("{ns}/"))
                        .unwrap_or_default();
                    err.context(format_args!("{} {namespace}{}", kind.kind, child.name()))
                })
            })
            .collect()
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

/// Reading from external systems. A reconcile stays a pure function of
/// its request: the host performs the reads between calls and hands the
/// answers to the next call (a *round*), so reading looks like a direct
/// call:
///
/// ```
/// # use setpoint_plugin_sdk::{Ctx, Error, HttpRequest};
/// fn zone_serial(ctx: &Ctx) -> Result<u64, Error> {
///     let zone = ctx.fetch(&HttpRequest::get("http://127.0.0.1:8081/zones/example.org."))?;
///     let zone: serde_json::Value = zone.error_for_status()?.json()?;
///     Ok(zone["serial"].as_u64().unwrap_or(0))
/// }
/// ```
///
/// The first time, `fetch` has no answer: it records the read and returns
/// an error; `?` ends the reconcile, and the host (seeing the read wanted)
/// throws that response away, performs the read and calls again with the
/// answer, which `fetch` then returns. Reads must not change anything.
impl Ctx {
    /// The answer to `request` (matched by its id): the server's response,
    /// whatever its status, or an [`Error`] when it got none (refused,
    /// timed out, ...; see [`HttpError`](crate::HttpError)'s conversion) or
    /// when it is not there yet (then the round ends and the host fetches
    /// it; just pass the error on with `?`).
    pub fn fetch(&self, request: &HttpRequest) -> Result<crate::HttpResponse, Error> {
        self.fetch_result(request)?.map_err(Error::from)
    }

    /// Like [`Ctx::fetch`], but hands a failed request's
    /// [`HttpError`](crate::HttpError) to the caller instead of turning
    /// it into an [`Error`]; only "not there yet" is an `Err`.
    pub fn fetch_result(&self, request: &HttpRequest) -> Result<HttpResult, Error> {
        if let Some(answer) = self.observation(&request.id) {
            return Ok(answer.clone());
        }
        let mut pending = self.effects.pending.borrow_mut();
        if !pending.iter().any(|p| p.id == request.id) {
            pending.push(request.clone());
        }
        Err(Error::transient(format!(
            "waiting for the answer to {} (the host fetches it)",
            request.id
        )))
    }

    /// Asks for several reads at once (one round for all of them) and
    /// returns their answers in order once all are there.
    pub fn fetch_all(&self, requests: &[HttpRequest]) -> Result<Vec<HttpResult>, Error> {
        let answers: Vec<_> = requests.iter().map(|r| self.fetch_result(r)).collect();
        answers.into_iter().collect()
    }

    /// The answer to the read with this id, if the host has it.
    pub fn observation(&self, id: &str) -> Option<&HttpResult> {
        self.effects
            .observations
            .iter()
            .find(|(i, _)| i == id)
            .map(|(_, r)| r)
    }

    /// The outcomes of the writes ([`Response::effect`](crate::Response::effect))
    /// the previous reconcile of this object asked for, in the order the host
    /// performed them, by id.
    pub fn outcomes(&self) -> &[(String, HttpResult)] {
        &self.effects.outcomes
    }

    /// The outcome of the previous reconcile's write with this id.
    pub fn outcome(&self, id: &str) -> Option<&HttpResult> {
        self.effects
            .outcomes
            .iter()
            .find(|(i, _)| i == id)
            .map(|(_, r)| r)
    }

    /// Which round of this reconcile this is (0 for the first call).
    pub fn round(&self) -> u32 {
        self.effects.round
    }

    /// The reads asked for in this round that have no answer yet.
    pub fn pending_reads(&self) -> Vec<HttpRequest> {
        self.effects.pending.borrow().clone()
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
