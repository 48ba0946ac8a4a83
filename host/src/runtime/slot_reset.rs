//! How pool slots are reset between calls: whether wasmtime may use the
//! kernel's `PAGEMAP_SCAN` to find the pages a call dirtied.
//!
//! The scan resets only the pages a call wrote instead of all of the
//! kept-resident part of the slot
//! (docs/benchmarks/plugins.md#what-else-was-measured-2026-11-22-0950-to-1100). But wasmtime
//! 48's scan asks for dirty pages that are *present*: a dirty page the
//! kernel has swapped out is not present, so it is neither reset nor
//! decommitted, and the next instance in that slot would read the previous
//! call's data (wasmtime PR #14357). Every call must start from a fresh
//! instance, so on a machine with swap the scan is off and slots are reset
//! in full.
//!
//! Swap is looked at when the runtime starts; enabling swap later (`swapon`)
//! on a running host is not noticed, which docs/operations.md says.

use wasmtime::Enabled;

/// The page-map scan setting for a machine whose `/proc/swaps` reads
/// `proc_swaps` (`None`: it could not be read).
pub(super) fn pagemap_scan(proc_swaps: Option<&str>) -> Enabled {
    if !cfg!(target_os = "linux") {
        // Elsewhere wasmtime has no page-map scan; `Auto` is a no-op.
        return Enabled::Auto;
    }
    let reason = match proc_swaps {
        Some(table) if !swap_active(table) => return Enabled::Auto,
        Some(_) => "swap is on",
        None => "/proc/swaps is unreadable",
    };
    tracing::info!(
        "{reason}: plugin instance slots are reset in full after every call, \
         not by page-map scan (which would miss swapped-out pages)"
    );
    Enabled::No
}

/// The setting for this machine.
pub(super) fn pagemap_scan_here() -> Enabled {
    pagemap_scan(std::fs::read_to_string("/proc/swaps").ok().as_deref())
}

/// Whether `/proc/swaps` lists any active swap area (a header line, then
/// one line per area; zram and swap files count too).
fn swap_active(proc_swaps: &str) -> bool {
    proc_swaps
        .lines()
        .skip(1)
        .any(|line| !line.trim().is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEADER: &str = "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n";

    #[test]
    fn no_swap_areas_means_no_swap() {
        assert!(!swap_active(HEADER));
        assert!(!swap_active(""));
        assert!(!swap_active(&format!("{HEADER}\n")));
    }

    #[test]
    fn any_swap_area_counts() {
        assert!(swap_active(&format!(
            "{HEADER}/dev/zram0                              partition\t8388604\t\t0\t\t100\n"
        )));
        assert!(swap_active(&format!(
            "{HEADER}/swapfile                               file\t\t2097148\t\t1024\t\t-2\n"
        )));
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn the_scan_is_used_only_when_nothing_can_be_swapped_out() {
        let enabled = |setting| matches!(setting, Enabled::Auto);
        assert!(enabled(pagemap_scan(Some(HEADER))));
        assert!(!enabled(pagemap_scan(Some(&format!(
            "{HEADER}/swapfile file 2097148 0 -2\n"
        )))));
        assert!(!enabled(pagemap_scan(None)), "unknown swap: assume some");
    }
}
