//! Tests of the cache: indexes, relists, text fills and shared keys.
use super::*;
use crate::object::meta;
use serde_json::json;

fn obj(name: &str, rv: &str, owner: Option<&str>) -> Object {
    let mut o = json!({"metadata": {"name": name, "namespace": "ns", "resourceVersion": rv}});
    if let Some(uid) = owner {
        o["metadata"]["ownerReferences"] = json!([{"uid": uid}]);
    }
    o
}

#[test]
fn owner_index_follows_upserts_and_removals() {
    let mut cache = Cache::default();
    cache.upsert(Arc::new(obj("a", "1", Some("o1"))), 1);
    cache.upsert(Arc::new(obj("b", "2", Some("o1"))), 2);
    assert_eq!(cache.owned_by("o1").len(), 2);
    cache.upsert(Arc::new(obj("b", "3", Some("o2"))), 3);
    assert_eq!(cache.owned_by("o1").len(), 1);
    assert_eq!(cache.owned_by("o2").len(), 1);
    cache.remove(&Arc::new(obj("a", "4", Some("o1"))), 4);
    assert!(cache.owned_by("o1").is_empty());
}

fn labelled(name: &str, ns: &str, rv: &str, app: &str) -> Object {
    json!({"metadata": {"name": name, "namespace": ns, "resourceVersion": rv, "labels": {"app": app}}})
}

#[test]
fn namespace_and_label_indexes_follow_upserts_and_removals() {
    let mut cache = Cache::default();
    cache.upsert(Arc::new(labelled("a", "one", "1", "web")), 1);
    cache.upsert(Arc::new(labelled("b", "one", "2", "db")), 2);
    cache.upsert(Arc::new(labelled("c", "two", "3", "web")), 3);
    assert_eq!(cache.in_namespace(Some("one")).len(), 2);
    assert_eq!(cache.with_label("app", "web").len(), 2);

    // Relabelled: leaves the old label's entry, joins the new one.
    cache.upsert(Arc::new(labelled("a", "one", "4", "db")), 4);
    assert_eq!(cache.with_label("app", "web").len(), 1);
    assert_eq!(cache.with_label("app", "db").len(), 2);

    cache.remove(&Arc::new(labelled("c", "two", "5", "web")), 5);
    assert!(cache.with_label("app", "web").is_empty());
    assert!(cache.in_namespace(Some("two")).is_empty());
    assert!(
        !cache
            .indexes
            .by_label
            .contains_key(&("app".into(), "web".into()))
    );
    assert!(
        !cache
            .indexes
            .by_namespace
            .contains_key(&Some("two".to_owned()))
    );
    assert_eq!(cache.len(), 2);
}

#[test]
fn relist_reports_only_what_changed() {
    let mut cache = Cache::default();
    cache.replace(vec![obj("a", "1", None), obj("b", "2", None)], 2);
    let changes = cache.replace(vec![obj("a", "1", None), obj("c", "5", None)], 5);
    let summary: Vec<(bool, String)> = changes
        .iter()
        .map(|c| {
            (
                matches!(c, Change::Deleted(_)),
                meta::name(c.object()).to_owned(),
            )
        })
        .collect();
    assert_eq!(summary, [(true, "b".to_owned()), (false, "c".to_owned())]);
    assert_eq!(cache.revision(), 5);
}

#[test]
fn an_object_nobody_holds_is_decoded_again_even_one_nested_past_the_parsers_limit() {
    let mut cache = Cache::default();
    let mut deep = json!("bottom");
    for _ in 0..300 {
        deep = json!([deep]);
    }
    let mut object = obj("deep", "1", Some("o1"));
    object["spec"] = deep;
    cache.upsert(Arc::new(object.clone()), 1);
    let key = ObjectKey::new(Some("ns"), "deep");
    assert_eq!(*cache.get(&key).unwrap(), object, "decoded from the text");
    let held = cache.get(&key).unwrap();
    assert!(
        Arc::ptr_eq(&held, &cache.get(&key).unwrap()),
        "shared while held"
    );
    assert_eq!(cache.owned_by("o1").len(), 1);
}

fn text(object: &Object) -> Vec<u8> {
    serde_json::to_vec(object).unwrap()
}

fn summary(changes: &[Change]) -> Vec<String> {
    changes
        .iter()
        .map(|c| {
            let what = match c {
                Change::Applied(_) => "applied",
                Change::Deleted(_) => "deleted",
                Change::Listed(_) => "listed",
            };
            format!("{what} {}", serde_json::to_string(&**c.object()).unwrap())
        })
        .collect()
}

#[test]
fn a_list_of_text_fills_the_cache_as_a_list_of_objects_does_and_decodes_nothing() {
    let first = [
        obj("a", "1", Some("o1")),
        labelled("b", "ns", "2", "web"),
        obj("gone", "3", None),
    ];
    let second = [
        obj("a", "1", Some("o1")),
        labelled("b", "ns", "6", "db"),
        obj("c", "5", None),
    ];
    let (mut objects, mut texts) = (Cache::default(), Cache::default());
    for (round, items) in [&first[..], &second[..]].into_iter().enumerate() {
        let want = objects.replace(items.to_vec(), 6);
        let pending = texts.replace_json(items.iter().map(text).collect(), 6);
        for (_, _, entry) in texts.objects.iter() {
            assert!(entry.held().is_none(), "nothing decoded");
        }
        let got: Vec<Change> = pending
            .into_iter()
            .filter_map(|p| texts.change(p, false))
            .collect();
        assert_eq!(summary(&got), summary(&want), "round {round}");
    }
    assert_eq!(texts.len(), 3);
    assert_eq!(texts.revision(), 6);
    assert_eq!(texts.owned_by("o1").len(), 1);
    assert_eq!(texts.with_label("app", "db").len(), 1);
    assert!(texts.with_label("app", "web").is_empty(), "relabelled");
    assert_eq!(texts.in_namespace(Some("ns")).len(), 3);
    let key = ObjectKey::new(Some("ns"), "c");
    assert_eq!(*texts.get(&key).unwrap(), obj("c", "5", None));

    // The first list's objects are listed, not applied.
    let mut fresh = Cache::default();
    let pending = fresh.replace_json(vec![text(&obj("a", "1", None))], 1);
    let listed: Vec<Change> = pending
        .into_iter()
        .filter_map(|p| fresh.change(p, true))
        .collect();
    assert_eq!(
        summary(&listed),
        [format!("listed {}", text_of(&obj("a", "1", None)))]
    );
}

fn text_of(object: &Object) -> String {
    serde_json::to_string(object).unwrap()
}

#[test]
fn a_key_is_held_once_and_an_updated_object_keeps_its_slot() {
    let mut cache = Cache::default();
    let mut pod = labelled("a", "ns", "1", "web");
    pod["metadata"]["ownerReferences"] = json!([{"uid": "o1"}]);
    cache.upsert(Arc::new(labelled("before", "ns", "1", "web")), 1);
    cache.upsert(Arc::new(pod.clone()), 1);
    let key = ObjectKey::new(Some("ns"), "a");
    let (slot, _, _) = cache.objects.get(&key).unwrap();
    pod["metadata"]["resourceVersion"] = json!("2");
    pod["metadata"]["labels"]["app"] = json!("db");
    cache.upsert(Arc::new(pod), 2);
    let (again, held, _) = cache.objects.get(&key).unwrap();
    assert_eq!(again, slot, "the slot is used again, not a new one taken");
    // The indexes hold slot numbers: the table's key is the only one.
    assert_eq!(Arc::strong_count(held), 1);
    assert_eq!(cache.objects.slot_count(), 2);
    assert_eq!(cache.with_label("app", "db").len(), 1);
    assert_eq!(cache.with_label("app", "web").len(), 1, "only `before`");
}

/// Upserts and removals in a random order, checked after each against a
/// plain map of what the cache should hold: slots freed and used again
/// never leave an index naming an object that moved out or went away.
#[test]
fn indexes_over_reused_slots_agree_with_a_plain_model() {
    use std::collections::{BTreeMap, BTreeSet};
    let mut rng = fastrand::Rng::with_seed(7);
    let mut cache = Cache::default();
    // name -> (namespace, app label, owner)
    let mut model: BTreeMap<String, (String, String, String)> = BTreeMap::new();
    for step in 1..=4_000i64 {
        let name = format!("p{}", rng.usize(..300));
        let namespace = format!("ns{}", name.len() % 2);
        if rng.u8(..4) == 0 {
            let mut gone = obj(&name, &step.to_string(), None);
            gone["metadata"]["namespace"] = json!(namespace);
            let removed = cache.remove(&Arc::new(gone), step).is_some();
            assert_eq!(removed, model.remove(&name).is_some(), "step {step}");
        } else {
            let app = format!("a{}", rng.u8(..5));
            let owner = format!("o{}", rng.u8(..7));
            let mut pod = labelled(&name, &namespace, &step.to_string(), &app);
            pod["metadata"]["ownerReferences"] = json!([{ "uid": owner }]);
            cache.upsert(Arc::new(pod), step);
            model.insert(name, (namespace, app, owner));
        }
        if step % 97 != 0 {
            continue;
        }
        let names = |objects: Vec<Arc<Object>>| -> BTreeSet<String> {
            objects.iter().map(|o| meta::name(o).to_owned()).collect()
        };
        let want = |pick: &dyn Fn(&(String, String, String)) -> bool| -> BTreeSet<String> {
            model
                .iter()
                .filter(|(_, v)| pick(v))
                .map(|(k, _)| k.clone())
                .collect()
        };
        assert_eq!(cache.len(), model.len());
        assert_eq!(names(cache.iter().collect()), want(&|_| true));
        for i in 0..5 {
            let app = format!("a{i}");
            assert_eq!(
                names(cache.with_label("app", &app)),
                want(&|v| v.1 == app),
                "step {step}"
            );
        }
        for i in 0..7 {
            let owner = format!("o{i}");
            assert_eq!(
                names(cache.owned_by(&owner)),
                want(&|v| v.2 == owner),
                "step {step}"
            );
        }
        for i in 0..2 {
            let namespace = format!("ns{i}");
            assert_eq!(
                names(cache.in_namespace(Some(&namespace))),
                want(&|v| v.0 == namespace),
                "step {step}"
            );
        }
        assert!(cache.objects.slot_count() <= 300, "slots are used again");
    }
}

#[test]
fn an_unchanged_object_is_not_a_change() {
    let mut cache = Cache::default();
    assert!(cache.upsert(Arc::new(obj("a", "1", None)), 1).is_some());
    assert!(cache.upsert(Arc::new(obj("a", "1", None)), 1).is_none());
}

/// A long list's terms are read on several threads: each text keeps its
/// own terms and its place.
#[test]
fn terms_of_a_long_list_are_read_in_order() {
    let texts: Vec<Vec<u8>> = (0..20_000)
        .map(|i| {
            serde_json::to_vec(
                &json!({"metadata": {"name": format!("p{i}"), "namespace": "ns",
                "resourceVersion": i.to_string(), "labels": {"n": format!("{}", i % 7)},
                "ownerReferences": [{"uid": format!("o{}", i % 3)}]}}),
            )
            .unwrap()
        })
        .collect();
    let stored = |texts: &[Vec<u8>]| -> Vec<super::Listed> {
        (0..)
            .zip(texts)
            .map(|(revision, text)| super::Listed::Stored(text.as_slice().into(), revision))
            .collect()
    };
    let held = |texts: &[Vec<u8>]| -> Vec<super::Listed> {
        texts.iter().cloned().map(super::Listed::Text).collect()
    };
    // Kept only where the store has it: each keeps its own revision.
    let stored = super::read_terms(stored(&texts));
    for (i, (terms, text)) in (0..).zip(&stored) {
        assert!(
            matches!(text, super::Text::Stored(r) if *r == i),
            "text {i} moved"
        );
        assert_eq!(terms.key.name, format!("p{i}"));
        let version = i.to_string();
        assert_eq!(
            terms.version.as_deref(),
            Some(&*version),
            "the store's revision"
        );
    }
    let read = super::read_terms(held(&texts));
    assert_eq!(read.len(), texts.len());
    for (i, ((terms, text), original)) in read.iter().zip(&texts).enumerate() {
        assert!(
            matches!(text, super::Text::Held(t) if **t == **original),
            "text {i} moved"
        );
        assert_eq!(terms.key.name, format!("p{i}"));
        assert_eq!(terms.owners, [format!("o{}", i % 3)]);
        assert_eq!(terms.labels, [("n".to_owned(), format!("{}", i % 7))]);
    }
    let mut cache = Cache::default();
    cache.replace_read(read, 20_000);
    assert_eq!(cache.len(), 20_000);
    assert_eq!(cache.owned_by("o1").len(), 6_667);
}
