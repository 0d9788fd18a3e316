//! What a trial depends on and where its decision is kept: the [`Key`]
//! (everything besides the SavedModel's bytes that the measurement depended
//! on) and the [`Plan`] a trial runs from, which finds and keeps decisions.

use std::path::PathBuf;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::trial::Source;
use super::{cache, Decision};
use crate::runtime::precision::Tolerance;
use crate::runtime::{Loader, SessionConfig};

/// Everything a decision depends on besides the SavedModel's bytes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Key {
    pub rule: u32,
    pub tensorflow: String,
    /// The CPU, and each GPU with its driver.
    pub device: String,
    pub tags: Vec<String>,
    pub intra_op_threads: i32,
    pub inter_op_threads: i32,
    pub batch_threads: usize,
    pub sizes: Vec<usize>,
    pub candidates: Vec<String>,
    pub tolerance: Tolerance,
    /// The probes: the warm-up file's digest, or the capture prefix.
    pub probes: String,
    /// TensorFlow's, oneDNN's, XLA's and CUDA's switches in the environment.
    pub environment: Vec<(String, String)>,
}

impl Key {
    /// The key as the cache's file name and check hold it.
    pub fn setting(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// The environment variables that change what TensorFlow runs, set here.
pub fn environment_switches() -> Vec<(String, String)> {
    const PREFIXES: [&str; 9] = [
        "TF_ONEDNN",
        "TF_ENABLE_ONEDNN",
        "TF_XLA",
        "XLA_",
        "ONEDNN_",
        "DNNL_",
        "TF_GPU",
        "CUDA_VISIBLE",
        "OMP_",
    ];
    let mut found: Vec<(String, String)> = std::env::vars()
        .filter(|(name, _)| PREFIXES.iter().any(|p| name.starts_with(p)))
        .collect();
    found.sort();
    found
}

/// What a trial needs, owned: it runs on the trial thread after the load returned.
#[derive(Clone)]
pub struct Plan {
    pub model: String,
    pub version: i64,
    pub loader: Arc<dyn Loader>,
    pub dir: PathBuf,
    /// The version's session options; the trial sets precision and XLA.
    pub session: SessionConfig,
    pub source: Option<Source>,
    /// Where decisions are kept (`None`: not kept).
    pub cache_dir: Option<PathBuf>,
    pub key: Key,
}

impl Plan {
    fn kept_path(&self) -> Option<(PathBuf, String)> {
        let dir = self.cache_dir.as_ref()?;
        let digest = cache::saved_model_digest(&self.dir)
            .map_err(|e| {
                log::warn!(
                    "model {} version {}: mode decisions not kept: {e}",
                    self.model,
                    self.version
                )
            })
            .ok()?;
        Some((cache::path(&dir.join("modes"), &digest, &self.key.setting()), digest))
    }

    /// The decision kept for this SavedModel under this key, if any.
    pub fn kept(&self) -> Option<Decision> {
        let (path, digest) = self.kept_path()?;
        match cache::read_for(&path, &digest, &self.key.setting()) {
            Ok(Some(entry)) => {
                let mut decision = entry.decision;
                decision.reused = Some(path);
                Some(decision)
            }
            Ok(None) => None,
            Err(e) => {
                log::warn!(
                    "model {} version {}: kept mode decision not used, measuring again: {e}",
                    self.model,
                    self.version
                );
                None
            }
        }
    }

    /// Keeps `decision` for the next start; not one that says FP32 failed.
    pub(super) fn keep(&self, decision: &Decision) {
        let Some((path, digest)) = self.kept_path() else { return };
        let entry = cache::CachedDecision {
            saved_model: digest,
            setting: self.key.setting(),
            tensorflow: self.key.tensorflow.clone(),
            device: self.key.device.clone(),
            decision: decision.clone(),
        };
        if let Err(e) = cache::write(&path, &entry) {
            log::warn!(
                "model {} version {}: mode decision not kept: {e}",
                self.model,
                self.version
            );
        }
    }
}
