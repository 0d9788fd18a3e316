//! A scripted `Model` and `Loader` for testing the layers above the runtime
//! (batcher, registry, service) without libtensorflow or a SavedModel.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::{Loader, Model, RuntimeError, SessionConfig};
use crate::signature::{SignatureSpec, TensorSpec, DEFAULT_SIGNATURE, PREDICT_METHOD};
use crate::status::Code;
use crate::tensor::{DType, Tensor, TensorData};

type RunFn = dyn Fn(&str, Vec<Tensor>) -> Result<Vec<Tensor>, RuntimeError> + Send + Sync;

pub struct MockModel {
    signatures: Vec<Arc<SignatureSpec>>,
    run: Box<RunFn>,
    /// The input shapes of every run, in order.
    runs: Mutex<Vec<Vec<Vec<usize>>>>,
    gpu: bool,
}

impl MockModel {
    pub fn new(
        signatures: Vec<SignatureSpec>,
        run: impl Fn(&str, Vec<Tensor>) -> Result<Vec<Tensor>, RuntimeError> + Send + Sync + 'static,
    ) -> MockModel {
        let mut signatures: Vec<Arc<SignatureSpec>> = signatures.into_iter().map(Arc::new).collect();
        signatures.sort_by(|a, b| a.name.cmp(&b.name));
        MockModel {
            signatures,
            run: Box::new(run),
            runs: Mutex::new(Vec::new()),
            gpu: false,
        }
    }

    /// The same model, reporting a GPU among its session's devices.
    pub fn on_a_gpu(self) -> MockModel {
        MockModel { gpu: true, ..self }
    }

    /// `serving_default`: float `x` → `y = x + offset`, any shape.
    pub fn add(offset: f32) -> MockModel {
        MockModel::slow_add(offset, Duration::ZERO)
    }

    /// `add`, taking `delay` per run.
    pub fn slow_add(offset: f32, delay: Duration) -> MockModel {
        MockModel::new(
            vec![float_signature(DEFAULT_SIGNATURE, &["x"], &["y"])],
            move |_, inputs| {
                std::thread::sleep(delay);
                let mut x = inputs.into_iter().next().ok_or_else(|| invalid("no input"))?;
                match &mut x.data {
                    TensorData::Float(values) => values.iter_mut().for_each(|v| *v += offset),
                    other => return Err(invalid(&format!("x must be float, got {}", other.dtype()))),
                }
                Ok(vec![x])
            },
        )
    }

    /// The input shapes of every run so far.
    pub fn runs(&self) -> Vec<Vec<Vec<usize>>> {
        self.runs.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

impl Model for MockModel {
    fn signatures(&self) -> &[Arc<SignatureSpec>] {
        &self.signatures
    }

    fn run(&self, signature: &str, inputs: Vec<Tensor>) -> Result<Vec<Tensor>, RuntimeError> {
        if self.signature(signature).is_none() {
            return Err(RuntimeError::UnknownSignature(signature.to_string()));
        }
        let shapes = inputs.iter().map(|t| t.shape.clone()).collect();
        self.runs.lock().unwrap_or_else(|p| p.into_inner()).push(shapes);
        (self.run)(signature, inputs)
    }

    fn on_gpu(&self) -> bool {
        self.gpu
    }
}

/// A signature of float inputs and outputs of unknown shape.
pub fn float_signature(name: &str, inputs: &[&str], outputs: &[&str]) -> SignatureSpec {
    let specs = |keys: &[&str]| {
        keys.iter()
            .map(|key| TensorSpec {
                key: key.to_string(),
                tensor_name: format!("{key}:0"),
                dtype: DType::Float,
                shape: Some(vec![-1]),
            })
            .collect()
    };
    let mut spec = SignatureSpec {
        name: name.into(),
        method_name: PREDICT_METHOD.into(),
        inputs: specs(inputs),
        outputs: specs(outputs),
        base64_inputs: Vec::new(),
    };
    spec.sort();
    spec
}

pub fn invalid(message: &str) -> RuntimeError {
    RuntimeError::Run {
        code: Code::InvalidArgument,
        message: message.to_string(),
    }
}

/// Loads version directories as `MockModel::add(version)` (what `models/adder`
/// computes). A `fail` file in the directory fails the load with its text; a
/// `load_ms` file holds the milliseconds a load takes, `run_ms` those of a run
/// (`run_ms.MODE` those of a session in that mode, `float32+xla` say); a `gpu` file makes the model report a GPU, and an `oom_rows` file holds the
/// most rows a run takes before it fails as out of memory.
#[derive(Default)]
pub struct MockLoader {
    loads: AtomicUsize,
}

impl MockLoader {
    pub fn loads(&self) -> usize {
        self.loads.load(Ordering::SeqCst)
    }
}

/// A run's milliseconds: `run_ms.MODE` (MODE as `mixed_precision: auto`
/// names it) for a session in that mode, else `run_ms`, else none.
fn run_ms(dir: &Path, session: &SessionConfig) -> Result<u64, String> {
    let mode = format!(
        "{}{}",
        session.mixed_precision.map_or("float32", |p| p.name()),
        if session.xla_jit { "+xla" } else { "" }
    );
    let in_mode = dir.join(format!("run_ms.{mode}"));
    let file = if in_mode.exists() { in_mode } else { dir.join("run_ms") };
    match std::fs::read_to_string(file) {
        Ok(ms) => ms.trim().parse().map_err(|_| format!("run_ms: {ms:?}")),
        Err(_) => Ok(0),
    }
}

impl Loader for MockLoader {
    fn load(&self, dir: &Path, _tags: &[String], session: &SessionConfig) -> Result<Arc<dyn Model>, RuntimeError> {
        self.loads.fetch_add(1, Ordering::SeqCst);
        let error = |message: String| RuntimeError::Load {
            path: dir.display().to_string(),
            message,
        };
        if let Ok(delay) = std::fs::read_to_string(dir.join("load_ms")) {
            let ms = delay.trim().parse().map_err(|_| error(format!("load_ms: {delay:?}")))?;
            std::thread::sleep(Duration::from_millis(ms));
        }
        if dir.join("panic").exists() {
            panic!("the mock loader was told to panic");
        }
        if let Ok(reason) = std::fs::read_to_string(dir.join("fail")) {
            return Err(error(reason.trim().to_string()));
        }
        let version: f32 = dir
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.parse().ok())
            .ok_or_else(|| error("not a numeric version directory".into()))?;
        let run_ms = run_ms(dir, session).map_err(error)?;
        let oom_rows: Option<usize> = match std::fs::read_to_string(dir.join("oom_rows")) {
            Ok(rows) => Some(rows.trim().parse().map_err(|_| error(format!("oom_rows: {rows:?}")))?),
            Err(_) => None,
        };
        let model = match oom_rows {
            Some(limit) => MockModel::new(
                vec![float_signature(DEFAULT_SIGNATURE, &["x"], &["y"])],
                move |_, inputs| {
                    let mut x = inputs.into_iter().next().ok_or_else(|| invalid("no input"))?;
                    if x.shape.first().is_some_and(|&rows| rows > limit) {
                        return Err(RuntimeError::Run {
                            code: Code::ResourceExhausted,
                            message: format!(
                                "OOM when allocating tensor with shape[{},1000] on /job:localhost/replica:0/task:0/device:GPU:0",
                                x.shape[0]
                            ),
                        });
                    }
                    if let TensorData::Float(values) = &mut x.data {
                        values.iter_mut().for_each(|v| *v += version);
                    }
                    Ok(vec![x])
                },
            ),
            None => MockModel::slow_add(version, Duration::from_millis(run_ms)),
        };
        Ok(Arc::new(if dir.join("gpu").exists() {
            model.on_a_gpu()
        } else {
            model
        }))
    }
}
