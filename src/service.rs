//! The protocol-neutral core every dialect calls: resolve a model, version and
//! signature; run tensors through the batcher under the request's deadline;
//! encode outputs into one of the JSON layouts the HTTP dialects share. Each
//! dialect decodes its own bodies (`dialects::*`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use crate::batcher::{BatchError, BatchOutput, Pending};
use crate::capture::{Capture, Draft, LogKind, Record};
use crate::codec::encode::{predict_response, NamedOutput};
use crate::codec::RequestFormat;
use crate::error::ApiError;
use crate::python_handlers::HandlerSet;
use crate::registry::Registry;
// The registry's types, for the dialects: they reach models only through here.
pub use crate::registry::{ModelInfo, RegistryError, Servable, VersionSelector, VersionState, VersionStatus};
use crate::signature::{SignatureSpec, DEFAULT_SIGNATURE};
use crate::tensor::Tensor;

pub struct Service {
    registry: Arc<Registry>,
    /// Models' own `inference.py` handlers (SageMaker invocations only).
    handlers: Arc<HandlerSet>,
    /// Where models loaded over the network may live, and how many.
    limits: ModelLimits,
    timeout: Duration,
    /// `--enable_signature_method_name_check`: classify/regress only on
    /// signatures whose method_name says so, not on any of the right structure.
    method_name_check: bool,
    /// SageMaker's default model (`SAGEMAKER_TFS_DEFAULT_MODEL_NAME`).
    default_model: Option<String>,
    /// Request/response capture, sampled per model.
    capture: Arc<Capture>,
    /// REST bodies and the tensors decoded from them (`--max_in_flight_bytes`).
    body_budget: ByteBudget,
}

/// Tells whether a request's client has gone away.
pub type ClientGone = Box<dyn Fn() -> bool + Send + Sync>;

/// What a request carries through the service (how to tell its client has
/// gone) and what it collects (what it resolved to, where its time went).
#[derive(Default)]
pub struct Trace {
    pub client_gone: Option<ClientGone>,
    /// The request's id (`X-Request-Id`), for log lines about it.
    pub request_id: Option<Arc<str>>,
    pub model: Option<Arc<str>>,
    pub version: Option<i64>,
    /// The signature that ran (shared, not copied, per request).
    pub signature: Option<Arc<SignatureSpec>>,
    pub queue_time: Option<Duration>,
    pub run_time: Option<Duration>,
    pub batch_rows: Option<usize>,
    /// How long the answer waited for the request to take it, once its batch
    /// ran (measured only for a request that gets an access line).
    pub answer_wait: Option<Duration>,
    /// The client's own deadline (gRPC's `grpc-timeout`), when shorter than the server's.
    pub deadline: Option<Duration>,
    /// When its bytes arrived, where its transport measured it (the kernel's
    /// receive stamp, under a latency objective): its deadline counts from
    /// then, not from when it was read.
    pub arrived: Option<Instant>,
    /// The request gets an access line, so its transport wants what it ran.
    pub access_logged: bool,
    /// The body as it arrived (REST), kept for capture.
    pub raw_request: Option<bytes::Bytes>,
    /// The request was sampled for capture: the record so far, for its
    /// transport to finish with the bodies it saw.
    pub capture: Option<Box<Record>>,
    /// The API a capture records the call as (TF Serving's log kinds).
    pub log_kind: LogKind,
    /// What the request's inputs hold of the REST budget: handed to the
    /// batcher with them, given back when their run is over, not when the
    /// request stops waiting for it.
    pub held: Option<crate::batcher::Held>,
}

impl Trace {
    pub fn resolved(&mut self, servable: &Servable, signature: &Arc<SignatureSpec>) {
        self.model = Some(servable.shared_name.clone());
        self.version = Some(servable.version);
        self.signature = Some(signature.clone());
    }

    /// The name of the signature that ran.
    pub fn signature_name(&self) -> Option<&str> {
        self.signature.as_ref().map(|s| s.name.as_str())
    }

    fn ran(&mut self, output: &BatchOutput) {
        self.queue_time = Some(output.queue_time);
        self.run_time = Some(output.run_time);
        self.batch_rows = Some(output.batch_rows);
        if self.access_logged {
            self.answer_wait = Some(output.answered_at.elapsed());
        }
    }
}

impl Service {
    pub fn new(registry: Arc<Registry>, handlers: Arc<HandlerSet>, timeout: Duration) -> Service {
        Service {
            registry,
            handlers,
            limits: ModelLimits::default(),
            timeout,
            method_name_check: false,
            default_model: None,
            capture: Arc::new(Capture::disabled()),
            body_budget: ByteBudget::new(usize::MAX),
        }
    }

    /// The bound on bytes held by requests at once (`--max_in_flight_bytes`).
    pub fn with_body_budget(self, limit: usize) -> Service {
        Service {
            body_budget: ByteBudget::new(limit),
            ..self
        }
    }

    pub fn with_capture(self, capture: Arc<Capture>) -> Service {
        Service { capture, ..self }
    }

    pub fn with_model_limits(self, limits: ModelLimits) -> Service {
        Service { limits, ..self }
    }

    /// Request/response capture: dialects' transports complete and queue records.
    pub fn capture(&self) -> &Arc<Capture> {
        &self.capture
    }

    /// Models' own `inference.py` handlers.
    pub fn handlers(&self) -> &Arc<HandlerSet> {
        &self.handlers
    }

    pub fn with_default_model(self, default_model: Option<String>) -> Service {
        Service { default_model, ..self }
    }

    /// The model SageMaker requests without a model name go to: the
    /// configured default, else the first model by name.
    pub fn default_model(&self) -> Option<String> {
        self.default_model
            .clone()
            .or_else(|| self.registry.model_names().into_iter().next())
    }

    /// Whether classify and regress check the signature's method name.
    pub fn checks_method_names(&self) -> bool {
        self.method_name_check
    }

    pub fn with_method_name_check(self, method_name_check: bool) -> Service {
        Service {
            method_name_check,
            ..self
        }
    }

    /// The per-request deadline (rest_api_timeout_in_ms).
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    pub fn signature(servable: &Servable, name: Option<&str>) -> Result<Arc<SignatureSpec>, ApiError> {
        let name = name.unwrap_or(DEFAULT_SIGNATURE);
        servable
            .signature(name)
            .cloned()
            .ok_or_else(|| ApiError::SignatureNotFound(name.to_string()))
    }

    /// Runs a signature through its batching queue, bounded by the request
    /// timeout. Giving up on the answer (timeout, or the client going away)
    /// drops the reply channel, so a request still queued is never run.
    pub async fn run(
        &self,
        servable: &Servable,
        signature: &Arc<SignatureSpec>,
        inputs: Vec<Tensor>,
        trace: &mut Trace,
    ) -> Result<Vec<Tensor>, ApiError> {
        trace.resolved(servable, signature);
        let queue = servable
            .queue(&signature.name)
            .ok_or_else(|| ApiError::SignatureNotFound(signature.name.clone()))?;
        let names: Vec<&str> = signature.inputs.iter().map(|s| s.key.as_str()).collect();
        let (capture, keep_tensors) = self.capture_draft(servable, signature, trace, &names, &inputs);
        let submitted = queue.submit_or_drive(
            inputs,
            &names,
            trace.request_id.clone(),
            trace.arrived,
            trace.held.take(),
        )?;
        let mut pending = submitted.pending;
        if let Some(drive) = submitted.drive {
            // Requests that arrived in this same turn of the event loop queue
            // behind this one before the batch is taken.
            tokio::task::yield_now().await;
            while pending.is_empty() && queue.run_ready(drive) {}
        }
        let output = match pending.try_recv() {
            // Taken: its rows no longer wait on the queue.
            Ok(answer) => {
                drop(pending);
                answer?
            }
            Err(oneshot::error::TryRecvError::Closed) => return Err(BatchError::ShuttingDown.into()),
            Err(oneshot::error::TryRecvError::Empty) => {
                let timeout = trace.deadline.map_or(self.timeout, |d| d.min(self.timeout));
                self.wait(pending, trace.client_gone.take(), timeout).await?
            }
        };
        trace.ran(&output);
        if let Some(mut draft) = capture {
            if keep_tensors {
                draft.outputs = signature
                    .outputs
                    .iter()
                    .map(|spec| spec.key.clone())
                    .zip(output.outputs.iter().cloned())
                    .collect();
            }
            trace.capture = Some(Record::new(draft, trace.request_id.clone()));
        }
        Ok(output.outputs)
    }

    /// A sampled request's capture record begun, and whether it keeps the
    /// tensors: only a sink that writes tensors, or a transport with no body
    /// of its own to capture (gRPC), needs them copied.
    fn capture_draft(
        &self,
        servable: &Servable,
        signature: &SignatureSpec,
        trace: &Trace,
        names: &[&str],
        inputs: &[Tensor],
    ) -> (Option<Draft>, bool) {
        let mut capture = match trace.capture {
            None => self.capture.sample(
                &servable.shared_name,
                servable.version,
                &signature.name,
                servable.logging.as_ref(),
            ),
            // A handler calling the model again: the first run is the record.
            Some(_) => None,
        };
        if let Some(draft) = capture.as_mut() {
            draft.kind = trace.log_kind;
        }
        let keep_tensors = capture
            .as_ref()
            .is_some_and(|draft| draft.needs_tensors(trace.raw_request.is_some()));
        if let Some(draft) = capture.as_mut().filter(|_| keep_tensors) {
            draft.inputs = names
                .iter()
                .map(|n| n.to_string())
                .zip(inputs.iter().cloned())
                .collect();
        }
        (capture, keep_tensors)
    }

    /// Waits for a queued request's answer, until the request timeout, checking
    /// now and then that the client is still there. Returning early drops
    /// `pending`, which marks the queued request as abandoned. One timer per
    /// wait keeps fast requests cheap.
    async fn wait(
        &self,
        mut pending: Pending,
        client_gone: Option<ClientGone>,
        timeout: Duration,
    ) -> Result<BatchOutput, ApiError> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let wake_at = match &client_gone {
                Some(_) => deadline.min(tokio::time::Instant::now() + CLIENT_CHECK_INTERVAL),
                None => deadline,
            };
            tokio::select! {
                answer = &mut pending => return match answer {
                    Ok(result) => Ok(result?),
                    Err(_) => Err(BatchError::ShuttingDown.into()),
                },
                () = tokio::time::sleep_until(wake_at) => {
                    if tokio::time::Instant::now() >= deadline {
                        return Err(ApiError::Timeout(timeout.as_millis() as u64));
                    }
                    if client_gone.as_ref().is_some_and(|gone| gone()) {
                        return Err(ApiError::ClientGone);
                    }
                }
            }
        }
    }

    /// The servable and signature a request addresses.
    pub fn resolve(
        &self,
        model: &str,
        selector: &VersionSelector,
        signature: Option<&str>,
    ) -> Result<(Arc<Servable>, Arc<SignatureSpec>), ApiError> {
        let servable = self.servable(model, selector)?;
        let signature = Self::signature(&servable, signature)?;
        Ok((servable, signature))
    }

    /// The servable a model name and version selector address.
    pub fn servable(&self, model: &str, selector: &VersionSelector) -> Result<Arc<Servable>, ApiError> {
        Ok(self.registry.resolve(model, selector)?)
    }

    /// The states of a model's versions (TF Serving's GetModelStatus).
    pub fn versions(&self, model: &str, selector: &VersionSelector) -> Result<Vec<VersionStatus>, ApiError> {
        Ok(self.registry.status(model, selector)?)
    }

    /// Every model served, with its versions.
    pub fn models(&self) -> Vec<ModelInfo> {
        self.registry.list()
    }

    pub fn model_names(&self) -> Vec<String> {
        self.registry.model_names()
    }

    pub fn is_served(&self, model: &str) -> bool {
        self.registry.contains(model)
    }

    /// Runs inputs already decoded into tensors and encodes the outputs.
    pub async fn predict_inputs(
        &self,
        servable: &Servable,
        signature: &Arc<SignatureSpec>,
        inputs: Vec<Tensor>,
        format: RequestFormat,
        trace: &mut Trace,
    ) -> Result<Vec<u8>, ApiError> {
        let outputs = self.run(servable, signature, inputs, trace).await?;
        let elements: usize = outputs.iter().map(|t| t.data.len()).sum();
        let encode = {
            let signature = signature.clone();
            move || -> Result<Vec<u8>, ApiError> {
                let named: Vec<NamedOutput<'_>> = signature
                    .outputs
                    .iter()
                    .zip(&outputs)
                    .map(|(spec, tensor)| NamedOutput { key: &spec.key, tensor })
                    .collect();
                Ok(predict_response(format, &named)?)
            }
        };
        if elements < OFFLOAD_ELEMENTS {
            encode()
        } else {
            off_worker(encode).await
        }
    }
}

/// How often a waiting request checks that its client is still connected.
const CLIENT_CHECK_INTERVAL: Duration = Duration::from_millis(20);

mod budget;
mod late;
mod manage;
mod offload;

pub use budget::{decoded_bound, tensor_bytes, ByteBudget, BytesBorrowed, BytesHeld, DecodedPredict, Reserved};
pub use manage::{has_versions, ManageError, ModelLimits};
pub(crate) use offload::off_worker;
use offload::OFFLOAD_ELEMENTS;
pub use offload::{decode_body, RequestBody};
