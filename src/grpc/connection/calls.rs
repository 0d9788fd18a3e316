//! What one stream runs, on the `h2` crate's request and response handles:
//! TF Serving's unary Predict decoded here from its body's bytes and
//! answered from the run's tensors, or any other call relayed to the tonic
//! services (`Services::route`) with its body streamed both ways. Answers
//! leave as the client's windows take them; what waits for a window counts
//! against the connection's pending-answer budget.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use bytes::Bytes;
use futures_util::FutureExt;
use h2::server::SendResponse;
use h2::RecvStream;
use tonic::codegen::http::{self, HeaderMap, HeaderName, HeaderValue, Request, Response};
use tonic::Status;

use super::context::{watching, CallContext, Ended};
use super::relay::relay;
use super::writing::{over_budget, write, Reservation};

use crate::call::grpc::{set_request_id, CallHead, Unread, GRPC_TIMEOUT, REQUEST_ID};
use crate::dialects::tfs_grpc::PredictAnswer;
use crate::grpc::body::{predict_request, whole, MessageBody};
use crate::server::{lifecycle, RequestId};

const PREDICT_PATH: &str = "/tensorflow.serving.PredictionService/Predict";
pub(super) const GRPC: HeaderValue = HeaderValue::from_static("application/grpc");
// Names looked up or set on every call: as text each would be parsed each time.
const GRPC_ENCODING: HeaderName = HeaderName::from_static("grpc-encoding");
const GRPC_STATUS: HeaderName = HeaderName::from_static("grpc-status");

/// Runs one stream's call to its end.
pub async fn run(context: Arc<CallContext>, request: Request<RecvStream>, respond: SendResponse<Bytes>) -> Ended {
    let direct = context.predict.is_some()
        && request.method() == http::Method::POST
        && request.uri().path() == PREDICT_PATH
        && request
            .headers()
            .get(GRPC_ENCODING)
            .is_none_or(|coding| coding.as_bytes() == b"identity");
    // Kept for a panic's log line: the direct Predict's path is known.
    let given = request.headers().get(REQUEST_ID).cloned();
    let uri = (!direct).then(|| request.uri().clone());
    let path = uri.as_ref().map_or(PREDICT_PATH, |uri| uri.path());
    contained(respond, given, path, async |respond: &mut SendResponse<Bytes>| {
        let ended = if direct {
            predict(&context, request, respond).await
        } else {
            relay(&context, request, Bytes::new(), respond).await
        };
        ended.unwrap_or_else(|ended| ended)
    })
    .await
}

/// Runs a call with a panic in it contained: the call answers `INTERNAL`
/// naming its request id (`given`, or a new one), the panic is logged and
/// counted, and the connection serves on. `given` and `path` are the
/// request's, kept as the call takes the request.
pub(super) async fn contained(
    mut respond: SendResponse<Bytes>,
    given: Option<HeaderValue>,
    path: &str,
    call: impl AsyncFnOnce(&mut SendResponse<Bytes>) -> Ended,
) -> Ended {
    let panic = match AssertUnwindSafe(call(&mut respond)).catch_unwind().await {
        Ok(ended) => return ended,
        Err(panic) => panic,
    };
    let id = RequestId::from_header(given.as_ref().and_then(|v| v.to_str().ok()));
    let panicked = lifecycle::contained(&id.0, "gRPC", path, panic.as_ref());
    let mut status = Status::internal(panicked.to_string());
    set_request_id(status.metadata_mut(), &id.0);
    // Refused (and the stream reset as its handle drops) when the answer's
    // head had already left.
    trailers_only(&mut respond, &status)
}

/// What a Predict came to before its answer is written.
enum Outcome {
    Answer(PredictAnswer),
    Failed(Status),
    /// Not one message decoded here: relayed with what was read of it.
    Relay(Request<RecvStream>, Bytes),
    Gone,
}

/// A Predict decoded from its body: one uncompressed message within the
/// limit. Anything else (a second message, one too long, bytes that do not
/// decode) goes to tonic with what was read, which answers it as it always has.
async fn predict(
    context: &CallContext,
    request: Request<RecvStream>,
    respond: &mut SendResponse<Bytes>,
) -> Result<Ended, Ended> {
    let answer = match watching(respond, run_predict(context, request)).await? {
        Outcome::Answer(answer) => answer,
        Outcome::Failed(status) => return Ok(trailers_only(respond, &status)),
        Outcome::Relay(request, read) => return relay(context, request, read, respond).await,
        Outcome::Gone => return Err(Ended::Abandoned),
    };
    let mut message = Vec::with_capacity(5 + answer.message_len());
    message.push(0);
    message.extend_from_slice(&(answer.message_len() as u32).to_be_bytes());
    answer.write(&mut message);
    let mut head = Response::new(());
    head.headers_mut().insert(http::header::CONTENT_TYPE, GRPC);
    if let Ok(mut id) = HeaderValue::from_str(&answer.request_id) {
        // Never indexed by HPACK: every id is new, so indexing one would
        // only evict entries the client's table could use.
        id.set_sensitive(true);
        head.headers_mut().insert(REQUEST_ID, id);
    }
    let Some(reservation) = Reservation::take(context, message.len()) else {
        return Ok(trailers_only(respond, &over_budget(context, message.len())));
    };
    let mut send = respond.send_response(head, false).map_err(|_| Ended::Abandoned)?;
    write(&mut send, Bytes::from(message), reservation, context.stall).await?;
    let mut trailers = HeaderMap::with_capacity(1);
    trailers.insert(GRPC_STATUS, HeaderValue::from_static("0"));
    send.send_trailers(trailers).map_err(|_| Ended::Abandoned)?;
    Ok(Ended::Answered)
}

async fn run_predict(context: &CallContext, request: Request<RecvStream>) -> Outcome {
    let limit = context.services.receive_limit;
    let (parts, mut body) = request.into_parts();
    let Ok(collected) = collect_message(&mut body, limit).await else {
        return Outcome::Gone;
    };
    let message = match &collected {
        Collected::Whole(bytes) => predict_request(bytes, limit),
        Collected::Partial(_) => None,
    };
    let (Some(message), Some(api)) = (message, context.predict.as_ref()) else {
        let read = match collected {
            Collected::Whole(bytes) | Collected::Partial(bytes) => bytes,
        };
        return Outcome::Relay(Request::from_parts(parts, body), read);
    };
    let head = CallHead {
        request_id: parts.headers.get(REQUEST_ID).and_then(|v| v.to_str().ok()),
        timeout: parts.headers.get(GRPC_TIMEOUT).and_then(|v| v.to_str().ok()),
        peer: context.peer.as_ref().and_then(|peer| peer.remote_addr()),
        unread: Unread::of(&parts.extensions),
    };
    // Boxed: the call's run is most of the call's future (4 KB), and every
    // layer around it (the reset watch, the panic guard, the connection's
    // set of calls) would otherwise copy it whole as it is built.
    match Box::pin(api.predict_decoded(head, message, context.services.send_limit)).await {
        Ok(answer) => Outcome::Answer(answer),
        Err(status) => Outcome::Failed(status),
    }
}

enum Collected {
    /// One whole gRPC message, its 5-byte prefix included, and the request's end.
    Whole(Bytes),
    /// Not one message this side decodes: what was read of it.
    Partial(Bytes),
}

/// Reads a request body while it can still be one uncompressed message
/// within `limit`, returning the window for each chunk as it arrives.
async fn collect_message(body: &mut RecvStream, limit: usize) -> Result<Collected, h2::Error> {
    let mut gathered = MessageBody::default();
    while let Some(chunk) = std::future::poll_fn(|cx| body.poll_data(cx)).await {
        let chunk = chunk?;
        let _ = body.flow_control().release_capacity(chunk.len());
        if !gathered.push(chunk, limit) {
            return Ok(Collected::Partial(gathered.into_bytes()));
        }
    }
    // Trailers on a request are legal but unused by gRPC; reading them ends the stream.
    let _ = std::future::poll_fn(|cx| body.poll_trailers(cx)).await;
    let bytes = gathered.into_bytes();
    if whole(&bytes, limit) {
        Ok(Collected::Whole(bytes))
    } else {
        Ok(Collected::Partial(bytes))
    }
}

/// A call's whole answer in one HEADERS frame: its status, no message.
pub(super) fn trailers_only(respond: &mut SendResponse<Bytes>, status: &Status) -> Ended {
    let mut head = Response::new(());
    head.headers_mut().insert(http::header::CONTENT_TYPE, GRPC);
    // A message no header can carry is replaced by tonic with its own status.
    if let Err(replaced) = status.add_header(head.headers_mut()) {
        head.headers_mut().remove("grpc-message");
        let _ = replaced.add_header(head.headers_mut());
    }
    match respond.send_response(head, true) {
        Ok(_) => Ended::Answered,
        Err(_) => Ended::Abandoned,
    }
}
