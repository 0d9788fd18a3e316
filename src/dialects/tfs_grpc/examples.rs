//! Classify, Regress and MultiInference over gRPC: `tf.Example` inputs
//! serialized into the signature's string input, answers as TF Serving's
//! result messages.

use std::sync::Arc;

use prost::Message;

use super::{answered_spec, resolve};
use crate::capture::LogKind;
use crate::codec::results::{classification_result, regression_result};
use crate::error::ApiError;
use crate::proto::tensorflow::serving::inference_result::Result as TaskResult;
use crate::proto::tensorflow::serving::input::Kind;
use crate::proto::tensorflow::serving::{
    ClassificationRequest, ClassificationResponse, ClassificationResult, InferenceResult, Input, ModelSpec,
    MultiInferenceLog, MultiInferenceRequest, MultiInferenceResponse, RegressionRequest, RegressionResponse,
    RegressionResult,
};
use crate::service::Servable;
use crate::service::{Service, Trace};
use crate::signature::{SignatureSpec, CLASSIFY_METHOD, DEFAULT_SIGNATURE, REGRESS_METHOD};
use crate::tensor::{Tensor, TensorData};
use crate::tfs::json::check_examples_signature;
use crate::tfs::TfsError;

/// Classify's and Regress's wording for an unknown signature (INVALID_ARGUMENT).
fn no_signature_named(name: String) -> ApiError {
    TfsError::NoSignatureNamed(name).into()
}

pub async fn classify(
    service: &Service,
    request: ClassificationRequest,
    trace: &mut Trace,
) -> Result<ClassificationResponse, ApiError> {
    let spec = request.model_spec.as_ref();
    let (servable, signature) = resolve(service, spec, no_signature_named)?;
    let examples = serialized_examples(request.input.as_ref())?;
    let result = run_classify(service, &servable, &signature, examples, trace).await?;
    Ok(ClassificationResponse {
        model_spec: Some(answered_spec(&servable, signature_name(spec))),
        result: Some(result),
    })
}

pub async fn regress(
    service: &Service,
    request: RegressionRequest,
    trace: &mut Trace,
) -> Result<RegressionResponse, ApiError> {
    let spec = request.model_spec.as_ref();
    let (servable, signature) = resolve(service, spec, no_signature_named)?;
    let examples = serialized_examples(request.input.as_ref())?;
    let result = run_regress(service, &servable, &signature, examples, trace).await?;
    Ok(RegressionResponse {
        model_spec: Some(answered_spec(&servable, signature_name(spec))),
        result: Some(result),
    })
}

/// Several classify/regress signatures of one model on the same examples.
pub async fn multi_inference(
    service: &Service,
    request: MultiInferenceRequest,
    trace: &mut Trace,
) -> Result<MultiInferenceResponse, ApiError> {
    let Some(first) = request.tasks.first() else {
        return Err(TfsError::NoTasks.into());
    };
    let model = first.model_spec.as_ref().map(|s| s.name.clone()).unwrap_or_default();
    let mut signatures: Vec<&str> = Vec::new();
    let mut resolved = Vec::with_capacity(request.tasks.len());
    // Every task is checked before any runs, in TF Serving's order.
    for task in &request.tasks {
        let spec = task.model_spec.as_ref();
        if spec.is_none_or(|s| s.name.is_empty()) {
            return Err(TfsError::TaskWithoutModel.into());
        }
        if spec.map(|s| s.name.as_str()) != Some(model.as_str()) {
            return Err(TfsError::TasksOnManyModels.into());
        }
        let name = signature_name(spec);
        if signatures.contains(&name) {
            return Err(TfsError::DuplicateSignature(name.to_string()).into());
        }
        signatures.push(name);
        resolved.push(resolve(service, spec, |name| {
            TfsError::SignatureNotInGraph(name).into()
        })?);
        if ![CLASSIFY_METHOD, REGRESS_METHOD].contains(&task.method_name.as_str()) {
            return Err(TfsError::UnsupportedMethod(task.method_name.clone()).into());
        }
    }
    let examples = serialized_examples(request.input.as_ref())?;
    let mut results = Vec::with_capacity(request.tasks.len());
    for (task, (servable, signature)) in request.tasks.iter().zip(resolved) {
        let spec = task.model_spec.as_ref();
        let result = match task.method_name.as_str() {
            CLASSIFY_METHOD => TaskResult::ClassificationResult(
                run_classify(service, &servable, &signature, examples.clone(), trace).await?,
            ),
            REGRESS_METHOD => TaskResult::RegressionResult(
                run_regress(service, &servable, &signature, examples.clone(), trace).await?,
            ),
            other => return Err(TfsError::UnsupportedMethod(other.to_string()).into()),
        };
        results.push(InferenceResult {
            model_spec: Some(answered_spec(&servable, signature_name(spec))),
            result: Some(result),
        });
    }
    let response = MultiInferenceResponse { results };
    // TF Serving logs the call as one MultiInferenceLog, not as its tasks' runs.
    if let Some(record) = trace.capture.as_mut().filter(|r| r.draft.writes_tfrecords()) {
        record.draft.multi_inference = Some(Box::new(MultiInferenceLog {
            request: Some(request),
            response: Some(response.clone()),
        }));
    }
    Ok(response)
}

fn signature_name(spec: Option<&ModelSpec>) -> &str {
    spec.map(|s| s.signature_name.as_str())
        .filter(|s| !s.is_empty())
        .unwrap_or(DEFAULT_SIGNATURE)
}

/// One serialized `tf.Example` per example. With a context, each is the
/// context's bytes followed by the example's, which protobuf parses as the
/// two merged (TF Serving builds them the same way).
fn serialized_examples(input: Option<&Input>) -> Result<Tensor, ApiError> {
    let empty = || ApiError::from(TfsError::NoExamples);
    let serialized: Vec<Vec<u8>> = match input.and_then(|i| i.kind.as_ref()) {
        None => return Err(empty()),
        Some(Kind::ExampleList(list)) => list.examples.iter().map(Message::encode_to_vec).collect(),
        Some(Kind::ExampleListWithContext(list)) => {
            let context = list.context.as_ref().map(Message::encode_to_vec).unwrap_or_default();
            list.examples
                .iter()
                .map(|example| {
                    let mut bytes = context.clone();
                    example.encode(&mut bytes).map(|()| bytes)
                })
                .collect::<Result<_, _>>()
                .map_err(|e| ApiError::Internal(format!("encoding an example: {e}")))?
        }
    };
    if serialized.is_empty() {
        return Err(empty());
    }
    Ok(Tensor::new(vec![serialized.len()], TensorData::String(serialized)))
}

async fn run_examples(
    service: &Service,
    servable: &Servable,
    signature: &Arc<SignatureSpec>,
    method: &str,
    examples: Tensor,
    trace: &mut Trace,
) -> Result<Vec<Tensor>, ApiError> {
    trace.resolved(servable, signature);
    check_examples_signature(signature, method, service.checks_method_names())?;
    trace.log_kind = if method == CLASSIFY_METHOD {
        LogKind::Classify
    } else {
        LogKind::Regress
    };
    service.run(servable, signature, vec![examples], trace).await
}

fn output<'t>(signature: &SignatureSpec, outputs: &'t [Tensor], key: &str) -> Option<&'t Tensor> {
    signature.outputs.iter().position(|s| s.key == key).map(|i| &outputs[i])
}

async fn run_classify(
    service: &Service,
    servable: &Servable,
    signature: &Arc<SignatureSpec>,
    examples: Tensor,
    trace: &mut Trace,
) -> Result<ClassificationResult, ApiError> {
    let rows = examples.shape[0];
    let outputs = run_examples(service, servable, signature, CLASSIFY_METHOD, examples, trace).await?;
    let classes = output(signature, &outputs, "classes");
    let scores = output(signature, &outputs, "scores");
    if classes.is_none() && scores.is_none() {
        return Err(TfsError::NoClassifyOutputs {
            signature: signature.name.clone(),
            outputs: signature.output_names(),
        }
        .into());
    }
    let labels = match classes.map(|t| &t.data) {
        None => None,
        Some(TensorData::String(labels)) => Some(labels),
        Some(other) => return Err(TfsError::ClassesDtype(other.dtype().proto_name()).into()),
    };
    let values = match scores.map(|t| &t.data) {
        None => None,
        Some(TensorData::Float(values)) => Some(values),
        Some(other) => return Err(TfsError::ScoresDtype(other.dtype().proto_name()).into()),
    };
    let per_row = scores.or(classes).map(|t| t.row_len()).unwrap_or(0);
    Ok(classification_result(
        rows,
        per_row,
        labels.map(Vec::as_slice),
        values.map(Vec::as_slice),
    ))
}

async fn run_regress(
    service: &Service,
    servable: &Servable,
    signature: &Arc<SignatureSpec>,
    examples: Tensor,
    trace: &mut Trace,
) -> Result<RegressionResult, ApiError> {
    let outputs = run_examples(service, servable, signature, REGRESS_METHOD, examples, trace).await?;
    let values = output(signature, &outputs, "outputs").or(match outputs.as_slice() {
        [single] => Some(single),
        _ => None,
    });
    let Some(values) = values else {
        return Err(TfsError::NoRegressOutputs {
            signature: signature.name.clone(),
            outputs: signature.output_names(),
        }
        .into());
    };
    let TensorData::Float(numbers) = &values.data else {
        return Err(TfsError::RegressDtype(values.dtype().proto_name()).into());
    };
    if !matches!(values.shape.as_slice(), [_] | [_, 1]) {
        return Err(TfsError::RegressShape(values.shape.clone()).into());
    }
    Ok(regression_result(numbers))
}
