//! `setpoint backup -o FILE`: saves a consistent copy of a running host's
//! store (`GET /setpoint/v1/backup`), taken while writes go on. The copy is
//! written beside `FILE`, checked whole (length, every page, no log
//! needed), synced, and only then renamed to `FILE`, so `FILE` is never a
//! partial backup.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use http_body_util::BodyExt;

use super::remote::Client;
use setpoint::store::{EmbeddedBackend, Revision};
use setpoint_server::backup::REVISION_HEADER;

/// What a saved backup holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Saved {
    /// The store revision: every write up to it.
    pub revision: Revision,
    /// The file's length.
    pub bytes: u64,
}

/// Fetches a backup from the host `client` talks to into `output`.
pub async fn save(client: &Client, output: &Path) -> anyhow::Result<Saved> {
    let partial = PathBuf::from(format!("{}.part", output.display()));
    let result = fetch(client, &partial).await;
    if result.is_err() {
        let _ = std::fs::remove_file(&partial);
    }
    let saved = result?;
    std::fs::rename(&partial, output)
        .with_context(|| format!("renaming {} to {}", partial.display(), output.display()))?;
    let dir = match output.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    File::open(dir)
        .and_then(|d| d.sync_all())
        .with_context(|| format!("syncing {}", dir.display()))?;
    Ok(saved)
}

/// Streams the backup into `partial` and checks it.
async fn fetch(client: &Client, partial: &Path) -> anyhow::Result<Saved> {
    let response = client.get_streaming("/setpoint/v1/backup").await?;
    let header = |name: &str| {
        response
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok())
    };
    let (Some(expected), Some(revision)) = (
        header(axum::http::header::CONTENT_LENGTH.as_str()),
        header(REVISION_HEADER),
    ) else {
        bail!("the host's answer is not a backup (no length or revision): is it a Setpoint host?");
    };
    let mut file =
        File::create(partial).with_context(|| format!("creating {}", partial.display()))?;
    let mut body = response.into_body();
    let mut bytes = 0u64;
    while let Some(frame) = body.frame().await {
        let frame = frame.context("receiving the backup")?;
        if let Ok(chunk) = frame.into_data() {
            file.write_all(&chunk)
                .with_context(|| format!("writing {}", partial.display()))?;
            bytes += chunk.len() as u64;
        }
    }
    if bytes != expected {
        bail!("the backup was cut off: received {bytes} of {expected} bytes");
    }
    file.sync_all()
        .with_context(|| format!("syncing {}", partial.display()))?;
    drop(file);
    let checked = EmbeddedBackend::check_backup(partial)
        .with_context(|| format!("the backup received in {} is not whole", partial.display()))?;
    if checked as u64 != revision {
        bail!("the backup holds revision {checked}, but the host said {revision}");
    }
    Ok(Saved {
        revision: checked,
        bytes,
    })
}
