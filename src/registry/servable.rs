//! A loaded model version and how it is built: session, warm-up, and one
//! batching queue per signature.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use crate::batcher::{BatchParams, Batcher, ParamsOverride, QueueHandle, Runner};
use crate::imaging::ImagePolicy;
use crate::metrics::QueueMetrics;
use crate::runtime::{LoadedModel, RuntimeError, SessionConfig};
use crate::signature::SignatureSpec;
use crate::tensor::Tensor;

/// One loaded model version, ready to run.
pub struct Servable {
    pub model: String,
    pub version: i64,
    pub runtime: Arc<LoadedModel>,
    /// How uploaded images reach this model.
    pub images: ImagePolicy,
    queues: BTreeMap<String, QueueHandle>,
}

impl std::fmt::Debug for Servable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Servable")
            .field("model", &self.model)
            .field("version", &self.version)
            .finish()
    }
}

impl Servable {
    pub fn signature(&self, name: &str) -> Option<&Arc<SignatureSpec>> {
        self.runtime.signatures().find(|s| s.name == name)
    }

    pub fn queue(&self, signature: &str) -> Option<&QueueHandle> {
        self.queues.get(signature)
    }
}

/// Runs a batch on one signature of a loaded model.
struct SignatureRunner {
    runtime: Arc<LoadedModel>,
    signature: String,
}

impl Runner for SignatureRunner {
    fn run(&self, inputs: Vec<Tensor>) -> Result<Vec<Tensor>, RuntimeError> {
        self.runtime.run(&self.signature, inputs)
    }
}

/// How each model's queues batch.
#[derive(Clone, Debug)]
pub struct BatchingPolicy {
    pub enabled: bool,
    pub params: BatchParams,
    /// Per-model changes to `params`, applied when batching is enabled.
    pub overrides: BTreeMap<String, ParamsOverride>,
    /// Requests waiting for a batch thread when batching is off.
    pub unbatched_queue: usize,
}

impl BatchingPolicy {
    /// The parameters for a model's queues, and whether they merge requests.
    pub fn for_model(&self, model: &str) -> (BatchParams, bool) {
        if !self.enabled {
            let params = BatchParams {
                max_enqueued_batches: self.unbatched_queue,
                ..BatchParams::default()
            };
            return (params, false);
        }
        match self.overrides.get(model) {
            Some(o) => (o.apply(&self.params), true),
            None => (self.params.clone(), true),
        }
    }
}

/// Whether a new version must be serving before the old one unloads.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SwapPolicy {
    /// Load the new version first (memory for both, briefly), as TF Serving does.
    #[default]
    AvailabilityPreserving,
    /// Unload the old version first: no memory doubling, a gap for that version.
    ResourcePreserving,
}

/// Everything needed to turn a version directory into a servable.
pub struct LoadOptions {
    pub tags: Vec<String>,
    pub session: SessionConfig,
    pub batcher: Arc<Batcher>,
    pub batching: BatchingPolicy,
    pub swap: SwapPolicy,
}

/// Loads, warms up (the shipped warm-up requests, else every batch size on
/// synthetic inputs) and queues a version. Only returns once it can serve.
pub fn build(
    model: &str,
    version: i64,
    path: &Path,
    session: &SessionConfig,
    images: ImagePolicy,
    options: &LoadOptions,
) -> Result<Servable, RuntimeError> {
    let runtime = Arc::new(LoadedModel::load(path, &options.tags, session)?);
    let (params, merge) = options.batching.for_model(model);
    let sizes = if merge { params.warmup_sizes() } else { vec![1] };
    crate::warmup::warm_up(model, version, path, &runtime, &sizes)?;
    let queues = runtime
        .signatures()
        .map(|signature| {
            let name = signature.name.clone();
            let runner = Arc::new(SignatureRunner {
                runtime: runtime.clone(),
                signature: name.clone(),
            });
            let label = format!("model {model} version {version} signature {name}");
            let metrics = QueueMetrics::new(model, version, &name);
            let queue = options.batcher.add_queue(label, params.clone(), merge, runner, metrics);
            (name, queue)
        })
        .collect();
    Ok(Servable {
        model: model.to_string(),
        version,
        runtime,
        images,
        queues,
    })
}
