//! `tfserve-bench grpc-ceiling`: the gRPC ceiling, a server that answers
//! every `/tensorflow.serving.PredictionService/Predict` with one fixed
//! `PredictResponse` after reading the request, and does nothing else. Two
//! stacks, each on a multi-threaded Tokio runtime of `threads` workers, as
//! tfserve's gRPC port runs:
//!
//! - `h2`: the `h2` crate's server connection with the windows and stream
//!   limit tfserve's connections use, each connection's calls polled inside
//!   its own task, the answer encoded once at start;
//! - `tonic`: tonic's server with the generated `PredictionService`, which
//!   encodes the (cloned) answer on every call, as any tonic service does.
//!
//! What a gRPC server must spend on a call is what the `h2` row spends;
//! tfserve's Predict is measured against it (benches/ceiling.py,
//! benches/cost_check.py).

use std::net::SocketAddr;

use bytes::Bytes;
use futures_util::stream::FuturesUnordered;
use futures_util::StreamExt;
use http::{HeaderMap, HeaderValue, Response};
use tfserve::codec::tensor_proto;
use tfserve::proto::tensorflow::serving::model_spec::VersionChoice;
use tfserve::proto::tensorflow::serving::prediction_service_server::{PredictionService, PredictionServiceServer};
use tfserve::proto::tensorflow::serving::{
    ClassificationRequest, ClassificationResponse, GetModelMetadataRequest, GetModelMetadataResponse, ModelSpec,
    MultiInferenceRequest, MultiInferenceResponse, PredictRequest, PredictResponse, RegressionRequest,
    RegressionResponse,
};
use tfserve::signature::SignatureSpec;
use tfserve::warmup::synthetic_inputs;

type Error = Box<dyn std::error::Error>;

/// tfserve's connection settings (src/grpc/connection/options.rs), so the
/// two servers grant and take the same windows.
const STREAM_WINDOW: u32 = 1 << 20;
const CONNECTION_WINDOW: u32 = 2 << 20;
const MAX_STREAMS: u32 = 200;

#[derive(Clone, Copy, clap::ValueEnum)]
pub enum Stack {
    H2,
    Tonic,
}

/// The answer tfserve gives a one-row Predict on `signature`: the model's
/// spec and one row of each output.
pub fn answer(model: &str, signature: &SignatureSpec) -> Result<PredictResponse, Error> {
    let outputs = SignatureSpec {
        inputs: signature.outputs.clone(),
        ..signature.clone()
    };
    let rows = synthetic_inputs(&outputs, 1).ok_or("cannot build outputs for this signature")?;
    Ok(PredictResponse {
        model_spec: Some(ModelSpec {
            name: model.into(),
            signature_name: signature.name.clone(),
            version_choice: Some(VersionChoice::Version(1)),
        }),
        outputs: signature
            .outputs
            .iter()
            .zip(&rows)
            .map(|(spec, tensor)| (spec.key.clone(), tensor_proto::to_proto(tensor)))
            .collect(),
    })
}

pub fn serve(stack: Stack, port: u16, threads: usize, answer: PredictResponse) -> Result<(), Error> {
    // tfserve's logger, and with it its handling of the stacks' `tracing`
    // spans: without it every span `h2` opens is checked against `log`.
    tfserve::logging::init("warn")?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads.max(1))
        .enable_all()
        .build()?;
    let address = SocketAddr::from(([127, 0, 0, 1], port));
    runtime.block_on(async move {
        match stack {
            Stack::H2 => serve_h2(address, answer).await,
            Stack::Tonic => {
                tonic::transport::Server::builder()
                    .tcp_nodelay(true)
                    .initial_stream_window_size(STREAM_WINDOW)
                    .initial_connection_window_size(CONNECTION_WINDOW)
                    .max_concurrent_streams(MAX_STREAMS)
                    .serve(address, PredictionServiceServer::new(Fixed(answer)))
                    .await?;
                Ok(())
            }
        }
    })
}

async fn serve_h2(address: SocketAddr, answer: PredictResponse) -> Result<(), Error> {
    let message = Bytes::from(crate::bench_grpc::framed(&answer)?);
    let listener = tokio::net::TcpListener::bind(address).await?;
    loop {
        let (stream, _) = listener.accept().await?;
        stream.set_nodelay(true)?;
        tokio::spawn(connection(stream, message.clone()));
    }
}

/// Serves one connection: its streams accepted and their calls polled in this task.
async fn connection(stream: tokio::net::TcpStream, message: Bytes) {
    let handshake = h2::server::Builder::new()
        .initial_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONNECTION_WINDOW)
        .max_concurrent_streams(MAX_STREAMS)
        .handshake::<_, Bytes>(stream);
    let Ok(mut connection) = handshake.await else {
        return;
    };
    let mut calls = FuturesUnordered::new();
    loop {
        // Each call answered as soon as it is read: a server with nothing
        // to batch writes what is ready whenever `h2` polls its socket.
        tokio::select! {
            accepted = connection.accept() => match accepted {
                Some(Ok((request, respond))) => calls.push(call(request, respond, message.clone())),
                _ => break,
            },
            Some(_) = calls.next(), if !calls.is_empty() => {}
        }
    }
    while calls.next().await.is_some() {}
}

/// Reads the request to its end, then answers `message` and `grpc-status: 0`.
async fn call(
    request: http::Request<h2::RecvStream>,
    mut respond: h2::server::SendResponse<Bytes>,
    message: Bytes,
) -> Result<(), h2::Error> {
    let mut body = request.into_body();
    while let Some(chunk) = body.data().await {
        let chunk = chunk?;
        let _ = body.flow_control().release_capacity(chunk.len());
    }
    let mut head = Response::new(());
    head.headers_mut()
        .insert(http::header::CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
    let mut send = respond.send_response(head, false)?;
    send.send_data(message, false)?;
    let mut trailers = HeaderMap::with_capacity(1);
    trailers.insert("grpc-status", HeaderValue::from_static("0"));
    send.send_trailers(trailers)
}

/// tonic's row: the generated service, Predict answering a clone of the answer.
struct Fixed(PredictResponse);

type Answer<T> = Result<tonic::Response<T>, tonic::Status>;

#[tonic::async_trait]
impl PredictionService for Fixed {
    async fn predict(&self, request: tonic::Request<PredictRequest>) -> Answer<PredictResponse> {
        drop(request);
        Ok(tonic::Response::new(self.0.clone()))
    }

    async fn classify(&self, _: tonic::Request<ClassificationRequest>) -> Answer<ClassificationResponse> {
        Err(tonic::Status::unimplemented("the ceiling answers Predict only"))
    }

    async fn regress(&self, _: tonic::Request<RegressionRequest>) -> Answer<RegressionResponse> {
        Err(tonic::Status::unimplemented("the ceiling answers Predict only"))
    }

    async fn multi_inference(&self, _: tonic::Request<MultiInferenceRequest>) -> Answer<MultiInferenceResponse> {
        Err(tonic::Status::unimplemented("the ceiling answers Predict only"))
    }

    async fn get_model_metadata(&self, _: tonic::Request<GetModelMetadataRequest>) -> Answer<GetModelMetadataResponse> {
        Err(tonic::Status::unimplemented("the ceiling answers Predict only"))
    }
}
