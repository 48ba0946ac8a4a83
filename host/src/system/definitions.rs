//! The definition follower: keeps the kind registry in step with the
//! `CustomResourceDefinition`s in the store, written by anyone. Another
//! host on the same etcd registers a kind, and this host serves and
//! reconciles it too.

use tokio::task::JoinHandle;

use crate::api::{Api, kinds};
use crate::informer::watcher::{Event, Watcher};
use crate::object::Object;

/// Start a task that follows every stored definition, registering and
/// removing kinds as they come and go. Writes through this API register
/// their kinds at once anyway; the task matters when other hosts share the
/// store. Runs until aborted or the watch hub stops.
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// use std::sync::Arc;
/// use setpoint::api::Api;
/// use setpoint::store::MemoryBackend;
///
/// let api = Api::open(Arc::new(MemoryBackend::new())).await.unwrap();
/// let follower = setpoint::system::definitions::follow(&api);
/// follower.abort();
/// # });
/// ```
pub fn follow(api: &Api) -> JoinHandle<()> {
    let api = api.clone();
    let mut watcher = Watcher::new(&api, &Api::prefix(&api.crd_kind(), None));
    tokio::spawn(async move {
        while let Some(event) = watcher.next().await {
            match event {
                // A relist registers what it finds; a definition deleted
                // while the watch was cut off stays registered, as before.
                Event::Init | Event::InitDone { .. } => {}
                Event::InitApply(kv) => match Api::decode(&kv) {
                    Ok(crd) => register(&api, &crd),
                    Err(err) => tracing::warn!(%err, "stored CustomResourceDefinition ignored"),
                },
                Event::Apply(event) => register(&api, &event.object),
                Event::Delete(event) => {
                    if let Ok(info) = kinds::kind_from_crd(&event.object) {
                        api.kinds().remove(&info.group, &info.plural);
                    }
                }
            }
        }
    })
}

/// Register the kind a stored definition describes, if it is valid and not
/// registered in that form yet.
pub(crate) fn register(api: &Api, crd: &Object) {
    match kinds::kind_from_crd(crd) {
        Ok(info) => {
            if api.kinds().by_plural(&info.group, &info.plural).as_deref() != Some(&info) {
                api.kinds().insert(info);
            }
        }
        Err(err) => tracing::warn!(%err, "stored CustomResourceDefinition ignored"),
    }
}
