//! [`export_reconciler!`](crate::export_reconciler): turns a [`Reconciler`]
//! into the component's `manifest` and `reconcile` exports.
//!
//! Only the conversion between the generated WIT types and [`crate::wire`]
//! lives here (compiled for Wasm only); the logic is in `wire`, which is
//! tested natively.

/// Exports a [`Reconciler`](crate::Reconciler) as the plugin's Wasm
/// component. Call it once, at the top level of the plugin's `lib.rs`:
///
/// ```
/// # use setpoint_plugin_sdk::*;
/// #[derive(Default)]
/// struct Noop;
/// impl Reconciler for Noop {
///     type Spec = serde_json::Value;
///     type Status = serde_json::Value;
///     fn manifest(&self) -> Manifest {
///         Manifest::new("noop", "0.1.0", KindRef::new("demo.setpoint.dev/v1", "Noop"))
///     }
///     fn reconcile(&self, _: &Object<Self::Spec, Self::Status>, _: &Ctx) -> Result<Response<Self::Status>, Error> {
///         Ok(Response::new())
///     }
/// }
/// export_reconciler!(Noop);
/// # fn main() {}
/// ```
///
/// The type must implement [`Reconciler`](crate::Reconciler) and `Default`
/// (each call gets a fresh value, as each call gets a fresh Wasm instance).
/// On other targets the macro only checks those bounds, so the plugin crate
/// still builds and unit-tests natively.
#[macro_export]
macro_rules! export_reconciler {
    ($reconciler:ty) => {
        #[cfg(target_arch = "wasm32")]
        const _: () = {
            struct __SetpointReconciler;

            impl $crate::__bindings::Guest for __SetpointReconciler {
                fn manifest() -> $crate::__export::WitManifest {
                    $crate::__export::manifest::<$reconciler>()
                }

                fn reconcile(
                    request: $crate::__export::WitRequest,
                ) -> ::core::result::Result<$crate::__export::WitResponse, $crate::__export::WitError> {
                    $crate::__export::reconcile::<$reconciler>(request)
                }
            }

            $crate::__bindings::export!(__SetpointReconciler with_types_in $crate::__bindings);
        };

        #[cfg(not(target_arch = "wasm32"))]
        const _: () = {
            const fn must_implement_reconciler_and_default<R: $crate::Reconciler + ::core::default::Default>() {}
            must_implement_reconciler_and_default::<$reconciler>()
        };
    };
}

#[cfg(target_arch = "wasm32")]
#[doc(hidden)]
pub mod __export {
    use crate::__bindings::setpoint::plugin::host as wit_host;
    use crate::__bindings::setpoint::plugin::types as wit;
    use crate::wire::{self, RawRequest};
    use crate::{
        DynamicObject, Error, Host, HttpError, HttpErrorKind, HttpRequest, HttpResponse,
        HttpResult, KindRef, LogLevel, ObjectRef, Reconciler, SecretTarget, Severity,
    };

    pub use wit::{
        Manifest as WitManifest, ReconcileError as WitError, Request as WitRequest,
        Response as WitResponse,
    };

    /// Memory grown for the `manifest` call; a manifest that needs more
    /// takes the rest from the usual allocator.
    #[cfg(feature = "allocator")]
    const MANIFEST_MEMORY: usize = 256 << 10;

    fn kind(kind: KindRef) -> wit::KindRef {
        wit::KindRef {
            api_version: kind.api_version,
            kind: kind.kind,
        }
    }

    /// Without WASI (`wasm32-unknown-unknown`) a panic's message would go
    /// nowhere: std has no stderr there. Send it to the host's log instead,
    /// which keeps a call's last error line with the trap it ends in.
    #[cfg(target_os = "unknown")]
    fn report_panics_to_the_host() {
        std::panic::set_hook(Box::new(|info| {
            wit_host::log(wit_host::Level::Error, &info.to_string());
        }));
    }

    /// With WASI, std prints a panic's message to stderr, which the host
    /// keeps.
    #[cfg(not(target_os = "unknown"))]
    fn report_panics_to_the_host() {}

    /// The `manifest` export.
    pub fn manifest<R: Reconciler + Default>() -> WitManifest {
        // Keep the manifest's allocations out of the memory reconciles use
        // (see `Arena::use_fresh_memory`).
        #[cfg(feature = "allocator")]
        crate::ALLOCATOR.use_fresh_memory(MANIFEST_MEMORY);
        report_panics_to_the_host();
        let manifest = R::default().manifest();
        WitManifest {
            name: manifest.name,
            version: manifest.version,
            reconciles: kind(manifest.reconciles),
            owns: manifest.owns.into_iter().map(kind).collect(),
            definitions: manifest.definitions.iter().map(|d| d.to_string()).collect(),
            finalizer: manifest.finalizer,
            destinations: manifest.destinations,
            secrets: manifest.secrets,
        }
    }

    fn from_wit_result(r: wit::HttpResult) -> (String, HttpResult) {
        let result = match r.answer {
            Ok(response) => Ok(HttpResponse {
                status: response.status,
                headers: response.headers,
                body: response.body,
            }),
            Err(error) => Err(HttpError {
                kind: match error.kind {
                    wit::HttpErrorKind::Refused => HttpErrorKind::Refused,
                    wit::HttpErrorKind::Throttled => HttpErrorKind::Throttled,
                    wit::HttpErrorKind::Connect => HttpErrorKind::Connect,
                    wit::HttpErrorKind::Timeout => HttpErrorKind::Timeout,
                    wit::HttpErrorKind::TooLarge => HttpErrorKind::TooLarge,
                    wit::HttpErrorKind::Transport => HttpErrorKind::Transport,
                },
                message: error.message,
            }),
        };
        (r.id, result)
    }

    fn to_wit_request(r: HttpRequest) -> wit::HttpRequest {
        wit::HttpRequest {
            id: r.id,
            method: r.method,
            url: r.url,
            headers: r.headers,
            body: r.body,
            secrets: r
                .secrets
                .into_iter()
                .map(|s| wit::SecretUse {
                    secret: wit::SecretKeyRef {
                        name: s.secret.name,
                        key: s.secret.key,
                    },
                    target: match s.target {
                        SecretTarget::Header { name, template } => {
                            wit::SecretTarget::Header(wit::SecretHeader { name, template })
                        }
                        SecretTarget::Query(name) => wit::SecretTarget::Query(name),
                        SecretTarget::BodyPointer(p) => wit::SecretTarget::BodyPointer(p),
                    },
                })
                .collect(),
            timeout_ms: r.timeout_ms,
        }
    }

    /// The `reconcile` export.
    pub fn reconcile<R: Reconciler + Default>(
        request: WitRequest,
    ) -> Result<WitResponse, WitError> {
        report_panics_to_the_host();
        let request = RawRequest {
            object: request.object,
            owned: request.owned,
            finalizing: request.finalizing,
            now_unix_ms: request.now_unix_ms,
            observations: request
                .observations
                .into_iter()
                .map(from_wit_result)
                .collect(),
            outcomes: request.outcomes.into_iter().map(from_wit_result).collect(),
            round: request.round,
        };
        match wire::reconcile(&R::default(), request, WasmHost) {
            Ok(response) => Ok(WitResponse {
                children: response.children,
                status: response.status,
                events: response
                    .events
                    .into_iter()
                    .map(|event| wit::Event {
                        severity: match event.severity {
                            Severity::Normal => wit::Severity::Normal,
                            Severity::Warning => wit::Severity::Warning,
                        },
                        reason: event.reason,
                        message: event.message,
                    })
                    .collect(),
                requeue_after_ms: response.requeue_after_ms,
                remove_finalizer: response.remove_finalizer,
                observe: response.observe.into_iter().map(to_wit_request).collect(),
                effects: response.effects.into_iter().map(to_wit_request).collect(),
            }),
            Err(Error::Transient(message)) => Err(WitError::Transient(message)),
            Err(Error::Permanent(message)) => Err(WitError::Permanent(message)),
        }
    }

    /// [`Host`] over the component's imports.
    struct WasmHost;

    impl Host for WasmHost {
        fn log(&self, level: LogLevel, message: &str) {
            let level = match level {
                LogLevel::Trace => wit_host::Level::Trace,
                LogLevel::Debug => wit_host::Level::Debug,
                LogLevel::Info => wit_host::Level::Info,
                LogLevel::Warn => wit_host::Level::Warn,
                LogLevel::Error => wit_host::Level::Error,
            };
            wit_host::log(level, message);
        }

        fn get(&self, object: &ObjectRef) -> Result<Option<DynamicObject>, Error> {
            let reference = wit::ObjectRef {
                api_version: object.api_version.clone(),
                kind: object.kind.clone(),
                namespace: object.namespace.clone(),
                name: object.name.clone(),
            };
            wit_host::get_object(&reference)
                .map(|json| DynamicObject::from_json(&json))
                .transpose()
                .map_err(|e| e.context(format!("get {} {}", object.kind, object.name)))
        }

        fn list(
            &self,
            api_version: &str,
            kind: &str,
            namespace: Option<&str>,
            label_selector: &str,
        ) -> Result<Vec<DynamicObject>, Error> {
            let items = wit_host::list_objects(api_version, kind, namespace, label_selector)
                .map_err(|message| Error::transient(format!("list {kind}: {message}")))?;
            items
                .iter()
                .map(|json| DynamicObject::from_json(json))
                .collect::<Result<_, _>>()
                .map_err(|e| e.context(format!("list {kind}")))
        }
    }
}
