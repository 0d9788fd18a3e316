//! Answer bytes on their way out: counted against the connection's
//! pending-answer budget until the client's windows take them, and a stream
//! that is granted no window for too long given up.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use h2::{Reason, SendStream};
use tonic::Status;

use super::context::{CallContext, Ended};

pub(super) fn over_budget(context: &CallContext, len: usize) -> Status {
    Status::resource_exhausted(format!(
        "the answer ({len} bytes) was dropped: {} bytes of earlier answers on this connection are still \
         waiting for the client to read them (limit --grpc_max_pending_answer_bytes={})",
        context.pending.load(Ordering::Relaxed),
        context.pending_limit
    ))
}

/// Answer bytes counted against the connection's budget until written.
pub(super) struct Reservation<'a> {
    pending: &'a AtomicUsize,
    left: usize,
}

impl<'a> Reservation<'a> {
    /// None when earlier answers already hold the budget; one answer alone
    /// may always be larger than it.
    pub(super) fn take(context: &'a CallContext, len: usize) -> Option<Reservation<'a>> {
        let before = context.pending.fetch_add(len, Ordering::AcqRel);
        if before > 0 && before + len > context.pending_limit {
            context.pending.fetch_sub(len, Ordering::AcqRel);
            return None;
        }
        Some(Reservation {
            pending: &context.pending,
            left: len,
        })
    }

    fn release(&mut self, written: usize) {
        let written = written.min(self.left);
        self.left -= written;
        self.pending.fetch_sub(written, Ordering::AcqRel);
    }
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        self.pending.fetch_sub(self.left, Ordering::AcqRel);
    }
}

/// Hands `data` to the stream as the windows (and the stream's send buffer)
/// take it, so what the client does not read stays here, counted. A stream
/// granted no window for `stall` is reset.
pub(super) async fn write(
    send: &mut SendStream<Bytes>,
    mut data: Bytes,
    mut reservation: Reservation<'_>,
    stall: Duration,
) -> Result<(), Ended> {
    while !data.is_empty() {
        send.reserve_capacity(data.len());
        let mut granted = send.capacity();
        if granted == 0 {
            let capacity = std::future::poll_fn(|cx| send.poll_capacity(cx));
            granted = match tokio::time::timeout(stall, capacity).await {
                Ok(Some(Ok(granted))) => granted,
                Ok(Some(Err(error))) if error.is_reset() => return Err(Ended::ResetByClient),
                Ok(Some(Err(_)) | None) => return Err(Ended::Abandoned),
                Err(_) => {
                    log::debug!("gRPC answer dropped: the client granted no window for {stall:?}");
                    send.send_reset(Reason::CANCEL);
                    return Err(Ended::Abandoned);
                }
            };
        }
        let chunk = data.split_to(granted.min(data.len()));
        let len = chunk.len();
        send.send_data(chunk, false).map_err(|_| Ended::Abandoned)?;
        reservation.release(len);
    }
    Ok(())
}
