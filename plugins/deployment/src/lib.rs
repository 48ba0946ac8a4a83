//! `deployment`: rolls a Pod template out through ReplicaSets, the way
//! Kubernetes' Deployment controller does, by choreography: it only writes
//! ReplicaSets; the `replicaset` plugin turns them into Pods and `podsim`
//! makes the Pods ready.
//!
//! # How a reconcile decides
//!
//! 1. The ReplicaSet of the current template is named
//!    `<deployment>-<hash of the template>`; every other owned ReplicaSet is
//!    old. Changing the template back makes an old ReplicaSet current again
//!    (a roll back scales it up, nothing is recreated).
//! 2. **Scale up** the current ReplicaSet while the Pods that may exist stay
//!    within `replicas + maxSurge`.
//! 3. **Scale down** old ReplicaSets while the Pods that are surely ready stay
//!    at least `replicas - maxUnavailable`.
//!
//! The counts are pessimistic because the caches lag: a ReplicaSet may have
//! up to `max(spec.replicas, status.replicas, Pods seen)` Pods, and at most
//! `min(spec.replicas, status.readyReplicas, ready Pods seen)` ready ones.
//! Without old ReplicaSets (no rollout) the current one is simply set to
//! `replicas`.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use setpoint_plugin_sdk::serde_json::{Map, Value, json};
use setpoint_plugin_sdk::{
    Ctx, Definition, DynamicObject, Error, Event, KindRef, LabelSelector, Manifest, Object,
    PrinterColumn, Reconciler, Response, Template, export_reconciler,
};

/// The API version of Deployments, ReplicaSets and Pods.
pub use demo_kinds::API_VERSION;

/// The label that tells the Pods of different templates apart.
pub const TEMPLATE_HASH_LABEL: &str = "pod-template-hash";

/// What a Deployment asks for.
#[derive(Clone, Debug, PartialEq, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeploymentSpec {
    /// How many pods to keep.
    #[serde(default = "one")]
    pub replicas: u32,
    /// Labels every pod carries; must match the template's labels.
    pub selector: LabelSelector,
    /// The pods to create, copied verbatim into the ReplicaSets (as JSON,
    /// so that its hash names the ReplicaSet).
    #[schemars(with = "Template")]
    pub template: Map<String, Value>,
    /// How a new template replaces the old one.
    #[serde(default)]
    pub strategy: Strategy,
}

fn one() -> u32 {
    1
}

/// The update strategy (only rolling updates exist).
#[derive(Clone, Debug, Default, PartialEq, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Strategy {
    /// Rolling update limits.
    #[serde(default)]
    pub rolling_update: RollingUpdate,
}

/// Rolling update limits, as Pod counts.
#[derive(Clone, Debug, PartialEq, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RollingUpdate {
    /// Pods allowed above spec.replicas during an update.
    #[serde(default = "one")]
    pub max_surge: u32,
    /// Ready pods allowed below spec.replicas during an update.
    #[serde(default)]
    pub max_unavailable: u32,
}

impl Default for RollingUpdate {
    fn default() -> Self {
        Self {
            max_surge: 1,
            max_unavailable: 0,
        }
    }
}

/// The observed state, written by the deployment plugin.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(default, rename_all = "camelCase")]
pub struct DeploymentStatus {
    /// Pods of every owned ReplicaSet.
    pub replicas: u32,
    /// Pods of the current template's ReplicaSet.
    pub updated_replicas: u32,
    /// Ready Pods of every owned ReplicaSet.
    pub ready_replicas: u32,
    /// Available Pods of every owned ReplicaSet.
    pub available_replicas: u32,
    /// The `metadata.generation` this status was computed from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

/// The Deployment kind's definition.
pub fn definition() -> Definition {
    Definition::of::<DeploymentSpec, DeploymentStatus>(KindRef::new(API_VERSION, "Deployment"))
        .short_name("deploy")
        .description(
            "Rolls a pod template out through ReplicaSets named <deployment>-<template hash>.",
        )
        .column(PrinterColumn::integer("Desired", ".spec.replicas"))
        .column(PrinterColumn::integer(
            "Up-to-date",
            ".status.updatedReplicas",
        ))
        .column(PrinterColumn::integer("Ready", ".status.readyReplicas"))
        .column(PrinterColumn::integer(
            "Available",
            ".status.availableReplicas",
        ))
}

/// The reconciler.
#[derive(Debug, Default)]
pub struct DeploymentReconciler;

/// One owned ReplicaSet as the reconcile sees it.
struct Owned {
    object: DynamicObject,
    /// Its `spec.replicas`, possibly changed by this reconcile.
    replicas: u32,
    /// The most Pods it may have right now.
    most_pods: u32,
    /// The fewest ready Pods it surely has right now.
    surely_ready: u32,
}

impl Reconciler for DeploymentReconciler {
    type Spec = DeploymentSpec;
    type Status = DeploymentStatus;

    fn manifest(&self) -> Manifest {
        let deployment = definition();
        Manifest::new(
            env!("CARGO_PKG_NAME"),
            env!("CARGO_PKG_VERSION"),
            deployment.kind(),
        )
        .owns(demo_kinds::replicaset::kind())
        .define(deployment)
        .define(demo_kinds::replicaset::definition())
        .define(demo_kinds::pod::definition())
    }

    fn reconcile(
        &self,
        deploy: &Object<DeploymentSpec, DeploymentStatus>,
        ctx: &Ctx,
    ) -> Result<Response<DeploymentStatus>, Error> {
        if deploy.is_deleting() {
            return Ok(Response::new());
        }
        let spec = &deploy.spec;
        if spec.selector.match_labels.is_empty() {
            return Err(Error::permanent(
                "spec.selector.matchLabels must not be empty",
            ));
        }
        let hash = template_hash(&Value::Object(spec.template.clone()));
        let current_name = format!("{}-{hash}", deploy.name());
        let pods = ctx
            .list(
                API_VERSION,
                "Pod",
                deploy.namespace(),
                &spec.selector.to_query(),
            )
            .unwrap_or_default();

        let mut current: Option<Owned> = None;
        let mut old: Vec<Owned> = Vec::new();
        for rs in ctx.owned_of_kind(API_VERSION, "ReplicaSet") {
            if rs.is_deleting() {
                continue;
            }
            let owned = observe(rs, &pods);
            if rs.name() == current_name {
                current = Some(owned);
            } else {
                old.push(owned);
            }
        }
        let mut events = Vec::new();
        let mut current = current.unwrap_or_else(|| {
            events.push(Event::normal(
                "ScalingReplicaSet",
                format!("Created replica set {current_name}"),
            ));
            Owned {
                object: new_replica_set(deploy, &current_name, &hash),
                replicas: 0,
                most_pods: 0,
                surely_ready: 0,
            }
        });

        let wanted = spec.replicas;
        if old.iter().all(|rs| rs.replicas == 0 && rs.most_pods == 0) {
            // Not rolling: just scale.
            current.replicas = wanted;
        } else {
            let rolling = &spec.strategy.rolling_update;
            // Both zero would never make progress; surge one, as Kubernetes defaults.
            let surge = if rolling.max_surge == 0 && rolling.max_unavailable == 0 {
                1
            } else {
                rolling.max_surge
            };
            let most_pods: u32 = current.most_pods + old.iter().map(|rs| rs.most_pods).sum::<u32>();
            let room = (wanted + surge).saturating_sub(most_pods);
            if current.replicas < wanted {
                current.replicas += room.min(wanted - current.replicas);
            } else if current.replicas > wanted {
                current.replicas = wanted;
            }
            let min_ready = wanted.saturating_sub(rolling.max_unavailable);
            let ready: u32 =
                current.surely_ready + old.iter().map(|rs| rs.surely_ready).sum::<u32>();
            let mut removable = ready.saturating_sub(min_ready);
            for rs in &mut old {
                // Pods that are not ready can go without lowering readiness,
                // but the replica set removes its highest indexes, which may be
                // ready ones: only do it within the budget too.
                let cut = rs.replicas.min(removable);
                rs.replicas -= cut;
                removable -= cut;
            }
        }

        let status = DeploymentStatus {
            replicas: count(&current, &old, |rs| status_u32(&rs.object, "replicas")),
            updated_replicas: status_u32(&current.object, "replicas"),
            ready_replicas: count(&current, &old, |rs| status_u32(&rs.object, "readyReplicas")),
            available_replicas: count(&current, &old, |rs| {
                status_u32(&rs.object, "availableReplicas")
            }),
            observed_generation: deploy.metadata.generation,
        };
        let mut children = Vec::with_capacity(old.len() + 1);
        for rs in std::iter::once(&current).chain(&old) {
            let previous = spec_u32(&rs.object, "replicas");
            if previous != rs.replicas && rs.object.uid() != "" {
                events.push(Event::normal(
                    "ScalingReplicaSet",
                    format!(
                        "Scaled {} replica set {} from {previous} to {}",
                        if rs.replicas > previous { "up" } else { "down" },
                        rs.object.name(),
                        rs.replicas
                    ),
                ));
            }
            children.push(with_replicas(&rs.object, rs.replicas)?);
        }
        Ok(Response::new()
            .children(children)
            .status(status)
            .events(events))
    }
}

fn count(current: &Owned, old: &[Owned], f: impl Fn(&Owned) -> u32) -> u32 {
    f(current) + old.iter().map(f).sum::<u32>()
}

/// The pessimistic counts of one ReplicaSet (see the module docs).
fn observe(rs: &DynamicObject, pods: &[DynamicObject]) -> Owned {
    let replicas = spec_u32(rs, "replicas");
    let mine: Vec<&DynamicObject> = pods
        .iter()
        .filter(|pod| {
            pod.metadata().is_ok_and(|m| {
                m.owner_references
                    .iter()
                    .any(|o| o.controller == Some(true) && o.uid == rs.uid())
            })
        })
        .collect();
    let seen_ready = mine
        .iter()
        .filter(|pod| !pod.is_deleting() && pod.condition("Ready").is_some_and(|c| c.is_true()))
        .count();
    let seen_ready = u32::try_from(seen_ready).unwrap_or(u32::MAX);
    let seen = u32::try_from(mine.len()).unwrap_or(u32::MAX);
    Owned {
        object: rs.clone(),
        replicas,
        most_pods: replicas.max(status_u32(rs, "replicas")).max(seen),
        surely_ready: replicas
            .min(status_u32(rs, "readyReplicas"))
            .min(seen_ready),
    }
}

fn spec_u32(object: &DynamicObject, field: &str) -> u32 {
    object
        .spec()
        .and_then(|s| s.get(field))
        .and_then(Value::as_u64)
        .and_then(|n| u32::try_from(n).ok())
        .unwrap_or(0)
}

fn status_u32(object: &DynamicObject, field: &str) -> u32 {
    object
        .status_field(field)
        .and_then(Value::as_u64)
        .and_then(|n| u32::try_from(n).ok())
        .unwrap_or(0)
}

/// A new ReplicaSet for the current template, with zero replicas; the
/// template hash label keeps its Pods apart from other templates' Pods.
fn new_replica_set(
    deploy: &Object<DeploymentSpec, DeploymentStatus>,
    name: &str,
    hash: &str,
) -> DynamicObject {
    let mut template = Value::Object(deploy.spec.template.clone());
    template["metadata"]["labels"][TEMPLATE_HASH_LABEL] = json!(hash);
    let mut selector = deploy.spec.selector.match_labels.clone();
    selector.insert(TEMPLATE_HASH_LABEL.to_owned(), hash.to_owned());
    let mut labels = selector.clone();
    labels.extend(deploy.spec.template_labels());
    let value = json!({
        "apiVersion": API_VERSION,
        "kind": "ReplicaSet",
        "metadata": {"name": name, "labels": labels},
        "spec": {"replicas": 0, "selector": {"matchLabels": selector}, "template": template},
    });
    DynamicObject::from_value(value).expect("a JSON object")
}

impl DeploymentSpec {
    fn template_labels(&self) -> BTreeMap<String, String> {
        self.template
            .get("metadata")
            .and_then(|m| m.get("labels"))
            .and_then(Value::as_object)
            .map(|labels| {
                labels
                    .iter()
                    .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// The desired form of an owned ReplicaSet: what is stored (name, labels,
/// spec) with `replicas` set, so that an unchanged one costs no write.
fn with_replicas(rs: &DynamicObject, replicas: u32) -> Result<DynamicObject, Error> {
    let stored = rs.to_value();
    let mut spec = stored.get("spec").cloned().unwrap_or_else(|| json!({}));
    spec["replicas"] = json!(replicas);
    let mut metadata = json!({"name": rs.name()});
    if let Some(labels) = stored["metadata"].get("labels") {
        metadata["labels"] = labels.clone();
    }
    DynamicObject::from_value(json!({
        "apiVersion": API_VERSION,
        "kind": "ReplicaSet",
        "metadata": metadata,
        "spec": spec,
    }))
}

/// A short, stable hash of a template: FNV-1a over its canonical JSON (keys
/// sorted at every level), as 10 lowercase hex digits.
pub fn template_hash(template: &Value) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    let mut feed = |bytes: &[u8]| {
        for b in bytes {
            hash ^= u64::from(*b);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
    };
    canonical(template, &mut feed);
    format!("{:010x}", hash & 0xff_ffff_ffff)
}

fn canonical(value: &Value, feed: &mut impl FnMut(&[u8])) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            feed(b"{");
            for key in keys {
                feed(Value::String(key.clone()).to_string().as_bytes());
                feed(b":");
                canonical(&map[key], feed);
                feed(b",");
            }
            feed(b"}");
        }
        Value::Array(items) => {
            feed(b"[");
            for item in items {
                canonical(item, feed);
                feed(b",");
            }
            feed(b"]");
        }
        other => feed(other.to_string().as_bytes()),
    }
}

export_reconciler!(DeploymentReconciler);

#[cfg(test)]
mod tests;
