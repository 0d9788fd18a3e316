//! The protocol-neutral request path: resolve the servable and signature,
//! decode into tensors, run off the HTTP threads, encode the answer.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Map, Value};

use crate::batcher::{BatchError, BatchOutput, Pending};
use crate::codec::encode::{predict_response, NamedOutput};
use crate::codec::example::{classify_response, regress_response, ExamplesRequest};
use crate::codec::{PredictEnvelope, RequestFormat};
use crate::error::ApiError;
use crate::handlers::HandlerSet;
use crate::registry::{Registry, Servable, VersionSelector};
use crate::signature::{SignatureSpec, TensorSpec, CLASSIFY_METHOD, DEFAULT_SIGNATURE, REGRESS_METHOD};
use crate::tensor::{DType, Tensor};

pub struct Service {
    pub registry: Arc<Registry>,
    /// Models' own `inference.py` handlers (SageMaker invocations only).
    pub handlers: Arc<HandlerSet>,
    timeout: Duration,
    /// `--enable_signature_method_name_check`: classify/regress only on
    /// signatures whose method_name says so, not on any of the right structure.
    method_name_check: bool,
    /// SageMaker's default model (`SAGEMAKER_TFS_DEFAULT_MODEL_NAME`).
    default_model: Option<String>,
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
    pub model: Option<String>,
    pub version: Option<i64>,
    pub signature: Option<String>,
    pub queue_time: Option<Duration>,
    pub run_time: Option<Duration>,
    pub batch_rows: Option<usize>,
}

impl Trace {
    fn resolved(&mut self, servable: &Servable, signature: &SignatureSpec) {
        self.model = Some(servable.model.clone());
        self.version = Some(servable.version);
        self.signature = Some(signature.name.clone());
    }

    fn ran(&mut self, output: &BatchOutput) {
        self.queue_time = Some(output.queue_time);
        self.run_time = Some(output.run_time);
        self.batch_rows = Some(output.batch_rows);
    }
}

impl Service {
    pub fn new(registry: Arc<Registry>, handlers: Arc<HandlerSet>, timeout: Duration) -> Service {
        Service {
            registry,
            handlers,
            timeout,
            method_name_check: false,
            default_model: None,
        }
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

    fn signature(servable: &Servable, name: Option<&str>) -> Result<Arc<SignatureSpec>, ApiError> {
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
        signature: &SignatureSpec,
        inputs: Vec<Tensor>,
        trace: &mut Trace,
    ) -> Result<Vec<Tensor>, ApiError> {
        trace.resolved(servable, signature);
        let queue = servable
            .queue(&signature.name)
            .ok_or_else(|| ApiError::SignatureNotFound(signature.name.clone()))?;
        let names: Vec<&str> = signature.inputs.iter().map(|s| s.key.as_str()).collect();
        let pending = queue.submit(inputs, &names, trace.request_id.clone())?;
        let output = self.wait(pending, trace.client_gone.take()).await?;
        trace.ran(&output);
        Ok(output.outputs)
    }

    /// Waits for a queued request's answer, until the request timeout, checking
    /// now and then that the client is still there. Returning early drops
    /// `pending`, which marks the queued request as abandoned. One timer per
    /// wait keeps fast requests cheap.
    async fn wait(&self, mut pending: Pending, client_gone: Option<ClientGone>) -> Result<BatchOutput, ApiError> {
        let deadline = tokio::time::Instant::now() + self.timeout;
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
                        return Err(ApiError::Timeout(self.timeout.as_millis() as u64));
                    }
                    if client_gone.as_ref().is_some_and(|gone| gone()) {
                        return Err(ApiError::ClientGone);
                    }
                }
            }
        }
    }

    /// TF Serving's `:predict`, with the response in the request's layout.
    pub async fn predict(
        &self,
        model: &str,
        selector: &VersionSelector,
        body: &[u8],
        trace: &mut Trace,
    ) -> Result<Vec<u8>, ApiError> {
        let servable = self.registry.resolve(model, selector)?;
        let decode = {
            let servable = servable.clone();
            move |body: &[u8]| -> Result<(Arc<SignatureSpec>, RequestFormat, Vec<Tensor>), ApiError> {
                let body = crate::codec::nonfinite::quote_bare_tokens(body);
                let envelope = PredictEnvelope::parse(&body)?;
                let signature = Self::signature(&servable, envelope.signature_name.as_deref())?;
                let format = envelope.format()?;
                let inputs = envelope.decode(&signature)?;
                Ok((signature, format, inputs))
            }
        };
        let (signature, format, inputs) = if body.len() < OFFLOAD_BYTES {
            decode(body)?
        } else {
            let owned = body.to_vec();
            off_worker(move || decode(&owned)).await?
        };
        trace.resolved(&servable, &signature);
        self.predict_inputs(&servable, &signature, inputs, format, trace).await
    }

    /// The servable and signature a request addresses.
    pub fn resolve(
        &self,
        model: &str,
        selector: &VersionSelector,
        signature: Option<&str>,
    ) -> Result<(Arc<Servable>, Arc<SignatureSpec>), ApiError> {
        let servable = self.registry.resolve(model, selector)?;
        let signature = Self::signature(&servable, signature)?;
        Ok((servable, signature))
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

    /// TF Serving's `:classify` and `:regress`: examples in, `results` out.
    pub async fn classify_or_regress(
        &self,
        model: &str,
        selector: &VersionSelector,
        body: &[u8],
        method: &str,
        trace: &mut Trace,
    ) -> Result<Vec<u8>, ApiError> {
        let servable = self.registry.resolve(model, selector)?;
        let body = crate::codec::nonfinite::quote_bare_tokens(body);
        let request = ExamplesRequest::parse(&body)?;
        let signature = Self::signature(&servable, request.signature_name.as_deref())?;
        trace.resolved(&servable, &signature);
        let kind = if method == CLASSIFY_METHOD {
            "classification"
        } else {
            "regression"
        };
        // TF2 exports write the predict method on every signature, so TF Serving
        // only checks the structure unless told to check the method too.
        if self.method_name_check && signature.method_name != method {
            return Err(ApiError::BadRequest(format!(
                "Expected {kind} signature method_name to be {method}. Was: {}",
                signature.method_name
            )));
        }
        let examples_input = match signature.inputs.as_slice() {
            [single] => single,
            _ => {
                return Err(ApiError::BadRequest(format!(
                    "Expected one input Tensor. Signature '{}' of the {kind} request has inputs: {}",
                    signature.name,
                    signature.input_names()
                )))
            }
        };
        // TF Serving wants the input keyed `inputs`; a lone string input under
        // another key is taken too, as it can only mean serialized examples.
        if examples_input.key != "inputs" && examples_input.dtype != DType::String {
            return Err(ApiError::BadRequest(format!(
                "No {kind} inputs found in SignatureDef '{}': classify and regress feed serialized tf.Examples \
                 to one string input keyed 'inputs', and its input is '{}' ({})",
                signature.name, examples_input.key, examples_input.dtype
            )));
        }
        let examples = request.serialized_examples()?;
        let outputs = self.run(&servable, &signature, vec![examples], trace).await?;
        let find = |key: &str| signature.outputs.iter().position(|s| s.key == key).map(|i| &outputs[i]);
        if method == CLASSIFY_METHOD {
            let (classes, scores) = (find("classes"), find("scores"));
            if classes.is_none() && scores.is_none() {
                return Err(ApiError::BadRequest(format!(
                    "Expected classification signature outputs to contain at least one of \"classes\" or \"scores\". \
                     Signature '{}' has outputs: {}",
                    signature.name,
                    output_names(&signature)
                )));
            }
            Ok(classify_response(classes, scores)?)
        } else {
            debug_assert_eq!(method, REGRESS_METHOD);
            let values = find("outputs").or(match outputs.as_slice() {
                [single] => Some(single),
                _ => None,
            });
            let values = values.ok_or_else(|| {
                ApiError::BadRequest(format!(
                    "No regression outputs found in SignatureDef '{}': expected an output named 'outputs', found: {}",
                    signature.name,
                    output_names(&signature)
                ))
            })?;
            Ok(regress_response(values)?)
        }
    }

    /// `GET /v1/models/{m}[/versions/{v}]`: TF Serving's GetModelStatusResponse.
    pub fn model_status(&self, model: &str, selector: &VersionSelector) -> Result<Value, ApiError> {
        let statuses = self.registry.status(model, selector)?;
        let entries: Vec<Value> = statuses
            .iter()
            .map(|s| {
                json!({
                    "version": s.version.to_string(),
                    "state": s.state.as_str(),
                    "status": {
                        "error_code": if s.error.is_some() { "UNKNOWN" } else { "OK" },
                        "error_message": s.error.clone().unwrap_or_default(),
                    }
                })
            })
            .collect();
        Ok(json!({ "model_version_status": entries }))
    }

    /// `GET /v1/models/{m}[/versions/{v}]/metadata`: the signature defs.
    pub fn model_metadata(&self, model: &str, selector: &VersionSelector) -> Result<Value, ApiError> {
        let servable = self.registry.resolve(model, selector)?;
        let mut defs = Map::new();
        for signature in servable.runtime.signatures().iter() {
            defs.insert(
                signature.name.clone(),
                json!({
                    "inputs": tensor_map(&signature.inputs),
                    "outputs": tensor_map(&signature.outputs),
                    "method_name": signature.method_name,
                    "defaults": {},
                }),
            );
        }
        Ok(json!({
            "model_spec": { "name": model, "signature_name": "", "version": servable.version.to_string() },
            "metadata": { "signature_def": { "signature_def": defs } }
        }))
    }
}

fn output_names(signature: &SignatureSpec) -> String {
    signature
        .outputs
        .iter()
        .map(|s| s.key.as_str())
        .collect::<Vec<_>>()
        .join(",")
}

/// Bodies at least this large decode on the blocking pool, and outputs of at
/// least this many elements encode there: megabytes of JSON would otherwise
/// hold an HTTP worker, and every connection it serves, for milliseconds.
pub const OFFLOAD_BYTES: usize = 256 * 1024;
const OFFLOAD_ELEMENTS: usize = 32 * 1024;

/// Runs CPU-heavy request work off the HTTP workers.
pub async fn off_worker<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| ApiError::Internal(format!("a decoding task failed: {e}")))?
}

/// How often a waiting request checks that its client is still connected.
const CLIENT_CHECK_INTERVAL: Duration = Duration::from_millis(20);

fn tensor_map(specs: &[TensorSpec]) -> Value {
    let mut map = Map::new();
    for spec in specs {
        let shape = match &spec.shape {
            None => json!({ "dim": [], "unknown_rank": true }),
            Some(dims) => json!({
                "dim": dims.iter().map(|d| json!({ "size": d.to_string(), "name": "" })).collect::<Vec<_>>(),
                "unknown_rank": false,
            }),
        };
        map.insert(
            spec.key.clone(),
            json!({ "dtype": spec.dtype.proto_name(), "tensor_shape": shape, "name": spec.tensor_name }),
        );
    }
    Value::Object(map)
}

#[cfg(test)]
mod tests;
