//! `stack`, after Stackmate: a `Stack` lists resources, each an object
//! template with `dependsOn`; the stack brings them up in dependency order and
//! tears them down in reverse.
//!
//! # Rules
//!
//! - A resource's object is named `<stack>-<resource>` and is created only
//!   when every resource it depends on exists and is Ready: a ReplicaSet when
//!   `status.readyReplicas` reaches `spec.replicas`, anything else when its
//!   `Ready` condition is `True`. Independent resources come up in parallel.
//!   Once created, a resource is kept even if a dependency stops being Ready.
//! - A dependency on an unknown resource, or a cycle, is a permanent error;
//!   the message names the cycle (`a -> b -> a`), and the host reports it as
//!   `Ready=False` on the stack.
//! - The stack carries the finalizer [`FINALIZER`]. While it is being deleted,
//!   each reconcile keeps every remaining resource except those no other
//!   remaining resource depends on (the leaves of what is left), so the host
//!   deletes resources in reverse dependency order; once none remains, the
//!   finalizer is removed and the stack goes away.

use std::collections::{BTreeMap, BTreeSet};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use setpoint_plugin_sdk::serde_json::{Map, Value, json};
use setpoint_plugin_sdk::{
    Condition, Ctx, Definition, DynamicObject, Error, Event, KindRef, Manifest, Object,
    PrinterColumn, Reconciler, Response, export_reconciler,
};

/// The API version of Stacks and of the kinds a stack may hold.
pub use demo_kinds::API_VERSION;

/// The finalizer that holds a stack until its resources are gone.
pub const FINALIZER: &str = "stack.demo.setpoint.dev/teardown";

/// The Stack kind's definition.
pub fn definition() -> Definition {
    Definition::of::<StackSpec, StackStatus>(KindRef::new(API_VERSION, "Stack"))
        .description("Brings resources up in dependency order and tears them down in reverse.")
        .column(PrinterColumn::string("Ready", ".status.summary"))
}

/// What a Stack asks for.
#[derive(Clone, Debug, PartialEq, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StackSpec {
    /// The resources, in any order.
    pub resources: Vec<Resource>,
}

/// One resource of a stack.
#[derive(Clone, Debug, PartialEq, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Resource {
    /// Its name within the stack.
    pub name: String,
    /// Resources that must be Ready first.
    #[serde(default)]
    pub depends_on: Vec<String>,
    /// The object: `apiVersion`, `kind`, `metadata` (labels, annotations), `spec`.
    pub template: Map<String, Value>,
}

/// What a Stack observed.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default, rename_all = "camelCase")]
pub struct StackStatus {
    /// Each resource's state, in spec order.
    pub resources: Vec<ResourceStatus>,
    /// Ready resources out of all, e.g. `2/3`.
    pub summary: String,
    /// The `metadata.generation` this status was computed from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Ready` once every resource is.
    pub conditions: Vec<Condition>,
}

/// One resource's state.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(default, rename_all = "camelCase")]
pub struct ResourceStatus {
    /// The resource's name.
    pub name: String,
    /// `Waiting` (for dependencies), `Creating` (exists, not Ready) or `Ready`.
    pub state: String,
    /// The dependencies not Ready yet, while waiting.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub waiting_for: Vec<String>,
}

/// The reconciler.
#[derive(Debug, Default)]
pub struct StackReconciler;

impl Reconciler for StackReconciler {
    type Spec = StackSpec;
    type Status = StackStatus;

    fn manifest(&self) -> Manifest {
        let stack = definition();
        Manifest::new(
            env!("CARGO_PKG_NAME"),
            env!("CARGO_PKG_VERSION"),
            stack.kind(),
        )
        .owns(demo_kinds::replicaset::kind())
        .owns(demo_kinds::pod::kind())
        .finalizer(FINALIZER)
        .define(stack)
        .define(demo_kinds::replicaset::definition())
        .define(demo_kinds::pod::definition())
    }

    fn reconcile(
        &self,
        stack: &Object<StackSpec, StackStatus>,
        ctx: &Ctx,
    ) -> Result<Response<StackStatus>, Error> {
        let resources = &stack.spec.resources;
        let by_name: BTreeMap<&str, &Resource> =
            resources.iter().map(|r| (r.name.as_str(), r)).collect();
        let existing: BTreeMap<String, &DynamicObject> = ctx
            .owned_objects()
            .iter()
            .map(|o| (o.name().to_owned(), o))
            .collect();
        let object_name = |r: &str| format!("{}-{r}", stack.name());

        if ctx.finalizing() {
            return Ok(teardown(resources, &existing, &object_name));
        }
        check_graph(resources, &by_name)?;

        let ready = |r: &str| {
            existing
                .get(&object_name(r))
                .is_some_and(|o| !o.is_deleting() && is_ready(o))
        };
        let mut children = Vec::new();
        let mut statuses = Vec::new();
        for resource in resources {
            let name = object_name(&resource.name);
            let waiting_for: Vec<String> = resource
                .depends_on
                .iter()
                .filter(|d| !ready(d))
                .cloned()
                .collect();
            let exists = existing.contains_key(&name);
            if exists || waiting_for.is_empty() {
                // The host records `SuccessfulCreate` when it creates it.
                children.push(child(resource, &name)?);
            }
            let state = if ready(&resource.name) {
                "Ready"
            } else if exists || waiting_for.is_empty() {
                "Creating"
            } else {
                "Waiting"
            };
            statuses.push(ResourceStatus {
                name: resource.name.clone(),
                state: state.to_owned(),
                waiting_for: if state == "Waiting" {
                    waiting_for
                } else {
                    Vec::new()
                },
            });
        }
        let ready_count = statuses.iter().filter(|s| s.state == "Ready").count();
        let all_ready = ready_count == resources.len();
        let mut conditions = stack.status.conditions.clone();
        let message = if all_ready {
            "every resource is Ready".to_owned()
        } else {
            format!("{ready_count}/{} resources Ready", resources.len())
        };
        setpoint_plugin_sdk::set_condition(
            &mut conditions,
            Condition::new(
                "Ready",
                all_ready,
                if all_ready { "AllReady" } else { "Progressing" },
                message,
            )
            .with_observed_generation(stack.metadata.generation),
            ctx.now(),
        );
        let status = StackStatus {
            resources: statuses,
            summary: format!("{ready_count}/{}", resources.len()),
            observed_generation: stack.metadata.generation,
            conditions,
        };
        Ok(Response::new().children(children).status(status))
    }
}

/// While deleting: keep what remains minus its leaves; done when nothing remains.
fn teardown(
    resources: &[Resource],
    existing: &BTreeMap<String, &DynamicObject>,
    object_name: &dyn Fn(&str) -> String,
) -> Response<StackStatus> {
    if existing.is_empty() {
        return Response::new()
            .event(Event::normal("TornDown", "every resource is gone"))
            .remove_finalizer();
    }
    let remaining: Vec<&Resource> = resources
        .iter()
        .filter(|r| existing.contains_key(&object_name(&r.name)))
        .collect();
    // A remaining resource stays while another remaining one depends on it.
    let needed: BTreeSet<&str> = remaining
        .iter()
        .flat_map(|r| r.depends_on.iter().map(String::as_str))
        .collect();
    let keep: Vec<DynamicObject> = remaining
        .iter()
        .filter(|r| needed.contains(r.name.as_str()))
        .filter_map(|r| {
            existing
                .get(&object_name(&r.name))
                .map(|o| stored_as_desired(o))
        })
        .collect();
    Response::new().children(keep)
}

/// A stored child as a desired one: the same identity, labels and spec, so
/// that keeping it writes nothing.
fn stored_as_desired(object: &DynamicObject) -> DynamicObject {
    let value = object.to_value();
    let mut metadata = json!({"name": object.name()});
    for field in ["labels", "annotations"] {
        if let Some(v) = value["metadata"].get(field) {
            metadata[field] = v.clone();
        }
    }
    let mut desired = json!({
        "apiVersion": object.api_version(),
        "kind": object.kind(),
        "metadata": metadata,
    });
    if let Some(spec) = value.get("spec") {
        desired["spec"] = spec.clone();
    }
    DynamicObject::from_value(desired).expect("a JSON object")
}

/// A resource's object from its template.
fn child(resource: &Resource, name: &str) -> Result<DynamicObject, Error> {
    let mut value = Value::Object(resource.template.clone());
    let metadata = value
        .as_object_mut()
        .expect("an object")
        .entry("metadata")
        .or_insert_with(|| json!({}));
    if !metadata.is_object() {
        *metadata = json!({});
    }
    metadata["name"] = json!(name);
    DynamicObject::from_value(value).map_err(|e| e.context(format!("resource {}", resource.name)))
}

/// Ready: a ReplicaSet with all its replicas ready, anything else with `Ready=True`.
pub fn is_ready(object: &DynamicObject) -> bool {
    if object.kind() == "ReplicaSet" {
        let want = object
            .spec()
            .and_then(|s| s.get("replicas"))
            .and_then(Value::as_u64)
            .unwrap_or(1);
        let observed = object
            .status_field("observedGeneration")
            .and_then(Value::as_i64);
        return observed == object.generation()
            && object.status_field("readyReplicas").and_then(Value::as_u64) == Some(want);
    }
    object.condition("Ready").is_some_and(|c| c.is_true())
}

/// Every dependency names a resource; there is no cycle. Both are permanent
/// errors: only a spec change fixes them.
fn check_graph(resources: &[Resource], by_name: &BTreeMap<&str, &Resource>) -> Result<(), Error> {
    for r in resources {
        if let Some(missing) = r
            .depends_on
            .iter()
            .find(|d| !by_name.contains_key(d.as_str()))
        {
            return Err(Error::permanent(format!(
                "resource {} depends on {missing}, which is not in the stack",
                r.name
            )));
        }
    }
    if let Some(cycle) = find_cycle(resources, by_name) {
        return Err(Error::permanent(format!(
            "dependency cycle: {}",
            cycle.join(" -> ")
        )));
    }
    Ok(())
}

/// A cycle as a path that starts and ends with the same resource, if any.
pub fn find_cycle(
    resources: &[Resource],
    by_name: &BTreeMap<&str, &Resource>,
) -> Option<Vec<String>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        Visiting,
        Done,
    }
    fn visit<'a>(
        name: &'a str,
        by_name: &BTreeMap<&str, &'a Resource>,
        marks: &mut BTreeMap<&'a str, Mark>,
        path: &mut Vec<&'a str>,
    ) -> Option<Vec<String>> {
        match marks.get(name) {
            Some(Mark::Done) => return None,
            Some(Mark::Visiting) => {
                let start = path.iter().position(|p| *p == name).unwrap_or(0);
                let mut cycle: Vec<String> =
                    path[start..].iter().map(|s| (*s).to_owned()).collect();
                cycle.push(name.to_owned());
                return Some(cycle);
            }
            None => {}
        }
        marks.insert(name, Mark::Visiting);
        path.push(name);
        if let Some(resource) = by_name.get(name) {
            for dep in &resource.depends_on {
                if let Some(cycle) = visit(dep, by_name, marks, path) {
                    return Some(cycle);
                }
            }
        }
        path.pop();
        marks.insert(name, Mark::Done);
        None
    }
    let mut marks = BTreeMap::new();
    for r in resources {
        if let Some(cycle) = visit(&r.name, by_name, &mut marks, &mut Vec::new()) {
            return Some(cycle);
        }
    }
    None
}

export_reconciler!(StackReconciler);

#[cfg(test)]
mod tests;
