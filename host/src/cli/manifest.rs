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
        crate::object::yaml::documents(text).map_err(|(document, err)| {
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
