//! The RabbitMQ provider (`plugins/rabbitmq`: one plugin per kind of
//! `rabbitmq.setpoint.dev/v1`) on a real host against a real broker that
//! `support::rabbitmq` starts per test (issue #32). What the broker holds
//! is checked through its own management API and, for passwords, through
//! `rabbitmqctl authenticate_user`.

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::rabbitmq::{ADMIN, RabbitMq};
use crate::support::{
    ServeProcess, TestHost, events_about, eventually, grant, plugins_dir, ready_condition,
};

const WAIT: Duration = Duration::from_secs(60);
const GROUP: &str = "rabbitmq.setpoint.dev/v1";

/// The seven plugins' files (`rabbitmq_<kind>.wasm`); each plugin is named
/// `rabbitmq-<kind>`, which is what its `PluginGrant` is named after.
const PLUGINS: [&str; 7] = [
    "rabbitmq_vhost",
    "rabbitmq_queue",
    "rabbitmq_exchange",
    "rabbitmq_binding",
    "rabbitmq_user",
    "rabbitmq_permission",
    "rabbitmq_policy",
];

/// The harness itself: a private node answers its management API, the
/// administrator it makes can publish and take messages, and the broker
/// tells a right password from a wrong one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_private_broker_starts_and_tells_right_passwords_from_wrong_ones() {
    let broker = RabbitMq::start().await;
    let overview = broker.get("/api/overview").await.unwrap();
    assert_eq!(overview["management_version"], "3.10.8", "{overview}");
    assert!(broker.authenticates(ADMIN, broker.admin_password()).await);
    assert!(!broker.authenticates(ADMIN, "not-the-password").await);
    broker
        .send(
            reqwest::Method::PUT,
            "/api/queues/%2F/harness",
            Some(json!({"durable": true})),
        )
        .await;
    let admin = (ADMIN, broker.admin_password());
    assert_eq!(
        broker
            .publish(admin, "/", "amq.default", "harness", "hello")
            .await,
        Ok(true)
    );
    assert_eq!(
        broker.take(admin, "/", "harness", 10).await.unwrap(),
        ["hello"]
    );
}

/// The broker's admin credentials as a `kubernetes.io/basic-auth` Secret,
/// and a grant for each plugin naming the broker and the Secrets' keys.
async fn credentials_and_grants(host: &TestHost, broker: &RabbitMq) {
    apply(
        host,
        json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "rabbitmq-admin", "namespace": "default"},
            "type": "kubernetes.io/basic-auth",
            "stringData": {"username": ADMIN, "password": broker.admin_password()}}),
    )
    .await;
    for file in PLUGINS {
        grant(
            host,
            &file.replace('_', "-"),
            json!({"destinations": [broker.api_url()],
                   "secrets": ["default/rabbitmq-admin/username",
                               "default/rabbitmq-admin/password",
                               "default/app-password/password"]}),
        )
        .await;
    }
}

/// A host running every RabbitMQ plugin, a broker, the credentials and
/// the grants.
async fn setup() -> (TestHost, RabbitMq) {
    let broker = RabbitMq::start().await;
    let host = TestHost::start(&PLUGINS).await;
    credentials_and_grants(&host, &broker).await;
    (host, broker)
}

/// An object of `kind` named `name` in `default`, looked at every second.
fn object(broker: &RabbitMq, kind: &str, name: &str, spec: Value) -> Value {
    let mut spec = spec;
    spec["broker"] = json!({"url": broker.api_url(), "credentialsSecret": "rabbitmq-admin"});
    spec["resyncSeconds"] = json!(1);
    json!({"apiVersion": GROUP, "kind": kind,
        "metadata": {"name": name, "namespace": "default"}, "spec": spec})
}

/// Create `object`, or change the stored one to it.
async fn apply(host: &TestHost, object: Value) {
    let api = host.host.api();
    let kind = api
        .kinds()
        .require(
            object["apiVersion"].as_str().unwrap(),
            object["kind"].as_str().unwrap(),
        )
        .unwrap();
    let name = object["metadata"]["name"].as_str().unwrap();
    match api.get(&kind, Some("default"), name).await {
        Ok(current) => {
            let mut next = current.clone();
            for field in ["spec", "stringData", "data"] {
                if !object[field].is_null() {
                    next[field] = object[field].clone();
                }
            }
            api.update(&kind, next).await.unwrap();
        }
        Err(_) => {
            api.create(&kind, object).await.unwrap();
        }
    }
}

async fn get(host: &TestHost, kind: &str, name: &str) -> Option<Value> {
    let api = host.host.api();
    let kind = api.kinds().require(GROUP, kind).unwrap();
    api.get(&kind, Some("default"), name).await.ok()
}

async fn delete(host: &TestHost, kind: &str, name: &str) {
    let api = host.host.api();
    let kind = api.kinds().require(GROUP, kind).unwrap();
    api.delete(&kind, Some("default"), name, &Default::default())
        .await
        .unwrap();
}

/// Wait until the object's `Ready` condition has `reason` (and status
/// `True` for `InSync`); returns the object.
async fn reason_is(host: &TestHost, kind: &str, name: &str, reason: &str) -> Value {
    eventually(
        &format!("{kind} {name} has Ready reason {reason}"),
        WAIT,
        || async {
            let object = get(host, kind, name)
                .await
                .ok_or_else(|| "no such object".to_owned())?;
            let ready = ready_condition(&object).ok_or_else(|| object.to_string())?;
            if ready["reason"] == reason {
                Ok(object)
            } else {
                Err(ready.to_string())
            }
        },
    )
    .await
}

async fn in_sync(host: &TestHost, kind: &str, name: &str) -> Value {
    let object = reason_is(host, kind, name, "InSync").await;
    assert_eq!(ready_condition(&object).unwrap()["status"], "True");
    object
}

/// Wait until the broker's `GET path` satisfies `check`.
async fn broker_shows(
    broker: &RabbitMq,
    what: &str,
    path: &str,
    check: impl Fn(Option<&Value>) -> bool,
) {
    eventually(what, WAIT, || async {
        let seen = broker.get(path).await;
        if check(seen.as_ref()) {
            Ok(())
        } else {
            Err(format!("{path}: {seen:?}"))
        }
    })
    .await
}

/// Wait until the object is gone from the host.
async fn gone(host: &TestHost, kind: &str, name: &str) {
    eventually(&format!("{kind} {name} is gone"), WAIT, || async {
        match get(host, kind, name).await {
            None => Ok(()),
            Some(object) => Err(object["status"].to_string()),
        }
    })
    .await
}

/// One file's worth of topology, the queue first and the vhost last: the
/// queue waits for its vhost (its condition says so) and everything
/// converges once the vhost is there.
fn topology(broker: &RabbitMq) -> Vec<Value> {
    vec![
        object(
            broker,
            "Queue",
            "jobs",
            json!({"vhost": "orders", "deletionPolicy": "Delete"}),
        ),
        object(
            broker,
            "Binding",
            "events-to-jobs",
            json!({"vhost": "orders", "source": "events", "destination": "jobs",
                   "routingKey": "jobs.new"}),
        ),
        object(
            broker,
            "Exchange",
            "events",
            json!({"vhost": "orders", "type": "topic"}),
        ),
        object(
            broker,
            "User",
            "app",
            json!({"tags": ["management"], "passwordSecret": {"name": "app-password"}}),
        ),
        object(
            broker,
            "Permission",
            "app-orders",
            json!({"user": "app", "vhost": "orders", "configure": "^$", "write": "events",
                   "read": "jobs"}),
        ),
        object(
            broker,
            "Policy",
            "jobs-limit",
            json!({"vhost": "orders", "pattern": "^jobs$", "applyTo": "queues",
                   "definition": {"max-length": 1000}}),
        ),
        object(
            broker,
            "Vhost",
            "orders",
            json!({"deletionPolicy": "Delete"}),
        ),
    ]
}

/// Vhost `orders` with queue `jobs` holding `n` messages, and the Queue
/// object showing that count (the broker's statistics, then a look).
async fn queue_with_messages(host: &TestHost, broker: &RabbitMq, n: u64) {
    apply(host, object(broker, "Vhost", "orders", json!({}))).await;
    apply(
        host,
        object(broker, "Queue", "jobs", json!({"vhost": "orders"})),
    )
    .await;
    in_sync(host, "Queue", "jobs").await;
    let admin = (ADMIN, broker.admin_password());
    for i in 0..n {
        broker
            .publish(admin, "orders", "amq.default", "jobs", &format!("m{i}"))
            .await
            .unwrap();
    }
    eventually(&format!("{n} messages observed"), WAIT, || async {
        let queue = get(host, "Queue", "jobs").await.unwrap();
        if queue["status"]["observed"]["messages"] == n {
            Ok(())
        } else {
            Err(queue["status"].to_string())
        }
    })
    .await;
}

async fn set_app_password(host: &TestHost, password: &str) {
    apply(
        host,
        json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "app-password", "namespace": "default"},
            "stringData": {"password": password}}),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kind_is_created_changed_and_deleted_and_a_queue_before_its_vhost_converges() {
    let (host, broker) = setup().await;
    set_app_password(&host, "first-password").await;
    let mut objects = topology(&broker);
    // The queue alone first: it waits for its vhost and says so.
    apply(&host, objects.remove(0)).await;
    let waiting = reason_is(&host, "Queue", "jobs", "VhostMissing").await;
    assert!(
        ready_condition(&waiting).unwrap()["message"]
            .as_str()
            .unwrap()
            .contains("orders"),
        "{waiting}"
    );
    for object in objects {
        apply(&host, object).await;
    }
    for (kind, name) in [
        ("Vhost", "orders"),
        ("Exchange", "events"),
        ("Queue", "jobs"),
        ("Binding", "events-to-jobs"),
        ("User", "app"),
        ("Permission", "app-orders"),
        ("Policy", "jobs-limit"),
    ] {
        in_sync(&host, kind, name).await;
    }
    // What the broker holds.
    let queue = broker.get("/api/queues/orders/jobs").await.unwrap();
    assert_eq!(queue["durable"], true, "{queue}");
    let exchange = broker.get("/api/exchanges/orders/events").await.unwrap();
    assert_eq!(exchange["type"], "topic");
    let bindings = broker
        .get("/api/bindings/orders/e/events/q/jobs")
        .await
        .unwrap();
    assert_eq!(bindings.as_array().unwrap().len(), 1, "{bindings}");
    assert_eq!(bindings[0]["routing_key"], "jobs.new");
    let permission = broker.get("/api/permissions/orders/app").await.unwrap();
    assert_eq!(
        (
            &permission["configure"],
            &permission["write"],
            &permission["read"]
        ),
        (&json!("^$"), &json!("events"), &json!("jobs"))
    );
    let policy = broker.get("/api/policies/orders/jobs-limit").await.unwrap();
    assert_eq!(policy["definition"]["max-length"], 1000);
    assert!(broker.authenticates("app", "first-password").await);
    // A message goes through them, with the user's password.
    let app = ("app", "first-password");
    assert_eq!(
        broker
            .publish(app, "orders", "events", "jobs.new", "job 1")
            .await,
        Ok(true)
    );
    assert_eq!(
        broker.take(app, "orders", "jobs", 10).await.unwrap(),
        ["job 1"]
    );

    // Changed: the policy, the permission, the user's tags, the binding's key.
    apply(
        &host,
        object(
            &broker,
            "Policy",
            "jobs-limit",
            json!({"vhost": "orders", "pattern": "^jobs$", "applyTo": "queues",
                   "definition": {"max-length": 5}}),
        ),
    )
    .await;
    apply(
        &host,
        object(
            &broker,
            "Permission",
            "app-orders",
            json!({"user": "app", "vhost": "orders", "configure": "^$", "write": "events",
                   "read": "jobs|audit"}),
        ),
    )
    .await;
    apply(
        &host,
        object(
            &broker,
            "User",
            "app",
            json!({"tags": ["management", "monitoring"],
                   "passwordSecret": {"name": "app-password"}}),
        ),
    )
    .await;
    apply(
        &host,
        object(
            &broker,
            "Binding",
            "events-to-jobs",
            json!({"vhost": "orders", "source": "events", "destination": "jobs",
                   "routingKey": "jobs.#"}),
        ),
    )
    .await;
    broker_shows(
        &broker,
        "the policy changed",
        "/api/policies/orders/jobs-limit",
        |p| p.is_some_and(|p| p["definition"]["max-length"] == 5),
    )
    .await;
    broker_shows(
        &broker,
        "the permission changed",
        "/api/permissions/orders/app",
        |p| p.is_some_and(|p| p["read"] == "jobs|audit"),
    )
    .await;
    broker_shows(&broker, "the user's tags changed", "/api/users/app", |u| {
        u.is_some_and(|u| {
            let tags = u["tags"].to_string();
            tags.contains("management") && tags.contains("monitoring")
        })
    })
    .await;
    broker_shows(
        &broker,
        "the binding's key changed, the old binding went",
        "/api/bindings/orders/e/events/q/jobs",
        |b| {
            b.and_then(Value::as_array)
                .is_some_and(|b| b.len() == 1 && b[0]["routing_key"] == "jobs.#")
        },
    )
    .await;

    // The exchange's type cannot change in place: with recreateOnChange it
    // is deleted and declared again (RabbitMQ drops its bindings with it),
    // and the Binding object's next look makes its binding again.
    apply(
        &host,
        object(
            &broker,
            "Exchange",
            "events",
            json!({"vhost": "orders", "type": "direct", "recreateOnChange": true}),
        ),
    )
    .await;
    broker_shows(
        &broker,
        "the exchange is re-declared as direct",
        "/api/exchanges/orders/events",
        |x| x.is_some_and(|x| x["type"] == "direct"),
    )
    .await;
    in_sync(&host, "Exchange", "events").await;
    broker_shows(
        &broker,
        "the binding is made again on the new exchange",
        "/api/bindings/orders/e/events/q/jobs",
        |b| {
            b.and_then(Value::as_array)
                .is_some_and(|b| b.len() == 1 && b[0]["routing_key"] == "jobs.#")
        },
    )
    .await;

    // Deleted, each from the broker (the queue and vhost say Delete).
    for (kind, name, path) in [
        (
            "Binding",
            "events-to-jobs",
            "/api/bindings/orders/e/events/q/jobs",
        ),
        ("Policy", "jobs-limit", "/api/policies/orders/jobs-limit"),
        ("Permission", "app-orders", "/api/permissions/orders/app"),
        ("User", "app", "/api/users/app"),
        ("Queue", "jobs", "/api/queues/orders/jobs"),
        ("Exchange", "events", "/api/exchanges/orders/events"),
        ("Vhost", "orders", "/api/vhosts/orders"),
    ] {
        delete(&host, kind, name).await;
        gone(&host, kind, name).await;
        broker_shows(
            &broker,
            &format!("{kind} {name} left the broker"),
            path,
            |seen| seen.is_none_or(|s| s.as_array().is_some_and(Vec::is_empty)),
        )
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_password_changed_in_its_secret_is_the_one_the_broker_takes() {
    let (host, broker) = setup().await;
    set_app_password(&host, "first-password").await;
    apply(
        &host,
        object(
            &broker,
            "User",
            "app",
            json!({"passwordSecret": {"name": "app-password"}}),
        ),
    )
    .await;
    in_sync(&host, "User", "app").await;
    assert!(broker.authenticates("app", "first-password").await);
    set_app_password(&host, "second-password").await;
    eventually("the new password works", WAIT, || async {
        if broker.authenticates("app", "second-password").await {
            Ok(())
        } else {
            Err("not yet".to_owned())
        }
    })
    .await;
    assert!(!broker.authenticates("app", "first-password").await);
    // Neither value is anywhere the host shows text.
    let user = get(&host, "User", "app").await.unwrap();
    let events = events_about(&host, "app").await;
    for text in [user.to_string(), serde_json::to_string(&events).unwrap()] {
        assert!(!text.contains("first-password") && !text.contains("second-password"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_deleted_and_a_permission_changed_behind_its_back_are_restored() {
    let (host, broker) = setup().await;
    set_app_password(&host, "a-password").await;
    for object in [
        object(&broker, "Vhost", "orders", json!({})),
        object(&broker, "Queue", "jobs", json!({"vhost": "orders"})),
        object(
            &broker,
            "User",
            "app",
            json!({"passwordSecret": {"name": "app-password"}}),
        ),
        object(
            &broker,
            "Permission",
            "app-orders",
            json!({"user": "app", "vhost": "orders", "read": "jobs"}),
        ),
    ] {
        apply(&host, object).await;
    }
    in_sync(&host, "Queue", "jobs").await;
    in_sync(&host, "Permission", "app-orders").await;
    broker
        .send(reqwest::Method::DELETE, "/api/queues/orders/jobs", None)
        .await;
    broker
        .send(
            reqwest::Method::PUT,
            "/api/permissions/orders/app",
            Some(json!({"configure": ".*", "write": ".*", "read": ".*"})),
        )
        .await;
    broker_shows(
        &broker,
        "the queue is back",
        "/api/queues/orders/jobs",
        |q| q.is_some(),
    )
    .await;
    broker_shows(
        &broker,
        "the permission is restored",
        "/api/permissions/orders/app",
        |p| p.is_some_and(|p| p["read"] == "jobs" && p["configure"] == ".*"),
    )
    .await;
    // The user deleted (its permissions go with it): both come back, and
    // the password is the Secret's.
    broker
        .send(reqwest::Method::DELETE, "/api/users/app", None)
        .await;
    broker_shows(&broker, "the user is back", "/api/users/app", |u| {
        u.is_some()
    })
    .await;
    broker_shows(
        &broker,
        "its permission is back",
        "/api/permissions/orders/app",
        |p| p.is_some_and(|p| p["read"] == "jobs"),
    )
    .await;
    assert!(broker.authenticates("app", "a-password").await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_durability_change_is_refused_without_opt_in_and_replaced_with_it_and_plan_shows_the_replacement()
 {
    let (host, broker) = setup().await;
    queue_with_messages(&host, &broker, 3).await;
    // Not durable, without opt-in: said, nothing written.
    apply(
        &host,
        object(
            &broker,
            "Queue",
            "jobs",
            json!({"vhost": "orders", "durable": false}),
        ),
    )
    .await;
    let refused = reason_is(&host, "Queue", "jobs", "ImmutableChange").await;
    let message = ready_condition(&refused).unwrap()["message"].to_string();
    assert!(
        message.contains("durable") && message.contains("3 messages"),
        "{message}"
    );
    let queue = broker.get("/api/queues/orders/jobs").await.unwrap();
    assert_eq!(
        (&queue["durable"], &queue["messages"]),
        (&json!(true), &json!(3)),
        "unchanged"
    );

    // The plan of opting in shows one replacement, and sends nothing.
    let opted = object(
        &broker,
        "Queue",
        "jobs",
        json!({"vhost": "orders", "durable": false, "recreateOnChange": true}),
    );
    let plan = host
        .host
        .plan(setpoint::plan::Request::Apply(vec![
            setpoint::plan::Document {
                origin: "test".into(),
                object: opted.clone(),
            },
        ]))
        .await
        .unwrap();
    let text = setpoint::plan::render(&plan, Default::default());
    let url = format!("{}/api/queues/orders/jobs", broker.api_url());
    assert!(
        text.contains(&format!("-/+ replace {url} (DELETE then PUT")),
        "{text}"
    );
    assert_eq!(
        broker.get("/api/queues/orders/jobs").await.unwrap()["messages"],
        3,
        "planning sent nothing"
    );

    // Opted in: re-declared not durable.
    apply(&host, opted).await;
    broker_shows(
        &broker,
        "the queue is re-declared",
        "/api/queues/orders/jobs",
        |q| q.is_some_and(|q| q["durable"] == false),
    )
    .await;
    in_sync(&host, "Queue", "jobs").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_with_messages_is_retained_by_default_and_says_so() {
    let (host, broker) = setup().await;
    queue_with_messages(&host, &broker, 2).await;
    delete(&host, "Queue", "jobs").await;
    gone(&host, "Queue", "jobs").await;
    let queue = broker.get("/api/queues/orders/jobs").await.unwrap();
    assert_eq!(queue["messages"], 2, "{queue}");
    let events = events_about(&host, "jobs").await;
    let retained = events
        .iter()
        .find(|e| e["reason"] == "Retained")
        .unwrap_or_else(|| panic!("no Retained event: {events:#?}"));
    assert!(
        retained["message"].as_str().unwrap().contains("2 messages"),
        "{retained}"
    );
}

/// Through the binary: the binding's key is the broker's, found again by
/// observation after a `kill -9` (no duplicate made), and the binding is
/// deleted by it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_binding_is_found_again_after_a_kill_9_of_the_host() {
    let broker = RabbitMq::start().await;
    let plugins = plugins_dir(&PLUGINS);
    let data = tempfile::tempdir().unwrap();
    let args = [
        std::ffi::OsStr::new("--data"),
        data.path().as_os_str(),
        "--plugins".as_ref(),
        plugins.path().as_os_str(),
    ];
    let serve = ServeProcess::start(args);
    let http = reqwest::Client::new();
    let post = |path: String, body: Value| {
        let http = http.clone();
        async move {
            let response = http.post(path).json(&body).send().await.unwrap();
            assert!(
                response.status().is_success(),
                "{}",
                response.text().await.unwrap()
            );
        }
    };
    let url = serve.url.clone();
    post(
        format!("{url}/api/v1/namespaces/default/secrets"),
        json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "rabbitmq-admin", "namespace": "default"},
            "stringData": {"username": ADMIN, "password": broker.admin_password()}}),
    )
    .await;
    for file in PLUGINS {
        post(
            format!("{url}/apis/setpoint.dev/v1/plugingrants"),
            json!({"apiVersion": "setpoint.dev/v1", "kind": "PluginGrant",
                "metadata": {"name": file.replace('_', "-")},
                "spec": {"destinations": [broker.api_url()],
                         "secrets": ["default/rabbitmq-admin/username",
                                     "default/rabbitmq-admin/password"]}}),
        )
        .await;
    }
    let objects = format!("{url}/apis/{GROUP}/namespaces/default");
    for (plural, object) in [
        ("vhosts", object(&broker, "Vhost", "orders", json!({}))),
        (
            "exchanges",
            object(&broker, "Exchange", "events", json!({"vhost": "orders"})),
        ),
        (
            "queues",
            object(&broker, "Queue", "jobs", json!({"vhost": "orders"})),
        ),
        (
            "bindings",
            object(
                &broker,
                "Binding",
                "events-to-jobs",
                json!({"vhost": "orders", "source": "events", "destination": "jobs",
                       "routingKey": "jobs.new", "arguments": {"x-match": "all"}}),
            ),
        ),
    ] {
        post(format!("{objects}/{plural}"), object).await;
    }
    let bindings = "/api/bindings/orders/e/events/q/jobs";
    let key = eventually("the binding exists", WAIT, || async {
        let found = broker.get(bindings).await.unwrap_or_default();
        match found.as_array().map(Vec::as_slice) {
            Some([one]) => Ok(one["properties_key"].as_str().unwrap().to_owned()),
            _ => Err(found.to_string()),
        }
    })
    .await;
    let binding_url = format!("{objects}/bindings/events-to-jobs");
    eventually("the binding object is in sync", WAIT, || async {
        let object: Value = http
            .get(&binding_url)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        match ready_condition(&object) {
            Some(ready) if ready["reason"] == "InSync" => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    serve.kill9();

    let serve = ServeProcess::start(args);
    let binding_url = format!(
        "{}/apis/{GROUP}/namespaces/default/bindings/events-to-jobs",
        serve.url
    );
    // Looked at again (resyncSeconds: 1) with nothing remembered: still
    // the one binding, the broker's key.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let after = broker.get(bindings).await.unwrap();
    assert_eq!(
        after.as_array().map(Vec::len),
        Some(1),
        "no duplicate: {after}"
    );
    assert_eq!(after[0]["properties_key"], key.as_str());
    // Deleting the object deletes the binding it finds by observation.
    let deleted = http.delete(&binding_url).send().await.unwrap();
    assert!(deleted.status().is_success());
    broker_shows(&broker, "the binding is deleted", bindings, |b| {
        b.and_then(Value::as_array).is_some_and(Vec::is_empty)
    })
    .await;
    assert!(
        broker.get("/api/queues/orders/jobs").await.is_some(),
        "the queue stays"
    );
}
