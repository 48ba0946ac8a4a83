//! Who may claim what, so that no plugin can take over another's work:
//! one reconciler per kind, one owner per definition.
//!
//! # Rules
//!
//! - **Kinds.** A kind (its group and name; every version is the same kind)
//!   is reconciled by one plugin. A second plugin that reconciles it is
//!   refused, naming the plugin that has it. Two reconcilers of one kind
//!   would each undo the other's writes.
//! - **Definitions.** A `CustomResourceDefinition` a plugin brings is owned
//!   by the first running plugin that brought it. Other plugins may carry
//!   the same definition (the example plugins carry the definitions of the
//!   kinds they own, so each loads alone), but one that brings a *different*
//!   definition under the same name is refused, naming the owner: it would
//!   otherwise be silently ignored, or, loaded first, change the meaning of
//!   another plugin's kind.
//! - **Precedence within one look at the directory.** Files loaded together
//!   (at start-up) claim by file name, except that a plugin *yields* to
//!   another of them, claiming after it, when the other reconciles a kind
//!   whose definition the first brings differently, or when both reconcile
//!   one kind and only the other brings its definition. So a plugin that
//!   squats on another's kind or definition cannot win by sorting first.
//! - **Recorded claims and pins** (`ownership`): a plugin the store
//!   records as a kind's claimant claims before the others at start-up, so
//!   the first claimant keeps its kind; a kind the operator pins to a
//!   plugin (its `PluginGrant`'s `spec.kinds`) is refused to any other,
//!   and the pinned plugin takes it, and its definition, from whoever holds
//!   them (they are *evicted*: stopped and refused). A definition of a kind
//!   pinned to another plugin that has not claimed it yet is carried but
//!   not owned.
//! - **At most [`MAX_DEFINITIONS`] definitions per plugin.**
//! - **When a plugin goes** (its file is removed, it is evicted, or it is
//!   refused on reload with another name), the plugins refused because of
//!   it are tried again at once (`reload.rs`), so its kind and definitions
//!   pass to the next claimant; each definition it owned passes otherwise
//!   to another running plugin that carries the same one; if none does, it is
//!   *orphaned*: the host deletes it when no object of its kind is stored,
//!   and keeps it (objects are data) otherwise, or when it is one host of a
//!   cluster (the others may still run the plugin).
//!
//! This module keeps the bookkeeping only; the host decides when to check,
//! claim and release (`reload.rs`, `Host::add_reconciler`).

use std::collections::BTreeMap;

use serde_json::Value;

use crate::controller::Manifest;
use crate::object::GroupVersionKind;

use super::Error;
use super::ownership::KindKey;

/// The most definitions one plugin may bring.
pub const MAX_DEFINITIONS: usize = 32;

/// What the running plugins have claimed.
#[derive(Debug, Default)]
pub(super) struct Claims {
    /// Each claiming plugin's kind and the definitions it carries.
    plugins: BTreeMap<String, Held>,
    /// Definition name → the plugin that owns it.
    owners: BTreeMap<String, String>,
    /// Kinds the operator pinned to a plugin.
    pins: BTreeMap<KindKey, String>,
}

/// What a plugin may claim, once [`Claims::check`] let it.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Allowed {
    /// Running plugins that hold what a pin gives it: they must be stopped
    /// and released before it claims.
    pub evict: Vec<String>,
    /// The definitions it will own (names), for which its version is the
    /// stored one.
    pub owns: Vec<String>,
}

#[derive(Debug)]
struct Held {
    kind: (String, String),
    /// Definition name → its `spec`, as the plugin brought it.
    definitions: BTreeMap<String, Value>,
}

/// The kind a definition's `spec` defines.
fn defined_kind(spec: &Value) -> KindKey {
    let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    (text(&spec["group"]), text(&spec["names"]["kind"]))
}

fn kind_of(manifest: &Manifest) -> (String, String) {
    let gvk = GroupVersionKind::from_api_version(
        &manifest.reconciles.api_version,
        &manifest.reconciles.kind,
    );
    (gvk.group, gvk.kind)
}

fn definitions_of(manifest: &Manifest) -> BTreeMap<String, Value> {
    manifest
        .definitions
        .iter()
        .map(|d| {
            (
                d["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
                d["spec"].clone(),
            )
        })
        .collect()
}

/// The definition `manifest` brings for `group`/`kind`, if any.
fn definition_for<'a>(
    manifest: &'a Manifest,
    (group, kind): &(String, String),
) -> Option<&'a Value> {
    manifest.definitions.iter().find(|d| {
        d["spec"]["group"] == group.as_str() && d["spec"]["names"]["kind"] == kind.as_str()
    })
}

/// Whether `manifest` must let `other`, loaded at the same time, claim
/// first (see the module documentation): `other` reconciles a kind whose
/// definition `manifest` brings differently without reconciling it, or
/// both reconcile one kind and only `other` brings its definition.
fn yields_to(manifest: &Manifest, other: &Manifest) -> bool {
    let theirs = kind_of(other);
    let Some(their_definition) = definition_for(other, &theirs) else {
        return false;
    };
    let mine = definition_for(manifest, &theirs);
    if kind_of(manifest) == theirs {
        return mine.is_none();
    }
    mine.is_some_and(|d| d["spec"] != their_definition["spec"])
}

/// Whether `manifest` yields to any of `others` (loaded together with it):
/// such plugins claim after the rest.
pub(super) fn yields(manifest: &Manifest, others: &[&Manifest]) -> bool {
    others
        .iter()
        .any(|other| other.name != manifest.name && yields_to(manifest, other))
}

impl Claims {
    /// Set the kinds pinned by the operator (`ownership::pins`).
    pub fn set_pins(&mut self, pins: BTreeMap<KindKey, String>) {
        self.pins = pins;
    }

    /// Whether `manifest` may claim its kind and definitions, given what
    /// the other plugins hold and the pins: what it may own and whom it
    /// evicts. `replacing` names the plugin the claimant replaces (the
    /// running version of the same file), whose claims do not count
    /// against it.
    pub fn check(&self, manifest: &Manifest, replacing: Option<&str>) -> Result<Allowed, Error> {
        let name = manifest.name.as_str();
        let other = |plugin: &str| plugin != name && Some(plugin) != replacing;
        if manifest.definitions.len() > MAX_DEFINITIONS {
            return Err(Error::TooManyDefinitions {
                plugin: name.to_owned(),
                count: manifest.definitions.len(),
            });
        }
        let kind = kind_of(manifest);
        let kind_text = || {
            format!(
                "{} {}",
                manifest.reconciles.api_version, manifest.reconciles.kind
            )
        };
        let mut allowed = Allowed::default();
        match self.pins.get(&kind) {
            Some(pinned) if other(pinned) => {
                return Err(Error::KindPinned {
                    plugin: name.to_owned(),
                    kind: kind_text(),
                    owner: pinned.clone(),
                });
            }
            _ => {}
        }
        let pinned_here = |kind: &KindKey| self.pins.get(kind).map(String::as_str) == Some(name);
        if let Some((holder, _)) = self
            .plugins
            .iter()
            .find(|(plugin, held)| other(plugin) && held.kind == kind)
        {
            if !pinned_here(&kind) {
                return Err(Error::KindTaken {
                    plugin: name.to_owned(),
                    kind: kind_text(),
                    owner: holder.clone(),
                });
            }
            allowed.evict.push(holder.clone());
        }
        for definition in &manifest.definitions {
            let definition_name = definition["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            let defined = defined_kind(&definition["spec"]);
            let pinned_elsewhere = self.pins.get(&defined).is_some_and(|p| p.as_str() != name);
            match self.owners.get(&definition_name).filter(|o| other(o)) {
                None => {
                    // Free (or its own): owned unless pinned to another.
                    if !pinned_elsewhere {
                        allowed.owns.push(definition_name);
                    }
                }
                Some(owner) => {
                    let theirs = self
                        .plugins
                        .get(owner)
                        .and_then(|held| held.definitions.get(&definition_name));
                    if theirs == Some(&definition["spec"]) {
                        continue;
                    }
                    if pinned_here(&defined) {
                        if !allowed.evict.contains(owner) {
                            allowed.evict.push(owner.clone());
                        }
                        allowed.owns.push(definition_name);
                    } else {
                        return Err(Error::DefinitionTaken {
                            plugin: name.to_owned(),
                            definition: definition_name,
                            owner: owner.clone(),
                        });
                    }
                }
            }
        }
        Ok(allowed)
    }

    /// Record `manifest`'s claims (after [`Claims::check`] passed and its
    /// definitions were registered), in place of those of an earlier version
    /// of the same plugin. Definitions nobody owns become its own; returns
    /// those the earlier version owned and nobody carries any more.
    pub fn claim(&mut self, manifest: &Manifest) -> Vec<String> {
        let previous = self.release(&manifest.name);
        let definitions = definitions_of(manifest);
        for (definition, spec) in &definitions {
            match self.pins.get(&defined_kind(spec)) {
                Some(pinned) if pinned == &manifest.name => {
                    self.owners
                        .insert(definition.clone(), manifest.name.clone());
                }
                // Pinned to another: carried, not owned.
                Some(_) => {}
                None => {
                    self.owners
                        .entry(definition.clone())
                        .or_insert_with(|| manifest.name.clone());
                }
            }
        }
        self.plugins.insert(
            manifest.name.clone(),
            Held {
                kind: kind_of(manifest),
                definitions,
            },
        );
        previous
            .into_iter()
            .filter(|d| !self.owners.contains_key(d))
            .collect()
    }

    /// Forget `plugin`'s claims. Each definition it owned passes to another
    /// plugin carrying the same one; the names of those nobody carries are
    /// returned (orphaned).
    pub fn release(&mut self, plugin: &str) -> Vec<String> {
        let Some(held) = self.plugins.remove(plugin) else {
            return Vec::new();
        };
        let mut orphaned = Vec::new();
        for (definition, spec) in held.definitions {
            if self.owners.get(&definition).map(String::as_str) != Some(plugin) {
                continue;
            }
            let heir = self
                .plugins
                .iter()
                .find(|(_, h)| h.definitions.get(&definition) == Some(&spec))
                .map(|(name, _)| name.clone());
            match heir {
                Some(heir) => {
                    self.owners.insert(definition, heir);
                }
                None => {
                    self.owners.remove(&definition);
                    orphaned.push(definition);
                }
            }
        }
        orphaned
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::object::KindRef;

    fn crd(plural: &str, group: &str, kind: &str, extra: Value) -> Value {
        json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": format!("{plural}.{group}")},
            "spec": {"group": group, "names": {"kind": kind, "plural": plural}, "extra": extra},
        })
    }

    fn manifest(name: &str, reconciles: (&str, &str), definitions: Vec<Value>) -> Manifest {
        Manifest {
            name: name.into(),
            version: "1".into(),
            reconciles: KindRef::new(reconciles.0, reconciles.1),
            owns: vec![],
            definitions,
            finalizer: None,
            destinations: vec![],
            secrets: vec![],
        }
    }

    fn pods() -> Value {
        crd("pods", "demo.setpoint.dev", "Pod", json!(null))
    }

    #[test]
    fn a_second_reconciler_of_a_kind_is_refused_in_any_version_and_named() {
        let mut claims = Claims::default();
        let podsim = manifest("podsim", ("demo.setpoint.dev/v1", "Pod"), vec![pods()]);
        claims.check(&podsim, None).unwrap();
        claims.claim(&podsim);
        for version in ["demo.setpoint.dev/v1", "demo.setpoint.dev/v2"] {
            let hijack = manifest("hijack", (version, "Pod"), vec![]);
            let err = claims.check(&hijack, None).unwrap_err().to_string();
            assert!(
                err.contains("already reconciled by plugin \"podsim\""),
                "{err}"
            );
        }
        // Its own next version, under a new name, replaces it.
        let renamed = manifest("podsim2", ("demo.setpoint.dev/v1", "Pod"), vec![pods()]);
        claims.check(&renamed, Some("podsim")).unwrap();
        // Another kind of the same group is free.
        let other = manifest("rs", ("demo.setpoint.dev/v1", "ReplicaSet"), vec![pods()]);
        claims.check(&other, None).unwrap();
    }

    #[test]
    fn a_different_definition_under_a_taken_name_is_refused_and_the_same_one_shared() {
        let mut claims = Claims::default();
        let podsim = manifest("podsim", ("demo.setpoint.dev/v1", "Pod"), vec![pods()]);
        claims.claim(&podsim);
        let carrier = manifest("rs", ("demo.setpoint.dev/v1", "ReplicaSet"), vec![pods()]);
        claims.check(&carrier, None).unwrap();
        let narrower = crd("pods", "demo.setpoint.dev", "Pod", json!({"max": 1}));
        let squat = manifest("squat", ("test.setpoint.dev/v1", "Squat"), vec![narrower]);
        let err = claims.check(&squat, None).unwrap_err().to_string();
        assert!(err.contains("pods.demo.setpoint.dev"), "{err}");
        assert!(err.contains("plugin \"podsim\""), "{err}");
        // The owner itself may bring a new version of its definition.
        let podsim2 = manifest(
            "podsim",
            ("demo.setpoint.dev/v1", "Pod"),
            vec![crd("pods", "demo.setpoint.dev", "Pod", json!(2))],
        );
        claims.check(&podsim2, None).unwrap();
    }

    #[test]
    fn more_definitions_than_allowed_are_refused() {
        let claims = Claims::default();
        let many = (0..=MAX_DEFINITIONS)
            .map(|i| {
                crd(
                    &format!("k{i}s"),
                    "test.setpoint.dev",
                    &format!("K{i}"),
                    json!(null),
                )
            })
            .collect();
        let err = claims
            .check(
                &manifest("many", ("test.setpoint.dev/v1", "K0"), many),
                None,
            )
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(&format!("{} definitions", MAX_DEFINITIONS + 1)),
            "{err}"
        );
    }

    #[test]
    fn a_released_definition_passes_to_a_carrier_or_is_orphaned() {
        let mut claims = Claims::default();
        let rs_crd = crd(
            "replicasets",
            "demo.setpoint.dev",
            "ReplicaSet",
            json!(null),
        );
        let podsim = manifest("podsim", ("demo.setpoint.dev/v1", "Pod"), vec![pods()]);
        let rs = manifest(
            "rs",
            ("demo.setpoint.dev/v1", "ReplicaSet"),
            vec![rs_crd, pods()],
        );
        claims.claim(&podsim);
        claims.claim(&rs);
        assert_eq!(
            claims.release("podsim"),
            Vec::<String>::new(),
            "rs carries it"
        );
        let podsim2 = manifest("podsim2", ("demo.setpoint.dev/v1", "Pod"), vec![]);
        claims.check(&podsim2, None).unwrap();
        let narrower = crd("pods", "demo.setpoint.dev", "Pod", json!({"max": 1}));
        let squat = manifest("squat", ("test.setpoint.dev/v1", "Squat"), vec![narrower]);
        assert!(claims.check(&squat, None).is_err(), "rs owns it now");
        let mut orphaned = claims.release("rs");
        orphaned.sort();
        assert_eq!(
            orphaned,
            ["pods.demo.setpoint.dev", "replicasets.demo.setpoint.dev"]
        );
        claims.check(&squat, None).unwrap();
    }

    #[test]
    fn squatters_and_hijackers_yield_to_the_plugin_whose_kind_it_is() {
        let rs_crd = crd(
            "replicasets",
            "demo.setpoint.dev",
            "ReplicaSet",
            json!(null),
        );
        let narrow_rs = crd(
            "replicasets",
            "demo.setpoint.dev",
            "ReplicaSet",
            json!({"max": 1}),
        );
        let squats = crd("squats", "test.setpoint.dev", "Squat", json!(null));
        let podsim = manifest("podsim", ("demo.setpoint.dev/v1", "Pod"), vec![pods()]);
        let rs = manifest(
            "rs",
            ("demo.setpoint.dev/v1", "ReplicaSet"),
            vec![rs_crd, pods()],
        );
        let squat = manifest(
            "squat",
            ("test.setpoint.dev/v1", "Squat"),
            vec![squats, narrow_rs],
        );
        let hijack = manifest("hijack", ("demo.setpoint.dev/v1", "Pod"), vec![]);
        let all = [&podsim, &rs, &squat, &hijack];
        assert!(yields(&squat, &all), "a different definition of rs's kind");
        assert!(
            yields(&hijack, &all),
            "podsim's kind, and podsim brings its definition"
        );
        assert!(
            !yields(&rs, &all),
            "carrying podsim's very definition is fine"
        );
        assert!(!yields(&podsim, &all));
    }

    #[test]
    fn a_pin_refuses_the_kind_to_others_and_evicts_whoever_holds_it() {
        let rs_crd = crd(
            "replicasets",
            "demo.setpoint.dev",
            "ReplicaSet",
            json!(null),
        );
        let narrow_rs = crd(
            "replicasets",
            "demo.setpoint.dev",
            "ReplicaSet",
            json!({"max": 1}),
        );
        let squats = crd("squats", "test.setpoint.dev", "Squat", json!(null));
        let mut claims = Claims::default();
        let hijack = manifest("hijack", ("demo.setpoint.dev/v1", "Pod"), vec![]);
        let squat = manifest(
            "squat",
            ("test.setpoint.dev/v1", "Squat"),
            vec![squats, narrow_rs],
        );
        claims.claim(&hijack);
        claims.claim(&squat);
        claims.set_pins(BTreeMap::from([
            (
                ("demo.setpoint.dev".to_owned(), "Pod".to_owned()),
                "podsim".to_owned(),
            ),
            (
                ("demo.setpoint.dev".to_owned(), "ReplicaSet".to_owned()),
                "rs".to_owned(),
            ),
        ]));
        let podsim = manifest("podsim", ("demo.setpoint.dev/v1", "Pod"), vec![pods()]);
        assert_eq!(
            claims.check(&podsim, None).unwrap(),
            Allowed {
                evict: vec!["hijack".into()],
                owns: vec!["pods.demo.setpoint.dev".into()],
            }
        );
        let rs = manifest("rs", ("demo.setpoint.dev/v1", "ReplicaSet"), vec![rs_crd]);
        let allowed = claims.check(&rs, None).unwrap();
        assert_eq!(
            allowed.evict,
            ["squat"],
            "it owns a different definition of a pinned kind"
        );
        assert_eq!(allowed.owns, ["replicasets.demo.setpoint.dev"]);
        // Once the pinned plugin runs, the squatter cannot come back.
        claims.release("squat");
        claims.claim(&rs);
        let err = claims.check(&squat, None).unwrap_err().to_string();
        assert!(err.contains("plugin \"rs\""), "{err}");
        let again = manifest("hijack", ("demo.setpoint.dev/v1", "Pod"), vec![]);
        let err = claims.check(&again, None).unwrap_err().to_string();
        assert!(err.contains("pinned to plugin \"podsim\""), "{err}");
    }

    #[test]
    fn a_definition_of_a_kind_pinned_elsewhere_is_carried_not_owned() {
        let mut claims = Claims::default();
        claims.set_pins(BTreeMap::from([(
            ("demo.setpoint.dev".to_owned(), "Pod".to_owned()),
            "podsim".to_owned(),
        )]));
        let carrier = manifest("rs", ("demo.setpoint.dev/v1", "ReplicaSet"), vec![pods()]);
        assert!(claims.check(&carrier, None).unwrap().owns.is_empty());
        claims.claim(&carrier);
        let podsim = manifest("podsim", ("demo.setpoint.dev/v1", "Pod"), vec![pods()]);
        assert_eq!(
            claims.check(&podsim, None).unwrap().owns,
            ["pods.demo.setpoint.dev"]
        );
    }
}
