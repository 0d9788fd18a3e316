//! What a gRPC connection hands its calls to: every service the listener
//! answers, routed by the path's service name behind the basic-auth check,
//! and the request body type those services read (`RecvBody`, the `h2`
//! stream with what was already read of it first).

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use h2::RecvStream;
use http_body::{Body as HttpBody, Frame};
use tonic::body::Body;
use tonic::codegen::http::{Request, Response};
use tonic::codegen::BoxFuture;
use tonic::server::NamedService;
use tonic::Status;
use tonic_health::pb::health_server::HealthServer;

use super::health::HealthService;
use crate::dialects::kserve::grpc::InferenceApi;
use crate::dialects::tfs_grpc::{ModelApi, PredictionApi};
use crate::error::ApiError;
use crate::proto::inference::grpc_inference_service_server::GrpcInferenceServiceServer;
use crate::proto::tensorflow::serving::model_service_server::ModelServiceServer;
use crate::proto::tensorflow::serving::prediction_service_server::PredictionServiceServer;
use crate::server::ServerState;

const PREDICTION: &str = <PredictionServiceServer<PredictionApi> as NamedService>::NAME;
const MODEL: &str = <ModelServiceServer<ModelApi> as NamedService>::NAME;
const INFERENCE: &str = <GrpcInferenceServiceServer<InferenceApi> as NamedService>::NAME;
const HEALTH: &str = <HealthServer<HealthService> as NamedService>::NAME;

/// A service whose type cannot be named (reflection's), boxed: its calls are rare.
pub type BoxedService = tower::util::BoxCloneSyncService<Request<RecvBody>, Response<Body>, Infallible>;

/// Every service the listener answers, as a connection's own copy.
#[derive(Clone)]
pub struct Services {
    pub state: Arc<ServerState>,
    /// Predict's own handler, which connections call on decoded messages.
    pub predict: Option<Arc<PredictionApi>>,
    /// The message sizes Predict takes and answers (tonic's limits).
    pub receive_limit: usize,
    pub send_limit: usize,
    pub prediction: PredictionServiceServer<PredictionApi>,
    pub model: ModelServiceServer<ModelApi>,
    pub inference: GrpcInferenceServiceServer<InferenceApi>,
    pub health: HealthServer<HealthService>,
    /// By service name: the server reflection services.
    pub others: Vec<(&'static str, BoxedService)>,
}

impl Services {
    pub fn route(&mut self, request: Request<RecvBody>) -> BoxFuture<Response<Body>, Infallible> {
        use tower::Service;
        // The generated services are always ready (`poll_ready` answers Ready),
        // so calls go straight in.
        let service = request
            .uri()
            .path()
            .strip_prefix('/')
            .and_then(|path| path.split_once('/'))
            .map_or("", |(service, _)| service);
        if service == HEALTH {
            return self.health.call(request);
        }
        if let Some(auth) = self.state.auth.as_ref() {
            let header = request.headers().get("authorization").and_then(|v| v.to_str().ok());
            if !auth.allows_header(header) {
                return answer(Status::unauthenticated(ApiError::Unauthorized.to_string()));
            }
        }
        match service {
            PREDICTION => self.prediction.call(request),
            INFERENCE => self.inference.call(request),
            MODEL => self.model.call(request),
            _ => match self.others.iter_mut().find(|(name, _)| *name == service) {
                Some((_, other)) => Box::pin(other.call(request)),
                None => answer(Status::unimplemented("")),
            },
        }
    }
}

/// A response carrying only a status, as gRPC's servers send for calls
/// they do not get to run.
fn answer(status: Status) -> BoxFuture<Response<Body>, Infallible> {
    let (parts, ()) = status.into_http::<()>().into_parts();
    Box::pin(std::future::ready(Ok(Response::from_parts(parts, Body::empty()))))
}

/// A relayed request's body: what was read before the relay, then the stream.
pub struct RecvBody {
    read: Bytes,
    stream: Option<RecvStream>,
}

impl RecvBody {
    pub fn new(read: Bytes, stream: RecvStream) -> RecvBody {
        RecvBody {
            read,
            stream: Some(stream),
        }
    }
}

impl HttpBody for RecvBody {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        if !self.read.is_empty() {
            return Poll::Ready(Some(Ok(Frame::data(std::mem::take(&mut self.read)))));
        }
        let Some(stream) = self.stream.as_mut() else {
            return Poll::Ready(None);
        };
        let failed = |error: h2::Error| Status::cancelled(format!("the request body failed: {error}"));
        match stream.poll_data(cx) {
            Poll::Ready(Some(Ok(chunk))) => {
                let _ = stream.flow_control().release_capacity(chunk.len());
                return Poll::Ready(Some(Ok(Frame::data(chunk))));
            }
            Poll::Ready(Some(Err(error))) => return Poll::Ready(Some(Err(failed(error)))),
            Poll::Ready(None) => {}
            Poll::Pending => return Poll::Pending,
        }
        match stream.poll_trailers(cx) {
            Poll::Ready(Ok(trailers)) => {
                self.stream = None;
                Poll::Ready(trailers.map(|t| Ok(Frame::trailers(t))))
            }
            Poll::Ready(Err(error)) => Poll::Ready(Some(Err(failed(error)))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.read.is_empty() && self.stream.as_ref().is_none_or(RecvStream::is_end_stream)
    }
}
