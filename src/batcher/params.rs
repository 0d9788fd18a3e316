//! Batching parameters as TF Serving defines them, their text-format file, and
//! the checks that reject invalid combinations at start-up.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::objective::{LateAction, Objective};
use crate::textproto;

/// Largest batch warmed up when `allowed_batch_sizes` does not list the sizes.
pub const UNLISTED_WARMUP_LIMIT: usize = 64;

/// One queue's batching behaviour. `None` in an override means "inherit".
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct BatchParams {
    /// Largest batch, in rows (the sum of the requests' 0th dimensions).
    pub max_batch_size: usize,
    /// How long an under-full batch waits for more requests, from its first arrival.
    pub batch_timeout_micros: u64,
    /// Batches (open one included) a queue holds before requests get 503.
    pub max_enqueued_batches: usize,
    /// Batch sizes a run may use; batches are padded up to the next one. The
    /// last must equal `max_batch_size`.
    pub allowed_batch_sizes: Vec<usize>,
    /// Pad non-batch dimensions of differently shaped requests to merge them.
    pub pad_variable_length_inputs: bool,
    /// Split requests larger than `max_batch_size` across batches.
    pub enable_large_batch_splitting: bool,
    /// A latency objective for the time requests spend queued and running
    /// (0: none). With it, the batch timeout and the largest batch formed
    /// are chosen online (`max_batch_size` and the allowed sizes still
    /// bound them), and requests that would miss it are refused early.
    pub target_latency_micros: u64,
    /// The share of requests, in percent, the objective is for.
    pub target_percentile: f64,
    /// What becomes of a request the objective predicts late: `reject`
    /// (503 at once) or `serve` (503 only while on-time requests wait, else
    /// run when no on-time batch waits).
    pub late_action: LateAction,
    /// A request still queued this long after it was queued is answered 503
    /// instead of run (Triton's default_timeout_microseconds); 0: no limit.
    pub queue_timeout_micros: u64,
}

impl Default for BatchParams {
    /// TF Serving's defaults for a `--batching_parameters_file` that sets nothing.
    fn default() -> Self {
        BatchParams {
            max_batch_size: 1000,
            batch_timeout_micros: 0,
            max_enqueued_batches: 10,
            allowed_batch_sizes: Vec::new(),
            pad_variable_length_inputs: false,
            enable_large_batch_splitting: false,
            target_latency_micros: 0,
            target_percentile: 99.0,
            late_action: LateAction::default(),
            queue_timeout_micros: 0,
        }
    }
}

#[derive(Debug, thiserror::Error, PartialEq)]
#[error("invalid batching setting {setting}{scope}: {reason}")]
pub struct ParamsError {
    pub setting: &'static str,
    pub scope: String,
    pub reason: String,
}

/// 1, 2, 4, ... below `limit`, then `limit`.
fn powers_of_two_to(limit: usize) -> Vec<usize> {
    let mut sizes: Vec<usize> = std::iter::successors(Some(1usize), |s| s.checked_mul(2))
        .take_while(|&s| s < limit)
        .collect();
    sizes.push(limit);
    sizes
}

impl BatchParams {
    pub fn timeout(&self) -> Duration {
        Duration::from_micros(self.batch_timeout_micros)
    }

    /// How long a request may stay queued (zero: no limit).
    pub fn queue_timeout(&self) -> Duration {
        Duration::from_micros(self.queue_timeout_micros)
    }

    /// The latency objective, when one is set.
    pub fn objective(&self) -> Option<Objective> {
        (self.target_latency_micros > 0).then(|| Objective {
            latency: Duration::from_micros(self.target_latency_micros),
            percentile: self.target_percentile,
        })
    }

    /// `scope` names where the parameters came from, for the error message.
    pub fn validate(&self, scope: &str) -> Result<(), ParamsError> {
        let error = |setting, reason: String| {
            Err(ParamsError {
                setting,
                scope: scope.to_string(),
                reason,
            })
        };
        if self.max_batch_size == 0 {
            return error("max_batch_size", "must be at least 1, got 0".into());
        }
        if !(self.target_percentile > 0.0 && self.target_percentile <= 100.0) {
            return error(
                "target_percentile",
                format!("must be above 0 and at most 100, got {}", self.target_percentile),
            );
        }
        if self.max_enqueued_batches == 0 {
            return error("max_enqueued_batches", "must be at least 1, got 0".into());
        }
        if let Some(last) = self.allowed_batch_sizes.last() {
            if self.allowed_batch_sizes.windows(2).any(|w| w[0] >= w[1]) || self.allowed_batch_sizes[0] == 0 {
                return error(
                    "allowed_batch_sizes",
                    format!(
                        "must be positive and strictly increasing, got {:?}",
                        self.allowed_batch_sizes
                    ),
                );
            }
            if *last != self.max_batch_size {
                return error(
                    "allowed_batch_sizes",
                    format!(
                        "the last entry ({last}) must equal max_batch_size ({})",
                        self.max_batch_size
                    ),
                );
            }
        }
        Ok(())
    }

    /// The size a batch of `rows` runs at: the smallest allowed size that fits.
    pub fn padded_size(&self, rows: usize) -> usize {
        self.allowed_batch_sizes
            .iter()
            .copied()
            .find(|&s| s >= rows)
            .unwrap_or(rows)
    }

    /// Batch sizes to warm up: every allowed size, or, when any size up to the
    /// maximum may run, powers of two and the maximum, up to
    /// `UNLISTED_WARMUP_LIMIT` rows (warming a 1000-row batch of a large model
    /// would take minutes; list `allowed_batch_sizes` to warm exactly those).
    pub fn warmup_sizes(&self) -> Vec<usize> {
        if !self.allowed_batch_sizes.is_empty() {
            return self.allowed_batch_sizes.clone();
        }
        powers_of_two_to(self.max_batch_size.min(UNLISTED_WARMUP_LIMIT))
    }

    /// The parameters a queue runs with on a GPU: unless `allowed_batch_sizes`
    /// lists sizes, batches pad to powers of two (and `max_batch_size`), all
    /// of them warmed before the version serves. A GPU runs a padded row
    /// almost for free, while every batch size it has not seen costs cuDNN an
    /// autotune of each convolution and TensorFlow a new executable: with any
    /// size from 1 to the maximum allowed, a loaded server keeps meeting new
    /// ones, and those stalls, not the model, set its throughput.
    pub fn for_gpu(mut self) -> BatchParams {
        if self.allowed_batch_sizes.is_empty() {
            self.allowed_batch_sizes = powers_of_two_to(self.max_batch_size);
        }
        self
    }

    /// Reads TF Serving's `BatchingParameters` text format, e.g.
    /// `max_batch_size { value: 32 }`. Unset fields keep TF Serving's defaults;
    /// `num_batch_threads` is returned separately because it is global.
    // Kept whole: one line per `BatchingParameters` field.
    pub fn from_textproto(text: &str) -> Result<(BatchParams, Option<usize>), String> {
        let root = textproto::parse(text).map_err(|e| e.to_string())?;
        let raw = |name: &str| {
            root.message(name)
                .and_then(|m| m.scalar("value"))
                .or_else(|| root.scalar(name))
        };
        let wrapped = |name: &str| -> Result<Option<u64>, String> {
            raw(name)
                .map(|v| {
                    v.parse::<u64>()
                        .map_err(|_| format!("{name} must be a non-negative integer, got '{v}'"))
                })
                .transpose()
        };
        let flag = |name: &str| -> Result<bool, String> {
            match raw(name) {
                None => Ok(false),
                Some("true") | Some("1") => Ok(true),
                Some("false") | Some("0") => Ok(false),
                Some(other) => Err(format!("{name} must be true or false, got '{other}'")),
            }
        };
        let known = [
            "max_batch_size",
            "batch_timeout_micros",
            "max_enqueued_batches",
            "num_batch_threads",
            "allowed_batch_sizes",
            "pad_variable_length_inputs",
            "enable_large_batch_splitting",
            "max_execution_batch_size",
            "thread_pool_name",
            "target_latency_micros",
            "target_percentile",
            "late_action",
            "queue_timeout_micros",
        ];
        if let Some(unknown) = root.field_names().find(|n| !known.contains(n)) {
            return Err(format!("unknown batching parameter '{unknown}'"));
        }
        let mut params = BatchParams::default();
        if let Some(v) = wrapped("max_batch_size")? {
            params.max_batch_size = v as usize;
        }
        if let Some(v) = wrapped("batch_timeout_micros")? {
            params.batch_timeout_micros = v;
        }
        if let Some(v) = wrapped("max_enqueued_batches")? {
            params.max_enqueued_batches = v as usize;
        }
        params.allowed_batch_sizes = root
            .scalars("allowed_batch_sizes")
            .map(|v| {
                v.parse::<usize>()
                    .map_err(|_| format!("allowed_batch_sizes entry '{v}' is not an integer"))
            })
            .collect::<Result<_, _>>()?;
        if let Some(v) = wrapped("target_latency_micros")? {
            params.target_latency_micros = v;
        }
        if let Some(v) = raw("target_percentile") {
            params.target_percentile = v
                .parse()
                .map_err(|_| format!("target_percentile must be a number, got '{v}'"))?;
        }
        if let Some(v) = wrapped("queue_timeout_micros")? {
            params.queue_timeout_micros = v;
        }
        if let Some(v) = raw("late_action") {
            params.late_action = v
                .trim_matches('"')
                .parse()
                .map_err(|reason| format!("late_action {reason}"))?;
        }
        params.pad_variable_length_inputs = flag("pad_variable_length_inputs")?;
        params.enable_large_batch_splitting = flag("enable_large_batch_splitting")?;
        let threads = wrapped("num_batch_threads")?.map(|v| v as usize);
        Ok((params, threads))
    }
}

/// Per-model overrides from tfserve's own settings file.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct ParamsOverride {
    pub max_batch_size: Option<usize>,
    pub batch_timeout_micros: Option<u64>,
    pub max_enqueued_batches: Option<usize>,
    pub allowed_batch_sizes: Option<Vec<usize>>,
    pub pad_variable_length_inputs: Option<bool>,
    pub enable_large_batch_splitting: Option<bool>,
    pub target_latency_micros: Option<u64>,
    pub target_percentile: Option<f64>,
    pub late_action: Option<LateAction>,
    pub queue_timeout_micros: Option<u64>,
}

impl ParamsOverride {
    pub fn apply(&self, base: &BatchParams) -> BatchParams {
        BatchParams {
            max_batch_size: self.max_batch_size.unwrap_or(base.max_batch_size),
            batch_timeout_micros: self.batch_timeout_micros.unwrap_or(base.batch_timeout_micros),
            max_enqueued_batches: self.max_enqueued_batches.unwrap_or(base.max_enqueued_batches),
            allowed_batch_sizes: self
                .allowed_batch_sizes
                .clone()
                .unwrap_or_else(|| base.allowed_batch_sizes.clone()),
            pad_variable_length_inputs: self
                .pad_variable_length_inputs
                .unwrap_or(base.pad_variable_length_inputs),
            enable_large_batch_splitting: self
                .enable_large_batch_splitting
                .unwrap_or(base.enable_large_batch_splitting),
            target_latency_micros: self.target_latency_micros.unwrap_or(base.target_latency_micros),
            target_percentile: self.target_percentile.unwrap_or(base.target_percentile),
            late_action: self.late_action.unwrap_or(base.late_action),
            queue_timeout_micros: self.queue_timeout_micros.unwrap_or(base.queue_timeout_micros),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_tf_serving_text_format() {
        let text =
            "max_batch_size { value: 32 }\nbatch_timeout_micros { value: 5000 }\nnum_batch_threads { value: 4 }\n\
                    allowed_batch_sizes: 8\nallowed_batch_sizes: 32\npad_variable_length_inputs: true";
        let (params, threads) = BatchParams::from_textproto(text).unwrap();
        assert_eq!(params.max_batch_size, 32);
        assert_eq!(params.timeout(), Duration::from_millis(5));
        assert_eq!(params.allowed_batch_sizes, vec![8, 32]);
        assert!(params.pad_variable_length_inputs);
        assert_eq!(params.max_enqueued_batches, 10);
        assert_eq!(threads, Some(4));
        assert!(BatchParams::from_textproto("max_batch_size { value: x }").is_err());
        let (params, _) = BatchParams::from_textproto("late_action: REJECT queue_timeout_micros: 2500").unwrap();
        assert_eq!(params.late_action, LateAction::Reject);
        assert_eq!(params.queue_timeout(), Duration::from_micros(2500));
        assert!(BatchParams::from_textproto("late_action: drop")
            .unwrap_err()
            .contains("'drop'"));
        assert!(BatchParams::from_textproto("batch_size { value: 3 }")
            .unwrap_err()
            .contains("batch_size"));
    }

    #[test]
    fn invalid_combinations_name_the_setting() {
        let params = BatchParams {
            max_batch_size: 16,
            allowed_batch_sizes: vec![4, 8],
            ..BatchParams::default()
        };
        let err = params.validate(" for model m").unwrap_err().to_string();
        assert!(
            err.contains("allowed_batch_sizes for model m") && err.contains("16"),
            "{err}"
        );
        let params = BatchParams {
            max_batch_size: 0,
            ..BatchParams::default()
        };
        assert_eq!(params.validate("").unwrap_err().setting, "max_batch_size");
        let params = BatchParams {
            max_batch_size: 8,
            allowed_batch_sizes: vec![4, 2, 8],
            ..BatchParams::default()
        };
        assert!(params.validate("").is_err());
    }

    #[test]
    fn padding_and_warmup_sizes() {
        let params = BatchParams {
            max_batch_size: 32,
            allowed_batch_sizes: vec![4, 16, 32],
            ..BatchParams::default()
        };
        assert_eq!(params.padded_size(3), 4);
        assert_eq!(params.padded_size(5), 16);
        assert_eq!(params.warmup_sizes(), vec![4, 16, 32]);
        let params = BatchParams {
            max_batch_size: 12,
            ..BatchParams::default()
        };
        assert_eq!(params.padded_size(5), 5);
        assert_eq!(params.warmup_sizes(), vec![1, 2, 4, 8, 12]);
        assert_eq!(BatchParams::default().warmup_sizes(), vec![1, 2, 4, 8, 16, 32, 64]);
    }

    #[test]
    fn gpus_pad_to_powers_of_two_unless_sizes_are_listed() {
        let gpu = BatchParams {
            max_batch_size: 96,
            ..Default::default()
        }
        .for_gpu();
        assert_eq!(gpu.allowed_batch_sizes, vec![1, 2, 4, 8, 16, 32, 64, 96]);
        assert!(gpu.validate("").is_ok());
        assert_eq!(gpu.padded_size(33), 64);
        // Every size a GPU queue can run is warmed, past the unlisted limit too.
        assert_eq!(gpu.warmup_sizes(), gpu.allowed_batch_sizes);
        let listed = BatchParams {
            max_batch_size: 8,
            allowed_batch_sizes: vec![4, 8],
            ..Default::default()
        };
        assert_eq!(listed.clone().for_gpu(), listed);
    }
}
