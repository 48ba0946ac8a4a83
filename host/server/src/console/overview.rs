//! `GET /setpoint/v1/console/overview`: every kind with its object count
//! and how many are not `Ready` (from the informers, see
//! [`setpoint::Host::census`]), every plugin with its reconciles, errors
//! and recent p99 duration, and what needs a look: objects in a hot loop,
//! objects stalled `Ready=False`, external requests refused.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use serde_json::{Value, json};

use super::super::host_info::plugin_state;
use setpoint::Host;

use super::reference;

pub(super) async fn overview(State(host): State<Arc<Host>>) -> Json<Value> {
    let census = {
        let host = host.clone();
        // The census walks the objects that are not Ready, which while a
        // million are being created is all of them: off the async workers.
        tokio::task::spawn_blocking(move || host.census())
            .await
            .unwrap_or_default()
    };
    let mut kinds: Vec<Value> = census
        .kinds
        .iter()
        .map(|k| {
            json!({
                "group": k.kind.group,
                "version": k.kind.version,
                "apiVersion": k.kind.api_version(),
                "kind": k.kind.kind,
                "plural": k.kind.plural,
                "namespaced": k.kind.namespaced,
                "count": k.count,
                "notReady": k.not_ready,
            })
        })
        .collect();
    // Kinds with objects held first, then by group and kind.
    kinds.sort_by_key(|k| {
        (
            k["count"].is_null(),
            k["group"].as_str().unwrap_or("").to_owned(),
            k["kind"].as_str().unwrap_or("").to_owned(),
        )
    });
    let p99 = host.reconcile_quantiles(0.99).await;
    let queues: std::collections::HashMap<String, u64> = host
        .queue_metrics()
        .await
        .into_iter()
        .map(|(name, m)| (name, m.depth as u64))
        .collect();
    let mut hot_loops_by_plugin = std::collections::HashMap::new();
    for name in host.reconcilers().await {
        if let Some(stats) = host.controller_stats(&name).await {
            hot_loops_by_plugin.insert(name, stats.hot_loops);
        }
    }
    let plugins: Vec<Value> = host
        .plugins()
        .await
        .into_iter()
        .map(|p| {
            let (state, reason) = plugin_state(&p.state);
            json!({
                "name": p.name,
                "kind": p.kind,
                "version": p.version,
                "state": state,
                "reason": reason,
                "reconciles": p.reconciles,
                "errors": p.errors,
                "p99Seconds": p99.get(&p.name).map(std::time::Duration::as_secs_f64),
                "queueDepth": queues.get(&p.name).copied().unwrap_or(0),
                "hotLoops": hot_loops_by_plugin.get(&p.name).copied().unwrap_or(0),
            })
        })
        .collect();
    let flagged = |list: &[setpoint::manager::Flagged]| -> Vec<Value> {
        list.iter()
            .map(|f| {
                let mut node = reference(&f.kind, &f.object);
                node["reason"] = json!(f.reason);
                node["message"] = json!(f.message);
                node["sinceSeconds"] = json!(f.for_how_long.map(|d| d.as_secs()));
                node
            })
            .collect()
    };
    let (_, refused) = host.egress().metrics().counts();
    let refused: Vec<Value> = refused
        .into_iter()
        .map(|c| {
            json!({
                "plugin": c.plugin,
                "destination": c.destination,
                "reason": c.outcome,
                "count": c.count,
            })
        })
        .collect();
    Json(json!({
        "kinds": kinds,
        "plugins": plugins,
        "attention": {
            "hotLoops": flagged(&census.hot_loops),
            "stalled": flagged(&census.stalled),
            "refusedEffects": refused,
        },
    }))
}
