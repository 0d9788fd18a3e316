//! A model's own pre/post-processing, as the SageMaker container runs it:
//! `code/inference.py` with `handler(data, context)` or the
//! `input_handler`/`output_handler` pair, its `code/lib` or
//! `code/requirements.txt`, and invocations routed through it.

#[cfg(feature = "python")]
mod python;

use std::collections::HashMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

/// Where handlers come from and how many Python workers run them.
#[derive(Clone, Debug)]
pub struct HandlerSettings {
    /// One `inference.py` for every model (`--handler_path`), instead of each model's `code/`.
    pub handler_path: Option<PathBuf>,
    /// The `code/` shared by every model of a SageMaker single-model archive
    /// holding several models (`/opt/ml/model/code`).
    pub shared_code_dir: Option<PathBuf>,
    /// Where each model's `requirements.txt` is installed.
    pub deps_dir: PathBuf,
    pub workers: usize,
    /// Handler calls waiting for a worker before requests are refused (503).
    pub queue: usize,
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
    #[error(
        "model {model} ships {path}, but this tfserve was built without Python support (cargo feature \"python\")"
    )]
    Unsupported { model: String, path: String },
    #[error("all Python handler workers are busy and {0} calls are waiting (python_workers); retry later")]
    QueueFull(usize),
    #[error("the Python handler workers have stopped")]
    Stopped,
}

/// A model's loaded handlers.
pub enum ModelHandlers {
    #[cfg(feature = "python")]
    Python(Arc<python::Loaded>),
    /// The model ships handlers this build cannot run.
    Unsupported(PathBuf),
}

/// Every model's handlers, and the interpreter, started with the first model that has some.
pub struct HandlerSet {
    settings: HandlerSettings,
    models: RwLock<HashMap<String, Arc<ModelHandlers>>>,
    /// `http://127.0.0.1:<port>` once the server listens, for `context.rest_uri`.
    rest_base: RwLock<String>,
    #[cfg(feature = "python")]
    engine: std::sync::OnceLock<Result<python::Engine, String>>,
}

impl HandlerSet {
    pub fn new(settings: HandlerSettings) -> HandlerSet {
        HandlerSet {
            settings,
            models: RwLock::new(HashMap::new()),
            rest_base: RwLock::new("http://127.0.0.1:8080".into()),
            #[cfg(feature = "python")]
            engine: std::sync::OnceLock::new(),
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
        if let Ok(mut models) = self.models.write() {
            models.insert(model.to_string(), Arc::new(handlers));
        }
        Ok(true)
    }

    #[cfg(not(feature = "python"))]
    fn load(&self, model: &str, file: &Path) -> Result<ModelHandlers, HandlerError> {
        log::error!(
            "{}",
            HandlerError::Unsupported {
                model: model.into(),
                path: file.display().to_string()
            }
        );
        Ok(ModelHandlers::Unsupported(file.to_path_buf()))
    }

    #[cfg(feature = "python")]
    fn load(&self, model: &str, file: &Path) -> Result<ModelHandlers, HandlerError> {
        let failure = |message: String| HandlerError::Load {
            model: model.into(),
            path: file.display().to_string(),
            message,
        };
        let engine = self
            .engine
            .get_or_init(|| python::Engine::start(self.settings.workers, self.settings.queue))
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
            let text = std::fs::read(&requirements).map_err(|e| failure(e.to_string()))?;
            let target = self.settings.deps_dir.join(format!(
                "{}-{:08x}{:08x}",
                safe_name(model),
                crc32c::crc32c(&text),
                text.len()
            ));
            search_paths.insert(0, target.clone());
            Some((requirements, target))
        } else {
            None
        };
        let install = install.as_ref().map(|(r, t)| (r.as_path(), t.as_path()));
        let module = format!("tfserve_handler_{}", safe_name(model));
        let loaded = engine.load(&module, file, &search_paths, install).map_err(failure)?;
        Ok(ModelHandlers::Python(Arc::new(loaded)))
    }

    pub fn remove(&self, model: &str) {
        if let Ok(mut models) = self.models.write() {
            models.remove(model);
        }
    }

    pub fn get(&self, model: &str) -> Option<Arc<ModelHandlers>> {
        self.models.read().ok()?.get(model).cloned()
    }

    /// Records the address the server listens on.
    pub fn set_listen_address(&self, addr: std::net::SocketAddr) {
        let host = if addr.ip().is_unspecified() {
            "127.0.0.1".to_string()
        } else {
            addr.ip().to_string()
        };
        let host = if addr.is_ipv6() { format!("[{host}]") } else { host };
        if let Ok(mut base) = self.rest_base.write() {
            *base = format!("http://{host}:{}", addr.port());
        }
    }

    /// tfserve's own TF Serving REST route for a model, version and method.
    pub fn rest_uri(&self, model: &str, version: Option<&str>, method: &str) -> String {
        let base = self.rest_base.read().map(|b| b.clone()).unwrap_or_default();
        match version {
            Some(v) => format!("{base}/v1/models/{model}/versions/{v}:{method}"),
            None => format!("{base}/v1/models/{model}:{method}"),
        }
    }

    /// Runs one invocation through a model's handlers: `handler` alone, or
    /// `input_handler` → the model in process (`run_model`, given the TF
    /// Serving body and answering its body or error) → `output_handler`.
    pub async fn invoke<F, Fut>(
        &self,
        handlers: &ModelHandlers,
        context: CallContext,
        body: Vec<u8>,
        run_model: F,
    ) -> Result<Answer, crate::error::ApiError>
    where
        F: FnOnce(Vec<u8>) -> Fut,
        Fut: Future<Output = Result<Vec<u8>, crate::error::ApiError>>,
    {
        #[cfg(not(feature = "python"))]
        let _ = (body, run_model);
        match handlers {
            ModelHandlers::Unsupported(path) => Err(HandlerError::Unsupported {
                model: context.model_name.clone(),
                path: path.display().to_string(),
            }
            .into()),
            #[cfg(feature = "python")]
            ModelHandlers::Python(loaded) => {
                let engine = match self.engine.get() {
                    Some(Ok(engine)) => engine,
                    _ => return Err(HandlerError::Stopped.into()),
                };
                if python::Engine::has_handler(loaded) {
                    return Ok(engine.call_handler(loaded.clone(), body, context).await?);
                }
                let request = engine.call_input(loaded.clone(), body, context.clone()).await?;
                // The model's answer goes to output_handler whatever it is, as
                // the container relays TF Serving's response.
                let (status, content) = match run_model(request).await {
                    Ok(content) => (200, content),
                    Err(err) => (
                        err.status().as_u16(),
                        serde_json::json!({ "error": err.to_string() }).to_string().into_bytes(),
                    ),
                };
                Ok(engine.call_output(loaded.clone(), status, content, context).await?)
            }
        }
    }
}

/// A model name as a Python module and directory name.
#[cfg(feature = "python")]
fn safe_name(model: &str) -> String {
    model
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect()
}
