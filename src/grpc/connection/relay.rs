//! Any call but the direct Predict, relayed to the tonic services
//! (`Services::route`): its request body handed over as it arrives (with
//! what was already read of it first), its answer streamed back as the
//! client's windows take it.

use std::task::Poll;

use bytes::Bytes;
use h2::server::SendResponse;
use h2::{Reason, RecvStream};
use http_body::Body;
use tonic::codegen::http::{Request, Response};

use super::context::{watching, CallContext, Ended};
use super::writing::{write, Reservation};
use crate::grpc::services::RecvBody;

/// Any call through the tonic services: `read` is what was already taken
/// from the body, handed over as its start.
pub(super) async fn relay(
    context: &CallContext,
    request: Request<RecvStream>,
    read: Bytes,
    respond: &mut SendResponse<Bytes>,
) -> Result<Ended, Ended> {
    let (parts, body) = request.into_parts();
    let mut request = Request::from_parts(parts, RecvBody::new(read, body));
    if let Some(peer) = &context.peer {
        request.extensions_mut().insert(peer.clone());
    }
    let mut services = context.services.clone();
    let Ok(response) = watching(respond, services.route(request)).await?;
    let (parts, body) = response.into_parts();
    let head = Response::from_parts(parts, ());
    if body.is_end_stream() {
        respond.send_response(head, true).map_err(|_| Ended::Abandoned)?;
        return Ok(Ended::Answered);
    }
    let mut send = respond.send_response(head, false).map_err(|_| Ended::Abandoned)?;
    let mut body = std::pin::pin!(body);
    loop {
        // A streaming answer (health's Watch) may wait forever: a reset ends it.
        let frame = std::future::poll_fn(|cx| match body.as_mut().poll_frame(cx) {
            Poll::Ready(frame) => Poll::Ready(Ok(frame)),
            Poll::Pending => match send.poll_reset(cx) {
                Poll::Ready(Ok(_)) => Poll::Ready(Err(Ended::ResetByClient)),
                Poll::Ready(Err(_)) => Poll::Ready(Err(Ended::Abandoned)),
                Poll::Pending => Poll::Pending,
            },
        })
        .await?;
        let frame = match frame {
            None => {
                send.send_data(Bytes::new(), true).map_err(|_| Ended::Abandoned)?;
                return Ok(Ended::Answered);
            }
            Some(Ok(frame)) => frame,
            Some(Err(error)) => {
                log::debug!("gRPC response body failed: {error}");
                send.send_reset(Reason::INTERNAL_ERROR);
                return Err(Ended::Abandoned);
            }
        };
        match frame.into_data() {
            Ok(data) => {
                let Some(reservation) = Reservation::take(context, data.len()) else {
                    send.send_reset(Reason::CANCEL);
                    return Err(Ended::Abandoned);
                };
                write(&mut send, data, reservation, context.stall).await?;
            }
            Err(frame) => {
                let trailers = frame.into_trailers().unwrap_or_default();
                send.send_trailers(trailers).map_err(|_| Ended::Abandoned)?;
                return Ok(Ended::Answered);
            }
        }
    }
}
