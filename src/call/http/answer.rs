//! An inference request's answer, whichever transport read it: its timing
//! headers, metrics and access-line facts, and its capture record completed
//! with the bodies as they crossed the wire.

use std::time::Instant;

use actix_web::http::header::{HeaderName, HeaderValue, CONTENT_TYPE};
use actix_web::http::StatusCode;
use actix_web::web::{self, Bytes};
use actix_web::{HttpRequest, HttpResponse};

use crate::capture::{Payload, Record};
use crate::error::ApiError;
use crate::metrics::METRICS;
use crate::server::access_log::Served;
use crate::server::ServerState;
use crate::service::Trace;

/// The request an inference answer is for, as far as its capture record
/// needs it: an actix-web request, or one the HTTP front read itself.
#[derive(Clone, Copy)]
pub enum Exchange<'a> {
    Actix(&'a HttpRequest),
    Front {
        state: &'a ServerState,
        /// The request's `Content-Type`, as sent.
        content_type: Option<&'a str>,
        /// KServe's `Ce-Id`, as sent.
        ce_id: Option<&'a str>,
    },
}

impl Exchange<'_> {
    fn state(&self) -> Option<&ServerState> {
        match self {
            Exchange::Actix(req) => req.app_data::<web::Data<ServerState>>().map(|s| s.get_ref()),
            Exchange::Front { state, .. } => Some(state),
        }
    }

    fn content_type(&self) -> Option<&str> {
        match self {
            Exchange::Actix(req) => req.headers().get(CONTENT_TYPE).and_then(|v| v.to_str().ok()),
            Exchange::Front { content_type, .. } => *content_type,
        }
    }

    /// An incoming CloudEvent id, which KServe's logger keeps for its events.
    fn ce_id(&self) -> Option<&str> {
        match self {
            Exchange::Actix(req) => req.headers().get("ce-id").and_then(|v| v.to_str().ok()),
            Exchange::Front { ce_id, .. } => *ce_id,
        }
        .filter(|id| !id.is_empty())
    }

    /// A SageMaker header (`X-Amzn-SageMaker-Inference-Id`, `-Custom-Attributes`)
    /// if sent and not empty. The front takes no SageMaker route; its TF
    /// Serving requests carry none that count.
    fn sagemaker_header(&self, name: &str) -> Option<&str> {
        match self {
            Exchange::Actix(req) => req
                .headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .filter(|value| !value.is_empty()),
            Exchange::Front { .. } => None,
        }
    }

    /// The request headers `names` (lower case) lists, as (canonical name, value).
    /// The front never serves a capture that keeps headers (`http::server`).
    fn kept_headers(&self, names: &[String]) -> Vec<(String, String)> {
        let Exchange::Actix(req) = self else {
            return Vec::new();
        };
        names
            .iter()
            .flat_map(|name| {
                req.headers()
                    .get_all(name.as_str())
                    .filter_map(|v| v.to_str().ok())
                    .map(|value| (crate::capture::canonical_header(name), value.to_string()))
            })
            .collect()
    }
}

/// Completes a capture record with what crossed the wire, and queues it.
fn capture(
    exchange: Exchange<'_>,
    mut record: Box<Record>,
    body: Option<Bytes>,
    content_type: &HeaderValue,
    answer: &Bytes,
) {
    let Some(state) = exchange.state() else {
        return;
    };
    let text = |value: Option<&str>| crate::capture::content_type(value.unwrap_or_default());
    if let Some(id) = exchange.ce_id() {
        record.event_id = id.into();
    }
    record.inference_id = exchange
        .sagemaker_header("x-amzn-sagemaker-inference-id")
        .map(Into::into);
    record.custom_attributes = exchange
        .sagemaker_header("x-amzn-sagemaker-custom-attributes")
        .map(Into::into);
    let kept = state.service.capture().metadata_headers();
    if !kept.is_empty() {
        record.metadata = exchange.kept_headers(kept);
    }
    record.request = body.map(|body| Payload {
        content_type: text(exchange.content_type()),
        body,
    });
    record.response = Some(Payload {
        content_type: text(content_type.to_str().ok()),
        body: answer.clone(),
    });
    state.service.capture().submit(record);
}

/// Keeps a request's body on its trace for capture, when any model captures.
pub fn keep_body(state: &ServerState, trace: &mut Trace, body: &Bytes) {
    if state.service.capture().active() {
        trace.raw_request = Some(body.clone());
    }
}

impl<'a> From<&'a HttpRequest> for Exchange<'a> {
    fn from(req: &'a HttpRequest) -> Self {
        Exchange::Actix(req)
    }
}

const QUEUE_TIME: HeaderName = HeaderName::from_static("x-queue-time-ms");
const INFERENCE_TIME: HeaderName = HeaderName::from_static("x-inference-time-ms");
const BATCH_SIZE: HeaderName = HeaderName::from_static("x-batch-size");

/// An inference call's answer, before a transport writes it: as actix-web's
/// response ([`Answer::into_response`]) or on the HTTP front's connection.
pub struct Answer {
    pub status: StatusCode,
    pub content_type: HeaderValue,
    pub body: Bytes,
    pub queue_time: Option<std::time::Duration>,
    pub run_time: Option<std::time::Duration>,
    pub batch_rows: Option<usize>,
    /// What ran, for the access line (when the request gets one).
    pub served: Option<Served>,
}

/// One REST inference request, from its arrival to its answer, whichever
/// transport read it (actix-web's route or the HTTP front): its trace, which
/// the dialect's handler fills in, and when it arrived.
pub struct Inference {
    pub trace: Trace,
    started: Instant,
}

/// How an inference request ended, as its dialect's handler tells it.
pub struct Outcome<'r> {
    pub result: Result<Vec<u8>, ApiError>,
    /// The success's own content type (JSON when `None`).
    pub content_type: Option<HeaderValue>,
    /// The model the request named (`""` for none).
    pub model: &'r str,
    /// The API it called, for the metrics and the logs.
    pub api: &'r str,
}

impl Inference {
    /// A request arriving through actix-web: its id and a way to tell its client left.
    pub fn begin(req: &HttpRequest) -> Inference {
        Inference::with_trace(super::trace(req))
    }

    /// A request arriving with the trace its transport made.
    pub fn with_trace(trace: Trace) -> Inference {
        Inference {
            trace,
            started: Instant::now(),
        }
    }

    /// Its answer, with timing headers, recorded in the request metrics; a
    /// sampled request's capture record completed with the bodies and
    /// content types as they crossed the wire, and queued.
    // Kept whole: the answer, its headers, its metrics and its capture record all read the one
    // outcome it consumes.
    pub fn conclude<'a>(mut self, exchange: impl Into<Exchange<'a>>, outcome: Outcome<'_>) -> Answer {
        let Outcome {
            result,
            content_type,
            model,
            api,
        } = outcome;
        let (trace, started) = (&mut self.trace, self.started);
        const JSON: HeaderValue = HeaderValue::from_static("application/json");
        let exchange: Exchange<'a> = exchange.into();
        let (status, content_type, body) = match result {
            Ok(body) => {
                let body = Bytes::from(body);
                let content_type = content_type.unwrap_or(JSON);
                if let Some(record) = trace.capture.take() {
                    capture(exchange, record, trace.raw_request.take(), &content_type, &body);
                }
                (StatusCode::OK, content_type, body)
            }
            Err(err) => {
                if err.status().is_server_error() {
                    let id = trace.request_id.as_deref().unwrap_or_default();
                    log::warn!("[{id}] {api} on model {model}: {err}");
                }
                (
                    err.status(),
                    JSON,
                    Bytes::from(crate::error::error_body(&err.to_string())),
                )
            }
        };
        let requested = model;
        let mut digits = itoa::Buffer::new();
        // Asked only of requests that resolved no version.
        let configured = |name: &str| exchange.state().is_some_and(|state| state.service.is_served(name));
        let (model, version) = crate::call::metric_labels(trace, requested, configured, &mut digits);
        let signature = trace.signature_name().unwrap_or("");
        log::debug!(
            "[{}] {api} {model} {version} {signature}: {} in {:.3} ms",
            trace.request_id.as_deref().unwrap_or_default(),
            status.as_str(),
            started.elapsed().as_secs_f64() * 1000.0
        );
        METRICS.record_request(
            &crate::metrics::RequestLabels {
                protocol: "rest",
                model,
                version,
                signature,
                api,
                status: status.as_str(),
            },
            started.elapsed().as_secs_f64(),
        );
        Answer {
            status,
            content_type,
            body,
            queue_time: trace.queue_time,
            run_time: trace.run_time,
            batch_rows: trace.batch_rows,
            served: trace.access_logged.then(|| {
                let mut served = Served::of(api, trace);
                // Refused before it resolved one, the line names the model asked
                // for (the metrics do not: their labels stay bounded).
                if served.model.is_none() && !requested.is_empty() {
                    served.model = Some(requested.to_string());
                }
                served
            }),
        }
    }
}

impl Answer {
    pub fn into_response(self) -> HttpResponse {
        let mut response = HttpResponse::build(self.status);
        response.insert_header((CONTENT_TYPE, self.content_type.clone()));
        self.write_headers(|name, value| {
            if let (Ok(name), Ok(value)) = (HeaderName::try_from(name), HeaderValue::from_bytes(value)) {
                response.insert_header((name, value));
            }
        });
        let mut response = response.body(self.body);
        if let Some(served) = self.served {
            response.extensions_mut().insert(served);
        }
        response
    }

    /// Its headers beyond the content type, as name and value, in the order
    /// a transport writing them by hand writes them.
    pub fn write_headers(&self, mut write: impl FnMut(&str, &[u8])) {
        if self.status != StatusCode::OK {
            for (name, value) in crate::error::error_headers(self.status) {
                write(name, value.as_bytes());
            }
        }
        if let Some(queue) = self.queue_time {
            write(QUEUE_TIME.as_str(), millis(queue).as_str().as_bytes());
        }
        if let Some(run) = self.run_time {
            write(INFERENCE_TIME.as_str(), millis(run).as_str().as_bytes());
        }
        if let Some(rows) = self.batch_rows {
            write(BATCH_SIZE.as_str(), itoa::Buffer::new().format(rows).as_bytes());
        }
    }
}

/// A duration as milliseconds with three decimals (`12.345`), written
/// without float formatting: it goes on every inference response.
struct Millis {
    text: [u8; 24],
    len: usize,
}

impl Millis {
    fn as_str(&self) -> &str {
        std::str::from_utf8(&self.text[..self.len]).unwrap_or("0")
    }
}

fn millis(duration: std::time::Duration) -> Millis {
    let micros = u64::try_from(duration.as_micros()).unwrap_or(u64::MAX);
    let mut whole = itoa::Buffer::new();
    let whole = whole.format(micros / 1000).as_bytes();
    let fraction = micros % 1000;
    let mut text = [0u8; 24];
    text[..whole.len()].copy_from_slice(whole);
    let digits = [
        b'.',
        b'0' + (fraction / 100) as u8,
        b'0' + (fraction / 10 % 10) as u8,
        b'0' + (fraction % 10) as u8,
    ];
    text[whole.len()..whole.len() + 4].copy_from_slice(&digits);
    Millis {
        text,
        len: whole.len() + 4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_print_as_milliseconds_with_three_decimals() {
        use std::time::Duration;
        assert_eq!(millis(Duration::from_micros(12_345)).as_str(), "12.345");
        assert_eq!(millis(Duration::from_nanos(7_999)).as_str(), "0.007");
        assert_eq!(millis(Duration::from_secs(3)).as_str(), "3000.000");
    }
}
