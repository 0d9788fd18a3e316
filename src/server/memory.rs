//! Memory handed back when the server is idle. A burst of large requests
//! leaves the memory it freed with the allocators, which keep it for reuse:
//! glibc's arenas under TensorFlow's tensors until trimmed, mimalloc's
//! segments under the server's own buffers for some seconds. The policy: a
//! thread looks once a second; when two looks in a row find no request in
//! flight and no REST request's inputs still held by a run (one that outlived
//! its request's timeout holds them until it ends, and trimming under it
//! would take its memory for the rest), and the resident set has grown by more than [`GROWTH`] since the
//! server was last at rest, it asks both allocators to return what is free
//! ([`release_freed_memory`]), and what remains is the new rest. It decides
//! from the requests in flight and the resident set alone; it guarantees
//! that after a burst and two idle seconds the resident set is back within
//! [`GROWTH`] of what the allocators cannot return, and that no trim runs
//! while the server is busy with requests (beyond one arriving during it,
//! which may wait the trim's few milliseconds for an allocator lock).

use std::sync::{Arc, Weak};
use std::time::Duration;

use super::ServerState;
use crate::registry::release_freed_memory;

/// Growth of the resident set worth a trim: below it, the allocators'
/// caches are what keeps the next large request from paying for fresh pages.
const GROWTH: u64 = 64 << 20;

/// Starts the thread; it ends when the server's state is gone.
pub fn spawn_idle_release(state: &Arc<ServerState>) -> std::io::Result<()> {
    let state = Arc::downgrade(state);
    std::thread::Builder::new()
        .name("tfserve-memory".into())
        .spawn(move || watch(state))
        .map(drop)
}

/// What one look decides.
#[derive(Debug, PartialEq)]
enum Look {
    /// Requests are (or were just) in flight: nothing.
    Busy,
    /// At rest, this resident set.
    Rest(u64),
    /// At rest, grown past [`GROWTH`]: hand freed memory back.
    Release,
}

/// The look after `idle_looks` in a row found no request in flight, with
/// the resident set `now` and at the last rest `rest` (bytes).
fn look(idle_looks: u32, rest: u64, now: u64) -> Look {
    match (idle_looks >= 2, now > rest.saturating_add(GROWTH)) {
        (false, _) => Look::Busy,
        (true, false) => Look::Rest(now),
        (true, true) => Look::Release,
    }
}

fn watch(state: Weak<ServerState>) {
    let mut rest = resident_bytes().unwrap_or(0);
    let mut idle_looks = 0;
    loop {
        std::thread::sleep(Duration::from_secs(1));
        let Some(state) = state.upgrade() else { return };
        let busy = state.in_flight.current() > 0 || state.service.body_budget().held() > 0;
        idle_looks = if busy { 0 } else { idle_looks + 1 };
        drop(state);
        let Some(now) = resident_bytes() else { return };
        match look(idle_looks, rest, now) {
            Look::Busy => {}
            Look::Rest(now) => rest = now,
            Look::Release => {
                release_freed_memory();
                rest = resident_bytes().unwrap_or(now);
                // Rare (once after a burst), and what an operator reads RSS graphs by.
                log::info!(
                    "idle: {} MiB of freed memory handed back, {} MiB resident",
                    now.saturating_sub(rest) >> 20,
                    rest >> 20
                );
            }
        }
    }
}

/// This process's resident set, from `/proc/self/statm`.
fn resident_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    // SAFETY: sysconf only reads a system constant.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    Some(pages * u64::try_from(page).ok()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_second_at_rest_after_growth_past_the_bound_hands_memory_back() {
        const MIB: u64 = 1 << 20;
        let rest = 300 * MIB;
        // A burst: grown far past the bound, but requests were in flight at one look or the other.
        assert_eq!(look(0, rest, 900 * MIB), Look::Busy);
        assert_eq!(look(1, rest, 900 * MIB), Look::Busy);
        assert_eq!(look(2, rest, 900 * MIB), Look::Release);
        // Growth within the bound is the allocators' cache: the new rest.
        assert_eq!(look(2, rest, 360 * MIB), Look::Rest(360 * MIB));
        assert_eq!(look(5, rest, 200 * MIB), Look::Rest(200 * MIB));
        assert_eq!(look(2, rest, rest + GROWTH + 1), Look::Release);
    }
}
