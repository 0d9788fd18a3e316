//! The embedded CPython: a bounded pool of threads that take the GIL only for
//! the length of one handler call, and the calls tfserve makes into
//! `glue.py` (loading a handler module, calling it, reading its errors).

use std::collections::VecDeque;
use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyModule};

use super::{Answer, CallContext, HandlerError};

type Job = Box<dyn FnOnce(Python<'_>) + Send>;

const GLUE: &str = include_str!("glue.py");

/// The interpreter and its worker threads.
pub struct Engine {
    jobs: Arc<JobQueue>,
    glue: Arc<Py<PyModule>>,
}

/// A bounded queue whose idle workers sleep on a condition variable. Channel
/// receivers that spin and yield before sleeping spent a quarter of the CPU
/// in `sched_yield` here, on cores the HTTP threads need.
struct JobQueue {
    jobs: Mutex<VecDeque<Job>>,
    ready: Condvar,
    capacity: usize,
}

/// Runs one call; a panic fails that call alone (its caller sees the pool
/// as stopped for it) and the worker goes on.
fn run_guarded(py: Python<'_>, job: Job) {
    if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job(py))).is_err() {
        log::error!("a Python handler call panicked; the worker continues");
    }
}

impl JobQueue {
    fn push(&self, job: Job) -> Result<(), HandlerError> {
        let mut jobs = self.jobs.lock().unwrap_or_else(|p| p.into_inner());
        if jobs.len() >= self.capacity {
            return Err(HandlerError::QueueFull(self.capacity));
        }
        jobs.push_back(job);
        drop(jobs);
        self.ready.notify_one();
        Ok(())
    }

    fn pop(&self) -> Job {
        let mut jobs = self.jobs.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if let Some(job) = jobs.pop_front() {
                return job;
            }
            jobs = self.ready.wait(jobs).unwrap_or_else(|p| p.into_inner());
        }
    }

    fn try_pop(&self) -> Option<Job> {
        self.jobs.lock().unwrap_or_else(|p| p.into_inner()).pop_front()
    }
}

/// One model's handler functions: `handler`, or the input/output pair.
pub struct Loaded {
    handler: Option<Py<PyAny>>,
    input: Option<Py<PyAny>>,
    output: Option<Py<PyAny>>,
    module: String,
    search_paths: Vec<String>,
}

impl Engine {
    /// Starts the interpreter and `workers` threads fed by a queue of `capacity` calls.
    pub fn start(workers: usize, capacity: usize) -> Result<Engine, String> {
        pyo3::prepare_freethreaded_python();
        let glue = Python::with_gil(|py| -> PyResult<Py<PyModule>> {
            let code = CString::new(GLUE).map_err(|e| pyo3::exceptions::PyValueError::new_err(e.to_string()))?;
            let module = PyModule::from_code(py, &code, c"tfserve_handlers.py", c"tfserve_handlers")?;
            Ok(module.unbind())
        })
        .map_err(|e| format!("cannot start the embedded Python: {e}"))?;
        let jobs = Arc::new(JobQueue {
            jobs: Mutex::new(VecDeque::with_capacity(capacity)),
            ready: Condvar::new(),
            capacity,
        });
        for index in 0..workers.max(1) {
            let queue = jobs.clone();
            std::thread::Builder::new()
                .name(format!("tfserve-python-{index}"))
                .spawn(move || {
                    // The GIL is held only while calls run (and Python releases it in
                    // blocking I/O such as requests to rest_uri), so an idle or waiting
                    // worker never stops the others. Queued calls run back to back.
                    // One Python thread state for the worker's life: entering and
                    // leaving the GIL per call created and freed one each time
                    // (mmap/munmap of its frame stack, TLB shootdowns on every core).
                    Python::with_gil(|py| loop {
                        let job = py.allow_threads(|| queue.pop());
                        run_guarded(py, job);
                        while let Some(next) = queue.try_pop() {
                            run_guarded(py, next);
                        }
                    })
                })
                .map_err(|e| format!("cannot start Python worker threads: {e}"))?;
        }
        Ok(Engine {
            jobs,
            glue: Arc::new(glue),
        })
    }

    /// Runs `call` on a worker with the GIL and the glue module.
    async fn run<T: Send + 'static>(
        &self,
        call: impl FnOnce(Python<'_>, &Bound<'_, PyModule>) -> T + Send + 'static,
    ) -> Result<T, HandlerError> {
        let (sender, receiver) = tokio::sync::oneshot::channel();
        let glue = self.glue.clone();
        let job: Job = Box::new(move |py| {
            // The request timed out or its client left while this waited.
            if sender.is_closed() {
                return;
            }
            let _ = sender.send(call(py, glue.bind(py)));
        });
        self.jobs.push(job)?;
        receiver.await.map_err(|_| HandlerError::Stopped)
    }

    /// Installs `requirements` into `target` (unless an earlier install of the
    /// same file completed there) and imports `file` as `module_name`. Blocks.
    pub fn load(
        &self,
        module_name: &str,
        file: &Path,
        search_paths: &[PathBuf],
        requirements: Option<(&Path, &Path)>,
    ) -> Result<Loaded, String> {
        Python::with_gil(|py| {
            let glue = self.glue.bind(py);
            if let Some((requirements, target)) = requirements {
                install(glue, requirements, target)?;
            }
            let paths: Vec<String> = search_paths.iter().map(|p| p.display().to_string()).collect();
            let loaded = glue
                .call_method1("load", (module_name, file.display().to_string(), paths.clone()))
                .map_err(|e| describe(py, &e))?;
            type Functions = (Option<Py<PyAny>>, Option<Py<PyAny>>, Option<Py<PyAny>>);
            let (handler, input, output): Functions = loaded.extract().map_err(|e| describe(py, &e))?;
            Ok(Loaded {
                handler,
                input,
                output,
                module: module_name.to_string(),
                search_paths: paths,
            })
        })
    }

    /// Forgets a model's module, the helper modules it imported and its paths.
    ///
    /// `replaced`: a newer load of the same model took its module name, so
    /// only the paths' use counts go down.
    pub fn unload(&self, loaded: &Loaded, replaced: bool) {
        Python::with_gil(|py| {
            let module = if replaced { None } else { Some(loaded.module.as_str()) };
            if let Err(e) = self
                .glue
                .bind(py)
                .call_method1("unload", (module, loaded.search_paths.clone()))
            {
                log::warn!("unloading {}: {}", loaded.module, describe(py, &e));
            }
        });
    }

    pub fn has_handler(loaded: &Loaded) -> bool {
        loaded.handler.is_some()
    }

    /// `handler(data, context)`.
    pub async fn call_handler(
        &self,
        loaded: Arc<Loaded>,
        body: Vec<u8>,
        context: CallContext,
    ) -> Result<Answer, HandlerError> {
        self.run(move |py, glue| {
            let handler = loaded.handler.as_ref().map(|h| h.bind(py).clone());
            let context = context.to_python(py, glue)?;
            let result = glue.call_method1("call_handler", (handler, PyBytes::new(py, &body), context));
            answer(py, glue, result)
        })
        .await?
    }

    /// `input_handler(data, context)`: the TF Serving request body it makes.
    pub async fn call_input(
        &self,
        loaded: Arc<Loaded>,
        body: Vec<u8>,
        context: CallContext,
    ) -> Result<Vec<u8>, HandlerError> {
        self.run(move |py, glue| {
            let input = loaded.input.as_ref().map(|h| h.bind(py).clone());
            let context = context.to_python(py, glue)?;
            let result = glue.call_method1("call_input", (input, PyBytes::new(py, &body), context));
            match result {
                Ok(bytes) => bytes_of(py, &bytes),
                Err(e) => Err(raised(py, glue, &e)),
            }
        })
        .await?
    }

    /// `output_handler(response, context)` with the model's status and body.
    pub async fn call_output(
        &self,
        loaded: Arc<Loaded>,
        status: u16,
        content: Vec<u8>,
        context: CallContext,
    ) -> Result<Answer, HandlerError> {
        self.run(move |py, glue| {
            let output = loaded.output.as_ref().map(|h| h.bind(py).clone());
            let context = context.to_python(py, glue)?;
            let result = glue.call_method1("call_output", (output, status, PyBytes::new(py, &content), context));
            answer(py, glue, result)
        })
        .await?
    }
}

impl CallContext {
    fn to_python<'py>(&self, py: Python<'py>, glue: &Bound<'py, PyModule>) -> Result<Bound<'py, PyAny>, HandlerError> {
        // grpc_uri is the container's "localhost:<grpc_port>"; the glue opens `channel` on it.
        let grpc_uri = if self.grpc_port.is_empty() {
            String::new()
        } else {
            format!("localhost:{}", self.grpc_port)
        };
        let fields = (
            self.model_name.as_str(),
            self.model_version.as_deref(),
            self.method.as_str(),
            self.rest_uri.as_str(),
            self.grpc_port.as_str(),
            py.None(),
            self.custom_attributes.as_str(),
            self.request_content_type.as_str(),
            self.accept_header.as_str(),
            self.content_length,
            grpc_uri.as_str(),
        );
        glue.getattr("make_context")
            .and_then(|context| context.call1(fields))
            .map_err(|e| HandlerError::Raised {
                status: 500,
                message: describe(py, &e),
            })
    }
}

fn install(glue: &Bound<'_, PyModule>, requirements: &Path, target: &Path) -> Result<(), String> {
    let failure: String = glue
        .call_method1(
            "install_requirements",
            (requirements.display().to_string(), target.display().to_string()),
        )
        .and_then(|out| out.extract())
        .map_err(|e| describe(glue.py(), &e))?;
    if failure.is_empty() {
        Ok(())
    } else {
        Err(failure)
    }
}

fn answer(
    py: Python<'_>,
    glue: &Bound<'_, PyModule>,
    result: PyResult<Bound<'_, PyAny>>,
) -> Result<Answer, HandlerError> {
    let value = result.map_err(|e| raised(py, glue, &e))?;
    let (body, content_type): (Bound<'_, PyAny>, Option<String>) =
        value.extract().map_err(|e| HandlerError::Raised {
            status: 500,
            message: describe(py, &e),
        })?;
    Ok(Answer {
        body: bytes_of(py, &body)?,
        content_type,
    })
}

fn bytes_of(py: Python<'_>, value: &Bound<'_, PyAny>) -> Result<Vec<u8>, HandlerError> {
    value
        .downcast::<PyBytes>()
        .map(|b| b.as_bytes().to_vec())
        .map_err(|e| HandlerError::Raised {
            status: 500,
            message: describe(py, &PyErr::from(e)),
        })
}

/// The status and message a handler's exception carries (see `glue.error_of`).
fn raised(py: Python<'_>, glue: &Bound<'_, PyModule>, error: &PyErr) -> HandlerError {
    log::warn!("inference.py raised {}", describe(py, error));
    match glue
        .call_method1("error_of", (error.value(py),))
        .and_then(|v| v.extract::<(u16, String)>())
    {
        Ok((status, message)) => HandlerError::Raised { status, message },
        Err(_) => HandlerError::Raised {
            status: 500,
            message: error.to_string(),
        },
    }
}

/// `Type: message`, with the innermost traceback line when there is one.
fn describe(py: Python<'_>, error: &PyErr) -> String {
    let location = error.traceback(py).and_then(|tb| tb.format().ok()).and_then(|text| {
        text.lines()
            .rev()
            .find(|l| l.trim_start().starts_with("File "))
            .map(|l| l.trim().to_string())
    });
    match location {
        Some(at) => format!("{error} ({at})"),
        None => error.to_string(),
    }
}
