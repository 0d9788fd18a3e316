//! TF Serving's gRPC API: `tensorflow.serving.PredictionService` (Predict,
//! Classify, Regress, MultiInference, GetModelMetadata) and `ModelService`
//! (GetModelStatus, HandleReloadConfigRequest), on the same service core as
//! the REST dialects.

mod examples;
mod model;
mod wire;

use std::collections::BTreeMap;
use std::sync::Arc;

use prost::Message;
use tonic::{Request, Response, Status};

use crate::call::grpc::{Call, CallHead};
use crate::codec::tensor_proto;
use crate::error::ApiError;
use crate::proto::tensorflow::serving::model_spec::VersionChoice;
use crate::proto::tensorflow::serving::prediction_service_server::PredictionService;
use crate::proto::tensorflow::serving::{
    ClassificationRequest, ClassificationResponse, GetModelMetadataRequest, GetModelMetadataResponse, ModelSpec,
    MultiInferenceRequest, MultiInferenceResponse, PredictRequest, PredictResponse, RegressionRequest,
    RegressionResponse,
};
use crate::proto::tensorflow::TensorProto;
use crate::server::ServerState;
use crate::service::{Servable, VersionSelector};
use crate::service::{Service, Trace};
use crate::signature::{SignatureSpec, DEFAULT_SIGNATURE};
use crate::tensor::Tensor;
use crate::tfs::TfsError;

pub use model::ModelApi;

/// `tensorflow.serving.PredictionService`.
pub struct PredictionApi {
    pub state: Arc<ServerState>,
}

#[tonic::async_trait]
impl PredictionService for PredictionApi {
    async fn predict(&self, request: Request<PredictRequest>) -> Result<Response<PredictResponse>, Status> {
        let mut call = Call::begin(&self.state, &request, "predict")?;
        let mut request = request.into_inner();
        let spec = request.model_spec.take();
        let result = predict(&self.state.service, spec.as_ref(), request, &mut call.trace).await;
        let model = spec.as_ref().map_or("", |s| s.name.as_str());
        call.finish(result.map(Predicted::into_response), model)
    }

    async fn classify(
        &self,
        request: Request<ClassificationRequest>,
    ) -> Result<Response<ClassificationResponse>, Status> {
        let mut call = Call::begin(&self.state, &request, "classify")?;
        let request = request.into_inner();
        let model = spec_name(request.model_spec.as_ref());
        let result = examples::classify(&self.state.service, request, &mut call.trace).await;
        call.finish(result, &model)
    }

    async fn regress(&self, request: Request<RegressionRequest>) -> Result<Response<RegressionResponse>, Status> {
        let mut call = Call::begin(&self.state, &request, "regress")?;
        let request = request.into_inner();
        let model = spec_name(request.model_spec.as_ref());
        let result = examples::regress(&self.state.service, request, &mut call.trace).await;
        call.finish(result, &model)
    }

    async fn multi_inference(
        &self,
        request: Request<MultiInferenceRequest>,
    ) -> Result<Response<MultiInferenceResponse>, Status> {
        let mut call = Call::begin(&self.state, &request, "multi_inference")?;
        let request = request.into_inner();
        let model = request
            .tasks
            .first()
            .map(|t| spec_name(t.model_spec.as_ref()))
            .unwrap_or_default();
        let result = examples::multi_inference(&self.state.service, request, &mut call.trace).await;
        call.finish(result, &model)
    }

    async fn get_model_metadata(
        &self,
        request: Request<GetModelMetadataRequest>,
    ) -> Result<Response<GetModelMetadataResponse>, Status> {
        let call = Call::begin(&self.state, &request, "metadata")?;
        let request = request.into_inner();
        let model = spec_name(request.model_spec.as_ref());
        let result = model::metadata(&self.state.service, &request);
        call.finish(result, &model)
    }
}

fn spec_name(spec: Option<&ModelSpec>) -> String {
    spec.map(|s| s.name.clone()).unwrap_or_default()
}

/// The model and version a `ModelSpec` names, with TF Serving's error when it is missing.
pub fn address(spec: Option<&ModelSpec>) -> Result<(&str, VersionSelector), ApiError> {
    let spec = spec.ok_or_else(|| ApiError::from(TfsError::MissingModelSpec))?;
    let selector = match &spec.version_choice {
        Some(VersionChoice::Version(version)) => VersionSelector::Specific(*version),
        Some(VersionChoice::VersionLabel(label)) => VersionSelector::Label(label.clone()),
        None => VersionSelector::Latest,
    };
    Ok((&spec.name, selector))
}

/// [`address`] for the calls that run or describe a model, where TF Serving
/// refuses an empty name before looking anything up.
pub fn named_address(spec: Option<&ModelSpec>) -> Result<(&str, VersionSelector), ApiError> {
    let (model, selector) = address(spec)?;
    if model.is_empty() {
        return Err(TfsError::EmptyModelName.into());
    }
    Ok((model, selector))
}

/// The servable and signature a `ModelSpec` addresses; an unknown signature
/// is answered in the calling method's words (`missing` gets its name).
fn resolve(
    service: &Service,
    spec: Option<&ModelSpec>,
    missing: fn(String) -> ApiError,
) -> Result<(Arc<Servable>, Arc<SignatureSpec>), ApiError> {
    let (model, selector) = named_address(spec)?;
    let servable = service.servable(model, &selector)?;
    let name = spec
        .map(|s| s.signature_name.as_str())
        .filter(|s| !s.is_empty())
        .unwrap_or(DEFAULT_SIGNATURE);
    let signature = servable
        .signature(name)
        .cloned()
        .ok_or_else(|| missing(name.to_string()))?;
    Ok((servable, signature))
}

/// The answer's `model_spec`, filled as TF Serving fills it: the name, the
/// version that ran and the signature (the default one when none was named).
pub fn answered_spec(servable: &Servable, signature: &str) -> ModelSpec {
    ModelSpec {
        name: servable.model.clone(),
        signature_name: signature.to_string(),
        version_choice: Some(VersionChoice::Version(servable.version)),
    }
}

impl PredictionApi {
    /// Predict for a transport that decoded the message itself and writes
    /// the answer's bytes: the same call as [`PredictionService::predict`].
    /// An answer over `limit` bytes is OUT_OF_RANGE, in tonic's words.
    pub async fn predict_decoded(
        &self,
        head: CallHead<'_>,
        mut request: PredictRequest,
        limit: usize,
    ) -> Result<PredictAnswer, Status> {
        let mut call = Call::admit(&self.state, head, || request.encoded_len(), "predict")?;
        let spec = request.model_spec.take();
        let result = predict(&self.state.service, spec.as_ref(), request, &mut call.trace).await;
        let model = spec.as_ref().map_or("", |s| s.name.as_str());
        let (predicted, request_id) = call.conclude(result, |predicted| predicted.answer().encoded_len(), model);
        let predicted = predicted?;
        let len = predicted.answer().encoded_len();
        if len > limit {
            return Err(Status::out_of_range(format!(
                "Error, encoded message length too large: found {len} bytes, the limit is: {limit} bytes"
            )));
        }
        Ok(PredictAnswer {
            predicted,
            len,
            request_id,
        })
    }
}

/// A Predict's answer within the send limit, for its transport to write
/// where it goes (straight into the connection's buffer when it can).
pub struct PredictAnswer {
    predicted: Predicted,
    len: usize,
    /// The call's id, for the answer's `x-request-id`.
    pub request_id: Arc<str>,
}

impl PredictAnswer {
    /// The encoded `PredictResponse`'s length.
    pub fn message_len(&self) -> usize {
        self.len
    }

    /// Appends the encoded `PredictResponse`.
    pub fn write(&self, buf: &mut Vec<u8>) {
        buf.reserve(self.len);
        self.predicted.answer().encode(buf);
    }
}

/// What a Predict ran, before it is a message.
struct Predicted {
    servable: Arc<Servable>,
    signature: Arc<SignatureSpec>,
    /// The signature's outputs to answer, by index.
    outputs: Vec<usize>,
    /// All the signature's outputs, in its order.
    tensors: Vec<Tensor>,
}

impl Predicted {
    fn into_response(self) -> PredictResponse {
        let outputs = self
            .outputs
            .iter()
            .map(|&index| {
                let key = self.signature.outputs[index].key.clone();
                (key, tensor_proto::to_proto(&self.tensors[index]))
            })
            .collect();
        PredictResponse {
            model_spec: Some(answered_spec(&self.servable, &self.signature.name)),
            outputs,
        }
    }

    /// The answer as the wire encoder takes it.
    fn answer(&self) -> wire::Answer<'_, impl Iterator<Item = (&str, &Tensor)> + Clone> {
        wire::Answer {
            model: &self.servable.model,
            version: self.servable.version,
            signature: &self.signature.name,
            outputs: self
                .outputs
                .iter()
                .map(|&index| (self.signature.outputs[index].key.as_str(), &self.tensors[index])),
        }
    }
}

/// Inputs this large are read on the blocking pool, off the gRPC workers.
const OFFLOAD_BYTES: usize = 256 * 1024;

/// `spec` is the request's, taken out so that the caller keeps its model name.
async fn predict(
    service: &Service,
    spec: Option<&ModelSpec>,
    request: PredictRequest,
    trace: &mut Trace,
) -> Result<Predicted, ApiError> {
    let (servable, signature) = resolve(service, spec, ApiError::SignatureKeyNotFound)?;
    trace.resolved(&servable, &signature);
    let outputs = output_aliases(&signature, &request.output_filter)?;
    let size: usize = request.inputs.values().map(|t| t.tensor_content.len()).sum();
    let inputs = if size >= OFFLOAD_BYTES {
        let signature = signature.clone();
        crate::service::off_worker(move || predict_inputs(&signature, &request.inputs)).await?
    } else {
        predict_inputs(&signature, &request.inputs)?
    };
    let tensors = service.run(&servable, &signature, inputs, trace).await?;
    Ok(Predicted {
        servable,
        signature,
        outputs,
        tensors,
    })
}

/// The request's tensors in the signature's input order, with TF Serving's
/// message when the keys differ.
fn predict_inputs(signature: &SignatureSpec, inputs: &BTreeMap<String, TensorProto>) -> Result<Vec<Tensor>, ApiError> {
    let expected: Vec<&str> = signature.inputs.iter().map(|s| s.key.as_str()).collect();
    let extra: Vec<&str> = inputs
        .keys()
        .map(String::as_str)
        .filter(|k| !expected.contains(k))
        .collect();
    let missing: Vec<&str> = expected.iter().copied().filter(|k| !inputs.contains_key(*k)).collect();
    if !extra.is_empty() || !missing.is_empty() {
        let sent: Vec<&str> = inputs.keys().map(String::as_str).collect();
        return Err(TfsError::InputsMismatch {
            sent: inputs.len(),
            expected: expected.len(),
            sent_names: sent.join(","),
            expected_names: expected.join(","),
            extra: extra.join(","),
            missing: missing.join(","),
        }
        .into());
    }
    signature
        .inputs
        .iter()
        .enumerate()
        .map(|(index, spec)| {
            let proto = &inputs[&spec.key];
            let tensor = tensor_proto::to_tensor(proto, &spec.key)?;
            if tensor.dtype() != spec.dtype {
                return Err(TfsError::ArgDtype {
                    index,
                    want: spec.dtype.to_string(),
                    got: tensor.dtype().to_string(),
                }
                .into());
            }
            Ok(tensor)
        })
        .collect()
}

/// Indices of the outputs to answer: all, or those `output_filter` names.
fn output_aliases(signature: &SignatureSpec, filter: &[String]) -> Result<Vec<usize>, ApiError> {
    if filter.is_empty() {
        return Ok((0..signature.outputs.len()).collect());
    }
    let mut chosen = Vec::with_capacity(filter.len());
    for alias in filter {
        let Some(index) = signature.outputs.iter().position(|s| &s.key == alias) else {
            let known: Vec<&str> = signature.outputs.iter().map(|s| s.key.as_str()).collect();
            return Err(TfsError::UnknownOutputAlias {
                alias: alias.clone(),
                known: known.join(","),
            }
            .into());
        };
        if chosen.contains(&index) {
            return Err(TfsError::DuplicateOutputAlias(alias.clone()).into());
        }
        chosen.push(index);
    }
    chosen.sort_unstable();
    Ok(chosen)
}
