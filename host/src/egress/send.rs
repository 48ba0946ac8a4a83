//! How one request goes out: a read shares an identical exchange when it
//! can (`shared`), a batchable write joins a batch (`batch`), and the
//! exchange itself waits for its turn in the limits (`limits`), resolves
//! and checks the address, sends, and tells the limits how it went
//! (resending once a 5xx that crowding caused). Answers come back masked.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::prepare::Prepared;
use super::secrets::{self, Masker};
use super::{
    BATCH_HEADER, Call, Egress, Refusal, Report, SAFE_METHODS, batch, client, idempotency_key,
    limits, shared,
};
use crate::contract::{HttpError, HttpErrorKind, HttpResponse};
use crate::object::meta;

/// What an exchange carries besides its own request's answer.
enum Carrying<'a> {
    /// Only its own.
    Own,
    /// A read others joined: told when it goes on the wire.
    Read(&'a shared::Flight),
    /// A batch of writes it leads: its body is the batch's.
    Batch(&'a mut batch::Leader),
}

impl Egress {
    /// A read shares an identical exchange when it can (`shared`); any
    /// other request, or a read nobody is making, goes through the limits
    /// and the wire. Answers come back masked.
    pub(super) async fn send(
        &self,
        call: &Call<'_, '_>,
        prepared: Prepared,
        report: &mut Report,
    ) -> Result<HttpResponse, HttpError> {
        let Call {
            scope,
            request,
            role,
            ..
        } = *call;
        let plugin = scope.plugin.name.as_str();
        let label = prepared.destination.to_string();
        let method = request.method.to_ascii_uppercase();
        if role != "observe" || !SAFE_METHODS.contains(&method.as_str()) {
            let result = self.write_one(call, prepared, report).await;
            let unsent = matches!(&result, Err(e) if e.kind == HttpErrorKind::Throttled);
            if !unsent {
                self.inner
                    .observations
                    .wrote(&label, meta::uid(scope.object));
            }
            return result;
        }
        let mut prepared = prepared;
        prepared
            .wire
            .headers
            .retain(|(n, _)| !n.eq_ignore_ascii_case(BATCH_HEADER));
        let key = shared::key(plugin, &method, &prepared.wire);
        let max_age = shared::max_age(&request.headers).unwrap_or(self.inner.config.observe_window);
        loop {
            match self.inner.observations.lookup(
                key,
                &label,
                meta::uid(scope.object),
                max_age,
                scope.urgent,
            ) {
                shared::Lookup::Hit(answer) => {
                    self.inner.metrics.observed(plugin, &label, "shared");
                    return (*answer).clone();
                }
                shared::Lookup::Join(mut answer) => {
                    let waited = scope
                        .wait(
                            request,
                            report,
                            tokio::time::timeout_at(scope.wait_deadline, async {
                                loop {
                                    if let Some(a) = answer.borrow_and_update().clone() {
                                        return Some(a);
                                    }
                                    if answer.changed().await.is_err() {
                                        return answer.borrow().clone();
                                    }
                                }
                            }),
                        )
                        .await?;
                    match waited {
                        Err(_) => {
                            return Err(HttpError {
                                kind: HttpErrorKind::Timeout,
                                message: format!(
                                    "{} {}: waited for another object's identical read until the deadline",
                                    request.method, request.url
                                ),
                            });
                        }
                        // The leader gave up before sending (its own
                        // deadline): look again, perhaps lead.
                        Ok(None) => continue,
                        Ok(Some(a)) if matches!(&*a, Err(e) if e.kind == HttpErrorKind::Throttled) =>
                        {
                            tokio::task::yield_now().await;
                            continue;
                        }
                        Ok(Some(a)) => {
                            self.inner.metrics.observed(plugin, &label, "shared");
                            return (*a).clone();
                        }
                    }
                }
                shared::Lookup::Lead(flight) => {
                    let result = self
                        .exchange(call, prepared, report, Carrying::Read(&flight))
                        .await;
                    if !matches!(&result, Err(e) if e.kind == HttpErrorKind::Throttled) {
                        self.inner.metrics.observed(plugin, &label, "sent");
                    }
                    // An answer is kept for others while fresh (those HTTP
                    // lets a cache keep without being told: not a 429 or a
                    // 503, which speak of the server's load now); an error
                    // only goes to those who joined this exchange.
                    let keep =
                        matches!(&result, Ok(r) if r.status < 400 || matches!(r.status, 404 | 410));
                    flight.land(Arc::new(result.clone()), keep);
                    return result;
                }
            }
        }
    }

    /// A write (or an unsafe read): alone, or with others waiting at the
    /// same time when it is batchable (`batch`).
    async fn write_one(
        &self,
        call: &Call<'_, '_>,
        mut prepared: Prepared,
        report: &mut Report,
    ) -> Result<HttpResponse, HttpError> {
        let Call {
            scope,
            request,
            role,
            ..
        } = *call;
        let plugin = scope.plugin.name.as_str();
        let label = prepared.destination.to_string();
        let body_secrets = request
            .secrets
            .iter()
            .any(|s| matches!(s.target, crate::contract::SecretTarget::BodyPointer(_)));
        let batchable = |wire: &secrets::Wire| {
            (role == "effect")
                .then(|| batch::Batchable::of(plugin, &request.method, wire, body_secrets))
                .flatten()
        };
        let first = batchable(&prepared.wire);
        // Kept with its batch header: a member sent back to batch again
        // joins anew.
        let marked = first.is_some().then(|| prepared.wire.clone());
        // The batch header is the host's: never sent.
        prepared
            .wire
            .headers
            .retain(|(n, _)| !n.eq_ignore_ascii_case(BATCH_HEADER));
        let (Some(mut write), Some(marked)) = (first, marked) else {
            return self.exchange(call, prepared, report, Carrying::Own).await;
        };
        let own_key = idempotency_key(scope.object, &request.id);
        loop {
            match self.inner.batches.join(write, own_key.clone()) {
                batch::Joined::Member(outcome) => {
                    let waited = scope
                        .wait(
                            request,
                            report,
                            tokio::time::timeout_at(scope.wait_deadline, outcome),
                        )
                        .await?;
                    return match waited {
                        Ok(Ok(batch::Outcome::Answer(answer))) => {
                            self.inner.metrics.batched(plugin, &label);
                            (*answer).clone()
                        }
                        Ok(Ok(batch::Outcome::Again)) => {
                            write = batchable(&marked).expect("batchable before");
                            continue;
                        }
                        Ok(Ok(batch::Outcome::Alone) | Err(_)) => {
                            self.exchange(call, prepared, report, Carrying::Own).await
                        }
                        Err(_) => Err(HttpError {
                            kind: HttpErrorKind::Timeout,
                            message: format!(
                                "{} {}: sent with other writes, no answer before the deadline",
                                request.method, request.url
                            ),
                        }),
                    };
                }
                batch::Joined::Leader(mut leader) => {
                    let alone = prepared.clone();
                    let result = self
                        .exchange(call, prepared, report, Carrying::Batch(&mut leader))
                        .await;
                    let members = leader.members();
                    // A refused batch does not say whose item was refused:
                    // everyone, this write included, is sent alone.
                    let refused =
                        members > 1 && matches!(&result, Ok(r) if (400..500).contains(&r.status));
                    leader.answer(Arc::new(result.clone()), refused);
                    if refused {
                        return self.exchange(call, alone, report, Carrying::Own).await;
                    }
                    return result;
                }
            }
        }
    }

    /// Wait for a turn, check the address, and make the exchange: the
    /// request's own, a read others share, or a batch of writes.
    async fn exchange(
        &self,
        call: &Call<'_, '_>,
        mut prepared: Prepared,
        report: &mut Report,
        mut carrying: Carrying<'_>,
    ) -> Result<HttpResponse, HttpError> {
        let Call {
            scope,
            request,
            role,
            masker,
        } = *call;
        let plugin = scope.plugin.name.as_str();
        let label = prepared.destination.to_string();
        let config = &self.inner.config;
        scope.parker.park();
        let ask = limits::Ask {
            plugin,
            destination: &label,
            granted_rps: prepared.plugin_rps,
            granted_concurrency: prepared.plugin_concurrency,
            urgent: scope.urgent,
            deadline: scope.wait_deadline,
        };
        // A write carries an `Idempotency-Key` and a GET changes nothing:
        // either may go again after a failure that crowding caused.
        let resendable = role == "effect" || matches!(request.method.as_str(), "GET" | "HEAD");
        let mut addrs = None;
        let mut resent = false;
        let mut members = 1;
        loop {
            let turn = match scope
                .wait(request, report, self.inner.limits.turn(ask))
                .await?
            {
                Ok(turn) => turn,
                Err(held) => {
                    self.inner.metrics.refused(plugin, &label, "Throttled");
                    report.hold_for(held.after);
                    return Err(HttpError {
                        kind: HttpErrorKind::Throttled,
                        message: format!(
                            "{} {}: held by the {} for {} ms",
                            request.method,
                            request.url,
                            held.reason,
                            held.after.as_millis().max(1)
                        ),
                    });
                }
            };
            if let Carrying::Read(flight) = &carrying {
                flight.sent(turn.is_probe());
            }
            // What the request carries is settled at its first turn; a
            // resend goes as it went.
            if !resent {
                let key = match &mut carrying {
                    Carrying::Batch(leader) => {
                        let closed = leader.close(turn.is_probe());
                        members = leader.members();
                        prepared.wire.body = Some(closed.body);
                        Some(closed.idempotency_key)
                    }
                    _ => (role == "effect").then(|| idempotency_key(scope.object, &request.id)),
                };
                if let Some(key) = key {
                    prepared.wire.headers.push(("Idempotency-Key".into(), key));
                }
            }
            let timeout = request.timeout_ms.map_or(config.request_timeout, |ms| {
                config
                    .request_timeout
                    .min(Duration::from_millis(u64::from(ms)))
            });
            let budget = client::Budget {
                connect: config.connect_timeout,
                deadline: scope.budget_end().min(Instant::now() + timeout),
                max_body: config.max_body_bytes,
            };
            let resolved = match addrs.take() {
                Some(addrs) => addrs,
                None => {
                    match client::resolve(&prepared.destination, prepared.explicit, &budget).await {
                        Ok(addrs) => addrs,
                        Err(err) if err.kind == HttpErrorKind::Refused => {
                            self.inner.metrics.refused(plugin, &label, "PrivateAddress");
                            report.refused.push(Refusal {
                                destination: label.clone(),
                                reason: "PrivateAddress",
                                message: err.message.clone(),
                            });
                            return Err(mask_error(masker, err));
                        }
                        Err(err) => {
                            self.inner.metrics.sent(
                                plugin,
                                &label,
                                err.kind.as_str(),
                                Duration::ZERO,
                            );
                            turn.finish(true, None);
                            return Err(mask_error(masker, err));
                        }
                    }
                }
            };
            let started = std::time::Instant::now();
            report.sent += 1;
            let wire = if resendable && !resent {
                prepared.wire.clone()
            } else {
                std::mem::take(&mut prepared.wire)
            };
            let result = client::send(
                &request.method,
                &prepared.destination,
                &resolved,
                wire,
                &budget,
            )
            .await;
            let latency = started.elapsed();
            let (class, failed, retry_after) = match &result {
                Ok(r) => (
                    format!("{}xx", r.status / 100),
                    r.status >= 500,
                    matches!(r.status, 429 | 503)
                        .then(|| retry_after(r))
                        .flatten(),
                ),
                Err(e) => (e.kind.as_str().to_owned(), true, None),
            };
            self.inner.metrics.sent(plugin, &label, &class, latency);
            tracing::trace!(
                plugin,
                method = %request.method,
                url = %request.url,
                outcome = %class,
                members,
                latency_ms = latency.as_secs_f64() * 1000.0,
                "sent"
            );
            let probe = turn.is_probe();
            let crowded = turn.finish(failed, retry_after);
            if let Some(after) = retry_after {
                report.hold_for(after);
            }
            // A 5xx while another request to the same destination ran may
            // be the server refusing parallel work; the destination's
            // concurrency was just halved, so once more, in a turn of its
            // own, decides. Once: a server that fails alone is failing.
            let server_error = matches!(&result, Ok(r) if r.status >= 500);
            if server_error && crowded && resendable && !resent && !probe {
                resent = true;
                addrs = Some(resolved);
                self.inner.metrics.resent(plugin, &label);
                continue;
            }
            return match result {
                Ok(mut response) => {
                    if !masker.is_empty() {
                        response.body = masker.bytes(response.body);
                        for (_, v) in &mut response.headers {
                            *v = masker.text(v);
                        }
                    }
                    Ok(response)
                }
                Err(err) => Err(mask_error(masker, err)),
            };
        }
    }
}

fn mask_error(masker: &Masker, mut err: HttpError) -> HttpError {
    err.message = masker.text(&err.message);
    err
}

/// `Retry-After` in seconds (an HTTP date counts as one second), at most
/// an hour.
fn retry_after(response: &HttpResponse) -> Option<Duration> {
    let value = response.header("retry-after")?.trim();
    let secs = value.parse::<u64>().unwrap_or(1).min(3600);
    Some(Duration::from_secs(secs.max(1)))
}
