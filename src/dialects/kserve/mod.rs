//! The Open Inference Protocol (KServe v2), over REST (`rest`) and gRPC
//! (`grpc`): datatypes, raw tensor bytes, model metadata and inference on the
//! service core, shared by both.

mod error;
pub mod grpc;
pub mod repository;
pub mod rest;
mod rest_body;
mod values;

use std::sync::Arc;

pub use error::OipError;

use crate::error::ApiError;
use crate::service::{Servable, VersionSelector, VersionState};
use crate::service::{Service, Trace};
use crate::signature::{SignatureSpec, TensorSpec, DEFAULT_SIGNATURE};
use crate::tensor::{DType, Tensor};

/// What `GET /v2` and ServerMetadata report.
pub const SERVER_NAME: &str = "tfserve";
pub const EXTENSIONS: [&str; 3] = ["binary_tensor_data", "model_repository", "parameters"];

/// A v2 datatype name for a dtype.
pub fn datatype(dtype: DType) -> &'static str {
    match dtype {
        DType::Bool => "BOOL",
        DType::UInt8 => "UINT8",
        DType::UInt16 => "UINT16",
        DType::UInt32 => "UINT32",
        DType::UInt64 => "UINT64",
        DType::Int8 => "INT8",
        DType::Int16 => "INT16",
        DType::Int32 => "INT32",
        DType::Int64 => "INT64",
        DType::Half => "FP16",
        DType::BFloat16 => "BF16",
        DType::Float => "FP32",
        DType::Double => "FP64",
        DType::String => "BYTES",
        DType::Other(_) => "INVALID",
    }
}

/// The dtype a v2 datatype name stands for.
pub fn dtype_of(datatype: &str) -> Option<DType> {
    Some(match datatype {
        "BOOL" => DType::Bool,
        "UINT8" => DType::UInt8,
        "UINT16" => DType::UInt16,
        "UINT32" => DType::UInt32,
        "UINT64" => DType::UInt64,
        "INT8" => DType::Int8,
        "INT16" => DType::Int16,
        "INT32" => DType::Int32,
        "INT64" => DType::Int64,
        "FP16" => DType::Half,
        "BF16" => DType::BFloat16,
        "FP32" => DType::Float,
        "FP64" => DType::Double,
        "BYTES" => DType::String,
        _ => return None,
    })
}

/// One request input, decoded.
pub struct Input {
    pub name: String,
    pub tensor: Tensor,
}

/// A model version in a v2 path or message (`""`: the latest).
pub fn selector(version: &str) -> Result<VersionSelector, ApiError> {
    if version.is_empty() {
        return Ok(VersionSelector::Latest);
    }
    version
        .parse()
        .map(VersionSelector::Specific)
        .map_err(|_| OipError::NotAVersion(version.to_string()).into())
}

/// The shape a request declares, checked against the element count.
pub fn shape_of(name: &str, shape: &[i64], elements: Option<usize>) -> Result<Vec<usize>, ApiError> {
    let dims = shape
        .iter()
        .map(|&d| usize::try_from(d))
        .collect::<Result<Vec<usize>, _>>()
        .map_err(|_| OipError::NegativeDimension {
            input: name.to_string(),
            shape: shape.to_vec(),
        })?;
    let product = dims.iter().try_fold(1usize, |n, &d| n.checked_mul(d));
    match (product, elements) {
        (None, _) => Err(OipError::TooManyElements {
            input: name.to_string(),
            shape: shape.to_vec(),
        }
        .into()),
        (Some(want), Some(got)) if want != got => Err(OipError::ElementCount {
            input: name.to_string(),
            shape: shape.to_vec(),
            want,
            got,
        }
        .into()),
        _ => Ok(dims),
    }
}

/// Reads one input's raw bytes: little-endian values, or for BYTES each
/// element as a 4-byte little-endian length and its bytes.
pub fn from_raw(name: &str, datatype_name: &str, shape: &[i64], raw: &[u8]) -> Result<Tensor, ApiError> {
    let dtype = known_dtype(name, datatype_name)?;
    let dims = shape_of(name, shape, None)?;
    let elements: usize = dims.iter().product();
    let data = values::from_le_bytes(name, dtype, raw, elements)?;
    Ok(Tensor::new(dims, data))
}

pub fn known_dtype(name: &str, datatype_name: &str) -> Result<DType, ApiError> {
    match dtype_of(datatype_name) {
        // A request the server cannot take is the client's to change: 400, as
        // for any other datatype the model cannot be fed.
        Some(DType::BFloat16) => Err(OipError::UnsupportedDatatype {
            input: name.to_string(),
            datatype: "BF16",
        }
        .into()),
        Some(dtype) => Ok(dtype),
        None => Err(OipError::InvalidDatatype {
            input: name.to_string(),
            datatype: datatype_name.to_string(),
        }
        .into()),
    }
}

/// An output's raw bytes, in the layout `from_raw` reads.
pub fn to_raw(tensor: &Tensor) -> Vec<u8> {
    values::to_le_bytes(&tensor.data)
}

/// Runs a v2 inference: inputs by name into the default signature (or the
/// one the `signature_name` parameter names), outputs by name, all or those asked for.
pub async fn infer(
    service: &Service,
    model: &str,
    version: &str,
    signature: Option<&str>,
    inputs: Vec<Input>,
    requested: &[String],
    trace: &mut Trace,
) -> Result<(Arc<Servable>, Arc<SignatureSpec>, Vec<(String, Tensor)>), ApiError> {
    let (servable, signature) = service.resolve(model, &selector(version)?, signature)?;
    trace.resolved(&servable, &signature);
    let chosen = requested_outputs(&signature, requested, model)?;
    let ordered = ordered_inputs(&signature, inputs, model)?;
    let tensors = service.run(&servable, &signature, ordered, trace).await?;
    let outputs = tensors
        .into_iter()
        .enumerate()
        .filter(|(i, _)| chosen.contains(i))
        .map(|(i, tensor)| (signature.outputs[i].key.clone(), tensor))
        .collect();
    Ok((servable, signature, outputs))
}

fn ordered_inputs(signature: &SignatureSpec, inputs: Vec<Input>, model: &str) -> Result<Vec<Tensor>, ApiError> {
    let mut slots: Vec<Option<Tensor>> = vec![None; signature.inputs.len()];
    for input in inputs {
        let Some(index) = signature.input_index(&input.name) else {
            return Err(OipError::UnknownInput {
                input: input.name,
                model: model.to_string(),
                known: signature.input_names(),
            }
            .into());
        };
        let spec = &signature.inputs[index];
        if input.tensor.dtype() != spec.dtype {
            return Err(OipError::DatatypeMismatch {
                input: input.name,
                got: datatype(input.tensor.dtype()),
                want: datatype(spec.dtype),
            }
            .into());
        }
        if slots[index].replace(input.tensor).is_some() {
            return Err(OipError::DuplicateInput(spec.key.clone()).into());
        }
    }
    slots
        .into_iter()
        .zip(&signature.inputs)
        .map(|(slot, spec)| {
            slot.ok_or_else(|| {
                OipError::MissingInput {
                    expected: signature.inputs.len(),
                    model: model.to_string(),
                    missing: spec.key.clone(),
                }
                .into()
            })
        })
        .collect()
}

fn requested_outputs(signature: &SignatureSpec, requested: &[String], model: &str) -> Result<Vec<usize>, ApiError> {
    if requested.is_empty() {
        return Ok((0..signature.outputs.len()).collect());
    }
    for (i, name) in requested.iter().enumerate() {
        if requested[..i].contains(name) {
            return Err(OipError::DuplicateOutput(name.clone()).into());
        }
    }
    requested
        .iter()
        .map(|name| {
            signature.outputs.iter().position(|s| &s.key == name).ok_or_else(|| {
                OipError::UnknownOutput {
                    output: name.clone(),
                    model: model.to_string(),
                }
                .into()
            })
        })
        .collect()
}

/// A model's metadata: its versions and the default signature's tensors.
pub struct ModelMetadata {
    pub name: String,
    pub versions: Vec<String>,
    pub inputs: Vec<TensorMetadata>,
    pub outputs: Vec<TensorMetadata>,
}

pub struct TensorMetadata {
    pub name: String,
    pub datatype: &'static str,
    pub shape: Vec<i64>,
}

pub const PLATFORM: &str = "tensorflow_savedmodel";

pub fn model_metadata(service: &Service, model: &str, version: &str) -> Result<ModelMetadata, ApiError> {
    let servable = service.servable(model, &selector(version)?)?;
    let signature = Service::signature(&servable, Some(DEFAULT_SIGNATURE)).or_else(|_| {
        servable
            .runtime
            .signatures()
            .first()
            .cloned()
            .ok_or_else(|| ApiError::SignatureNotFound(DEFAULT_SIGNATURE.into()))
    })?;
    let versions = service
        .versions(model, &VersionSelector::Latest)
        .map(|all| {
            all.iter()
                .filter(|s| s.state == VersionState::Available)
                .map(|s| s.version.to_string())
                .collect()
        })
        .unwrap_or_default();
    let describe = |specs: &[TensorSpec]| -> Vec<TensorMetadata> {
        specs
            .iter()
            .map(|spec| TensorMetadata {
                name: spec.key.clone(),
                datatype: datatype(spec.dtype),
                shape: spec.shape.clone().unwrap_or_else(|| vec![-1]),
            })
            .collect()
    };
    Ok(ModelMetadata {
        name: model.to_string(),
        versions,
        inputs: describe(&signature.inputs),
        outputs: describe(&signature.outputs),
    })
}

/// Whether a model (version) is ready to infer.
pub fn model_ready(service: &Service, model: &str, version: &str) -> Result<bool, ApiError> {
    Ok(service.servable(model, &selector(version)?).is_ok())
}

/// REST model readiness as KServe answers it: a model (or version) nobody
/// serves is 404, one that is there but not ready 503 (the caller's), ready `true`.
pub fn model_ready_or_unknown(service: &Service, model: &str, version: &str) -> Result<bool, ApiError> {
    let selector = selector(version)?;
    let served = service.is_served(model);
    let known_version = match &selector {
        VersionSelector::Specific(v) => service
            .versions(model, &selector)
            .is_ok_and(|statuses| statuses.iter().any(|s| s.version == *v)),
        _ => true,
    };
    if !served || !known_version {
        let which = match &selector {
            VersionSelector::Specific(v) => format!("{model} version {v}"),
            _ => model.to_string(),
        };
        return Err(OipError::UnknownModel(which).into());
    }
    Ok(service.servable(model, &selector).is_ok())
}

/// A raw-binary request (`Inference-Header-Content-Length: 0`, Triton's
/// extension): the whole body is the one input of the signature, typed and
/// shaped by it, with its one variable dimension deduced from the byte count.
pub fn raw_body_input(signature: &SignatureSpec, model: &str, body: &[u8]) -> Result<Input, ApiError> {
    let [spec] = signature.inputs.as_slice() else {
        return Err(OipError::RawInputCount {
            inputs: signature.inputs.len(),
            model: model.to_string(),
        }
        .into());
    };
    let name = spec.key.clone();
    if spec.dtype == DType::String {
        let tensor = Tensor::new(vec![1], crate::tensor::TensorData::String(vec![body.to_vec()]));
        return Ok(Input { name, tensor });
    }
    let width = match spec.dtype {
        DType::Bool | DType::Int8 | DType::UInt8 => 1,
        DType::Int16 | DType::UInt16 | DType::Half | DType::BFloat16 => 2,
        DType::Int32 | DType::UInt32 | DType::Float => 4,
        _ => 8,
    };
    if body.len() % width != 0 {
        return Err(OipError::RawByteCount {
            input: name,
            bytes: body.len(),
            datatype: datatype(spec.dtype),
        }
        .into());
    }
    let elements = body.len() / width;
    let declared: Vec<i64> = spec.shape.clone().unwrap_or_else(|| vec![-1]);
    let variable = declared.iter().filter(|d| **d < 0).count();
    if variable > 1 {
        return Err(OipError::RawShapeAmbiguous { input: name }.into());
    }
    let fixed: i64 = declared.iter().filter(|d| **d >= 0).product();
    let deduced = if fixed == 0 { 0 } else { elements as i64 / fixed };
    let dims: Vec<i64> = declared.iter().map(|&d| if d < 0 { deduced } else { d }).collect();
    let tensor = from_raw(&name, datatype(spec.dtype), &dims, body)?;
    Ok(Input { name, tensor })
}
