//! Rendering objects for `get`: a table with the kind's printer columns (as
//! declared in its CustomResourceDefinition), YAML or JSON.

use anyhow::Context;
use serde_json::{Value, json};

use super::Format;
use super::remote::Resource;
use setpoint::object::time;

/// Render one object.
pub fn render_one(
    resource: &Resource,
    columns: &[Column],
    object: &Value,
    format: Format,
) -> anyhow::Result<String> {
    match format {
        Format::Table => Ok(table(
            resource,
            columns,
            std::slice::from_ref(object),
            false,
        )),
        Format::Yaml => serde_yaml_ng::to_string(object).context("rendering YAML"),
        Format::Json => Ok(format!("{}\n", serde_json::to_string_pretty(object)?)),
    }
}

/// Render a list (a `…List` object from the server).
pub fn render_list(
    resource: &Resource,
    columns: &[Column],
    list: &Value,
    format: Format,
    all_namespaces: bool,
) -> anyhow::Result<String> {
    let items = list["items"].as_array().cloned().unwrap_or_default();
    match format {
        Format::Table if items.is_empty() => Ok("No resources found.\n".to_owned()),
        Format::Table => Ok(table(resource, columns, &items, all_namespaces)),
        Format::Yaml | Format::Json => {
            let doc = json!({"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": list["metadata"]["resourceVersion"]}, "items": items});
            if format == Format::Yaml {
                serde_yaml_ng::to_string(&doc).context("rendering YAML")
            } else {
                Ok(format!("{}\n", serde_json::to_string_pretty(&doc)?))
            }
        }
    }
}

/// One watch event as a line: type, kind/name, and the phase or ready
/// count when the object has one.
pub fn event_line(event: &Value) -> String {
    let object = &event["object"];
    let mut line = format!(
        "{:<9} {}/{}",
        event["type"].as_str().unwrap_or(""),
        object["kind"].as_str().unwrap_or("").to_lowercase(),
        object["metadata"]["name"].as_str().unwrap_or("")
    );
    let status = &object["status"];
    if let Some(phase) = status["phase"].as_str() {
        line.push_str(&format!("  {phase}"));
    }
    if let Some(ready) = status["readyReplicas"].as_i64() {
        line.push_str(&format!("  ready={ready}"));
    }
    line
}

/// A column of a table: its header and a JSONPath into the object, as in a
/// CustomResourceDefinition's `additionalPrinterColumns`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Column {
    /// Upper-case header.
    pub header: String,
    /// JSONPath, e.g. `.status.replicas`.
    pub json_path: String,
}

/// Columns of the built-in kinds.
pub fn builtin_columns(resource: &Resource) -> Vec<Column> {
    let col = |h: &str, p: &str| Column {
        header: h.into(),
        json_path: p.into(),
    };
    match (resource.group.as_str(), resource.kind.as_str()) {
        ("", "Event") => vec![
            col("TYPE", ".type"),
            col("REASON", ".reason"),
            col("OBJECT", ".involvedObject.name"),
            col("COUNT", ".count"),
            col("MESSAGE", ".message"),
        ],
        ("", "Secret") => vec![col("TYPE", ".type")],
        _ => vec![],
    }
}

fn cell(object: &Value, path: &str) -> String {
    let found = setpoint::object::jsonpath::select(object, path);
    if found.is_empty() {
        return "<none>".into();
    }
    found
        .iter()
        .map(|v| match v {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        })
        .collect::<Vec<_>>()
        .join(",")
}

fn age(object: &Value) -> String {
    let Some(created) = object["metadata"]["creationTimestamp"]
        .as_str()
        .and_then(time::parse_unix_seconds)
    else {
        return "<unknown>".into();
    };
    let now = (time::now_unix_ms() / 1000) as i64;
    let secs = (now - created).max(0);
    match secs {
        s if s < 120 => format!("{s}s"),
        s if s < 7200 => format!("{}m", s / 60),
        s if s < 172_800 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86_400),
    }
}

fn table(resource: &Resource, cols: &[Column], items: &[Value], all_namespaces: bool) -> String {
    let mut rows: Vec<Vec<String>> = Vec::new();
    let mut header: Vec<String> = Vec::new();
    if all_namespaces && resource.namespaced {
        header.push("NAMESPACE".into());
    }
    header.push("NAME".into());
    header.extend(cols.iter().map(|c| c.header.clone()));
    header.push("AGE".into());
    for item in items {
        let mut row = Vec::new();
        if all_namespaces && resource.namespaced {
            row.push(
                item["metadata"]["namespace"]
                    .as_str()
                    .unwrap_or("")
                    .to_owned(),
            );
        }
        row.push(item["metadata"]["name"].as_str().unwrap_or("").to_owned());
        row.extend(cols.iter().map(|c| cell(item, &c.json_path)));
        row.push(age(item));
        rows.push(row);
    }
    let widths: Vec<usize> = (0..header.len())
        .map(|i| {
            rows.iter()
                .map(|r| r[i].len())
                .chain([header[i].len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for row in std::iter::once(&header).chain(rows.iter()) {
        let line: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        out.push_str(line.join("   ").trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rs() -> Resource {
        Resource {
            group: "demo.setpoint.dev".into(),
            version: "v1".into(),
            kind: "ReplicaSet".into(),
            plural: "replicasets".into(),
            singular: "replicaset".into(),
            short_names: vec![],
            namespaced: true,
        }
    }

    #[test]
    fn tables_show_printer_columns_and_missing_values() {
        let items = vec![
            json!({"metadata": {"name": "web"}, "spec": {"replicas": 3}, "status": {"replicas": 2}}),
        ];
        let cols = [
            Column {
                header: "DESIRED".into(),
                json_path: ".spec.replicas".into(),
            },
            Column {
                header: "READY".into(),
                json_path: ".status.readyReplicas".into(),
            },
        ];
        let text = table(&rs(), &cols, &items, false);
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].starts_with("NAME"), "{text}");
        assert!(lines[0].contains("DESIRED") && lines[0].contains("READY"));
        assert!(
            lines[1].starts_with("web") && lines[1].contains('3') && lines[1].contains("<none>"),
            "{text}"
        );
    }
}
