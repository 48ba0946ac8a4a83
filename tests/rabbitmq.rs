//! The RabbitMQ provider (`plugins/rabbitmq`) against a real broker that
//! `support::rabbitmq` starts per test (issue #32).

use crate::support::rabbitmq::{ADMIN, RabbitMq};

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
            Some(serde_json::json!({"durable": true})),
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
