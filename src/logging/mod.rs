//! The process's logger: env_logger under the server's filter, writing each
//! line as text or, with `--log_format json`, as one JSON object (`time`,
//! `level`, Cloud Logging's `severity`, `target`, `message`, then the line's own fields, such as an
//! access line's). Two exceptions to the filter: once the drain has shut the
//! listening sockets on purpose, actix's accept thread reports the closed
//! sockets as errors; and actix's HTTP/1 parser reports each request it
//! could not parse (answered 400) as one. Neither is the server's fault, and
//! both go out at DEBUG, so that a clean shutdown logs no ERROR and a client
//! cannot flood the log.

mod forward;

use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

use std::io::Write;

pub use forward::forward_stderr;

use log::kv::{self, Key, VisitSource};
use log::{Level, Log, Metadata, Record};
use serde_json::Map;

static LISTENERS_SHUT: AtomicBool = AtomicBool::new(false);
static JSON: AtomicBool = AtomicBool::new(false);
/// Where log lines are written: stderr, or a copy of it once stderr itself
/// is forwarded into the log ([`forward_stderr`]).
static OUTPUT: AtomicI32 = AtomicI32::new(2);

fn write_to(fd: i32) {
    OUTPUT.store(fd, Ordering::SeqCst);
}

/// The logger's output: one `write` per line to [`OUTPUT`].
struct Output;

impl Write for Output {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        // SAFETY: writing a borrowed buffer to a descriptor that stays open.
        let written = unsafe { libc::write(OUTPUT.load(Ordering::Relaxed), buf.as_ptr().cast(), buf.len()) };
        if written < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(written as usize)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Every line from now on as JSON (`true`) or text. The logger starts
/// before the settings are read, so they switch it once read.
pub fn use_json(json: bool) {
    JSON.store(json, Ordering::Relaxed);
}

/// Called by the drain just before it shuts the listening sockets.
pub fn listeners_shut() {
    LISTENERS_SHUT.store(true, Ordering::SeqCst);
}

/// Installs the logger with an env_logger filter (`info,tfserve=debug`).
pub fn init(filter: &str) -> Result<(), log::SetLoggerError> {
    let text = env_logger::Builder::new()
        .parse_filters(filter)
        .target(env_logger::Target::Pipe(Box::new(Output)))
        .build();
    let json = env_logger::Builder::new()
        .parse_filters(filter)
        .format(json_line)
        .target(env_logger::Target::Pipe(Box::new(Output)))
        .build();
    let max = text.filter();
    log::set_boxed_logger(Box::new(ServerLogger { text, json }))?;
    log::set_max_level(max);
    // A second process-wide default is refused; the first one stays in force.
    let _ = tracing::subscriber::set_global_default(DependencyEvents);
    Ok(())
}

/// Where the HTTP and gRPC stacks' `tracing` events go: to this logger, as
/// log records. Without a subscriber `tracing` forwards them itself, but
/// then every span those stacks open (h2 opens several per frame) is checked
/// against the logger as well, on every request; spans are dropped here.
struct DependencyEvents;

impl DependencyEvents {
    fn logs(metadata: &tracing::Metadata<'_>) -> bool {
        metadata.is_event()
            && log::logger().enabled(
                &Metadata::builder()
                    .level(log_level(*metadata.level()))
                    .target(metadata.target())
                    .build(),
            )
    }
}

fn log_level(level: tracing::Level) -> Level {
    match level {
        tracing::Level::ERROR => Level::Error,
        tracing::Level::WARN => Level::Warn,
        tracing::Level::INFO => Level::Info,
        tracing::Level::DEBUG => Level::Debug,
        tracing::Level::TRACE => Level::Trace,
    }
}

impl tracing::Subscriber for DependencyEvents {
    fn register_callsite(&self, metadata: &'static tracing::Metadata<'static>) -> tracing::subscriber::Interest {
        match Self::logs(metadata) {
            true => tracing::subscriber::Interest::always(),
            false => tracing::subscriber::Interest::never(),
        }
    }

    fn enabled(&self, metadata: &tracing::Metadata<'_>) -> bool {
        Self::logs(metadata)
    }

    fn max_level_hint(&self) -> Option<tracing::level_filters::LevelFilter> {
        Some(match log::max_level() {
            log::LevelFilter::Off => tracing::level_filters::LevelFilter::OFF,
            log::LevelFilter::Error => tracing::level_filters::LevelFilter::ERROR,
            log::LevelFilter::Warn => tracing::level_filters::LevelFilter::WARN,
            log::LevelFilter::Info => tracing::level_filters::LevelFilter::INFO,
            log::LevelFilter::Debug => tracing::level_filters::LevelFilter::DEBUG,
            log::LevelFilter::Trace => tracing::level_filters::LevelFilter::TRACE,
        })
    }

    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }

    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}

    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}

    fn event(&self, event: &tracing::Event<'_>) {
        let metadata = event.metadata();
        let mut message = EventText::default();
        event.record(&mut message);
        log::logger().log(
            &Record::builder()
                .level(log_level(*metadata.level()))
                .target(metadata.target())
                .module_path(metadata.module_path())
                .file(metadata.file())
                .line(metadata.line())
                .args(format_args!("{}", message.0))
                .build(),
        );
    }

    fn enter(&self, _: &tracing::span::Id) {}

    fn exit(&self, _: &tracing::span::Id) {}
}

/// An event's message, then its other fields as `name=value`.
#[derive(Default)]
struct EventText(String);

impl tracing::field::Visit for EventText {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        use std::fmt::Write as _;
        let separator = if self.0.is_empty() { "" } else { " " };
        let _ = match field.name() {
            "message" => write!(self.0, "{separator}{value:?}"),
            name => write!(self.0, "{separator}{name}={value:?}"),
        };
    }
}

struct ServerLogger {
    text: env_logger::Logger,
    json: env_logger::Logger,
}

impl ServerLogger {
    fn inner(&self) -> &env_logger::Logger {
        if JSON.load(Ordering::Relaxed) {
            &self.json
        } else {
            &self.text
        }
    }
}

/// One record as one JSON object on one line.
fn json_line(out: &mut env_logger::fmt::Formatter, record: &Record) -> std::io::Result<()> {
    let line = json_object(&out.timestamp_micros().to_string(), record);
    serde_json::to_writer(&mut *out, &line)?;
    writeln!(out)
}

fn json_object(time: &str, record: &Record) -> serde_json::Value {
    let mut fields = Map::new();
    fields.insert("time".into(), time.into());
    fields.insert("level".into(), record.level().as_str().into());
    // Cloud Logging's name and words for the level (Vertex AI, GKE, Cloud Run).
    let severity = match record.level() {
        log::Level::Error => "ERROR",
        log::Level::Warn => "WARNING",
        log::Level::Info => "INFO",
        log::Level::Debug | log::Level::Trace => "DEBUG",
    };
    fields.insert("severity".into(), severity.into());
    fields.insert("target".into(), record.target().into());
    fields.insert("message".into(), record.args().to_string().into());
    let _ = record.key_values().visit(&mut JsonFields(&mut fields));
    serde_json::Value::Object(fields)
}

/// A record's key-values as JSON values of their own type.
struct JsonFields<'a>(&'a mut Map<String, serde_json::Value>);

impl<'kvs> VisitSource<'kvs> for JsonFields<'_> {
    fn visit_pair(&mut self, key: Key<'kvs>, value: kv::Value<'kvs>) -> Result<(), kv::Error> {
        let json = if let Some(text) = value.to_borrowed_str() {
            text.into()
        } else if let Some(n) = value.to_u64() {
            n.into()
        } else if let Some(n) = value.to_i64() {
            n.into()
        } else if let Some(x) = value.to_f64() {
            serde_json::Number::from_f64(x).map_or(serde_json::Value::Null, serde_json::Value::Number)
        } else if let Some(b) = value.to_bool() {
            b.into()
        } else {
            // An absent `Option` field is the unit value, which prints as `None`.
            match value.to_string() {
                none if none == "None" => serde_json::Value::Null,
                text => text.into(),
            }
        };
        self.0.insert(key.as_str().to_string(), json);
        Ok(())
    }
}

/// Whether an ERROR record tells of nothing wrong with the server, and
/// goes out at DEBUG: actix's accept thread complaining about sockets the
/// drain shut, or actix's HTTP/1 parser telling of a request it could not
/// parse (a NUL in a header, a control byte in the path). The client was
/// answered 400; one such line per request would let any client flood the
/// log.
fn demoted(record: &Record) -> bool {
    record.level() == Level::Error
        && match record.target() {
            "actix_server::accept" => LISTENERS_SHUT.load(Ordering::Relaxed),
            "actix_http::h1::dispatcher" => record.args().to_string().contains("request parse error"),
            _ => false,
        }
}

impl Log for ServerLogger {
    fn enabled(&self, metadata: &Metadata) -> bool {
        self.inner().enabled(metadata)
    }

    fn log(&self, record: &Record) {
        let inner = self.inner();
        if !demoted(record) {
            return inner.log(record);
        }
        let demoted = Record::builder()
            .args(*record.args())
            .level(Level::Debug)
            .target(record.target())
            .module_path(record.module_path())
            .file(record.file())
            .line(record.line())
            .build();
        if inner.enabled(demoted.metadata()) {
            inner.log(&demoted);
        }
    }

    fn flush(&self) {
        self.inner().flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_accept_threads_errors_after_the_shut_and_unparsable_requests_are_demoted() {
        let record = |level, target, message: &str| {
            let args = format_args!("{message}");
            let demoted = demoted(&Record::builder().args(args).level(level).target(target).build());
            demoted
        };
        LISTENERS_SHUT.store(false, Ordering::SeqCst);
        assert!(!record(Level::Error, "actix_server::accept", "x"));
        LISTENERS_SHUT.store(true, Ordering::SeqCst);
        assert!(record(Level::Error, "actix_server::accept", "x"));
        assert!(!record(Level::Error, "tfserve::serve", "x"));
        assert!(!record(Level::Warn, "actix_server::accept", "x"));
        LISTENERS_SHUT.store(false, Ordering::SeqCst);
        let dispatcher = "actix_http::h1::dispatcher";
        let parse = "stream error: request parse error: invalid Header provided";
        assert!(record(Level::Error, dispatcher, parse));
        assert!(!record(
            Level::Error,
            dispatcher,
            "Internal server error: unexpected eof"
        ));
    }

    #[test]
    fn a_json_line_has_the_stable_keys_and_the_fields_in_their_types() {
        let fields: [(&str, kv::Value); 4] = [
            ("status", kv::Value::from(200u16)),
            ("bytes_out", kv::Value::from(31u64)),
            ("total_ms", kv::Value::from(1.5f64)),
            ("version", kv::Value::null()),
        ];
        let fields: &[(&str, kv::Value)] = &fields;
        let args = format_args!("POST /v1/models/m:predict 200");
        let record = Record::builder()
            .args(args)
            .level(Level::Info)
            .target("access")
            .key_values(&fields)
            .build();
        let line = json_object("2026-11-24T00:00:00.000000Z", &record);
        assert_eq!(
            line,
            serde_json::json!({
                "time": "2026-11-24T00:00:00.000000Z",
                "level": "INFO",
                "severity": "INFO",
                "target": "access",
                "message": "POST /v1/models/m:predict 200",
                "status": 200,
                "bytes_out": 31,
                "total_ms": 1.5,
                "version": null,
            })
        );
    }
}
