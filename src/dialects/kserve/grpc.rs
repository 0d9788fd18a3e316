//! `inference.GRPCInferenceService`: the Open Inference Protocol over gRPC,
//! with `raw_input_contents`/`raw_output_contents` and typed contents.

use std::pin::Pin;
use std::sync::Arc;

use futures_util::Stream;
use tonic::{Request, Response, Status, Streaming};

use super::{Input, OipError};
use crate::call::grpc::{status_of, Call};
use crate::error::ApiError;
use crate::proto::inference::grpc_inference_service_server::GrpcInferenceService;
use crate::proto::inference::infer_parameter::ParameterChoice;
use crate::proto::inference::model_infer_request::InferInputTensor;
use crate::proto::inference::model_infer_response::InferOutputTensor;
use crate::proto::inference::model_metadata_response::TensorMetadata;
use crate::proto::inference::repository_index_response::ModelIndex;
use crate::proto::inference::*;
use crate::server::ServerState;
use crate::service::Trace;
use crate::tensor::{DType, Tensor, TensorData};

pub struct InferenceApi {
    pub state: Arc<ServerState>,
}

type AnswerStream = Pin<Box<dyn Stream<Item = Result<ModelStreamInferResponse, Status>> + Send + 'static>>;

#[tonic::async_trait]
impl GrpcInferenceService for InferenceApi {
    async fn server_live(&self, _: Request<ServerLiveRequest>) -> Result<Response<ServerLiveResponse>, Status> {
        Ok(Response::new(ServerLiveResponse { live: true }))
    }

    async fn server_ready(&self, _: Request<ServerReadyRequest>) -> Result<Response<ServerReadyResponse>, Status> {
        let ready = self.state.ready().is_ok();
        Ok(Response::new(ServerReadyResponse { ready }))
    }

    async fn model_ready(&self, request: Request<ModelReadyRequest>) -> Result<Response<ModelReadyResponse>, Status> {
        let request = request.into_inner();
        let ready =
            super::model_ready(&self.state.service, &request.name, &request.version).map_err(|e| status_of(&e))?;
        Ok(Response::new(ModelReadyResponse { ready }))
    }

    async fn server_metadata(
        &self,
        _: Request<ServerMetadataRequest>,
    ) -> Result<Response<ServerMetadataResponse>, Status> {
        Ok(Response::new(ServerMetadataResponse {
            name: super::SERVER_NAME.into(),
            version: env!("CARGO_PKG_VERSION").into(),
            extensions: super::EXTENSIONS.iter().map(|e| e.to_string()).collect(),
        }))
    }

    async fn model_metadata(
        &self,
        request: Request<ModelMetadataRequest>,
    ) -> Result<Response<ModelMetadataResponse>, Status> {
        let request = request.into_inner();
        let metadata =
            super::model_metadata(&self.state.service, &request.name, &request.version).map_err(|e| status_of(&e))?;
        let tensors = |list: Vec<super::TensorMetadata>| -> Vec<TensorMetadata> {
            list.into_iter()
                .map(|t| TensorMetadata {
                    name: t.name,
                    datatype: t.datatype.into(),
                    shape: t.shape,
                })
                .collect()
        };
        Ok(Response::new(ModelMetadataResponse {
            name: metadata.name,
            versions: metadata.versions,
            platform: super::PLATFORM.into(),
            inputs: tensors(metadata.inputs),
            outputs: tensors(metadata.outputs),
        }))
    }

    async fn model_infer(&self, request: Request<ModelInferRequest>) -> Result<Response<ModelInferResponse>, Status> {
        let mut call = Call::begin(&self.state, &request, "v2_infer")?;
        let request = request.into_inner();
        let model = request.model_name.clone();
        let result = infer(&self.state, request, &mut call.trace).await;
        call.finish(result, &model)
    }

    type ModelStreamInferStream = AnswerStream;

    /// Answers each request of the stream in order; a failed one answers
    /// with its `error_message` and the stream goes on.
    async fn model_stream_infer(
        &self,
        request: Request<Streaming<ModelInferRequest>>,
    ) -> Result<Response<Self::ModelStreamInferStream>, Status> {
        let mut requests = request.into_inner();
        let state = self.state.clone();
        let (sender, receiver) = tokio::sync::mpsc::channel(16);
        tokio::spawn(async move {
            loop {
                let request = match requests.message().await {
                    Ok(Some(request)) => request,
                    Ok(None) => return,
                    Err(status) => {
                        let _ = sender.send(Err(status)).await;
                        return;
                    }
                };
                let mut trace = Trace::default();
                let answer = match infer(&state, request, &mut trace).await {
                    Ok(response) => ModelStreamInferResponse {
                        error_message: String::new(),
                        infer_response: Some(response),
                    },
                    Err(error) => ModelStreamInferResponse {
                        error_message: error.to_string(),
                        infer_response: None,
                    },
                };
                if sender.send(Ok(answer)).await.is_err() {
                    return;
                }
            }
        });
        let stream = tokio_stream::wrappers::ReceiverStream::new(receiver);
        Ok(Response::new(Box::pin(stream)))
    }

    async fn repository_index(
        &self,
        request: Request<RepositoryIndexRequest>,
    ) -> Result<Response<RepositoryIndexResponse>, Status> {
        let ready_only = request.into_inner().ready;
        let models = super::repository::index(&self.state.service, ready_only)
            .into_iter()
            .map(|e| ModelIndex {
                name: e.name,
                version: e.version,
                state: e.state.into(),
                reason: e.reason,
            })
            .collect();
        Ok(Response::new(RepositoryIndexResponse { models }))
    }

    async fn repository_model_load(
        &self,
        request: Request<RepositoryModelLoadRequest>,
    ) -> Result<Response<RepositoryModelLoadResponse>, Status> {
        let call = Call::begin(&self.state, &request, "v2_load")?;
        let model = request.into_inner().model_name;
        let result = super::repository::load(&self.state, &model)
            .await
            .map(|()| RepositoryModelLoadResponse {});
        call.finish(result, &model)
    }

    async fn repository_model_unload(
        &self,
        request: Request<RepositoryModelUnloadRequest>,
    ) -> Result<Response<RepositoryModelUnloadResponse>, Status> {
        let call = Call::begin(&self.state, &request, "v2_unload")?;
        let model = request.into_inner().model_name;
        let result = super::repository::unload(&self.state, &model)
            .await
            .map(|()| RepositoryModelUnloadResponse {});
        call.finish(result, &model)
    }
}

/// Inputs this large are read on the blocking pool.
const OFFLOAD_BYTES: usize = 256 * 1024;

async fn infer(
    state: &ServerState,
    mut request: ModelInferRequest,
    trace: &mut Trace,
) -> Result<ModelInferResponse, ApiError> {
    let raw = std::mem::take(&mut request.raw_input_contents);
    let tensors = std::mem::take(&mut request.inputs);
    let size: usize = raw.iter().map(|r| r.len()).sum();
    let inputs = if size >= OFFLOAD_BYTES {
        let model = request.model_name.clone();
        crate::service::off_worker(move || decode_inputs(tensors, raw, &model)).await?
    } else {
        decode_inputs(tensors, raw, &request.model_name)?
    };
    let signature = match request
        .parameters
        .get("signature_name")
        .and_then(|p| p.parameter_choice.as_ref())
    {
        Some(ParameterChoice::StringParam(name)) => Some(name.clone()),
        _ => None,
    };
    let requested: Vec<String> = request.outputs.iter().map(|o| o.name.clone()).collect();
    let (servable, _, outputs) = super::infer(
        &state.service,
        &request.model_name,
        &request.model_version,
        signature.as_deref(),
        inputs,
        &requested,
        trace,
    )
    .await?;
    let mut response = ModelInferResponse {
        model_name: servable.model.clone(),
        model_version: servable.version.to_string(),
        id: request.id,
        ..ModelInferResponse::default()
    };
    for (name, tensor) in outputs {
        response.outputs.push(InferOutputTensor {
            name,
            datatype: super::datatype(tensor.dtype()).into(),
            shape: tensor.shape.iter().map(|&d| d as i64).collect(),
            ..InferOutputTensor::default()
        });
        response.raw_output_contents.push(super::to_raw(&tensor).into());
    }
    Ok(response)
}

/// A ModelInferRequest's inputs as tensors, from `raw_input_contents` or `contents`.
pub fn decode_inputs(
    tensors: Vec<InferInputTensor>,
    raw: Vec<bytes::Bytes>,
    model: &str,
) -> Result<Vec<Input>, ApiError> {
    if !raw.is_empty() && raw.len() != tensors.len() {
        return Err(OipError::RawContentsCount {
            inputs: tensors.len(),
            got: raw.len(),
        }
        .into());
    }
    tensors
        .into_iter()
        .enumerate()
        .map(|(i, input)| {
            if !raw.is_empty() && input.contents.is_some() {
                return Err(OipError::ContentsBesideRaw {
                    input: input.name,
                    model: model.to_string(),
                }
                .into());
            }
            let tensor = match raw.get(i) {
                Some(bytes) => super::from_raw(&input.name, &input.datatype, &input.shape, bytes)?,
                None => from_contents(&input)?,
            };
            Ok(Input {
                name: input.name,
                tensor,
            })
        })
        .collect()
}

/// An input given in `contents`, the typed field its datatype uses.
fn from_contents(input: &InferInputTensor) -> Result<Tensor, ApiError> {
    let dtype = super::known_dtype(&input.name, &input.datatype)?;
    let contents = input.contents.clone().unwrap_or_default();
    let out_of_range = |v: &dyn std::fmt::Display| {
        ApiError::from(OipError::OutOfRange {
            input: input.name.clone(),
            value: v.to_string(),
            datatype: input.datatype.clone(),
        })
    };
    macro_rules! convert {
        ($variant:ident, $t:ty, $field:ident) => {
            TensorData::$variant(
                contents
                    .$field
                    .iter()
                    .map(|&v| <$t>::try_from(v).map_err(|_| out_of_range(&v)))
                    .collect::<Result<_, _>>()?,
            )
        };
    }
    let data = match dtype {
        DType::Bool => TensorData::Bool(contents.bool_contents),
        DType::Int8 => convert!(Int8, i8, int_contents),
        DType::Int16 => convert!(Int16, i16, int_contents),
        DType::Int32 => TensorData::Int32(contents.int_contents),
        DType::Int64 => TensorData::Int64(contents.int64_contents),
        DType::UInt8 => convert!(UInt8, u8, uint_contents),
        DType::UInt16 => convert!(UInt16, u16, uint_contents),
        DType::UInt32 => TensorData::UInt32(contents.uint_contents),
        DType::UInt64 => TensorData::UInt64(contents.uint64_contents),
        DType::Float => TensorData::Float(contents.fp32_contents),
        DType::Double => TensorData::Double(contents.fp64_contents),
        DType::String => TensorData::String(contents.bytes_contents),
        other => {
            return Err(OipError::UnsupportedDatatype {
                input: input.name.clone(),
                datatype: super::datatype(other),
            }
            .into())
        }
    };
    let shape = super::shape_of(&input.name, &input.shape, Some(data.len()))?;
    Ok(Tensor::new(shape, data))
}
