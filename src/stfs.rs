//! Simple TensorFlow Serving's inference contract: `POST /` with
//! `model_name`, `model_version`, `signature_name` and `data`, answered with an
//! object of outputs; and `gen_json`, an example request built from a signature.

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{json, Map, Value};

use crate::codec::decode::decode_named_inputs;
use crate::codec::RequestFormat;
use crate::error::ApiError;
use crate::registry::VersionSelector;
use crate::service::{Service, Trace};
use crate::signature::SignatureSpec;
use crate::tensor::DType;

/// The model a request without `model_name` addresses, as in STFS.
pub const DEFAULT_MODEL: &str = "default";

#[derive(Deserialize)]
struct Request<'a> {
    #[serde(default)]
    model_name: Option<String>,
    #[serde(default)]
    model_version: Option<Value>,
    #[serde(default)]
    signature_name: Option<String>,
    #[serde(borrow, default)]
    data: Option<&'a RawValue>,
}

/// `model_version` as a number or a numeric string; absent or null: the latest
/// (the highest number, not directory order as STFS had it).
pub fn version_selector(version: Option<&Value>) -> Result<VersionSelector, ApiError> {
    let invalid = |v: &Value| ApiError::BadRequest(format!("model_version must be a version number, got {v}"));
    match version {
        None | Some(Value::Null) => Ok(VersionSelector::Latest),
        Some(v @ Value::Number(n)) => n.as_i64().map(VersionSelector::Specific).ok_or_else(|| invalid(v)),
        Some(v @ Value::String(s)) => s.trim().parse().map(VersionSelector::Specific).map_err(|_| invalid(v)),
        Some(v) => Err(invalid(v)),
    }
}

/// Checks the model exists, naming the available ones otherwise.
pub fn known_model(service: &Service, model: &str) -> Result<(), ApiError> {
    let models = service.registry.model_names();
    if models.iter().any(|m| m == model) {
        return Ok(());
    }
    Err(ApiError::NotFound(format!(
        "Invalid model name: {model}, available models: [{}]",
        models.join(", ")
    )))
}

/// `POST /` with a JSON body.
pub async fn infer(service: &Service, body: &[u8], trace: &mut Trace) -> Result<Vec<u8>, ApiError> {
    let request: Request<'_> =
        serde_json::from_slice(body).map_err(|e| ApiError::BadRequest(format!("Invalid json data: {e}")))?;
    let model = request.model_name.as_deref().unwrap_or(DEFAULT_MODEL);
    let selector = version_selector(request.model_version.as_ref())?;
    let data = request
        .data
        .ok_or_else(|| ApiError::BadRequest("Inference with empty data: the body has no 'data' object".into()))?;
    known_model(service, model)?;
    let (servable, signature) = service.resolve(model, &selector, request.signature_name.as_deref())?;
    let inputs = decode_named_inputs(data.get(), &signature)?;
    service
        .predict_inputs(&servable, &signature, inputs, RequestFormat::Named, trace)
        .await
}

/// `{"data": {input: example}}` for a signature: every unknown dimension 1,
/// numbers 1, booleans true, strings empty.
pub fn gen_json(signature: &SignatureSpec) -> Value {
    let mut data = Map::new();
    for input in &signature.inputs {
        let leaf = match input.dtype {
            DType::Float | DType::Double | DType::Half | DType::BFloat16 => json!(1.0),
            DType::Bool => json!(true),
            DType::String => json!(""),
            _ => json!(1),
        };
        let dims = input.shape.clone().unwrap_or_else(|| vec![-1]);
        let value = dims
            .iter()
            .rev()
            .fold(leaf, |inner, &d| Value::Array(vec![inner; d.max(1) as usize]));
        data.insert(input.key.clone(), value);
    }
    json!({ "data": data })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::signature::TensorSpec;

    #[test]
    fn versions_and_examples() {
        assert_eq!(version_selector(None).unwrap(), VersionSelector::Latest);
        assert_eq!(version_selector(Some(&json!(2))).unwrap(), VersionSelector::Specific(2));
        assert_eq!(
            version_selector(Some(&json!("3"))).unwrap(),
            VersionSelector::Specific(3)
        );
        assert!(version_selector(Some(&json!("latest"))).is_err());
        let spec = |key: &str, dtype, shape: Vec<i64>| TensorSpec {
            key: key.into(),
            tensor_name: format!("{key}:0"),
            dtype,
            shape: Some(shape),
        };
        let signature = SignatureSpec {
            name: "serving_default".into(),
            method_name: String::new(),
            inputs: vec![
                spec("features", DType::Float, vec![-1, 3]),
                spec("flag", DType::Bool, vec![-1]),
            ],
            outputs: vec![],
        };
        assert_eq!(
            gen_json(&signature),
            json!({"data": {"features": [[1.0, 1.0, 1.0]], "flag": [true]}})
        );
    }
}
