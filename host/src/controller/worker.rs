//! One worker's turn with a key: take ownership (in a cluster), wait for
//! the caches to show the key's last writes, call the reconciler on the
//! call pool (or inline), apply its response, and carry out what comes next
//! (forget, requeue after, back off, report a permanent error or a hot
//! loop), which `decide` decides from how the turn ended.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime};

use super::conditions::{report_clashes, report_not_ready, report_throttled};
use super::decide::{Decision, Ended, NOT_NOW_RETRY, decide, tallied};
use super::failures::Seen;
use super::{
    Error, EventRecord, Outcome, ReconcileError, ReconcileRecord, Reconciler, Request, Severity,
    Shared, effects, events, requeue, respond,
};
use crate::api::{self, Api};
use crate::cluster::{Ownership, ShardClaim};
use crate::egress;
use crate::object::{ObjectKey, meta};

/// How a key's turn ended, when it did not fail.
enum Step {
    /// The object is gone (or being deleted without our finalizer).
    Gone,
    /// The circuit breaker holds the object.
    Stopped,
    /// The last reconcile failed permanently and nothing the reconciler
    /// would see has changed since (`failures`).
    StillFailed,
    /// This host's cluster lease is too close to expiry to call the
    /// reconciler; try again shortly.
    Postponed,
    /// The plugin is over its share (`pace`); try again when its debt
    /// is repaid.
    Paced(Duration),
    /// A write of the response found the object (or a child) changed since
    /// the reconciler saw it: optimistic concurrency at work, not a
    /// failure of the plugin. The key is retried like a transient error,
    /// and the change that won is usually queued already.
    Conflicted(String),
    /// The response was applied.
    Applied {
        requeue_after: Option<Duration>,
        generation: i64,
        /// The owned children the reconciler saw.
        children: Vec<Arc<crate::object::Object>>,
        /// A fingerprint of the object and children the reconciler saw.
        seen: u64,
        /// Store revisions the response's writes made.
        written: Vec<i64>,
        /// Whether it wrote anything (events included).
        wrote: bool,
        /// Whether it created, changed or deleted a child: progress the
        /// requeue throttle counts (its own status writes are not).
        moved_children: bool,
        /// Whether a desired child could not be made because another
        /// object holds its name.
        clashed: bool,
    },
}

/// What a turn's applied response tells the requeue throttle and the tally.
#[derive(Debug, Default, Clone, Copy)]
struct AppliedFacts {
    /// A fingerprint of what the reconciler saw (`seen_fingerprint`).
    seen: u64,
    /// Whether it wrote anything.
    wrote: bool,
    /// Whether it created, changed or deleted a child.
    moved_children: bool,
    /// Whether a desired child clashed with another object's.
    clashed: bool,
}

/// A fingerprint of a set of children: their uids and resource versions.
fn fingerprint(children: &[Arc<crate::object::Object>]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut ids: Vec<(&str, Option<&str>)> = children
        .iter()
        .map(|c| (meta::uid(c), meta::resource_version(c)))
        .collect();
    ids.sort_unstable();
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    ids.hash(&mut hasher);
    hasher.finish()
}

/// A fingerprint of what others may change of an object (its generation,
/// labels, annotations and deletion) and of its children's versions; not
/// its resource version, which the plugin's own status writes move.
fn seen_fingerprint(object: &crate::object::Object, children: u64) -> u64 {
    use std::hash::{Hash, Hasher};
    /// Feeds JSON text to the hasher as it is written, never held whole.
    struct Feed<'h>(&'h mut std::collections::hash_map::DefaultHasher);
    impl std::io::Write for Feed<'_> {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.write(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    let metadata = &object["metadata"];
    for field in ["labels", "annotations"] {
        let _ = serde_json::to_writer(Feed(&mut hasher), &metadata[field]);
    }
    (
        meta::generation(object),
        meta::deletion_timestamp(object),
        children,
    )
        .hash(&mut hasher);
    hasher.finish()
}

/// Worker `index` (from 0) takes keys while the gate lets it. A turn that
/// starts waiting on the network (its requests queued behind a busy
/// destination's limits, or on the wire) goes on in a task of its own and
/// the worker takes the next key: waiting keys hold no worker.
pub(super) async fn worker(shared: Arc<Shared>, index: usize) {
    let mut limit = shared.gate.subscribe();
    loop {
        super::concurrency::Gate::admit(index, &mut limit).await;
        let Some(key) = shared.queue.get().await else {
            break;
        };
        let (parker, parked) = egress::Parker::new();
        shared.turns.start(&key, parker.clone());
        let mut turn = Box::pin(turn(shared.clone(), key, parker));
        tokio::select! {
            biased;
            () = &mut turn => {}
            Ok(()) = parked => shared.parked.carry_on(turn),
        }
        // Over its share: this worker takes no other key until the plugin
        // is back within it. Taking key after key only to put each back
        // spun the queue (3.3M paced turns in 30 s for 5,000 Pods;
        // docs/benchmarks/scale.md, "Reading your own writes"). A slice
        // at a time, so that a stop (a reload) never waits out a long debt.
        if let Some((wait, _)) = shared.pace.debt() {
            tokio::time::sleep(wait.min(PACED_WORKER_SLICE)).await;
        }
    }
}

/// The longest a worker sleeps on its plugin's debt before it looks again
/// (a stop waits for its workers).
const PACED_WORKER_SLICE: Duration = Duration::from_millis(250);

/// One key's turn, from taking ownership to handing it back to the queue.
async fn turn(shared: Arc<Shared>, key: ObjectKey, parker: egress::Parker) {
    {
        let claim = match shared.ownership(&key) {
            Ownership::Local => None,
            Ownership::Owned(claim) => Some(claim),
            Ownership::NotMine => {
                // Its owner queues it; nothing of it is ours to remember.
                shared.queue.forget(&key);
                end_turn(&shared, &key);
                return;
            }
            Ownership::NotNow => {
                end_turn(&shared, &key);
                shared.queue.add_after(key, NOT_NOW_RETRY);
                return;
            }
        };
        let api = claim.as_ref().map_or(&shared.api, |c| c.api());
        let started = SystemTime::now();
        let clock = Instant::now();
        if shared
            .in_flight
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key.clone(), started)
            .is_some()
        {
            shared.concurrent.fetch_add(1, Ordering::Relaxed);
            tracing::error!(object = %key, "a key was handed to two workers at once");
        }
        let reconciler = shared.reconciler();
        let mut called = None;
        let outcome = reconcile_key(
            &shared,
            api,
            claim.as_ref(),
            &reconciler,
            &key,
            &mut called,
            parker,
        )
        .await;
        if let Some(called) = &called {
            record_reconcile(&shared, &key, called.at, &outcome);
        }
        let was_called = called.is_some();
        shared
            .in_flight
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&key);
        // What the requeue throttle and the tally need of an applied response.
        let mut applied = AppliedFacts::default();
        let ended = match outcome {
            Ok(Step::Gone) => Ended::Gone,
            Ok(Step::Stopped) => Ended::Stopped,
            Ok(Step::StillFailed) => Ended::StillFailed,
            Ok(Step::Postponed) => Ended::Postponed,
            Ok(Step::Paced(wait)) => Ended::Paced(wait),
            Ok(Step::Applied {
                requeue_after,
                generation,
                children,
                seen,
                written,
                wrote,
                moved_children,
                clashed,
            }) => {
                applied = AppliedFacts {
                    seen,
                    wrote,
                    moved_children,
                    clashed,
                };
                Ended::Applied {
                    requeue_after,
                    hold: shared.effects.take_hold(&key),
                    hot_loop: shared
                        .breaker
                        .record(&key, generation, &children, &written, wrote),
                    generation,
                }
            }
            Ok(Step::Conflicted(message)) => Ended::Conflicted(message),
            Err(ReconcileError::Transient(message)) => {
                let shard_moved = shared.cluster.as_ref().is_some_and(|c| {
                    !c.owns(&Api::key(&shared.kind, key.namespace.as_deref(), &key.name))
                });
                Ended::Transient {
                    message,
                    hold: (!shard_moved)
                        .then(|| shared.effects.take_hold(&key))
                        .flatten(),
                    shard_moved,
                }
            }
            Err(ReconcileError::Permanent(message)) => Ended::Permanent(message),
        };
        if was_called {
            shared.tally.record(
                tallied(&ended, applied.wrote, applied.clashed),
                clock.elapsed(),
            );
        }
        let (outcome, next_in) = match decide(ended) {
            Decision::Forget => {
                shared.queue.forget(&key);
                shared.breaker.forget(&key);
                shared.failures.forget(&key);
                shared.requeues.forget(&key);
                shared.clash_watch.watch(&key, &[]);
                shared.effects.forget(&key);
                (None, None)
            }
            Decision::Drop => {
                shared.queue.forget(&key);
                end_turn(&shared, &key);
                return;
            }
            Decision::RetrySoon(after) => {
                drop(claim);
                end_turn(&shared, &key);
                shared.queue.add_after(key, after);
                return;
            }
            Decision::Succeeded { requeue_after } => {
                shared.queue.forget(&key);
                match requeue_after {
                    Some(requested) => {
                        let delay = shared.requeues.delay(
                            &key,
                            requested,
                            applied.moved_children,
                            requeue::Seen {
                                fingerprint: applied.seen,
                            },
                        );
                        if delay.started_throttling {
                            report_throttled(
                                &shared,
                                api,
                                reconciler.manifest(),
                                &key,
                                requested,
                                delay.after,
                            )
                            .await;
                        }
                        shared.queue.add_after(key.clone(), delay.after);
                        (Some(Outcome::Success), Some(delay.after))
                    }
                    None => {
                        shared.requeues.forget(&key);
                        (Some(Outcome::Success), None)
                    }
                }
            }
            Decision::HotLoop(message) => {
                shared.queue.forget(&key);
                shared.hot_loops.fetch_add(1, Ordering::Relaxed);
                shared.requeues.forget(&key);
                tracing::warn!(plugin = %reconciler.manifest().name, object = %key, "hot loop; circuit breaker open");
                report_not_ready(
                    &shared,
                    api,
                    reconciler.manifest(),
                    &key,
                    ("HotLoop", &message),
                    None,
                )
                .await;
                (Some(Outcome::PermanentError(message)), None)
            }
            Decision::Backoff {
                message,
                hold,
                conflict,
            } => {
                let delay = match hold {
                    Some(hold) => {
                        shared.queue.add_after(key.clone(), hold);
                        hold
                    }
                    None => shared.queue.add_rate_limited(key.clone()),
                };
                if conflict {
                    tracing::debug!(plugin = %reconciler.manifest().name, object = %key, error = %message, retry_in = ?delay, "object changed while it was reconciled; will retry");
                } else {
                    tracing::warn!(plugin = %reconciler.manifest().name, object = %key, error = %message, retry_in = ?delay, "reconcile failed; will retry");
                }
                (Some(Outcome::TransientError(message)), Some(delay))
            }
            Decision::NotReady(message) => {
                shared.queue.forget(&key);
                tracing::warn!(plugin = %reconciler.manifest().name, object = %key, error = %message, "reconcile failed permanently");
                let seen = called.map(|called| Seen {
                    resource_version: meta::resource_version(&called.object)
                        .unwrap_or_default()
                        .to_owned(),
                    children: called.children,
                });
                let reported = report_not_ready(
                    &shared,
                    api,
                    reconciler.manifest(),
                    &key,
                    ("ReconcileError", &message),
                    seen.as_ref().map(|seen| seen.resource_version.as_str()),
                )
                .await;
                if let Some(seen) = seen {
                    shared.failures.record(&key, seen, reported);
                }
                (Some(Outcome::PermanentError(message)), None)
            }
        };
        if let Some(outcome) = outcome {
            shared.history.push(
                &key,
                ReconcileRecord {
                    started,
                    duration: clock.elapsed(),
                    version: reconciler.manifest().version.clone(),
                    outcome,
                    next_in,
                },
            );
        } else {
            shared.history.forget(&key);
        }
        drop(claim);
        end_turn(&shared, &key);
        if was_called {
            shared
                .gate
                .record(!shared.queue.is_empty(), shared.pool.overflowed());
        }
    }
}

/// Where the controller's calls are charged: its plugin's pace and tally.
fn charge(shared: &Shared) -> super::pool::Charge {
    super::pool::Charge {
        pace: shared.pace.clone(),
        tally: shared.tally.clone(),
    }
}

/// The turn of `key` is over: the queue may hand it out again.
fn end_turn(shared: &Shared, key: &ObjectKey) {
    shared.turns.end(key);
    shared.queue.done(key);
}

/// One debug event per reconciler call on target `setpoint::reconcile`,
/// with the wall clock time of the call and of the end of its writes: the
/// record tests use to prove that no key is ever reconciled by two hosts at
/// once.
fn record_reconcile(
    shared: &Shared,
    key: &ObjectKey,
    started: SystemTime,
    outcome: &Result<Step, ReconcileError>,
) {
    if !tracing::enabled!(target: "setpoint::reconcile", tracing::Level::DEBUG) {
        return;
    }
    let micros = |t: SystemTime| {
        t.duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_micros())
    };
    let host = shared.cluster.as_ref().map_or("local", |c| c.host_id());
    let outcome = match outcome {
        Ok(Step::Conflicted(_)) => "transient",
        Ok(_) => "ok",
        Err(ReconcileError::Transient(_)) => "transient",
        Err(ReconcileError::Permanent(_)) => "permanent",
    };
    tracing::debug!(
        target: "setpoint::reconcile",
        host,
        kind = %shared.kind.kind,
        object = %key,
        start_us = micros(started) as u64,
        end_us = micros(SystemTime::now()) as u64,
        outcome,
        "reconciled"
    );
}

/// A call of the reconciler: when, and what it was shown.
struct Called {
    at: SystemTime,
    object: Arc<crate::object::Object>,
    /// Fingerprint of the owned children.
    children: u64,
}

/// Reconcile one key, writing through `api`; `called` is set when the
/// reconciler is called.
async fn reconcile_key(
    shared: &Arc<Shared>,
    api: &Api,
    claim: Option<&ShardClaim>,
    reconciler: &Arc<dyn Reconciler>,
    key: &ObjectKey,
    called: &mut Option<Called>,
    parker: egress::Parker,
) -> Result<Step, ReconcileError> {
    let manifest = reconciler.manifest();
    // First: a plugin over its share waits before anything is read for
    // its turn (a key paced again and again read and decoded its object
    // each time; docs/benchmarks/scale.md, "Reading your own writes").
    if let Some(wait) = super::pace::paced(shared, api, manifest, key).await {
        return Ok(Step::Paced(wait));
    }
    // Read after the caches show the key's last writes: read before, the
    // object would be the one that write replaced (a status computed from
    // it conflicts, and the call is made again).
    wait_for_own_writes(shared, key).await;
    let Some(object) = shared.informer.get(key) else {
        return Ok(Step::Gone);
    };
    let generation = meta::generation(&object);
    shared.turns.decides_on(key, &object);
    if meta::deletion_timestamp(&object).is_none() && shared.breaker.is_open(key, generation) {
        return Ok(Step::Stopped);
    }
    let applier = respond::Applier::new(
        api,
        manifest,
        &shared.owned_kinds,
        &shared.kind,
        Some((key, &shared.echoes)),
    )
    .with_event_budget(&shared.event_budget)
    .with_grants(&shared.egress);
    let mut finalizing = false;
    if let Some(finalizer) = &manifest.finalizer {
        if meta::deletion_timestamp(&object).is_some() {
            if !meta::finalizers(&object).contains(&finalizer.as_str()) {
                return Ok(Step::Gone);
            }
            finalizing = true;
        } else {
            let added = match applier.ensure_finalizer(&object, finalizer).await {
                Ok(added) => added,
                Err(err) => return write_failed(err),
            };
            if added {
                // The write requeues the key through the informer.
                let written = remember_writes(shared, key, &applier);
                return Ok(Step::Applied {
                    requeue_after: None,
                    generation,
                    children: Vec::new(),
                    seen: 0,
                    written,
                    wrote: true,
                    moved_children: false,
                    clashed: false,
                });
            }
        }
    } else if meta::deletion_timestamp(&object).is_some() {
        return Ok(Step::Gone);
    }

    let uid = meta::uid(&object).to_owned();
    let owned: Vec<_> = shared
        .owned_informers
        .iter()
        .flat_map(|i| i.owned_by(&uid))
        .collect();
    let children = fingerprint(&owned);
    if shared.failures.unchanged(
        key,
        meta::resource_version(&object).unwrap_or_default(),
        children,
    ) {
        return Ok(Step::StillFailed);
    }
    let request = Request::first(
        object.clone(),
        owned,
        finalizing,
        shared.effects.outcomes(key),
    );
    let callee = reconciler.clone();
    if claim.is_some_and(|c| !c.is_fresh()) {
        // Waiting for the caches took long enough that the lease may lapse
        // during the call; whoever holds the shard then reconciles it.
        return Ok(Step::Postponed);
    }
    *called = Some(Called {
        at: SystemTime::now(),
        object: object.clone(),
        children,
    });
    let inline = callee.runs_inline();
    let view = if inline {
        shared.inline_view.clone()
    } else {
        shared.view.clone()
    };
    let (request, response) = shared
        .pool
        .reconcile(&callee, inline, &view, request, Some(charge(shared)))
        .await?;
    // The plugin has seen the outcomes and answered: an error is its
    // decision about them, and handing them over again would replay the
    // same failure forever. Only a conflict below hands them back.
    if !request.outcomes.is_empty() {
        shared.effects.seen_outcomes(key);
    }
    let response = response?;
    let egress = &shared.egress;
    let scope = effects::scope(
        shared,
        manifest,
        &object,
        key,
        egress,
        finalizing,
        parker.clone(),
    );
    let mut report = egress::Report::default();
    let rounds = egress::rounds(egress, &scope, request, response, &mut report, |r| {
        let (callee, view, parker) = (&callee, &view, &parker);
        async move {
            let _turn = match parker.is_parked() {
                true => shared.parked.call_permit().await,
                false => None,
            };
            shared
                .pool
                .reconcile(callee, inline, view, r, Some(charge(shared)))
                .await
        }
    })
    .await;
    let (mut request, mut response) = match rounds {
        Ok(done) => done,
        Err(err) => {
            effects::report(shared, api, egress, manifest, key, &report).await;
            return Err(err);
        }
    };
    // The answers were the plugin's to read; a turn waiting for its writes'
    // turn should not hold them (a zone read can be large, and thousands of
    // turns may wait).
    request.observations = Vec::new();
    if !response.effects.is_empty() {
        // The next reconcile sees the writes' outcomes: soon, not at the
        // next change (the requeue floor still applies).
        response.requeue_after = Some(Duration::ZERO);
    }

    let result = applier.apply(&object, &request.owned, &response).await;
    let mut written = remember_writes(shared, key, &applier);
    let bytes = applier.bytes_written.load(Ordering::Relaxed);
    shared.pace.charge_writes(bytes);
    shared.tally.written(bytes as u64);
    let events_written = applier.events.load(Ordering::Relaxed) > 0;
    let dropped = applier.events_dropped.load(Ordering::Relaxed);
    if dropped > 0 {
        shared.tally.events_dropped(dropped as u64);
    }
    match result {
        Ok(()) => {}
        Err(Error::Refused(msg)) => {
            let event = EventRecord {
                severity: Severity::Warning,
                reason: "ResponseRefused".into(),
                message: msg.clone(),
            };
            let _ = events::record(api, &manifest.name, &object, &event).await;
            return Err(ReconcileError::Permanent(msg));
        }
        Err(err) => {
            if matches!(err, Error::Api(api::Error::Conflict { .. })) {
                // Decided on an old version: the retry decides again, and
                // must see what the writes did.
                if !request.outcomes.is_empty() {
                    shared.effects.keep_outcomes(key, request.outcomes.clone());
                }
            }
            return write_failed(err);
        }
    }
    let mut clashed = false;
    if response.children.is_some() {
        let clashes =
            std::mem::take(&mut *applier.clashes.lock().unwrap_or_else(|p| p.into_inner()));
        clashed = !clashes.is_empty();
        shared.clash_watch.watch(key, &clashes);
        report_clashes(shared, api, manifest, key, &clashes).await;
    }
    let effects_done = effects::write(shared, egress, &scope, key, &response, &mut report).await;
    effects::report(shared, api, egress, manifest, key, &report).await;
    // Pre-delete work done through writes counts only once they succeeded.
    if finalizing
        && response.remove_finalizer
        && effects_done
        && let Some(finalizer) = &manifest.finalizer
    {
        match applier.remove_finalizer(key, finalizer).await {
            Ok(true) => {}
            // Someone else let it go meanwhile: nothing left to finalize.
            Ok(false) => return Ok(Step::Gone),
            Err(err) => return write_failed(err),
        }
        // The next reconcile of the key (queued by the status write, say)
        // must see the finalizer gone, not call the plugin to finalize again.
        written.extend(remember_writes(shared, key, &applier));
    }
    Ok(Step::Applied {
        requeue_after: response.requeue_after,
        generation,
        children: request.owned,
        // Only a requeue the reconciler asks for looks at it.
        seen: if response.requeue_after.is_some() {
            seen_fingerprint(&object, children)
        } else {
            0
        },
        wrote: !written.is_empty() || events_written,
        moved_children: applier
            .children_moved
            .load(std::sync::atomic::Ordering::Relaxed),
        written,
        clashed,
    })
}

/// How long a reconcile waits for the caches to show its key's last writes.
const OWN_WRITES_TIMEOUT: Duration = Duration::from_secs(5);

/// Remember what a reconcile wrote; returns the store revisions it wrote.
fn remember_writes(shared: &Shared, key: &ObjectKey, applier: &respond::Applier<'_>) -> Vec<i64> {
    let written = std::mem::take(&mut *applier.written.lock().unwrap_or_else(|p| p.into_inner()));
    if written.is_empty() {
        return Vec::new();
    }
    let revisions = written.iter().map(|(_, rv)| *rv).collect();
    shared
        .pending_writes
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .entry(key.clone())
        .or_default()
        .extend(written);
    revisions
}

/// Read your own writes: before reconciling a key again, wait until the
/// informers have seen what its last reconcile wrote, so a reconciler is
/// never handed a cache that predates its own changes (which would make it
/// create children again or write status from an old version).
async fn wait_for_own_writes(shared: &Shared, key: &ObjectKey) {
    let pending = shared
        .pending_writes
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .remove(key);
    for (kind, revision) in pending.into_iter().flatten() {
        let informer = std::iter::once(&shared.informer)
            .chain(&shared.owned_informers)
            .find(|i| i.kind().group == kind.group && i.kind().plural == kind.plural);
        if let Some(informer) = informer
            && !informer
                .wait_for_revision(revision, OWN_WRITES_TIMEOUT)
                .await
        {
            tracing::warn!(object = %key, kind = %kind.kind, revision, "cache did not catch up with our own write in time");
        }
    }
}

/// A write of the reconcile failed: a conflict is optimistic concurrency
/// at work ([`Step::Conflicted`]), anything else a transient error.
fn write_failed(err: Error) -> Result<Step, ReconcileError> {
    match err {
        Error::Api(api::Error::Conflict { .. }) => Ok(Step::Conflicted(err.to_string())),
        err => Err(transient(err)),
    }
}

fn transient(err: Error) -> ReconcileError {
    ReconcileError::Transient(err.to_string())
}
