//! KServe's inference logger protocol: each captured request and response a
//! CloudEvent in HTTP binary mode (`ce-*` headers, the body as it was),
//! typed `org.kubeflow.serving.inference.request`/`.response` and sharing
//! the request's id, posted from a thread of its own with a bounded queue and
//! a bounded number of retries.

use std::sync::mpsc::{Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::losses::Losses;
use super::Payload;
use crate::metrics::METRICS;

pub const REQUEST_TYPE: &str = "org.kubeflow.serving.inference.request";
pub const RESPONSE_TYPE: &str = "org.kubeflow.serving.inference.response";

/// Tries per event: the first post and two retries, 0.1 s then 0.4 s apart.
const ATTEMPTS: u32 = 3;
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
/// One post may take this long before it counts as failed.
pub const POST_TIMEOUT: Duration = Duration::from_secs(5);

/// One event to post.
pub struct Event {
    pub url: String,
    pub id: String,
    pub kind: &'static str,
    pub time: String,
    pub source: Arc<str>,
    /// `ce-inferenceservicename`.
    pub service: Arc<str>,
    pub endpoint: Arc<str>,
    /// `ce-metadata`: the kept request headers as a JSON object of lists.
    pub metadata: String,
    pub payload: Payload,
}

/// The headers KServe's logger sets from its request's headers: each name
/// with its values, as a JSON object (`{"X-Team": ["a"]}`; `{}` for none).
pub fn metadata_json(headers: &[(String, String)]) -> String {
    let mut by_name: std::collections::BTreeMap<&str, Vec<&str>> = std::collections::BTreeMap::new();
    for (name, value) in headers {
        by_name.entry(name).or_default().push(value);
    }
    serde_json::to_string(&by_name).unwrap_or_else(|_| "{}".into())
}

/// A header name as Go's `http.CanonicalHeaderKey` writes it (the keys of
/// KServe's `ce-metadata`): `x-team-id` becomes `X-Team-Id`.
pub fn canonical_header(name: &str) -> String {
    let mut upper = true;
    name.chars()
        .map(|c| {
            let out = if upper {
                c.to_ascii_uppercase()
            } else {
                c.to_ascii_lowercase()
            };
            upper = c == '-';
            out
        })
        .collect()
}

enum Message {
    Event(Box<Event>),
    Flush(std::sync::mpsc::Sender<()>),
}

/// The posting thread's queue.
pub struct Poster {
    queue: SyncSender<Message>,
    /// Set at shutdown: events not posted by then are given up on.
    give_up_at: Arc<Mutex<Option<Instant>>>,
}

impl Poster {
    pub fn start(capacity: usize) -> std::io::Result<Poster> {
        let (queue, receiver) = std::sync::mpsc::sync_channel(capacity.max(1));
        let give_up_at = Arc::new(Mutex::new(None));
        let deadline = give_up_at.clone();
        std::thread::Builder::new()
            .name("tfserve-cloudevents".into())
            .spawn(move || post_all(receiver, &deadline))?;
        Ok(Poster { queue, give_up_at })
    }

    /// Queues an event, or drops and counts it when the sink has fallen behind.
    pub fn post(&self, event: Event) {
        match self.queue.try_send(Message::Event(Box::new(event))) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => dropped("full"),
            Err(TrySendError::Disconnected(_)) => dropped("stopped"),
        }
    }

    /// Posts what is queued until `deadline`, then gives up on the rest
    /// (counted, and logged once with its count); returns when every event
    /// queued before now is posted or given up on. A post under way when the
    /// deadline passes may finish first (at most [`POST_TIMEOUT`]).
    pub fn finish(&self, deadline: Instant) {
        if let Ok(mut give_up_at) = self.give_up_at.lock() {
            *give_up_at = Some(deadline);
        }
        let (done, wait) = std::sync::mpsc::channel();
        if self.queue.send(Message::Flush(done)).is_ok() {
            let _ = wait.recv_timeout(deadline.saturating_duration_since(Instant::now()) + POST_TIMEOUT);
        }
    }
}

fn dropped(reason: &str) {
    METRICS
        .capture_dropped
        .with_label_values(&["cloudevents", reason])
        .inc();
}

fn post_all(receiver: Receiver<Message>, give_up_at: &Mutex<Option<Instant>>) {
    let config = ureq::Agent::config_builder()
        .timeout_global(Some(POST_TIMEOUT))
        .http_status_as_error(false)
        .build();
    let agent = ureq::Agent::new_with_config(config);
    let namespace = std::env::var("POD_NAMESPACE").unwrap_or_default();
    let mut losses = Losses::new();
    let mut given_up = 0u64;
    while let Ok(message) = receiver.recv() {
        match message {
            Message::Event(event) => {
                let deadline = give_up_at.lock().ok().and_then(|at| *at);
                if deadline.is_some_and(|at| Instant::now() >= at) {
                    dropped("shutdown");
                    given_up += 1;
                    continue;
                }
                match post(&agent, &event, &namespace, deadline) {
                    Ok(()) => METRICS.capture_records.with_label_values(&["cloudevents"]).inc(),
                    Err(reason) => {
                        dropped("undelivered");
                        let why = format!(
                            "CloudEvent {} to {} not delivered: {reason}",
                            event.id,
                            redacted(&event.url)
                        );
                        if let Some(line) = losses.lost(Instant::now(), why) {
                            log::warn!("capture: {line}");
                        }
                    }
                }
            }
            Message::Flush(done) => {
                if let Some(line) = losses.take() {
                    log::warn!("capture: {line}");
                }
                if given_up > 0 {
                    log::warn!(
                        "capture: gave up on {given_up} CloudEvent{} still queued at shutdown: the sink did not take them in time",
                        if given_up == 1 { "" } else { "s" }
                    );
                    given_up = 0;
                }
                let _ = done.send(());
            }
        }
    }
}

/// Posts one event, retrying connection failures, 429 and 5xx answers.
fn post(agent: &ureq::Agent, event: &Event, namespace: &str, deadline: Option<Instant>) -> Result<(), String> {
    let mut backoff = FIRST_BACKOFF;
    let mut last = String::new();
    for attempt in 1..=ATTEMPTS {
        let request = agent
            .post(&event.url)
            .header("ce-specversion", "1.0")
            .header("ce-id", &event.id)
            .header("ce-type", event.kind)
            .header("ce-source", event.source.as_ref())
            .header("ce-time", &event.time)
            .header("ce-inferenceservicename", event.service.as_ref())
            .header("ce-namespace", namespace)
            .header("ce-component", "predictor")
            .header("ce-endpoint", event.endpoint.as_ref())
            .header("ce-metadata", &event.metadata)
            .header("content-type", event.payload.content_type.as_ref());
        match request.send(&event.payload.body[..]) {
            Ok(response) if response.status().is_success() => return Ok(()),
            Ok(response) => {
                let status = response.status();
                last = format!("the sink answered {status}");
                if !(status.is_server_error() || status.as_u16() == 429) {
                    return Err(last);
                }
            }
            Err(error) => last = error.to_string(),
        }
        if attempt < ATTEMPTS {
            // Past shutdown's deadline the queue is what matters: no retry.
            if deadline.is_some_and(|at| Instant::now() + backoff >= at) {
                return Err(format!("{last} (no retry past shutdown's deadline)"));
            }
            std::thread::sleep(backoff);
            backoff *= 4;
        }
    }
    Err(format!("{last} (after {ATTEMPTS} tries)"))
}

/// A URL without its credentials (`user:password@`), for log lines.
pub fn redacted(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => format!("{scheme}://***@{}", &rest[at + 1..]),
        None => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_is_keyed_as_kserve_keys_it() {
        assert_eq!(canonical_header("x-team-ID"), "X-Team-Id");
        let headers = [
            ("X-Team".to_string(), "a".to_string()),
            ("X-Team".to_string(), "b".to_string()),
            ("Ce-Trace".to_string(), "t".to_string()),
        ];
        assert_eq!(metadata_json(&headers), r#"{"Ce-Trace":["t"],"X-Team":["a","b"]}"#);
        assert_eq!(metadata_json(&[]), "{}");
    }

    #[test]
    fn credentials_stay_out_of_logged_urls() {
        assert_eq!(
            redacted("https://user:secret@sink:8080/e?x=1"),
            "https://***@sink:8080/e?x=1"
        );
        assert_eq!(redacted("http://sink/path@x"), "http://sink/path@x");
    }
}
