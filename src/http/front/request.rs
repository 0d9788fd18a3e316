//! One request on the front: its admission, its body's budget, the call
//! through TF Serving's route, and its reply, in the same [`Lifecycle`] the
//! actix middleware gives the other routes.

use std::ops::Range;
use std::time::Duration;

use actix_web::http::header::HeaderValue;
use actix_web::HttpResponse;
use bytes::Bytes;

use super::parse::{header_text, Head};
use super::write::{write_answer, write_response};
use super::{Connection, Front};
use crate::call::http::{Answer, Exchange, Inference, Outcome, PeerSocket};
use crate::dialects::tfs;
use crate::error::{error_response, ApiError};
use crate::http::middleware::{body_size, REQUEST_ID};
use crate::server::lifecycle::{self, closes_connection, Ending, Lifecycle};
use crate::server::{Admitted, BytesBorrowed};
use crate::service::Trace;

/// What a request holds from its head on.
pub(super) struct Gate<'a> {
    /// Its in-flight slot, or why it has none.
    pub(super) admitted: Result<Admitted<'a>, ApiError>,
    /// Its body's bytes of the budget, or why they do not fit.
    pub(super) held: Option<Result<BytesBorrowed<'a>, ApiError>>,
    /// Under a latency objective, when its bytes arrived: its deadline counts from then.
    pub(super) arrived: Option<std::time::Instant>,
}

impl Gate<'_> {
    /// Refused before its body is read.
    pub(super) fn refused(&self) -> bool {
        self.admitted.is_err() || matches!(self.held, Some(Err(_)))
    }
}

/// How much of a request's body arrived.
pub(super) struct Answered {
    /// The error reading it gave, if any.
    pub(super) arrived: Result<(), ApiError>,
    /// Bytes of it are still on the connection: it closes after the answer.
    pub(super) unread: bool,
}

/// What a request gets: an inference call's answer, or a response made
/// before the call (admission refused) or instead of it (a panic).
pub(super) enum Reply {
    Answered(Answer),
    Refused(HttpResponse),
}

impl Front {
    /// A request's admission and its declared body's bytes of the budget,
    /// taken when its head has arrived, as the gate middleware and the body
    /// reader take them; under a latency objective, refused at once when the
    /// queue ahead, after the time it `waited` unread, would make it late,
    /// before its body is read or decoded.
    pub(super) fn gate(&self, head: &Head, waited: Duration) -> Gate<'_> {
        let service = &self.state.service;
        let arrived = service
            .any_steered()
            .then(|| std::time::Instant::now().checked_sub(waited))
            .flatten();
        let admitted = lifecycle::admit(&self.state).and_then(|admitted| {
            service
                .late_before_reading(&head.model, &head.selector, arrived)
                .map(|()| admitted)
        });
        // Only an admitted request reads its body.
        let held = admitted
            .is_ok()
            .then(|| self.state.service.body_budget().hold(head.body));
        Gate {
            admitted,
            held,
            arrived,
        }
    }

    /// Answers one request, as actix-web's middleware and TF Serving route
    /// would, into `out`. Whether the connection closes after it.
    pub(super) async fn answer(
        &self,
        (request, head): (&Bytes, &Head),
        gate: Gate<'_>,
        answered: Answered,
        connection: Connection,
        out: &mut Vec<u8>,
    ) -> bool {
        let Connection { peer, client } = connection;
        let state = &*self.state;
        let text = |range: &Option<Range<usize>>| range.clone().and_then(|r| header_text(&request[r]));
        // Read only for a panic's or an access line's sake.
        let path = || std::str::from_utf8(&request[head.path.clone()]).unwrap_or_default();
        let lifecycle = Lifecycle::begin(Some(&state.access_log), text(&head.request_id), || {
            (Some(head.body as u64), client)
        });
        let cut_short = answered.unread || answered.arrived.is_err();
        let handling = self.handle((request, head), gate, answered.arrived, &lifecycle, peer);
        let reply = match lifecycle.contain("POST", path, handling).await {
            Ok(reply) => reply,
            Err(panicked) => Reply::Refused(crate::http::panics::answer(panicked).error_response()),
        };
        if lifecycle.access_logged() {
            let (status, bytes_out, served) = match &reply {
                Reply::Answered(answer) => (answer.status, Some(answer.body.len() as u64), answer.served.as_ref()),
                Reply::Refused(response) => (response.status(), body_size(response.body()), None),
            };
            lifecycle.end(Ending {
                protocol: "rest",
                method: "POST",
                path: path(),
                status: status.as_u16(),
                grpc_code: None,
                named_model: None,
                bytes_out,
                served,
            });
        }
        let close = head.close || cut_short || closes_connection(state);
        let id = &lifecycle.id.0;
        match reply {
            Reply::Answered(answer) => write_answer(&answer, id, close, out),
            Reply::Refused(mut response) => {
                if let Ok(value) = HeaderValue::from_str(id) {
                    response.headers_mut().insert(REQUEST_ID, value);
                }
                write_response(response, close, out).await;
            }
        }
        close
    }

    /// The gate's admission, then TF Serving's route on the body read.
    async fn handle(
        &self,
        (request, head): (&Bytes, &Head),
        gate: Gate<'_>,
        arrived: Result<(), ApiError>,
        lifecycle: &Lifecycle,
        peer: PeerSocket,
    ) -> Reply {
        let state = &*self.state;
        let _admitted = match gate.admitted {
            Ok(admitted) => admitted,
            Err(error) => return Reply::Refused(error_response(error.status(), &error.to_string())),
        };
        let (_held, budget) = match gate.held {
            Some(Ok(held)) => (Some(held), Ok(())),
            Some(Err(error)) => (None, Err(error)),
            None => (None, Ok(())),
        };
        let mut inference = Inference::with_trace(Trace {
            client_gone: Some(Box::new(move || peer.closed())),
            request_id: Some(lifecycle.id.0.clone()),
            access_logged: lifecycle.access_logged(),
            arrived: gate.arrived,
            ..Trace::default()
        });
        let body = request.slice(head.len.min(request.len())..);
        let result = match budget.and(arrived) {
            Ok(()) => {
                tfs::infer(
                    state,
                    &head.model,
                    &head.selector,
                    &head.verb,
                    &body,
                    &mut inference.trace,
                )
                .await
            }
            Err(error) => Err(error),
        };
        let content_type = head.content_type.clone().and_then(|r| header_text(&request[r]));
        let ce_id = head.ce_id.clone().and_then(|r| header_text(&request[r]));
        let exchange = Exchange::Front {
            state,
            content_type,
            ce_id,
        };
        let outcome = Outcome {
            result,
            content_type: None,
            model: &head.model,
            api: head.verb.api(),
        };
        Reply::Answered(inference.conclude(exchange, outcome))
    }
}
