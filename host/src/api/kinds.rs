//! The kind registry: built-in kinds plus those registered by
//! `CustomResourceDefinition` objects, looked up by kind or by plural.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use serde_json::Value;

use super::Error;
use crate::object::KindInfo;

/// The group of `CustomResourceDefinition`.
pub const CRD_GROUP: &str = "apiextensions.k8s.io";

/// Registered kinds; cheap to clone, shared by every user of one store.
#[derive(Clone, Default)]
pub struct KindRegistry {
    kinds: Arc<RwLock<KindsByPlural>>,
}

/// Kinds keyed by (group, plural).
type KindsByPlural = HashMap<(String, String), Arc<KindInfo>>;

impl KindRegistry {
    /// A registry with the built-in kinds: `CustomResourceDefinition` and core `Event`.
    pub fn with_builtins() -> Self {
        let registry = Self::default();
        registry.insert(KindInfo {
            group: CRD_GROUP.into(),
            version: "v1".into(),
            kind: "CustomResourceDefinition".into(),
            plural: "customresourcedefinitions".into(),
            singular: "customresourcedefinition".into(),
            short_names: vec!["crd".into(), "crds".into()],
            list_kind: "CustomResourceDefinitionList".into(),
            namespaced: false,
            status_subresource: true,
            schema: None,
            printer_columns: vec![],
        });
        registry.insert(KindInfo {
            group: String::new(),
            version: "v1".into(),
            kind: "Event".into(),
            plural: "events".into(),
            singular: "event".into(),
            short_names: vec!["ev".into()],
            list_kind: "EventList".into(),
            namespaced: true,
            status_subresource: false,
            schema: None,
            printer_columns: vec![],
        });
        registry
    }

    /// Add or replace a kind.
    pub fn insert(&self, info: KindInfo) {
        let key = (info.group.clone(), info.plural.clone());
        self.kinds
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key, Arc::new(info));
    }

    /// Remove a kind by group and plural.
    pub fn remove(&self, group: &str, plural: &str) {
        self.kinds
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&(group.to_owned(), plural.to_owned()));
    }

    /// Look a kind up by group and plural (URL form).
    pub fn by_plural(&self, group: &str, plural: &str) -> Option<Arc<KindInfo>> {
        self.kinds
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&(group.to_owned(), plural.to_owned()))
            .cloned()
    }

    /// Look a kind up by `apiVersion` and `kind` (manifest form).
    pub fn by_kind(&self, api_version: &str, kind: &str) -> Option<Arc<KindInfo>> {
        let gvk = crate::object::GroupVersionKind::from_api_version(api_version, kind);
        self.kinds
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .find(|k| k.group == gvk.group && k.version == gvk.version && k.kind == gvk.kind)
            .cloned()
    }

    /// Look a kind up, or fail with [`Error::UnknownKind`].
    pub fn require(&self, api_version: &str, kind: &str) -> Result<Arc<KindInfo>, Error> {
        self.by_kind(api_version, kind)
            .ok_or_else(|| Error::UnknownKind(format!("{api_version}/{kind}")))
    }

    /// Every registered kind, sorted by group then kind.
    pub fn all(&self) -> Vec<Arc<KindInfo>> {
        let mut all: Vec<_> = self
            .kinds
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect();
        all.sort_by(|a, b| (&a.group, &a.kind).cmp(&(&b.group, &b.kind)));
        all
    }
}

/// Read the kind a `CustomResourceDefinition` registers, checking the fields
/// the host relies on. Errors name the field path.
pub fn kind_from_crd(crd: &Value) -> Result<KindInfo, Error> {
    let name = crd["metadata"]["name"].as_str().unwrap_or("");
    let invalid =
        |field: &str, msg: &str| Error::invalid("CustomResourceDefinition", name, field, msg);
    let spec = &crd["spec"];
    let group = spec["group"]
        .as_str()
        .filter(|g| !g.is_empty())
        .ok_or_else(|| invalid("spec.group", "required"))?;
    let names = &spec["names"];
    let kind = names["kind"]
        .as_str()
        .filter(|k| !k.is_empty())
        .ok_or_else(|| invalid("spec.names.kind", "required"))?;
    let plural = names["plural"]
        .as_str()
        .filter(|p| !p.is_empty())
        .ok_or_else(|| invalid("spec.names.plural", "required"))?;
    if name != format!("{plural}.{group}") {
        return Err(invalid(
            "metadata.name",
            &format!("must be spec.names.plural+\".\"+spec.group: {plural}.{group}"),
        ));
    }
    let scope = spec["scope"].as_str().unwrap_or("Namespaced");
    let namespaced = match scope {
        "Namespaced" => true,
        "Cluster" => false,
        other => {
            return Err(invalid(
                "spec.scope",
                &format!("must be Namespaced or Cluster, not {other:?}"),
            ));
        }
    };
    let versions = spec["versions"]
        .as_array()
        .filter(|v| !v.is_empty())
        .ok_or_else(|| invalid("spec.versions", "at least one version is required"))?;
    let version = versions
        .iter()
        .find(|v| v["storage"].as_bool() == Some(true))
        .or_else(|| {
            versions
                .iter()
                .find(|v| v["served"].as_bool() != Some(false))
        })
        .unwrap_or(&versions[0]);
    let version_name = version["name"]
        .as_str()
        .filter(|v| !v.is_empty())
        .ok_or_else(|| invalid("spec.versions[0].name", "required"))?;
    Ok(KindInfo {
        group: group.to_owned(),
        version: version_name.to_owned(),
        kind: kind.to_owned(),
        plural: plural.to_owned(),
        singular: names["singular"]
            .as_str()
            .map(str::to_owned)
            .unwrap_or_else(|| kind.to_lowercase()),
        short_names: names["shortNames"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|s| s.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default(),
        list_kind: names["listKind"]
            .as_str()
            .map(str::to_owned)
            .unwrap_or_else(|| format!("{kind}List")),
        namespaced,
        status_subresource: version["subresources"]["status"].is_object(),
        schema: version["schema"].get("openAPIV3Schema").cloned(),
        printer_columns: version["additionalPrinterColumns"]
            .as_array()
            .cloned()
            .unwrap_or_default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_crd_registers_its_kind_and_bad_ones_name_the_field() {
        let crd = json!({"metadata": {"name": "widgets.example.dev"}, "spec": {
            "group": "example.dev", "scope": "Namespaced",
            "names": {"kind": "Widget", "plural": "widgets", "shortNames": ["wd"]},
            "versions": [{"name": "v1", "served": true, "storage": true,
                          "subresources": {"status": {}}}]}});
        let info = kind_from_crd(&crd).unwrap();
        assert_eq!(
            (
                info.kind.as_str(),
                info.plural.as_str(),
                info.singular.as_str()
            ),
            ("Widget", "widgets", "widget")
        );
        assert!(info.namespaced && info.status_subresource);
        assert_eq!(info.list_kind, "WidgetList");

        let mut bad = crd.clone();
        bad["metadata"]["name"] = json!("wrong");
        assert!(
            kind_from_crd(&bad)
                .unwrap_err()
                .to_string()
                .contains("metadata.name")
        );
        let mut bad = crd;
        bad["spec"]["names"]["plural"] = json!(null);
        assert!(
            kind_from_crd(&bad)
                .unwrap_err()
                .to_string()
                .contains("spec.names.plural")
        );
    }
}
