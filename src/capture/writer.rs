//! The capture thread: takes records off the queue, writes each to the sinks
//! its policies name, rotates files by size, age and (JSON Lines) hour, and
//! flushes whenever the queue runs dry, so readers see records within moments.

use std::borrow::Cow;
use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{Receiver, TryRecvError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use prometheus::IntCounter;

use super::cloudevents::{self, Poster};
use super::files::{open, unique, OpenFile};
use super::losses::{failed, tell_losses};
use super::retention::{self, Limits};
use super::time::Utc;
use super::{jsonl, tfrecord, CaptureSettings, Message, Payload, Record};
use crate::metrics::METRICS;

/// How often retention looks at the capture directories at most.
const SWEEP_INTERVAL: Duration = Duration::from_secs(60);

/// How often a busy writer takes what has queued.
const DRAIN_TICK: Duration = Duration::from_millis(10);

/// How long the writer's end (its queue closed without a flush: the
/// server's state dropped) waits for the CloudEvents still queued.
const EVENTS_FLUSH_LIMIT: Duration = Duration::from_secs(2);

/// A directory's open JSON Lines files, by model.
type ModelFiles = Vec<(Arc<str>, OpenFile)>;

pub struct Writer {
    rotate_bytes: u64,
    rotate_age: Duration,
    queue_size: usize,
    /// Open JSON Lines files by directory, then model: a handful, scanned
    /// (cheaper per record than hashing the path).
    jsonl: Vec<(PathBuf, ModelFiles)>,
    /// One line's bytes, reused.
    line: Vec<u8>,
    /// The last second formatted for `inferenceTime`, reused within it.
    second: (u64, String),
    jsonl_written: IntCounter,
    tfrecord_written: IntCounter,
    tfrecord: HashMap<String, OpenFile>,
    /// When the writer last woke: files' ages are told by it, not by a clock
    /// read per record.
    now: Instant,
    /// Started with the first CloudEvent.
    events: Option<Poster>,
    files_made: u64,
    /// SageMaker's endpoint and variant directories of JSON Lines files (the
    /// endpoint is the model's name unless set).
    endpoint_name: Option<Arc<str>>,
    variant_name: Arc<str>,
    /// The size and age each sink's directory is kept within.
    retention: Limits,
    /// When retention last looked; a new file makes it look again.
    swept_at: Option<Instant>,
    /// What every CloudEvent says of where it comes from.
    source: Arc<str>,
    service: Option<Arc<str>>,
    endpoint: Arc<str>,
}

impl Writer {
    pub fn new(settings: &CaptureSettings) -> Writer {
        Writer {
            rotate_bytes: settings.capture_rotate_mb.saturating_mul(1 << 20),
            rotate_age: Duration::from_secs(settings.capture_rotate_seconds),
            queue_size: settings.capture_queue_size,
            jsonl: Vec::new(),
            line: Vec::new(),
            second: (u64::MAX, String::new()),
            jsonl_written: METRICS.capture_records.with_label_values(&["jsonl"]),
            tfrecord_written: METRICS.capture_records.with_label_values(&["tfrecord"]),
            tfrecord: HashMap::new(),
            events: None,
            now: Instant::now(),
            files_made: 0,
            endpoint_name: settings.capture_endpoint_name.as_deref().map(Into::into),
            variant_name: settings.capture_variant_name.as_str().into(),
            retention: Limits {
                max_bytes: (settings.capture_retention_mb > 0)
                    .then(|| settings.capture_retention_mb.saturating_mul(1 << 20)),
                max_age: (settings.capture_retention_hours > 0.0)
                    .then(|| Duration::from_secs_f64(settings.capture_retention_hours * 3600.0)),
            },
            swept_at: None,
            source: settings.capture_cloudevents_source.as_str().into(),
            service: settings.inference_service().map(Into::into),
            endpoint: settings.capture_cloudevents_endpoint.as_str().into(),
        }
    }

    /// Blocks while the queue is idle; once records come, drains it every
    /// [`DRAIN_TICK`] instead of waking per record, so a busy server pays no
    /// thread wake-up for each captured request.
    pub(super) fn run(mut self, receiver: Receiver<Message>) {
        'idle: while let Ok(message) = receiver.recv() {
            self.now = Instant::now();
            self.handle(message);
            loop {
                let mut drained = 0usize;
                loop {
                    match receiver.try_recv() {
                        Ok(message) => {
                            self.handle(message);
                            drained += 1;
                        }
                        Err(TryRecvError::Empty) => break,
                        Err(TryRecvError::Disconnected) => break 'idle,
                    }
                }
                self.flush_files();
                self.sweep_when_due();
                if drained == 0 {
                    continue 'idle;
                }
                std::thread::sleep(DRAIN_TICK);
                self.now = Instant::now();
            }
        }
        self.flush_files();
        tell_losses();
        if let Some(events) = &self.events {
            events.finish(Instant::now() + EVENTS_FLUSH_LIMIT);
        }
    }

    fn handle(&mut self, message: Message) {
        match message {
            Message::Record(record) => self.write(&record),
            Message::Flush { done, deadline } => {
                self.flush_files();
                tell_losses();
                if let Some(events) = &self.events {
                    events.finish(deadline);
                }
                let _ = done.send(());
            }
        }
    }

    fn write(&mut self, record: &Record) {
        let draft = &record.draft;
        let time = Utc::of(draft.time);
        let mut tfrecord_prefixes: Vec<(&str, f64)> = Vec::new();
        if let Some(logging) = &draft.logging {
            tfrecord_prefixes.push((&logging.filename_prefix, logging.sampling_rate));
        }
        let Some(policy) = &draft.policy else {
            return self.write_tfrecords(record, &tfrecord_prefixes, &time);
        };
        if let Some(prefix) = policy.tfrecord_prefix.as_deref() {
            if tfrecord_prefixes.iter().all(|(p, _)| *p != prefix) {
                tfrecord_prefixes.push((prefix, policy.rate));
            }
        }
        self.write_tfrecords(record, &tfrecord_prefixes, &time);
        if policy.jsonl_dir.is_none() && policy.cloudevents_url.is_none() {
            return;
        }
        let request = policy.mode.request().then(|| jsonl::request_payload(record)).flatten();
        let response = policy
            .mode
            .response()
            .then(|| jsonl::response_payload(record))
            .flatten();
        if let Some(dir) = &policy.jsonl_dir {
            self.write_jsonl(record, dir, &time, request.as_deref(), response.as_deref());
        }
        if let Some(url) = &policy.cloudevents_url {
            self.post_events(record, url, &time, [request, response]);
        }
    }

    /// Appends the record's JSON line to its model's file under `dir`.
    fn write_jsonl(
        &mut self,
        record: &Record,
        dir: &Path,
        time: &Utc,
        request: Option<&Payload>,
        response: Option<&Payload>,
    ) {
        let draft = &record.draft;
        let mut line = std::mem::take(&mut self.line);
        line.clear();
        let second = time.epoch_seconds;
        if self.second.0 != second {
            self.second = (second, time.rfc3339());
        }
        let inference_time = &self.second.1;
        let event = jsonl::Event {
            id: &record.event_id,
            inference_id: record.inference_id.as_deref(),
            custom_attributes: record.custom_attributes.as_deref(),
            inference_time,
        };
        jsonl::write_line(&mut line, &event, request, response);
        match self.append_jsonl(dir, &draft.model, second / 3600, time, &line) {
            Ok(()) => self.jsonl_written.inc(),
            Err(e) => failed("jsonl", &dir.display().to_string(), &e),
        }
        self.line = line;
    }

    /// Posts the record's request and response as CloudEvents to `url`.
    fn post_events(&mut self, record: &Record, url: &str, time: &Utc, payloads: [Option<Cow<'_, Payload>>; 2]) {
        let draft = &record.draft;
        if self.events.is_none() {
            match Poster::start(self.queue_size) {
                Ok(poster) => self.events = Some(poster),
                Err(e) => return failed("cloudevents", "its thread", &e),
            }
        }
        let Some(events) = &self.events else {
            return;
        };
        let [request, response] = payloads;
        let sides = [
            (request, cloudevents::REQUEST_TYPE),
            (response, cloudevents::RESPONSE_TYPE),
        ];
        for (payload, kind) in sides {
            if let Some(payload) = payload {
                let payload = payload.into_owned();
                events.post(cloudevents::Event {
                    url: url.to_string(),
                    id: record.event_id.to_string(),
                    kind,
                    time: time.rfc3339(),
                    source: self.source.clone(),
                    service: self.service.clone().unwrap_or_else(|| draft.model.clone()),
                    endpoint: self.endpoint.clone(),
                    metadata: cloudevents::metadata_json(&record.metadata),
                    payload,
                });
            }
        }
    }

    fn write_tfrecords(&mut self, record: &Record, prefixes: &[(&str, f64)], time: &Utc) {
        if prefixes.is_empty() {
            return;
        }
        let draft = &record.draft;
        let mode = draft.policy.as_ref().map(|p| p.mode).unwrap_or_default();
        for &(prefix, sampling_rate) in prefixes {
            let framed = tfrecord::record(&tfrecord::Exchange {
                model: &draft.model,
                version: draft.version,
                signature: &draft.signature,
                sampling_rate,
                inputs: mode.request().then_some(&draft.inputs[..]),
                outputs: mode.response().then_some(&draft.outputs[..]),
                kind: draft.kind,
                multi_inference: draft.multi_inference.as_deref(),
            });
            match self.append_tfrecord(prefix, time, &framed) {
                Ok(()) => self.tfrecord_written.inc(),
                Err(e) => failed("tfrecord", prefix, &e),
            }
        }
    }

    /// Appends to the model's open file under `dir`, first starting a new
    /// one when the hour (since the epoch) changed or the open one is full or old.
    fn append_jsonl(
        &mut self,
        dir: &Path,
        model: &Arc<str>,
        hour: u64,
        time: &Utc,
        line: &[u8],
    ) -> std::io::Result<()> {
        let (rotate_bytes, rotate_age) = (self.rotate_bytes, self.rotate_age);
        let slot = match self.jsonl.iter().position(|(d, _)| d.as_os_str() == dir.as_os_str()) {
            Some(slot) => slot,
            None => {
                self.jsonl.push((dir.to_path_buf(), Vec::new()));
                self.jsonl.len() - 1
            }
        };
        let models = &mut self.jsonl[slot].1;
        let mut found = models.iter().position(|(m, _)| m == model);
        if let Some(at) = found {
            let open = &models[at].1;
            if open.hour != hour
                || open.written >= rotate_bytes
                || self.now.saturating_duration_since(open.opened) >= rotate_age
            {
                let (_, mut old) = models.swap_remove(at);
                old.file.flush()?;
                found = None;
            }
        }
        let at = match found {
            Some(at) => at,
            None => {
                self.files_made += 1;
                self.swept_at = None;
                let endpoint = self.endpoint_name.as_deref().unwrap_or(model);
                let path = jsonl::file_name(dir, endpoint, &self.variant_name, time, &unique(self.files_made));
                models.push((model.clone(), open(&path, hour)?));
                models.len() - 1
            }
        };
        let open = &mut models[at].1;
        open.file.write_all(line)?;
        open.written += line.len() as u64;
        Ok(())
    }

    fn append_tfrecord(&mut self, prefix: &str, time: &Utc, framed: &[u8]) -> std::io::Result<()> {
        let stale = self.tfrecord.get(prefix).is_some_and(|open| {
            open.written >= self.rotate_bytes || self.now.saturating_duration_since(open.opened) >= self.rotate_age
        });
        if stale {
            if let Some(mut old) = self.tfrecord.remove(prefix) {
                old.file.flush()?;
            }
        }
        if !self.tfrecord.contains_key(prefix) {
            self.files_made += 1;
            self.swept_at = None;
            let path = format!("{prefix}-{}-{}.tfrecord", time.compact(), unique(self.files_made));
            self.tfrecord.insert(prefix.to_string(), open(Path::new(&path), 0)?);
        }
        let Some(open) = self.tfrecord.get_mut(prefix) else {
            return Ok(());
        };
        open.file.write_all(framed)?;
        open.written += framed.len() as u64;
        Ok(())
    }

    /// Applies retention once a minute, and after a new file was opened.
    fn sweep_when_due(&mut self) {
        if !self.retention.any() || self.swept_at.is_some_and(|at| at.elapsed() < SWEEP_INTERVAL) {
            return;
        }
        self.swept_at = Some(Instant::now());
        let now = std::time::SystemTime::now();
        for (dir, models) in &self.jsonl {
            let open: Vec<&Path> = models.iter().map(|(_, f)| f.path.as_path()).collect();
            retention::enforce(&retention::Files::Jsonl(dir), self.retention, &open, now);
        }
        for (prefix, file) in &self.tfrecord {
            retention::enforce(
                &retention::Files::TfRecord(prefix),
                self.retention,
                &[file.path.as_path()],
                now,
            );
        }
    }

    fn flush_files(&mut self) {
        for (dir, models) in self.jsonl.iter_mut() {
            for (_, open) in models.iter_mut() {
                if let Err(e) = open.file.flush() {
                    failed("jsonl", &dir.display().to_string(), &e);
                }
            }
        }
        for (prefix, open) in self.tfrecord.iter_mut() {
            if let Err(e) = open.file.flush() {
                failed("tfrecord", prefix, &e);
            }
        }
    }
}
