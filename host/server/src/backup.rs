//! `GET /setpoint/v1/backup`: a consistent copy of the whole store, taken
//! while writes go on, streamed as the answer's body (`setpoint backup`
//! saves it). For the embedded store it is a complete database file: put it
//! as `store.redb` in an empty data directory to restore it. It holds every
//! object of every namespace: grant it (a `nonResourceURLs` rule) to
//! administrators only.

use std::io::Read;
use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};

use tokio_stream::StreamExt;

use super::status::ApiError;
use setpoint::Host;

/// Bytes read from the copy per chunk of the answer.
const CHUNK: usize = 1 << 20;

/// The header carrying the store revision the copy holds.
pub const REVISION_HEADER: &str = "x-setpoint-revision";

/// One backup at a time per process (a process serves one host): each
/// takes a copy of the whole store and reads it through, so sixteen at once
/// cost sixteen times the disk and memory. Others are answered 429.
static BACKUPS: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(1);

/// What a refused backup is told to wait before trying again, in seconds.
const RETRY_AFTER_SECS: u32 = 10;

pub(super) async fn backup(State(host): State<Arc<Host>>) -> Response {
    let Ok(permit) = BACKUPS.try_acquire() else {
        let mut refused = super::status::error_response(
            StatusCode::TOO_MANY_REQUESTS,
            "TooManyRequests",
            "a backup is being taken already; one runs at a time: try again when it is done",
        );
        refused
            .headers_mut()
            .insert(header::RETRY_AFTER, RETRY_AFTER_SECS.into());
        return refused;
    };
    let backup = match host.api().backend().backup().await {
        Ok(backup) => backup,
        Err(err) => return ApiError(err.into()).into_response(),
    };
    tracing::info!(
        revision = backup.revision,
        bytes = backup.len,
        "sending a backup of the store"
    );
    let (chunks, body) = tokio::sync::mpsc::channel::<std::io::Result<Bytes>>(4);
    let mut file = backup.file;
    tokio::task::spawn_blocking(move || {
        let mut buffer = vec![0; CHUNK];
        loop {
            let chunk = match file.read(&mut buffer) {
                Ok(0) => return,
                Ok(n) => Ok(Bytes::copy_from_slice(&buffer[..n])),
                Err(err) => Err(err),
            };
            let failed = chunk.is_err();
            if chunks.blocking_send(chunk).is_err() || failed {
                return;
            }
        }
    });
    // The permit goes with the answer's body: held until it is sent or the
    // client goes.
    let body = Body::from_stream(tokio_stream::wrappers::ReceiverStream::new(body).map(
        move |chunk| {
            let _held = &permit;
            chunk
        },
    ));
    (
        StatusCode::OK,
        [
            (header::CONTENT_TYPE, "application/octet-stream".to_owned()),
            (header::CONTENT_LENGTH, backup.len.to_string()),
            (
                header::CONTENT_DISPOSITION,
                "attachment; filename=\"store.redb\"".to_owned(),
            ),
            (
                header::HeaderName::from_static(REVISION_HEADER),
                backup.revision.to_string(),
            ),
        ],
        body,
    )
        .into_response()
}
