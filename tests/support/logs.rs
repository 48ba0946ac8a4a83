//! Captured `tracing` output: one global subscriber for the test binary that
//! writes every event (all levels, with fields) into memory, so tests can
//! check that the host logged something.

use std::io::Write;
use std::sync::{Mutex, OnceLock};

static LINES: Mutex<Vec<u8>> = Mutex::new(Vec::new());

struct Capture;

impl Write for Capture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        LINES
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Start capturing (idempotent).
pub fn capture() {
    static INIT: OnceLock<()> = OnceLock::new();
    INIT.get_or_init(|| {
        let subscriber = tracing_subscriber::fmt()
            .with_env_filter("setpoint=debug")
            .with_ansi(false)
            .with_writer(|| Capture)
            .finish();
        let _ = tracing::subscriber::set_global_default(subscriber);
    });
}

/// Captured lines containing every one of `needles`.
pub fn lines_with(needles: &[&str]) -> Vec<String> {
    let text =
        String::from_utf8_lossy(&LINES.lock().unwrap_or_else(|p| p.into_inner())).into_owned();
    text.lines()
        .filter(|l| needles.iter().all(|n| l.contains(n)))
        .map(str::to_owned)
        .collect()
}
