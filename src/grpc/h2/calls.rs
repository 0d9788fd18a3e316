//! What a stream runs: TF Serving's unary Predict straight from its decoded
//! message, or any call through the tonic services (`Services::route`) with
//! a streaming request body and its response relayed frame by frame. Both
//! run inside their connection's task; they reach it through `Shared`.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

use bytes::Bytes;
use futures_util::task::AtomicWaker;
use http_body::{Body, Frame};
use tonic::codegen::http::{HeaderMap, Response};
use tonic::Status;

use super::request::RequestHead;
use crate::call::grpc::{CallHead, GRPC_TIMEOUT, REQUEST_ID};
use crate::dialects::tfs_grpc::{PredictAnswer, PredictionApi};
use crate::proto::tensorflow::serving::PredictRequest;

/// Response bytes a relayed call may have queued before it waits for the
/// connection to write them.
const RELAY_QUEUE: usize = 256 << 10;

/// How a stream ended, as its future returns it.
pub enum Finished {
    /// A Predict's answer, or its status.
    Predict(Result<PredictAnswer, Status>),
    /// A relayed call: its frames went through `Shared::events`.
    Relayed,
    /// Stopped because its stream was closed.
    Stopped,
}

/// What a relayed call sends its connection.
pub enum Event {
    Head(tonic::codegen::http::response::Parts, bool),
    Data(Bytes),
    Trailers(HeaderMap),
    /// The body ended without trailers.
    End,
    /// The body failed: the stream is reset.
    Failed,
}

/// Between a connection and the calls it runs.
#[derive(Default)]
pub struct Shared {
    pub events: Mutex<Vec<(u32, Event)>>,
    /// Set with every event, and when a request body was read from (so the
    /// connection returns flow-control window).
    pub signal: AtomicBool,
}

impl Shared {
    fn send(&self, stream: u32, event: Event) {
        if let Ok(mut events) = self.events.lock() {
            events.push((stream, event));
        }
        self.signal.store(true, Ordering::Release);
    }
}

/// A relayed call's response bytes waiting in the connection, so a call
/// faster than its client waits instead of queueing without bound.
#[derive(Default)]
pub struct Flow {
    queued: AtomicUsize,
    waker: AtomicWaker,
}

impl Flow {
    /// The connection wrote `bytes` of this stream's data.
    pub fn written(&self, bytes: usize) {
        self.queued.fetch_sub(bytes, Ordering::AcqRel);
        self.waker.wake();
    }

    async fn room(&self) {
        std::future::poll_fn(|cx| {
            if self.queued.load(Ordering::Acquire) < RELAY_QUEUE {
                return Poll::Ready(());
            }
            self.waker.register(cx.waker());
            if self.queued.load(Ordering::Acquire) < RELAY_QUEUE {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        })
        .await;
    }
}

/// A relayed request's body as the connection receives it.
#[derive(Default)]
pub struct Inbox {
    chunks: VecDeque<Bytes>,
    ended: bool,
    reset: bool,
    /// The body is no longer read: what arrives is dropped at once.
    pub dropped: bool,
    /// Bytes read out (or dropped unread) and not yet returned to the peer as window.
    pub consumed: usize,
    waker: Option<Waker>,
}

impl Inbox {
    pub fn push(&mut self, chunk: Bytes) {
        if !chunk.is_empty() {
            self.chunks.push_back(chunk);
        }
        self.wake();
    }

    pub fn end(&mut self) {
        self.ended = true;
        self.wake();
    }

    /// The client reset the stream, or the connection is gone.
    pub fn reset(&mut self) {
        self.reset = true;
        self.wake();
    }

    fn wake(&mut self) {
        if let Some(waker) = self.waker.take() {
            waker.wake();
        }
    }
}

/// The request body a relayed call reads.
pub struct RecvBody {
    inbox: Arc<Mutex<Inbox>>,
    shared: Arc<Shared>,
}

impl RecvBody {
    pub fn new(inbox: Arc<Mutex<Inbox>>, shared: Arc<Shared>) -> RecvBody {
        RecvBody { inbox, shared }
    }
}

impl Drop for RecvBody {
    /// What the call never read is returned to the peer as window too.
    fn drop(&mut self) {
        if let Ok(mut inbox) = self.inbox.lock() {
            inbox.dropped = true;
            let unread: usize = inbox.chunks.drain(..).map(|chunk| chunk.len()).sum();
            inbox.consumed += unread;
            self.shared.signal.store(true, std::sync::atomic::Ordering::Release);
        }
    }
}

impl Body for RecvBody {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        let Ok(mut inbox) = self.inbox.lock() else {
            return Poll::Ready(Some(Err(Status::internal("the request body is gone"))));
        };
        if let Some(chunk) = inbox.chunks.pop_front() {
            inbox.consumed += chunk.len();
            self.shared.signal.store(true, Ordering::Release);
            return Poll::Ready(Some(Ok(Frame::data(chunk))));
        }
        if inbox.reset {
            return Poll::Ready(Some(Err(Status::cancelled("the client reset the stream"))));
        }
        if inbox.ended {
            return Poll::Ready(None);
        }
        inbox.waker = Some(cx.waker().clone());
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        self.inbox
            .lock()
            .map(|inbox| inbox.ended && inbox.chunks.is_empty())
            .unwrap_or(true)
    }
}

/// A Predict on its decoded message, as tonic's service method runs it.
pub async fn predict(
    api: Arc<PredictionApi>,
    head: Arc<RequestHead>,
    peer: Option<SocketAddr>,
    message: PredictRequest,
    limit: usize,
) -> Finished {
    let call = CallHead {
        request_id: head.header(&REQUEST_ID),
        timeout: head.header(&GRPC_TIMEOUT),
        peer,
    };
    Finished::Predict(api.predict_decoded(call, message, limit).await)
}

/// A call through the tonic services, its response sent as events.
pub async fn relay(
    stream: u32,
    response: impl std::future::Future<Output = Result<Response<tonic::body::Body>, std::convert::Infallible>>,
    shared: Arc<Shared>,
    flow: Arc<Flow>,
) -> Finished {
    use http_body_util::BodyExt;
    let Ok(response) = response.await;
    let (parts, body) = response.into_parts();
    if body.is_end_stream() {
        shared.send(stream, Event::Head(parts, true));
        return Finished::Relayed;
    }
    shared.send(stream, Event::Head(parts, false));
    let mut body = std::pin::pin!(body);
    loop {
        match body.frame().await {
            None => {
                shared.send(stream, Event::End);
                break;
            }
            Some(Ok(frame)) => match frame.into_data() {
                Ok(data) => {
                    flow.room().await;
                    flow.queued.fetch_add(data.len(), Ordering::AcqRel);
                    shared.send(stream, Event::Data(data));
                }
                Err(frame) => {
                    let trailers = frame.into_trailers().unwrap_or_default();
                    shared.send(stream, Event::Trailers(trailers));
                    break;
                }
            },
            Some(Err(error)) => {
                log::debug!("gRPC response body failed: {error}");
                shared.send(stream, Event::Failed);
                break;
            }
        }
    }
    Finished::Relayed
}
