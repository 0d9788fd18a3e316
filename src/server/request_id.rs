//! Request ids: the client's `X-Request-Id` (HTTP header or gRPC metadata)
//! when it sends a usable one, a generated one otherwise; echoed on the
//! response and carried into every log line about the request, batch threads
//! included.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

/// The header (and gRPC metadata key) the id travels in.
pub const HEADER: &str = "x-request-id";

/// Longest client id kept; a longer or non-printable one is replaced.
const MAX_LEN: usize = 128;

#[derive(Clone, Debug, PartialEq)]
pub struct RequestId(pub Arc<str>);

impl RequestId {
    /// The client's id if usable, else a new one.
    pub fn from_header(value: Option<&str>) -> RequestId {
        let given = value
            .map(str::trim)
            .filter(|v| !v.is_empty() && v.len() <= MAX_LEN && v.bytes().all(|b| b.is_ascii_graphic()));
        match given {
            Some(id) => RequestId(id.into()),
            None => RequestId::generate(),
        }
    }

    /// 16 hex digits, unique within the process and unlikely to repeat across
    /// restarts (the sequence is mixed with the start time and process id).
    pub fn generate() -> RequestId {
        static SEED: OnceLock<u64> = OnceLock::new();
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let seed = *SEED.get_or_init(|| {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or_default();
            nanos ^ (u64::from(std::process::id()) << 32)
        });
        let n = next_sequence(&NEXT);
        let id = mix(seed.wrapping_add(n.wrapping_mul(0x9e37_79b9_7f4a_7c15)));
        // Every request without an id gets one: hex by hand, not through `format!`.
        let mut hex = [0u8; 16];
        for (i, digit) in hex.iter_mut().enumerate() {
            *digit = b"0123456789abcdef"[(id >> (60 - 4 * i) & 0xf) as usize];
        }
        RequestId(std::str::from_utf8(&hex).unwrap_or("0000000000000000").into())
    }
}

/// Sequence numbers taken from the shared counter a block at a time, so
/// threads do not contend on it for every request.
fn next_sequence(shared: &AtomicU64) -> u64 {
    const BLOCK: u64 = 1024;
    thread_local! {
        static RANGE: std::cell::Cell<(u64, u64)> = const { std::cell::Cell::new((0, 0)) };
    }
    RANGE.with(|range| {
        let (mut next, mut end) = range.get();
        if next == end {
            next = shared.fetch_add(BLOCK, Ordering::Relaxed);
            end = next + BLOCK;
        }
        range.set((next + 1, end));
        next
    })
}

/// splitmix64's finaliser: consecutive inputs give unrelated-looking ids.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_usable_client_ids_and_replaces_the_rest() {
        assert_eq!(RequestId::from_header(Some("client-42")).0.as_ref(), "client-42");
        let long = "x".repeat(MAX_LEN + 1);
        assert_eq!(RequestId::from_header(Some(&long)).0.len(), 16);
        assert_ne!(RequestId::from_header(Some("a b")).0.as_ref(), "a b");
        assert_eq!(RequestId::from_header(None).0.len(), 16);
        let id = RequestId::generate();
        assert!(
            id.0.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()),
            "{}",
            id.0
        );
    }

    #[test]
    fn generated_ids_do_not_repeat() {
        let ids: std::collections::HashSet<Arc<str>> = (0..1000).map(|_| RequestId::generate().0).collect();
        assert_eq!(ids.len(), 1000);
    }

    #[test]
    fn ids_from_many_threads_do_not_repeat() {
        let threads: Vec<_> = (0..4)
            .map(|_| std::thread::spawn(|| (0..3000).map(|_| RequestId::generate().0).collect::<Vec<_>>()))
            .collect();
        let ids: std::collections::HashSet<Arc<str>> = threads.into_iter().flat_map(|t| t.join().unwrap()).collect();
        assert_eq!(ids.len(), 12_000);
    }
}
