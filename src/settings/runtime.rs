//! What the settings make of the runtime: session options and thread pools,
//! the batching plan, and the environment CUDA and XLA read.

use std::path::PathBuf;

use super::*;
use crate::runtime::precision::PrecisionChoice;

impl Settings {
    /// Points CUDA's cache of compiled kernels at `--gpu_compile_cache_dir`,
    /// and XLA's at its `xla` folder (unless TF_XLA_FLAGS names one).
    /// Must run before anything starts CUDA, and before other threads exist
    /// (the environment is process-wide and not synchronised).
    pub fn apply_gpu_compile_cache(&self) -> std::io::Result<()> {
        let Some(dir) = &self.tensorflow.gpu_compile_cache_dir else {
            return Ok(());
        };
        std::fs::create_dir_all(dir)?;
        std::env::set_var("CUDA_CACHE_PATH", dir);
        // CUDA's ceiling for the cache; its default (256 MiB) holds few of
        // TensorFlow's kernels.
        std::env::set_var("CUDA_CACHE_MAXSIZE", "4294967296");
        std::env::remove_var("CUDA_CACHE_DISABLE");
        // XLA's compiled clusters (`xla_jit`) are kept beside CUDA's kernels:
        // compiling them is most of a start with XLA on.
        let flags = std::env::var("TF_XLA_FLAGS").unwrap_or_default();
        if !flags.contains("tf_xla_persistent_cache_directory") {
            let xla = dir.join("xla");
            std::fs::create_dir_all(&xla)?;
            let flag = format!("--tf_xla_persistent_cache_directory={}", xla.display());
            std::env::set_var("TF_XLA_FLAGS", format!("{flags} {flag}").trim_start());
        }
        Ok(())
    }

    /// Points XLA at the ptxas and libdevice a GPU bundle carries in `cuda/`
    /// beside `bin/` (XLA compiles its GPU kernels with them), unless
    /// XLA_FLAGS already names a CUDA directory. Same constraints as above.
    /// Returns the directory it named.
    pub fn apply_bundled_cuda_tools() -> Option<PathBuf> {
        let exe = std::env::current_exe().ok()?;
        let bundle = exe.parent()?.parent()?.join("cuda");
        let flags = std::env::var("XLA_FLAGS").unwrap_or_default();
        if flags.contains("xla_gpu_cuda_data_dir") || !bundle.join("nvvm/libdevice/libdevice.10.bc").is_file() {
            return None;
        }
        let flag = format!("--xla_gpu_cuda_data_dir={}", bundle.display());
        std::env::set_var("XLA_FLAGS", format!("{flags} {flag}").trim_start());
        Some(bundle)
    }

    /// Session thread pools: the configured sizes, or defaults that fit
    /// `batch_threads` concurrent runs onto the cores. On a GPU host ops run
    /// on TensorFlow's inter-op pool: the batch thread then only waits, and
    /// the next batch's kernels are launched while this one's still run
    /// (10-15% more images per second for ResNet-50 on an H100); on the CPU
    /// they run on the batch thread itself, which saves a handoff per run.
    pub fn session_threads(&self, batch_threads: usize, gpu: bool) -> (i32, i32) {
        let intra = self
            .tensorflow
            .tensorflow_intra_op_parallelism
            .unwrap_or((cores() / batch_threads.max(1)).max(1) as i32);
        let inter = if gpu { 0 } else { -1 };
        (intra, self.tensorflow.tensorflow_inter_op_parallelism.unwrap_or(inter))
    }

    /// Every model's session options: the thread defaults above (`gpu`: for a
    /// host whose TensorFlow sees a GPU), then `--session_config`.
    pub fn session(&self, batch_threads: usize, gpu: bool) -> Result<SessionConfig, SettingsError> {
        let (intra, inter) = self.session_threads(batch_threads, gpu);
        let base = SessionConfig {
            intra_op_parallelism: intra,
            inter_op_parallelism: inter,
            // Several models share a GPU: each takes memory as it needs it
            // rather than reserving nearly all of it at load.
            gpu_allow_growth: true,
            cpu_only: self.tensorflow.cpu_only,
            gpu_ids: self.tensorflow.gpu_ids.clone(),
            virtual_gpu_memory_mb: self.tensorflow.virtual_gpu_memory_mb.clone(),
            mixed_precision: match self.tensorflow.mixed_precision {
                Some(PrecisionChoice::Fixed(mode)) => Some(mode),
                _ => None,
            },
            choose_mode: self.tensorflow.mixed_precision == Some(PrecisionChoice::Auto),
            ..SessionConfig::default()
        };
        let Some(text) = &self.tensorflow.session_config else {
            return Ok(base);
        };
        let invalid = |reason: String| SettingsError::File {
            name: "session_config",
            path: text.clone(),
            reason,
        };
        let json: serde_json::Value = serde_json::from_str(text).map_err(|e| invalid(format!("invalid JSON: {e}")))?;
        let overrides = SessionOverrides::from_json("(all models)", &json).map_err(invalid)?;
        Ok(overrides.apply(&base))
    }

    /// The global batching parameters and thread count: TF Serving's
    /// `--batching_parameters_file` (else its defaults), then the
    /// `max_batch_size`, `batch_timeout_micros` and `max_enqueued_batches`
    /// settings (SageMaker's `SAGEMAKER_TFS_*` variables among their sources).
    /// Also returns whether batching is on.
    pub fn batch_plan(&self) -> Result<(bool, BatchParams, usize), SettingsError> {
        let batching = &self.batching;
        let invalid =
            |name: &'static str, value: String, reason: &'static str| SettingsError::Invalid { name, value, reason };
        let (file_params, file_threads) = match &batching.batching_parameters_file {
            Some(path) if !batching.enable_batching => {
                return Err(invalid(
                    "batching_parameters_file",
                    path.display().to_string(),
                    "needs enable_batching",
                ))
            }
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .map_err(|_| invalid("batching_parameters_file", path.display().to_string(), "cannot be read"))?;
                BatchParams::from_textproto(&text).map_err(|reason| SettingsError::File {
                    name: "batching_parameters_file",
                    path: path.display().to_string(),
                    reason,
                })?
            }
            None => (BatchParams::default(), None),
        };
        let params = ParamsOverride {
            max_batch_size: batching.max_batch_size,
            batch_timeout_micros: batching.batch_timeout_micros,
            max_enqueued_batches: batching.max_enqueued_batches,
            target_latency_micros: match batching.batching_target_latency_ms {
                Some(ms) if !(ms.is_finite() && ms >= 0.0) => {
                    return Err(invalid(
                        "batching_target_latency_ms",
                        ms.to_string(),
                        "must be a number of milliseconds, 0 or more",
                    ))
                }
                Some(ms) => Some((ms * 1000.0).round() as u64),
                None => None,
            },
            target_percentile: batching.batching_target_percentile,
            late_action: batching.batching_late_action,
            queue_timeout_micros: batching.queue_timeout_micros,
            ..ParamsOverride::default()
        }
        .apply(&file_params);
        let threads = batching.num_batch_threads.or(file_threads).unwrap_or_else(cores);
        if threads == 0 {
            return Err(invalid("num_batch_threads", "0".into(), "must be at least 1"));
        }
        if batching.enable_batching {
            params.validate("").map_err(SettingsError::Batching)?;
            for (model, overrides) in &batching.model_batching {
                overrides
                    .apply(&params)
                    .validate(&format!(" for model {model}"))
                    .map_err(SettingsError::Batching)?;
            }
        }
        Ok((batching.enable_batching, params, threads))
    }
}
