//! Table responses (`Accept: application/json;as=Table;g=meta.k8s.io;v=v1`):
//! the server-side rendering `kubectl get` prints, with a kind's
//! `additionalPrinterColumns` (or `Name` and `Age` when it has none).
//!
//! Owns content negotiation for tables and the conversion of objects into
//! `meta.k8s.io/v1` `Table` rows; does not own listing or watching.

use axum::http::{HeaderMap, header};
use serde_json::{Map, Value, json};

use setpoint::object::jsonpath::select;
use setpoint::object::{KindInfo, meta, time};

/// What each row carries in `rows[].object` (`includeObject`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum IncludeObject {
    /// No object.
    None,
    /// A `PartialObjectMetadata` (the default).
    Metadata,
    /// The whole object.
    Object,
}

/// Whether the request asks for a Table, and with which `includeObject`.
pub(super) fn requested(
    headers: &HeaderMap,
    query: &std::collections::HashMap<String, String>,
) -> Option<IncludeObject> {
    let accept = headers.get(header::ACCEPT)?.to_str().ok()?;
    // kubectl lists Table (v1, then v1beta1) first, then plain JSON; only
    // the v1 Table is served.
    accept.split(',').find(|media| {
        let params: Vec<&str> = media.split(';').skip(1).map(str::trim).collect();
        params.contains(&"as=Table") && params.contains(&"v=v1")
    })?;
    Some(match query.get("includeObject").map(String::as_str) {
        Some("None") => IncludeObject::None,
        Some("Object") => IncludeObject::Object,
        _ => IncludeObject::Metadata,
    })
}

/// A column of the table: its definition and the JSONPath of its cells.
struct Column {
    definition: Value,
    path: String,
    kind: String,
}

fn columns(kind: &KindInfo) -> Vec<Column> {
    let mut columns = Vec::new();
    if kind.printer_columns.is_empty() {
        columns.push(Column {
            definition: json!({
                "name": "Age", "type": "date", "format": "", "priority": 0,
                "description": "CreationTimestamp is a timestamp representing the server time when this object was created.",
            }),
            path: ".metadata.creationTimestamp".into(),
            kind: "date".into(),
        });
    }
    for c in &kind.printer_columns {
        let kind_name = c["type"].as_str().unwrap_or("string").to_owned();
        columns.push(Column {
            definition: json!({
                "name": c["name"].as_str().unwrap_or(""),
                "type": kind_name,
                "format": c["format"].as_str().unwrap_or(""),
                "description": c["description"].as_str().unwrap_or(""),
                "priority": c["priority"].as_i64().unwrap_or(0),
            }),
            path: c["jsonPath"].as_str().unwrap_or("").to_owned(),
            kind: kind_name,
        });
    }
    columns
}

fn name_column() -> Value {
    json!({
        "name": "Name", "type": "string", "format": "name", "priority": 0,
        "description": "Name must be unique within a namespace.",
    })
}

/// A cell as the apiextensions table convertor renders it: typed values,
/// dates as ages, missing values as null (kubectl prints `<none>`).
fn cell(kind: &str, value: Option<&Value>, now_unix: i64) -> Value {
    let Some(value) = value else {
        return Value::Null;
    };
    match (kind, value) {
        ("date", Value::String(s)) => match time::parse_unix_seconds(s) {
            Some(then) => Value::String(human_duration(now_unix - then)),
            None => Value::String(s.clone()),
        },
        ("integer", Value::Number(n)) if n.is_i64() => value.clone(),
        ("number", Value::Number(_)) | ("boolean", Value::Bool(_)) => value.clone(),
        (_, Value::String(s)) => Value::String(s.clone()),
        (_, Value::Null) => Value::Null,
        (_, other) => Value::String(other.to_string()),
    }
}

/// Kubernetes' `HumanDuration`: `45s`, `3m20s`, `2h5m`, `3d4h`, `400d`, `3y10d`.
pub(super) fn human_duration(seconds: i64) -> String {
    if seconds < -1 {
        return "<invalid>".into();
    }
    let s = seconds.max(0);
    let (m, h, d) = (s / 60, s / 3600, s / 86400);
    if s < 120 {
        format!("{s}s")
    } else if m < 10 {
        match s % 60 {
            0 => format!("{m}m"),
            rest => format!("{m}m{rest}s"),
        }
    } else if h < 3 {
        format!("{m}m")
    } else if h < 8 {
        match m % 60 {
            0 => format!("{h}h"),
            rest => format!("{h}h{rest}m"),
        }
    } else if h < 48 {
        format!("{h}h")
    } else if h < 24 * 8 {
        match h % 24 {
            0 => format!("{d}d"),
            rest => format!("{d}d{rest}h"),
        }
    } else if h < 24 * 365 * 2 {
        format!("{d}d")
    } else {
        let y = d / 365;
        if h < 24 * 365 * 8 && d % 365 != 0 {
            format!("{y}y{}d", d % 365)
        } else {
            format!("{y}y")
        }
    }
}

fn row(columns: &[Column], object: &Value, include: IncludeObject, now: i64) -> Value {
    let mut cells = vec![Value::String(meta::name(object).to_owned())];
    for c in columns {
        cells.push(cell(&c.kind, select(object, &c.path).first().copied(), now));
    }
    let mut row = Map::new();
    row.insert("cells".into(), Value::Array(cells));
    match include {
        IncludeObject::None => {}
        IncludeObject::Metadata => {
            row.insert(
                "object".into(),
                json!({
                    "kind": "PartialObjectMetadata",
                    "apiVersion": "meta.k8s.io/v1",
                    "metadata": object["metadata"],
                }),
            );
        }
        IncludeObject::Object => {
            row.insert("object".into(), object.clone());
        }
    }
    Value::Object(row)
}

/// A `Table` of `objects` of `kind`, with the list's metadata
/// (`resourceVersion`, `continue`).
pub(super) fn table(
    kind: &KindInfo,
    objects: &[Value],
    list_metadata: Value,
    include: IncludeObject,
) -> Value {
    let columns = columns(kind);
    let now = (time::now_unix_ms() / 1000) as i64;
    let mut definitions = vec![name_column()];
    definitions.extend(columns.iter().map(|c| c.definition.clone()));
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": list_metadata,
        "columnDefinitions": definitions,
        "rows": objects.iter().map(|o| row(&columns, o, include, now)).collect::<Vec<_>>(),
    })
}

/// A `Table` written a page of rows at a time, for a LIST answered whole
/// without a `limit`: its opening (everything before the rows), the rows
/// of each page, then its closing; together the same JSON as [`table`].
pub(super) struct TableWriter {
    columns: Vec<Column>,
    include: IncludeObject,
    now: i64,
    rows_written: bool,
}

impl TableWriter {
    pub(super) fn new(kind: &KindInfo, include: IncludeObject) -> Self {
        Self {
            columns: columns(kind),
            include,
            now: (time::now_unix_ms() / 1000) as i64,
            rows_written: false,
        }
    }

    /// Everything up to the first row.
    pub(super) fn opening(&self, list_metadata: Value) -> Vec<u8> {
        let mut definitions = vec![name_column()];
        definitions.extend(self.columns.iter().map(|c| c.definition.clone()));
        let head = json!({
            "kind": "Table",
            "apiVersion": "meta.k8s.io/v1",
            "metadata": list_metadata,
            "columnDefinitions": definitions,
        });
        let mut out = head.to_string().into_bytes();
        out.pop(); // the closing brace: the rows follow
        out.extend_from_slice(br#","rows":["#);
        out
    }

    /// The rows of `objects`, after those written before.
    pub(super) fn rows(&mut self, objects: &[Value]) -> Vec<u8> {
        let mut out = Vec::new();
        for object in objects {
            if self.rows_written {
                out.push(b',');
            }
            self.rows_written = true;
            let row = row(&self.columns, object, self.include, self.now);
            serde_json::to_writer(&mut out, &row).expect("a row serializes");
        }
        out
    }

    /// What ends the table.
    pub(super) fn closing() -> &'static [u8] {
        b"]}"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_table_written_a_page_at_a_time_is_the_table_built_whole() {
        let kind = KindInfo {
            group: "demo.setpoint.dev".into(),
            version: "v1".into(),
            kind: "Widget".into(),
            plural: "widgets".into(),
            singular: "widget".into(),
            short_names: vec![],
            list_kind: "WidgetList".into(),
            namespaced: true,
            status_subresource: true,
            schema: None,
            printer_columns: vec![
                json!({"name": "Replicas", "type": "integer", "jsonPath": ".spec.replicas"}),
            ],
        };
        let objects: Vec<Value> = (0..5)
            .map(|i| {
                json!({"metadata": {"name": format!("w{i}"), "namespace": "default"},
                             "spec": {"replicas": i}})
            })
            .collect();
        let metadata = json!({"resourceVersion": "42"});
        let whole = table(&kind, &objects, metadata.clone(), IncludeObject::Metadata);
        let mut writer = TableWriter::new(&kind, IncludeObject::Metadata);
        let mut text = writer.opening(metadata);
        text.extend(writer.rows(&objects[..2]));
        text.extend(writer.rows(&[]));
        text.extend(writer.rows(&objects[2..]));
        text.extend_from_slice(TableWriter::closing());
        let streamed: Value = serde_json::from_slice(&text).unwrap();
        assert_eq!(streamed, whole);
        let empty = TableWriter::new(&kind, IncludeObject::None);
        let mut text = empty.opening(json!({}));
        text.extend_from_slice(TableWriter::closing());
        let none: Value = serde_json::from_slice(&text).unwrap();
        assert_eq!(none["rows"], json!([]));
    }

    #[test]
    fn ages_follow_kubernetes_human_duration() {
        assert_eq!(human_duration(5), "5s");
        assert_eq!(human_duration(119), "119s");
        assert_eq!(human_duration(200), "3m20s");
        assert_eq!(human_duration(600), "10m");
        assert_eq!(human_duration(3 * 3600 + 300), "3h5m");
        assert_eq!(human_duration(20 * 3600), "20h");
        assert_eq!(human_duration(3 * 86400 + 4 * 3600), "3d4h");
        assert_eq!(human_duration(400 * 86400), "400d");
        assert_eq!(human_duration(-5), "<invalid>");
    }

    #[test]
    fn a_table_has_the_printer_columns_and_typed_cells() {
        let kind = KindInfo {
            group: "demo.setpoint.dev".into(),
            version: "v1".into(),
            kind: "Widget".into(),
            plural: "widgets".into(),
            singular: "widget".into(),
            short_names: vec![],
            list_kind: "WidgetList".into(),
            namespaced: true,
            status_subresource: true,
            schema: None,
            printer_columns: vec![
                json!({"name": "Replicas", "type": "integer", "jsonPath": ".spec.replicas"}),
                json!({"name": "Phase", "type": "string", "jsonPath": ".status.phase"}),
            ],
        };
        let object = json!({"metadata": {"name": "w1"}, "spec": {"replicas": 3}});
        let table = table(&kind, &[object], json!({}), IncludeObject::None);
        let names: Vec<&str> = table["columnDefinitions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["Name", "Replicas", "Phase"]);
        assert_eq!(table["rows"][0]["cells"], json!(["w1", 3, null]));
        assert!(table["rows"][0].get("object").is_none());
    }
}
