//! The serialized JAX modules a signature runs (`XlaCallModule`, as jax2tf
//! and Keras 3's `export` write every signature): what the audit reads of
//! them, so a version the linked TensorFlow does not run (a serialization
//! version it does not read, a platform it is not placed on, no XLA kernel)
//! is refused by name, and a CPU-only export is kept off a GPU
//! (`registry::servable`).

use super::ModelAudit;
use crate::runtime::graph_view::NodeDef;

/// A serialized JAX module a signature runs: an `XlaCallModule` node, as
/// jax2tf and Keras 3's `export` write every signature.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JaxModule {
    /// Its node, as the path of calls that reach it.
    pub node: String,
    /// The version of its serialization.
    pub version: i64,
    /// The platforms it was exported for (`CPU`, `CUDA`, `ROCM`, `TPU`).
    pub platforms: Vec<String>,
    /// Whether TensorFlow checks the platform it runs on against them (an
    /// export may disable the check).
    pub platform_checked: bool,
}

/// The serialization versions of `XlaCallModule` the linked TensorFlow
/// (2.21) runs: `kVersionMinimumSupported` and `kVersionMaximumSupported` of
/// its `xla_call_module_loader.cc` (Python's
/// `tf.compiler.tf2xla.python.xla.call_module_maximum_supported_version()`
/// prints the maximum).
pub const JAX_MODULE_VERSIONS: std::ops::RangeInclusive<i64> = 4..=10;

/// Where a version with JAX modules runs.
#[derive(Debug, PartialEq, Eq)]
pub enum ModulePlacement {
    /// Where its session places it.
    AsConfigured,
    /// On the CPU of a host whose models run on a GPU, for the reason given.
    Cpu(String),
}

impl JaxModule {
    /// Whether it runs on a GPU: exported for one, or the check disabled.
    pub fn runs_on_gpu(&self) -> bool {
        !self.platform_checked || self.platforms.iter().any(|p| p == "CUDA" || p == "ROCM")
    }

    /// `version 10, platforms CPU (node 'f/XlaCallModule')`.
    pub fn describe(&self) -> String {
        format!(
            "version {}, platforms {}{} (node '{}')",
            self.version,
            self.platforms.join(", "),
            if self.platform_checked { "" } else { " (not checked)" },
            self.node
        )
    }
}

impl ModelAudit {
    /// Why the linked TensorFlow cannot run one of its JAX modules (a
    /// serialization version outside [`JAX_MODULE_VERSIONS`]), or `None`.
    pub fn module_refusal(&self) -> Option<String> {
        let (signature, module) = self
            .modules()
            .find(|(_, m)| !JAX_MODULE_VERSIONS.contains(&m.version))?;
        let (low, high) = (JAX_MODULE_VERSIONS.start(), JAX_MODULE_VERSIONS.end());
        Some(format!(
            "model is refused: signature '{}' runs a serialized JAX module of version {} (node '{}', XlaCallModule), \
             and the linked TensorFlow 2.21 runs versions {low} to {high}: export it again with a JAX release that \
             writes version {high} or lower, or with JAX_EXPORT_CALLING_CONVENTION_VERSION={high} set when exporting",
            signature, module.version, module.node
        ))
    }

    fn modules(&self) -> impl Iterator<Item = (&str, &JaxModule)> {
        self.signatures
            .iter()
            .flat_map(|s| s.modules.iter().map(move |m| (s.signature.as_str(), m)))
    }

    /// Where this version's JAX modules can run, on a session that would
    /// place them on a GPU (`on_gpu`) or not, given the devices the linked
    /// TensorFlow has an `XlaCallModule` kernel for (`None`: unknown, taken
    /// as every device). A module TensorFlow would refuse where it is
    /// placed fails every request ("The current platform CUDA is not among
    /// the platforms required by the module"), so the version moves to the
    /// CPU when that runs every module, and is refused with the reason
    /// otherwise.
    pub fn module_placement(&self, on_gpu: bool, kernels: Option<&[String]>) -> Result<ModulePlacement, String> {
        let Some((signature, first)) = self.modules().next() else {
            return Ok(ModulePlacement::AsConfigured);
        };
        if kernels.is_some_and(|devices| devices.is_empty()) {
            return Err(format!(
                "model is refused: signature '{signature}' runs a serialized JAX module ({}, XlaCallModule), and the \
                 linked TensorFlow has no XlaCallModule kernel (it was built without XLA): serve it with a \
                 TensorFlow build that includes XLA",
                first.describe()
            ));
        }
        let gpu_kernel = kernels.is_none_or(|devices| devices.iter().any(|d| d == "GPU"));
        let moved = if !on_gpu {
            None
        } else if let Some((signature, module)) = self.modules().find(|(_, m)| !m.runs_on_gpu()) {
            Some(format!(
                "signature '{signature}' runs a JAX module exported for {} only ({}); export it for CUDA too to run \
                 it on the GPU",
                module.platforms.join(", "),
                module.describe()
            ))
        } else if !gpu_kernel {
            Some(
                "the linked TensorFlow has no GPU kernel for XlaCallModule (it was built without XLA for GPUs)"
                    .to_string(),
            )
        } else {
            None
        };
        if on_gpu && moved.is_none() {
            return Ok(ModulePlacement::AsConfigured);
        }
        if let Some((signature, module)) = self
            .modules()
            .find(|(_, m)| m.platform_checked && !m.platforms.iter().any(|p| p == "CPU"))
        {
            let because = moved.as_deref().map_or_else(
                || "this server runs it on the CPU".to_string(),
                |why| format!("it would run on the CPU: {why}"),
            );
            return Err(format!(
                "model is refused: signature '{signature}' runs a JAX module exported for {} only ({}), and {because}: \
                 export it again with cpu among its platforms (jax.export's platforms=['cpu', 'cuda'], jax2tf's \
                 native_serialization_platforms=('cpu', 'cuda'))",
                module.platforms.join(", "),
                module.describe()
            ));
        }
        Ok(moved.map_or(ModulePlacement::AsConfigured, ModulePlacement::Cpu))
    }

    /// Whether any signature runs a JAX module.
    pub fn runs_jax_modules(&self) -> bool {
        self.modules().next().is_some()
    }
}

/// The `XlaCallModule` nodes among `nodes`.
pub(super) fn jax_modules(nodes: &[(String, &NodeDef)]) -> Vec<JaxModule> {
    let strings = |node: &NodeDef, name: &str| -> Vec<String> {
        let list = node.attr.get(name).and_then(|v| v.list.as_ref());
        list.map(|l| l.s.iter().map(|s| String::from_utf8_lossy(s).into_owned()).collect())
            .unwrap_or_default()
    };
    nodes
        .iter()
        .filter(|(_, node)| node.op == "XlaCallModule")
        .map(|(path, node)| JaxModule {
            node: path.clone(),
            version: node.attr.get("version").map_or(0, |v| v.i),
            platforms: strings(node, "platforms"),
            platform_checked: !strings(node, "disabled_checks").iter().any(|c| c == "platform"),
        })
        .collect()
}
