//! Create, get, update and status: identity, generation, the status
//! sub-resource, optimistic concurrency, no-op writes and definitions.

use serde_json::json;

use super::*;

#[tokio::test]
async fn a_created_object_gets_its_identity_from_the_host() {
    let api = api().await;
    let kind = widgets(&api).await;
    let mut input = widget("a");
    input["metadata"]["uid"] = json!("client-chosen");
    input["metadata"]["generation"] = json!(7);
    input["metadata"]["resourceVersion"] = json!("99");
    input["metadata"]["deletionTimestamp"] = json!("2020-01-01T00:00:00Z");
    let created = api.create(&kind, input).await.unwrap();
    assert_ne!(meta::uid(&created), "client-chosen");
    assert_eq!(meta::uid(&created).len(), 36);
    assert_eq!(meta::generation(&created), 1);
    assert!(created["metadata"]["creationTimestamp"].is_string());
    assert!(meta::deletion_timestamp(&created).is_none());
    assert_eq!(
        meta::resource_version(&created),
        Some(api.current_revision().await.unwrap().to_string().as_str())
    );
    assert_eq!(api.get(&kind, Some("default"), "a").await.unwrap(), created);
    let again = api.create(&kind, widget("a")).await.unwrap_err();
    assert!(matches!(again, Error::AlreadyExists { .. }), "{again}");
}

#[tokio::test]
async fn a_namespaced_object_without_a_namespace_goes_to_default() {
    let api = api().await;
    let kind = widgets(&api).await;
    let mut input = widget("a");
    meta::metadata_mut(&mut input).remove("namespace");
    let created = api.create(&kind, input).await.unwrap();
    assert_eq!(meta::namespace(&created), Some("default"));
}

#[tokio::test]
async fn generation_moves_only_when_the_spec_changes() {
    let api = api().await;
    let kind = widgets(&api).await;
    let created = api.create(&kind, widget("a")).await.unwrap();

    let mut relabelled = created.clone();
    relabelled["metadata"]["labels"] = json!({"tier": "web"});
    relabelled["metadata"]["annotations"] = json!({"note": "hi"});
    let relabelled = api.update(&kind, relabelled).await.unwrap();
    assert_eq!(meta::generation(&relabelled), 1, "metadata is not spec");

    let mut status = relabelled.clone();
    status["status"] = json!({"phase": "Running"});
    let status = api.update_status(&kind, status).await.unwrap();
    assert_eq!(meta::generation(&status), 1, "status is not spec");

    let mut respec = status.clone();
    respec["spec"]["image"] = json!("httpd");
    let respec = api.update(&kind, respec).await.unwrap();
    assert_eq!(meta::generation(&respec), 2);

    let mut generation_forged = respec.clone();
    generation_forged["metadata"]["generation"] = json!(40);
    generation_forged["metadata"]["uid"] = json!(meta::uid(&respec));
    let kept = api.update(&kind, generation_forged).await.unwrap();
    assert_eq!(meta::generation(&kept), 2, "generation is the host's");
}

#[tokio::test]
async fn status_is_isolated_from_spec_writes_in_both_directions() {
    let api = api().await;
    let kind = widgets(&api).await;
    let mut input = widget("a");
    input["status"] = json!({"phase": "Running"});
    let created = api.create(&kind, input).await.unwrap();
    assert!(created.get("status").is_none(), "create ignores status");

    let mut with_status = created.clone();
    with_status["status"] = json!({"phase": "Pending", "replicas": 1});
    let with_status = api.update_status(&kind, with_status).await.unwrap();
    assert_eq!(with_status["status"]["phase"], "Pending");

    // A spec update carrying another status keeps the stored status.
    let mut spec_write = with_status.clone();
    spec_write["spec"]["image"] = json!("httpd");
    spec_write["status"] = json!({"phase": "Running"});
    let after_spec = api.update(&kind, spec_write).await.unwrap();
    assert_eq!(after_spec["spec"]["image"], "httpd");
    assert_eq!(
        after_spec["status"],
        json!({"phase": "Pending", "replicas": 1})
    );

    // A status update carrying another spec and labels keeps both as stored.
    let mut status_write = after_spec.clone();
    status_write["spec"]["image"] = json!("ignored");
    status_write["metadata"]["labels"] = json!({"ignored": "yes"});
    status_write["status"] = json!({"phase": "Running"});
    let after_status = api.update_status(&kind, status_write).await.unwrap();
    assert_eq!(after_status["spec"]["image"], "httpd");
    assert!(meta::labels(&after_status).is_none());
    assert_eq!(after_status["status"], json!({"phase": "Running"}));
}

#[tokio::test]
async fn a_stale_resource_version_is_a_conflict_and_writes_nothing() {
    let api = api().await;
    let kind = widgets(&api).await;
    let first = api.create(&kind, widget("a")).await.unwrap();
    let mut newer = first.clone();
    newer["spec"]["image"] = json!("v2");
    api.update(&kind, newer).await.unwrap();
    let before = api.current_revision().await.unwrap();

    let mut stale = first.clone();
    stale["spec"]["image"] = json!("v3");
    let err = api.update(&kind, stale.clone()).await.unwrap_err();
    assert!(matches!(err, Error::Conflict { .. }), "{err}");
    assert_eq!(err.code(), 409);
    stale["status"] = json!({"phase": "Running"});
    let err = api.update_status(&kind, stale).await.unwrap_err();
    assert!(matches!(err, Error::Conflict { .. }), "{err}");
    assert_eq!(api.current_revision().await.unwrap(), before);

    let mut bad_rv = first.clone();
    bad_rv["metadata"]["resourceVersion"] = json!("not-a-number");
    assert!(matches!(
        api.update(&kind, bad_rv).await,
        Err(Error::Invalid { .. })
    ));
}

#[tokio::test]
async fn an_update_naming_another_uid_is_a_conflict() {
    let api = api().await;
    let kind = widgets(&api).await;
    let created = api.create(&kind, widget("a")).await.unwrap();
    let mut other = created.clone();
    other["metadata"]["uid"] = json!("someone-else");
    let err = api.update(&kind, other).await.unwrap_err();
    assert!(matches!(err, Error::Conflict { .. }), "{err}");
}

#[tokio::test]
async fn a_write_that_changes_nothing_is_not_written() {
    let api = api().await;
    let kind = widgets(&api).await;
    let created = api.create(&kind, widget("a")).await.unwrap();
    let before = api.current_revision().await.unwrap();
    let same = api.update(&kind, created.clone()).await.unwrap();
    assert_eq!(same, created);
    let mut unversioned = widget("a");
    unversioned["spec"]["replicas"] = json!(1); // the default, already stored
    api.update(&kind, unversioned).await.unwrap();
    assert_eq!(api.current_revision().await.unwrap(), before);
}

#[tokio::test]
async fn an_object_of_the_wrong_kind_is_a_bad_request() {
    let api = api().await;
    let kind = widgets(&api).await;
    let mut wrong = widget("a");
    wrong["kind"] = json!("Gadget");
    let err = api.create(&kind, wrong).await.unwrap_err();
    assert!(matches!(err, Error::BadRequest(_)), "{err}");
    let err = api.create(&kind, json!([1])).await.unwrap_err();
    assert!(matches!(err, Error::BadRequest(_)), "{err}");
}

#[tokio::test]
async fn a_broken_definition_is_refused_with_every_problem() {
    let api = api().await;
    let mut crd = widget_crd();
    crd["spec"]["group"] = json!("nodot");
    crd["spec"]["names"]["plural"] = json!(null);
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["replicas"]
        ["type"] = json!("int");
    let err = api.create(&crd_kind(&api), crd).await.unwrap_err();
    let Error::Invalid { causes, .. } = &err else {
        panic!("{err}")
    };
    let fields: Vec<&str> = causes.iter().map(|c| c.field.as_str()).collect();
    assert_eq!(
        fields,
        [
            "spec.group",
            "spec.names.plural",
            "spec.versions[0].schema.openAPIV3Schema.properties[spec].properties[replicas].type",
        ]
    );
    assert!(api.kinds().by_kind("nodot/v1", "Widget").is_none());
    assert_eq!(
        api.list(&crd_kind(&api), &Default::default())
            .await
            .unwrap()
            .items
            .len(),
        0
    );
}

#[tokio::test]
async fn a_definition_registers_updates_and_unregisters_its_kind() {
    let api = api().await;
    let kind = widgets(&api).await;
    assert!(kind.status_subresource && kind.namespaced);
    let crd = api
        .get(&crd_kind(&api), None, "widgets.test.setpoint.dev")
        .await
        .unwrap();
    assert_eq!(crd["status"]["acceptedNames"]["kind"], "Widget");

    let mut cluster = crd.clone();
    cluster["spec"]["scope"] = json!("Cluster");
    let err = api.update(&crd_kind(&api), cluster).await.unwrap_err();
    assert!(err.to_string().contains("spec.scope"), "{err}");

    let mut more = crd.clone();
    more["spec"]["names"]["shortNames"] = json!(["wd"]);
    api.update(&crd_kind(&api), more).await.unwrap();
    let updated = api
        .kinds()
        .require("test.setpoint.dev/v1", "Widget")
        .unwrap();
    assert_eq!(updated.short_names, ["wd"]);

    api.delete(
        &crd_kind(&api),
        None,
        "widgets.test.setpoint.dev",
        &Default::default(),
    )
    .await
    .unwrap();
    assert!(
        api.kinds()
            .by_kind("test.setpoint.dev/v1", "Widget")
            .is_none()
    );
}

#[tokio::test]
async fn stored_definitions_are_registered_again_when_the_api_reopens() {
    let backend = Arc::new(MemoryBackend::new());
    let first = Api::open(backend.clone()).await.unwrap();
    widgets(&first).await;
    let second = Api::open(backend).await.unwrap();
    let kind = second
        .kinds()
        .require("test.setpoint.dev/v1", "Widget")
        .unwrap();
    let err = second
        .create(
            &kind,
            json!({"apiVersion": "test.setpoint.dev/v1",
        "kind": "Widget", "metadata": {"name": "x"}, "spec": {}}),
        )
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("spec.image: Required value"),
        "{err}"
    );
}
