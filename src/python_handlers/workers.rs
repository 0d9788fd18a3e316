//! The Python handler workers: a bounded pool of `python3` processes running
//! `glue.py`, each taking one call at a time over its stdin/stdout. A worker
//! that crashes, outlives a call's deadline or grows past its memory bound is
//! replaced, and the replacement loads every model's handlers again, so one
//! bad handler call fails alone and the server never links or embeds Python.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::{json, Value};
use tokio::sync::Semaphore;
use tokio::time::Instant;

use super::process::{answer_of, call_header, Worker};
use super::supervisor::{Replaced, Shared};
use super::{Answer, CallContext, HandlerError};

/// How the workers run.
#[derive(Clone, Debug)]
pub struct WorkerSettings {
    pub python: String,
    pub workers: usize,
    /// Calls waiting for a worker before requests are refused (503).
    pub queue: usize,
    /// A worker whose resident memory passes this after a call is replaced (0: never).
    pub max_rss_bytes: u64,
    /// A worker is replaced after this many calls (0: never).
    pub max_calls: u64,
}

/// A model's handler module as loaded in every worker.
#[derive(Clone, Debug)]
pub struct Loaded {
    pub module: String,
    pub(super) file: PathBuf,
    pub(super) search_paths: Vec<String>,
    /// `handler(data, context)` rather than the input/output pair.
    pub has_handler: bool,
}

/// The workers, the modules each must have, and the queue bound.
pub struct Pool {
    settings: WorkerSettings,
    /// Drives the workers' pipes, whichever runtime (actix worker, gRPC, a
    /// plain thread) the call comes from.
    runtime: tokio::runtime::Handle,
    _stop: tokio::sync::oneshot::Sender<()>,
    shared: Arc<Shared>,
}

impl Pool {
    /// Starts the workers (blocks until each answers). Fails naming the
    /// Python it needs when none can be started.
    pub fn start(settings: WorkerSettings) -> Result<Pool, String> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("tfserve-python-io")
            .enable_all()
            .build()
            .map_err(|e| format!("cannot start the handler workers' I/O thread: {e}"))?;
        let handle = runtime.handle().clone();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        // The runtime lives on a thread of its own so that dropping the pool
        // from inside another runtime never drops a runtime there.
        std::thread::Builder::new()
            .name("tfserve-python-pool".into())
            .spawn(move || {
                runtime.block_on(async move {
                    let _ = stopped.await;
                });
            })
            .map_err(|e| format!("cannot start the handler workers' I/O thread: {e}"))?;
        let count = settings.workers.max(1);
        let shared = Arc::new(Shared {
            idle: Mutex::new(Vec::with_capacity(count)),
            slots: Arc::new(Semaphore::new(0)),
            waiting: AtomicUsize::new(0),
            modules: Mutex::new(BTreeMap::new()),
            next_load: AtomicUsize::new(0),
            python: settings.python.clone(),
            max_rss_bytes: settings.max_rss_bytes,
            max_calls: settings.max_calls,
        });
        let spawner = shared.clone();
        let started: Vec<Result<Worker, String>> = block_on(&handle, async move {
            let starts = (0..count).map(|_| spawner.spawn_worker());
            futures_util::future::join_all(starts).await
        })?;
        for worker in started {
            shared.give_back(worker?);
        }
        Ok(Pool {
            settings,
            runtime: handle,
            _stop: stop,
            shared,
        })
    }

    /// Installs `requirements` into `target` when given, then imports `file`
    /// as `module` in every worker. Waits for calls in flight. Blocks.
    pub fn load(
        &self,
        module: &str,
        file: &Path,
        search_paths: &[PathBuf],
        requirements: Option<(&Path, &Path)>,
    ) -> Result<Loaded, String> {
        let loaded = Loaded {
            module: module.to_string(),
            file: file.to_path_buf(),
            search_paths: search_paths.iter().map(|p| p.display().to_string()).collect(),
            has_handler: false,
        };
        let install = requirements.map(|(r, t)| {
            json!({"op": "install", "requirements": r.display().to_string(), "target": t.display().to_string()})
        });
        let shared = self.shared.clone();
        let count = self.settings.workers.max(1) as u32;
        block_on(&self.runtime, async move {
            let mut workers = shared
                .take_every_worker(count)
                .await
                .ok_or_else(|| "the handler workers have stopped".to_string())?;
            let outcome = shared.load_everywhere(&mut workers, install, loaded).await;
            shared.return_all(workers);
            outcome
        })?
    }

    /// Forgets a model's module in every worker (`replaced`: a newer load
    /// took its name, so only its paths' use counts go down). Blocks.
    pub fn unload(&self, loaded: &Loaded, replaced: bool) {
        let shared = self.shared.clone();
        let module = loaded.module.clone();
        let loaded = loaded.clone();
        let count = self.settings.workers.max(1) as u32;
        let done = block_on(&self.runtime, async move {
            let Some(mut workers) = shared.take_every_worker(count).await else {
                return;
            };
            // A replaced module's entry already belongs to its newer load.
            if let (false, Ok(mut modules)) = (replaced, shared.modules.lock()) {
                modules.retain(|_, m| m.module != loaded.module);
            }
            let request = json!({
                "op": "unload",
                "module": (!replaced).then_some(&loaded.module),
                "search_paths": loaded.search_paths,
            });
            for worker in &mut workers {
                if let Err(e) = worker.exchange(&request, &[]).await {
                    log::warn!("unloading {}: {e}", loaded.module);
                }
            }
            shared.return_all(workers);
        });
        if let Err(e) = done {
            log::warn!("unloading {module}: {e}");
        }
    }

    /// `handler(data, context)`.
    pub async fn call_handler(
        &self,
        loaded: &Loaded,
        body: Vec<u8>,
        context: CallContext,
        deadline: Deadline,
    ) -> Result<Answer, HandlerError> {
        let header = call_header("handler", loaded, &context, None);
        self.call(header, body, deadline).await
    }

    /// `input_handler(data, context)`: the TF Serving request body it makes.
    pub async fn call_input(
        &self,
        loaded: &Loaded,
        body: Vec<u8>,
        context: CallContext,
        deadline: Deadline,
    ) -> Result<Vec<u8>, HandlerError> {
        let header = call_header("input", loaded, &context, None);
        Ok(self.call(header, body, deadline).await?.body)
    }

    /// `output_handler(response, context)` with the model's status and body.
    pub async fn call_output(
        &self,
        loaded: &Loaded,
        status: u16,
        content: Vec<u8>,
        context: CallContext,
        deadline: Deadline,
    ) -> Result<Answer, HandlerError> {
        let header = call_header("output", loaded, &context, Some(status));
        self.call(header, content, deadline).await
    }

    /// Runs one call on an idle worker, on the pool's runtime so that the
    /// worker is replaced at the deadline even when the caller has gone.
    async fn call(&self, header: Value, body: Vec<u8>, deadline: Deadline) -> Result<Answer, HandlerError> {
        let capacity = self.settings.queue;
        if self.shared.waiting.fetch_add(1, Ordering::AcqRel) >= capacity {
            self.shared.waiting.fetch_sub(1, Ordering::AcqRel);
            return Err(HandlerError::QueueFull(capacity));
        }
        let shared = self.shared.clone();
        let task = self.runtime.spawn(async move {
            let permit = tokio::time::timeout_at(deadline.at, shared.slots.clone().acquire_owned()).await;
            shared.waiting.fetch_sub(1, Ordering::AcqRel);
            let permit = match permit {
                Ok(Ok(permit)) => permit,
                Ok(Err(_)) => return Err(HandlerError::Stopped),
                Err(_) => return Err(deadline.error()),
            };
            let Some(mut worker) = shared.idle.lock().ok().and_then(|mut idle| idle.pop()) else {
                return Err(HandlerError::Stopped);
            };
            permit.forget();
            let outcome = tokio::time::timeout_at(deadline.at, worker.exchange(&header, &body)).await;
            match outcome {
                Ok(Ok((reply, out))) => {
                    worker.calls += 1;
                    shared.after_call(worker);
                    answer_of(reply, out)
                }
                Ok(Err(e)) => {
                    let status = worker.exit_status().await;
                    shared.replace(worker, Replaced::Crashed);
                    log::error!("a Python handler worker failed during a call ({e}; {status})");
                    Err(HandlerError::Raised {
                        status: 500,
                        message: format!("the Python handler worker running this call exited ({status})"),
                    })
                }
                Err(_) => {
                    shared.replace(worker, Replaced::TimedOut);
                    Err(deadline.error())
                }
            }
        });
        task.await.map_err(|_| HandlerError::Stopped)?
    }
}

/// When a handler call must have answered, and the setting that said so.
#[derive(Clone, Copy, Debug)]
pub struct Deadline {
    pub at: Instant,
    pub millis: u64,
}

impl Deadline {
    fn error(self) -> HandlerError {
        HandlerError::Timeout(self.millis)
    }
}

/// Runs `work` on the pool's runtime and waits for it from any thread.
fn block_on<T: Send + 'static>(
    runtime: &tokio::runtime::Handle,
    work: impl std::future::Future<Output = T> + Send + 'static,
) -> Result<T, String> {
    let (sender, receiver) = std::sync::mpsc::channel();
    runtime.spawn(async move {
        let _ = sender.send(work.await);
    });
    receiver
        .recv()
        .map_err(|_| "the handler workers' I/O thread has stopped".to_string())
}
