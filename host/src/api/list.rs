//! Listing: label and field selectors, and pagination with `limit` and
//! `continue` pinned to one store revision so that every page is a slice of
//! the same snapshot. Deleting a collection is a list, then one
//! [`Api::delete`] per object listed.

use serde_json::{Value, json};

use super::{Api, Error, Result};
use crate::object::selector::LabelSelector;
use crate::object::{KindInfo, Object, codec, meta, raw};
use crate::store::{self, Range, Revision};

/// What to list.
///
/// ```
/// use setpoint::api::ListOptions;
/// let options = ListOptions::default().in_namespace("ops").with_label_selector("app=web").with_limit(100);
/// assert_eq!(options.continue_token, None);
/// ```
#[derive(Debug, Clone, Default)]
pub struct ListOptions {
    /// One namespace, or all.
    pub namespace: Option<String>,
    /// A label selector string (`app=web,tier!=db`).
    pub label_selector: Option<String>,
    /// A field selector on `metadata.name` / `metadata.namespace`.
    pub field_selector: Option<String>,
    /// At most this many items per page (0: all).
    pub limit: usize,
    /// The `continue` token of the previous page.
    pub continue_token: Option<String>,
    /// List at exactly this revision (`resourceVersionMatch=Exact`);
    /// `None` lists the latest. A revision compacted away is
    /// [`Error::Gone`]; a continue token's revision wins over it.
    pub revision: Option<Revision>,
}

impl ListOptions {
    /// These options, in one namespace.
    ///
    /// ```
    /// use setpoint::api::ListOptions;
    /// let options = ListOptions::default().in_namespace("team-a");
    /// assert_eq!(options.namespace.as_deref(), Some("team-a"));
    /// ```
    pub fn in_namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = Some(namespace.into());
        self
    }

    /// These options, keeping only objects whose labels match `selector`
    /// (`app=web`, `tier!=db`, `env in (a,b)`, `!legacy`, comma-separated).
    ///
    /// ```
    /// use setpoint::api::ListOptions;
    /// let options = ListOptions::default().with_label_selector("app=web,tier!=db");
    /// assert_eq!(options.label_selector.as_deref(), Some("app=web,tier!=db"));
    /// ```
    pub fn with_label_selector(mut self, selector: impl Into<String>) -> Self {
        self.label_selector = Some(selector.into());
        self
    }

    /// These options, keeping only objects whose fields match `selector`
    /// (`metadata.name=web`, `metadata.namespace!=kube-system`; on events
    /// also `involvedObject.*`, `reason` and `type`).
    ///
    /// ```
    /// use setpoint::api::ListOptions;
    /// let options = ListOptions::default().with_field_selector("metadata.name=web");
    /// assert_eq!(options.field_selector.as_deref(), Some("metadata.name=web"));
    /// ```
    pub fn with_field_selector(mut self, selector: impl Into<String>) -> Self {
        self.field_selector = Some(selector.into());
        self
    }

    /// These options, in pages of at most `limit` objects (0: one page).
    ///
    /// ```
    /// use setpoint::api::ListOptions;
    /// assert_eq!(ListOptions::default().with_limit(50).limit, 50);
    /// ```
    pub fn with_limit(mut self, limit: usize) -> Self {
        self.limit = limit;
        self
    }

    /// These options, for the page after the one that returned `token`.
    ///
    /// ```
    /// use setpoint::api::ListOptions;
    /// let next = ListOptions::default().with_limit(50).with_continue_token("7b22…");
    /// assert_eq!(next.continue_token.as_deref(), Some("7b22…"));
    /// ```
    pub fn with_continue_token(mut self, token: impl Into<String>) -> Self {
        self.continue_token = Some(token.into());
        self
    }
}

/// One page of a list.
///
/// ```
/// use std::sync::Arc;
/// use serde_json::json;
/// use setpoint::api::{Api, Error};
/// use setpoint::store::MemoryBackend;
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let api = Api::open(Arc::new(MemoryBackend::new())).await?;
/// let events = api.kinds().require("v1", "Event")?;
/// let event = |name: &str| json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": name}});
///
/// api.create(&events, event("e")).await?;
/// let list = api.list(&events, &Default::default()).await?;
/// assert_eq!((list.items.len(), list.resource_version, list.continue_token), (1, 1, None));
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct ObjectList {
    /// The objects, in key order.
    pub items: Vec<Object>,
    /// The store revision the list reflects.
    pub resource_version: Revision,
    /// Token for the next page, if any.
    pub continue_token: Option<String>,
}

impl ObjectList {
    /// This page as a Kubernetes `…List` object.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use serde_json::json;
    /// use setpoint::api::{Api, Error};
    /// use setpoint::store::MemoryBackend;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let api = Api::open(Arc::new(MemoryBackend::new())).await?;
    /// let events = api.kinds().require("v1", "Event")?;
    /// let event = |name: &str| json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": name}});
    ///
    /// api.create(&events, event("e")).await?;
    /// let list = api.list(&events, &Default::default()).await?.to_json(&events);
    /// assert_eq!(list["kind"], "EventList");
    /// assert_eq!(list["metadata"]["resourceVersion"], "1");
    /// # Ok(()) }
    /// ```
    pub fn to_json(&self, kind: &KindInfo) -> Value {
        let mut metadata = json!({"resourceVersion": self.resource_version.to_string()});
        if let Some(token) = &self.continue_token {
            metadata["continue"] = Value::String(token.clone());
        }
        json!({
            "apiVersion": kind.api_version(),
            "kind": kind.list_kind,
            "metadata": metadata,
            "items": self.items,
        })
    }
}

/// Requirements on `metadata.name` and `metadata.namespace`.
struct FieldSelector(Vec<(String, bool, String)>);

impl FieldSelector {
    fn parse(selector: &str) -> Result<Self> {
        let mut reqs = Vec::new();
        for term in selector.split(',').map(str::trim).filter(|t| !t.is_empty()) {
            let (field, equal, value) = if let Some((f, v)) = term.split_once("!=") {
                (f, false, v)
            } else if let Some((f, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
                (f, true, v)
            } else {
                return Err(Error::BadRequest(format!(
                    "invalid field selector term {term:?}"
                )));
            };
            let field = field.trim();
            // Besides name and namespace, the fields `kubectl describe`
            // selects events by (they exist on core Events only).
            if !matches!(
                field,
                "metadata.name"
                    | "metadata.namespace"
                    | "involvedObject.name"
                    | "involvedObject.namespace"
                    | "involvedObject.uid"
                    | "involvedObject.kind"
                    | "involvedObject.apiVersion"
                    | "involvedObject.resourceVersion"
                    | "involvedObject.fieldPath"
                    | "reason"
                    | "type"
            ) {
                return Err(Error::BadRequest(format!(
                    "field selector {field:?} is not supported (use metadata.name, metadata.namespace, or involvedObject.*, reason, type on events)"
                )));
            }
            reqs.push((field.to_owned(), equal, value.trim().to_owned()));
        }
        Ok(Self(reqs))
    }

    fn matches(&self, object: &Object) -> bool {
        self.0.iter().all(|(field, equal, value)| {
            let actual = match field.as_str() {
                "metadata.name" => meta::name(object),
                "metadata.namespace" => meta::namespace(object).unwrap_or(""),
                other => other
                    .split('.')
                    .try_fold(object, |v, key| v.get(key))
                    .and_then(Value::as_str)
                    .unwrap_or(""),
            };
            (actual == value) == *equal
        })
    }
}

pub(super) fn encode_continue(revision: Revision, after: &str) -> String {
    let raw = json!({"rv": revision, "start": after}).to_string();
    raw.bytes().map(|b| format!("{b:02x}")).collect()
}

pub(super) fn decode_continue(token: &str) -> Result<(Revision, String)> {
    let bad = || Error::BadRequest(format!("invalid continue token {token:?}"));
    if !token.len().is_multiple_of(2) {
        return Err(bad());
    }
    let bytes = (0..token.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&token[i..i + 2], 16))
        .collect::<Result<Vec<u8>, _>>()
        .map_err(|_| bad())?;
    let value: Value = serde_json::from_slice(&bytes).map_err(|_| bad())?;
    Ok((
        value["rv"].as_i64().ok_or_else(bad)?,
        value["start"].as_str().ok_or_else(bad)?.to_owned(),
    ))
}

impl Api {
    /// List objects of a kind. Pages continue at the first page's revision;
    /// a token whose revision was compacted away answers [`Error::Gone`].
    ///
    /// ```
    /// use std::sync::Arc;
    /// use serde_json::json;
    /// use setpoint::api::{Api, Error};
    /// use setpoint::store::MemoryBackend;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let api = Api::open(Arc::new(MemoryBackend::new())).await?;
    /// let events = api.kinds().require("v1", "Event")?;
    /// let event = |name: &str| json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": name}});
    ///
    /// use setpoint::api::ListOptions;
    /// for name in ["a", "b", "c"] {
    ///     api.create(&events, event(name)).await?;
    /// }
    /// let first = api.list(&events, &ListOptions::default().with_limit(2)).await?;
    /// api.create(&events, event("d")).await?; // not in the snapshot being paged
    /// let rest = api.list(&events, &ListOptions::default().with_continue_token(first.continue_token.unwrap())).await?;
    /// assert_eq!(first.items.len() + rest.items.len(), 3);
    /// let one = api.list(&events, &ListOptions::default().with_field_selector("metadata.name=d")).await?;
    /// assert_eq!(one.items.len(), 1);
    /// # Ok(()) }
    /// ```
    pub async fn list(&self, kind: &KindInfo, options: &ListOptions) -> Result<ObjectList> {
        let filter = Filter::parse(options)?;
        let mut items = Vec::new();
        let (resource_version, continue_token) = self
            .walk(kind, options, |kv| {
                let object = Self::decode(kv)?;
                let keep = filter.matches(&object);
                if keep {
                    items.push(object);
                }
                Ok(keep)
            })
            .await?;
        Ok(ObjectList {
            items,
            resource_version,
            continue_token,
        })
    }

    /// [`Api::list`] as the JSON text of the `…List` object
    /// ([`ObjectList::to_json`], byte for byte), written from the stored
    /// bytes: each object's resource version is spliced in
    /// (`object::raw`) rather than the object decoded and encoded again.
    /// Objects are decoded only to apply selectors, or where the splice
    /// does not apply.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use serde_json::json;
    /// use setpoint::api::Api;
    /// use setpoint::store::MemoryBackend;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let api = Api::open(Arc::new(MemoryBackend::new())).await?;
    /// let events = api.kinds().require("v1", "Event")?;
    /// api.create(&events, json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "e"}})).await?;
    /// let text = api.list_json(&events, &Default::default()).await?;
    /// let list = api.list(&events, &Default::default()).await?.to_json(&events);
    /// assert_eq!(text, serde_json::to_vec(&list)?);
    /// # Ok(()) }
    /// ```
    pub async fn list_json(&self, kind: &KindInfo, options: &ListOptions) -> Result<Vec<u8>> {
        // The streamed text, gathered: one writer of a list's JSON.
        let mut pages = self.list_json_pages(kind, options);
        let mut body = Vec::new();
        while let Some(chunk) = pages.next_chunk().await? {
            body.extend_from_slice(&chunk);
        }
        Ok(body)
    }

    /// Writes the stored object `kv` as the API's JSON (what
    /// `serde_json::to_vec` writes for [`Api::list`]'s item): its bytes with
    /// the resource version spliced in, or decoded and encoded where the
    /// splice does not apply. Informers fill their caches with this text.
    pub(crate) fn write_stored(kv: &store::KeyValue, out: &mut Vec<u8>) -> Result<()> {
        Self::write_version(kv.as_version(), out).map_err(Error::Store)
    }

    /// [`Api::write_stored`] of a version the store lends where it read it
    /// ([`store::Backend::range_written`]).
    pub(crate) fn write_version(
        version: store::VersionRef<'_>,
        out: &mut Vec<u8>,
    ) -> store::Result<()> {
        if !raw::with_resource_version(version.value, version.mod_revision, out) {
            let object = codec::decode(version.value, version.mod_revision)
                .map_err(|e| store::Error::Corrupt(format!("{}: {e}", version.key)))?;
            write_json(out, &object);
        }
        Ok(())
    }

    /// Walk the store for a list with `options`, page by page at one
    /// revision, handing each stored object to `take`, which says whether
    /// it counts towards `options.limit`. Returns the revision listed and
    /// the next page's token, if the limit cut the list short.
    async fn walk(
        &self,
        kind: &KindInfo,
        options: &ListOptions,
        mut take: impl FnMut(&store::KeyValue) -> Result<bool>,
    ) -> Result<(Revision, Option<String>)> {
        let (mut revision, mut start_after) = match &options.continue_token {
            Some(token) => {
                let (rv, start) = decode_continue(token)?;
                (Some(rv), Some(start))
            }
            None => (options.revision, None),
        };
        if let Some(rv) = options.revision {
            self.check_listable(rv).await?;
        }
        let prefix = Self::prefix(kind, options.namespace.as_deref());
        let mut taken = 0;
        loop {
            let want = if options.limit == 0 {
                0
            } else {
                options.limit - taken
            };
            let page = self
                .backend
                .range(Range {
                    prefix: prefix.clone(),
                    start_after: start_after.clone(),
                    limit: want,
                    revision,
                })
                .await
                .map_err(compacted_is_gone)?;
            revision = Some(page.revision);
            for kv in &page.kvs {
                if take(kv)? {
                    taken += 1;
                }
            }
            let last_key = page.kvs.last().map(|kv| kv.key.clone());
            let full = options.limit != 0 && taken >= options.limit;
            if !page.more || last_key.is_none() {
                return Ok((page.revision, None));
            }
            if full {
                let token = encode_continue(page.revision, last_key.as_deref().unwrap_or(""));
                return Ok((page.revision, Some(token)));
            }
            start_after = last_key;
        }
    }
}

impl Api {
    /// Refuse a list at a revision the store has not reached.
    pub(super) async fn check_listable(&self, revision: Revision) -> Result<()> {
        let current = self.backend.current_revision().await?;
        if revision > current {
            return Err(Error::BadRequest(format!(
                "Too large resource version: {revision}, current: {current}"
            )));
        }
        Ok(())
    }
}

/// A store error for a list: a compacted revision is [`Error::Gone`] (410).
pub(super) fn compacted_is_gone(err: store::Error) -> Error {
    match err {
        store::Error::Compacted {
            requested,
            compacted,
        } => Error::Gone {
            requested,
            oldest: compacted,
        },
        other => other.into(),
    }
}

/// A list's selectors.
pub(super) struct Filter {
    labels: LabelSelector,
    fields: FieldSelector,
    everything: bool,
}

impl Filter {
    pub(super) fn parse(options: &ListOptions) -> Result<Self> {
        let labels = match options.label_selector.as_deref() {
            Some(s) => LabelSelector::parse(s).map_err(|e| Error::BadRequest(e.to_string()))?,
            None => LabelSelector::default(),
        };
        let fields = FieldSelector::parse(options.field_selector.as_deref().unwrap_or(""))?;
        let everything = labels.is_empty() && fields.0.is_empty();
        Ok(Self {
            labels,
            fields,
            everything,
        })
    }

    /// Whether every object passes (no object needs decoding to tell).
    pub(super) fn is_everything(&self) -> bool {
        self.everything
    }

    pub(super) fn matches(&self, object: &Object) -> bool {
        self.labels.matches(meta::labels(object)) && self.fields.matches(object)
    }
}

/// `value` as JSON at the end of `out`.
pub(super) fn write_json(out: &mut Vec<u8>, value: &impl serde::Serialize) {
    // Strings and JSON values always serialise.
    serde_json::to_writer(out, value).expect("JSON serialises");
}

impl Api {
    /// Delete every object a list with `options` returns (`deletecollection`),
    /// each through [`Api::delete`] with `delete_options`, so finalizers,
    /// propagation and preconditions apply to each as to a single delete.
    /// An object gone meanwhile is skipped; the first other failure stops
    /// the deletion and is returned. Returns the objects as each delete left
    /// them (removed, or pending on finalizers).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use serde_json::json;
    /// use setpoint::api::{Api, DeleteOptions, ListOptions};
    /// use setpoint::store::MemoryBackend;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let api = Api::open(Arc::new(MemoryBackend::new())).await?;
    /// let events = api.kinds().require("v1", "Event")?;
    /// for (name, tier) in [("a", "web"), ("b", "web"), ("c", "db")] {
    ///     api.create(&events, json!({"apiVersion": "v1", "kind": "Event",
    ///         "metadata": {"name": name, "labels": {"tier": tier}}})).await?;
    /// }
    /// let web = ListOptions::default().with_label_selector("tier=web");
    /// let deleted = api.delete_collection(&events, &web, &DeleteOptions::default()).await?;
    /// assert_eq!(deleted.items.len(), 2);
    /// assert_eq!(api.list(&events, &ListOptions::default()).await?.items.len(), 1);
    /// # Ok(()) }
    /// ```
    pub async fn delete_collection(
        &self,
        kind: &KindInfo,
        options: &ListOptions,
        delete_options: &super::DeleteOptions,
    ) -> Result<ObjectList> {
        let listed = self
            .list(
                kind,
                &ListOptions {
                    limit: 0,
                    continue_token: None,
                    ..options.clone()
                },
            )
            .await?;
        let mut items = Vec::with_capacity(listed.items.len());
        for object in &listed.items {
            match self
                .delete(
                    kind,
                    meta::namespace(object),
                    meta::name(object),
                    delete_options,
                )
                .await
            {
                Ok(after) => items.push(after),
                Err(Error::NotFound { .. }) => {}
                Err(err) => return Err(err),
            }
        }
        Ok(ObjectList {
            items,
            resource_version: listed.resource_version,
            continue_token: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn continue_tokens_round_trip_and_garbage_is_rejected() {
        let token = encode_continue(42, "/registry/x/y/z");
        assert_eq!(
            decode_continue(&token).unwrap(),
            (42, "/registry/x/y/z".to_owned())
        );
        assert!(decode_continue("zz").is_err());
        assert!(decode_continue("abc").is_err());
    }

    #[test]
    fn field_selectors_support_name_namespace_and_event_fields_only() {
        let obj = json!({"metadata": {"name": "a", "namespace": "ns"}});
        assert!(
            FieldSelector::parse("metadata.name=a")
                .unwrap()
                .matches(&obj)
        );
        assert!(
            FieldSelector::parse("metadata.namespace!=other")
                .unwrap()
                .matches(&obj)
        );
        assert!(
            !FieldSelector::parse("metadata.name==b")
                .unwrap()
                .matches(&obj)
        );
        assert!(FieldSelector::parse("spec.x=1").is_err());
        let event =
            json!({"metadata": {"name": "e"}, "involvedObject": {"name": "a", "kind": "Pod"}});
        assert!(
            FieldSelector::parse("involvedObject.name=a,involvedObject.kind=Pod")
                .unwrap()
                .matches(&event)
        );
        assert!(
            !FieldSelector::parse("involvedObject.name=b")
                .unwrap()
                .matches(&event)
        );
    }
}
