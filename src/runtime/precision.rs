//! Mixed precision: the reduced-precision graph rewrite a session asks
//! TensorFlow's grappler for (`--mixed_precision`, TF Serving's flag, and a
//! model's `session_config.mixed_precision`), and whether this host runs it
//! fast. A rewrite the hardware only emulates is slower than FP32 and less
//! exact, so a model asking for one on such a host is refused at load with
//! what the host lacks, rather than served slower than it would be without.
//! `auto` leaves the mode to a trial in the background (`crate::modes`),
//! within a tolerance of FP32's answers.

use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum MixedPrecision {
    /// oneDNN's bfloat16 rewrite on the CPU (`auto_mixed_precision_onednn_bfloat16`),
    /// as TF Serving's `--mixed_precision=bfloat16`.
    Bfloat16,
    /// The float16 rewrite for NVIDIA GPUs (`auto_mixed_precision`).
    Float16,
}

impl MixedPrecision {
    pub fn name(self) -> &'static str {
        match self {
            MixedPrecision::Bfloat16 => "bfloat16",
            MixedPrecision::Float16 => "float16",
        }
    }
}

impl std::str::FromStr for MixedPrecision {
    type Err = String;

    fn from_str(text: &str) -> Result<MixedPrecision, String> {
        match text.to_ascii_lowercase().as_str() {
            "bfloat16" => Ok(MixedPrecision::Bfloat16),
            "float16" => Ok(MixedPrecision::Float16),
            other => Err(format!("must be bfloat16 or float16, got '{other}'")),
        }
    }
}

impl std::fmt::Display for MixedPrecision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// What `--mixed_precision` or a model's `session_config.mixed_precision`
/// asks for: one rewrite, or the mode a trial at load finds fastest.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PrecisionChoice {
    Fixed(MixedPrecision),
    Auto,
}

impl std::str::FromStr for PrecisionChoice {
    type Err = String;

    fn from_str(text: &str) -> Result<PrecisionChoice, String> {
        if text.eq_ignore_ascii_case("auto") {
            return Ok(PrecisionChoice::Auto);
        }
        text.parse()
            .map(PrecisionChoice::Fixed)
            .map_err(|_| format!("must be bfloat16, float16 or auto, got '{text}'"))
    }
}

impl std::fmt::Display for PrecisionChoice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PrecisionChoice::Fixed(mode) => f.write_str(mode.name()),
            PrecisionChoice::Auto => f.write_str("auto"),
        }
    }
}

impl Serialize for PrecisionChoice {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for PrecisionChoice {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<PrecisionChoice, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// How far a reduced-precision mode's answers may stray from FP32's for the
/// trial to keep it. The defaults fit classifiers and regressors: 5% of an
/// output's largest magnitude (bfloat16 keeps 8 significant bits, so a deep
/// network's scores move by about 1%), and every row's top class the same.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Tolerance {
    /// The largest |candidate − FP32| over an output, divided by the largest |FP32| in it.
    pub max_relative_error: f64,
    /// The share of rows whose top class (class scores) or whose exact value
    /// (integer and string outputs) matches FP32's.
    pub min_top1_agreement: f64,
}

impl Default for Tolerance {
    fn default() -> Tolerance {
        Tolerance {
            max_relative_error: 0.05,
            min_top1_agreement: 0.99,
        }
    }
}

/// The modes this host runs fast: bfloat16 where the CPU has its
/// instructions, float16 where every GPU has tensor cores.
pub fn fast_here(sees_gpu: bool) -> Vec<MixedPrecision> {
    [MixedPrecision::Bfloat16, MixedPrecision::Float16]
        .into_iter()
        .filter(|&mode| host_lacks(mode, sees_gpu).is_none())
        .collect()
}

/// The processor a measurement was made on: the CPU's model name and core
/// count, and each NVIDIA GPU's name, driver and MIG mode.
pub fn device_description() -> String {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu = cpuinfo
        .lines()
        .find_map(|line| line.strip_prefix("model name").and_then(|rest| rest.split_once(':')))
        .map_or(std::env::consts::ARCH, |(_, name)| name.trim());
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut description = format!("{cpu} ({cores} cores)");
    if let Ok(output) = std::process::Command::new("nvidia-smi")
        .args([
            "--query-gpu=name,driver_version,mig.mode.current",
            "--format=csv,noheader",
        ])
        .output()
    {
        for gpu in String::from_utf8_lossy(&output.stdout)
            .lines()
            .filter(|l| !l.trim().is_empty())
        {
            description += &format!(", {}", gpu.trim());
        }
    }
    description
}

/// What this host lacks to run `mode` fast, or `None` when it has it.
/// `sees_gpu`: TensorFlow's sessions get a GPU here.
pub fn host_lacks(mode: MixedPrecision, sees_gpu: bool) -> Option<String> {
    match mode {
        MixedPrecision::Bfloat16 => {
            let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
            cpu_lacks_bf16(std::env::consts::ARCH, &cpuinfo)
        }
        MixedPrecision::Float16 if !sees_gpu => Some("a GPU: TensorFlow sees none on this host".into()),
        MixedPrecision::Float16 => gpu_lacks_fp16(&nvidia_compute_capabilities()),
    }
}

/// bfloat16 arithmetic in the CPU: AVX512_BF16 or AMX on x86-64, the BF16
/// extension on ARM64 (the instructions oneDNN's bfloat16 kernels use).
fn cpu_lacks_bf16(arch: &str, cpuinfo: &str) -> Option<String> {
    let flags: std::collections::HashSet<&str> = cpuinfo
        .lines()
        .filter(|line| line.starts_with("flags") || line.starts_with("Features"))
        .flat_map(|line| line.split_once(':').map_or("", |(_, list)| list).split_whitespace())
        .collect();
    match arch {
        "x86_64" if flags.contains("avx512_bf16") || flags.contains("amx_bf16") => None,
        "x86_64" => Some("a CPU with AVX512_BF16 or AMX (this one's flags have neither)".into()),
        "aarch64" if flags.contains("bf16") => None,
        "aarch64" => Some("a CPU with ARM's BF16 extension (not among this one's features)".into()),
        other => Some(format!(
            "a CPU with bfloat16 instructions ({other} has none oneDNN uses)"
        )),
    }
}

/// Tensor cores for float16: compute capability 7.0 or more on every GPU.
/// Capabilities unknown (no nvidia-smi) are taken as TensorFlow's word that
/// a GPU is there.
fn gpu_lacks_fp16(capabilities: &[(usize, f32)]) -> Option<String> {
    let (index, capability) = capabilities.iter().find(|(_, capability)| *capability < 7.0)?;
    Some(format!(
        "a GPU of compute capability 7.0 or more (GPU {index} is {capability:.1})"
    ))
}

fn nvidia_compute_capabilities() -> Vec<(usize, f32)> {
    let Ok(output) = std::process::Command::new("nvidia-smi")
        .args(["--query-gpu=compute_cap", "--format=csv,noheader"])
        .output()
    else {
        return Vec::new();
    };
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| line.trim().parse().ok())
        .enumerate()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bfloat16_needs_the_cpus_bf16_instructions() {
        let sapphire = "processor\t: 0\nflags\t\t: fpu avx512f avx512_bf16 amx_bf16\n";
        assert_eq!(cpu_lacks_bf16("x86_64", sapphire), None);
        let skylake = "flags\t\t: fpu avx512f avx512bw\n";
        assert!(cpu_lacks_bf16("x86_64", skylake)
            .unwrap()
            .contains("AVX512_BF16 or AMX"));
        let graviton3 = "Features\t: fp asimd sve bf16 i8mm\n";
        assert_eq!(cpu_lacks_bf16("aarch64", graviton3), None);
        assert!(cpu_lacks_bf16("aarch64", "Features\t: fp asimd\n")
            .unwrap()
            .contains("BF16"));
    }

    #[test]
    fn float16_needs_a_gpu_with_tensor_cores() {
        assert_eq!(gpu_lacks_fp16(&[(0, 9.0), (1, 8.0)]), None);
        assert_eq!(gpu_lacks_fp16(&[]), None);
        assert!(gpu_lacks_fp16(&[(0, 8.0), (1, 6.1)]).unwrap().contains("GPU 1 is 6.1"));
        assert!(host_lacks(MixedPrecision::Float16, false)
            .unwrap()
            .contains("sees none"));
    }

    #[test]
    fn names_parse_as_tf_serving_spells_them() {
        assert_eq!("bfloat16".parse(), Ok(MixedPrecision::Bfloat16));
        assert_eq!("FLOAT16".parse(), Ok(MixedPrecision::Float16));
        assert!("fp8"
            .parse::<MixedPrecision>()
            .unwrap_err()
            .contains("bfloat16 or float16"));
        assert_eq!("Auto".parse(), Ok(PrecisionChoice::Auto));
        assert_eq!("float16".parse(), Ok(PrecisionChoice::Fixed(MixedPrecision::Float16)));
        assert!("fp8"
            .parse::<PrecisionChoice>()
            .unwrap_err()
            .contains("bfloat16, float16 or auto"));
    }
}
