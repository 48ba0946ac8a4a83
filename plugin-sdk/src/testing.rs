//! Unit-testing reconcilers natively, without Wasm: [`FakeCtx`] is a [`Ctx`]
//! with chosen children, clock and cache contents that records log lines.
//!
//! ```
//! use setpoint_plugin_sdk::testing::FakeCtx;
//! use setpoint_plugin_sdk::{DynamicObject, LogLevel, ObjectRef, KindRef};
//!
//! let pod = DynamicObject::new("demo.setpoint.dev/v1", "Pod", "web-0");
//! let ctx = FakeCtx::new().with_now_unix_ms(1_000).with_object(pod.clone());
//! // `&FakeCtx` is a `&Ctx`: pass it straight to `reconcile`.
//! let kind = KindRef::new("demo.setpoint.dev/v1", "Pod");
//! assert_eq!(ctx.get(&ObjectRef::new(&kind, None, "web-0")).unwrap(), Some(pod));
//! ctx.info("hello");
//! assert_eq!(ctx.logs(), [(LogLevel::Info, "hello".to_string())]);
//! ```

use std::cell::RefCell;
use std::ops::Deref;
use std::rc::Rc;

use crate::{Ctx, DynamicObject, Error, Host, HttpResult, LogLevel, ObjectRef, Time};

/// A [`Ctx`] for tests. Build it with the `with_*` methods, pass `&fake`
/// wherever a `&Ctx` is expected (it derefs to one), then inspect
/// [`FakeCtx::logs`].
///
/// Defaults: no owned children, not finalizing, `now` at the Unix epoch, an
/// empty cache.
#[derive(Debug)]
pub struct FakeCtx {
    ctx: Ctx,
    state: Rc<RefCell<FakeState>>,
}

#[derive(Debug, Default)]
struct FakeState {
    objects: Vec<DynamicObject>,
    logs: Vec<(LogLevel, String)>,
}

impl FakeCtx {
    /// An empty fake context.
    pub fn new() -> Self {
        let state = Rc::new(RefCell::new(FakeState::default()));
        let ctx = Ctx::new(
            Vec::new(),
            false,
            Time::from_unix_ms(0),
            FakeHost(state.clone()),
        );
        Self { ctx, state }
    }

    /// Sets the owned children.
    pub fn with_owned(mut self, owned: Vec<DynamicObject>) -> Self {
        self.ctx.owned = owned;
        self
    }

    /// Sets whether the object is being finalized.
    pub fn with_finalizing(mut self, finalizing: bool) -> Self {
        self.ctx.finalizing = finalizing;
        self
    }

    /// Sets the host's clock.
    pub fn with_now(mut self, now: Time) -> Self {
        self.ctx.now = now;
        self
    }

    /// Sets the host's clock in milliseconds since the Unix epoch.
    pub fn with_now_unix_ms(self, unix_ms: i64) -> Self {
        self.with_now(Time::from_unix_ms(unix_ms))
    }

    /// Puts an object into the fake cache that [`Ctx::get`] and
    /// [`Ctx::list`] read.
    pub fn with_object(self, object: DynamicObject) -> Self {
        self.state.borrow_mut().objects.push(object);
        self
    }

    /// Gives the read with this id an answer, as if the host had fetched
    /// it in an earlier round ([`Ctx::fetch`] returns it).
    pub fn with_observation(mut self, id: impl Into<String>, answer: HttpResult) -> Self {
        self.ctx.effects.observations.push((id.into(), answer));
        self
    }

    /// Records the outcome of a write of the previous reconcile
    /// ([`Ctx::outcomes`]).
    pub fn with_outcome(mut self, id: impl Into<String>, outcome: HttpResult) -> Self {
        self.ctx.effects.outcomes.push((id.into(), outcome));
        self
    }

    /// Sets the round number ([`Ctx::round`]).
    pub fn with_round(mut self, round: u32) -> Self {
        self.ctx.effects.round = round;
        self
    }

    /// The log lines recorded so far.
    pub fn logs(&self) -> Vec<(LogLevel, String)> {
        self.state.borrow().logs.clone()
    }
}

impl Default for FakeCtx {
    fn default() -> Self {
        Self::new()
    }
}

impl Deref for FakeCtx {
    type Target = Ctx;
    fn deref(&self) -> &Ctx {
        &self.ctx
    }
}

#[derive(Debug)]
struct FakeHost(Rc<RefCell<FakeState>>);

impl Host for FakeHost {
    fn log(&self, level: LogLevel, message: &str) {
        self.0.borrow_mut().logs.push((level, message.to_owned()));
    }

    fn get(&self, object: &ObjectRef) -> Result<Option<DynamicObject>, Error> {
        let state = self.0.borrow();
        let found = state.objects.iter().find(|o| {
            o.is_kind(&object.api_version, &object.kind)
                && o.namespace() == object.namespace.as_deref()
                && o.name() == object.name
        });
        Ok(found.cloned())
    }

    fn list(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        label_selector: &str,
    ) -> Result<Vec<DynamicObject>, Error> {
        let state = self.0.borrow();
        let mut found = Vec::new();
        for object in &state.objects {
            let in_namespace = namespace.is_none() || object.namespace() == namespace;
            if object.is_kind(api_version, kind)
                && in_namespace
                && selector_matches(label_selector, object)?
            {
                found.push(object.clone());
            }
        }
        Ok(found)
    }
}

/// Equality-based label selectors: `k=v`, `k==v`, `k!=v`, `k`, `!k`, joined
/// by commas. Set-based ones (`in`, `notin`) are refused.
fn selector_matches(selector: &str, object: &DynamicObject) -> Result<bool, Error> {
    let mut matches = true;
    for term in selector.split(',').map(str::trim).filter(|t| !t.is_empty()) {
        let term_matches = if let Some((key, value)) = term.split_once("!=") {
            object.label(key.trim()) != Some(value.trim())
        } else if let Some((key, value)) = term.split_once('=') {
            let value = value.strip_prefix('=').unwrap_or(value);
            object.label(key.trim()) == Some(value.trim())
        } else if let Some(key) = term.strip_prefix('!') {
            object.label(key.trim()).is_none()
        } else if term.contains(char::is_whitespace) || term.contains('(') {
            return Err(Error::permanent(format!(
                "unsupported label selector term {term:?}"
            )));
        } else {
            object.label(term).is_some()
        };
        matches &= term_matches;
    }
    Ok(matches)
}

/// Where two CustomResourceDefinitions differ in what they mean: their
/// JSON with descriptions left out and `required` lists sorted, compared
/// member by member; each difference is a JSON pointer with both values.
/// Empty when they validate, default and print alike.
pub fn definition_differences(a: &serde_json::Value, b: &serde_json::Value) -> Vec<String> {
    fn normalise(value: &serde_json::Value) -> serde_json::Value {
        use serde_json::Value;
        match value {
            Value::Object(members) => Value::Object(
                members
                    .iter()
                    .filter(|(key, value)| !(*key == "description" && value.is_string()))
                    .map(|(key, value)| {
                        let mut value = normalise(value);
                        if key == "required"
                            && let Value::Array(names) = &mut value
                        {
                            names.sort_by_key(ToString::to_string);
                        }
                        (key.clone(), value)
                    })
                    .collect(),
            ),
            Value::Array(items) => Value::Array(items.iter().map(normalise).collect()),
            other => other.clone(),
        }
    }
    fn walk(at: &str, a: &serde_json::Value, b: &serde_json::Value, out: &mut Vec<String>) {
        use serde_json::Value;
        match (a, b) {
            (Value::Object(x), Value::Object(y)) => {
                let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
                for key in keys {
                    let null = Value::Null;
                    let here = format!("{at}/{key}");
                    walk(
                        &here,
                        x.get(key).unwrap_or(&null),
                        y.get(key).unwrap_or(&null),
                        out,
                    );
                }
            }
            (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
                for (i, (x, y)) in x.iter().zip(y).enumerate() {
                    walk(&format!("{at}/{i}"), x, y, out);
                }
            }
            (x, y) if x != y => out.push(format!("{at}: {x} != {y}")),
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk("", &normalise(a), &normalise(b), &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::KindRef;

    fn pod(name: &str, namespace: &str, labels: &[(&str, &str)]) -> DynamicObject {
        let mut pod = DynamicObject::new("demo.setpoint.dev/v1", "Pod", name);
        for (k, v) in labels {
            pod = pod.with_label(*k, *v);
        }
        let mut value = pod.into_value();
        value["metadata"]["namespace"] = namespace.into();
        DynamicObject::from_value(value).unwrap()
    }

    #[test]
    fn get_finds_by_kind_namespace_and_name() {
        let ctx = FakeCtx::new()
            .with_object(pod("a", "ns1", &[]))
            .with_object(pod("a", "ns2", &[]));
        let kind = KindRef::new("demo.setpoint.dev/v1", "Pod");
        let found = ctx
            .get(&ObjectRef::new(&kind, Some("ns2"), "a"))
            .unwrap()
            .unwrap();
        assert_eq!(found.namespace(), Some("ns2"));
        assert_eq!(
            ctx.get(&ObjectRef::new(&kind, Some("ns3"), "a")).unwrap(),
            None
        );
        let other = KindRef::new("demo.setpoint.dev/v1", "ReplicaSet");
        assert_eq!(
            ctx.get(&ObjectRef::new(&other, Some("ns1"), "a")).unwrap(),
            None
        );
    }

    #[test]
    fn list_filters_by_namespace_and_labels() {
        let ctx = FakeCtx::new()
            .with_object(pod("a", "ns", &[("app", "web"), ("tier", "front")]))
            .with_object(pod("b", "ns", &[("app", "web")]))
            .with_object(pod("c", "other", &[("app", "db")]));
        let names = |namespace: Option<&str>, selector: &str| -> Vec<String> {
            let list = ctx
                .list("demo.setpoint.dev/v1", "Pod", namespace, selector)
                .unwrap();
            list.iter().map(|o| o.name().to_owned()).collect()
        };
        assert_eq!(names(None, ""), ["a", "b", "c"]);
        assert_eq!(names(Some("ns"), ""), ["a", "b"]);
        assert_eq!(names(None, "app=web"), ["a", "b"]);
        assert_eq!(names(None, "app==web, tier!=front"), ["b"]);
        assert_eq!(names(None, "tier"), ["a"]);
        assert_eq!(names(None, "!tier,app!=db"), ["b"]);
        assert!(
            ctx.list("demo.setpoint.dev/v1", "Pod", None, "app in (web)")
                .is_err()
        );
    }

    #[test]
    fn builder_sets_what_ctx_reports() {
        let child = pod("a", "ns", &[]);
        let ctx = FakeCtx::new()
            .with_owned(vec![child.clone()])
            .with_finalizing(true)
            .with_now_unix_ms(5);
        assert_eq!(ctx.owned_objects(), [child]);
        assert_eq!(ctx.owned_of_kind("demo.setpoint.dev/v1", "Pod").count(), 1);
        assert_eq!(
            ctx.owned_of_kind("demo.setpoint.dev/v1", "Other").count(),
            0
        );
        assert!(ctx.finalizing());
        assert_eq!(ctx.now(), Time::from_unix_ms(5));
        ctx.warn("careful");
        ctx.log(LogLevel::Trace, String::from("fine"));
        assert_eq!(
            ctx.logs(),
            [
                (LogLevel::Warn, "careful".into()),
                (LogLevel::Trace, "fine".into())
            ]
        );
    }

    #[derive(Debug, serde::Deserialize)]
    struct PodSpec {
        #[serde(default)]
        port: u16,
    }

    struct Pod;

    impl crate::Resource for Pod {
        type Spec = PodSpec;
        type Status = serde_json::Value;
        fn kind() -> crate::KindRef {
            crate::KindRef::new("demo.setpoint.dev/v1", "Pod")
        }
    }

    #[test]
    fn owned_children_of_a_kind_are_parsed_into_its_types() {
        let mut with_port = pod("b", "ns", &[]).into_value();
        with_port["spec"] = serde_json::json!({"port": 80});
        let other = DynamicObject::new("demo.setpoint.dev/v1", "Other", "c");
        let ctx = FakeCtx::new().with_owned(vec![
            pod("a", "ns", &[]),
            DynamicObject::from_value(with_port).unwrap(),
            other,
        ]);
        let pods = ctx.owned::<Pod>().unwrap();
        let found: Vec<(&str, u16)> = pods.iter().map(|p| (p.name(), p.spec.port)).collect();
        assert_eq!(found, [("a", 0), ("b", 80)]);
    }

    #[test]
    fn an_owned_child_that_does_not_parse_is_named_in_the_error() {
        let mut bad = pod("web-0", "ns", &[]).into_value();
        bad["spec"] = serde_json::json!({"port": "eighty"});
        let ctx = FakeCtx::new().with_owned(vec![DynamicObject::from_value(bad).unwrap()]);
        let err = ctx.owned::<Pod>().unwrap_err();
        assert!(err.is_permanent());
        assert_eq!(
            err.message(),
            "Pod ns/web-0: spec.port: invalid type: string \"eighty\", expected u16"
        );
    }
}
