//! The TensorFlow runtime boundary: loading SavedModels and running signatures.
//! TensorFlow types never leave this module; callers see `Tensor` and
//! `SignatureSpec`.

#[cfg(feature = "tensorflow")]
pub mod build_info;
#[cfg(feature = "tensorflow")]
mod bytes;
// Pure prost: the TensorFlow loader's trace and the audit, without TensorFlow.
pub(crate) mod graph_trace;
pub(crate) mod graph_view;
#[cfg(any(test, feature = "mock"))]
pub mod mock;
mod placement;
pub mod precision;
pub mod replicas;
mod session_config;
#[cfg(feature = "tensorflow")]
mod tf;
pub mod tf_log;

use std::path::Path;
use std::sync::Arc;

pub use placement::PinnedCopy;
pub use session_config::SessionConfig;
#[cfg(feature = "tensorflow")]
pub use tf::{load_op_library, LoadedModel, TensorFlowLoader};

use crate::signature::SignatureSpec;
use crate::status::{Code, HasCode};
use crate::tensor::Tensor;

/// A loaded model whose signatures can run: a TensorFlow session in the
/// server, a scripted one in tests (`mock`), so everything above this layer
/// is testable without libtensorflow.
pub trait Model: Send + Sync {
    /// The servable signatures, sorted by name.
    fn signatures(&self) -> &[Arc<SignatureSpec>];

    /// Runs a signature. `inputs` follow the order of the signature's inputs;
    /// the result follows its outputs.
    fn run(&self, signature: &str, inputs: Vec<Tensor>) -> Result<Vec<Tensor>, RuntimeError>;

    fn signature(&self, name: &str) -> Option<&Arc<SignatureSpec>> {
        self.signatures().iter().find(|s| s.name == name)
    }

    /// Whether the session has a GPU to place ops on: batching then pads to
    /// fixed sizes by default (each new shape costs cuDNN an autotune).
    fn on_gpu(&self) -> bool {
        false
    }
}

/// Turns a SavedModel directory into a `Model`.
pub trait Loader: Send + Sync {
    fn load(&self, dir: &Path, tags: &[String], session: &SessionConfig) -> Result<Arc<dyn Model>, RuntimeError>;

    /// Whether this runtime's sessions get a GPU here, so a GPU host's
    /// session defaults apply.
    fn sees_gpu(&self) -> bool {
        false
    }

    /// The ops that `--custom_op_paths` libraries registered: native code
    /// the load-time audit classes on its own.
    fn custom_ops(&self) -> Vec<String> {
        Vec::new()
    }

    /// The device types (`CPU`, `GPU`) the runtime has a kernel of `op`
    /// for; `None` where it cannot say.
    fn kernel_devices(&self, op: &str) -> Option<Vec<String>> {
        let _ = op;
        None
    }

    /// The runtime's build (TensorFlow's version), which a measurement holds for.
    fn build(&self) -> String {
        "unknown".into()
    }
}

#[derive(Clone, Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error("failed to load SavedModel from {path}: {message}")]
    Load { path: String, message: String },
    #[error("{message}")]
    Run { code: Code, message: String },
    #[error("signature '{0}' is not loaded")]
    UnknownSignature(String),
}

impl HasCode for RuntimeError {
    fn code(&self) -> Code {
        match self {
            RuntimeError::Run {
                code: Code::ResourceExhausted,
                ..
            } => Code::OutOfMemory,
            RuntimeError::Run { code, .. } => *code,
            RuntimeError::UnknownSignature(_) => Code::NotFound,
            RuntimeError::Load { .. } => Code::Internal,
        }
    }
}
