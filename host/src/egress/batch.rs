//! Writes sent together: a plugin marks a write batchable with the header
//! `X-Setpoint-Batch: /pointer` (the SDK's `HttpRequest::batch`), naming
//! the JSON array in its body that the API accepts several of (PowerDNS's
//! `PATCH` of a zone takes many `rrsets`). Batchable writes of one plugin
//! that wait for their turn at the same time, with the same method, URL
//! and headers (after secrets) and bodies equal but for that array, go as
//! one request whose array is all of theirs, in the order they came.
//!
//! The first becomes the batch's leader and waits for its turn in the
//! limits; whoever comes while it waits joins. When the turn comes the
//! batch closes and is sent; every member gets the answer. An answer
//! that refuses the batch (4xx) says nothing about which member was at
//! fault, so then each member is sent alone, and each gets its own
//! answer. A batch that was not sent (its leader gave up) or was an open
//! breaker's failed probe sends its members back to batch again: while a
//! destination is down its writes wait in a few large batches, not one
//! by one. A batch carries at most [`MAX_MEMBERS`] members and
//! [`MAX_BODY`] bytes; a write whose secrets go into its body is never
//! batched (its answer could show another member's secret).
//!
//! Why: a server that takes one write at a time (PowerDNS on SQLite
//! answers "database is locked" to parallel writes) is otherwise bound to
//! a few hundred writes a second, whatever the limits allow.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::Value;
use tokio::sync::oneshot;

use super::secrets::Wire;
use crate::contract::{HttpError, HttpResponse};

/// The request header that marks a write batchable; the host's, never sent.
pub const BATCH_HEADER: &str = "x-setpoint-batch";

/// The most writes one batch carries.
pub const MAX_MEMBERS: usize = 500;

/// The largest body a batch grows to.
pub const MAX_BODY: usize = 512 << 10;

type Key = [u8; 32];

/// What a member gets.
pub(super) enum Outcome {
    /// The batch's answer.
    Answer(Arc<Result<HttpResponse, HttpError>>),
    /// Send it alone: the batch was refused as a whole.
    Alone,
    /// Join a batch again: this one was not sent (its leader gave up
    /// before its turn), or it was the probe of an open breaker and got
    /// no answer, which says nothing about its members but that the
    /// destination is still down.
    Again,
}

struct Member {
    items: Vec<Value>,
    idempotency_key: String,
    outcome: Option<oneshot::Sender<Outcome>>,
}

struct Open {
    id: u64,
    members: Vec<Member>,
    bytes: usize,
}

#[derive(Default)]
struct State {
    open: HashMap<Key, Open>,
    next_id: u64,
}

/// The open batches of a host.
#[derive(Default)]
pub(super) struct Batches {
    state: Mutex<State>,
}

/// A batchable write, split into the array it adds and the rest.
pub(super) struct Batchable {
    key: Key,
    /// The body with an empty array at the pointer.
    rest: Value,
    pointer: String,
    items: Vec<Value>,
    bytes: usize,
}

/// What a write found.
pub(super) enum Joined {
    /// Another write leads: wait for the outcome.
    Member(oneshot::Receiver<Outcome>),
    /// This write leads: send the batch when the turn comes.
    Leader(Leader),
}

/// The write that sends a batch.
pub(super) struct Leader {
    batches: Arc<Batches>,
    key: Key,
    id: u64,
    rest: Value,
    pointer: String,
    /// Taken when the batch closes.
    members: Vec<Member>,
    closed: bool,
    /// Sent as a circuit breaker's probe: if it fails, the members wait
    /// for turns of their own instead of all failing with it.
    probe: bool,
}

/// The batch as it goes: its body and its `Idempotency-Key`.
pub(super) struct Closed {
    pub(super) body: Vec<u8>,
    pub(super) idempotency_key: String,
}

impl Batchable {
    /// The write as a batch member, when it asks to be one and can be:
    /// `None` sends it alone.
    pub(super) fn of(plugin: &str, method: &str, wire: &Wire, body_secrets: bool) -> Option<Self> {
        let pointer = wire
            .headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(BATCH_HEADER))?
            .1
            .trim()
            .to_owned();
        if body_secrets {
            return None;
        }
        let body = wire.body.as_deref()?;
        let mut rest: Value = serde_json::from_slice(body).ok()?;
        let items = std::mem::take(rest.pointer_mut(&pointer)?.as_array_mut()?);
        let mut headers: Vec<(String, &str)> = wire
            .headers
            .iter()
            .filter(|(n, _)| !n.eq_ignore_ascii_case(BATCH_HEADER))
            .map(|(n, v)| (n.to_ascii_lowercase(), v.as_str()))
            .collect();
        headers.sort();
        use sha2::Digest;
        let mut hash = sha2::Sha256::new();
        let rest_text = rest.to_string();
        for part in [plugin, method, &wire.url, &pointer, &rest_text] {
            hash.update((part.len() as u64).to_le_bytes());
            hash.update(part.as_bytes());
        }
        for (n, v) in headers {
            hash.update((n.len() as u64).to_le_bytes());
            hash.update(n.as_bytes());
            hash.update((v.len() as u64).to_le_bytes());
            hash.update(v.as_bytes());
        }
        Some(Self {
            key: hash.finalize().into(),
            rest,
            pointer,
            items,
            bytes: body.len(),
        })
    }
}

impl Batches {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Join the open batch of this write's kind, or open one and lead it.
    pub(super) fn join(self: &Arc<Self>, write: Batchable, idempotency_key: String) -> Joined {
        let mut state = self.state();
        if let Some(open) = state.open.get_mut(&write.key)
            && open.members.len() < MAX_MEMBERS
            && open.bytes + write.bytes <= MAX_BODY
        {
            let (sender, receiver) = oneshot::channel();
            open.bytes += write.bytes;
            open.members.push(Member {
                items: write.items,
                idempotency_key,
                outcome: Some(sender),
            });
            return Joined::Member(receiver);
        }
        state.next_id += 1;
        let id = state.next_id;
        // A full batch stays with its leader; the next one starts here.
        state.open.insert(
            write.key,
            Open {
                id,
                members: vec![Member {
                    items: write.items,
                    idempotency_key,
                    outcome: None,
                }],
                bytes: write.bytes,
            },
        );
        Joined::Leader(Leader {
            batches: self.clone(),
            key: write.key,
            id,
            rest: write.rest,
            pointer: write.pointer,
            members: Vec::new(),
            closed: false,
            probe: false,
        })
    }
}

impl Leader {
    fn take(&mut self) {
        if self.closed {
            return;
        }
        self.closed = true;
        let mut state = self.batches.state();
        if state.open.get(&self.key).is_some_and(|o| o.id == self.id)
            && let Some(open) = state.open.remove(&self.key)
        {
            self.members = open.members;
        }
    }

    /// The turn came (as a breaker's `probe`, or not): nobody joins any
    /// more; the body to send.
    pub(super) fn close(&mut self, probe: bool) -> Closed {
        self.probe = probe;
        self.take();
        let mut rest = self.rest.clone();
        let mut keys = Vec::with_capacity(self.members.len());
        if let Some(array) = rest
            .pointer_mut(&self.pointer)
            .and_then(Value::as_array_mut)
        {
            for member in &mut self.members {
                array.append(&mut member.items);
                keys.push(member.idempotency_key.as_str());
            }
        }
        let idempotency_key = if keys.len() == 1 {
            keys[0].to_owned()
        } else {
            use sha2::Digest;
            let mut hash = sha2::Sha256::new();
            for key in &keys {
                hash.update(key.as_bytes());
            }
            hash.finalize()[..16]
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect()
        };
        Closed {
            body: rest.to_string().into_bytes(),
            idempotency_key,
        }
    }

    /// How many writes the batch carried (1 before it closed).
    pub(super) fn members(&self) -> usize {
        self.members.len().max(1)
    }

    /// Hand the answer to every member; `alone` tells them to send their
    /// writes alone instead (a refused batch, or a leader that gave up).
    pub(super) fn answer(mut self, answer: Arc<Result<HttpResponse, HttpError>>, alone: bool) {
        let failed = match answer.as_ref() {
            Ok(response) => response.status >= 500,
            Err(_) => true,
        };
        let again = self.probe && failed;
        self.take();
        for member in &mut self.members {
            if let Some(sender) = member.outcome.take() {
                let _ = sender.send(if alone {
                    Outcome::Alone
                } else if again {
                    Outcome::Again
                } else {
                    Outcome::Answer(answer.clone())
                });
            }
        }
    }
}

impl Drop for Leader {
    fn drop(&mut self) {
        // Gave up (or was cancelled) before answering: the members go alone.
        self.take();
        for member in &mut self.members {
            if let Some(sender) = member.outcome.take() {
                let _ = sender.send(Outcome::Again);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn write(url: &str, name: &str) -> Wire {
        Wire {
            url: url.into(),
            headers: vec![
                ("X-API-Key".into(), "k3y-value".into()),
                ("X-Setpoint-Batch".into(), "/rrsets".into()),
            ],
            body: Some(json!({"rrsets": [{"name": name}]}).to_string().into_bytes()),
            derived: Vec::new(),
        }
    }

    #[test]
    fn writes_waiting_together_go_as_one_body_with_every_member() {
        let batches = Arc::new(Batches::default());
        let first = Batchable::of("p", "PATCH", &write("http://a/z", "a."), false).unwrap();
        let Joined::Leader(mut leader) = batches.join(first, "k1".into()) else {
            panic!("the first leads")
        };
        let second = Batchable::of("p", "PATCH", &write("http://a/z", "b."), false).unwrap();
        let Joined::Member(mut member) = batches.join(second, "k2".into()) else {
            panic!("the second joins")
        };
        let other_zone = Batchable::of("p", "PATCH", &write("http://a/y", "c."), false).unwrap();
        assert!(matches!(
            batches.join(other_zone, "k3".into()),
            Joined::Leader(_)
        ));
        let closed = leader.close(false);
        assert_eq!(leader.members(), 2);
        let body: Value = serde_json::from_slice(&closed.body).unwrap();
        assert_eq!(body, json!({"rrsets": [{"name": "a."}, {"name": "b."}]}));
        assert_ne!(closed.idempotency_key, "k1");
        let late = Batchable::of("p", "PATCH", &write("http://a/z", "d."), false).unwrap();
        assert!(
            matches!(batches.join(late, "k4".into()), Joined::Leader(_)),
            "closed: a new batch"
        );
        let answer = Arc::new(Ok(HttpResponse {
            status: 204,
            headers: vec![],
            body: vec![],
        }));
        leader.answer(answer, false);
        assert!(
            matches!(member.try_recv(), Ok(Outcome::Answer(a)) if a.as_ref().as_ref().unwrap().status == 204)
        );
    }

    /// A batch of two writes to one zone: its leader, and the member's outcome.
    fn leader_and_member(batches: &Arc<Batches>) -> (Leader, oneshot::Receiver<Outcome>) {
        let Joined::Leader(leader) = batches.join(
            Batchable::of("p", "PATCH", &write("http://a/z", "a."), false).unwrap(),
            "k1".into(),
        ) else {
            panic!("the first leads")
        };
        let Joined::Member(member) = batches.join(
            Batchable::of("p", "PATCH", &write("http://a/z", "b."), false).unwrap(),
            "k2".into(),
        ) else {
            panic!("the second joins")
        };
        (leader, member)
    }

    #[test]
    fn a_refused_batch_sends_its_members_alone_and_an_unsent_or_failed_probe_batch_forms_again() {
        let batches = Arc::new(Batches::default());
        let (mut leader, mut member) = leader_and_member(&batches);
        leader.close(false);
        let refused = Arc::new(Ok(HttpResponse {
            status: 422,
            headers: vec![],
            body: b"bad".to_vec(),
        }));
        leader.answer(refused, true);
        assert!(matches!(member.try_recv(), Ok(Outcome::Alone)));

        let (leader, mut member) = leader_and_member(&batches);
        drop(leader);
        assert!(
            matches!(member.try_recv(), Ok(Outcome::Again)),
            "a leader that gave up: the members batch again"
        );

        let (mut leader, mut member) = leader_and_member(&batches);
        leader.close(true);
        leader.answer(
            Arc::new(Err(HttpError {
                kind: crate::contract::HttpErrorKind::Connect,
                message: "refused".into(),
            })),
            false,
        );
        assert!(
            matches!(member.try_recv(), Ok(Outcome::Again)),
            "a failed probe: the members batch again, not each alone"
        );
    }

    #[test]
    fn writes_differing_outside_the_array_or_with_body_secrets_are_not_batched_together() {
        let mut other = write("http://a/z", "b.");
        other.body = Some(
            json!({"rrsets": [{"name": "b."}], "x": 1})
                .to_string()
                .into_bytes(),
        );
        let a = Batchable::of("p", "PATCH", &write("http://a/z", "a."), false).unwrap();
        let b = Batchable::of("p", "PATCH", &other, false).unwrap();
        assert_ne!(a.key, b.key);
        assert!(Batchable::of("p", "PATCH", &write("http://a/z", "a."), true).is_none());
        let mut unmarked = write("http://a/z", "a.");
        unmarked.headers.truncate(1);
        assert!(Batchable::of("p", "PATCH", &unmarked, false).is_none());
    }
}
