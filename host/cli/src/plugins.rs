//! `setpoint plugins`: list a running host's plugins (name, kind, version,
//! content hash, loaded-at, state with reason, reconcile counts and errors)
//! and the kinds no plugin reconciles, from `GET /setpoint/v1/plugins`.
//! Owns the rendering only.

use std::fmt::Write;

use anyhow::anyhow;
use serde_json::Value;

use super::remote::Client;

/// Fetch the plugin list from the host `client` talks to.
pub async fn fetch(client: &Client) -> anyhow::Result<Value> {
    client
        .get_json("/setpoint/v1/plugins")
        .await?
        .ok_or_else(|| anyhow!("the server has no plugin list (/setpoint/v1/plugins)"))
}

/// Render the list as a table; failures and rejected replacements are
/// spelled out beneath it.
pub fn render(list: &Value) -> String {
    let plugins = list["plugins"].as_array().cloned().unwrap_or_default();
    let text = |v: &Value| match v {
        Value::Null => "-".to_owned(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let mut rows = vec![
        [
            "NAME",
            "KIND",
            "VERSION",
            "HASH",
            "LOADED",
            "STATE",
            "RECONCILES",
            "ERRORS",
        ]
        .map(str::to_owned),
    ];
    let mut notes = Vec::new();
    for p in &plugins {
        let hash = p["contentHash"]
            .as_str()
            .map_or("-".to_owned(), |h| h.chars().take(12).collect());
        let loaded = p["loadedAt"]
            .as_f64()
            .and_then(|s| chrono::DateTime::from_timestamp(s as i64, 0))
            .map_or("-".to_owned(), |t| {
                t.format("%Y-%m-%dT%H:%M:%SZ").to_string()
            });
        let mut state = text(&p["state"]);
        if p["lastError"].is_string() {
            state.push_str(" (replacement rejected)");
        }
        rows.push([
            text(&p["name"]),
            text(&p["kind"]),
            text(&p["version"]),
            hash,
            loaded,
            state,
            text(&p["reconciles"]),
            text(&p["errors"]),
        ]);
        if let Some(reason) = p["reason"].as_str() {
            notes.push(format!("{}: failed: {reason}", text(&p["name"])));
        }
        for line in p["contested"].as_array().into_iter().flatten() {
            notes.push(format!("{}: {}", text(&p["name"]), text(line)));
        }
        if let Some(err) = p["lastError"].as_str() {
            notes.push(format!(
                "{}: new file rejected, previous version still running: {err}",
                text(&p["name"])
            ));
        }
    }
    let widths: Vec<usize> = (0..8)
        .map(|i| rows.iter().map(|r| r[i].len()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for row in &rows {
        let line: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, w)| format!("{cell:w$}"))
            .collect();
        let _ = writeln!(out, "{}", line.join("   ").trim_end());
    }
    if plugins.is_empty() {
        out = "No plugins.\n".to_owned();
    }
    for note in notes {
        let _ = writeln!(out, "{note}");
    }
    for kind in list["unreconciledKinds"].as_array().into_iter().flatten() {
        let _ = writeln!(
            out,
            "{}: no plugin reconciles this kind; its objects are kept, and new ones accepted, but nothing acts on them",
            text(kind)
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_table_shows_state_counts_and_reasons() {
        let list = json!({"plugins": [
            {"name": "replicaset", "kind": "demo.setpoint.dev/v1/ReplicaSet", "version": "0.1.0",
             "contentHash": "0123456789abcdef0123", "loadedAt": 0.0, "state": "Running",
             "reason": null, "lastError": "cannot compile plugin: bad", "reconciles": 12, "errors": 1,
             "contested": ["contested by plugin \"squat\", refused: it brings another definition"]},
            {"name": "broken", "kind": null, "version": null, "contentHash": null, "loadedAt": 0.0,
             "state": "Failed", "reason": "plugin does not implement the world", "lastError": null,
             "reconciles": 0, "errors": 0},
        ]});
        let out = render(&list);
        assert!(out.starts_with("NAME"), "{out}");
        assert!(out.contains("0123456789ab "), "{out}");
        assert!(out.contains("Running (replacement rejected)"), "{out}");
        assert!(
            out.contains("broken: failed: plugin does not implement the world"),
            "{out}"
        );
        assert!(
            out.contains("previous version still running: cannot compile plugin: bad"),
            "{out}"
        );
        assert!(
            out.contains("replicaset: contested by plugin \"squat\", refused"),
            "{out}"
        );
    }

    #[test]
    fn kinds_without_a_reconciler_are_spelled_out() {
        let list = json!({"plugins": [], "unreconciledKinds": ["test.setpoint.dev/v1 Zoo"]});
        let out = render(&list);
        assert!(
            out.contains("test.setpoint.dev/v1 Zoo: no plugin reconciles this kind"),
            "{out}"
        );
    }
}
