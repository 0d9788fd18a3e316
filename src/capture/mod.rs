//! Request/response capture: which requests a model's policy samples, the
//! record a sampled request leaves, and the bounded queue that carries records
//! off the request path to the sinks (SageMaker Data Capture's JSON Lines, TF
//! Serving's `PredictionLog` TFRecords, KServe's CloudEvents). A full queue
//! drops the record, counted in `/metrics`, never the request.

mod cloudevents;
mod escape;
mod files;
mod jsonl;
mod losses;
mod policy;
mod retention;
mod tfrecord;
mod time;
mod writer;

use std::borrow::Cow;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use std::sync::mpsc::{SyncSender, TrySendError};

use crate::metrics::METRICS;
use crate::model_config::LoggingConfig;
use crate::proto::tensorflow::serving::MultiInferenceLog;
use crate::tensor::Tensor;

pub use cloudevents::{canonical_header, redacted as redacted_url};
pub use policy::{CaptureMode, CaptureSettings, ModelCapture, Policies, Policy};
pub use tfrecord::{record as tfrecord_record, Exchange};

/// A sampled request's record as the core leaves it on the request's trace;
/// the transport adds the bodies it saw and hands it back ([`Capture::submit`]).
#[derive(Debug)]
pub struct Draft {
    /// The settings' policy, when it sampled the request.
    pub policy: Option<Arc<Policy>>,
    /// The model's TF Serving `logging_config`, when it sampled the request.
    pub logging: Option<Arc<LoggingConfig>>,
    pub model: Arc<str>,
    pub version: i64,
    pub signature: Arc<str>,
    pub time: SystemTime,
    /// The signature's inputs and outputs by key, kept when a sink needs
    /// tensors (TFRecords, or a transport that has no raw bodies: gRPC).
    pub inputs: Vec<(String, Tensor)>,
    pub outputs: Vec<(String, Tensor)>,
    /// The API called, which names its TF Serving log.
    pub kind: LogKind,
    /// A MultiInference call's whole log: its dialect sets it once every
    /// task has run (the record is the first task's run).
    pub multi_inference: Option<Box<MultiInferenceLog>>,
}

/// The TF Serving API a captured call used: which `PredictionLog` it becomes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LogKind {
    #[default]
    Predict,
    Classify,
    Regress,
}

impl Record {
    pub fn new(draft: Draft, event_id: Option<Arc<str>>) -> Box<Record> {
        Box::new(Record {
            draft,
            event_id: event_id.unwrap_or_else(|| "".into()),
            protocol: "rest",
            request: None,
            response: None,
            metadata: Vec::new(),
            inference_id: None,
            custom_attributes: None,
        })
    }
}

impl Draft {
    /// Whether the run's tensors must be kept: a TFRecord sink writes them,
    /// and a transport without raw bodies (gRPC) is captured through them.
    pub fn needs_tensors(&self, raw_bodies: bool) -> bool {
        !raw_bodies || self.writes_tfrecords()
    }

    /// Whether a sink writes this record as a TF Serving `PredictionLog`.
    pub fn writes_tfrecords(&self) -> bool {
        self.logging.is_some() || self.policy.as_ref().is_some_and(|p| p.tfrecord_prefix.is_some())
    }
}

/// A content type, without an allocation when it is one of the usual ones.
pub fn content_type(value: &str) -> Cow<'static, str> {
    const COMMON: [&str; 8] = [
        "application/json",
        "application/json; charset=utf-8",
        "text/csv",
        "text/csv; charset=utf-8",
        "application/jsonlines",
        "application/octet-stream",
        "text/plain",
        "application/x-npy",
    ];
    match COMMON.iter().find(|common| **common == value) {
        Some(common) => Cow::Borrowed(common),
        None => Cow::Owned(value.to_string()),
    }
}

/// A body as it crossed the wire.
#[derive(Clone, Debug)]
pub struct Payload {
    /// Common types are static: most records allocate nothing for them.
    pub content_type: Cow<'static, str>,
    pub body: Bytes,
}

/// A record: the draft, the request's id and, over REST, the bodies; the
/// core makes it, its transport fills in what crossed the wire.
#[derive(Debug)]
pub struct Record {
    pub draft: Draft,
    pub event_id: Arc<str>,
    /// `rest` or `grpc`.
    pub protocol: &'static str,
    pub request: Option<Payload>,
    pub response: Option<Payload>,
    /// The request headers named by `--capture_metadata_headers`, as
    /// (canonical name, value): KServe's `ce-metadata`.
    pub metadata: Vec<(String, String)>,
    /// SageMaker's `X-Amzn-SageMaker-Inference-Id`: Data Capture's `inferenceId`.
    pub inference_id: Option<Arc<str>>,
    /// SageMaker's `X-Amzn-SageMaker-Custom-Attributes`, as sent.
    pub custom_attributes: Option<Arc<str>>,
}

enum Message {
    Record(Box<Record>),
    /// Write out what is queued, giving up on what is not out by the
    /// deadline, then answer.
    Flush {
        done: std::sync::mpsc::Sender<()>,
        deadline: std::time::Instant,
    },
}

/// The capture policies and the queue to the writer thread.
pub struct Capture {
    policies: Policies,
    /// Request headers a record keeps (lower case).
    metadata_headers: Vec<String>,
    queue: Option<SyncSender<Message>>,
    writer: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl Capture {
    /// No capture at all: no thread, every check one branch.
    pub fn disabled() -> Capture {
        Capture {
            policies: Policies::default(),
            metadata_headers: Vec::new(),
            queue: None,
            writer: Mutex::new(None),
        }
    }

    /// Starts the writer thread. `possible` says whether any model may
    /// capture (a sink in the settings, or a model config file that may carry
    /// `logging_config`); without it nothing starts.
    pub fn start(settings: CaptureSettings, possible: bool) -> std::io::Result<Capture> {
        if !possible && !settings.any_sink() {
            return Ok(Capture::disabled());
        }
        let (sender, receiver) = std::sync::mpsc::sync_channel(settings.capture_queue_size.max(1));
        let files = writer::Writer::new(&settings);
        let thread = std::thread::Builder::new()
            .name("tfserve-capture".into())
            .spawn(move || files.run(receiver))?;
        Ok(Capture {
            policies: settings.policies(),
            metadata_headers: settings
                .capture_metadata_headers
                .iter()
                .map(|h| h.trim().to_ascii_lowercase())
                .filter(|h| !h.is_empty())
                .collect(),
            queue: Some(sender),
            writer: Mutex::new(Some(thread)),
        })
    }

    /// The request headers each record keeps for CloudEvents' `ce-metadata`.
    pub fn metadata_headers(&self) -> &[String] {
        &self.metadata_headers
    }

    /// Whether any model may capture: REST handlers keep bodies only then.
    pub fn active(&self) -> bool {
        self.queue.is_some()
    }

    /// Whether this request to `model` is captured, and by which policies: a
    /// draft to fill, or `None` (almost always one branch: capture off).
    pub fn sample(
        &self,
        model: &Arc<str>,
        version: i64,
        signature: &str,
        logging: Option<&Arc<LoggingConfig>>,
    ) -> Option<Draft> {
        self.queue.as_ref()?;
        let policy = self.policies.policy(model).filter(|p| sampled(p.rate)).cloned();
        let logging = logging.filter(|l| sampled(l.sampling_rate)).cloned();
        if policy.is_none() && logging.is_none() {
            return None;
        }
        Some(Draft {
            policy,
            logging,
            model: model.clone(),
            version,
            signature: signature.into(),
            time: SystemTime::now(),
            inputs: Vec::new(),
            outputs: Vec::new(),
            kind: LogKind::Predict,
            multi_inference: None,
        })
    }

    /// Queues a finished record for the writer, or drops and counts it when
    /// the queue is full.
    pub fn submit(&self, record: Box<Record>) {
        let Some(queue) = &self.queue else {
            return;
        };
        match queue.try_send(Message::Record(record)) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => METRICS.capture_dropped.with_label_values(&["queue", "full"]).inc(),
            Err(TrySendError::Disconnected(_)) => {
                METRICS.capture_dropped.with_label_values(&["queue", "stopped"]).inc()
            }
        }
    }

    /// Writes out everything queued (files flushed, CloudEvents posted),
    /// giving up after `limit` on what is still queued, which is counted and
    /// logged: what SIGTERM calls last. False when the writer itself did not
    /// answer in time (a post still running past its own timeout).
    pub fn flush(&self, limit: Duration) -> bool {
        let Some(queue) = &self.queue else {
            return true;
        };
        let (done, wait) = std::sync::mpsc::channel();
        let deadline = std::time::Instant::now() + limit;
        // Blocking: the flush queues behind the records already waiting,
        // which the writer is draining.
        if queue.send(Message::Flush { done, deadline }).is_err() {
            return false;
        }
        wait.recv_timeout(limit + cloudevents::POST_TIMEOUT + Duration::from_secs(1))
            .is_ok()
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        self.queue = None;
        if let Some(thread) = self.writer.lock().ok().and_then(|mut w| w.take()) {
            let _ = thread.join();
        }
    }
}

/// A uniform draw against `rate`, from a per-thread generator: no shared
/// counter for the request threads to contend on.
fn sampled(rate: f64) -> bool {
    if rate >= 1.0 {
        return true;
    }
    if rate <= 0.0 {
        return false;
    }
    thread_local! {
        static STATE: std::cell::Cell<u64> = std::cell::Cell::new(seed());
    }
    let draw = STATE.with(|state| {
        // xorshift64*: enough for sampling, and nothing to lock.
        let mut x = state.get();
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        state.set(x);
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    });
    ((draw >> 11) as f64 / (1u64 << 53) as f64) < rate
}

fn seed() -> u64 {
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0x9e37_79b9);
    let thread = std::thread::current().id();
    let mut hasher = std::hash::DefaultHasher::new();
    std::hash::Hash::hash(&thread, &mut hasher);
    (nanos ^ std::hash::Hasher::finish(&hasher)) | 1
}

#[cfg(test)]
mod tests;
