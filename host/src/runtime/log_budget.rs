//! How much a plugin may write to the host's log: a byte budget per
//! plugin name (its `log` import and its captured stdout and stderr
//! alike), refilled at a steady rate. A line past the budget is dropped
//! and counted; when lines go through again, at most once a second, one
//! warning says how many were dropped. A plugin that logs in a loop then
//! grows the host's log by its refill rate, not by what it writes.
//!
//! Kept with the plugin's call metrics, so a hot reload does not reset it.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A plugin's log budget: a token bucket in bytes.
#[derive(Debug)]
pub(super) struct LogBudget {
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    /// Bytes that may be written now.
    tokens: f64,
    refilled: Instant,
    /// Lines dropped since the last notice.
    dropped: u64,
    /// Lines dropped over the plugin's life.
    dropped_total: u64,
    noticed: Option<Instant>,
}

/// What a line may do.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Admit {
    /// Write it; `dropped` lines were dropped before it and not yet told.
    Write { dropped: u64 },
    /// Drop it.
    Drop,
}

/// What every line costs besides its text: the log's own prefix (time,
/// level, plugin, object), so a flood of empty lines is bounded too.
const LINE_OVERHEAD: usize = 96;

impl Default for LogBudget {
    fn default() -> Self {
        Self {
            state: Mutex::new(State {
                // Full: the first `admit` caps it at the burst it is given.
                tokens: f64::MAX,
                refilled: Instant::now(),
                dropped: 0,
                dropped_total: 0,
                noticed: None,
            }),
        }
    }
}

impl LogBudget {
    /// Whether a line of `len` bytes may be written, with `per_second`
    /// bytes a second refilling a budget of at most `burst`.
    pub(super) fn admit(&self, len: usize, per_second: u64, burst: u64) -> Admit {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        let elapsed = now.saturating_duration_since(state.refilled).as_secs_f64();
        state.refilled = now;
        state.tokens = (state.tokens + elapsed * per_second as f64).min(burst as f64);
        let cost = (len + LINE_OVERHEAD) as f64;
        if state.tokens < cost {
            state.dropped += 1;
            state.dropped_total += 1;
            return Admit::Drop;
        }
        state.tokens -= cost;
        let tell = state.dropped > 0
            && state
                .noticed
                .is_none_or(|at| now.duration_since(at) >= Duration::from_secs(1));
        if !tell {
            return Admit::Write { dropped: 0 };
        }
        state.noticed = Some(now);
        Admit::Write {
            dropped: std::mem::take(&mut state.dropped),
        }
    }

    /// Lines dropped over the plugin's life.
    pub(super) fn dropped_total(&self) -> u64 {
        self.state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .dropped_total
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_past_the_budget_are_dropped_counted_and_told_once_lines_pass_again() {
        let budget = LogBudget::default();
        let (rate, burst) = (1_000, 10_000);
        let mut written = 0;
        for _ in 0..1_000 {
            if matches!(budget.admit(904, rate, burst), Admit::Write { .. }) {
                written += 1;
            }
        }
        assert_eq!(written, 10, "the burst: 10 lines of 1,000 bytes");
        assert_eq!(budget.dropped_total(), 990);
        std::thread::sleep(Duration::from_millis(1_100));
        assert_eq!(
            budget.admit(4, rate, burst),
            Admit::Write { dropped: 990 },
            "the first line through tells how many were dropped"
        );
        assert_eq!(budget.admit(4, rate, burst), Admit::Write { dropped: 0 });
    }
}
