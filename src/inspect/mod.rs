//! `tfserve inspect`: what `saved_model_cli show --all` prints, without
//! Python, plus what each signature reaches outside the request (the load
//! audit's classes), a warning for every declared input shape the graph does
//! not enforce, and `--run` to send one request through the server's own path.

pub mod saved_model;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::registry::{discover_versions, VersionSelector};
use crate::service::Trace;
pub use crate::settings::InspectArgs;
use crate::settings::Settings;
use crate::signature::{CLASSIFY_METHOD, REGRESS_METHOD};
use crate::tfs::json as tfs;

/// The SavedModel directory to read and, for `--run`, the base path to serve.
#[derive(Debug, PartialEq)]
pub struct Target {
    pub saved_model: PathBuf,
    /// A base path holding numeric versions, and the version picked.
    pub base_path: Option<(PathBuf, i64)>,
}

pub fn target(dir: &Path) -> Result<Target, String> {
    if dir.join("saved_model.pb").is_file() {
        return Ok(Target {
            saved_model: dir.to_path_buf(),
            base_path: None,
        });
    }
    let versions = discover_versions(dir).map_err(|e| e.to_string())?;
    match versions.last() {
        Some((version, path)) => Ok(Target {
            saved_model: path.clone(),
            base_path: Some((dir.to_path_buf(), *version)),
        }),
        None => Err(format!(
            "{}: neither a SavedModel (no saved_model.pb) nor a model base path (no numeric version directory)",
            dir.display()
        )),
    }
}

/// The `show --all` text for one SavedModel directory.
pub fn report(dir: &Path) -> Result<String, String> {
    let metas = saved_model::read(dir)?;
    let mut out = String::new();
    for meta in &metas {
        let audit = crate::audit::audit(dir, &meta.tags, &[])?;
        let _ = writeln!(
            out,
            "MetaGraphDef with tag-set: '{}' contains the following SignatureDefs:{}\n",
            meta.tags.join(", "),
            if meta.tensorflow_version.is_empty() {
                String::new()
            } else {
                format!(" (written by TensorFlow {})", meta.tensorflow_version)
            }
        );
        for signature in &meta.signatures {
            let _ = writeln!(out, "signature_def['{}']:", signature.name);
            let _ = writeln!(
                out,
                "  The given SavedModel SignatureDef contains the following input(s):"
            );
            for input in &signature.inputs {
                write_tensor(&mut out, "inputs", input);
            }
            let _ = writeln!(
                out,
                "  The given SavedModel SignatureDef contains the following output(s):"
            );
            for output in &signature.outputs {
                write_tensor(&mut out, "outputs", output);
            }
            let _ = writeln!(out, "  Method name is: {}", signature.method_name);
            let audited = audit
                .iter()
                .flat_map(|a| &a.signatures)
                .find(|a| a.signature == signature.name);
            if let Some(audited) = audited {
                let _ = writeln!(out, "  Reaches: {}", reaches_text(&audited.reaches));
                for module in &audited.modules {
                    let runs = match crate::audit::JAX_MODULE_VERSIONS.contains(&module.version) {
                        true => "",
                        false => "; the linked TensorFlow 2.21 does not run this version",
                    };
                    let _ = writeln!(out, "  JAX module (XlaCallModule): {}{runs}", module.describe());
                }
            }
            for warning in signature.inputs.iter().filter_map(saved_model::inexact) {
                let _ = writeln!(out, "  warning: {warning}");
            }
            out.push('\n');
        }
    }
    Ok(out)
}

/// The modes `mixed_precision: auto` chose for this SavedModel, as kept in
/// `cache_root`'s `modes` folder: one block per TensorFlow build, device
/// and setting it was measured under; nothing when none was kept.
pub fn modes_report(dir: &Path, cache_root: &Path) -> Result<String, String> {
    let digest = crate::modes::cache::saved_model_digest(dir)?;
    let folder = cache_root.join("modes");
    let kept = crate::modes::cache::for_saved_model(&folder, &digest);
    let mut out = String::new();
    for (path, entry) in kept {
        let _ = writeln!(
            out,
            "Mode chosen on {} with {} ({}):",
            entry.device,
            entry.tensorflow,
            path.display()
        );
        let mut decision = entry.decision;
        decision.reused = None;
        for line in decision.report("", 0).lines().skip(1) {
            let _ = writeln!(out, "{line}");
        }
        let _ = writeln!(out, "  probes: {}", decision.probes.join(", "));
    }
    Ok(out)
}

/// `files_read: ReadFile (node 'call/ReadFile'), files_write: ...`; the
/// classes `--allow_model_access` and a model's `allow_access` name.
fn reaches_text(reaches: &[crate::audit::Reach]) -> String {
    if reaches.is_empty() {
        return "nothing outside the request".into();
    }
    reaches
        .iter()
        .map(|r| format!("{}: {} (node '{}')", r.class, r.op, r.node))
        .collect::<Vec<_>>()
        .join(", ")
}

fn write_tensor(out: &mut String, map: &str, tensor: &saved_model::TensorEntry) {
    let _ = writeln!(out, "    {map}['{}'] tensor_info:", tensor.key);
    let _ = writeln!(out, "        dtype: {}", tensor.dtype.proto_name());
    let _ = writeln!(out, "        shape: {}", saved_model::format_dims(&tensor.declared));
    let _ = writeln!(out, "        name: {}", tensor.tensor_name);
}

/// Runs one request body through the model exactly as the server would
/// (decoding, batching settings, TensorFlow, encoding). `Ok` is the answer
/// body; `Err` is the HTTP status and the error body the server would send.
pub fn run(
    settings: &Settings,
    loader: std::sync::Arc<dyn crate::runtime::Loader>,
    target: &Target,
    body: &str,
    method: Option<&str>,
) -> Result<String, (u16, String)> {
    let internal = |message: String| (500, error_body(&message));
    let method = match method.map(str::to_ascii_lowercase) {
        Some(m) if m == "predict" => "predict",
        Some(m) if m == "classify" => CLASSIFY_METHOD,
        Some(m) if m == "regress" => REGRESS_METHOD,
        Some(other) => {
            return Err((
                400,
                error_body(&format!("--method must be predict, classify or regress, got '{other}'")),
            ))
        }
        None if body.contains("\"examples\"") => CLASSIFY_METHOD,
        None => "predict",
    };
    let scratch = std::env::temp_dir().join(format!("tfserve-inspect-{}", std::process::id()));
    let base_path = match &target.base_path {
        Some((base, _)) => base.clone(),
        None => scratch_base_path(&scratch, &target.saved_model).map_err(|e| internal(e.to_string()))?,
    };
    let mut settings = settings.clone();
    settings.models = crate::settings::ModelSettings {
        model_name: "model".into(),
        model_base_path: Some(base_path),
        model_config_file: None,
        multi_model: false,
        file_system_poll_wait_seconds: 0,
        model_version_policy: crate::model_config::DefaultVersionPolicy::Latest,
        ..settings.models
    };
    let outcome = actix_web::rt::System::new().block_on(async {
        let (service, batcher) =
            crate::server::build_service(&settings, loader).map_err(|e| internal(e.to_string()))?;
        let mut trace = Trace::default();
        let (selector, body) = (VersionSelector::Latest, body.as_bytes());
        let answer = if method == "predict" {
            tfs::predict(&service, "model", &selector, body, &mut trace).await
        } else {
            tfs::classify_or_regress(&service, "model", &selector, body, method, &mut trace).await
        };
        batcher.shutdown();
        answer
            .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
            .map_err(|e| (e.status().as_u16(), error_body(&e.to_string())))
    });
    let _ = std::fs::remove_dir_all(&scratch);
    outcome
}

/// A bare SavedModel as version 1 of a temporary base path.
fn scratch_base_path(scratch: &Path, saved_model: &Path) -> std::io::Result<PathBuf> {
    let _ = std::fs::remove_dir_all(scratch);
    std::fs::create_dir_all(scratch)?;
    let absolute = std::fs::canonicalize(saved_model)?;
    std::os::unix::fs::symlink(absolute, scratch.join("1"))?;
    Ok(scratch.to_path_buf())
}

fn error_body(message: &str) -> String {
    serde_json::json!({ "error": message }).to_string()
}
