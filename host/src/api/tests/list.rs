//! Listing through the API: pagination over one snapshot while writers
//! work, label selectors with every operator, field selectors.

use std::collections::BTreeSet;

use serde_json::json;

use super::*;
use crate::api::{DeleteOptions, ListOptions};

fn names(items: &[Object]) -> Vec<String> {
    items.iter().map(|o| meta::name(o).to_owned()).collect()
}

#[tokio::test]
async fn pages_taken_while_writers_work_form_the_first_pages_snapshot() {
    let api = api().await;
    let kind = widgets(&api).await;
    for i in 0..40 {
        api.create(&kind, widget(&format!("w{i:02}")))
            .await
            .unwrap();
    }
    let snapshot: BTreeSet<String> = (0..40).map(|i| format!("w{i:02}")).collect();
    let options = ListOptions {
        namespace: Some("default".into()),
        limit: 7,
        ..Default::default()
    };
    let first = api.list(&kind, &options).await.unwrap();
    assert_eq!(first.items.len(), 7);
    let revision = first.resource_version;

    let mut seen = names(&first.items);
    let mut token = first.continue_token.clone();
    let mut round = 0;
    while let Some(next) = token {
        // Between pages, writers delete an object the next page holds,
        // create one that sorts into it and change another.
        let base = round * 7 + 7;
        api.delete(
            &kind,
            Some("default"),
            &format!("w{:02}", base + 1),
            &DeleteOptions::default(),
        )
        .await
        .unwrap();
        api.create(&kind, widget(&format!("w{base:02}-new")))
            .await
            .unwrap();
        let patch = json!({"spec": {"image": format!("v{round}")}});
        api.merge_patch(
            &kind,
            Some("default"),
            &format!("w{:02}", base + 3),
            &patch,
            false,
        )
        .await
        .unwrap();
        round += 1;
        let page = api
            .list(
                &kind,
                &ListOptions {
                    continue_token: Some(next),
                    ..options.clone()
                },
            )
            .await
            .unwrap();
        assert_eq!(
            page.resource_version, revision,
            "every page is the same snapshot"
        );
        assert!(page.items.len() <= 7);
        for item in &page.items {
            assert_eq!(
                item["spec"]["image"], "nginx",
                "objects as they were at the snapshot"
            );
        }
        seen.extend(names(&page.items));
        token = page.continue_token;
    }
    assert!(round >= 5);
    assert_eq!(seen.len(), 40, "no duplicates, nothing missing");
    assert_eq!(seen.iter().cloned().collect::<BTreeSet<_>>(), snapshot);
    let now = api.list(&kind, &ListOptions::default()).await.unwrap();
    assert!(names(&now.items).iter().any(|n| n.ends_with("-new")));
    assert!(api.current_revision().await.unwrap() > revision);
}

async fn labelled(api: &Api, kind: &KindInfo) {
    for (name, labels) in [
        ("a", json!({"app": "web", "tier": "front"})),
        ("b", json!({"app": "web", "tier": "back"})),
        ("c", json!({"app": "db", "tier": "back", "canary": "true"})),
        ("d", json!({})),
    ] {
        let mut object = widget(name);
        object["metadata"]["labels"] = labels;
        api.create(kind, object).await.unwrap();
    }
}

#[tokio::test]
async fn label_selectors_support_every_operator() {
    let api = api().await;
    let kind = widgets(&api).await;
    labelled(&api, &kind).await;
    let select = |selector: &'static str| {
        let (api, kind) = (api.clone(), kind.clone());
        async move {
            let options = ListOptions {
                label_selector: Some(selector.into()),
                ..Default::default()
            };
            names(&api.list(&kind, &options).await.unwrap().items)
        }
    };
    assert_eq!(select("app=web").await, ["a", "b"]);
    assert_eq!(select("app==web").await, ["a", "b"]);
    assert_eq!(select("app!=web").await, ["c", "d"]);
    assert_eq!(select("tier in (front, back)").await, ["a", "b", "c"]);
    assert_eq!(select("tier notin (front)").await, ["b", "c", "d"]);
    assert_eq!(select("canary").await, ["c"]);
    assert_eq!(select("!canary").await, ["a", "b", "d"]);
    assert_eq!(select("app=web,tier=back").await, ["b"]);
    assert_eq!(select("").await, ["a", "b", "c", "d"]);
    let err = api
        .list(
            &kind,
            &ListOptions {
                label_selector: Some("app in (web".into()),
                ..Default::default()
            },
        )
        .await
        .unwrap_err();
    assert!(matches!(err, Error::BadRequest(_)), "{err}");
}

#[tokio::test]
async fn field_selectors_match_name_and_namespace_and_combine_with_labels() {
    let api = api().await;
    let kind = widgets(&api).await;
    labelled(&api, &kind).await;
    let mut elsewhere = widget("a");
    elsewhere["metadata"]["namespace"] = json!("other");
    api.create(&kind, elsewhere).await.unwrap();
    let list = |fields: &'static str, labels: Option<&'static str>, ns: Option<&'static str>| {
        let (api, kind) = (api.clone(), kind.clone());
        async move {
            let options = ListOptions {
                field_selector: Some(fields.into()),
                label_selector: labels.map(Into::into),
                namespace: ns.map(Into::into),
                ..Default::default()
            };
            api.list(&kind, &options)
                .await
                .unwrap()
                .items
                .iter()
                .map(|o| format!("{}/{}", meta::namespace(o).unwrap(), meta::name(o)))
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(
        list("metadata.name=a", None, None).await,
        ["default/a", "other/a"]
    );
    assert_eq!(
        list("metadata.name=a", None, Some("other")).await,
        ["other/a"]
    );
    assert_eq!(
        list("metadata.namespace=default,metadata.name!=a", None, None).await,
        ["default/b", "default/c", "default/d"]
    );
    assert_eq!(
        list("metadata.name!=b", Some("tier=back"), None).await,
        ["default/c"]
    );
    let err = api
        .list(
            &kind,
            &ListOptions {
                field_selector: Some("spec.image=nginx".into()),
                ..Default::default()
            },
        )
        .await
        .unwrap_err();
    assert!(matches!(err, Error::BadRequest(_)), "{err}");
}

#[tokio::test]
async fn a_selective_page_is_filled_across_store_pages() {
    let api = api().await;
    let kind = widgets(&api).await;
    for i in 0..20 {
        let mut object = widget(&format!("w{i:02}"));
        object["metadata"]["labels"] = json!({"even": (i % 2 == 0).to_string()});
        api.create(&kind, object).await.unwrap();
    }
    let options = ListOptions {
        label_selector: Some("even=true".into()),
        limit: 4,
        ..Default::default()
    };
    let first = api.list(&kind, &options).await.unwrap();
    assert_eq!(names(&first.items), ["w00", "w02", "w04", "w06"]);
    let mut all = names(&first.items);
    let mut token = first.continue_token;
    while let Some(t) = token {
        let page = api
            .list(
                &kind,
                &ListOptions {
                    continue_token: Some(t),
                    ..options.clone()
                },
            )
            .await
            .unwrap();
        all.extend(names(&page.items));
        token = page.continue_token;
    }
    assert_eq!(all.len(), 10);
    let list_json = api.list(&kind, &options).await.unwrap().to_json(&kind);
    assert_eq!(list_json["kind"], "WidgetList");
    assert!(list_json["metadata"]["continue"].is_string());
}

#[tokio::test]
async fn list_json_is_the_list_object_byte_for_byte_for_pages_and_selectors() {
    let api = api().await;
    let kind = widgets(&api).await;
    for i in 0..12 {
        let mut w = widget(&format!("w{i:02}"));
        w["metadata"]["labels"] = json!({"parity": if i % 2 == 0 { "even" } else { "odd" }});
        w["spec"]["image"] = json!(format!("a \"quoted\" }} ] {{ [ text {i}"));
        api.create(&kind, w).await.unwrap();
    }
    let cases = [
        ListOptions::default(),
        ListOptions {
            namespace: Some("default".into()),
            limit: 5,
            ..Default::default()
        },
        ListOptions {
            label_selector: Some("parity=odd".into()),
            limit: 4,
            ..Default::default()
        },
        ListOptions {
            field_selector: Some("metadata.name=w03".into()),
            ..Default::default()
        },
        ListOptions {
            namespace: Some("elsewhere".into()),
            ..Default::default()
        },
    ];
    for options in cases {
        let mut options = options;
        loop {
            let list = api.list(&kind, &options).await.unwrap();
            let text = api.list_json(&kind, &options).await.unwrap();
            assert_eq!(
                String::from_utf8(text.clone()).unwrap(),
                serde_json::to_string(&list.to_json(&kind)).unwrap(),
                "{options:?}"
            );
            let mut pages = api.list_json_pages(&kind, &options);
            let mut streamed = Vec::new();
            while let Some(chunk) = pages.next_chunk().await.unwrap() {
                streamed.extend_from_slice(&chunk);
            }
            assert_eq!(streamed, text, "streamed a page at a time: {options:?}");
            match list.continue_token {
                Some(token) => options.continue_token = Some(token),
                None => break,
            }
        }
    }
    let bad = ListOptions {
        label_selector: Some("a in (".into()),
        ..Default::default()
    };
    assert!(matches!(
        api.list_json(&kind, &bad).await,
        Err(Error::BadRequest(_))
    ));
    assert!(matches!(
        api.list_json_pages(&kind, &bad).next_chunk().await,
        Err(Error::BadRequest(_))
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_list_written_in_place_on_the_stores_threads_is_the_list_object() {
    // The embedded store writes a long page's items on its reader threads
    // (in parts, each item after a comma): many pages of many parts, with
    // text the splice of resourceVersion must step over.
    let dir = tempfile::tempdir().unwrap();
    let backend = Arc::new(crate::store::EmbeddedBackend::open(dir.path()).unwrap());
    let api = Api::open(backend).await.unwrap();
    let kind = widgets(&api).await;
    for i in 0..1500 {
        let mut w = widget(&format!("w{i:04}"));
        w["metadata"]["labels"] = json!({"n": i.to_string()});
        w["spec"]["image"] = json!(format!(
            "a \"quoted\" }} ] {{ [ text {}",
            "y".repeat(i % 97)
        ));
        if i == 777 {
            w["metadata"]["annotations"] = json!({"tab\tkey": "{\"resourceVersion\":\"1\"}"});
        }
        api.create(&kind, w).await.unwrap();
    }
    for options in [
        ListOptions::default(),
        ListOptions {
            limit: 700,
            ..Default::default()
        },
    ] {
        let mut options = options;
        let mut pages = 0;
        loop {
            let list = api.list(&kind, &options).await.unwrap();
            let mut streamed = Vec::new();
            let mut chunks = api.list_json_pages(&kind, &options);
            while let Some(chunk) = chunks.next_chunk().await.unwrap() {
                streamed.extend_from_slice(&chunk);
                pages += 1;
            }
            assert_eq!(
                String::from_utf8(streamed).unwrap(),
                serde_json::to_string(&list.to_json(&kind)).unwrap(),
                "{options:?}"
            );
            match list.continue_token {
                Some(token) => options.continue_token = Some(token),
                None => break,
            }
        }
        assert!(pages > 3, "{pages} chunks");
    }
}

#[tokio::test]
async fn a_list_at_an_exact_revision_shows_the_objects_as_they_were_then() {
    let api = api().await;
    let kind = widgets(&api).await;
    for i in 0..3 {
        api.create(&kind, widget(&format!("w{i}"))).await.unwrap();
    }
    let then = api.list(&kind, &ListOptions::default()).await.unwrap();
    let at = then.resource_version;
    api.create(&kind, widget("later")).await.unwrap();
    let exact = ListOptions {
        revision: Some(at),
        ..Default::default()
    };
    let listed = api.list(&kind, &exact).await.unwrap();
    assert_eq!(names(&listed.items), ["w0", "w1", "w2"]);
    assert_eq!(listed.resource_version, then.resource_version);
    let mut streamed = Vec::new();
    let mut pages = api.list_json_pages(&kind, &exact);
    while let Some(chunk) = pages.next_chunk().await.unwrap() {
        streamed.extend_from_slice(&chunk);
    }
    assert_eq!(streamed, api.list_json(&kind, &exact).await.unwrap());
    let future = ListOptions {
        revision: Some(at + 1000),
        ..Default::default()
    };
    let err = api.list(&kind, &future).await.unwrap_err();
    assert!(
        err.to_string().contains("Too large resource version"),
        "{err}"
    );
    // (A compacted revision is `Gone`, as for a continue token; not
    // compacted here: on etcd the suite's store is shared.)
}
