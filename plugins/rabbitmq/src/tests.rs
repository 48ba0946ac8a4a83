//! Native tests: the management API helpers, then whole reconciles of each
//! kind with `FakeCtx` answering the reads (`with_observation`) and giving
//! the previous writes' outcomes (`with_outcome`).

use std::time::Duration;

use setpoint_plugin_sdk::serde_json::{self, Value, json};
use setpoint_plugin_sdk::testing::FakeCtx;
use setpoint_plugin_sdk::{
    ConditionStatus, Error, HttpError, HttpErrorKind, HttpRequest, HttpResponse, HttpResult,
    Object, Response, SecretTarget, Severity, Time,
};

use crate::broker::{encode, same_json};
use crate::decide::{DELETE_ID, WRITE_ID};
use crate::reconcile::reconcile;
use crate::{Status, Topology};

const BASE: &str = "http://127.0.0.1:15672";

fn broker() -> Value {
    json!({"url": "http://127.0.0.1:15672/", "credentialsSecret": "rabbitmq-admin"})
}

type Obj<T> = Object<<T as Topology>::Spec, Status<<T as Topology>::Observed>>;

fn object<T: Topology>(name: &str, spec: Value, status: Value) -> Obj<T> {
    Object::from_value(json!({"apiVersion": crate::API_VERSION, "kind": T::KIND,
        "metadata": {"name": name, "namespace": "default", "generation": 2, "uid": "u1"},
        "spec": spec, "status": status}))
    .unwrap()
}

fn deleting<T: Topology>(name: &str, spec: Value) -> Obj<T> {
    Object::from_value(json!({"apiVersion": crate::API_VERSION, "kind": T::KIND,
        "metadata": {"name": name, "namespace": "default", "generation": 2, "uid": "u1",
                     "deletionTimestamp": "2026-01-01T00:00:00Z",
                     "finalizers": [crate::reconcile::finalizer::<T>()]},
        "spec": spec}))
    .unwrap()
}

fn answer(status: u16, body: Value) -> HttpResult {
    Ok(HttpResponse {
        status,
        headers: vec![],
        body: if body.is_null() {
            Vec::new()
        } else {
            body.to_string().into_bytes()
        },
    })
}

fn refused(status: u16, error: &str, reason: &str) -> HttpResult {
    answer(status, json!({"error": error, "reason": reason}))
}

fn unanswered(kind: HttpErrorKind) -> HttpResult {
    Err(HttpError {
        kind,
        message: "connection refused".into(),
    })
}

fn ok() -> HttpResult {
    answer(204, Value::Null)
}

fn run<T: Topology>(object: &Obj<T>, ctx: &FakeCtx) -> Response<Status<T::Observed>> {
    reconcile::<T>(object, ctx).unwrap()
}

fn ready<O>(response: &Response<Status<O>>) -> (ConditionStatus, String, String) {
    let status = response.status.as_ref().expect("a status");
    let ready = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .unwrap();
    (ready.status, ready.reason.clone(), ready.message.clone())
}

fn reason<O>(response: &Response<Status<O>>) -> String {
    ready(response).1
}

fn body(request: &HttpRequest) -> Value {
    serde_json::from_slice(request.body.as_deref().unwrap()).unwrap()
}

/// The status a response wrote, as the next reconcile's object has it.
fn reported<O: serde::Serialize>(response: &Response<Status<O>>) -> Value {
    serde_json::to_value(response.status.as_ref().unwrap()).unwrap()
}

fn is_basic_auth_from_the_broker_secret(request: &HttpRequest) {
    let secrets: Vec<(&str, &str)> = request
        .secrets
        .iter()
        .map(|s| (s.secret.name.as_str(), s.secret.key.as_str()))
        .collect();
    assert_eq!(
        secrets,
        [
            ("rabbitmq-admin", "username"),
            ("rabbitmq-admin", "password")
        ]
    );
    assert!(request.header_value("Authorization").is_none());
}

// --- The management API helpers ----------------------------------------------------

#[test]
fn names_are_encoded_as_one_path_segment() {
    assert_eq!(encode("/"), "%2F");
    assert_eq!(encode("a b/c%"), "a%20b%2Fc%25");
    assert_eq!(encode("orders.v1-x_y~"), "orders.v1-x_y~");
    assert_eq!(encode("ö"), "%C3%B6");
}

#[test]
fn json_compares_numbers_by_value_and_objects_in_any_order() {
    assert!(same_json(
        &json!({"a": 10, "b": [1.0]}),
        &json!({"b": [1], "a": 10.0})
    ));
    assert!(!same_json(&json!({"a": 10}), &json!({"a": "10"})));
    assert!(!same_json(&json!({"a": 1}), &json!({"a": 1, "b": 2})));
}

// --- Vhost ---------------------------------------------------------------------------

mod vhost {
    use super::*;
    use crate::vhost::{READ_ID, Vhost};

    fn spec(extra: Value) -> Value {
        let mut spec = json!({"broker": broker(), "resyncSeconds": 10});
        spec.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        spec
    }

    #[test]
    fn a_missing_vhost_is_created_then_in_sync_and_recreated_after_drift() {
        let v = object::<Vhost>("orders", spec(json!({})), json!({}));
        let ctx = FakeCtx::new();
        assert!(reconcile::<Vhost>(&v, &ctx).is_err(), "waits for its read");
        let read = &ctx.pending_reads()[0];
        assert_eq!(read.url, format!("{BASE}/api/vhosts/orders?columns=name"));
        assert_eq!(read.header_value("cache-control"), Some("max-age=5"));
        is_basic_auth_from_the_broker_secret(read);

        let ctx =
            FakeCtx::new().with_observation(READ_ID, refused(404, "Object Not Found", "Not Found"));
        let response = run::<Vhost>(&v, &ctx);
        assert_eq!(response.effects.len(), 1);
        let put = &response.effects[0];
        assert_eq!(
            (put.method.as_str(), put.url.as_str(), put.id.as_str()),
            (
                "PUT",
                format!("{BASE}/api/vhosts/orders").as_str(),
                WRITE_ID
            )
        );
        is_basic_auth_from_the_broker_secret(put);
        assert_eq!(reason(&response), "Creating");

        let ctx = FakeCtx::new()
            .with_observation(READ_ID, answer(200, json!({"name": "orders"})))
            .with_outcome(WRITE_ID, answer(201, Value::Null));
        let response = run::<Vhost>(&v, &ctx);
        assert!(response.effects.is_empty());
        assert_eq!(ready(&response).0, ConditionStatus::True);
        assert_eq!(response.requeue_after, Some(Duration::from_secs(10)));

        // Deleted in RabbitMQ behind the object's back: created again.
        let v = object::<Vhost>("orders", spec(json!({})), reported(&response));
        let ctx =
            FakeCtx::new().with_observation(READ_ID, refused(404, "Object Not Found", "Not Found"));
        let response = run::<Vhost>(&v, &ctx);
        assert_eq!(response.effects[0].method, "PUT");
    }

    #[test]
    fn the_default_vhost_is_encoded_and_a_name_overrides_the_objects() {
        let v = object::<Vhost>("x", spec(json!({"name": "/"})), json!({}));
        let target = Vhost::from_spec(v.name(), &v.spec).unwrap();
        assert_eq!(target.put().url, format!("{BASE}/api/vhosts/%2F"));
    }

    #[test]
    fn deleting_retains_by_default_and_deletes_when_told() {
        let v = deleting::<Vhost>("orders", spec(json!({})));
        let ctx = FakeCtx::new()
            .with_finalizing(true)
            .with_observation(READ_ID, answer(200, json!({"name": "orders"})));
        let response = run::<Vhost>(&v, &ctx);
        assert!(response.effects.is_empty());
        assert!(response.remove_finalizer);
        assert_eq!(response.events[0].reason, "Retained");

        let v = deleting::<Vhost>("orders", spec(json!({"deletionPolicy": "Delete"})));
        let response = run::<Vhost>(&v, &ctx);
        assert_eq!(response.effects[0].method, "DELETE");
        assert_eq!(response.effects[0].id, DELETE_ID);
        assert!(!response.remove_finalizer, "released once it is gone");
        let ctx = FakeCtx::new()
            .with_finalizing(true)
            .with_observation(READ_ID, refused(404, "Object Not Found", "Not Found"))
            .with_outcome(DELETE_ID, ok());
        let response = run::<Vhost>(&v, &ctx);
        assert!(response.effects.is_empty());
        assert!(response.remove_finalizer);
    }
}

// --- Queue ---------------------------------------------------------------------------

mod queue {
    use super::*;
    use crate::queue::{Queue, READ_ID};

    fn spec(extra: Value) -> Value {
        let mut spec = json!({"vhost": "orders", "broker": broker(), "resyncSeconds": 30});
        spec.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        spec
    }

    fn listed(name: &str, durable: bool, arguments: Value, type_: &str, messages: u64) -> Value {
        json!({"name": name, "durable": durable, "auto_delete": false,
               "arguments": arguments, "type": type_, "messages": messages})
    }

    fn list(queues: &[Value]) -> HttpResult {
        answer(200, Value::Array(queues.to_vec()))
    }

    #[test]
    fn all_queues_of_a_vhost_share_one_list_read() {
        let q = object::<Queue>("jobs", spec(json!({})), json!({}));
        let ctx = FakeCtx::new();
        assert!(reconcile::<Queue>(&q, &ctx).is_err());
        let read = &ctx.pending_reads()[0];
        assert_eq!(
            read.url,
            format!(
                "{BASE}/api/queues/orders?columns=name,durable,auto_delete,arguments,type,messages"
            )
        );
        assert_eq!(read.id, READ_ID);
        assert_eq!(read.header_value("cache-control"), Some("max-age=15"));
        let other = object::<Queue>("other", spec(json!({})), json!({}));
        let ctx2 = FakeCtx::new();
        assert!(reconcile::<Queue>(&other, &ctx2).is_err());
        assert_eq!(
            ctx2.pending_reads()[0],
            *read,
            "the same read, shared by the host"
        );
    }

    #[test]
    fn a_queue_is_declared_then_in_sync_with_its_message_count() {
        let q = object::<Queue>(
            "jobs",
            spec(json!({"type": "quorum", "arguments": {"x-max-length": 10}})),
            json!({}),
        );
        let ctx = FakeCtx::new().with_observation(
            READ_ID,
            list(&[listed("other", true, json!({}), "classic", 0)]),
        );
        let response = run::<Queue>(&q, &ctx);
        assert_eq!(reason(&response), "Creating");
        // Declared through the vhost's definitions, batched by the host
        // with the other queues waiting at once.
        let put = &response.effects[0];
        assert_eq!(put.method, "POST");
        assert_eq!(put.url, format!("{BASE}/api/definitions/orders"));
        assert_eq!(put.header_value("x-setpoint-batch"), Some("/queues"));
        assert_eq!(
            body(put),
            json!({"queues": [{"name": "jobs", "durable": true, "auto_delete": false,
                   "arguments": {"x-max-length": 10, "x-queue-type": "quorum"}}]})
        );
        assert_eq!(response.events[0].reason, "Creating");

        let seen = listed(
            "jobs",
            true,
            json!({"x-queue-type": "quorum", "x-max-length": 10}),
            "quorum",
            7,
        );
        let ctx = FakeCtx::new()
            .with_observation(READ_ID, list(&[seen]))
            .with_outcome(WRITE_ID, answer(201, Value::Null));
        let response = run::<Queue>(&q, &ctx);
        assert!(response.effects.is_empty());
        assert_eq!(ready(&response).1, "InSync");
        let status = response.status.as_ref().unwrap();
        assert_eq!(status.observed.as_ref().unwrap().messages, Some(7));
        assert_eq!(status.observed_generation, Some(2));
        assert_eq!(response.requeue_after, Some(Duration::from_secs(30)));
        assert!(response.events.is_empty());
    }

    #[test]
    fn a_classic_queue_declared_without_its_type_argument_is_in_sync() {
        let q = object::<Queue>("jobs", spec(json!({})), json!({}));
        let ctx = FakeCtx::new().with_observation(
            READ_ID,
            list(&[listed("jobs", true, json!({}), "classic", 0)]),
        );
        assert_eq!(reason(&run::<Queue>(&q, &ctx)), "InSync");
    }

    #[test]
    fn a_queue_deleted_behind_the_objects_back_is_declared_again() {
        let q = object::<Queue>("jobs", spec(json!({})), json!({}));
        let ctx = FakeCtx::new().with_observation(
            READ_ID,
            list(&[listed("jobs", true, json!({}), "classic", 0)]),
        );
        let in_sync = run::<Queue>(&q, &ctx);
        let q = object::<Queue>("jobs", spec(json!({})), reported(&in_sync));
        let ctx = FakeCtx::new().with_observation(READ_ID, list(&[]));
        let response = run::<Queue>(&q, &ctx);
        assert_eq!(response.effects.len(), 1);
        assert_eq!(response.effects[0].method, "POST");
    }

    #[test]
    fn a_queue_whose_vhost_is_missing_waits_and_looks_again_at_most_a_resync_period_apart() {
        let q = object::<Queue>("jobs", spec(json!({})), json!({}));
        let ctx =
            FakeCtx::new().with_observation(READ_ID, refused(404, "Object Not Found", "Not Found"));
        let response = run::<Queue>(&q, &ctx);
        let (status, why, message) = ready(&response);
        assert_eq!(
            (status, why.as_str()),
            (ConditionStatus::False, "VhostMissing")
        );
        assert!(message.contains("\"orders\""), "{message}");
        assert!(response.effects.is_empty());
        assert_eq!(response.requeue_after, Some(Duration::from_secs(2)));
        assert_eq!(response.events[0].severity, Severity::Warning);

        // Reported: the same again is the host's backoff; meanwhile the
        // read accepts only fresh answers, so the vhost is seen soon.
        let q = object::<Queue>("jobs", spec(json!({})), reported(&response));
        let ctx = FakeCtx::new();
        assert!(reconcile::<Queue>(&q, &ctx).is_err());
        assert_eq!(
            ctx.pending_reads()[0].header_value("cache-control"),
            Some("max-age=1")
        );
        // Still missing: nothing written, looked at again at a pace that
        // grows with the wait, up to the resync period (30 s) and no
        // further, however long it waits (not the host's backoff).
        let since = reported(&response)["conditions"][0]["lastTransitionTime"]
            .as_str()
            .unwrap()
            .parse::<setpoint_plugin_sdk::Time>()
            .unwrap();
        for (waited, next) in [(0, 2), (5, 5), (20, 20), (600, 30), (86_400, 30)] {
            let ctx = FakeCtx::new()
                .with_now(since + Duration::from_secs(waited))
                .with_observation(READ_ID, refused(404, "Object Not Found", "Not Found"));
            let response = run::<Queue>(&q, &ctx);
            assert!(response.status.is_none(), "nothing written");
            assert!(response.events.is_empty());
            assert_eq!(
                response.requeue_after,
                Some(Duration::from_secs(next)),
                "after {waited} s"
            );
        }

        // The vhost exists: declared.
        let ctx = FakeCtx::new().with_observation(READ_ID, list(&[]));
        let response = run::<Queue>(&q, &ctx);
        assert_eq!(response.effects[0].method, "POST");
    }

    #[test]
    fn an_immutable_change_is_reported_with_the_message_count_and_nothing_is_written() {
        let q = object::<Queue>(
            "jobs",
            spec(json!({"durable": false, "arguments": {"x-max-length": 5}})),
            json!({}),
        );
        let seen = listed("jobs", true, json!({"x-max-length": 10}), "classic", 12);
        let ctx = FakeCtx::new().with_observation(READ_ID, list(std::slice::from_ref(&seen)));
        let response = run::<Queue>(&q, &ctx);
        assert!(response.effects.is_empty());
        let (status, why, message) = ready(&response);
        assert_eq!(
            (status, why.as_str()),
            (ConditionStatus::False, "ImmutableChange")
        );
        assert!(
            message.contains("durable (RabbitMQ: true, spec: false)"),
            "{message}"
        );
        assert!(message.contains("arguments"), "{message}");
        assert!(message.contains("12 messages"), "{message}");
        assert_eq!(response.events.len(), 1);
        assert_eq!(
            response.requeue_after,
            Some(Duration::from_secs(30)),
            "looks again"
        );
        assert_eq!(
            response
                .status
                .as_ref()
                .unwrap()
                .observed
                .as_ref()
                .unwrap()
                .messages,
            Some(12)
        );

        // The count moves: the condition follows, no new event.
        let q = object::<Queue>(
            "jobs",
            spec(json!({"durable": false, "arguments": {"x-max-length": 5}})),
            reported(&response),
        );
        let mut more = seen;
        more["messages"] = json!(13);
        let ctx = FakeCtx::new().with_observation(READ_ID, list(&[more]));
        let response = run::<Queue>(&q, &ctx);
        assert!(ready(&response).2.contains("13 messages"));
        assert!(response.events.is_empty());
        assert!(response.effects.is_empty());
    }

    #[test]
    fn with_recreate_on_change_the_queue_is_deleted_then_declared_again() {
        let s = spec(json!({"type": "quorum", "recreateOnChange": true}));
        let q = object::<Queue>("jobs", s.clone(), json!({}));
        let ctx = FakeCtx::new().with_observation(
            READ_ID,
            list(&[listed("jobs", true, json!({}), "classic", 3)]),
        );
        let response = run::<Queue>(&q, &ctx);
        assert_eq!(reason(&response), "Recreating");
        let delete = &response.effects[0];
        assert_eq!(
            (
                delete.method.as_str(),
                delete.url.as_str(),
                delete.id.as_str()
            ),
            (
                "DELETE",
                format!("{BASE}/api/queues/orders/jobs").as_str(),
                DELETE_ID
            )
        );
        assert!(
            ready(&response).2.contains("3 messages"),
            "the condition says what is lost first: {}",
            ready(&response).2
        );
        // Then, in the same response (sent in order, the second only if the
        // first succeeded), the declaration with the new type.
        assert_eq!(response.effects.len(), 2);
        assert_eq!(
            (
                response.effects[1].method.as_str(),
                response.effects[1].id.as_str()
            ),
            ("PUT", WRITE_ID)
        );
        assert_eq!(response.effects[1].url, delete.url, "the queue's own URL");
        assert_eq!(
            body(&response.effects[1])["arguments"]["x-queue-type"],
            "quorum"
        );
        // The next look sees the new queue: in sync.
        let q = object::<Queue>("jobs", s, reported(&response));
        let ctx = FakeCtx::new()
            .with_observation(
                READ_ID,
                list(&[listed(
                    "jobs",
                    true,
                    json!({"x-queue-type": "quorum"}),
                    "quorum",
                    0,
                )]),
            )
            .with_outcome(DELETE_ID, ok())
            .with_outcome(WRITE_ID, ok());
        let response = run::<Queue>(&q, &ctx);
        assert_eq!(reason(&response), "InSync");
        assert!(response.effects.is_empty());
    }

    #[test]
    fn deleting_retains_the_queue_and_says_how_many_messages_stay() {
        let q = deleting::<Queue>("jobs", spec(json!({})));
        let ctx = FakeCtx::new().with_finalizing(true).with_observation(
            READ_ID,
            list(&[listed("jobs", true, json!({}), "classic", 42)]),
        );
        let response = run::<Queue>(&q, &ctx);
        assert!(response.effects.is_empty());
        assert!(response.remove_finalizer);
        assert_eq!(response.events.len(), 1);
        assert_eq!(response.events[0].reason, "Retained");
        assert!(
            response.events[0].message.contains("42 messages"),
            "{:?}",
            response.events
        );

        // Its vhost gone: nothing to retain, released without an event.
        let ctx = FakeCtx::new()
            .with_finalizing(true)
            .with_observation(READ_ID, refused(404, "Object Not Found", "Not Found"));
        let response = run::<Queue>(&q, &ctx);
        assert!(response.remove_finalizer);
        assert!(response.events.is_empty());

        // Broker unreachable: still released (nothing is written either way).
        let ctx = FakeCtx::new()
            .with_finalizing(true)
            .with_observation(READ_ID, unanswered(HttpErrorKind::Connect));
        let response = run::<Queue>(&q, &ctx);
        assert!(response.remove_finalizer);
        assert_eq!(response.events[0].reason, "Retained");
    }

    #[test]
    fn deleting_with_delete_sends_a_delete_then_releases_once_gone() {
        let q = deleting::<Queue>("jobs", spec(json!({"deletionPolicy": "Delete"})));
        let ctx = FakeCtx::new().with_finalizing(true).with_observation(
            READ_ID,
            list(&[listed("jobs", true, json!({}), "classic", 1)]),
        );
        let response = run::<Queue>(&q, &ctx);
        assert_eq!(response.effects[0].method, "DELETE");
        assert!(!response.remove_finalizer);
        let ctx = FakeCtx::new()
            .with_finalizing(true)
            .with_observation(READ_ID, list(&[]))
            .with_outcome(DELETE_ID, ok());
        assert!(run::<Queue>(&q, &ctx).remove_finalizer);
        // Its vhost gone: so is the queue.
        let ctx = FakeCtx::new()
            .with_finalizing(true)
            .with_observation(READ_ID, refused(404, "Object Not Found", "Not Found"));
        assert!(run::<Queue>(&q, &ctx).remove_finalizer);
    }

    #[test]
    fn a_refused_declaration_is_rejected_with_the_brokers_reason_and_held() {
        let q = object::<Queue>(
            "jobs",
            spec(json!({"type": "quorum", "autoDelete": true})),
            json!({}),
        );
        let now = Time::from_unix_ms(1_000_000);
        let ctx = FakeCtx::new()
            .with_now(now)
            .with_observation(READ_ID, list(&[]))
            .with_outcome(
                WRITE_ID,
                refused(
                    400,
                    "bad_request",
                    "invalid property 'auto-delete' for queue 'jobs'",
                ),
            );
        let response = run::<Queue>(&q, &ctx);
        assert!(response.effects.is_empty());
        let (_, why, message) = ready(&response);
        assert_eq!(why, "Rejected");
        assert!(
            message.contains("invalid property 'auto-delete'"),
            "{message}"
        );
        assert_eq!(
            response.status.as_ref().unwrap().writes_held_until,
            Some(now + Duration::from_secs(30))
        );
        // Held for the generation until the hold ends.
        let held = object::<Queue>(
            "jobs",
            spec(json!({"type": "quorum", "autoDelete": true})),
            reported(&response),
        );
        let ctx = FakeCtx::new()
            .with_now(now + Duration::from_secs(5))
            .with_observation(READ_ID, list(&[]));
        let response = run::<Queue>(&held, &ctx);
        assert!(response.effects.is_empty());
        assert_eq!(response.requeue_after, Some(Duration::from_secs(25)));
        let ctx = FakeCtx::new()
            .with_now(now + Duration::from_secs(30))
            .with_observation(READ_ID, list(&[]));
        assert_eq!(run::<Queue>(&held, &ctx).effects.len(), 1);
    }

    #[test]
    fn a_type_argument_that_contradicts_the_type_is_an_invalid_spec() {
        let q = object::<Queue>(
            "jobs",
            spec(json!({"arguments": {"x-queue-type": "quorum"}})),
            json!({}),
        );
        let response = run::<Queue>(&q, &FakeCtx::new());
        assert_eq!(reason(&response), "InvalidSpec");
        assert!(response.requeue_after.is_none());
    }
}

// --- Exchange ------------------------------------------------------------------------

mod exchange {
    use super::*;
    use crate::exchange::{Exchange, READ_ID};

    fn spec(extra: Value) -> Value {
        let mut spec = json!({"broker": broker()});
        spec.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        spec
    }

    fn list(exchanges: Value) -> HttpResult {
        answer(200, exchanges)
    }

    #[test]
    fn an_exchange_is_declared_then_in_sync() {
        let x = object::<Exchange>("events", spec(json!({"type": "topic"})), json!({}));
        let ctx = FakeCtx::new();
        assert!(reconcile::<Exchange>(&x, &ctx).is_err());
        assert_eq!(
            ctx.pending_reads()[0].url,
            format!("{BASE}/api/exchanges/%2F?columns=name,type,durable,auto_delete,arguments")
        );
        let ctx = FakeCtx::new().with_observation(READ_ID, list(json!([{"name": "amq.direct", "type": "direct", "durable": true, "auto_delete": false, "arguments": {}}])));
        let response = run::<Exchange>(&x, &ctx);
        let put = &response.effects[0];
        assert_eq!(put.url, format!("{BASE}/api/exchanges/%2F/events"));
        assert_eq!(
            body(put),
            json!({"type": "topic", "durable": true, "auto_delete": false, "internal": false, "arguments": {}})
        );
        let ctx = FakeCtx::new().with_observation(READ_ID, list(json!([{"name": "events", "type": "topic", "durable": true, "auto_delete": false, "arguments": {}}])));
        assert_eq!(reason(&run::<Exchange>(&x, &ctx)), "InSync");
    }

    #[test]
    fn a_type_change_is_immutable_unless_recreate_on_change() {
        let seen = list(
            json!([{"name": "events", "type": "direct", "durable": true, "auto_delete": false, "arguments": {}}]),
        );
        let x = object::<Exchange>("events", spec(json!({"type": "fanout"})), json!({}));
        let ctx = FakeCtx::new().with_observation(READ_ID, seen.clone());
        let response = run::<Exchange>(&x, &ctx);
        assert!(response.effects.is_empty());
        let (_, why, message) = ready(&response);
        assert_eq!(why, "ImmutableChange");
        assert!(
            message.contains("type (RabbitMQ: direct, spec: fanout)"),
            "{message}"
        );

        let x = object::<Exchange>(
            "events",
            spec(json!({"type": "fanout", "recreateOnChange": true})),
            json!({}),
        );
        let response = run::<Exchange>(&x, &ctx);
        assert_eq!(response.effects[0].method, "DELETE");
    }

    #[test]
    fn the_brokers_own_exchanges_cannot_be_declared() {
        let x = object::<Exchange>("x", spec(json!({"name": "amq.custom"})), json!({}));
        assert_eq!(reason(&run::<Exchange>(&x, &FakeCtx::new())), "InvalidSpec");
    }

    #[test]
    fn deleting_an_exchange_deletes_it() {
        let x = deleting::<Exchange>("events", spec(json!({})));
        let ctx = FakeCtx::new().with_finalizing(true).with_observation(
            READ_ID,
            list(json!([{"name": "events", "type": "direct", "durable": true, "auto_delete": false, "arguments": {}}])),
        );
        let response = run::<Exchange>(&x, &ctx);
        assert_eq!(response.effects[0].method, "DELETE");
        assert_eq!(
            response.effects[0].url,
            format!("{BASE}/api/exchanges/%2F/events")
        );
    }
}

// --- Binding -------------------------------------------------------------------------

mod binding {
    use super::*;
    use crate::binding::{Binding, DESTINATION_ID, READ_ID, SOURCE_ID};

    fn spec() -> Value {
        json!({"vhost": "orders", "source": "events", "destination": "jobs",
               "routingKey": "a/b", "arguments": {"x-match": "all"}, "broker": broker()})
    }

    fn listed(routing_key: &str, arguments: Value, properties_key: &str) -> Value {
        json!({"source": "events", "vhost": "orders", "destination": "jobs",
               "destination_type": "queue", "routing_key": routing_key,
               "arguments": arguments, "properties_key": properties_key})
    }

    #[test]
    fn a_binding_is_found_by_observation_among_those_between_its_ends() {
        // A fresh status (a host restart): nothing remembered, found anyway.
        let b = object::<Binding>("b", spec(), json!({}));
        let ctx = FakeCtx::new();
        assert!(reconcile::<Binding>(&b, &ctx).is_err());
        assert_eq!(
            ctx.pending_reads()[0].url,
            format!(
                "{BASE}/api/bindings/orders?columns=source,destination,destination_type,\
                 routing_key,arguments,properties_key"
            ),
            "one read for every binding of the vhost"
        );
        let ctx = FakeCtx::new().with_observation(
            READ_ID,
            answer(
                200,
                json!([
                    listed("a/b", json!({}), "a%2Fb"),
                    listed("a/b", json!({"x-match": "all"}), "a%2Fb~p4Z0Ag"),
                    listed("c", json!({"x-match": "all"}), "c~p4Z0Ag")
                ]),
            ),
        );
        let response = run::<Binding>(&b, &ctx);
        assert_eq!(reason(&response), "InSync");
        assert!(response.effects.is_empty());
        assert!(ctx.pending_reads().is_empty(), "the ends are not read");
        let observed = response.status.unwrap().observed.unwrap();
        assert_eq!(observed.properties_key, "a%2Fb~p4Z0Ag");
    }

    #[test]
    fn a_missing_binding_waits_for_both_ends_then_is_posted() {
        let b = object::<Binding>("b", spec(), json!({}));
        let none = answer(200, json!([]));
        let ctx = FakeCtx::new().with_observation(READ_ID, none.clone());
        assert!(reconcile::<Binding>(&b, &ctx).is_err(), "asks for the ends");
        let urls: Vec<String> = ctx.pending_reads().iter().map(|r| r.url.clone()).collect();
        assert_eq!(
            urls,
            [
                format!("{BASE}/api/exchanges/orders?columns=name"),
                format!("{BASE}/api/queues/orders?columns=name")
            ]
        );
        // The vhost's lists, without and with the end.
        let missing = answer(200, json!([{"name": "other"}]));
        let found = answer(200, json!([{"name": "events"}, {"name": "jobs"}]));
        let ctx = FakeCtx::new()
            .with_observation(READ_ID, none.clone())
            .with_observation(SOURCE_ID, missing.clone())
            .with_observation(DESTINATION_ID, found.clone());
        let response = run::<Binding>(&b, &ctx);
        assert_eq!(reason(&response), "ExchangeMissing");
        assert_eq!(response.requeue_after, Some(Duration::from_secs(2)));
        let ctx = FakeCtx::new()
            .with_observation(READ_ID, none.clone())
            .with_observation(SOURCE_ID, found.clone())
            .with_observation(DESTINATION_ID, missing);
        let response = run::<Binding>(&b, &ctx);
        let (_, why, message) = ready(&response);
        assert_eq!(why, "DestinationMissing");
        assert!(message.contains("queue \"jobs\""), "{message}");

        let ctx = FakeCtx::new()
            .with_observation(READ_ID, none)
            .with_observation(SOURCE_ID, found.clone())
            .with_observation(DESTINATION_ID, found);
        let response = run::<Binding>(&b, &ctx);
        let post = &response.effects[0];
        assert_eq!(post.method, "POST");
        assert_eq!(post.url, format!("{BASE}/api/definitions/orders"));
        assert_eq!(post.header_value("x-setpoint-batch"), Some("/bindings"));
        assert_eq!(
            body(post),
            json!({"bindings": [{"source": "events", "destination": "jobs",
                "destination_type": "queue", "routing_key": "a/b",
                "arguments": {"x-match": "all"}}]})
        );
    }

    #[test]
    fn deleting_a_binding_deletes_it_by_its_properties_key_then_releases() {
        let b = deleting::<Binding>("b", spec());
        let ctx = FakeCtx::new().with_finalizing(true).with_observation(
            READ_ID,
            answer(
                200,
                json!([listed("a/b", json!({"x-match": "all"}), "a%2Fb~p4Z0Ag")]),
            ),
        );
        let response = run::<Binding>(&b, &ctx);
        assert_eq!(response.effects[0].method, "DELETE");
        assert_eq!(
            response.effects[0].url,
            format!("{BASE}/api/bindings/orders/e/events/q/jobs/a%252Fb~p4Z0Ag")
        );
        let ctx = FakeCtx::new()
            .with_finalizing(true)
            .with_observation(READ_ID, answer(200, json!([])))
            .with_outcome(DELETE_ID, ok());
        let response = run::<Binding>(&b, &ctx);
        assert!(response.remove_finalizer);
        assert!(
            ctx.pending_reads().is_empty(),
            "deleting: the ends are not read"
        );
    }

    #[test]
    fn a_binding_replaced_by_a_spec_change_is_deleted_once_the_new_one_exists() {
        let previous = json!({"observed": {"vhost": "orders", "source": "events",
            "destination": "jobs", "destinationType": "queue", "routingKey": "old",
            "arguments": {}, "propertiesKey": "old"}});
        let b = object::<Binding>("b", spec(), previous);
        // First the new one is posted; the status still shows the old one,
        // which is this object's until the new one exists.
        let ctx = FakeCtx::new()
            .with_observation(
                READ_ID,
                answer(200, json!([listed("old", json!({}), "old")])),
            )
            .with_observation(SOURCE_ID, answer(200, json!([{"name": "events"}])))
            .with_observation(DESTINATION_ID, answer(200, json!([{"name": "jobs"}])));
        let response = run::<Binding>(&b, &ctx);
        assert_eq!(reason(&response), "Creating");
        assert_eq!(response.effects[0].method, "POST");
        let b = object::<Binding>("b", spec(), reported(&response));
        assert_eq!(b.status.observed.as_ref().unwrap().properties_key, "old");
        // Refused, the status still names the old one: it is deleted once a
        // fixed spec's binding exists.
        let refused_ctx = FakeCtx::new()
            .with_observation(
                READ_ID,
                answer(200, json!([listed("old", json!({}), "old")])),
            )
            .with_observation(SOURCE_ID, answer(200, json!([{"name": "events"}])))
            .with_observation(DESTINATION_ID, answer(200, json!([{"name": "jobs"}])))
            .with_outcome(WRITE_ID, refused(400, "bad_request", "no"));
        let failed = run::<Binding>(&b, &refused_ctx);
        assert_eq!(reason(&failed), "Rejected");
        assert_eq!(
            failed
                .status
                .as_ref()
                .unwrap()
                .observed
                .as_ref()
                .unwrap()
                .properties_key,
            "old"
        );
        let ctx = FakeCtx::new().with_observation(
            READ_ID,
            answer(
                200,
                json!([
                    listed("old", json!({}), "old"),
                    listed("a/b", json!({"x-match": "all"}), "a%2Fb~p4Z0Ag")
                ]),
            ),
        );
        let response = run::<Binding>(&b, &ctx);
        assert_eq!(reason(&response), "InSync");
        assert_eq!(response.effects.len(), 1);
        assert_eq!(
            (
                response.effects[0].method.as_str(),
                response.effects[0].url.as_str()
            ),
            (
                "DELETE",
                format!("{BASE}/api/bindings/orders/e/events/q/jobs/old").as_str()
            )
        );
        // The status now shows the new one: nothing more is deleted.
        let b = object::<Binding>("b", spec(), reported(&response));
        let response = run::<Binding>(&b, &ctx);
        assert!(response.effects.is_empty());
    }

    #[test]
    fn a_binding_to_an_exchange_reads_the_destination_exchange() {
        let mut s = spec();
        s["destinationType"] = json!("exchange");
        let b = object::<Binding>("b", s, json!({}));
        let ctx = FakeCtx::new().with_observation(READ_ID, answer(200, json!([])));
        assert!(reconcile::<Binding>(&b, &ctx).is_err());
        assert_eq!(
            ctx.pending_reads()[1].url,
            format!("{BASE}/api/exchanges/orders?columns=name")
        );
    }
}

// --- User ----------------------------------------------------------------------------

mod user {
    use super::*;
    use crate::user::{READ_ID, User, WHOAMI_ID};

    fn spec(tags: &[&str]) -> Value {
        json!({"tags": tags, "passwordSecret": {"name": "app-password"}, "broker": broker()})
    }

    fn user(tags: Value) -> HttpResult {
        answer(
            200,
            json!({"name": "app", "password_hash": "x", "tags": tags, "limits": {}}),
        )
    }

    #[test]
    fn a_missing_user_is_created_with_the_password_put_in_by_the_host() {
        let u = object::<User>("app", spec(&["monitoring"]), json!({}));
        let ctx =
            FakeCtx::new().with_observation(READ_ID, refused(404, "Object Not Found", "Not Found"));
        let response = run::<User>(&u, &ctx);
        assert!(
            ctx.pending_reads().is_empty(),
            "no password check of an absent user"
        );
        let put = &response.effects[0];
        assert_eq!(put.url, format!("{BASE}/api/users/app"));
        assert_eq!(
            body(put),
            json!({"tags": "monitoring"}),
            "no password in the plugin"
        );
        let password = put
            .secrets
            .iter()
            .find(|s| s.target == SecretTarget::BodyPointer("/password".into()))
            .unwrap();
        assert_eq!(
            (password.secret.name.as_str(), password.secret.key.as_str()),
            ("app-password", "password")
        );
    }

    #[test]
    fn the_password_is_checked_as_the_user_and_set_again_when_wrong() {
        let u = object::<User>("app", spec(&["management"]), json!({}));
        let ctx = FakeCtx::new().with_observation(READ_ID, user(json!(["management"])));
        assert!(reconcile::<User>(&u, &ctx).is_err(), "asks for the check");
        let whoami = &ctx.pending_reads()[0];
        assert_eq!(whoami.url, format!("{BASE}/api/whoami"));
        assert_eq!(whoami.secrets.len(), 1, "the user's password only");
        assert_eq!(whoami.secrets[0].secret.name, "app-password");
        assert!(matches!(&whoami.secrets[0].target,
            SecretTarget::Header { name, template } if name == "Authorization" && template.ends_with(":app")));

        let ctx = FakeCtx::new()
            .with_observation(READ_ID, user(json!(["management"])))
            .with_observation(
                WHOAMI_ID,
                answer(200, json!({"name": "app", "tags": ["management"]})),
            );
        let response = run::<User>(&u, &ctx);
        assert_eq!(reason(&response), "InSync");
        assert!(response.status.unwrap().observed.unwrap().password_current);

        let ctx = FakeCtx::new()
            .with_observation(READ_ID, user(json!(["management"])))
            .with_observation(WHOAMI_ID, refused(401, "not_authorized", "Login failed"));
        let response = run::<User>(&u, &ctx);
        assert_eq!(reason(&response), "Updating");
        assert!(ready(&response).2.contains("Secret app-password"));
        assert_eq!(response.effects[0].method, "PUT");
    }

    #[test]
    fn a_user_without_management_tags_is_told_apart_from_a_wrong_password() {
        let u = object::<User>("app", spec(&[]), json!({}));
        let ctx = FakeCtx::new()
            .with_observation(READ_ID, user(json!([])))
            .with_observation(
                WHOAMI_ID,
                refused(401, "not_authorised", "Not management user"),
            );
        let response = run::<User>(&u, &ctx);
        assert_eq!(reason(&response), "InSync");
    }

    #[test]
    fn tags_changed_in_the_broker_are_restored() {
        let u = object::<User>("app", spec(&["monitoring", "policymaker"]), json!({}));
        let ctx = FakeCtx::new()
            // Before 3.9 the tags were one comma-separated string.
            .with_observation(READ_ID, user(json!("policymaker,monitoring")))
            .with_observation(WHOAMI_ID, answer(200, json!({})));
        assert_eq!(reason(&run::<User>(&u, &ctx)), "InSync");
        let ctx = FakeCtx::new()
            .with_observation(READ_ID, user(json!(["administrator"])))
            .with_observation(WHOAMI_ID, answer(200, json!({})));
        let response = run::<User>(&u, &ctx);
        assert_eq!(
            body(&response.effects[0]),
            json!({"tags": "monitoring,policymaker"})
        );
    }

    #[test]
    fn a_write_that_did_not_change_what_is_seen_is_not_sent_again_at_once() {
        let u = object::<User>("app", spec(&[]), json!({}));
        let ctx = FakeCtx::new()
            .with_observation(READ_ID, user(json!([])))
            .with_observation(WHOAMI_ID, refused(401, "not_authorized", "Login failed"))
            .with_outcome(WRITE_ID, ok());
        let response = run::<User>(&u, &ctx);
        assert!(response.effects.is_empty());
        assert_eq!(reason(&response), "NotConverging");
        assert!(response.status.unwrap().writes_held_until.is_some());
    }

    #[test]
    fn a_user_name_with_a_colon_is_invalid() {
        let u = object::<User>(
            "x",
            json!({"name": "a:b", "passwordSecret": {"name": "p"}, "broker": broker()}),
            json!({}),
        );
        assert_eq!(reason(&run::<User>(&u, &FakeCtx::new())), "InvalidSpec");
    }
}

// --- Permission ----------------------------------------------------------------------

mod permission {
    use super::*;
    use crate::permission::{Permission, READ_ID, USER_ID, VHOST_ID};

    fn spec() -> Value {
        json!({"user": "app", "vhost": "orders", "read": "^app\\.", "broker": broker()})
    }

    fn perms(read: &str) -> HttpResult {
        answer(
            200,
            json!({"user": "app", "vhost": "orders", "configure": ".*", "write": ".*", "read": read}),
        )
    }

    #[test]
    fn permissions_wait_for_the_user_and_the_vhost_then_are_set() {
        let p = object::<Permission>("p", spec(), json!({}));
        let none = refused(404, "Object Not Found", "Not Found");
        let ctx = FakeCtx::new().with_observation(READ_ID, none.clone());
        assert!(reconcile::<Permission>(&p, &ctx).is_err());
        let urls: Vec<String> = ctx.pending_reads().iter().map(|r| r.url.clone()).collect();
        assert_eq!(
            urls,
            [
                format!("{BASE}/api/users/app"),
                format!("{BASE}/api/vhosts/orders?columns=name")
            ]
        );
        let there = answer(200, json!({"name": "x"}));
        let ctx = FakeCtx::new()
            .with_observation(READ_ID, none.clone())
            .with_observation(USER_ID, none.clone())
            .with_observation(VHOST_ID, there.clone());
        assert_eq!(reason(&run::<Permission>(&p, &ctx)), "UserMissing");
        let ctx = FakeCtx::new()
            .with_observation(READ_ID, none.clone())
            .with_observation(USER_ID, there.clone())
            .with_observation(VHOST_ID, none.clone());
        assert_eq!(reason(&run::<Permission>(&p, &ctx)), "VhostMissing");
        let ctx = FakeCtx::new()
            .with_observation(READ_ID, none)
            .with_observation(USER_ID, there.clone())
            .with_observation(VHOST_ID, there);
        let response = run::<Permission>(&p, &ctx);
        let put = &response.effects[0];
        assert_eq!(put.url, format!("{BASE}/api/permissions/orders/app"));
        assert_eq!(
            body(put),
            json!({"configure": ".*", "write": ".*", "read": "^app\\."})
        );
    }

    #[test]
    fn permissions_changed_in_the_broker_are_restored() {
        let p = object::<Permission>("p", spec(), json!({}));
        let ctx = FakeCtx::new().with_observation(READ_ID, perms("^app\\."));
        assert_eq!(reason(&run::<Permission>(&p, &ctx)), "InSync");
        let ctx = FakeCtx::new().with_observation(READ_ID, perms(".*"));
        let response = run::<Permission>(&p, &ctx);
        assert_eq!(reason(&response), "Updating");
        assert_eq!(response.effects[0].method, "PUT");
    }

    #[test]
    fn deleting_permissions_deletes_them() {
        let p = deleting::<Permission>("p", spec());
        let ctx = FakeCtx::new()
            .with_finalizing(true)
            .with_observation(READ_ID, perms(".*"));
        let response = run::<Permission>(&p, &ctx);
        assert_eq!(response.effects[0].method, "DELETE");
        let ctx = FakeCtx::new()
            .with_finalizing(true)
            .with_observation(READ_ID, refused(404, "Object Not Found", "Not Found"));
        assert!(run::<Permission>(&p, &ctx).remove_finalizer);
    }
}

// --- Policy --------------------------------------------------------------------------

mod policy {
    use super::*;
    use crate::policy::{Policy, READ_ID, VHOST_ID};

    fn spec() -> Value {
        json!({"vhost": "orders", "pattern": "^jobs", "applyTo": "queues", "priority": 1,
               "definition": {"max-length": 10}, "broker": broker()})
    }

    fn policy(max_length: f64) -> HttpResult {
        answer(
            200,
            json!({"vhost": "orders", "name": "limits", "pattern": "^jobs", "apply-to": "queues",
                           "definition": {"max-length": max_length}, "priority": 1}),
        )
    }

    #[test]
    fn a_policy_is_created_updated_in_place_and_in_sync() {
        let p = object::<Policy>("limits", spec(), json!({}));
        let none = refused(404, "Object Not Found", "Not Found");
        let ctx = FakeCtx::new()
            .with_observation(READ_ID, none.clone())
            .with_observation(VHOST_ID, answer(200, json!({"name": "orders"})));
        let response = run::<Policy>(&p, &ctx);
        let put = &response.effects[0];
        assert_eq!(put.url, format!("{BASE}/api/policies/orders/limits"));
        assert_eq!(
            body(put),
            json!({"pattern": "^jobs", "apply-to": "queues", "priority": 1, "definition": {"max-length": 10}})
        );
        let ctx = FakeCtx::new().with_observation(READ_ID, policy(10.0));
        assert_eq!(reason(&run::<Policy>(&p, &ctx)), "InSync");
        let ctx = FakeCtx::new().with_observation(READ_ID, policy(20.0));
        let response = run::<Policy>(&p, &ctx);
        assert_eq!(reason(&response), "Updating");
        assert_eq!(response.effects[0].method, "PUT");

        let ctx = FakeCtx::new()
            .with_observation(READ_ID, none.clone())
            .with_observation(VHOST_ID, none);
        assert_eq!(reason(&run::<Policy>(&p, &ctx)), "VhostMissing");
    }

    #[test]
    fn a_definition_rabbitmq_refuses_is_rejected_with_its_reason() {
        let p = object::<Policy>("limits", spec(), json!({}));
        let ctx = FakeCtx::new().with_observation(READ_ID, policy(20.0)).with_outcome(
            WRITE_ID,
            refused(400, "bad_request", "Validation failed\n\n[{<<\"max-lengthx\">>,10}] are not recognised policy settings\n"),
        );
        let response = run::<Policy>(&p, &ctx);
        let (_, why, message) = ready(&response);
        assert_eq!(why, "Rejected");
        assert!(
            message.contains("not recognised policy settings"),
            "{message}"
        );
        assert!(response.effects.is_empty());
    }
}

// --- Failures, shared by all kinds ----------------------------------------------------

mod failures {
    use super::*;
    use crate::vhost::{READ_ID, Vhost};

    fn v(status: Value) -> Obj<Vhost> {
        object::<Vhost>("orders", json!({"broker": broker()}), status)
    }

    #[test]
    fn wrong_credentials_are_unauthorized_naming_the_secret_reported_once_then_backoff() {
        let ctx = FakeCtx::new()
            .with_observation(READ_ID, refused(401, "not_authorized", "Login failed"));
        let response = run::<Vhost>(&v(json!({})), &ctx);
        let (_, why, message) = ready(&response);
        assert_eq!(why, "Unauthorized");
        assert!(message.contains("Secret rabbitmq-admin"), "{message}");
        assert!(message.contains("Login failed"), "{message}");
        assert_eq!(response.requeue_after, Some(Duration::from_secs(1)));
        assert_eq!(response.events.len(), 1);
        let err = reconcile::<Vhost>(&v(reported(&response)), &ctx).unwrap_err();
        assert!(matches!(err, Error::Transient(_)));
    }

    #[test]
    fn no_answer_or_a_server_error_is_unreachable() {
        for answer in [
            unanswered(HttpErrorKind::Connect),
            refused(503, "x", "down"),
        ] {
            let ctx = FakeCtx::new().with_observation(READ_ID, answer);
            assert_eq!(reason(&run::<Vhost>(&v(json!({})), &ctx)), "Unreachable");
        }
        let ctx = FakeCtx::new().with_observation(READ_ID, unanswered(HttpErrorKind::Refused));
        assert_eq!(reason(&run::<Vhost>(&v(json!({})), &ctx)), "NotGranted");
    }

    #[test]
    fn requests_the_host_held_back_change_nothing() {
        let ctx = FakeCtx::new().with_observation(READ_ID, unanswered(HttpErrorKind::Throttled));
        let err = reconcile::<Vhost>(&v(json!({})), &ctx).unwrap_err();
        assert!(matches!(err, Error::Transient(_)), "{err:?}");
        // A write held back (or that could not connect) is asked for again.
        let ctx = FakeCtx::new()
            .with_observation(READ_ID, refused(404, "Object Not Found", "Not Found"))
            .with_outcome(WRITE_ID, unanswered(HttpErrorKind::Throttled));
        assert_eq!(run::<Vhost>(&v(json!({})), &ctx).effects.len(), 1);
    }

    #[test]
    fn a_write_retried_after_a_failure_leaves_the_condition_until_it_lands() {
        let ctx = FakeCtx::new()
            .with_observation(READ_ID, refused(404, "Object Not Found", "Not Found"))
            .with_outcome(WRITE_ID, unanswered(HttpErrorKind::Timeout));
        let response = run::<Vhost>(&v(json!({})), &ctx);
        assert_eq!(reason(&response), "Unreachable");
        assert!(response.effects.is_empty());
        let ctx =
            FakeCtx::new().with_observation(READ_ID, refused(404, "Object Not Found", "Not Found"));
        let again = run::<Vhost>(&v(reported(&response)), &ctx);
        assert_eq!(again.effects.len(), 1);
        assert_eq!(again.status, response.status);
        assert!(again.events.is_empty());
    }
}

// --- Definitions ---------------------------------------------------------------------

#[test]
fn every_kind_is_defined_with_defaults_and_ready_columns() {
    use crate::{binding, exchange, permission, policy, queue, user, vhost};
    let crds = [
        vhost::Vhost::definition().to_crd(),
        queue::Queue::definition().to_crd(),
        exchange::Exchange::definition().to_crd(),
        binding::Binding::definition().to_crd(),
        user::User::definition().to_crd(),
        permission::Permission::definition().to_crd(),
        policy::Policy::definition().to_crd(),
    ];
    let names: Vec<&str> = crds
        .iter()
        .map(|c| c["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "vhosts.rabbitmq.setpoint.dev",
            "queues.rabbitmq.setpoint.dev",
            "exchanges.rabbitmq.setpoint.dev",
            "bindings.rabbitmq.setpoint.dev",
            "users.rabbitmq.setpoint.dev",
            "permissions.rabbitmq.setpoint.dev",
            "policies.rabbitmq.setpoint.dev"
        ]
    );
    for crd in &crds {
        assert_eq!(crd["spec"]["scope"], "Namespaced");
        let columns = crd["spec"]["versions"][0]["additionalPrinterColumns"]
            .as_array()
            .unwrap();
        let column_names: Vec<&str> = columns
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert!(
            column_names.windows(2).any(|w| w == ["Ready", "Reason"]),
            "{column_names:?}"
        );
    }
    let spec = |i: usize| {
        crds[i]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"].clone()
    };
    let queue = spec(1);
    assert_eq!(queue["properties"]["durable"]["default"], true);
    assert_eq!(queue["properties"]["vhost"]["default"], "/");
    assert_eq!(queue["properties"]["type"]["default"], "classic");
    assert_eq!(queue["properties"]["deletionPolicy"]["default"], "Retain");
    assert_eq!(queue["properties"]["resyncSeconds"]["default"], 30);
    assert_eq!(
        queue["properties"]["arguments"]["x-kubernetes-preserve-unknown-fields"],
        true
    );
    assert_eq!(spec(2)["properties"]["type"]["default"], "direct");
    assert_eq!(spec(3)["properties"]["destinationType"]["default"], "queue");
    assert_eq!(
        spec(4)["properties"]["passwordSecret"]["properties"]["key"]["default"],
        "password"
    );
    assert_eq!(spec(5)["properties"]["read"]["default"], ".*");
    assert_eq!(spec(6)["properties"]["applyTo"]["default"], "all");
}
