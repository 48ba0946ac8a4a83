//! `GET /setpoint/v1/console/plugins`: for each plugin, what its manifest
//! declares (the kind it reconciles, the kinds it owns, the destinations
//! and secrets it may ask for), its `PluginGrant` and what is declared but
//! not granted yet (pending), what it may spend (per-call limits, paced
//! shares), its destinations as the limiter sees them
//! (breaker, waiting, concurrency), its effect counters and its latest
//! refused requests.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use serde_json::{Value, json};

use super::super::host_info::plugin_state;
use setpoint::Host;
use setpoint::egress::{GRANT_API_VERSION, GRANT_KIND};

/// Refusals shown per plugin, newest first.
const REFUSALS_SHOWN: usize = 20;

pub(super) async fn plugins(State(host): State<Arc<Host>>) -> Json<Value> {
    let manifests = host.manifests().await;
    let p99 = host.reconcile_quantiles(0.99).await;
    let destinations = host.egress().destinations();
    let (requests, refused) = host.egress().metrics().counts();
    let refusals = host.egress().metrics().recent_refusals();
    let grant_kind = host.api().kinds().by_kind(GRANT_API_VERSION, GRANT_KIND);
    let limits = host.plugin_limits().await;
    let mut out = Vec::new();
    for p in host.plugins().await {
        let (state, reason) = plugin_state(&p.state);
        let manifest = manifests.iter().find(|m| m.name == p.name);
        let declares = manifest.map(|m| {
            json!({
                "reconciles": format!("{} {}", m.reconciles.api_version, m.reconciles.kind),
                "owns": m.owns.iter().map(|k| format!("{} {}", k.api_version, k.kind)).collect::<Vec<_>>(),
                "destinations": m.destinations,
                "secrets": m.secrets,
                "finalizer": m.finalizer,
            })
        });
        let grant_object = match &grant_kind {
            Some(kind) => host.api().get(kind, None, &p.name).await.ok(),
            None => None,
        };
        let pending = match manifest {
            Some(m) => host.egress().pending(m).await.items,
            None => Vec::new(),
        };
        let grant = json!({
            "exists": grant_object.is_some(),
            "spec": grant_object.as_ref().and_then(|g| g.get("spec")).cloned(),
            "pending": pending,
        });
        let mine = |plugin: &str| plugin == p.name;
        let limits = limits.get(&p.name).map(|(call, pace)| {
            json!({
                "deadlineSeconds": call.deadline.as_secs_f64(),
                "memoryBytes": call.memory_bytes,
                "responseBytes": call.response_bytes,
                "fuel": call.fuel,
                "logBytesPerSecond": call.log_bytes_per_second,
                "cores": pace.as_ref().map(|p| p.cores),
                "writeBytesPerSecond": pace.as_ref().map(|p| p.write_bytes_per_second),
            })
        });
        let destinations: Vec<Value> = destinations
            .iter()
            .filter(|d| mine(&d.plugin))
            .map(|d| {
                json!({
                    "destination": d.destination,
                    "breaker": d.breaker,
                    "waiting": d.waiting,
                    "inFlight": d.in_flight,
                    "concurrency": d.concurrency,
                    "ratePerSecond": d.rate,
                    "consecutiveFailures": d.consecutive_failures,
                })
            })
            .collect();
        let counts = |list: &[setpoint::egress::Count], field: &str| -> Vec<Value> {
            list.iter()
                .filter(|c| mine(&c.plugin))
                .map(|c| json!({"destination": c.destination, field: c.outcome, "count": c.count}))
                .collect()
        };
        let recent: Vec<Value> = refusals
            .iter()
            .rev()
            .filter(|r| mine(&r.plugin))
            .take(REFUSALS_SHOWN)
            .map(|r| serde_json::to_value(r).unwrap_or_default())
            .collect();
        out.push(json!({
            "name": p.name,
            "kind": p.kind,
            "version": p.version,
            "state": state,
            "reason": reason,
            "reconciles": p.reconciles,
            "errors": p.errors,
            "p99Seconds": p99.get(&p.name).map(std::time::Duration::as_secs_f64),
            "declares": declares,
            "limits": limits,
            "grant": grant,
            "destinations": destinations,
            "effects": {"requests": counts(&requests, "class"), "refused": counts(&refused, "reason")},
            "recentRefusals": recent,
        }));
    }
    Json(json!({"plugins": out}))
}
