//! KServe's inference logger protocol: each captured request and response a
//! CloudEvent in HTTP binary mode (`ce-*` headers, the body as it was),
//! typed `org.kubeflow.serving.inference.request`/`.response` and sharing
//! the request's id, posted from a thread of its own with a bounded queue and
//! a bounded number of retries.

use std::sync::mpsc::{Receiver, SyncSender, TrySendError};
use std::time::Duration;

use super::Payload;
use crate::metrics::METRICS;

pub const REQUEST_TYPE: &str = "org.kubeflow.serving.inference.request";
pub const RESPONSE_TYPE: &str = "org.kubeflow.serving.inference.response";

/// Tries per event: the first post and two retries, 0.1 s then 0.4 s apart.
const ATTEMPTS: u32 = 3;
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
/// One post may take this long before it counts as failed.
const POST_TIMEOUT: Duration = Duration::from_secs(5);

/// One event to post.
pub struct Event {
    pub url: String,
    pub id: String,
    pub kind: &'static str,
    pub time: String,
    pub model: String,
    pub payload: Payload,
}

enum Message {
    Event(Box<Event>),
    Flush(std::sync::mpsc::Sender<()>),
}

/// The posting thread's queue.
pub struct Poster {
    queue: SyncSender<Message>,
}

impl Poster {
    pub fn start(capacity: usize) -> std::io::Result<Poster> {
        let (queue, receiver) = std::sync::mpsc::sync_channel(capacity.max(1));
        std::thread::Builder::new()
            .name("tfserve-cloudevents".into())
            .spawn(move || post_all(receiver))?;
        Ok(Poster { queue })
    }

    /// Queues an event, or drops and counts it when the sink has fallen behind.
    pub fn post(&self, event: Event) {
        match self.queue.try_send(Message::Event(Box::new(event))) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => dropped("full"),
            Err(TrySendError::Disconnected(_)) => dropped("stopped"),
        }
    }

    /// Waits, at most `limit`, until every event queued before now is posted or given up on.
    pub fn flush(&self, limit: Duration) {
        let (done, wait) = std::sync::mpsc::channel();
        if self.queue.send(Message::Flush(done)).is_ok() {
            let _ = wait.recv_timeout(limit);
        }
    }
}

fn dropped(reason: &str) {
    METRICS
        .capture_dropped
        .with_label_values(&["cloudevents", reason])
        .inc();
}

fn post_all(receiver: Receiver<Message>) {
    let config = ureq::Agent::config_builder()
        .timeout_global(Some(POST_TIMEOUT))
        .http_status_as_error(false)
        .build();
    let agent = ureq::Agent::new_with_config(config);
    let namespace = std::env::var("POD_NAMESPACE").unwrap_or_default();
    while let Ok(message) = receiver.recv() {
        match message {
            Message::Event(event) => match post(&agent, &event, &namespace) {
                Ok(()) => METRICS.capture_records.with_label_values(&["cloudevents"]).inc(),
                Err(reason) => {
                    log::warn!(
                        "capture: CloudEvent {} to {} not delivered: {reason}",
                        event.id,
                        redacted(&event.url)
                    );
                    dropped("undelivered");
                }
            },
            Message::Flush(done) => {
                let _ = done.send(());
            }
        }
    }
}

/// Posts one event, retrying connection failures, 429 and 5xx answers.
fn post(agent: &ureq::Agent, event: &Event, namespace: &str) -> Result<(), String> {
    let mut backoff = FIRST_BACKOFF;
    let mut last = String::new();
    for attempt in 1..=ATTEMPTS {
        let mut request = agent
            .post(&event.url)
            .header("ce-specversion", "1.0")
            .header("ce-id", &event.id)
            .header("ce-type", event.kind)
            .header("ce-source", "tfserve")
            .header("ce-time", &event.time)
            .header("ce-inferenceservicename", &event.model)
            .header("ce-component", "predictor")
            .header("content-type", event.payload.content_type.as_ref());
        if !namespace.is_empty() {
            request = request.header("ce-namespace", namespace);
        }
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
    fn credentials_stay_out_of_logged_urls() {
        assert_eq!(
            redacted("https://user:secret@sink:8080/e?x=1"),
            "https://***@sink:8080/e?x=1"
        );
        assert_eq!(redacted("http://sink/path@x"), "http://sink/path@x");
    }
}
