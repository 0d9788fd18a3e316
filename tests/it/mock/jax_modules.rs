//! Serialized JAX modules (`XlaCallModule`, as jax2tf and Keras 3's export
//! write every signature) on the mock runtime: what the load reads of them
//! without TensorFlow, `tfserve inspect`'s line, a version the linked
//! TensorFlow does not run refused by name, a CPU-only export placed on
//! the CPU of a host whose models run on a GPU, and an export refused where
//! the linked TensorFlow has no XLA kernel. That the export answers on
//! TensorFlow: `tensorflow/access.rs`.

use crate::common;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use common::{call, repo_path, spawn_server, spawn_server_on, temp_dir, wait_for};
use reqwest::Method;
use serde_json::Value;
use tfserve::runtime::{Loader, Model, RuntimeError, SessionConfig};

const EXPORT: &str = "tests/access/models/jax_export";

/// The export's node attribute `version: 10` as protobuf writes it (the map
/// entry's key, then an AttrValue whose `i` is 10).
const VERSION_10: &[u8] = b"\x0a\x07version\x12\x02\x18\x0a";

/// A copy of the export whose modules say they are of `version` (one byte:
/// the same length, so no enclosing length changes).
fn export_of_version(version: u8) -> PathBuf {
    let base = temp_dir("jax-version");
    common::copy_dir(&repo_path(EXPORT), &base);
    let graph = base.join("1/saved_model.pb");
    let mut bytes = std::fs::read(&graph).unwrap();
    let mut edited = 0;
    let mut at = 0;
    while let Some(found) = bytes[at..].windows(VERSION_10.len()).position(|w| w == VERSION_10) {
        let end = at + found + VERSION_10.len();
        bytes[end - 1] = version;
        edited += 1;
        at = end;
    }
    assert_eq!(edited, 2, "the export has one module per function");
    std::fs::write(&graph, bytes).unwrap();
    base
}

fn settled(url: &str, name: &str) -> Value {
    let mut last = Value::Null;
    wait_for(&format!("{name} to settle"), || {
        last = call(Method::GET, &format!("{url}/v1/models/{name}"), None).1["model_version_status"][0].clone();
        last["state"] == "END" || last["state"] == "AVAILABLE"
    });
    last
}

#[test]
fn inspect_shows_each_modules_version_and_platforms() {
    let report = tfserve::inspect::report(&repo_path(EXPORT).join("1")).unwrap();
    assert!(
        report.contains("  JAX module (XlaCallModule): version 10, platforms CPU (node '"),
        "{report}"
    );
    let report = tfserve::inspect::report(&export_of_version(11).join("1")).unwrap();
    assert!(
        report.contains("version 11, platforms CPU") && report.contains("the linked TensorFlow 2.21 does not run"),
        "{report}"
    );
}

#[test]
fn a_module_of_a_version_tensorflow_does_not_run_is_refused_by_name() {
    let url = format!(
        "http://{}",
        spawn_server(common::model_settings("jax", export_of_version(11)))
    );
    let version = settled(&url, "jax");
    assert_eq!(version["state"], "END", "{version}");
    let message = version["status"]["error_message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with("model is refused: signature 'serving_default' runs a serialized JAX module of version 11")
            && message.contains("the linked TensorFlow 2.21 runs versions 4 to 10")
            && message.contains("JAX_EXPORT_CALLING_CONVENTION_VERSION=10"),
        "{message}"
    );
    // The export as written loads.
    let url = format!(
        "http://{}",
        spawn_server(common::model_settings("jax", repo_path(EXPORT)))
    );
    assert_eq!(settled(&url, "jax")["state"], "AVAILABLE");
}

/// A runtime whose sessions get a GPU, recording whether each load was
/// asked to keep to the CPU.
struct GpuHost {
    cpu_only: Mutex<Vec<(PathBuf, bool)>>,
}

impl Loader for GpuHost {
    fn load(&self, dir: &Path, tags: &[String], session: &SessionConfig) -> Result<Arc<dyn Model>, RuntimeError> {
        self.cpu_only
            .lock()
            .unwrap()
            .push((dir.to_path_buf(), session.cpu_only));
        common::loader().load(dir, tags, session)
    }

    fn sees_gpu(&self) -> bool {
        true
    }
}

#[test]
fn a_cpu_only_export_runs_on_the_cpu_of_a_gpu_host() {
    let host = Arc::new(GpuHost {
        cpu_only: Mutex::new(Vec::new()),
    });
    let settings = common::model_settings("jax", repo_path(EXPORT));
    let url = format!("http://{}", spawn_server_on(settings, host.clone()));
    assert_eq!(settled(&url, "jax")["state"], "AVAILABLE");
    let loads = host.cpu_only.lock().unwrap().clone();
    assert!(!loads.is_empty() && loads.iter().all(|(_, cpu)| *cpu), "{loads:?}");
    // A model without JAX modules keeps the GPU.
    let host = Arc::new(GpuHost {
        cpu_only: Mutex::new(Vec::new()),
    });
    let settings = common::model_settings("half", repo_path("models/half_plus_three"));
    let url = format!("http://{}", spawn_server_on(settings, host.clone()));
    assert_eq!(settled(&url, "half")["state"], "AVAILABLE");
    let loads = host.cpu_only.lock().unwrap().clone();
    assert!(!loads.is_empty() && loads.iter().all(|(_, cpu)| !*cpu), "{loads:?}");
}

/// A runtime linked with a TensorFlow built without XLA: no kernel of
/// `XlaCallModule` on any device.
struct WithoutXla;

impl Loader for WithoutXla {
    fn load(&self, dir: &Path, tags: &[String], session: &SessionConfig) -> Result<Arc<dyn Model>, RuntimeError> {
        common::loader().load(dir, tags, session)
    }

    fn kernel_devices(&self, op: &str) -> Option<Vec<String>> {
        (op == "XlaCallModule").then(Vec::new)
    }
}

#[test]
fn a_jax_export_is_refused_where_the_linked_tensorflow_has_no_xla() {
    let settings = common::model_settings("jax", repo_path(EXPORT));
    let url = format!("http://{}", spawn_server_on(settings, Arc::new(WithoutXla)));
    let version = settled(&url, "jax");
    assert_eq!(version["state"], "END", "{version}");
    let message = version["status"]["error_message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with("model is refused: signature 'serving_default' runs a serialized JAX module (version 10")
            && message.contains("the linked TensorFlow has no XlaCallModule kernel (it was built without XLA)"),
        "{message}"
    );
    let metrics = reqwest::blocking::get(format!("{url}/metrics"))
        .unwrap()
        .text()
        .unwrap();
    assert!(
        metrics.contains("tfserve_model_loads_refused_total{class=\"jax_module_platform\"}"),
        "{metrics}"
    );
    // A model without JAX modules loads on the same runtime.
    let settings = common::model_settings("half", repo_path("models/half_plus_three"));
    let url = format!("http://{}", spawn_server_on(settings, Arc::new(WithoutXla)));
    assert_eq!(settled(&url, "half")["state"], "AVAILABLE");
}
