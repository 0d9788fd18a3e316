//! The Open Inference Protocol's REST infer body: the JSON header (inputs
//! with `data`, or with `binary_data_size` into the bytes after it, the
//! binary tensor extension) decoded into tensors.

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::rest::HEADER_LENGTH;
use super::{values, Input, OipError};
use crate::error::ApiError;
use crate::tensor::Tensor;

#[derive(Deserialize)]
struct InferRequest<'a> {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    parameters: Map<String, Value>,
    #[serde(borrow)]
    inputs: Vec<InputJson<'a>>,
    #[serde(default)]
    outputs: Vec<OutputJson>,
}

#[derive(Deserialize)]
struct InputJson<'a> {
    name: String,
    shape: Vec<i64>,
    datatype: String,
    #[serde(default)]
    parameters: Map<String, Value>,
    #[serde(borrow, default)]
    data: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct OutputJson {
    name: String,
    #[serde(default)]
    parameters: Map<String, Value>,
}

/// A decoded request: its inputs, and how the answer is wanted.
pub(super) struct Decoded {
    pub(super) id: Option<String>,
    pub(super) signature: Option<String>,
    pub(super) inputs: Vec<Input>,
    pub(super) requested: Vec<String>,
    /// Outputs to send as binary (by name), or all when `all_binary`.
    pub(super) binary: Vec<String>,
    pub(super) all_binary: bool,
}

/// Decodes an infer body into its inputs (the fuzz targets' entry point);
/// returns how many inputs it held.
pub fn decode_infer_body(body: &[u8], header_length: Option<usize>) -> Result<usize, ApiError> {
    decode(body, header_length).map(|decoded| decoded.inputs.len())
}

// Kept whole: the body's JSON header and its binary tail are read in one pass, each input taking
// its bytes in order.
pub(super) fn decode(body: &[u8], header_length: Option<usize>) -> Result<Decoded, ApiError> {
    let (json, mut binary) = match header_length {
        Some(length) if length > body.len() => {
            return Err(OipError::HeaderPastBody {
                header: HEADER_LENGTH,
                length,
                body: body.len(),
            }
            .into())
        }
        Some(length) => body.split_at(length),
        None => (body, &[][..]),
    };
    let request: InferRequest<'_> = serde_json::from_slice(json).map_err(ApiError::JsonParse)?;
    let mut inputs = Vec::with_capacity(request.inputs.len());
    for input in &request.inputs {
        let dtype = super::known_dtype(&input.name, &input.datatype)?;
        let tensor = match (input.parameters.get("binary_data_size"), input.data) {
            (Some(size), _) => {
                let size = size.as_u64().and_then(|s| usize::try_from(s).ok()).ok_or_else(|| {
                    OipError::BinarySizeNotByteCount {
                        input: input.name.clone(),
                    }
                })?;
                if size > binary.len() {
                    return Err(OipError::BinarySizePastBody {
                        input: input.name.clone(),
                        size,
                        left: binary.len(),
                    }
                    .into());
                }
                let (raw, rest) = binary.split_at(size);
                binary = rest;
                super::from_raw(&input.name, &input.datatype, &input.shape, raw)?
            }
            (None, Some(data)) => {
                let data = values::from_json(&input.name, dtype, data.get())?;
                let shape = super::shape_of(&input.name, &input.shape, Some(data.len()))?;
                Tensor::new(shape, data)
            }
            (None, None) => {
                return Err(OipError::NoData {
                    input: input.name.clone(),
                }
                .into())
            }
        };
        inputs.push(Input {
            name: input.name.clone(),
            tensor,
        });
    }
    let wants_binary =
        |parameters: &Map<String, Value>, key: &str| parameters.get(key).and_then(Value::as_bool) == Some(true);
    let binary_outputs = request
        .outputs
        .iter()
        .filter(|o| wants_binary(&o.parameters, "binary_data"))
        .map(|o| o.name.clone())
        .collect();
    Ok(Decoded {
        id: request.id,
        signature: request
            .parameters
            .get("signature_name")
            .and_then(Value::as_str)
            .map(str::to_string),
        inputs,
        requested: request.outputs.iter().map(|o| o.name.clone()).collect(),
        binary: binary_outputs,
        all_binary: wants_binary(&request.parameters, "binary_data_output"),
    })
}
