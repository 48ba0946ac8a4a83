//! Reading manifests: YAML or JSON files, several YAML documents per file,
//! `List` objects expanded. Every document is checked before anything is
//! sent, and errors name the file and the document.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use serde_json::Value;

/// One object read from a manifest, with where it came from.
#[derive(Debug, Clone)]
pub struct Manifest {
    /// The file it came from.
    pub source: PathBuf,
    /// Its document number in the file (1-based).
    pub document: usize,
    /// The object.
    pub object: Value,
}

impl Manifest {
    /// `file (document N)`, for messages.
    pub fn origin(&self) -> String {
        format!("{} (document {})", self.source.display(), self.document)
    }
}

/// Read every object of a manifest file (`-` reads standard input).
pub fn read_manifests(path: &Path) -> anyhow::Result<Vec<Manifest>> {
    let text = if path == Path::new("-") {
        std::io::read_to_string(std::io::stdin()).context("reading standard input")?
    } else {
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?
    };
    parse_manifests(path, &text)
}

/// Parse manifest text (YAML, possibly several documents, or JSON).
pub fn parse_manifests(path: &Path, text: &str) -> anyhow::Result<Vec<Manifest>> {
    let is_json =
        path.extension().is_some_and(|e| e == "json") || text.trim_start().starts_with('{');
    let documents: Vec<Value> = if is_json {
        vec![
            serde_json::from_str(text)
                .with_context(|| format!("{} is not valid JSON", path.display()))?,
        ]
    } else {
        // Bounded work: deep nesting and alias bombs are refused before they
        // cost more than reading them (see `object::yaml`).
        setpoint::object::yaml::documents(text).map_err(|(document, err)| {
            anyhow::anyhow!(
                "{} (document {document}) is not valid YAML: {err}",
                path.display()
            )
        })?
    };
    let mut manifests = Vec::new();
    for (i, value) in documents.into_iter().enumerate() {
        let document = i + 1;
        if value.is_null() {
            continue; // an empty document, e.g. after a trailing `---`
        }
        let items = if value["kind"] == "List" {
            value["items"].as_array().cloned().unwrap_or_default()
        } else {
            vec![value]
        };
        for object in items {
            let manifest = Manifest {
                source: path.to_owned(),
                document,
                object,
            };
            check(&manifest)?;
            manifests.push(manifest);
        }
    }
    if manifests.is_empty() {
        bail!("{} contains no objects", path.display());
    }
    Ok(manifests)
}

/// A document that could not be read: where it is (`file (document N)`),
/// and why.
pub type Unreadable = (String, String);

/// Every object of a manifest file, each document on its own: a document
/// that does not parse is named with its error and the others are still
/// read (`setpoint plan` plans the rest). The objects are not checked
/// here; whoever takes them reports what is wrong with each.
pub fn read_documents(path: &Path) -> anyhow::Result<(Vec<Manifest>, Vec<Unreadable>)> {
    let text = if path == Path::new("-") {
        std::io::read_to_string(std::io::stdin()).context("reading standard input")?
    } else {
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?
    };
    let mut manifests = Vec::new();
    let mut errors = Vec::new();
    let origin = |document: usize| format!("{} (document {document})", path.display());
    for (i, chunk) in split_documents(path, &text).into_iter().enumerate() {
        let document = i + 1;
        let parsed = if chunk.trim_start().starts_with('{') {
            serde_json::from_str::<Value>(chunk)
                .map(|v| vec![v])
                .map_err(|e| format!("not valid JSON: {e}"))
        } else {
            setpoint::object::yaml::documents(chunk)
                .map_err(|(_, e)| format!("not valid YAML: {e}"))
        };
        match parsed {
            Err(message) => errors.push((origin(document), message)),
            Ok(values) => {
                for value in values.into_iter().filter(|v| !v.is_null()) {
                    let items = if value["kind"] == "List" {
                        value["items"].as_array().cloned().unwrap_or_default()
                    } else {
                        vec![value]
                    };
                    manifests.extend(items.into_iter().map(|object| Manifest {
                        source: path.to_owned(),
                        document,
                        object,
                    }));
                }
            }
        }
    }
    if manifests.is_empty() && errors.is_empty() {
        bail!("{} contains no objects", path.display());
    }
    Ok((manifests, errors))
}

/// The text of each document: JSON is one, YAML is split at its `---`
/// lines (so that one broken document does not hide the others).
fn split_documents<'t>(path: &Path, text: &'t str) -> Vec<&'t str> {
    if path.extension().is_some_and(|e| e == "json") || text.trim_start().starts_with('{') {
        return vec![text];
    }
    let mut documents = Vec::new();
    let mut start = 0;
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        let bare = line.trim_end();
        if bare == "---" || bare.starts_with("--- ") {
            if !text[start..offset].trim().is_empty() {
                documents.push(&text[start..offset]);
            }
            start = offset + line.len();
        }
        offset += line.len();
    }
    if !text[start..].trim().is_empty() {
        documents.push(&text[start..]);
    }
    documents
}

fn check(manifest: &Manifest) -> anyhow::Result<()> {
    let object = &manifest.object;
    if !object.is_object() {
        bail!(
            "{}: expected an object with apiVersion, kind and metadata, found {}",
            manifest.origin(),
            type_name(object)
        );
    }
    for field in ["apiVersion", "kind"] {
        if object[field].as_str().is_none_or(str::is_empty) {
            bail!("{}: missing required field {field:?}", manifest.origin());
        }
    }
    if object["metadata"]["name"]
        .as_str()
        .is_none_or(str::is_empty)
    {
        bail!(
            "{}: {} has no metadata.name",
            manifest.origin(),
            object["kind"].as_str().unwrap_or("")
        );
    }
    Ok(())
}

fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "nothing",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_broken_document_is_named_and_the_others_are_still_read() {
        let dir = std::env::temp_dir().join(format!("setpoint-docs-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("m.yaml");
        std::fs::write(
            &path,
            "apiVersion: v1\nkind: Event\nmetadata: {name: a}\n---\nkind: [unclosed\n---\n\"just text\"\n--- \napiVersion: v1\nkind: Event\nmetadata: {name: b}\n",
        )
        .unwrap();
        let (manifests, errors) = read_documents(&path).unwrap();
        let names: Vec<_> = manifests
            .iter()
            .map(|m| {
                (
                    m.document,
                    m.object["metadata"]["name"].as_str().unwrap_or("-"),
                )
            })
            .collect();
        assert_eq!(names, [(1, "a"), (3, "-"), (4, "b")], "unchecked, in order");
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(errors[0].0.ends_with("m.yaml (document 2)"), "{errors:?}");
        assert!(errors[0].1.starts_with("not valid YAML"), "{errors:?}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn multi_document_yaml_and_lists_are_read_in_order() {
        let text = "apiVersion: v1\nkind: A\nmetadata: {name: a}\n---\n---\nkind: List\napiVersion: v1\nitems:\n- {apiVersion: v1, kind: B, metadata: {name: b}}\n";
        let m = parse_manifests(Path::new("x.yaml"), text).unwrap();
        let names: Vec<_> = m
            .iter()
            .map(|m| m.object["metadata"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["a", "b"]);
        assert_eq!(m[1].document, 3);
    }

    #[test]
    fn json_manifests_are_accepted() {
        let m = parse_manifests(
            Path::new("x.json"),
            r#"{"apiVersion":"v1","kind":"A","metadata":{"name":"a"}}"#,
        )
        .unwrap();
        assert_eq!(m.len(), 1);
    }

    #[test]
    fn bad_manifests_name_the_file_document_and_problem() {
        let err = parse_manifests(Path::new("x.yaml"), "apiVersion: v1\nkind: A\nmetadata: {name: a}\n---\napiVersion: v1\nkind: B\nmetadata: {}\n").unwrap_err();
        assert_eq!(
            err.to_string(),
            "x.yaml (document 2): B has no metadata.name"
        );
        let err = parse_manifests(Path::new("x.yaml"), "kind: [unclosed").unwrap_err();
        assert!(
            err.to_string()
                .contains("x.yaml (document 1) is not valid YAML"),
            "{err}"
        );
        let err = parse_manifests(Path::new("x.yaml"), "metadata: {name: a}\n").unwrap_err();
        assert!(
            err.to_string()
                .contains("missing required field \"apiVersion\""),
            "{err}"
        );
        let err = parse_manifests(Path::new("x.json"), "{\"a\": ").unwrap_err();
        assert!(err.to_string().contains("not valid JSON"), "{err}");
        let err = parse_manifests(Path::new("x.yaml"), "- 1\n- 2\n").unwrap_err();
        assert!(err.to_string().contains("found a list"), "{err}");
    }
}
