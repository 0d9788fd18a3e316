//! SavedModel loading and signature runs over the `tensorflow` crate.

mod kernels;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use tensorflow as tfr;
use tensorflow::{
    Code as TfCode, DataType, Graph, Operation, SavedModelBundle, Session, SessionOptions, SessionRunArgs,
};

use super::bytes::ByteString;
use super::{Loader, Model, RuntimeError, SessionConfig};
use crate::signature::{split_tensor_name, SignatureSpec, TensorSpec, INIT_OP_SIGNATURE};
use crate::status::Code;
use crate::tensor::{DType, Tensor, TensorData};

/// A signature with its graph endpoints resolved once at load time.
struct BoundSignature {
    spec: Arc<SignatureSpec>,
    inputs: Vec<(Operation, i32)>,
    outputs: Vec<(Operation, i32)>,
}

/// A loaded SavedModel: one session, shareable across threads (TensorFlow
/// sessions are thread-safe for concurrent runs).
pub struct LoadedModel {
    session: Session,
    signatures: BTreeMap<String, BoundSignature>,
    /// The same specs, in name order, for `Model::signatures`.
    specs: Vec<Arc<SignatureSpec>>,
    on_gpu: bool,
    _graph: Graph,
}

/// Loads SavedModels with libtensorflow.
pub struct TensorFlowLoader {
    /// TensorFlow listed a GPU when the server started.
    pub sees_gpu: bool,
    /// The ops `--custom_op_paths` libraries registered.
    pub custom_ops: Vec<String>,
}

impl Loader for TensorFlowLoader {
    fn load(&self, dir: &Path, tags: &[String], session: &SessionConfig) -> Result<Arc<dyn Model>, RuntimeError> {
        Ok(Arc::new(LoadedModel::load(dir, tags, session)?))
    }

    fn sees_gpu(&self) -> bool {
        self.sees_gpu
    }

    fn custom_ops(&self) -> Vec<String> {
        self.custom_ops.clone()
    }

    fn kernel_devices(&self, op: &str) -> Option<Vec<String>> {
        kernels::devices_for(op)
    }

    fn build(&self) -> String {
        format!(
            "TensorFlow {}",
            tensorflow::version().unwrap_or_else(|_| env!("TFSERVE_BUILT_WITH_TENSORFLOW").into())
        )
    }
}

impl std::fmt::Debug for LoadedModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadedModel")
            .field("signatures", &self.signatures.keys())
            .finish()
    }
}

/// Whether a session runs on a GPU; logs the devices it runs on, once per load.
fn runs_on_gpu(session: &Session, dir: &Path) -> bool {
    match session.device_list() {
        Ok(devices) => {
            let names: Vec<String> = devices
                .iter()
                .map(|d| d.name.rsplit('/').next().unwrap_or(&d.name).to_string())
                .collect();
            log::info!("{}: its session runs on {}", dir.display(), names.join(", "));
            devices.iter().any(|d| d.device_type == "GPU")
        }
        Err(e) => {
            log::warn!("{}: cannot list its session's devices: {e}", dir.display());
            false
        }
    }
}

impl LoadedModel {
    // Kept whole: the C API's load steps in the order TensorFlow requires them, each with its own
    // error.
    pub fn load(dir: &Path, tags: &[String], config: &SessionConfig) -> Result<Self, RuntimeError> {
        let load_error = |message: String| RuntimeError::Load {
            path: dir.display().to_string(),
            message,
        };
        let mut options = SessionOptions::new();
        options
            .set_config(&config.to_config_proto())
            .map_err(|s| load_error(format!("invalid session config: {s}")))?;
        let pinned = match &config.device {
            Some(device) => Some(
                super::PinnedCopy::new(dir, device)
                    .map_err(|e| load_error(format!("cannot place it on {device}: {e}")))?,
            ),
            None => None,
        };
        let load_dir = pinned.as_ref().map_or(dir, |p| p.path());
        let mut graph = Graph::new();
        let bundle = SavedModelBundle::load(&options, tags, &mut graph, load_dir).map_err(|s| {
            // TensorFlow names the pinned copy; the user knows the export.
            let message = status_message(&s);
            load_error(match &pinned {
                Some(p) => message.replace(&p.path().display().to_string(), &dir.display().to_string()),
                None => message,
            })
        })?;
        let mut signatures = BTreeMap::new();
        // Serialized only when a signature has a string input to trace.
        let mut graph_def = None;
        for (name, def) in bundle.meta_graph_def().signatures() {
            if name == INIT_OP_SIGNATURE {
                continue;
            }
            let convert = |map: &std::collections::HashMap<String, tfr::TensorInfo>| -> Vec<TensorSpec> {
                map.iter().map(|(key, info)| tensor_spec(key, info)).collect()
            };
            let mut spec = SignatureSpec {
                name: name.clone(),
                method_name: def.method_name().to_string(),
                inputs: convert(def.inputs()),
                outputs: convert(def.outputs()),
                base64_inputs: Vec::new(),
            };
            spec.sort();
            spec.base64_inputs = base64_inputs(&graph, &mut graph_def, &spec.inputs);
            let resolve = |specs: &[TensorSpec]| -> Result<Vec<(Operation, i32)>, RuntimeError> {
                specs
                    .iter()
                    .map(|s| {
                        let (op, index) = split_tensor_name(&s.tensor_name);
                        graph
                            .operation_by_name_required(op)
                            .map(|operation| (operation, index))
                            .map_err(|e| load_error(format!("signature '{name}': tensor {}: {e}", s.tensor_name)))
                    })
                    .collect()
            };
            let inputs = resolve(&spec.inputs)?;
            let outputs = resolve(&spec.outputs)?;
            signatures.insert(
                name.clone(),
                BoundSignature {
                    spec: Arc::new(spec),
                    inputs,
                    outputs,
                },
            );
        }
        let on_gpu = runs_on_gpu(&bundle.session, dir);
        if let Some(device) = &config.device {
            log::info!("{}: a replica pinned to {device}", dir.display());
        }
        // The copy goes now: its init op has read the assets, and the process
        // may end without dropping models.
        drop(pinned);
        let specs = signatures.values().map(|s| s.spec.clone()).collect();
        Ok(LoadedModel {
            session: bundle.session,
            signatures,
            specs,
            on_gpu,
            _graph: graph,
        })
    }
}

impl Model for LoadedModel {
    fn signatures(&self) -> &[Arc<SignatureSpec>] {
        &self.specs
    }

    fn on_gpu(&self) -> bool {
        self.on_gpu
    }

    fn run(&self, signature: &str, inputs: Vec<Tensor>) -> Result<Vec<Tensor>, RuntimeError> {
        let bound = self
            .signatures
            .get(signature)
            .ok_or_else(|| RuntimeError::UnknownSignature(signature.to_string()))?;
        let feeds: Vec<Feed> = inputs.into_iter().map(Feed::from_tensor).collect::<Result<_, _>>()?;
        let mut args = SessionRunArgs::new();
        for ((operation, index), feed) in bound.inputs.iter().zip(&feeds) {
            feed.add_to(&mut args, operation, *index);
        }
        let tokens: Vec<_> = bound
            .outputs
            .iter()
            .map(|(operation, index)| args.request_fetch(operation, *index))
            .collect();
        self.session.run(&mut args).map_err(run_error)?;
        tokens
            .into_iter()
            .enumerate()
            .map(|(i, token)| {
                let dtype = args.output_data_type(i).unwrap_or(DataType::Float);
                fetch(&mut args, token, dtype, &bound.spec.outputs[i].key)
            })
            .collect()
    }
}

/// Registers the ops and kernels of a custom op library with TensorFlow
/// (`TF_LoadLibrary`) and returns the names of the ops it registered. The
/// library stays loaded for the life of the process, as TensorFlow cannot
/// unregister ops.
pub fn load_op_library(path: &Path) -> Result<Vec<String>, String> {
    let name = path.to_str().ok_or("the path is not UTF-8")?;
    let library = tfr::Library::load(name).map_err(|s| status_message(&s))?;
    let ops: Vec<tfr::OpDef> = library.op_list().clone().into();
    let ops = ops.iter().map(|op| op.name().to_string()).collect();
    std::mem::forget(library);
    Ok(ops)
}

/// The string inputs that feed a `DecodeBase64` op. A graph that cannot be
/// traced counts as taking raw bytes (the per-model setting can say otherwise).
fn base64_inputs(graph: &Graph, graph_def: &mut Option<Vec<u8>>, inputs: &[TensorSpec]) -> Vec<String> {
    let strings: Vec<&TensorSpec> = inputs.iter().filter(|i| i.dtype == DType::String).collect();
    if strings.is_empty() {
        return Vec::new();
    }
    let bytes = graph_def.get_or_insert_with(|| graph.graph_def().unwrap_or_default());
    strings
        .into_iter()
        .filter(|input| {
            let (node, _) = split_tensor_name(&input.tensor_name);
            super::graph_trace::reaches_op(bytes, node, "DecodeBase64").unwrap_or_else(|e| {
                log::warn!("input '{}': {e}; treating it as raw bytes", input.key);
                false
            })
        })
        .map(|input| input.key.clone())
        .collect()
}

fn tensor_spec(key: &str, info: &tfr::TensorInfo) -> TensorSpec {
    let shape = info.shape();
    let dims = shape
        .dims()
        .map(|rank| (0..rank).map(|d| shape[d].unwrap_or(-1)).collect());
    let name = info.name();
    TensorSpec {
        key: key.to_string(),
        tensor_name: format!("{}:{}", name.name, name.index),
        dtype: dtype_of(info.dtype()),
        shape: dims,
    }
}

fn dtype_of(dtype: DataType) -> DType {
    match dtype {
        DataType::Float => DType::Float,
        DataType::Double => DType::Double,
        DataType::Int32 => DType::Int32,
        DataType::UInt8 => DType::UInt8,
        DataType::Int16 => DType::Int16,
        DataType::Int8 => DType::Int8,
        DataType::String => DType::String,
        DataType::Int64 => DType::Int64,
        DataType::Bool => DType::Bool,
        DataType::BFloat16 => DType::BFloat16,
        DataType::UInt16 => DType::UInt16,
        DataType::Half => DType::Half,
        DataType::UInt32 => DType::UInt32,
        DataType::UInt64 => DType::UInt64,
        DataType::Complex64 => DType::Other(8),
        DataType::Complex128 => DType::Other(18),
        DataType::Resource => DType::Other(20),
        DataType::Variant => DType::Other(21),
        DataType::UnrecognizedEnumValue(code) => DType::Other(code as i32),
        _ => DType::Other(0),
    }
}

fn run_error(status: tfr::Status) -> RuntimeError {
    let code = match status.code() {
        TfCode::Cancelled => Code::Cancelled,
        TfCode::InvalidArgument => Code::InvalidArgument,
        TfCode::DeadlineExceeded => Code::DeadlineExceeded,
        TfCode::NotFound => Code::NotFound,
        TfCode::AlreadyExists => Code::AlreadyExists,
        TfCode::PermissionDenied => Code::PermissionDenied,
        TfCode::ResourceExhausted => Code::ResourceExhausted,
        TfCode::FailedPrecondition => Code::FailedPrecondition,
        TfCode::Aborted => Code::Aborted,
        TfCode::OutOfRange => Code::OutOfRange,
        TfCode::Unimplemented => Code::Unimplemented,
        TfCode::Unavailable => Code::Unavailable,
        TfCode::Unauthenticated => Code::Unauthenticated,
        _ => Code::Internal,
    };
    let message = status_message(&status);
    RuntimeError::Run { code, message }
}

/// The status text without the `Code: ` prefix that `Display` adds.
fn status_message(status: &tfr::Status) -> String {
    let full = status.to_string();
    let prefix = format!("{}: ", status.code());
    full.strip_prefix(&prefix).map(str::to_string).unwrap_or(full)
}

fn internal(message: String) -> RuntimeError {
    RuntimeError::Run {
        code: Code::Internal,
        message,
    }
}

mod tensors;

use tensors::{fetch, Feed};
