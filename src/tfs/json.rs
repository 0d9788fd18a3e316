//! TF Serving's REST API on the service: `:predict` bodies decoded into
//! tensors, `:classify`/`:regress` examples, and the status and metadata
//! answers. SageMaker's invocations and `tfserve inspect` come through here
//! too, as the container forwards to TF Serving's REST API.

use std::convert::Infallible;

use serde_json::{json, Map, Value};

use crate::capture::LogKind;
use crate::codec::example::{classify_response, regress_response, ExamplesRequest};
use crate::codec::PredictEnvelope;
use crate::error::ApiError;
use crate::service::VersionSelector;
use crate::service::{DecodedPredict, RequestBody, Servable, Service, Trace};
use crate::signature::{SignatureSpec, TensorSpec, CLASSIFY_METHOD, REGRESS_METHOD};
use crate::tensor::DType;
use crate::tfs::TfsError;

/// TF Serving's `:predict`, with the response in the request's layout.
pub async fn predict(
    service: &Service,
    model: &str,
    selector: &VersionSelector,
    body: &(impl RequestBody + ?Sized),
    trace: &mut Trace,
) -> Result<Vec<u8>, ApiError> {
    let servable = service.servable(model, selector)?;
    let decode = |servable: &Servable, body: &[u8]| -> Result<Result<DecodedPredict, Infallible>, ApiError> {
        let body = crate::codec::nonfinite::quote_bare_tokens(body);
        let envelope = PredictEnvelope::parse(&body)?;
        let signature = Service::signature(servable, envelope.signature_name.as_deref())?;
        let format = envelope.format()?;
        let inputs = envelope.decode(&signature)?;
        Ok(Ok((signature, format, inputs)))
    };
    let Ok(answer) = service.decode_and_predict(&servable, body, decode, trace).await?;
    Ok(answer)
}

/// TF Serving's `:classify` and `:regress`: examples in, `results` out.
pub async fn classify_or_regress(
    service: &Service,
    model: &str,
    selector: &VersionSelector,
    body: &[u8],
    method: &str,
    trace: &mut Trace,
) -> Result<Vec<u8>, ApiError> {
    let servable = service.servable(model, selector)?;
    let body = crate::codec::nonfinite::quote_bare_tokens(body);
    let request = ExamplesRequest::parse(&body)?;
    let signature = Service::signature(&servable, request.signature_name.as_deref()).map_err(|error| match error {
        // The classifier's and regressor's wording (GetClassificationSignatureDef).
        ApiError::SignatureNotFound(name) => TfsError::NoSignatureNamed(name).into(),
        other => other,
    })?;
    trace.resolved(&servable, &signature);
    check_examples_signature(&signature, method, service.checks_method_names())?;
    trace.log_kind = if method == CLASSIFY_METHOD {
        LogKind::Classify
    } else {
        LogKind::Regress
    };
    let examples = request.serialized_examples()?;
    let outputs = service.run(&servable, &signature, vec![examples], trace).await?;
    let find = |key: &str| signature.outputs.iter().position(|s| s.key == key).map(|i| &outputs[i]);
    if method == CLASSIFY_METHOD {
        let (classes, scores) = (find("classes"), find("scores"));
        if classes.is_none() && scores.is_none() {
            return Err(TfsError::NoClassifyOutputs {
                signature: signature.name.clone(),
                outputs: signature.output_names(),
            }
            .into());
        }
        return Ok(classify_response(classes, scores)?);
    }
    debug_assert_eq!(method, REGRESS_METHOD);
    let values = find("outputs").or(match outputs.as_slice() {
        [single] => Some(single),
        _ => None,
    });
    let values = values.ok_or_else(|| {
        ApiError::from(TfsError::NoRegressOutputs {
            signature: signature.name.clone(),
            outputs: signature.output_names(),
        })
    })?;
    Ok(regress_response(values)?)
}

/// Whether a signature can take classify/regress examples, as TF Serving
/// checks it: one input, keyed `inputs` (or a lone string input), and the
/// method name only when `check_method` (TF2 exports write the predict
/// method on every signature, so TF Serving checks the structure by default).
pub(crate) fn check_examples_signature(
    signature: &SignatureSpec,
    method: &str,
    check_method: bool,
) -> Result<(), ApiError> {
    let kind = if method == CLASSIFY_METHOD {
        "classification"
    } else {
        "regression"
    };
    if check_method && signature.method_name != method {
        return Err(TfsError::MethodName {
            kind,
            method: method.to_string(),
            was: signature.method_name.clone(),
        }
        .into());
    }
    let [examples_input] = signature.inputs.as_slice() else {
        return Err(TfsError::NotOneInput {
            signature: signature.name.clone(),
            kind,
            inputs: signature.input_names(),
        }
        .into());
    };
    // A lone string input under another key can only mean serialized examples.
    if examples_input.key != "inputs" && examples_input.dtype != DType::String {
        return Err(TfsError::NoExamplesInput {
            kind,
            signature: signature.name.clone(),
            input: examples_input.key.clone(),
            dtype: examples_input.dtype.to_string(),
        }
        .into());
    }
    Ok(())
}

/// `GET /v1/models/{m}[/versions/{v}]`: TF Serving's GetModelStatusResponse.
pub fn model_status(service: &Service, model: &str, selector: &VersionSelector) -> Result<Value, ApiError> {
    let statuses = service.versions(model, selector)?;
    let entries: Vec<Value> = statuses
        .iter()
        .map(|s| {
            json!({
                "version": s.version.to_string(),
                "state": s.state.as_str(),
                "status": {
                    "error_code": if s.error.is_some() { "UNKNOWN" } else { "OK" },
                    "error_message": s.error.clone().unwrap_or_default(),
                }
            })
        })
        .collect();
    Ok(json!({ "model_version_status": entries }))
}

/// `GET /v1/models/{m}[/versions/{v}]/metadata`: the signature defs.
pub fn model_metadata(service: &Service, model: &str, selector: &VersionSelector) -> Result<Value, ApiError> {
    let servable = service.servable(model, selector)?;
    let mut defs = Map::new();
    for signature in servable.runtime.signatures().iter() {
        defs.insert(
            signature.name.clone(),
            json!({
                "inputs": tensor_map(&signature.inputs),
                "outputs": tensor_map(&signature.outputs),
                "method_name": signature.method_name,
                "defaults": {},
            }),
        );
    }
    Ok(json!({
        "model_spec": { "name": model, "signature_name": "", "version": servable.version.to_string() },
        "metadata": { "signature_def": { "signature_def": defs } }
    }))
}

fn tensor_map(specs: &[TensorSpec]) -> Value {
    let mut map = Map::new();
    for spec in specs {
        let shape = match &spec.shape {
            None => json!({ "dim": [], "unknown_rank": true }),
            Some(dims) => json!({
                "dim": dims.iter().map(|d| json!({ "size": d.to_string(), "name": "" })).collect::<Vec<_>>(),
                "unknown_rank": false,
            }),
        };
        map.insert(
            spec.key.clone(),
            json!({ "dtype": spec.dtype.proto_name(), "tensor_shape": shape, "name": spec.tensor_name }),
        );
    }
    Value::Object(map)
}
