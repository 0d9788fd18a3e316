//! Request ids: the client's `X-Request-Id` when it sends a usable one, a
//! generated one otherwise; echoed on the response and carried into every log
//! line about the request, batch threads included. Its middleware is the
//! outermost layer, which also contains panics and marks draining responses.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use actix_web::body::MessageBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::header::{HeaderName, HeaderValue};
use actix_web::middleware::Next;
use actix_web::HttpMessage;
use futures_util::FutureExt;

pub const HEADER: HeaderName = HeaderName::from_static("x-request-id");

/// Longest client id kept; a longer or non-printable one is replaced.
const MAX_LEN: usize = 128;

#[derive(Clone, Debug, PartialEq)]
pub struct RequestId(pub Arc<str>);

impl RequestId {
    /// The client's id if usable, else a new one.
    pub fn from_header(value: Option<&HeaderValue>) -> RequestId {
        let given = value
            .and_then(|v| v.to_str().ok())
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
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let id = mix(seed.wrapping_add(n.wrapping_mul(0x9e37_79b9_7f4a_7c15)));
        // Every request without an id gets one: hex by hand, not through `format!`.
        let mut hex = [0u8; 16];
        for (i, digit) in hex.iter_mut().enumerate() {
            *digit = b"0123456789abcdef"[(id >> (60 - 4 * i) & 0xf) as usize];
        }
        RequestId(std::str::from_utf8(&hex).unwrap_or("0000000000000000").into())
    }
}

/// splitmix64's finaliser: consecutive inputs give unrelated-looking ids.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The outermost middleware (`middleware::from_fn`), the one place that
/// wraps every request: gives it its id and the response the header; turns a
/// panic while handling it into its 500 ([`super::panics`]); and while the
/// server drains, asks the client to close the connection ([`super::drain`]).
/// One layer rather than three: each `from_fn` layer costs a boxed future.
pub async fn assign(
    req: ServiceRequest,
    next: Next<impl MessageBody>,
) -> Result<ServiceResponse<impl MessageBody>, actix_web::Error> {
    let id = RequestId::from_header(req.headers().get(&HEADER));
    req.extensions_mut().insert(id.clone());
    let state = req.app_data::<actix_web::web::Data<super::AppState>>().cloned();
    // Kept for the log line should the request panic (the request itself is
    // consumed by routing); both are cheap reference-counted clones.
    let (method, uri) = (req.method().clone(), req.uri().clone());
    let mut response = match std::panic::AssertUnwindSafe(next.call(req)).catch_unwind().await {
        Ok(result) => result?,
        Err(panic) => return Err(super::panics::contained(&id, &method, &uri, panic.as_ref())),
    };
    if let Ok(value) = HeaderValue::from_str(&id.0) {
        response.headers_mut().insert(HEADER, value);
    }
    if state.is_some_and(|s| s.drain.is_draining()) {
        super::drain::close_after(&mut response);
    }
    Ok(response)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_usable_client_ids_and_replaces_the_rest() {
        let given = HeaderValue::from_static("client-42");
        assert_eq!(RequestId::from_header(Some(&given)).0.as_ref(), "client-42");
        let long = HeaderValue::from_str(&"x".repeat(MAX_LEN + 1)).unwrap();
        assert_eq!(RequestId::from_header(Some(&long)).0.len(), 16);
        let spaced = HeaderValue::from_static("a b");
        assert_ne!(RequestId::from_header(Some(&spaced)).0.as_ref(), "a b");
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
}
