//! Who owns a kind, kept in the store rather than in memory only, and the
//! operator's pins. `claims` keeps the bookkeeping of the running plugins;
//! this module reads and writes what outlives them:
//!
//! - **Recorded claims.** When a plugin claims a kind, the definition of
//!   that kind carries the annotation [`RECONCILED_BY`]; a definition it
//!   owns carries [`DEFINED_BY`] (and [`DEFINED_BY_VERSION`]). At start-up
//!   plugins that hold a recorded claim claim first, so the first claimant
//!   keeps its kind across restarts whatever the files' names.
//! - **Pins.** A `PluginGrant` may name the kinds that are its plugin's
//!   (`spec.kinds: ["demo.setpoint.dev/ReplicaSet"]`, group and kind): a
//!   pinned kind, and its definition, go to that plugin whoever came first,
//!   and no other plugin may claim them.
//! - **Definitions.** The owner's definition is the stored one: when the
//!   stored definition differs from what its owner brings (another plugin
//!   registered it first, or an older version of the owner), the owner's is
//!   applied, unless the stored one was written by a newer version of the
//!   same plugin (hosts of a cluster in a rolling upgrade do not undo each
//!   other).

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::api::{self, Api};
use crate::controller::Manifest;
use crate::egress::{GRANT_API_VERSION, GRANT_KIND};
use crate::object::{GroupVersionKind, meta};

/// On a definition: the plugin that reconciles its kind.
pub const RECONCILED_BY: &str = "setpoint.dev/reconciled-by";
/// On a definition: the plugin that owns it.
pub const DEFINED_BY: &str = "setpoint.dev/defined-by";
/// On a definition: the version of the plugin that wrote it.
pub const DEFINED_BY_VERSION: &str = "setpoint.dev/defined-by-version";

/// A kind as claims know it: its group and name (every version is the
/// same kind).
pub(super) type KindKey = (String, String);

/// Parse a pin, `group/Kind` (`Kind` alone for the core group).
fn parse_pin(pin: &str) -> KindKey {
    match pin.rsplit_once('/') {
        Some((group, kind)) => (group.to_owned(), kind.to_owned()),
        None => (String::new(), pin.to_owned()),
    }
}

/// The kinds pinned by the operator's grants: kind → plugin. A kind two
/// grants pin goes to the first grant by name, and the other pin is
/// reported.
pub(super) async fn pins(api: &Api) -> BTreeMap<KindKey, String> {
    let mut pins = BTreeMap::new();
    let Some(kind) = api.kinds().by_kind(GRANT_API_VERSION, GRANT_KIND) else {
        return pins;
    };
    let Ok(list) = api.list(&kind, &api::ListOptions::default()).await else {
        return pins;
    };
    let mut grants = list.items;
    grants.sort_by(|a, b| meta::name(a).cmp(meta::name(b)));
    for grant in &grants {
        let plugin = meta::name(grant);
        for pin in grant["spec"]["kinds"].as_array().into_iter().flatten() {
            let Some(pin) = pin.as_str() else { continue };
            let key = parse_pin(pin);
            match pins.get(&key) {
                Some(first) if first != plugin => {
                    tracing::warn!(kind = %pin, pinned_to = %first, also = %plugin, "a kind pinned by two PluginGrants goes to the first by name");
                }
                _ => {
                    pins.insert(key, plugin.to_owned());
                }
            }
        }
    }
    pins
}

/// The stored definition of the kind `manifest` reconciles, if the kind
/// is registered from one.
async fn stored_definition_of(api: &Api, manifest: &Manifest) -> Option<Value> {
    let info = api
        .kinds()
        .by_kind(&manifest.reconciles.api_version, &manifest.reconciles.kind)?;
    let name = format!("{}.{}", info.plural, info.group);
    api.get(&api.crd_kind(), None, &name).await.ok()
}

/// Set `annotation` to `value` on `object`.
fn annotate(object: &mut Value, annotation: &str, value: &str) {
    meta::metadata_mut(object)
        .entry("annotations")
        .or_insert_with(|| json!({}))[annotation] = json!(value);
}

/// Record `manifest`'s plugin (and version) as the owner on a definition.
fn stamp_owner(definition: &mut Value, manifest: &Manifest) {
    annotate(definition, DEFINED_BY, &manifest.name);
    annotate(definition, DEFINED_BY_VERSION, &manifest.version);
}

/// The kind `manifest` reconciles, as claims know it.
pub(super) fn kind_key(manifest: &Manifest) -> KindKey {
    let gvk = GroupVersionKind::from_api_version(
        &manifest.reconciles.api_version,
        &manifest.reconciles.kind,
    );
    (gvk.group, gvk.kind)
}

/// Whether the store records `manifest`'s plugin as the claimant of its
/// kind or the owner of a definition it brings: such plugins claim first.
pub(super) async fn holds_recorded_claim(api: &Api, manifest: &Manifest) -> bool {
    let names = |object: &Value, annotation: &str| {
        object["metadata"]["annotations"][annotation].as_str() == Some(manifest.name.as_str())
    };
    if let Some(stored) = stored_definition_of(api, manifest).await
        && names(&stored, RECONCILED_BY)
    {
        return true;
    }
    for definition in &manifest.definitions {
        if let Ok(stored) = api.get(&api.crd_kind(), None, meta::name(definition)).await
            && names(&stored, DEFINED_BY)
        {
            return true;
        }
    }
    false
}

/// Whether a definition written by `stored_version` of the same plugin is
/// newer than `version` (numbers compared as such, `1.10` after `1.9`).
fn newer(stored_version: &str, version: &str) -> bool {
    let parts = |v: &str| -> Vec<u64> {
        v.split(|c: char| !c.is_ascii_digit())
            .filter(|p| !p.is_empty())
            .filter_map(|p| p.parse().ok())
            .collect()
    };
    parts(stored_version) > parts(version)
}

/// Register the definitions `manifest`'s plugin owns (`owned`, names),
/// applying its version over a stored one that differs (see the module
/// documentation), and record it as their owner.
pub(super) async fn apply_definitions(
    api: &Api,
    manifest: &Manifest,
    owned: &[String],
) -> Result<(), api::Error> {
    let crd_kind = api.crd_kind();
    for definition in &manifest.definitions {
        let name = meta::name(definition);
        if !owned.iter().any(|o| o == name) {
            continue;
        }
        let mut wanted = definition.clone();
        stamp_owner(&mut wanted, manifest);
        match api.get(&crd_kind, None, name).await {
            Err(api::Error::NotFound { .. }) => match api.create(&crd_kind, wanted).await {
                Ok(_) => {
                    tracing::info!(plugin = %manifest.name, definition = %name, "registered kind");
                    continue;
                }
                // Another host (or a user) registered it meanwhile: look
                // at it as stored, next time.
                Err(api::Error::AlreadyExists { .. }) => {
                    let stored = api.get(&crd_kind, None, name).await?;
                    crate::system::definitions::register(api, &stored);
                    continue;
                }
                Err(err) => return Err(err),
            },
            Err(err) => return Err(err),
            Ok(stored) => {
                let stored_by = stored["metadata"]["annotations"][DEFINED_BY].as_str();
                let stored_version = stored["metadata"]["annotations"][DEFINED_BY_VERSION]
                    .as_str()
                    .unwrap_or_default();
                let same_spec = stored["spec"] == definition["spec"];
                let recorded =
                    stored_by == Some(manifest.name.as_str()) && stored_version == manifest.version;
                if same_spec && recorded {
                    crate::system::definitions::register(api, &stored);
                    continue;
                }
                if !same_spec
                    && stored_by == Some(manifest.name.as_str())
                    && newer(stored_version, &manifest.version)
                {
                    tracing::info!(plugin = %manifest.name, definition = %name, stored = %stored_version, "a newer version of the plugin wrote the stored definition; kept");
                    crate::system::definitions::register(api, &stored);
                    continue;
                }
                let mut next = stored.clone();
                next["spec"] = definition["spec"].clone();
                stamp_owner(&mut next, manifest);
                match api.update(&crd_kind, next).await {
                    Ok(updated) => {
                        crate::system::definitions::register(api, &updated);
                        if !same_spec {
                            tracing::info!(plugin = %manifest.name, version = %manifest.version, definition = %name, previous = ?stored_by, "the owner's definition applied over the stored one");
                        }
                    }
                    Err(err) => return Err(err),
                }
            }
        }
    }
    Ok(())
}

/// Record `manifest`'s plugin as the claimant of its kind on the kind's
/// stored definition (a kind without one, built in, is not recorded).
pub(super) async fn record_claim(api: &Api, manifest: &Manifest) {
    for _ in 0..5 {
        let Some(stored) = stored_definition_of(api, manifest).await else {
            return;
        };
        if stored["metadata"]["annotations"][RECONCILED_BY].as_str() == Some(manifest.name.as_str())
        {
            return;
        }
        let mut next = stored;
        annotate(&mut next, RECONCILED_BY, &manifest.name);
        match api.update(&api.crd_kind(), next).await {
            Err(api::Error::Conflict { .. }) => continue,
            Ok(_) => return,
            Err(err) => {
                tracing::warn!(plugin = %manifest.name, %err, "could not record the plugin's claim of its kind");
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_compare_as_numbers() {
        assert!(newer("1.10.0", "1.9.3"));
        assert!(!newer("1.9.3", "1.10.0"));
        assert!(!newer("0.1.0", "0.1.0"));
        assert!(newer("2", "1.99"));
    }

    #[test]
    fn a_pin_names_group_and_kind() {
        assert_eq!(
            parse_pin("demo.setpoint.dev/ReplicaSet"),
            ("demo.setpoint.dev".to_owned(), "ReplicaSet".to_owned())
        );
        assert_eq!(parse_pin("Secret"), (String::new(), "Secret".to_owned()));
    }
}
