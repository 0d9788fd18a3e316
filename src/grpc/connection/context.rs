//! What the calls of one connection share (`CallContext`), how a call ended
//! (`Ended`, for the connection's reset accounting), and the watch that
//! stops a call when its client resets the stream.

use std::future::Future;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use bytes::Bytes;
use h2::server::SendResponse;

use crate::dialects::tfs_grpc::PredictionApi;
use crate::grpc::services::Services;

/// How a stream's call ended, for the connection's reset accounting.
#[derive(Debug, PartialEq, Eq)]
pub enum Ended {
    Answered,
    /// The client reset the stream before its answer was written.
    ResetByClient,
    /// The stream was given up (a write that made no progress, a failed body).
    Abandoned,
}

/// What a connection's calls share: the services, the peer and the budget
/// of answer bytes waiting for the client's windows.
pub struct CallContext {
    pub services: Services,
    /// Predict decoded here; `None` under `--enable_auth`, where every call
    /// goes through the services' check.
    pub predict: Option<Arc<PredictionApi>>,
    pub peer: Option<tonic::transport::server::TcpConnectInfo>,
    pub pending: AtomicUsize,
    pub pending_limit: usize,
    /// A write with no window granted for this long gives up its stream.
    pub stall: Duration,
}

/// Runs `work` until it ends or the client resets the stream, which stops
/// it (its batch slot and its answer are dropped), as tonic's calls stop.
pub(super) async fn watching<T>(respond: &mut SendResponse<Bytes>, work: impl Future<Output = T>) -> Result<T, Ended> {
    let mut work = std::pin::pin!(work);
    std::future::poll_fn(|cx| {
        if let Poll::Ready(done) = work.as_mut().poll(cx) {
            return Poll::Ready(Ok(done));
        }
        match respond.poll_reset(cx) {
            Poll::Ready(Ok(_)) => Poll::Ready(Err(Ended::ResetByClient)),
            Poll::Ready(Err(_)) => Poll::Ready(Err(Ended::Abandoned)),
            Poll::Pending => Poll::Pending,
        }
    })
    .await
}
