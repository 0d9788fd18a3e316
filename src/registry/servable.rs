//! A loaded model version and how it is built: session, warm-up, and one
//! batching queue per signature.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Instant;

use crate::batcher::{BatchError, BatchParams, Batcher, ParamsOverride, QueueHandle, Runner};
use crate::imaging::ImagePolicy;
use crate::metrics::{QueueMetrics, METRICS};
use crate::modes::background::Activity;
use crate::modes::ModeState;
use crate::runtime::{replicas, Loader, Model, RuntimeError, SessionConfig};
use crate::signature::SignatureSpec;
use crate::tensor::Tensor;

/// One loaded model version, ready to run.
pub struct Servable {
    pub model: String,
    /// The same name, shared: what each captured record of the model holds.
    pub shared_name: Arc<str>,
    pub version: i64,
    pub runtime: Arc<dyn Model>,
    /// How uploaded images reach this model.
    pub images: ImagePolicy,
    /// TF Serving's `logging_config` for the model, as its config file gave it.
    pub logging: Option<Arc<crate::model_config::LoggingConfig>>,
    /// Its mode under `mixed_precision: auto`: the trial's progress, or its decision and why.
    pub mode: Option<Arc<ModeState>>,
    /// What its signatures reach outside the request (`None`: nothing the
    /// audit could read, as for a mock runtime's model).
    pub audit: Option<Arc<crate::audit::ModelAudit>>,
    queues: BTreeMap<String, QueueHandle>,
    /// Released when the last request lets go of this version.
    _hold: Hold,
    holds: Arc<Holds>,
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
        self.runtime.signature(name)
    }

    pub fn queue(&self, signature: &str) -> Option<&QueueHandle> {
        self.queues.get(signature)
    }

    /// Why a request for this version whose bytes arrived at `arrived`
    /// would be refused as late were it queued now, before its body is
    /// read: only when every one of its queues has a latency objective and
    /// would refuse it (the signature is not known yet). The refusal is
    /// counted on the queue it names.
    pub fn late_at_head(&self, arrived: Instant) -> Option<BatchError> {
        let mut first = None;
        for queue in self.queues.values() {
            let late = queue.late_at_head(arrived)?;
            first.get_or_insert((queue, late));
        }
        first.map(|(queue, late)| {
            queue.count_late();
            late
        })
    }

    /// What tells when this version's memory is free: every request done with
    /// it and every queued batch run.
    pub fn holds(&self) -> Arc<Holds> {
        self.holds.clone()
    }
}

/// Counts what keeps a loaded version (and its session) alive: the servable
/// itself and each signature's runner, which a draining queue keeps until its
/// last batch has run. Unloading waits on it instead of polling.
#[derive(Default)]
pub struct Holds {
    count: Mutex<usize>,
    released: Condvar,
}

impl Holds {
    fn hold(self: &Arc<Self>) -> Hold {
        *self.count.lock().unwrap_or_else(|p| p.into_inner()) += 1;
        Hold(self.clone())
    }

    /// Waits until nothing holds the version; false if `deadline` came first.
    pub fn wait_released(&self, deadline: Instant) -> bool {
        let mut count = self.count.lock().unwrap_or_else(|p| p.into_inner());
        while *count > 0 {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            count = self
                .released
                .wait_timeout(count, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        true
    }
}

/// One hold on a version, given back on drop.
struct Hold(Arc<Holds>);

impl Drop for Hold {
    fn drop(&mut self) {
        let mut count = self.0.count.lock().unwrap_or_else(|p| p.into_inner());
        *count -= 1;
        if *count == 0 {
            self.0.released.notify_all();
        }
    }
}

/// Runs a batch on one signature of a loaded model.
struct SignatureRunner {
    /// What tells a mode trial the server is busy.
    activity: Arc<Activity>,
    runtime: Arc<dyn Model>,
    signature: String,
    _hold: Hold,
}

impl Runner for SignatureRunner {
    fn run(&self, inputs: Vec<Tensor>) -> Result<Vec<Tensor>, RuntimeError> {
        self.activity.count(|| self.runtime.run(&self.signature, inputs))
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
    /// Batches of a model on a GPU that run at once, per replica (0: no bound).
    pub gpu_batches_in_flight: usize,
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
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Deserialize, serde::Serialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
#[value(rename_all = "snake_case")]
pub enum SwapPolicy {
    /// Load the new version first (memory for both, briefly), as TF Serving does.
    #[default]
    AvailabilityPreserving,
    /// Unload the old version first: no memory doubling, a gap for that version.
    ResourcePreserving,
}

/// Everything needed to turn a version directory into a servable.
pub struct LoadOptions {
    /// TensorFlow in the server; a mock in tests.
    pub loader: Arc<dyn Loader>,
    pub tags: Vec<String>,
    pub session: SessionConfig,
    pub batcher: Arc<Batcher>,
    pub batching: BatchingPolicy,
    pub swap: SwapPolicy,
    /// How long one version's load may take (None: no bound).
    pub load_timeout: Option<std::time::Duration>,
    /// Where remote base paths are mirrored before their versions are read.
    pub storage: Arc<crate::storage::Storage>,
    /// What every model's signatures may reach outside the request
    /// (`--allow_model_access`); a model's own `allow_access` adds to it.
    pub allow_access: std::collections::BTreeSet<crate::audit::Access>,
    /// Every model run, as the mode trials see it.
    pub activity: Arc<Activity>,
    /// Where a model's requests are captured as TFRecords, if anywhere: a
    /// mode trial's probes when a version has no warm-up requests.
    pub capture_prefix: Option<CapturePrefix>,
}

/// The capture prefix of a model, by its name.
pub type CapturePrefix = Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// The audit of the version in `dir`, or why it may not load under `allowed`.
pub fn audited(
    dir: &Path,
    allowed: &std::collections::BTreeSet<crate::audit::Access>,
    options: &LoadOptions,
) -> Result<Option<Arc<crate::audit::ModelAudit>>, String> {
    let audit = crate::audit::audit(dir, &options.tags, &options.loader.custom_ops())?;
    if let Some(audit) = &audit {
        if let (Some(refusal), Some(class)) = (audit.refusal(allowed), audit.refused_class(allowed)) {
            crate::metrics::METRICS.refused_loads.with_label_values(&[class]).inc();
            return Err(refusal);
        }
        if let Some(refusal) = audit.module_refusal() {
            crate::metrics::METRICS
                .refused_loads
                .with_label_values(&["jax_module_version"])
                .inc();
            return Err(refusal);
        }
    }
    Ok(audit.map(Arc::new))
}

/// The session a version's JAX modules can run in on `loader`'s host, or
/// why they cannot ([`crate::audit::ModelAudit::module_placement`]); and
/// `mixed_precision: auto` does not apply to JAX modules, which the
/// precision rewrite cannot change.
pub fn session_for_modules(
    (model, version): (&str, i64),
    audit: Option<&crate::audit::ModelAudit>,
    session: &SessionConfig,
    loader: &dyn Loader,
) -> Result<SessionConfig, String> {
    let mut session = session.clone();
    let Some(audit) = audit.filter(|a| a.runs_jax_modules()) else {
        return Ok(session);
    };
    let kernels = loader.kernel_devices("XlaCallModule");
    let on_gpu = loader.sees_gpu() && !session.cpu_only;
    let placement = audit.module_placement(on_gpu, kernels.as_deref()).inspect_err(|_| {
        let refused = &crate::metrics::METRICS.refused_loads;
        refused.with_label_values(&["jax_module_platform"]).inc();
    })?;
    if let crate::audit::ModulePlacement::Cpu(why) = placement {
        log::info!("model {model} version {version}: runs on the CPU: {why}");
        session.cpu_only = true;
    }
    if session.choose_mode {
        log::info!(
            "model {model} version {version}: mixed_precision auto does not apply: its signatures run serialized \
             JAX modules (XlaCallModule), which TensorFlow's precision rewrite leaves as they are; it serves in float32"
        );
        session.choose_mode = false;
    }
    Ok(session)
}

/// Loads, warms up (the shipped warm-up requests, else every batch size on
/// synthetic inputs) and queues a version. Only returns once it can serve.
pub fn build(
    model: &str,
    version: i64,
    path: &Path,
    session: &SessionConfig,
    images: ImagePolicy,
    logging: Option<Arc<crate::model_config::LoggingConfig>>,
    options: &LoadOptions,
) -> Result<Servable, RuntimeError> {
    let (params, merge) = options.batching.for_model(model);
    let captured = logging.as_ref().map(|l| l.filename_prefix.clone());
    let start = super::modes::start((model, version), path, session, (&params, merge, captured), options);
    let (session, mode) = (&start.session, start.state);
    let replicas = replicas::load(options.loader.as_ref(), path, &options.tags, session)?;
    let on_gpu = replicas[0].model.on_gpu();
    let params = padded_on_gpu(model, version, params, merge && on_gpu);
    let sizes = if merge { params.warmup_sizes() } else { vec![1] };
    // Every replica warms up: each GPU autotunes its own kernels.
    for replica in &replicas {
        crate::warmup::warm_up(model, version, path, replica.model.as_ref(), &sizes)?;
    }
    let running_limit = (merge && on_gpu && options.batching.gpu_batches_in_flight > 0)
        .then(|| options.batching.gpu_batches_in_flight * replicas.len());
    let runtime = one_runtime(model, version, replicas);
    let holds = Arc::new(Holds::default());
    let queues = runtime
        .signatures()
        .iter()
        .map(|signature| {
            let name = signature.name.clone();
            let runner = Arc::new(SignatureRunner {
                activity: options.activity.clone(),
                runtime: runtime.clone(),
                signature: name.clone(),
                _hold: holds.hold(),
            });
            let label = format!("model {model} version {version} signature {name}");
            let metrics = QueueMetrics::new(model, version, &name);
            let queue = options
                .batcher
                .add_queue(label, params.clone(), merge, runner, metrics, running_limit);
            (name, queue)
        })
        .collect();
    mode.iter().for_each(|mode| mode.count(model, version));
    Ok(Servable {
        model: model.to_string(),
        shared_name: model.into(),
        version,
        runtime,
        images,
        logging,
        mode,
        audit: None,
        queues,
        _hold: holds.hold(),
        holds,
    })
}

/// A merging queue of a model on a GPU pads its batches to fixed sizes,
/// unless `allowed_batch_sizes` lists its own.
fn padded_on_gpu(model: &str, version: i64, params: BatchParams, merging_on_gpu: bool) -> BatchParams {
    if !merging_on_gpu || !params.allowed_batch_sizes.is_empty() {
        return params;
    }
    let params = params.for_gpu();
    log::info!(
        "model {model} version {version} runs on a GPU: batches pad to {:?} rows, each warmed up first \
         (allowed_batch_sizes chooses others)",
        params.allowed_batch_sizes
    );
    params
}

/// The version's one `Model`: its only replica, or every replica behind one
/// that runs each batch on the least busy.
fn one_runtime(model: &str, version: i64, mut replicas: Vec<replicas::Replica>) -> Arc<dyn Model> {
    if replicas.len() == 1 {
        return replicas.remove(0).model;
    }
    log::info!(
        "model {model} version {version}: {} replicas ({}), one queue; each batch runs on the least busy",
        replicas.len(),
        replicas
            .iter()
            .map(|r| r.device.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    );
    let label = version.to_string();
    let runs = replicas
        .iter()
        .map(|r| METRICS.replica_runs.with_label_values(&[model, &label, &r.device]))
        .collect();
    Arc::new(replicas::Replicated::new(replicas, runs))
}
