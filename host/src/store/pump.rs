//! The forwarder every local backend's watch runs: read the events after
//! the last one sent, send them, and wait for the next commit when there
//! are none. A read's error is sent to the watcher and ends the watch, as
//! does the watcher going away.

use std::future::Future;

use tokio::sync::{mpsc, watch};

use super::{Result, Revision, WatchEvent, WatchStream};

/// How many events a watch stream buffers, and the most read at once.
pub(super) const WATCH_BUFFER: usize = 1024;

/// Streams every event after `after`: `read(last)` returns those after
/// `last` (at most [`WATCH_BUFFER`], none if there are no newer ones yet),
/// and `revisions`, subscribed before the first read so that no commit is
/// missed, says when there may be more.
pub(super) fn spawn<F, R>(
    after: Revision,
    mut revisions: watch::Receiver<Revision>,
    mut read: F,
) -> WatchStream
where
    F: FnMut(Revision) -> R + Send + 'static,
    R: Future<Output = Result<Vec<WatchEvent>>> + Send,
{
    let (tx, rx) = mpsc::channel(WATCH_BUFFER);
    tokio::spawn(async move {
        let mut last = after;
        loop {
            match read(last).await {
                Err(err) => {
                    let _ = tx.send(Err(err)).await;
                    return;
                }
                Ok(events) if events.is_empty() => {
                    tokio::select! {
                        changed = revisions.changed() => if changed.is_err() { return },
                        () = tx.closed() => return,
                    }
                }
                Ok(events) => {
                    for event in events {
                        last = event.revision();
                        if tx.send(Ok(event)).await.is_err() {
                            return;
                        }
                    }
                }
            }
        }
    });
    rx
}
