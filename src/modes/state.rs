//! A version's mode as the server shows it: a trial waiting or running (and
//! where it is), or the decision; and its series in `/metrics`.

use std::sync::{Arc, Mutex};

use super::{Decision, Mode, Plan};

/// Where a version's mode stands: a trial waiting or running, or decided.
#[derive(Clone, Debug)]
pub enum ModeStatus {
    Waiting,
    Trial(String),
    Decided(Arc<Decision>),
}

/// A version's mode as the dashboard and `/metrics` show it, and the trial
/// it waits for.
pub struct ModeState {
    status: Mutex<ModeStatus>,
    plan: Mutex<Option<Plan>>,
}

impl ModeState {
    /// Serving FP32 until `plan`'s trial decides.
    pub fn waiting(plan: Plan) -> ModeState {
        ModeState {
            status: Mutex::new(ModeStatus::Waiting),
            plan: Mutex::new(Some(plan)),
        }
    }

    pub fn decided(decision: Arc<Decision>) -> ModeState {
        ModeState {
            status: Mutex::new(ModeStatus::Decided(decision)),
            plan: Mutex::new(None),
        }
    }

    pub fn status(&self) -> ModeStatus {
        self.status.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub fn set(&self, status: ModeStatus) {
        *self.status.lock().unwrap_or_else(|p| p.into_inner()) = status;
    }

    /// The trial to run, taken once.
    pub fn take_plan(&self) -> Option<Plan> {
        self.plan.lock().unwrap_or_else(|p| p.into_inner()).take()
    }

    /// The decision, once there is one.
    pub fn decision(&self) -> Option<Arc<Decision>> {
        match self.status() {
            ModeStatus::Decided(decision) => Some(decision),
            _ => None,
        }
    }

    /// One line: the mode it serves in, and its trial's progress or its reason.
    pub fn summary(&self) -> String {
        match self.status() {
            ModeStatus::Waiting => "float32; its mode trial waits its turn".into(),
            ModeStatus::Trial(progress) => format!("float32; mode trial: {progress}"),
            ModeStatus::Decided(decision) => format!("{}: {}", decision.chosen.name(), decision.reason),
        }
    }

    /// The mode this version serves in now, and its speed over FP32's.
    fn serving(&self) -> (String, f64) {
        self.decision()
            .map_or((Mode::FLOAT32.name(), 1.0), |d| (d.chosen.name(), d.speedup))
    }

    /// Shows the version's serving mode in `tfserve_model_mode_speedup`.
    pub fn count(&self, model: &str, version: i64) {
        let (mode, speedup) = self.serving();
        let labels = [model, &version.to_string(), &mode];
        crate::metrics::METRICS
            .model_mode
            .with_label_values(&labels)
            .set(speedup);
    }

    /// Takes the version's series out of `tfserve_model_mode_speedup`.
    pub fn uncount(&self, model: &str, version: i64) {
        let (mode, _) = self.serving();
        let labels = [model, &version.to_string(), &mode];
        let _ = crate::metrics::METRICS.model_mode.remove_label_values(&labels);
    }
}
