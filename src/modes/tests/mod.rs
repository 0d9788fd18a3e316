//! The mode choice's guarantees: the rounds' error rates under injected
//! drift (`drift`), the answers' checks on their edge cases (`agreement`),
//! and whole trials on a simulated clock (`choice`): scripted models whose
//! runs advance the clock by a cost per mode and per row, and whose answers
//! are computed in the mode's precision, probed from a warm-up file.

mod agreement;
mod choice;
mod drift;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use super::trial::{Clock, Source};
use super::*;
use crate::proto::tensorflow::serving::prediction_log::LogType;
use crate::proto::tensorflow::serving::{ModelSpec, PredictLog, PredictRequest, PredictionLog};
use crate::runtime::mock::{float_signature, MockModel};
use crate::runtime::precision::Tolerance;
use crate::runtime::{Loader, RuntimeError};
use crate::signature::DEFAULT_SIGNATURE;
use crate::tensor::{Tensor, TensorData};

pub const BF16: Option<MixedPrecision> = Some(MixedPrecision::Bfloat16);
pub const FP16: Option<MixedPrecision> = Some(MixedPrecision::Float16);

#[derive(Default)]
pub struct SimClock(Mutex<f64>);

impl SimClock {
    pub fn advance(&self, seconds: f64) {
        *self.0.lock().unwrap() += seconds;
    }
}

impl Clock for SimClock {
    fn seconds(&self) -> f64 {
        *self.0.lock().unwrap()
    }
}

/// A server that is always quiet, on the simulated clock.
pub struct Quiet(pub Arc<SimClock>);

impl Clock for Quiet {
    fn seconds(&self) -> f64 {
        self.0.seconds()
    }
}

impl Surroundings for Quiet {
    fn wait_quiet(&self) -> Result<(), String> {
        Ok(())
    }

    fn disturbed(&self) -> bool {
        false
    }
}

pub type Cost = fn(Mode, usize) -> Option<f64>;
pub type Answer = fn(Mode, f32) -> f32;

/// Loads a model whose run of `rows` rows takes `cost(mode, rows)` seconds
/// per row (`None`: the mode fails to load) and answers `answer(mode, x)`
/// per value, `width` values per row (1: shaped `[rows]`).
pub struct ModeLoader {
    pub clock: Arc<SimClock>,
    pub cost: Cost,
    pub answer: Answer,
    pub width: usize,
    pub loads: AtomicUsize,
}

impl ModeLoader {
    pub fn new(cost: Cost, answer: Answer) -> ModeLoader {
        ModeLoader {
            clock: Arc::default(),
            cost,
            answer,
            width: 1,
            loads: AtomicUsize::new(0),
        }
    }
}

impl Loader for ModeLoader {
    fn load(&self, _: &Path, _: &[String], session: &SessionConfig) -> Result<Arc<dyn Model>, RuntimeError> {
        self.loads.fetch_add(1, Ordering::SeqCst);
        let mode = Mode {
            precision: session.mixed_precision,
            xla: session.xla_jit,
        };
        (self.cost)(mode, 1).ok_or_else(|| RuntimeError::Load {
            path: "v".into(),
            message: format!("{} is not built in", mode.name()),
        })?;
        let (clock, cost, answer, width) = (self.clock.clone(), self.cost, self.answer, self.width);
        let model = MockModel::new(
            vec![float_signature(DEFAULT_SIGNATURE, &["x"], &["y"])],
            move |_, inputs| {
                let x = &inputs[0];
                let rows = x.shape[0];
                clock.advance(cost(mode, rows).unwrap_or(0.0) * rows as f64);
                let TensorData::Float(values) = &x.data else {
                    return Err(crate::runtime::mock::invalid("x must be float"));
                };
                let y: Vec<f32> = values
                    .iter()
                    .flat_map(|&v| (0..width).map(move |k| answer(mode, v - k as f32 * 1e-3)))
                    .collect();
                let shape = if width == 1 { vec![rows] } else { vec![rows, width] };
                Ok(vec![Tensor::new(shape, TensorData::Float(y))])
            },
        );
        Ok(Arc::new(model))
    }
}

/// A value as the mode's precision keeps it.
pub fn rounded(mode: Mode, value: f32) -> f32 {
    match mode.precision {
        Some(MixedPrecision::Bfloat16) => half::bf16::from_f32(value).to_f32(),
        Some(MixedPrecision::Float16) => half::f16::from_f32(value).to_f32(),
        None => value,
    }
}

/// A version folder under a fresh temporary folder, with `records` warm-up
/// requests of one row each, `x` in [1, 2) from a fixed sequence.
pub fn version_with_warmup(name: &str, records: usize) -> PathBuf {
    let root = std::env::temp_dir().join(format!("tfserve-modes-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let dir = root.join("1");
    std::fs::create_dir_all(dir.join("assets.extra")).unwrap();
    std::fs::write(dir.join("saved_model.pb"), name.as_bytes()).unwrap();
    let mut file = Vec::new();
    for i in 0..records {
        let x = 1.0 + ((i * 7919) % 1000) as f32 / 1000.0;
        let x = Tensor::new(vec![1], TensorData::Float(vec![x]));
        let request = PredictRequest {
            model_spec: Some(ModelSpec {
                name: "m".into(),
                signature_name: DEFAULT_SIGNATURE.into(),
                version_choice: None,
            }),
            inputs: [("x".to_string(), crate::codec::tensor_proto::to_proto(&x))].into(),
            output_filter: Vec::new(),
        };
        let log = PredictionLog {
            log_metadata: None,
            log_type: Some(LogType::PredictLog(PredictLog {
                request: Some(request),
                response: None,
            })),
        };
        file.extend(crate::warmup::records::frame(&prost::Message::encode_to_vec(&log)));
    }
    std::fs::write(dir.join("assets.extra/tf_serving_warmup_requests"), file).unwrap();
    dir
}

/// The trial of the version in `dir` on `loader`, over `candidates`, its
/// decisions kept under `cache` (if any).
pub fn plan(loader: Arc<ModeLoader>, dir: &Path, candidates: Vec<Mode>, cache: Option<PathBuf>) -> Plan {
    let source = Source::find(dir, &[]);
    let key = Key {
        rule: RULE_VERSION,
        tensorflow: "mock".into(),
        device: "simulated".into(),
        tags: vec!["serve".into()],
        intra_op_threads: 0,
        inter_op_threads: 0,
        batch_threads: 1,
        sizes: vec![1, 8],
        candidates: candidates.iter().map(Mode::name).collect(),
        tolerance: Tolerance::default(),
        probes: source.as_ref().map_or_else(|| "none".into(), Source::key),
        environment: Vec::new(),
    };
    Plan {
        model: "m".into(),
        version: 1,
        loader,
        dir: dir.to_path_buf(),
        session: SessionConfig::default(),
        source,
        cache_dir: cache,
        key,
    }
}

/// Runs `plan`'s trial on its loader's simulated clock, on a quiet server.
pub fn decided(plan: &Plan, clock: &Arc<SimClock>) -> Decision {
    run(plan, &Quiet(clock.clone())).unwrap()
}
