//! The process's logger: env_logger under the server's filter, with one
//! exception. Once the drain has shut the listening sockets on purpose,
//! actix's accept thread reports the closed sockets as errors; those lines
//! are expected then, and go out at DEBUG, so a clean shutdown logs no ERROR.

use std::sync::atomic::{AtomicBool, Ordering};

use log::{Level, Log, Metadata, Record};

static LISTENERS_SHUT: AtomicBool = AtomicBool::new(false);

/// Called by the drain just before it shuts the listening sockets.
pub fn listeners_shut() {
    LISTENERS_SHUT.store(true, Ordering::SeqCst);
}

/// Installs the logger with an env_logger filter (`info,tfserve=debug`).
pub fn init(filter: &str) -> Result<(), log::SetLoggerError> {
    let inner = env_logger::Builder::new().parse_filters(filter).build();
    let max = inner.filter();
    log::set_boxed_logger(Box::new(ServerLogger { inner }))?;
    log::set_max_level(max);
    Ok(())
}

struct ServerLogger {
    inner: env_logger::Logger,
}

/// Whether a record is actix's accept thread complaining about sockets the
/// drain shut.
fn expected_after_shut(record: &Record) -> bool {
    record.level() == Level::Error
        && record.target() == "actix_server::accept"
        && LISTENERS_SHUT.load(Ordering::Relaxed)
}

impl Log for ServerLogger {
    fn enabled(&self, metadata: &Metadata) -> bool {
        self.inner.enabled(metadata)
    }

    fn log(&self, record: &Record) {
        if !expected_after_shut(record) {
            return self.inner.log(record);
        }
        let demoted = Record::builder()
            .args(*record.args())
            .level(Level::Debug)
            .target(record.target())
            .module_path(record.module_path())
            .file(record.file())
            .line(record.line())
            .build();
        if self.inner.enabled(demoted.metadata()) {
            self.inner.log(&demoted);
        }
    }

    fn flush(&self) {
        self.inner.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_accept_threads_errors_after_the_shut_are_expected() {
        let record = |level, target| {
            let args = format_args!("x");
            let expected = expected_after_shut(&Record::builder().args(args).level(level).target(target).build());
            expected
        };
        LISTENERS_SHUT.store(false, Ordering::SeqCst);
        assert!(!record(Level::Error, "actix_server::accept"));
        LISTENERS_SHUT.store(true, Ordering::SeqCst);
        assert!(record(Level::Error, "actix_server::accept"));
        assert!(!record(Level::Error, "tfserve::serve"));
        assert!(!record(Level::Warn, "actix_server::accept"));
        LISTENERS_SHUT.store(false, Ordering::SeqCst);
    }
}
