//! `setpoint describe KIND NAME`: one object with what a user needs to see
//! why it is stuck — its conditions, the host's last reconcile results for it
//! (from `GET /setpoint/v1/history`) and the Events about it. Fetching is
//! here; [`render`] is a pure function of what was fetched.

use std::fmt::Write as _;

use serde_json::Value;

use super::remote::{Client, Resource, query};

/// Fetch and render the description of one object.
pub async fn describe(
    client: &Client,
    kind: &str,
    name: &str,
    namespace: &str,
) -> anyhow::Result<String> {
    let resource = client.resolve(kind).await?;
    let namespace = resource.namespaced.then_some(namespace);
    let object = client.get(&resource, namespace, name).await?;
    let (history, unreconciled, external) = fetch_history(client, &resource, namespace, name).await;
    let events = client.resolve("events").await?;
    let events = client.list(&events, namespace, None).await?;
    let uid = object["metadata"]["uid"].as_str().unwrap_or_default();
    let mut about: Vec<Value> = events["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| {
            let involved = &e["involvedObject"];
            involved["uid"].as_str() == Some(uid)
                || (involved["kind"].as_str() == Some(resource.kind.as_str())
                    && involved["name"].as_str() == Some(name)
                    && involved["uid"].is_null())
        })
        .cloned()
        .collect();
    about.sort_by(|a, b| {
        a["lastTimestamp"]
            .as_str()
            .cmp(&b["lastTimestamp"].as_str())
    });
    let mut text = render(&resource, &object, &history, &about);
    render_external(&mut text, &external);
    if unreconciled {
        text.push_str(NO_RECONCILER);
    }
    Ok(text)
}

/// Said below a description when no running plugin reconciles the kind.
const NO_RECONCILER: &str = "Reconciler:       none; no running plugin reconciles this kind (was its plugin removed?), so nothing acts on this object\n";

/// Whether a `/setpoint/v1/history` answer says that no running plugin
/// reconciles the kind (an older host does not say: then it does).
fn reconciler_missing(body: &Value) -> bool {
    body["reconciler"] == Value::Bool(false)
}

async fn fetch_history(
    client: &Client,
    resource: &Resource,
    namespace: Option<&str>,
    name: &str,
) -> (Vec<Value>, bool, Vec<Value>) {
    let api_version = resource.api_version();
    let mut pairs = vec![
        ("apiVersion", api_version.as_str()),
        ("kind", resource.kind.as_str()),
        ("name", name),
    ];
    if let Some(ns) = namespace {
        pairs.push(("namespace", ns));
    }
    match client
        .get_json(&format!("/setpoint/v1/history{}", query(&pairs)))
        .await
    {
        Ok(Some(body)) => (
            body["records"].as_array().cloned().unwrap_or_default(),
            reconciler_missing(&body),
            body["externalRequests"]
                .as_array()
                .cloned()
                .unwrap_or_default(),
        ),
        // An older host without the endpoint, or a token that may not read
        // it: describe without history.
        _ => (Vec::new(), false, Vec::new()),
    }
}

/// The object's recent external requests (URLs as the plugin wrote them:
/// secrets are put in by the host at send time and never shown).
pub fn render_external(out: &mut String, requests: &[Value]) {
    if requests.is_empty() {
        return;
    }
    let _ = writeln!(out, "External requests (most recent last):");
    let rows: Vec<Vec<String>> = requests
        .iter()
        .map(|r| {
            vec![
                text(&r["time"]),
                text(&r["role"]),
                text(&r["method"]),
                text(&r["url"]),
                text(&r["result"]),
                format!("{}ms", text(&r["latencyMs"])),
            ]
        })
        .collect();
    table(
        out,
        &["TIME", "ROLE", "METHOD", "URL", "RESULT", "LATENCY"],
        &rows,
    );
}

fn text(value: &Value) -> String {
    match value {
        Value::Null => "-".to_owned(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn unix_to_rfc3339(seconds: f64) -> String {
    let millis = (seconds * 1000.0) as i64;
    chrono::DateTime::from_timestamp_millis(millis)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
        .unwrap_or_else(|| "-".to_owned())
}

/// Lays rows out in columns separated by two spaces, indented by two.
fn table(out: &mut String, header: &[&str], rows: &[Vec<String>]) {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            widths[i] = widths[i].max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let last = cells.len() - 1;
        let mut l = String::from("  ");
        for (i, cell) in cells.iter().enumerate() {
            if i == last {
                l.push_str(cell);
            } else {
                let _ = write!(l, "{cell:<width$}  ", width = widths[i]);
            }
        }
        l.trim_end().to_owned()
    };
    let _ = writeln!(out, "{}", line(header.to_vec()));
    for row in rows {
        let _ = writeln!(out, "{}", line(row.iter().map(String::as_str).collect()));
    }
}

fn yaml_block(out: &mut String, title: &str, value: &Value) {
    if value.is_null() {
        return;
    }
    let _ = writeln!(out, "{title}:");
    let yaml = serde_yaml_ng::to_string(value).unwrap_or_else(|_| value.to_string());
    for line in yaml.lines() {
        let _ = writeln!(out, "  {line}");
    }
}

/// Events `describe` lists; older ones are summed up by reason.
const SHOWN_EVENTS: usize = 20;

/// The description of `object`, given its reconcile `history` (records of
/// `/setpoint/v1/history`, oldest first) and the `events` about it (the
/// last [`SHOWN_EVENTS`] listed, the older summed up by reason).
pub fn render(resource: &Resource, object: &Value, history: &[Value], events: &[Value]) -> String {
    let meta = &object["metadata"];
    let mut out = String::new();
    let field = |out: &mut String, name: &str, value: String| {
        let _ = writeln!(out, "{:<18}{value}", format!("{name}:"));
    };
    field(&mut out, "Name", text(&meta["name"]));
    if resource.namespaced {
        field(&mut out, "Namespace", text(&meta["namespace"]));
    }
    field(
        &mut out,
        "Kind",
        format!("{} ({})", resource.kind, resource.api_version()),
    );
    field(&mut out, "UID", text(&meta["uid"]));
    field(&mut out, "Generation", text(&meta["generation"]));
    field(&mut out, "Resource version", text(&meta["resourceVersion"]));
    field(&mut out, "Created", text(&meta["creationTimestamp"]));
    if !meta["deletionTimestamp"].is_null() {
        field(&mut out, "Deleting since", text(&meta["deletionTimestamp"]));
    }
    for (name, key) in [("Labels", "labels"), ("Finalizers", "finalizers")] {
        if let Some(value) = meta.get(key).filter(|v| !v.is_null()) {
            field(&mut out, name, value.to_string());
        }
    }
    if let Some(owners) = meta["ownerReferences"].as_array() {
        let owners: Vec<String> = owners
            .iter()
            .map(|o| format!("{}/{}", text(&o["kind"]), text(&o["name"])))
            .collect();
        field(&mut out, "Owned by", owners.join(", "));
    }
    yaml_block(&mut out, "Spec", &object["spec"]);
    let mut status = object["status"].clone();
    let conditions = status
        .as_object_mut()
        .and_then(|s| s.remove("conditions"))
        .and_then(|c| c.as_array().cloned())
        .unwrap_or_default();
    if status.as_object().is_some_and(|s| !s.is_empty()) {
        yaml_block(&mut out, "Status", &status);
    }

    let _ = writeln!(out, "Conditions:");
    if conditions.is_empty() {
        let _ = writeln!(out, "  <none>");
    } else {
        let rows: Vec<Vec<String>> = conditions
            .iter()
            .map(|c| {
                vec![
                    text(&c["type"]),
                    text(&c["status"]),
                    text(&c["reason"]),
                    text(&c["lastTransitionTime"]),
                    text(&c["message"]),
                ]
            })
            .collect();
        table(
            &mut out,
            &["TYPE", "STATUS", "REASON", "SINCE", "MESSAGE"],
            &rows,
        );
    }

    let _ = writeln!(out, "Reconciles (most recent last):");
    if history.is_empty() {
        let _ = writeln!(out, "  <none recorded by this host>");
    } else {
        let rows: Vec<Vec<String>> = history
            .iter()
            .map(|r| {
                let next = r["nextInSeconds"]
                    .as_f64()
                    .map(|s| format!("retry in {s:.3}s"))
                    .unwrap_or_default();
                let detail = match r["error"].as_str() {
                    _ if r["outcome"] == "InProgress" => "still running".to_owned(),
                    Some(error) if next.is_empty() => error.to_owned(),
                    Some(error) => format!("{error} ({next})"),
                    None => next,
                };
                vec![
                    unix_to_rfc3339(r["started"].as_f64().unwrap_or(0.0)),
                    format!(
                        "{:.1}ms",
                        r["durationSeconds"].as_f64().unwrap_or(0.0) * 1e3
                    ),
                    text(&r["version"]),
                    text(&r["outcome"]),
                    detail,
                ]
            })
            .collect();
        table(
            &mut out,
            &["STARTED", "TOOK", "VERSION", "OUTCOME", "DETAIL"],
            &rows,
        );
    }

    let _ = writeln!(out, "Events:");
    if events.is_empty() {
        let _ = writeln!(out, "  <none>");
    } else {
        // The most recent ones; the older are summed up by reason, as a
        // flood of distinct events would bury everything else.
        let older = events.len().saturating_sub(SHOWN_EVENTS);
        if older > 0 {
            let mut by_reason: std::collections::BTreeMap<String, u64> = Default::default();
            for e in &events[..older] {
                *by_reason.entry(text(&e["reason"])).or_default() += 1;
            }
            let summary: Vec<String> = by_reason
                .iter()
                .map(|(reason, n)| format!("{n} {reason}"))
                .collect();
            let _ = writeln!(
                out,
                "  {older} older events not shown ({}); the last {SHOWN_EVENTS}:",
                summary.join(", ")
            );
        }
        let rows: Vec<Vec<String>> = events[older..]
            .iter()
            .map(|e| {
                vec![
                    text(&e["type"]),
                    text(&e["reason"]),
                    text(&e["count"]),
                    text(&e["lastTimestamp"]),
                    text(&e["source"]["component"]),
                    text(&e["message"]),
                ]
            })
            .collect();
        table(
            &mut out,
            &["TYPE", "REASON", "COUNT", "LAST SEEN", "FROM", "MESSAGE"],
            &rows,
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn stack_resource() -> Resource {
        Resource {
            group: "demo.setpoint.dev".into(),
            version: "v1".into(),
            kind: "Stack".into(),
            plural: "stacks".into(),
            singular: "stack".into(),
            short_names: vec![],
            namespaced: true,
        }
    }

    #[test]
    fn a_description_shows_conditions_reconciles_and_events() {
        let object = json!({
            "apiVersion": "demo.setpoint.dev/v1", "kind": "Stack",
            "metadata": {"name": "loop", "namespace": "default", "uid": "u1", "generation": 1,
                "resourceVersion": "7", "finalizers": ["stack.demo.setpoint.dev/teardown"]},
            "spec": {"resources": []},
            "status": {"conditions": [{"type": "Ready", "status": "False",
                "reason": "ReconcileError", "message": "dependency cycle: a -> b -> a",
                "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
        });
        let history = [
            json!({"started": 1_767_225_600.5, "durationSeconds": 0.0021,
            "version": "0.1.0", "outcome": "PermanentError",
            "error": "dependency cycle: a -> b -> a", "nextInSeconds": null}),
        ];
        let events = [
            json!({"type": "Warning", "reason": "ReconcileError", "count": 3,
            "lastTimestamp": "2026-01-01T00:00:01Z", "source": {"component": "stack"},
            "message": "dependency cycle: a -> b -> a"}),
        ];
        let text = render(&stack_resource(), &object, &history, &events);
        assert!(text.contains("Name:             loop"), "{text}");
        assert!(text.contains("Kind:             Stack (demo.setpoint.dev/v1)"));
        assert!(text.contains("Finalizers:"));
        let condition = text
            .lines()
            .find(|l| l.trim_start().starts_with("Ready"))
            .unwrap();
        assert!(condition.contains("False") && condition.contains("ReconcileError"));
        let reconcile = text.lines().find(|l| l.contains("PermanentError")).unwrap();
        assert!(
            reconcile.contains("2026-01-01T00:00:00.500Z"),
            "{reconcile}"
        );
        assert!(reconcile.contains("2.1ms") && reconcile.contains("0.1.0"));
        let event = text.lines().find(|l| l.contains("Warning")).unwrap();
        assert!(event.contains("3") && event.contains("stack") && event.contains("cycle"));
    }

    #[test]
    fn a_flood_of_events_is_summed_up_and_the_last_ones_listed() {
        let object = json!({"metadata": {"name": "x", "namespace": "default"}});
        let events: Vec<Value> = (0..1000)
            .map(|i| {
                json!({"type": "Normal", "reason": if i < 990 { "Flood" } else { "Late" },
                    "count": 1, "lastTimestamp": format!("2026-01-01T00:{:02}:{:02}Z", i / 60 % 60, i % 60),
                    "message": format!("event {i}")})
            })
            .collect();
        let text = render(&stack_resource(), &object, &[], &events);
        assert!(
            text.contains("980 older events not shown (980 Flood); the last 20:"),
            "{text}"
        );
        assert!(text.contains("event 999") && text.contains("event 980"));
        assert!(!text.contains("event 979"), "{text}");
    }

    #[test]
    fn a_description_without_history_or_events_says_so() {
        let object = json!({"metadata": {"name": "x", "namespace": "default"}});
        let text = render(&stack_resource(), &object, &[], &[]);
        assert!(text.contains("Conditions:\n  <none>"));
        assert!(text.contains("Reconciles (most recent last):\n  <none recorded by this host>"));
        assert!(text.contains("Events:\n  <none>"));
    }

    #[test]
    fn a_reconcile_in_progress_is_shown_as_such() {
        let object = json!({"metadata": {"name": "x", "namespace": "default"}});
        let history = [json!({"started": 1_767_225_600.0, "durationSeconds": 12.5,
            "outcome": "InProgress"})];
        let text = render(&stack_resource(), &object, &history, &[]);
        let row = text.lines().find(|l| l.contains("InProgress")).unwrap();
        assert!(
            row.contains("12500.0ms") && row.contains("still running"),
            "{row}"
        );
    }

    #[test]
    fn a_kind_without_a_reconciler_is_noticed_only_when_the_host_says_so() {
        assert!(reconciler_missing(
            &json!({"records": [], "reconciler": false})
        ));
        assert!(!reconciler_missing(
            &json!({"records": [], "reconciler": true})
        ));
        assert!(
            !reconciler_missing(&json!({"records": []})),
            "an older host"
        );
    }
}
