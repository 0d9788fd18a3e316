//! The registry's side of `mixed_precision: auto`. A version with a kept
//! decision for its key loads straight in that mode; one without serves in
//! FP32 at once and its trial waits on the server's trial thread
//! (`crate::modes::background`). Once decided, a mode other than FP32 is
//! loaded beside the serving version, outside the change lock, and takes its
//! place in one step under it: requests in flight finish on the FP32
//! session, which then closes. Readiness never drops, and no other change
//! waits on a trial.

use std::sync::{Arc, Weak};

use crate::batcher::BatchParams;
use crate::modes::background::Watch;
use crate::modes::trial::{Source, WallClock};
use crate::modes::{self, Decision, Key, Mode, ModeState, ModeStatus, Plan};
use crate::runtime::{precision, SessionConfig};

use super::servable::{self, LoadOptions, Servable};
use super::Registry;

/// The session a version loads with, and its mode's state (`None` without `auto`).
pub struct ModeStart {
    pub session: SessionConfig,
    pub state: Option<Arc<ModeState>>,
}

/// How a version under `mixed_precision: auto` starts: in its kept mode,
/// else in FP32 with its trial waiting (or decided at once where there is
/// nothing real to try modes on).
pub fn start(
    (model, version): (&str, i64),
    path: &std::path::Path,
    session: &SessionConfig,
    (params, merge, captured): (&BatchParams, bool, Option<String>),
    options: &LoadOptions,
) -> ModeStart {
    if !session.choose_mode {
        return ModeStart {
            session: session.clone(),
            state: None,
        };
    }
    let plan = plan((model, version), path, session, (params, merge, captured), options);
    let (session, state) = if let Some(decision) = plan.kept() {
        log::info!("{}", decision.report(model, version));
        (decision.chosen.session(session), ModeState::decided(Arc::new(decision)))
    } else if plan.source.is_none() {
        log::warn!(
            "model {model} version {version}: mixed_precision auto serves in float32: {}",
            modes::NO_PROBES
        );
        let decision = Decision::float32(Vec::new(), session.mode_tolerance, Vec::new(), modes::NO_PROBES.into());
        (Mode::FLOAT32.session(session), ModeState::decided(Arc::new(decision)))
    } else {
        log::info!(
            "model {model} version {version}: serves in float32 while its mode trial runs in the background, on {}",
            plan.source.as_ref().map(Source::describe).unwrap_or_default()
        );
        (Mode::FLOAT32.session(session), ModeState::waiting(plan))
    };
    ModeStart {
        session,
        state: Some(Arc::new(state)),
    }
}

/// The trial of a version: the modes this host runs fast, at the batch sizes
/// its queues emit, on its real requests, under a key of all it depends on.
fn plan(
    (model, version): (&str, i64),
    path: &std::path::Path,
    session: &SessionConfig,
    (params, merge, captured): (&BatchParams, bool, Option<String>),
    options: &LoadOptions,
) -> Plan {
    let gpu = options.loader.sees_gpu() && !session.cpu_only;
    let padded = merge && (gpu || !params.allowed_batch_sizes.is_empty());
    let sizes = match (merge, gpu && params.allowed_batch_sizes.is_empty()) {
        (false, _) => vec![1],
        (true, true) => params.clone().for_gpu().warmup_sizes(),
        (true, false) => params.warmup_sizes(),
    };
    let mut prefixes: Vec<String> = options
        .capture_prefix
        .as_ref()
        .and_then(|prefix| prefix(model))
        .into_iter()
        .collect();
    prefixes.extend(captured);
    let source = Source::find(path, &prefixes);
    let candidates = modes::candidates(&precision::fast_here(gpu), padded);
    let key = Key {
        rule: modes::RULE_VERSION,
        tensorflow: options.loader.build(),
        device: precision::device_description(),
        tags: options.tags.clone(),
        intra_op_threads: session.intra_op_parallelism,
        inter_op_threads: session.inter_op_parallelism,
        batch_threads: options.batcher.thread_count(),
        sizes,
        candidates: candidates.iter().map(Mode::name).collect(),
        tolerance: session.mode_tolerance,
        probes: source.as_ref().map_or_else(|| "none".into(), Source::key),
        environment: modes::environment_switches(),
    };
    Plan {
        model: model.to_string(),
        version,
        loader: options.loader.clone(),
        dir: path.to_path_buf(),
        session: session.clone(),
        source,
        cache_dir: Some(options.storage.cache_root().to_path_buf()),
        key,
    }
}

impl Registry {
    /// Queues the trial of a version just made available, if it waits for one.
    pub(super) fn queue_trial(&self, servable: &Arc<Servable>) {
        let Some(state) = servable.mode.clone() else { return };
        let Some(plan) = state.take_plan() else { return };
        let (model, version) = (plan.model.clone(), plan.version);
        let serving = Arc::downgrade(servable);
        let registry = self.me.clone();
        let activity = self.options.activity.clone();
        let job_state = state.clone();
        let queued = self
            .trials
            .queue(format!("model {model} version {version}"), move |stopping| {
                let alive = || registry.upgrade().is_some_and(|r| r.serves(&plan, &serving));
                // Unloaded while it waited its turn: nothing to load or measure.
                if !alive() {
                    return;
                }
                let report = |what: String| job_state.set(ModeStatus::Trial(what));
                let watch = Watch {
                    activity: &activity,
                    alive: &alive,
                    stopping,
                    report: &report,
                    clock: WallClock::new(),
                    seen: Default::default(),
                };
                match modes::run(&plan, &watch) {
                    Ok(decision) => match registry.upgrade() {
                        Some(registry) => registry.switch(&plan, &serving, &job_state, decision),
                        None => job_state.set(ModeStatus::Decided(Arc::new(decision))),
                    },
                    Err(abandoned) => {
                        log::info!(
                            "model {} version {}: mode trial abandoned: {}",
                            plan.model,
                            plan.version,
                            abandoned.0
                        );
                    }
                }
            });
        if let Err(why) = queued {
            log::warn!("model {model} version {version}: serves in float32 without a mode trial: {why}");
            let decision = Decision::float32(Vec::new(), Default::default(), Vec::new(), why);
            state.set(ModeStatus::Decided(Arc::new(decision)));
        }
    }

    /// Whether `servable` is still the version its slot serves.
    fn serves(&self, plan: &Plan, servable: &Weak<Servable>) -> bool {
        let models = self.read();
        let slot = models.get(&plan.model).and_then(|e| e.versions.get(&plan.version));
        slot.and_then(|s| s.servable.as_ref())
            .is_some_and(|s| std::ptr::eq(Arc::as_ptr(s), servable.as_ptr()))
    }

    /// Serves `decision`'s mode in place of the FP32 version `serving`.
    fn switch(&self, plan: &Plan, serving: &Weak<Servable>, state: &Arc<ModeState>, decision: Decision) {
        let (model, version) = (plan.model.as_str(), plan.version);
        let decision = Arc::new(decision);
        if decision.chosen == Mode::FLOAT32 {
            state.set(ModeStatus::Decided(decision));
            return;
        }
        let Some(old) = serving.upgrade() else { return };
        let session = decision.chosen.session(&plan.session);
        let logging = old.logging.clone();
        let mut new = match servable::build(model, version, &plan.dir, &session, old.images, logging, &self.options) {
            Ok(new) => new,
            Err(e) => {
                let reason = format!("{} chosen, but its load failed: {e}", decision.chosen.name());
                log::warn!("model {model} version {version}: float32 stays: {reason}");
                let kept = Decision::float32(
                    decision.probes.clone(),
                    decision.tolerance,
                    decision.tried.clone(),
                    reason,
                );
                state.set(ModeStatus::Decided(Arc::new(kept)));
                return;
            }
        };
        new.audit = old.audit.clone();
        let new_state = Arc::new(ModeState::decided(decision.clone()));
        new.mode = Some(new_state.clone());
        let new = Arc::new(new);
        let swapped = {
            let _changes = self.changes.lock().unwrap_or_else(|p| p.into_inner());
            let mut models = self.write();
            let slot = models.get_mut(model).and_then(|e| e.versions.get_mut(&version));
            match slot.filter(|s| s.servable.as_ref().is_some_and(|s| Arc::ptr_eq(s, &old))) {
                Some(slot) => {
                    slot.servable = Some(new.clone());
                    true
                }
                None => false,
            }
        };
        if !swapped {
            return;
        }
        state.uncount(model, version);
        new_state.count(model, version);
        crate::metrics::METRICS
            .model_mode_switches
            .with_label_values(&[model, &version.to_string(), &decision.chosen.name()])
            .inc();
        log::info!(
            "model {model} version {version}: switched to {} ({}); float32 finishes its requests in flight",
            decision.chosen.name(),
            decision.reason
        );
    }
}
