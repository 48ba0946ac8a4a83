//! Watches as a [`Stream`]: a [`Subscription`] of the watch hub, decoded into
//! the handle's type. Owns the stream's end conditions; ordering, gaps and
//! lag are the hub's contract (`crate::watch`).

use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use serde::de::DeserializeOwned;
use tokio_stream::Stream;

use super::{Error, Result};
use crate::object::meta;
use crate::store::Revision;
use crate::watch::{self, Event, EventType, Subscription};

/// One change seen by a [`WatchStream`].
///
/// ```
/// use setpoint::client::WatchEvent;
///
/// let event = WatchEvent::Modified(serde_json::json!({"metadata": {"name": "w"}}));
/// assert_eq!(event.object()["metadata"]["name"], "w");
/// assert!(!event.is_deleted());
/// ```
#[derive(Debug, Clone, PartialEq)]
pub enum WatchEvent<T> {
    /// The object was created.
    Added(T),
    /// The object changed.
    Modified(T),
    /// The object was removed; this is its last state.
    Deleted(T),
}

impl<T> WatchEvent<T> {
    /// The object the event is about.
    pub fn object(&self) -> &T {
        match self {
            WatchEvent::Added(o) | WatchEvent::Modified(o) | WatchEvent::Deleted(o) => o,
        }
    }

    /// The object, by value.
    pub fn into_object(self) -> T {
        match self {
            WatchEvent::Added(o) | WatchEvent::Modified(o) | WatchEvent::Deleted(o) => o,
        }
    }

    /// Whether the object was removed.
    pub fn is_deleted(&self) -> bool {
        matches!(self, WatchEvent::Deleted(_))
    }
}

type Next = Pin<Box<dyn Future<Output = (Subscription, Result<Arc<Event>, watch::Error>)> + Send>>;

enum State {
    Idle(Subscription),
    Waiting(Next),
    Done,
}

/// The changes to one kind (in one namespace, or all) after a revision, as
/// a [`Stream`] of [`WatchEvent`]s; from [`Resource::watch`](super::Resource::watch).
///
/// - Events come in revision order with no gap and no duplicate.
/// - An object that does not decode into `T` is yielded as
///   [`Error::Decode`] and the stream goes on.
/// - A stream that cannot continue — its start was compacted away, it fell
///   more than the hub's history behind, or the store closed — yields one
///   [`Error::Expired`] (or [`Error::WatchClosed`]) and then ends: list
///   again and watch from the list's `resource_version`.
/// - Shutting the host down stops its controllers, not its store: a watch
///   keeps running while the host value lives.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let api = setpoint::api::Api::open(std::sync::Arc::new(setpoint::store::MemoryBackend::new())).await?;
/// # let client = setpoint::Client::new(api);
/// # for crd in setpoint_plugin_sdk::Reconciler::manifest(&replicaset::ReplicaSetReconciler).definitions {
/// #     client.apply(&crd).await?;
/// # }
/// use serde_json::json;
/// use setpoint::client::WatchEvent;
/// use tokio_stream::StreamExt;
///
/// let pods = client.resource("demo.setpoint.dev/v1", "Pod");
/// let from = pods.list(&Default::default()).await?.resource_version;
/// let mut changes = pods.watch(from)?;
/// pods.create(&json!({"metadata": {"name": "web-0"}})).await?;
/// pods.patch_status("web-0", &setpoint::client::Patch::Merge(json!({"status": {"phase": "Running"}}))).await?;
/// let mut phases = Vec::new();
/// while let Some(event) = changes.next().await {
///     let pod = event?.into_object();
///     phases.push(pod["status"]["phase"].clone());
///     if pod["status"]["phase"] == "Running" {
///         break;
///     }
/// }
/// assert_eq!(phases, [json!(null), json!("Running")]);
/// # Ok(()) }
/// ```
pub struct WatchStream<T> {
    state: State,
    kind: String,
    revision: Revision,
    _type: PhantomData<fn() -> T>,
}

impl<T> WatchStream<T> {
    pub(super) fn new(subscription: Subscription, kind: String) -> Self {
        Self {
            revision: subscription.revision(),
            state: State::Idle(subscription),
            kind,
            _type: PhantomData,
        }
    }

    /// The revision of the last change yielded (at first, the revision the
    /// watch started after): where a new watch resumes without a gap.
    pub fn revision(&self) -> Revision {
        self.revision
    }
}

impl<T: DeserializeOwned> WatchStream<T> {
    fn decode(&self, event: &Event) -> Result<WatchEvent<T>> {
        let object = T::deserialize(event.object.as_ref()).map_err(|source| Error::Decode {
            kind: self.kind.clone(),
            name: meta::name(&event.object).to_owned(),
            source,
        })?;
        Ok(match event.kind {
            EventType::Added => WatchEvent::Added(object),
            EventType::Modified => WatchEvent::Modified(object),
            EventType::Deleted => WatchEvent::Deleted(object),
        })
    }
}

impl<T: DeserializeOwned> Stream for WatchStream<T> {
    type Item = Result<WatchEvent<T>>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        loop {
            match std::mem::replace(&mut this.state, State::Done) {
                State::Done => return Poll::Ready(None),
                State::Idle(mut subscription) => {
                    this.state = State::Waiting(Box::pin(async move {
                        let next = subscription.next().await;
                        (subscription, next)
                    }));
                }
                State::Waiting(mut next) => match next.as_mut().poll(cx) {
                    Poll::Pending => {
                        this.state = State::Waiting(next);
                        return Poll::Pending;
                    }
                    Poll::Ready((subscription, Ok(event))) => {
                        this.revision = event.revision;
                        this.state = State::Idle(subscription);
                        return Poll::Ready(Some(this.decode(&event)));
                    }
                    // The subscription is of no more use: the stream ends
                    // after saying why (`State::Done` is already in place).
                    Poll::Ready((_, Err(err))) => return Poll::Ready(Some(Err(err.into()))),
                },
            }
        }
    }
}
