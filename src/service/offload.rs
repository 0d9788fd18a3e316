//! CPU-heavy request work kept off the HTTP workers: large bodies decoded and
//! large outputs encoded on the blocking pool, at most one piece per core.

use crate::error::ApiError;

/// Bodies at least this large decode on the blocking pool, and outputs of at
/// least this many elements encode there: megabytes of JSON would otherwise
/// hold an HTTP worker, and every connection it serves, for milliseconds.
pub(super) const OFFLOAD_BYTES: usize = 256 * 1024;
pub(super) const OFFLOAD_ELEMENTS: usize = 32 * 1024;

/// Decodes a request body where it is cheapest: inline when small, on the
/// blocking pool (after one copy of the body) when large.
pub async fn decode_body<T: Send + 'static>(
    body: &(impl RequestBody + ?Sized),
    decode: impl FnOnce(&[u8]) -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    let bytes = body.as_slice();
    if bytes.len() < OFFLOAD_BYTES {
        return decode(bytes);
    }
    let owned = body.shared();
    off_worker(move || decode(&owned)).await
}

/// A request body as a dialect holds it: the bytes read off the connection
/// (shared with the blocking pool at no cost), or a slice of something the
/// dialect made of them (copied when it must leave the thread).
pub trait RequestBody {
    fn as_slice(&self) -> &[u8];
    /// The body, owned, for work off the HTTP worker.
    fn shared(&self) -> bytes::Bytes;
}

impl RequestBody for bytes::Bytes {
    fn as_slice(&self) -> &[u8] {
        self
    }

    fn shared(&self) -> bytes::Bytes {
        self.clone()
    }
}

impl RequestBody for [u8] {
    fn as_slice(&self) -> &[u8] {
        self
    }

    fn shared(&self) -> bytes::Bytes {
        bytes::Bytes::copy_from_slice(self)
    }
}

/// Runs CPU-heavy request work off the HTTP workers, at most one piece per
/// core at a time. Each worker runtime's blocking pool would otherwise start
/// a thread per waiting body: 32 clients of megabyte images made 16 threads
/// decode at once beside the model's own, descheduling its intra-op threads
/// in the middle of their ops. Waiting for a slot costs no thread, and what
/// waits is bounded by the requests admitted.
pub(crate) async fn off_worker<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    static SLOTS: std::sync::LazyLock<std::sync::Arc<tokio::sync::Semaphore>> = std::sync::LazyLock::new(|| {
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        std::sync::Arc::new(tokio::sync::Semaphore::new(cores))
    });
    // Held by the work itself: a request that goes away while its body
    // decodes does not free the slot before the thread does.
    let slot = SLOTS
        .clone()
        .acquire_owned()
        .await
        .map_err(|e| ApiError::Internal(format!("the decoding slots are closed: {e}")))?;
    tokio::task::spawn_blocking(move || {
        let _slot = slot;
        work()
    })
    .await
    .map_err(|e| ApiError::Internal(format!("a decoding task failed: {e}")))?
}
