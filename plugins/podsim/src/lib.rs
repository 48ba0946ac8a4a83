//! `podsim`: a simulated node agent for `demo.setpoint.dev/v1` Pods.
//!
//! Nothing runs: a new Pod becomes `Pending`, and once `spec.startupDelayMs`
//! has passed it becomes `Running` with `Ready=True`. The plugin never sleeps;
//! it asks the host to call again when the delay is due (`requeue_after`) and
//! compares against the host's clock (`ctx.now()`), so every reconcile is a
//! pure function of the Pod and the time.

use std::time::Duration;

pub use demo_kinds::API_VERSION;
pub use demo_kinds::pod::{Phase, PodSpec, PodStatus};
use setpoint_plugin_sdk::{
    Condition, Ctx, Error, Event, Manifest, Object, Response, reconciler, set_condition,
};

/// The plugin: Pods, their definition and nothing else.
fn manifest() -> Manifest {
    let pod = demo_kinds::pod::definition();
    Manifest::new(
        env!("CARGO_PKG_NAME"),
        env!("CARGO_PKG_VERSION"),
        pod.kind(),
    )
    .define(pod)
}

/// Moves a Pod from new to `Pending` to `Running`; the plugin is [`PodSim`].
#[reconciler(manifest = manifest, name = PodSim)]
pub fn reconcile(
    pod: &Object<PodSpec, PodStatus>,
    ctx: &Ctx,
) -> Result<Response<PodStatus>, Error> {
    // A Pod on its way out needs nothing from its node agent.
    if pod.is_deleting() {
        return Ok(Response::new());
    }
    let now = ctx.now();
    let delay = Duration::from_millis(pod.spec.startup_delay_ms);
    let mut status = pod.status.clone();

    match status.phase {
        // New: accept it and come back when it is due to start.
        None => {
            status.phase = Some(Phase::Pending);
            status.start_time = Some(now);
            let not_ready = Condition::new(
                "Ready",
                false,
                "ContainersNotReady",
                "containers are starting",
            );
            set_condition(&mut status.conditions, not_ready, now);
            Ok(Response::new().status(status).requeue_after(delay))
        }
        Some(Phase::Pending) => {
            // A Pending pod without a start time was edited by hand: start
            // timing it now.
            let due = *status.start_time.get_or_insert(now) + delay;
            if now < due {
                // Woken early (e.g. by an unrelated change): wait for the
                // rest. The status is unchanged, so the host writes nothing.
                return Ok(Response::new()
                    .status(status)
                    .requeue_after(due.saturating_duration_since(now)));
            }
            status.phase = Some(Phase::Running);
            set_condition(
                &mut status.conditions,
                Condition::new("Ready", true, "PodReady", ""),
                now,
            );
            let started = Event::normal("Started", format!("Started pod {}", pod.name()));
            Ok(Response::new().status(status).event(started))
        }
        // Running, or a phase someone else set: nothing to simulate, so
        // no write and no requeue.
        Some(_) => Ok(Response::new()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use setpoint_plugin_sdk::serde_json::{Value, json};
    use setpoint_plugin_sdk::testing::FakeCtx;
    use setpoint_plugin_sdk::{ConditionStatus, Reconciler, Time};

    const T0: i64 = 1_735_787_045_000; // 2025-01-02T03:04:05Z

    fn pod(spec: Value) -> Object<PodSpec, PodStatus> {
        Object::from_value(json!({
            "apiVersion": API_VERSION, "kind": "Pod",
            "metadata": {"name": "web-0", "namespace": "default", "generation": 1},
            "spec": spec,
        }))
        .unwrap()
    }

    fn reconcile_at(pod: &Object<PodSpec, PodStatus>, now: i64) -> Response<PodStatus> {
        PodSim
            .reconcile(pod, &FakeCtx::new().with_now_unix_ms(now))
            .unwrap()
    }

    #[test]
    fn a_new_pod_becomes_pending_and_requeues_after_the_default_delay() {
        let response = reconcile_at(&pod(json!({"containers": [{"image": "nginx"}]})), T0);
        assert_eq!(response.requeue_after, Some(Duration::from_millis(1000)));
        assert!(response.events.is_empty());
        // The status as it will be stored: RFC 3339 with milliseconds.
        assert_eq!(
            setpoint_plugin_sdk::serde_json::to_value(response.status.unwrap()).unwrap(),
            json!({
                "phase": "Pending",
                "startTime": "2025-01-02T03:04:05.000Z",
                "conditions": [{
                    "type": "Ready", "status": "False", "reason": "ContainersNotReady",
                    "message": "containers are starting", "lastTransitionTime": "2025-01-02T03:04:05.000Z"
                }]
            })
        );
    }

    #[test]
    fn a_pending_pod_woken_early_waits_for_the_rest_without_changing_status() {
        let mut pod = pod(json!({"startupDelayMs": 5000}));
        pod.status = reconcile_at(&pod, T0).status.unwrap();
        let response = reconcile_at(&pod, T0 + 1200);
        assert_eq!(response.requeue_after, Some(Duration::from_millis(3800)));
        assert_eq!(
            response.status.as_ref(),
            Some(&pod.status),
            "same status, so no write"
        );
        assert!(response.events.is_empty());
    }

    #[test]
    fn a_pending_pod_whose_delay_passed_runs_and_is_ready() {
        let mut pod = pod(json!({"startupDelayMs": 5000}));
        pod.status = reconcile_at(&pod, T0).status.unwrap();
        let response = reconcile_at(&pod, T0 + 5000);
        let status = response.status.unwrap();
        assert_eq!(status.phase, Some(Phase::Running));
        assert_eq!(status.start_time, Some(Time::from_unix_ms(T0)));
        let ready = &status.conditions[0];
        assert_eq!(
            (ready.status, ready.reason.as_str()),
            (ConditionStatus::True, "PodReady")
        );
        assert_eq!(
            ready.last_transition_time,
            Some(Time::from_unix_ms(T0 + 5000))
        );
        assert_eq!(
            response.events,
            [Event::normal("Started", "Started pod web-0")]
        );
        assert_eq!(response.requeue_after, None);
    }

    #[test]
    fn a_running_pod_needs_nothing() {
        let mut pod = pod(json!({"startupDelayMs": 0}));
        pod.status = reconcile_at(&pod, T0).status.unwrap();
        pod.status = reconcile_at(&pod, T0).status.unwrap();
        assert_eq!(pod.status.phase, Some(Phase::Running));
        assert_eq!(reconcile_at(&pod, T0 + 60_000), Response::new());
    }

    #[test]
    fn the_lifecycle_converges_by_following_requeues() {
        // Drive the pod as the host would: store the status, advance the clock
        // to the requested requeue, repeat until nothing is asked for.
        let mut pod = pod(json!({}));
        let mut now = T0;
        let mut events = Vec::new();
        for _ in 0..10 {
            let response = reconcile_at(&pod, now);
            events.extend(response.events);
            if let Some(status) = response.status {
                pod.status = status;
            }
            match response.requeue_after {
                Some(delay) => now += delay.as_millis() as i64,
                None => break,
            }
        }
        assert_eq!(pod.status.phase, Some(Phase::Running));
        assert_eq!(now, T0 + 1000);
        assert_eq!(events.len(), 1);
    }

    #[test]
    fn a_deleting_pod_is_left_alone() {
        let mut pod = pod(json!({}));
        pod.metadata.deletion_timestamp = Some(Time::from_unix_ms(T0));
        assert_eq!(reconcile_at(&pod, T0), Response::new());
    }

    #[test]
    fn a_hand_edited_pending_pod_without_start_time_starts_timing_now() {
        let mut pod = pod(json!({"startupDelayMs": 100}));
        pod.status.phase = Some(Phase::Pending);
        let response = reconcile_at(&pod, T0);
        assert_eq!(
            response.status.unwrap().start_time,
            Some(Time::from_unix_ms(T0))
        );
        assert_eq!(response.requeue_after, Some(Duration::from_millis(100)));
    }

    #[test]
    fn a_negative_delay_is_a_permanent_error_naming_the_field() {
        let value = json!({"apiVersion": API_VERSION, "kind": "Pod", "metadata": {"name": "p"},
                           "spec": {"startupDelayMs": -1}});
        let err = Object::<PodSpec, PodStatus>::from_value(value).unwrap_err();
        assert!(
            err.is_permanent()
                && err
                    .message()
                    .starts_with("spec.startupDelayMs: invalid value"),
            "{err}"
        );
    }

    #[test]
    fn the_manifest_reconciles_pods_and_carries_their_definition() {
        let manifest = PodSim.manifest();
        assert_eq!(
            (manifest.name.as_str(), manifest.reconciles.kind.as_str()),
            ("podsim", "Pod")
        );
        assert!(manifest.owns.is_empty());
        let crd = &manifest.definitions[0];
        assert_eq!(crd["spec"]["group"], "demo.setpoint.dev");
        assert_eq!(crd["spec"]["names"]["kind"], "Pod");
    }
}
