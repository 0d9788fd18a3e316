//! A model's own pre/post-processing, as the SageMaker container runs it:
//! `code/inference.py` with `handler(data, context)` or the
//! `input_handler`/`output_handler` pair, its `code/lib` or
//! `code/requirements.txt`, and invocations routed through it.

mod process;
mod supervisor;
mod workers;

pub use workers::WorkerSettings;

use std::collections::HashMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, SystemTime};

use crate::status::{Code, HasCode};
use percent_encoding::{utf8_percent_encode, NON_ALPHANUMERIC};

/// Where handlers come from and how the Python workers run them.
#[derive(Clone, Debug)]
pub struct HandlerSettings {
    /// One `inference.py` for every model (`--handler_path`), instead of each model's `code/`.
    pub handler_path: Option<PathBuf>,
    /// The `code/` shared by every model of a SageMaker single-model archive
    /// holding several models (`/opt/ml/model/code`).
    pub shared_code_dir: Option<PathBuf>,
    /// Where each model's `requirements.txt` is installed.
    pub deps_dir: PathBuf,
    pub workers: WorkerSettings,
}

/// What the handler chain answers: the body and, when the handler named one,
/// its content type.
#[derive(Debug)]
pub struct Answer {
    pub body: Vec<u8>,
    pub content_type: Option<String>,
}

/// SageMaker's `Context` fields for one call.
#[derive(Clone, Debug)]
pub struct CallContext {
    pub model_name: String,
    pub model_version: Option<String>,
    pub method: String,
    pub rest_uri: String,
    pub custom_attributes: String,
    pub request_content_type: String,
    pub accept_header: String,
    pub content_length: usize,
    /// tfserve's gRPC port on the loopback address, as the container's `grpc_port`.
    pub grpc_port: String,
}

#[derive(Debug, thiserror::Error)]
pub enum HandlerError {
    /// A handler raised; the status it carried (500 otherwise) and its message.
    #[error("{message}")]
    Raised { status: u16, message: String },
    #[error("model {model}: cannot load {path}: {message}")]
    Load {
        model: String,
        path: String,
        message: String,
    },
    #[error("all Python handler workers are busy and {0} calls are waiting (python_workers); retry later")]
    QueueFull(usize),
    #[error("the Python handler workers have stopped")]
    Stopped,
    #[error("request timed out after {0} ms (rest_api_timeout_in_ms)")]
    Timeout(u64),
}

impl HasCode for HandlerError {
    fn code(&self) -> Code {
        match self {
            HandlerError::Raised { status, .. } => Code::Handler(*status),
            HandlerError::Load { .. } => Code::Internal,
            HandlerError::QueueFull(_) | HandlerError::Stopped => Code::Unavailable,
            HandlerError::Timeout(_) => Code::DeadlineExceeded,
        }
    }
}

/// The error of a handler chain's model step: the caller's own type, so this
/// module needs nothing from the layers above it.
pub trait StepError: From<HandlerError> + std::fmt::Display {
    /// The HTTP status `output_handler` sees as `response.status_code`.
    fn status_code(&self) -> u16;
}

/// A model's loaded handlers.
pub enum ModelHandlers {
    Python(Arc<workers::Loaded>),
    /// The model's handlers failed to load on a config re-read.
    Broken(String),
}

/// Every model's handlers, and the Python workers, started with the first model that has some.
pub struct HandlerSet {
    settings: HandlerSettings,
    models: RwLock<HashMap<String, Arc<ModelHandlers>>>,
    /// Which file (and its modification time) each model's handlers came
    /// from, so that config re-reads reload only what changed.
    origins: Mutex<HashMap<String, (PathBuf, Option<SystemTime>)>>,
    /// `http://[user:password@]127.0.0.1:<port>` once the server listens, for `context.rest_uri`.
    rest_base: RwLock<String>,
    /// The gRPC port, once it listens, for `context.grpc_port`/`grpc_uri`.
    grpc_port: std::sync::atomic::AtomicU16,
    workers: std::sync::OnceLock<Result<workers::Pool, String>>,
}

impl HandlerSet {
    pub fn new(settings: HandlerSettings) -> HandlerSet {
        HandlerSet {
            settings,
            models: RwLock::new(HashMap::new()),
            origins: Mutex::new(HashMap::new()),
            rest_base: RwLock::new("http://127.0.0.1:8080".into()),
            grpc_port: std::sync::atomic::AtomicU16::new(0),
            workers: std::sync::OnceLock::new(),
        }
    }

    /// The `inference.py` serving a model whose versions live in `base_path`.
    pub fn handler_file(&self, base_path: &Path) -> Option<PathBuf> {
        if let Some(path) = &self.settings.handler_path {
            return Some(path.clone());
        }
        let own = base_path.join("code").join("inference.py");
        if own.is_file() {
            return Some(own);
        }
        let shared = self.settings.shared_code_dir.as_ref()?.join("inference.py");
        (shared.is_file() && base_path.parent() == self.settings.shared_code_dir.as_ref()?.parent()).then_some(shared)
    }

    /// Loads the handlers of `model` if it ships any (installing its
    /// requirements first); forgets earlier ones otherwise. Blocks.
    pub fn prepare(&self, model: &str, base_path: &Path) -> Result<bool, HandlerError> {
        let Some(file) = self.handler_file(base_path) else {
            self.remove(model);
            return Ok(false);
        };
        let handlers = self.load(model, &file)?;
        log::info!("model {model}: requests go through {}", file.display());
        let replaced = self
            .models
            .write()
            .ok()
            .and_then(|mut models| models.insert(model.to_string(), Arc::new(handlers)));
        self.release(replaced, true);
        if let Ok(mut origins) = self.origins.lock() {
            origins.insert(model.to_string(), (file.clone(), modified(&file)));
        }
        Ok(true)
    }

    /// Follows a config (re)load: loads handlers that are new or whose file
    /// changed, drops those of models no longer served. Failures are logged
    /// and leave the model without handlers, which then answers 500s naming them.
    pub fn sync(&self, sources: &[crate::model_config::ModelSource]) {
        let current = self.origins.lock().map(|o| o.clone()).unwrap_or_default();
        for source in sources {
            let file = self.handler_file(&source.base_path);
            let unchanged = match (&file, current.get(&source.name)) {
                (Some(file), Some((loaded, at))) => loaded == file && *at == modified(file),
                (None, None) => true,
                _ => false,
            };
            if unchanged {
                continue;
            }
            if let Err(err) = self.prepare(&source.name, &source.base_path) {
                log::error!("{err}");
                self.remove(&source.name);
                if let Ok(mut models) = self.models.write() {
                    models.insert(source.name.clone(), Arc::new(ModelHandlers::Broken(err.to_string())));
                }
                // Remembered like a load, so only a changed or removed file retries.
                if let (Some(file), Ok(mut origins)) = (file, self.origins.lock()) {
                    let at = modified(&file);
                    origins.insert(source.name.clone(), (file, at));
                }
            }
        }
        for model in current.keys() {
            if !sources.iter().any(|s| &s.name == model) {
                self.remove(model);
            }
        }
    }

    fn load(&self, model: &str, file: &Path) -> Result<ModelHandlers, HandlerError> {
        let failure = |message: String| HandlerError::Load {
            model: model.into(),
            path: file.display().to_string(),
            message,
        };
        let pool = self
            .workers
            .get_or_init(|| workers::Pool::start(self.settings.workers.clone()))
            .as_ref()
            .map_err(|e| failure(e.clone()))?;
        let code = file.parent().unwrap_or(Path::new("."));
        let lib = code.join("lib");
        let requirements = code.join("requirements.txt");
        let mut search_paths = vec![code.to_path_buf()];
        // As documented for the container: code/lib wins over requirements.txt.
        let install = if lib.is_dir() {
            search_paths.insert(0, lib);
            None
        } else if requirements.is_file() {
            // Keyed by the code directory and the file's content: models sharing
            // one code/ share one install, and an edited file installs afresh.
            let text = std::fs::read(&requirements).map_err(|e| failure(e.to_string()))?;
            let key = crc32c::crc32c_append(crc32c::crc32c(code.to_string_lossy().as_bytes()), &text);
            let target = self.settings.deps_dir.join(format!("deps-{key:08x}{:08x}", text.len()));
            search_paths.insert(0, target.clone());
            Some((requirements, target))
        } else {
            None
        };
        let install = install.as_ref().map(|(r, t)| (r.as_path(), t.as_path()));
        let module = format!("tfserve_handler_{}", safe_name(model));
        let loaded = pool.load(&module, file, &search_paths, install).map_err(failure)?;
        Ok(ModelHandlers::Python(Arc::new(loaded)))
    }

    pub fn remove(&self, model: &str) {
        let removed = self.models.write().ok().and_then(|mut models| models.remove(model));
        if let Ok(mut origins) = self.origins.lock() {
            origins.remove(model);
        }
        self.release(removed, false);
    }

    /// Lets the workers forget handlers no longer in use (`replaced`: by a
    /// newer load of the same model).
    fn release(&self, handlers: Option<Arc<ModelHandlers>>, replaced: bool) {
        if let (Some(handlers), Some(Ok(pool))) = (handlers, self.workers.get()) {
            if let ModelHandlers::Python(loaded) = &*handlers {
                pool.unload(loaded, replaced);
            }
        }
    }

    /// Whether no model has handlers.
    pub fn is_empty(&self) -> bool {
        self.models.read().map(|m| m.is_empty()).unwrap_or(true)
    }

    pub fn get(&self, model: &str) -> Option<Arc<ModelHandlers>> {
        self.models.read().ok()?.get(model).cloned()
    }

    /// Records where handlers reach tfserve's REST API: a plain-HTTP
    /// address, and the basic-auth credentials when auth is on.
    pub fn set_rest_address(&self, addr: std::net::SocketAddr, credentials: Option<(&str, &str)>) {
        let host = match addr.ip() {
            ip if ip.is_unspecified() && ip.is_ipv6() => "[::1]".to_string(),
            ip if ip.is_unspecified() => "127.0.0.1".to_string(),
            std::net::IpAddr::V6(ip) => format!("[{ip}]"),
            std::net::IpAddr::V4(ip) => ip.to_string(),
        };
        let userinfo = credentials
            .map(|(user, password)| format!("{}:{}@", encode(user), encode(password)))
            .unwrap_or_default();
        if let Ok(mut base) = self.rest_base.write() {
            *base = format!("http://{userinfo}{host}:{}", addr.port());
        }
    }

    /// Records the gRPC listener's address (handlers reach it on the loopback).
    pub fn set_grpc_address(&self, addr: std::net::SocketAddr) {
        self.grpc_port.store(addr.port(), std::sync::atomic::Ordering::Relaxed);
    }

    /// The gRPC port as the container's `context.grpc_port` gives it (a string).
    pub fn grpc_port(&self) -> String {
        match self.grpc_port.load(std::sync::atomic::Ordering::Relaxed) {
            0 => String::new(),
            port => port.to_string(),
        }
    }

    /// tfserve's own TF Serving REST route for a model, version and method.
    pub fn rest_uri(&self, model: &str, version: Option<&str>, method: &str) -> String {
        let base = self.rest_base.read().map(|b| b.clone()).unwrap_or_default();
        let model = encode(model);
        match version {
            Some(v) => format!("{base}/v1/models/{model}/versions/{}:{method}", encode(v)),
            None => format!("{base}/v1/models/{model}:{method}"),
        }
    }

    /// Runs one invocation through a model's handlers: `handler` alone, or
    /// `input_handler` → the model in process (`run_model`, given the TF
    /// Serving body and answering its body or error) → `output_handler`.
    pub async fn invoke<F, Fut, E>(
        &self,
        handlers: &ModelHandlers,
        context: CallContext,
        body: Vec<u8>,
        timeout: Duration,
        run_model: F,
    ) -> Result<Answer, E>
    where
        F: FnOnce(Vec<u8>) -> Fut,
        Fut: Future<Output = Result<Vec<u8>, E>>,
        E: StepError,
    {
        let loaded = match handlers {
            ModelHandlers::Broken(message) => {
                return Err(HandlerError::Raised {
                    status: 500,
                    message: message.clone(),
                }
                .into())
            }
            ModelHandlers::Python(loaded) => loaded,
        };
        let pool = match self.workers.get() {
            Some(Ok(pool)) => pool,
            _ => return Err(HandlerError::Stopped.into()),
        };
        let deadline = workers::Deadline {
            at: tokio::time::Instant::now() + timeout,
            millis: timeout.as_millis() as u64,
        };
        if loaded.has_handler {
            return Ok(pool.call_handler(loaded, body, context, deadline).await?);
        }
        let request = pool.call_input(loaded, body, context.clone(), deadline).await?;
        // The model's answer goes to output_handler whatever it is, as
        // the container relays TF Serving's response.
        let answer = tokio::time::timeout_at(deadline.at, run_model(request))
            .await
            .map_err(|_| E::from(HandlerError::Timeout(deadline.millis)))?;
        let (status, content) = match answer {
            Ok(content) => (200, content),
            Err(err) => (
                err.status_code(),
                serde_json::json!({ "error": err.to_string() }).to_string().into_bytes(),
            ),
        };
        Ok(pool.call_output(loaded, status, content, context, deadline).await?)
    }
}

/// Everything but RFC 3986's unreserved characters.
const SEGMENT: &percent_encoding::AsciiSet = &NON_ALPHANUMERIC.remove(b'-').remove(b'_').remove(b'.').remove(b'~');

fn encode(segment: &str) -> String {
    utf8_percent_encode(segment, SEGMENT).to_string()
}

fn modified(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

/// A model name as a Python module and directory name.
fn safe_name(model: &str) -> String {
    model
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect()
}

#[cfg(test)]
mod tests;
