//! Session options (thread pools, GPU memory) serialized as TensorFlow's
//! `ConfigProto`, the only form the C API accepts.

use prost::Message;

use super::precision::{MixedPrecision, Tolerance};

#[derive(Clone, Debug, Default, PartialEq)]
pub struct SessionConfig {
    /// Threads for one op's parallel kernels; 0 lets TensorFlow choose.
    pub intra_op_parallelism: i32,
    /// Threads running independent ops concurrently; 0 lets TensorFlow choose.
    pub inter_op_parallelism: i32,
    /// Fraction of each GPU's memory to reserve at start; 0 lets TensorFlow choose.
    pub per_process_gpu_memory_fraction: f64,
    /// Grow GPU memory on demand instead of reserving it up front.
    pub gpu_allow_growth: bool,
    /// Log the device each op is placed on.
    pub log_device_placement: bool,
    /// Refuse graphs whose ops name a device this host lacks (off by default:
    /// graphs exported on a GPU host still load on a CPU-only one).
    pub strict_placement: bool,
    /// Hide every GPU from the session (a CUDA build serving on the CPU).
    pub cpu_only: bool,
    /// The TensorFlow GPUs a model gets one replica on (`--gpu_ids`, or the
    /// model's `gpu_ids`); empty: one replica, placed by TensorFlow.
    pub gpu_ids: Vec<u32>,
    /// The device this session's graph is pinned to (one replica's GPU); set
    /// by the loader of replicas, not by users.
    pub device: Option<String>,
    /// Splits the first GPU into logical GPUs of these sizes (MiB), which
    /// replicas can be placed on like physical ones. TensorFlow makes its GPU
    /// devices once per process, so this is the same for every session.
    pub virtual_gpu_memory_mb: Vec<f32>,
    /// Compile clusters of the graph with XLA (TensorFlow's auto-clustering,
    /// on the GPU and the CPU): fused kernels instead of one launch per op,
    /// paid for by a compile per batch shape, at warm-up.
    pub xla_jit: bool,
    /// A reduced-precision rewrite of the graph's compute-heavy ops.
    pub mixed_precision: Option<MixedPrecision>,
    /// `mixed_precision: auto`: the precision and XLA are chosen by a trial
    /// at load (`crate::modes`).
    pub choose_mode: bool,
    /// How far the trial lets a mode's answers stray from FP32's.
    pub mode_tolerance: Tolerance,
}

#[derive(Clone, PartialEq, prost::Message)]
struct ConfigProto {
    #[prost(map = "string, int32", tag = "1")]
    device_count: std::collections::HashMap<String, i32>,
    #[prost(int32, tag = "2")]
    intra_op_parallelism_threads: i32,
    #[prost(int32, tag = "5")]
    inter_op_parallelism_threads: i32,
    #[prost(message, optional, tag = "6")]
    gpu_options: Option<GpuOptions>,
    #[prost(bool, tag = "7")]
    allow_soft_placement: bool,
    #[prost(bool, tag = "8")]
    log_device_placement: bool,
    #[prost(message, optional, tag = "10")]
    graph_options: Option<GraphOptions>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct GraphOptions {
    #[prost(message, optional, tag = "3")]
    optimizer_options: Option<OptimizerOptions>,
    #[prost(message, optional, tag = "10")]
    rewrite_options: Option<RewriterConfig>,
}

/// Grappler's switches; each is a `Toggle`, where 1 is ON.
#[derive(Clone, PartialEq, prost::Message)]
struct RewriterConfig {
    /// float16 on NVIDIA GPUs.
    #[prost(int32, tag = "23")]
    auto_mixed_precision: i32,
    /// bfloat16 with oneDNN's kernels on the CPU.
    #[prost(int32, tag = "31")]
    auto_mixed_precision_onednn_bfloat16: i32,
}

#[derive(Clone, PartialEq, prost::Message)]
struct OptimizerOptions {
    /// `GlobalJitLevel`: 1 is ON_1, auto-clustering on.
    #[prost(int32, tag = "5")]
    global_jit_level: i32,
    /// Without it, ON_1 clusters only ops placed on a GPU.
    #[prost(bool, tag = "7")]
    cpu_global_jit: bool,
}

#[derive(Clone, PartialEq, prost::Message)]
struct GpuOptions {
    #[prost(double, tag = "1")]
    per_process_gpu_memory_fraction: f64,
    #[prost(bool, tag = "4")]
    allow_growth: bool,
    #[prost(string, tag = "5")]
    visible_device_list: String,
    #[prost(message, optional, tag = "9")]
    experimental: Option<GpuExperimental>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct GpuExperimental {
    /// One entry per visible physical GPU.
    #[prost(message, repeated, tag = "1")]
    virtual_devices: Vec<VirtualDevices>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct VirtualDevices {
    #[prost(float, repeated, tag = "1")]
    memory_limit_mb: Vec<f32>,
}

impl SessionConfig {
    pub fn to_config_proto(&self) -> Vec<u8> {
        let split = !self.virtual_gpu_memory_mb.is_empty();
        let gpu = GpuOptions {
            per_process_gpu_memory_fraction: self.per_process_gpu_memory_fraction,
            // Each logical GPU takes its fixed share up front; growth has nothing to add.
            allow_growth: self.gpu_allow_growth && !split,
            // TensorFlow wants one virtual-device entry per visible GPU: the split
            // applies to the first GPU, so only that one is made visible.
            visible_device_list: if split { "0".into() } else { String::new() },
            experimental: split.then(|| GpuExperimental {
                virtual_devices: vec![VirtualDevices {
                    memory_limit_mb: self.virtual_gpu_memory_mb.clone(),
                }],
            }),
        };
        ConfigProto {
            device_count: if self.cpu_only {
                [("GPU".to_string(), 0)].into_iter().collect()
            } else {
                Default::default()
            },
            intra_op_parallelism_threads: self.intra_op_parallelism,
            inter_op_parallelism_threads: self.inter_op_parallelism,
            gpu_options: (gpu != GpuOptions::default()).then_some(gpu),
            allow_soft_placement: !self.strict_placement,
            log_device_placement: self.log_device_placement,
            graph_options: self.graph_options(),
        }
        .encode_to_vec()
    }

    fn graph_options(&self) -> Option<GraphOptions> {
        const ON: i32 = 1;
        let optimizer_options = self.xla_jit.then_some(OptimizerOptions {
            global_jit_level: 1,
            cpu_global_jit: true,
        });
        let rewrite_options = self.mixed_precision.map(|mode| RewriterConfig {
            auto_mixed_precision: if mode == MixedPrecision::Float16 { ON } else { 0 },
            auto_mixed_precision_onednn_bfloat16: if mode == MixedPrecision::Bfloat16 { ON } else { 0 },
        });
        (optimizer_options.is_some() || rewrite_options.is_some()).then_some(GraphOptions {
            optimizer_options,
            rewrite_options,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_thread_counts() {
        let config = SessionConfig {
            intra_op_parallelism: 2,
            inter_op_parallelism: 1,
            ..Default::default()
        };
        // field 2 = 2, field 5 = 1, field 7 = true
        assert_eq!(config.to_config_proto(), vec![0x10, 2, 0x28, 1, 0x38, 1]);
    }

    #[test]
    fn cpu_only_hides_the_gpus() {
        let config = SessionConfig {
            cpu_only: true,
            gpu_allow_growth: true,
            ..Default::default()
        };
        let decoded = ConfigProto::decode(config.to_config_proto().as_slice()).unwrap();
        assert_eq!(decoded.device_count.get("GPU"), Some(&0));
        assert!(decoded.gpu_options.unwrap().allow_growth);
        let decoded = ConfigProto::decode(SessionConfig::default().to_config_proto().as_slice()).unwrap();
        assert!(decoded.device_count.is_empty());
    }

    #[test]
    fn a_virtual_split_shows_the_first_gpu_as_several() {
        let config = SessionConfig {
            gpu_allow_growth: true,
            virtual_gpu_memory_mb: vec![1024.0, 2048.0],
            ..Default::default()
        };
        let gpu = ConfigProto::decode(config.to_config_proto().as_slice())
            .unwrap()
            .gpu_options
            .unwrap();
        assert_eq!(gpu.visible_device_list, "0");
        assert!(!gpu.allow_growth);
        let devices = gpu.experimental.unwrap().virtual_devices;
        assert_eq!(devices.len(), 1);
        assert_eq!(devices[0].memory_limit_mb, vec![1024.0, 2048.0]);
    }

    #[test]
    fn xla_turns_on_auto_clustering_for_the_gpu_and_the_cpu() {
        let config = SessionConfig {
            xla_jit: true,
            ..Default::default()
        };
        let optimizer = ConfigProto::decode(config.to_config_proto().as_slice())
            .unwrap()
            .graph_options
            .unwrap()
            .optimizer_options
            .unwrap();
        assert_eq!(optimizer.global_jit_level, 1);
        assert!(optimizer.cpu_global_jit);
        let plain = ConfigProto::decode(SessionConfig::default().to_config_proto().as_slice()).unwrap();
        assert_eq!(plain.graph_options, None);
    }

    #[test]
    fn mixed_precision_turns_on_its_grappler_rewrite() {
        let rewrite = |mode| {
            let config = SessionConfig {
                mixed_precision: Some(mode),
                ..Default::default()
            };
            let graph = ConfigProto::decode(config.to_config_proto().as_slice())
                .unwrap()
                .graph_options
                .unwrap();
            assert_eq!(graph.optimizer_options, None);
            graph.rewrite_options.unwrap()
        };
        let cpu = rewrite(MixedPrecision::Bfloat16);
        assert_eq!(
            (cpu.auto_mixed_precision_onednn_bfloat16, cpu.auto_mixed_precision),
            (1, 0)
        );
        let gpu = rewrite(MixedPrecision::Float16);
        assert_eq!(
            (gpu.auto_mixed_precision_onednn_bfloat16, gpu.auto_mixed_precision),
            (0, 1)
        );
    }

    #[test]
    fn encodes_placement_options() {
        let config = SessionConfig {
            log_device_placement: true,
            strict_placement: true,
            ..Default::default()
        };
        // field 8 = true; allow_soft_placement false is the proto default and not written
        assert_eq!(config.to_config_proto(), vec![0x40, 1]);
    }
}
