//! TensorFlow's settings: session options, devices and libraries.

use std::path::PathBuf;

use clap::{ArgAction, Args};
use serde::{Deserialize, Serialize};

use super::groups::{boolean, clap_defaults};
use crate::runtime::precision::PrecisionChoice;

impl Default for TensorFlowSettings {
    fn default() -> Self {
        clap_defaults()
    }
}

/// TensorFlow sessions and libraries.
#[derive(Args, Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(default)]
#[command(next_help_heading = "TensorFlow")]
pub struct TensorFlowSettings {
    /// Session options for every model as Simple TensorFlow Serving's JSON, e.g.
    /// '{"intra_op_parallelism_threads": 2, "allow_growth": true}'.
    #[arg(long = "session_config", alias = "session-config", global = true)]
    pub session_config: Option<String>,

    /// Threads one op (a matmul, a convolution) may use; 0 lets TensorFlow
    /// choose. Default: cores / num_batch_threads, so concurrent batches don't
    /// oversubscribe the cores.
    #[arg(
        long = "tensorflow_intra_op_parallelism",
        alias = "tensorflow-intra-op-parallelism",
        global = true
    )]
    pub tensorflow_intra_op_parallelism: Option<i32>,

    /// Threads running independent ops of one run concurrently; 0 lets
    /// TensorFlow choose. Default -1: ops run on the batch thread itself,
    /// which saves a thread handoff per run; 0 where TensorFlow sees a GPU,
    /// so one batch's kernels are launched while another's run.
    #[arg(
        long = "tensorflow_inter_op_parallelism",
        alias = "tensorflow-inter-op-parallelism",
        allow_hyphen_values = true,
        global = true
    )]
    pub tensorflow_inter_op_parallelism: Option<i32>,

    /// Serve on the CPU even where libtensorflow's CUDA build finds GPUs
    /// (every session's GPU device count is 0).
    #[arg(long = "cpu_only", alias = "cpu-only", num_args = 0..=1, default_missing_value = "true", default_value_t = false, action = ArgAction::Set, value_parser = boolean(), global = true)]
    pub cpu_only: bool,

    /// Require a GPU: refuse to start unless TensorFlow sees one. Without it,
    /// a CUDA build whose CUDA libraries fail to load serves on the CPU and
    /// says so only in TensorFlow's log.
    #[arg(long = "gpu", num_args = 0..=1, default_missing_value = "true", default_value_t = false, action = ArgAction::Set, value_parser = boolean(), global = true)]
    pub gpu: bool,

    /// One replica of every model on each of these TensorFlow GPUs (e.g.
    /// `0,1,2,3`), all behind the model's one queue: each batch runs on
    /// whichever replica has the fewest runs in flight. A model's own
    /// `session_config.gpu_ids` overrides it. Default: one replica, where
    /// TensorFlow places it (the first GPU).
    #[arg(long = "gpu_ids", alias = "gpu-ids", value_delimiter = ',', global = true)]
    pub gpu_ids: Vec<u32>,

    /// Splits the first GPU into logical GPUs of these sizes in MiB (e.g.
    /// `20000,20000`), numbered from 0 like physical ones: several replicas
    /// of a small model on one large GPU, each with its own CUDA stream.
    /// Hides the other GPUs.
    #[arg(
        long = "virtual_gpu_memory_mb",
        alias = "virtual-gpu-memory-mb",
        value_delimiter = ',',
        global = true
    )]
    pub virtual_gpu_memory_mb: Vec<f32>,

    /// Where CUDA keeps the kernels it compiles for this GPU from PTX (those
    /// libtensorflow ships no machine code for): kept across restarts, so
    /// only the first start on a new GPU model pays for compiling them. Sets
    /// CUDA_CACHE_PATH and a 4 GiB CUDA_CACHE_MAXSIZE before CUDA starts.
    /// XLA's compiled clusters (session_config's `xla_jit`) are kept in its
    /// `xla` folder. Default: CUDA's own (~/.nv/ComputeCache, 256 MiB at
    /// most), and no XLA cache.
    #[arg(long = "gpu_compile_cache_dir", alias = "gpu-compile-cache-dir", global = true)]
    pub gpu_compile_cache_dir: Option<PathBuf>,

    /// Custom op libraries loaded before any model: a comma-separated list of
    /// `.so` files or directories (every `*.so` in them).
    #[arg(long = "custom_op_paths", alias = "custom-op-paths", global = true)]
    pub custom_op_paths: Option<String>,

    /// Every model's compute-heavy ops rewritten to a reduced precision:
    /// `bfloat16` (TF Serving's flag: oneDNN's bfloat16 kernels, on a CPU
    /// with AVX512_BF16, AMX or ARM's BF16) or `float16` (NVIDIA GPUs of
    /// compute capability 7.0 or more). A host without them refuses the
    /// model at load. `auto`: each model runs the mode a trial at load
    /// finds fastest among those this host has (FP32 and those above, each
    /// with and without XLA) whose answers stay within its tolerance of
    /// FP32's (docs/precision.md). A model's `session_config.mixed_precision`
    /// overrides it (`float32`: none). Default: none.
    #[arg(long = "mixed_precision", alias = "mixed-precision", global = true)]
    pub mixed_precision: Option<PrecisionChoice>,
}
