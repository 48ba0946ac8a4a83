//! The JSON form of a reconcile, exactly as it crosses the plugin boundary
//! (the WIT `request` and `response` records), and [`reconcile`], which runs a
//! typed [`Reconciler`] on it: parse, call, check, serialise.
//!
//! The export macro uses this for Wasm plugins; a host that runs a
//! reconciler natively can use it too, so both paths behave the same.

use serde::Serialize;
use std::collections::BTreeSet;
use std::time::Duration;

use crate::{
    Ctx, DynamicObject, Error, Event, Host, HttpRequest, HttpResult, Object, Reconciler, Response,
    Time,
};

/// One reconcile request: the whole current object and every child it owns,
/// as JSON text.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RawRequest {
    /// The reconciled object.
    pub object: String,
    /// Every owned child.
    pub owned: Vec<String>,
    /// The object is being deleted and still carries the plugin's finalizer.
    pub finalizing: bool,
    /// The host's clock, milliseconds since the Unix epoch.
    pub now_unix_ms: u64,
    /// Answers to the reads of earlier rounds, by request id.
    pub observations: Vec<(String, HttpResult)>,
    /// Outcomes of the previous reconcile's writes, by request id.
    pub outcomes: Vec<(String, HttpResult)>,
    /// Which round of this reconcile this is.
    pub round: u32,
}

/// The merge patch of `.status`: the new status with each cleared field
/// set to `null` (the status must then serialise as an object).
fn status_patch<Status: Serialize>(
    status: Option<&Status>,
    cleared: &[String],
) -> Result<Option<String>, Error> {
    let failed = |e: serde_json::Error| Error::from(e).context("status");
    match (status, cleared) {
        (None, []) => Ok(None),
        (Some(status), []) => serde_json::to_string(status).map(Some).map_err(failed),
        (status, cleared) => {
            let mut patch = match status {
                Some(status) => serde_json::to_value(status).map_err(failed)?,
                None => serde_json::Value::Object(serde_json::Map::new()),
            };
            let Some(fields) = patch.as_object_mut() else {
                return Err(Error::permanent(
                    "status: a status with cleared fields must be a JSON object",
                ));
            };
            for field in cleared {
                fields.insert(field.clone(), serde_json::Value::Null);
            }
            serde_json::to_string(&patch).map(Some).map_err(failed)
        }
    }
}

/// One reconcile response with children and status as JSON text.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RawResponse {
    /// The full desired set of owned children, or `None` to leave them alone.
    pub children: Option<Vec<String>>,
    /// A JSON merge patch for `.status`.
    pub status: Option<String>,
    /// Events to record on the object.
    pub events: Vec<Event>,
    /// Look at the object again after this many milliseconds.
    pub requeue_after_ms: Option<u64>,
    /// The host may remove the plugin's finalizer.
    pub remove_finalizer: bool,
    /// Reads wanted; if any lacks an answer, the rest is not applied and
    /// the host calls again with the answers.
    pub observe: Vec<HttpRequest>,
    /// Writes wanted, in order.
    pub effects: Vec<HttpRequest>,
}

impl RawResponse {
    /// A response that only asks for reads: the round ends here.
    fn reads(observe: Vec<HttpRequest>) -> Self {
        Self {
            observe,
            ..Self::default()
        }
    }
}

/// Runs `reconciler` on a raw request.
///
/// Errors from parsing are permanent and say what failed (`"spec: missing
/// field `replicas`"`, `"owned child 2: ..."`). A response whose children lack
/// a name or repeat one is refused with a permanent error rather than handed
/// to the host.
///
/// In a Wasm guest the call's own values (the parsed object, the context,
/// the typed response) are left allocated rather than freed: the host runs
/// every call in a fresh instance and discards its memory afterwards.
pub fn reconcile<R: Reconciler + ?Sized>(
    reconciler: &R,
    request: RawRequest,
    host: impl Host + 'static,
) -> Result<RawResponse, Error> {
    let object = Object::<R::Spec, R::Status>::from_json(&request.object)?;
    let owned = request
        .owned
        .iter()
        .enumerate()
        .map(|(i, json)| {
            DynamicObject::from_json(json).map_err(|e| e.context(format!("owned child {i}")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let now = Time::from_unix_ms(i64::try_from(request.now_unix_ms).unwrap_or(i64::MAX));
    let ctx = Ctx::new(owned, request.finalizing, now, host).with_effects(
        request.observations,
        request.outcomes,
        request.round,
    );

    // A read without an answer ends the round whatever the reconcile made
    // of it (returned the error, or carried on without): the host fetches
    // and calls again, so nothing of this call is applied.
    let result = reconciler.reconcile(&object, &ctx);
    let pending = ctx.effects.pending.take();
    if !pending.is_empty() {
        return Ok(RawResponse::reads(pending));
    }
    let Response {
        children,
        status,
        cleared,
        events,
        requeue_after,
        remove_finalizer,
        effects,
        observe,
    } = result?;
    check_ids("effects", &effects)?;
    check_ids("observe", &observe)?;
    let unanswered: Vec<HttpRequest> = observe
        .iter()
        .filter(|r| ctx.observation(&r.id).is_none())
        .cloned()
        .collect();
    if !unanswered.is_empty() {
        return Ok(RawResponse::reads(unanswered));
    }

    let children_json = match &children {
        Some(children) => {
            check_children(children)?;
            Some(children.iter().map(DynamicObject::to_json).collect())
        }
        None => None,
    };
    let status_json = status_patch(status.as_ref(), &cleared)?;
    discard((request.object, request.owned, object, ctx, children, status));
    Ok(RawResponse {
        children: children_json,
        status: status_json,
        events,
        requeue_after_ms: requeue_after.map(millis_rounded_up),
        remove_finalizer,
        observe: Vec::new(),
        effects,
    })
}

/// Ids match answers to requests, so two requests of one list must not
/// share one.
fn check_ids(list: &str, requests: &[HttpRequest]) -> Result<(), Error> {
    let mut seen = BTreeSet::new();
    for request in requests {
        if !seen.insert(request.id.as_str()) {
            return Err(Error::permanent(format!(
                "{list} contains the request id {:?} twice",
                request.id
            )));
        }
    }
    Ok(())
}

/// Drops what a reconcile parsed and built, except in a Wasm plugin. There
/// each call runs in a fresh instance whose memory is reset as a whole once
/// the call returns, so handing every allocation back to the allocator
/// first is work for nothing, and skipping it saves time on every
/// reconcile in Wasm (docs/benchmarks/plugins.md#branch-plugin-perf-parse-once-build-maps-in-bulk). Only the values of one call
/// are leaked, and only into memory that is about to be discarded.
fn discard<T>(value: T) {
    if cfg!(target_arch = "wasm32") {
        std::mem::forget(value);
    }
}

/// Every desired child needs a name, and no two may share kind and name.
fn check_children(children: &[DynamicObject]) -> Result<(), Error> {
    let mut seen = BTreeSet::new();
    for child in children {
        if child.name().is_empty() {
            return Err(Error::permanent(format!(
                "desired child of kind {} has no metadata.name",
                child.kind()
            )));
        }
        if !seen.insert((child.api_version(), child.kind(), child.name())) {
            return Err(Error::permanent(format!(
                "desired children contain {} {} twice",
                child.kind(),
                child.name()
            )));
        }
    }
    Ok(())
}

fn millis_rounded_up(delay: Duration) -> u64 {
    let ms = delay.as_millis() + u128::from(!delay.subsec_nanos().is_multiple_of(1_000_000));
    u64::try_from(ms).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::FakeCtx;
    use crate::{KindRef, LogLevel, Manifest, ObjectRef, Response};
    use serde::{Deserialize, Serialize};
    use serde_json::json;

    /// A host that only records logs, for the `impl Host` parameter.
    struct Quiet;
    impl Host for Quiet {
        fn log(&self, _: LogLevel, _: &str) {}
        fn get(&self, _: &ObjectRef) -> Result<Option<DynamicObject>, Error> {
            Ok(None)
        }
        fn list(
            &self,
            _: &str,
            _: &str,
            _: Option<&str>,
            _: &str,
        ) -> Result<Vec<DynamicObject>, Error> {
            Ok(Vec::new())
        }
    }

    #[derive(Deserialize)]
    struct Spec {
        children: Vec<String>,
    }

    #[derive(Serialize, Deserialize, Default, Debug, PartialEq)]
    #[serde(rename_all = "camelCase")]
    struct Status {
        seen: usize,
        now: Option<Time>,
    }

    /// Desires one `Child` per `spec.children` name and reports what it saw.
    #[derive(Default)]
    struct Parent;

    impl Reconciler for Parent {
        type Spec = Spec;
        type Status = Status;

        fn manifest(&self) -> Manifest {
            Manifest::new("parent", "1.0.0", KindRef::new("v1", "Parent"))
        }

        fn reconcile(
            &self,
            object: &Object<Spec, Status>,
            ctx: &Ctx,
        ) -> Result<Response<Status>, Error> {
            let children = object
                .spec
                .children
                .iter()
                .map(|name| DynamicObject::new("v1", "Child", name))
                .collect();
            let status = Status {
                seen: ctx.owned_objects().len(),
                now: Some(ctx.now()),
            };
            let response = Response::new().children(children).status(status);
            Ok(if ctx.finalizing() {
                response.remove_finalizer()
            } else {
                response
            })
        }
    }

    fn request(spec: serde_json::Value) -> RawRequest {
        let object =
            json!({"apiVersion": "v1", "kind": "Parent", "metadata": {"name": "p"}, "spec": spec});
        RawRequest {
            object: object.to_string(),
            owned: vec![
                json!({"apiVersion": "v1", "kind": "Child", "metadata": {"name": "a"}}).to_string(),
            ],
            finalizing: true,
            now_unix_ms: 1_500,
            ..RawRequest::default()
        }
    }

    #[test]
    fn a_raw_request_becomes_a_raw_response() {
        let response = reconcile(&Parent, request(json!({"children": ["a", "b"]})), Quiet).unwrap();
        let children: Vec<serde_json::Value> = response
            .children
            .unwrap()
            .iter()
            .map(|c| serde_json::from_str(c).unwrap())
            .collect();
        assert_eq!(
            children[1],
            json!({"apiVersion": "v1", "kind": "Child", "metadata": {"name": "b"}})
        );
        let status: serde_json::Value = serde_json::from_str(&response.status.unwrap()).unwrap();
        assert_eq!(
            status,
            json!({"seen": 1, "now": "1970-01-01T00:00:01.500Z"})
        );
        assert!(response.remove_finalizer);
        assert_eq!(response.requeue_after_ms, None);
    }

    #[test]
    fn cleared_status_fields_are_nulls_in_the_merge_patch() {
        let status = Status { seen: 2, now: None };
        let patch = status_patch(Some(&status), &["now".into(), "old".into()])
            .unwrap()
            .unwrap();
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&patch).unwrap(),
            json!({"seen": 2, "now": null, "old": null})
        );
        let only_cleared = status_patch::<Status>(None, &["old".into()]).unwrap();
        assert_eq!(only_cleared.as_deref(), Some(r#"{"old":null}"#));
        assert_eq!(status_patch::<Status>(None, &[]).unwrap(), None);
        let err = status_patch(Some(&7), &["old".into()]).unwrap_err();
        assert!(
            err.is_permanent() && err.message().contains("JSON object"),
            "{err}"
        );
    }

    #[test]
    fn a_spec_that_does_not_parse_is_a_permanent_error_naming_the_field() {
        let err = reconcile(&Parent, request(json!({})), Quiet).unwrap_err();
        assert_eq!(err, Error::permanent("spec: missing field `children`"));
        let mut bad = request(json!({"children": []}));
        bad.owned.push("[]".into());
        let err = reconcile(&Parent, bad, Quiet).unwrap_err();
        assert_eq!(
            err,
            Error::permanent("owned child 1: object: expected a JSON object")
        );
    }

    #[test]
    fn duplicate_or_unnamed_children_are_refused() {
        let err = reconcile(&Parent, request(json!({"children": ["a", "a"]})), Quiet).unwrap_err();
        assert_eq!(
            err,
            Error::permanent("desired children contain Child a twice")
        );
        let err = reconcile(&Parent, request(json!({"children": [""]})), Quiet).unwrap_err();
        assert!(err.message().contains("no metadata.name"), "{err}");
    }

    #[test]
    fn requeue_delays_round_up_to_whole_milliseconds() {
        assert_eq!(millis_rounded_up(Duration::from_micros(1)), 1);
        assert_eq!(millis_rounded_up(Duration::from_millis(1500)), 1500);
        assert_eq!(millis_rounded_up(Duration::ZERO), 0);
        assert_eq!(millis_rounded_up(Duration::MAX), u64::MAX);
    }

    #[test]
    fn the_fake_ctx_and_the_wire_path_agree() {
        // The same reconcile through FakeCtx (what plugin tests use) gives
        // the same status as through the wire.
        let object = Object::from_json(&request(json!({"children": []})).object).unwrap();
        let ctx = FakeCtx::new().with_now_unix_ms(1_500);
        let status = Parent.reconcile(&object, &ctx).unwrap().status.unwrap();
        assert_eq!(
            status,
            Status {
                seen: 0,
                now: Some(Time::from_unix_ms(1_500))
            }
        );
    }

    /// Reads a zone, then asks to write a record unless it is there.
    #[derive(Default)]
    struct Provider;

    impl Reconciler for Provider {
        type Spec = serde_json::Value;
        type Status = serde_json::Value;

        fn manifest(&self) -> Manifest {
            Manifest::new("provider", "1.0.0", KindRef::new("v1", "Parent"))
        }

        fn reconcile(
            &self,
            _: &Object<Self::Spec, Self::Status>,
            ctx: &Ctx,
        ) -> Result<Response<Self::Status>, Error> {
            let zone = ctx.fetch(&crate::HttpRequest::get("http://dns/zone"))?;
            let mut response = Response::new().status(json!({"zone": zone.status}));
            if zone.status == 404 {
                response = response.effect(crate::HttpRequest::put("http://dns/zone").id("create"));
            }
            Ok(response)
        }
    }

    #[test]
    fn a_read_without_an_answer_ends_the_round_and_the_answer_finishes_it() {
        let first = reconcile(&Provider, request(json!({})), Quiet).unwrap();
        assert_eq!(first.observe.len(), 1, "{first:?}");
        assert_eq!(first.observe[0].id, "GET http://dns/zone");
        assert_eq!((first.status, first.effects.len()), (None, 0));

        let mut second = request(json!({}));
        second.round = 1;
        let answer = crate::HttpResponse {
            status: 404,
            headers: vec![],
            body: vec![],
        };
        second.observations = vec![("GET http://dns/zone".into(), Ok(answer))];
        let second = reconcile(&Provider, second, Quiet).unwrap();
        assert!(second.observe.is_empty(), "{second:?}");
        assert_eq!(second.status.as_deref(), Some(r#"{"zone":404}"#));
        assert_eq!(second.effects[0].id, "create");
        assert_eq!(second.effects[0].method, "PUT");
    }

    #[test]
    fn requests_sharing_an_id_are_refused() {
        #[derive(Default)]
        struct Twice;
        impl Reconciler for Twice {
            type Spec = serde_json::Value;
            type Status = serde_json::Value;
            fn manifest(&self) -> Manifest {
                Manifest::new("twice", "1.0.0", KindRef::new("v1", "Parent"))
            }
            fn reconcile(
                &self,
                _: &Object<Self::Spec, Self::Status>,
                _: &Ctx,
            ) -> Result<Response<Self::Status>, Error> {
                let write = crate::HttpRequest::delete("http://dns/a");
                Ok(Response::new().effect(write.clone()).effect(write))
            }
        }
        let err = reconcile(&Twice, request(json!({})), Quiet).unwrap_err();
        assert!(err.message().contains("twice"), "{err}");
    }
}
