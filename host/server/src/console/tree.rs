//! `GET /setpoint/v1/console/tree?apiVersion=…&kind=…&namespace=…&name=…`:
//! an object's ownership tree. Up: its owners (the controller reference,
//! else the first), top first. Down: its dependents of every kind the
//! host's informers hold, found through their owner indexes (no scan, so
//! a tree in a store of a million objects costs what the tree holds).
//! Each node carries its `Ready` state, phase and recent external
//! requests. A node shows at most [`SHOWN_CHILDREN`] dependents, the
//! rest summarised by state (`folded`); at most [`MAX_NODES`] nodes are
//! expanded in all (`truncated`). Objects the caller may not read show
//! their kind and name only (`hidden`).

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;

use axum::extract::{Query, State};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde_json::{Value, json};

use super::super::guard::Caller;
use super::super::host_info::ObjectQuery;
use super::super::status::ApiError;
use super::reference;
use setpoint::Host;
use setpoint::manager::ready_condition;
use setpoint::object::{KindInfo, Object, ObjectKey, meta};

/// Dependents shown under one node; the others are counted.
pub const SHOWN_CHILDREN: usize = 20;

/// Nodes expanded in one tree.
pub const MAX_NODES: usize = 2_000;

/// Owners followed up.
const MAX_ANCESTORS: usize = 16;

pub(super) async fn tree(
    State(host): State<Arc<Host>>,
    caller: Option<Extension<Caller>>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let Some(ObjectQuery {
        api_version,
        kind,
        namespace,
        name,
    }) = ObjectQuery::of(&query)
    else {
        return ObjectQuery::missing();
    };
    let kind = match host.api().kinds().require(api_version, kind) {
        Ok(kind) => kind,
        Err(err) => return ApiError(err).into_response(),
    };
    let root = match host.api().get(&kind, namespace, name).await {
        Ok(object) => Arc::new(object),
        Err(err) => return ApiError(err).into_response(),
    };
    let user = caller.map(|Extension(Caller(user))| user);
    let may_read = |kind: &KindInfo, object: &Object| match &user {
        None => true,
        Some(user) => super::super::plan::may_read(
            &host,
            user,
            &setpoint::plan::ObjectRef {
                api_version: kind.api_version(),
                kind: kind.kind.clone(),
                namespace: meta::namespace(object).map(str::to_owned),
                name: meta::name(object).to_owned(),
            },
        ),
    };
    let describe =
        |kind: &KindInfo, object: &Object| node(&host, kind, object, may_read(kind, object));

    let mut ancestors = Vec::new();
    let mut child = root.clone();
    let mut seen = HashSet::from([meta::uid(&root).to_owned()]);
    while ancestors.len() < MAX_ANCESTORS {
        let Some((owner_kind, owner)) = owner_of(&host, &child).await else {
            break;
        };
        if !seen.insert(meta::uid(&owner).to_owned()) {
            break;
        }
        ancestors.push(describe(&owner_kind, &owner));
        child = owner;
    }
    ancestors.reverse();

    // Breadth first, so that a budget cut leaves the near levels whole.
    let mut root_node = describe(&kind, &root);
    let mut expanded = 1;
    let mut truncated = false;
    // (path of child indexes from the root, uid)
    let mut queue = VecDeque::from([(Vec::<usize>::new(), meta::uid(&root).to_owned())]);
    let holdings = host.holdings();
    while let Some((path, uid)) = queue.pop_front() {
        let dependents: Vec<_> = holdings
            .dependents(&uid)
            .into_iter()
            .filter(|(_, o)| seen.insert(meta::uid(o).to_owned()))
            .collect();
        if dependents.is_empty() {
            continue;
        }
        let mut described: Vec<Value> = dependents
            .iter()
            .map(|(kind, object)| describe(kind, object))
            .collect();
        // Within a kind, what is not Ready first (that is what one looks
        // for), then by name as people count (web-2 before web-10).
        described.sort_by_cached_key(|n| {
            (
                n["kind"].as_str().unwrap_or("").to_owned(),
                n["ready"] == "True",
                natural(n["name"].as_str().unwrap_or("")),
            )
        });
        let room = MAX_NODES.saturating_sub(expanded);
        let shown = described.len().min(SHOWN_CHILDREN).min(room);
        if shown < described.len().min(SHOWN_CHILDREN) {
            truncated = true;
        }
        let rest = described.split_off(shown);
        expanded += shown;
        let target = at(&mut root_node, &path);
        if !rest.is_empty() {
            let count = |state: &str| rest.iter().filter(|n| n["ready"] == state).count();
            target["folded"] = json!({
                "count": rest.len(),
                "ready": count("True"),
                "notReady": count("False"),
                "unknown": rest.len() - count("True") - count("False"),
            });
        }
        for (i, child) in described.iter().enumerate() {
            let mut next = path.clone();
            next.push(i);
            queue.push_back((next, child["uid"].as_str().unwrap_or("").to_owned()));
        }
        target["children"] = Value::Array(described);
        if expanded >= MAX_NODES {
            truncated |= !queue.is_empty();
            break;
        }
    }
    Json(json!({"ancestors": ancestors, "root": root_node, "truncated": truncated})).into_response()
}

/// A name's sort key in which runs of digits compare as numbers.
fn natural(name: &str) -> Vec<(String, u64)> {
    let mut key = Vec::new();
    let mut text = String::new();
    let mut chars = name.chars().peekable();
    while let Some(c) = chars.next() {
        if c.is_ascii_digit() {
            let mut number = u64::from(c as u8 - b'0');
            while let Some(d) = chars.peek().filter(|d| d.is_ascii_digit()) {
                number = number
                    .saturating_mul(10)
                    .saturating_add(u64::from(*d as u8 - b'0'));
                chars.next();
            }
            key.push((std::mem::take(&mut text), number));
        } else {
            text.push(c);
        }
    }
    key.push((text, 0));
    key
}

/// The node at `path` (child indexes) below `root`.
fn at<'a>(root: &'a mut Value, path: &[usize]) -> &'a mut Value {
    path.iter().fold(root, |node, &i| &mut node["children"][i])
}

/// The owner of `object` (its controller reference, else its first owner
/// reference), from an informer if one holds it, else from the store.
async fn owner_of(host: &Host, object: &Object) -> Option<(Arc<KindInfo>, Arc<Object>)> {
    let refs = meta::owner_references(object);
    let owner = refs
        .iter()
        .find(|r| r.get("controller").and_then(Value::as_bool) == Some(true))
        .or_else(|| refs.first())?;
    let text = |field: &str| owner.get(field).and_then(Value::as_str);
    let kind = host
        .api()
        .kinds()
        .by_kind(text("apiVersion")?, text("kind")?)?;
    let namespace = kind.namespaced.then(|| meta::namespace(object)).flatten();
    let name = text("name")?;
    let found = match host.cached(&kind, &ObjectKey::new(namespace, name)) {
        Some(found) => found,
        None => Arc::new(host.api().get(&kind, namespace, name).await.ok()?),
    };
    // A reference to a deleted owner whose name was taken again is not its owner.
    (meta::uid(&found) == text("uid")?).then_some((kind, found))
}

/// One node: its reference, `Ready` state, phase, deletion and recent
/// external requests; without the state and requests when `readable` is
/// false.
fn node(host: &Host, kind: &KindInfo, object: &Object, readable: bool) -> Value {
    let mut node = reference(kind, object);
    node["children"] = json!([]);
    node["folded"] = Value::Null;
    node["hidden"] = json!(!readable);
    node["deleting"] = json!(meta::deletion_timestamp(object).is_some());
    if !readable {
        node["requests"] = json!([]);
        return node;
    }
    let (ready, reason, message) = match ready_condition(object) {
        Some((status, reason, message, _)) => (json!(status), json!(reason), json!(message)),
        None => (Value::Null, Value::Null, Value::Null),
    };
    node["ready"] = ready;
    node["reason"] = reason;
    node["message"] = message;
    let status = object.get("status");
    node["phase"] = status
        .and_then(|s| s.get("phase"))
        .cloned()
        .unwrap_or(Value::Null);
    // Kinds that count replicas rather than carry a Ready condition
    // (Deployment, ReplicaSet) say how many are ready.
    node["summary"] = match (
        status
            .and_then(|s| s.get("readyReplicas"))
            .and_then(Value::as_i64),
        object
            .get("spec")
            .and_then(|s| s.get("replicas"))
            .and_then(Value::as_i64),
    ) {
        (ready, Some(wanted)) => json!(format!("{}/{wanted} ready", ready.unwrap_or(0))),
        _ => status
            .and_then(|s| s.get("summary"))
            .and_then(Value::as_str)
            .map_or(Value::Null, |s| json!(s)),
    };
    let key = ObjectKey::new(meta::namespace(object), meta::name(object));
    let requests = host
        .egress()
        .metrics()
        .recent(&setpoint::egress::recent_key(&kind.kind, &key));
    node["requests"] = serde_json::to_value(requests).unwrap_or_default();
    node
}

#[cfg(test)]
mod tests {
    use super::natural;

    #[test]
    fn names_sort_as_people_count() {
        let mut names = [
            "web-10", "web-2", "web-1", "db", "web-1a", "web-01x", "web-9",
        ];
        names.sort_by_cached_key(|n| natural(n));
        assert_eq!(
            names,
            [
                "db", "web-1", "web-1a", "web-01x", "web-2", "web-9", "web-10"
            ]
        );
    }
}
