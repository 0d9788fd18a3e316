//! What a model's entry in a config file may set for it alone: TF Serving's
//! `logging_config`, and session options over the server-wide ones.

use super::*;
use crate::runtime::precision::{MixedPrecision, PrecisionChoice, Tolerance};

/// TF Serving's `LoggingConfig`: the share of requests logged
/// (`sampling_config.sampling_rate`) and where
/// (`log_collector_config.filename_prefix`), as TFRecord files of `PredictionLog`.
#[derive(Clone, Debug, PartialEq)]
pub struct LoggingConfig {
    pub filename_prefix: String,
    pub sampling_rate: f64,
}

impl LoggingConfig {
    fn checked(
        model: &str,
        filename_prefix: Option<&str>,
        sampling_rate: f64,
    ) -> Result<Option<LoggingConfig>, String> {
        let Some(filename_prefix) = filename_prefix.filter(|p| !p.is_empty()) else {
            return Err(format!(
                "model '{model}': logging_config needs log_collector_config.filename_prefix"
            ));
        };
        if !(0.0..=1.0).contains(&sampling_rate) {
            return Err(format!(
                "model '{model}': logging_config.sampling_config.sampling_rate must be between 0 and 1, got {sampling_rate}"
            ));
        }
        Ok(Some(LoggingConfig {
            filename_prefix: filename_prefix.to_string(),
            sampling_rate,
        }))
    }

    pub(super) fn from_textproto(model: &str, config: &Message) -> Result<Option<LoggingConfig>, String> {
        let Some(logging) = config.message("logging_config") else {
            return Ok(None);
        };
        let prefix = logging
            .message("log_collector_config")
            .and_then(|collector| collector.scalar("filename_prefix"));
        // An absent rate is proto3's zero: nothing is logged, as in TF Serving.
        let rate = logging
            .message("sampling_config")
            .and_then(|sampling| sampling.scalar("sampling_rate"))
            .unwrap_or("0");
        let rate = rate.parse::<f64>().map_err(|_| {
            format!("model '{model}': logging_config.sampling_config.sampling_rate must be a number, got '{rate}'")
        })?;
        LoggingConfig::checked(model, prefix, rate)
    }

    /// The protobuf JSON mapping: camelCase or the proto's own names.
    pub(super) fn from_json(model: &str, config: &Json) -> Result<Option<LoggingConfig>, String> {
        let field = |value: &Json, snake: &str, camel: &str| value.get(snake).or_else(|| value.get(camel)).cloned();
        let Some(logging) = field(config, "logging_config", "loggingConfig") else {
            return Ok(None);
        };
        let prefix = field(&logging, "log_collector_config", "logCollectorConfig")
            .and_then(|collector| field(&collector, "filename_prefix", "filenamePrefix"));
        let rate = field(&logging, "sampling_config", "samplingConfig")
            .and_then(|sampling| field(&sampling, "sampling_rate", "samplingRate"))
            .unwrap_or(Json::from(0.0));
        let rate = rate
            .as_f64()
            .or_else(|| rate.as_str().and_then(|s| s.parse().ok()))
            .ok_or(format!(
                "model '{model}': logging_config.sampling_config.sampling_rate must be a number, got {rate}"
            ))?;
        LoggingConfig::checked(model, prefix.as_ref().and_then(Json::as_str), rate)
    }
}

/// Per-model session options; unset fields keep the server-wide values.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SessionOverrides {
    pub intra_op_parallelism: Option<i32>,
    pub inter_op_parallelism: Option<i32>,
    pub per_process_gpu_memory_fraction: Option<f64>,
    pub gpu_allow_growth: Option<bool>,
    pub allow_soft_placement: Option<bool>,
    pub log_device_placement: Option<bool>,
    /// One replica on each of these GPUs (tfserve's own key).
    pub gpu_ids: Option<Vec<u32>>,
    /// XLA auto-clustering (tfserve's own key).
    pub xla_jit: Option<bool>,
    /// A reduced-precision rewrite; `Some(None)`: float32, whatever the server's.
    pub mixed_precision: Option<Option<MixedPrecision>>,
    /// `mixed_precision: auto` (`Some(true)`), or a fixed mode (`Some(false)`).
    pub choose_mode: Option<bool>,
    /// The trial's tolerance (`mode_max_relative_error`, `mode_min_top1_agreement`).
    pub max_relative_error: Option<f64>,
    pub min_top1_agreement: Option<f64>,
}

impl SessionOverrides {
    pub fn apply(&self, base: &SessionConfig) -> SessionConfig {
        SessionConfig {
            intra_op_parallelism: self.intra_op_parallelism.unwrap_or(base.intra_op_parallelism),
            inter_op_parallelism: self.inter_op_parallelism.unwrap_or(base.inter_op_parallelism),
            per_process_gpu_memory_fraction: self
                .per_process_gpu_memory_fraction
                .unwrap_or(base.per_process_gpu_memory_fraction),
            gpu_allow_growth: self.gpu_allow_growth.unwrap_or(base.gpu_allow_growth),
            log_device_placement: self.log_device_placement.unwrap_or(base.log_device_placement),
            strict_placement: self
                .allow_soft_placement
                .map(|soft| !soft)
                .unwrap_or(base.strict_placement),
            cpu_only: base.cpu_only,
            gpu_ids: self.gpu_ids.clone().unwrap_or_else(|| base.gpu_ids.clone()),
            device: base.device.clone(),
            virtual_gpu_memory_mb: base.virtual_gpu_memory_mb.clone(),
            xla_jit: self.xla_jit.unwrap_or(base.xla_jit),
            mixed_precision: self.mixed_precision.unwrap_or(base.mixed_precision),
            choose_mode: self.choose_mode.unwrap_or(base.choose_mode),
            mode_tolerance: Tolerance {
                max_relative_error: self
                    .max_relative_error
                    .unwrap_or(base.mode_tolerance.max_relative_error),
                min_top1_agreement: self
                    .min_top1_agreement
                    .unwrap_or(base.mode_tolerance.min_top1_agreement),
            },
        }
    }

    /// TensorFlow keeps one intra-op thread pool per process, sized by its
    /// first session: a model's own size that differs from the server's
    /// could not take effect, so it is refused rather than ignored.
    pub fn check_shared_pools(&self, base: &SessionConfig) -> Result<(), String> {
        match self.intra_op_parallelism {
            Some(own) if own != base.intra_op_parallelism => Err(format!(
                "session_config.intra_op_parallelism_threads {own} differs from the server's {}: TensorFlow \
                 sizes one intra-op thread pool per process, from its first session, so a model's own size \
                 cannot take effect; set it for every model (--tensorflow_intra_op_parallelism)",
                base.intra_op_parallelism
            )),
            _ => Ok(()),
        }
    }

    /// Reads Simple TensorFlow Serving's `session_config` object.
    // Kept whole: one arm per `session_config` key.
    pub fn from_json(model: &str, config: &Json) -> Result<SessionOverrides, String> {
        let Some(object) = config.as_object() else {
            return Err(format!("model '{model}': session_config must be an object"));
        };
        let known = [
            "intra_op_parallelism_threads",
            "inter_op_parallelism_threads",
            "per_process_gpu_memory_fraction",
            "allow_growth",
            "allow_soft_placement",
            "log_device_placement",
            "gpu_ids",
            "xla_jit",
            "mixed_precision",
            "mode_max_relative_error",
            "mode_min_top1_agreement",
        ];
        if let Some(unknown) = object.keys().find(|k| !known.contains(&k.as_str())) {
            return Err(format!(
                "model '{model}': unknown session_config key '{unknown}' (known: {})",
                known.join(", ")
            ));
        }
        let int = |key: &str| -> Result<Option<i32>, String> {
            object
                .get(key)
                .map(|v| {
                    v.as_i64()
                        .and_then(|n| i32::try_from(n).ok())
                        .ok_or(format!("model '{model}': session_config.{key} must be an integer"))
                })
                .transpose()
        };
        let flag = |key: &str| -> Result<Option<bool>, String> {
            object
                .get(key)
                .map(|v| {
                    v.as_bool()
                        .ok_or(format!("model '{model}': session_config.{key} must be true or false"))
                })
                .transpose()
        };
        // `None`: float32, whatever the server's.
        let precision = object
            .get("mixed_precision")
            .map(|v| {
                match v.as_str() {
                    Some("float32") => Some(None),
                    Some(text) => text.parse().map(Some).ok(),
                    None => None,
                }
                .ok_or(format!(
                "model '{model}': session_config.mixed_precision must be bfloat16, float16, auto or float32, got {v}"
            ))
            })
            .transpose()?;
        let share = |key: &str, most: f64| -> Result<Option<f64>, String> {
            object
                .get(key)
                .map(|v| {
                    v.as_f64().filter(|n| (0.0..=most).contains(n)).ok_or(format!(
                        "model '{model}': session_config.{key} must be a number from 0 to {most}, got {v}"
                    ))
                })
                .transpose()
        };
        Ok(SessionOverrides {
            intra_op_parallelism: int("intra_op_parallelism_threads")?,
            inter_op_parallelism: int("inter_op_parallelism_threads")?,
            per_process_gpu_memory_fraction: object
                .get("per_process_gpu_memory_fraction")
                .map(|v| {
                    v.as_f64().ok_or(format!(
                        "model '{model}': session_config.per_process_gpu_memory_fraction must be a number"
                    ))
                })
                .transpose()?,
            gpu_allow_growth: flag("allow_growth")?,
            allow_soft_placement: flag("allow_soft_placement")?,
            log_device_placement: flag("log_device_placement")?,
            xla_jit: flag("xla_jit")?,
            mixed_precision: precision.map(|choice| match choice {
                Some(PrecisionChoice::Fixed(mode)) => Some(mode),
                _ => None,
            }),
            choose_mode: precision.map(|choice| choice == Some(PrecisionChoice::Auto)),
            max_relative_error: share("mode_max_relative_error", f64::INFINITY)?,
            min_top1_agreement: share("mode_min_top1_agreement", 1.0)?,
            gpu_ids: object
                .get("gpu_ids")
                .map(|v| {
                    v.as_array()
                        .and_then(|ids| {
                            ids.iter()
                                .map(|id| id.as_u64().and_then(|n| u32::try_from(n).ok()))
                                .collect::<Option<Vec<u32>>>()
                        })
                        .ok_or(format!(
                            "model '{model}': session_config.gpu_ids must be a list of GPU numbers (e.g. [0, 1]), got {v}"
                        ))
                })
                .transpose()?,
        })
    }
}
