//! The shape bounds every stored object keeps (`object::shape`): no write
//! path — create, update, every patch type, apply — stores an object nested
//! deeper than `MAX_DEPTH`, a JSON patch cannot build a huge or deep value
//! on the way to its final size check, and an object stored too deep by an
//! earlier version stays readable, fixable and deletable.

use serde_json::{Value, json};

use super::*;
use crate::api::{DeleteOptions, ListOptions};
use crate::object::patch::JsonPatch;
use crate::object::shape::MAX_DEPTH;
use crate::store::Condition;

/// `{"k": {"k": … leaf}}`, `levels` maps deep.
fn nested(levels: usize, leaf: Value) -> Value {
    (0..levels).fold(leaf, |inner, _| json!({ "k": inner }))
}

fn gadget_with_spec(name: &str, spec: Value) -> Object {
    let mut g = gadget(name);
    g["spec"] = spec;
    g
}

fn patch(ops: Value) -> JsonPatch {
    JsonPatch::from_value(&ops).unwrap()
}

#[tokio::test]
async fn a_json_patch_copying_a_value_into_its_own_depths_is_stopped_at_the_depth_bound() {
    // Each copy of /spec into its own deepest leaf doubles the nesting: ten
    // of them build a value thousands of levels deep, which overflowed the
    // stack of whatever cloned, compared or dropped it.
    let api = api().await;
    let kind = gadgets(&api).await;
    let start = json!({"a": {"b": {"c": 1}}});
    api.create(&kind, gadget_with_spec("g", start.clone()))
        .await
        .unwrap();
    let ops: Vec<Value> = (0..10)
        .map(|i| {
            let leaf = "/a/b/c".repeat(1 << i);
            json!({"op": "copy", "from": "/spec", "path": format!("/spec{leaf}")})
        })
        .collect();
    let before = api.current_revision().await.unwrap();
    let err = api
        .json_patch(&kind, None, "g", &patch(json!(ops)), false)
        .await
        .unwrap_err();
    assert_eq!(err.code(), 422, "{err}");
    let message = err.to_string();
    assert!(
        message.contains("operation 5 (copy") && message.contains("over the limit of 100"),
        "{message}"
    );
    assert_eq!(api.current_revision().await.unwrap(), before);
    assert_eq!(
        api.get(&kind, None, "g").await.unwrap()["spec"],
        start,
        "unchanged"
    );
}

#[tokio::test]
async fn a_json_patch_doubling_an_object_is_refused_before_it_is_built() {
    // 40 self-copies would double a 1 KiB spec to 2^40 KiB; each is checked
    // as it is made, so the patch ends at the size limit (413), having
    // built at most about twice the limit.
    let api = api().await;
    let kind = gadgets(&api).await;
    api.create(
        &kind,
        gadget_with_spec("g", json!({"payload": "x".repeat(1024)})),
    )
    .await
    .unwrap();
    let ops: Vec<Value> = (0..40)
        .map(|i| json!({"op": "copy", "from": "/spec", "path": format!("/spec/b{i}")}))
        .collect();
    let before = api.current_revision().await.unwrap();
    let err = api
        .json_patch(&kind, None, "g", &patch(json!(ops)), false)
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::TooLarge { limit, .. } if limit == api.max_object_bytes()),
        "{err}"
    );
    assert_eq!(err.code(), 413);
    assert_eq!(api.current_revision().await.unwrap(), before);

    // Many operations that each copy a large value are cut off too, by the
    // work they cause rather than by the size they leave behind.
    let small = api.clone().with_max_object_bytes(64 * 1024);
    small
        .create(
            &kind,
            gadget_with_spec("h", json!({"payload": "x".repeat(20 * 1024)})),
        )
        .await
        .unwrap();
    let churn: Vec<Value> = (0..2000)
        .flat_map(|_| {
            [
                json!({"op": "copy", "from": "/spec/payload", "path": "/spec/copy"}),
                json!({"op": "remove", "path": "/spec/copy"}),
            ]
        })
        .collect();
    let err = small
        .json_patch(&kind, None, "h", &patch(json!(churn)), false)
        .await
        .unwrap_err();
    assert_eq!(err.code(), 422, "{err}");
    assert!(err.to_string().contains("copies more than"), "{err}");

    let too_many: Vec<Value> = (0..10_001)
        .map(|_| json!({"op": "test", "path": "/spec/payload", "value": "x"}))
        .collect();
    let err = api
        .json_patch(&kind, None, "g", &patch(json!(too_many)), false)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("at most 10000"), "{err}");
}

#[tokio::test]
async fn no_write_path_stores_an_object_deeper_than_the_bound() {
    let api = api().await;
    let kind = gadgets(&api).await;
    // metadata and spec are one level; the spec's content the rest.
    let deepest_allowed = nested(MAX_DEPTH - 1, json!(1));
    let too_deep = nested(MAX_DEPTH, json!(1));
    api.create(&kind, gadget_with_spec("ok", deepest_allowed.clone()))
        .await
        .expect("exactly at the bound is fine");

    let before = api.current_revision().await.unwrap();
    let err = api
        .create(&kind, gadget_with_spec("deep", too_deep.clone()))
        .await
        .unwrap_err();
    assert_eq!(err.code(), 422);
    let Error::Invalid { causes, .. } = &err else {
        panic!("{err}")
    };
    assert!(causes[0].field.starts_with("spec.k.k.k"), "{causes:?}");
    assert!(
        causes[0].message.contains("nested too deeply"),
        "{causes:?}"
    );

    api.create(&kind, gadget("g")).await.unwrap();
    let before = before + 1;
    let mut replaced = api.get(&kind, None, "g").await.unwrap();
    replaced["spec"] = too_deep.clone();
    // A deep value added at a deep path: each is within what a request body
    // may nest, together they are not (this one used to be stored, and then
    // nothing of its kind could be read).
    let half = MAX_DEPTH / 2 + 5;
    let deep_path = format!("/spec{}", "/k".repeat(half));
    let applied = gadget_with_spec("g", too_deep.clone());
    let results = [
        api.update(&kind, replaced).await,
        api.merge_patch(&kind, None, "g", &json!({ "spec": too_deep }), false)
            .await,
        api.json_patch(
            &kind,
            None,
            "g",
            &patch(json!([
                {"op": "add", "path": "/spec", "value": nested(half, json!({}))},
                {"op": "add", "path": deep_path, "value": nested(half, json!(1))},
            ])),
            false,
        )
        .await,
        api.apply(&kind, applied, "tester", true).await,
    ];
    for result in results {
        let err = result.expect_err("too deep");
        assert_eq!(err.code(), 422, "{err}");
        assert!(err.to_string().contains("nest"), "{err}");
    }
    assert_eq!(api.current_revision().await.unwrap(), before);
    // The kind stays fully usable.
    let listed = api.list(&kind, &ListOptions::default()).await.unwrap();
    assert_eq!(listed.items.len(), 2);
}

#[tokio::test]
async fn an_object_stored_too_deep_by_an_earlier_version_is_read_fixed_and_deleted() {
    let api = api().await;
    let kind = gadgets(&api).await;
    api.create(&kind, gadget("neighbour")).await.unwrap();
    // What an earlier version let a JSON patch store: 220 levels.
    let deep = gadget_with_spec("deep", nested(219, json!(1)));
    api.backend()
        .put(
            &Api::key(&kind, None, "deep"),
            serde_json::to_vec(&deep).unwrap(),
            Condition::Absent,
        )
        .await
        .unwrap();

    let read = api.get(&kind, None, "deep").await.unwrap();
    assert_eq!(meta::name(&read), "deep");
    let listed = api.list(&kind, &ListOptions::default()).await.unwrap();
    assert_eq!(listed.items.len(), 2, "the kind still lists");

    // Replacing it keeps the bound; the shallower version is stored.
    let err = api
        .merge_patch(
            &kind,
            None,
            "deep",
            &json!({"metadata": {"labels": {"a": "b"}}}),
            false,
        )
        .await
        .unwrap_err();
    assert_eq!(err.code(), 422, "still too deep to write back: {err}");
    let fixed = api
        .merge_patch(&kind, None, "deep", &json!({"spec": null}), false)
        .await
        .unwrap();
    assert!(fixed.get("spec").is_none());

    // And a deep one can simply be deleted.
    api.backend()
        .put(
            &Api::key(&kind, None, "deeper"),
            serde_json::to_vec(&gadget_with_spec("deeper", nested(300, json!(1)))).unwrap(),
            Condition::Absent,
        )
        .await
        .unwrap();
    api.delete(&kind, None, "deeper", &DeleteOptions::default())
        .await
        .unwrap();
    assert!(matches!(
        api.get(&kind, None, "deeper").await,
        Err(Error::NotFound { .. })
    ));
}
