//! With `--log_format json`, every line on stderr is the logger's: what other
//! code writes there (TensorFlow's C++ logging through absl, a library's
//! notice, a panic's message) is read back from a pipe that stands in for
//! stderr and logged as records of its own (target `tensorflow` for
//! TensorFlow's lines, `stderr` for the rest), a line and the indented lines
//! that continue it as one record. The logger itself writes to a copy of
//! the real stderr.
//!
//! Should the process abort (TensorFlow's `LOG(FATAL)`), what is still in
//! the pipe is copied to the real stderr before it dies, so the reason is
//! never lost.

use std::ffi::c_int;
use std::io::{BufRead, BufReader};
use std::os::fd::FromRawFd;
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::Duration;

use log::{Level, Record};

/// The pipe's read end and the real stderr, for the abort handler.
static PIPE_READ: AtomicI32 = AtomicI32::new(-1);
static REAL_STDERR: AtomicI32 = AtomicI32::new(-1);

/// How long a record waits for a continuation line before it is logged.
const CONTINUATION_WAIT: Duration = Duration::from_millis(20);

/// Points stderr at a pipe read by a thread that logs each line.
pub fn forward_stderr() -> std::io::Result<()> {
    let mut pipe = [0 as c_int; 2];
    // SAFETY: plain descriptor calls on descriptors this function owns.
    unsafe {
        let real = libc::fcntl(2, libc::F_DUPFD_CLOEXEC, 3);
        if real < 0 {
            return Err(std::io::Error::last_os_error());
        }
        if libc::pipe2(pipe.as_mut_ptr(), libc::O_CLOEXEC) < 0 {
            let error = std::io::Error::last_os_error();
            libc::close(real);
            return Err(error);
        }
        super::write_to(real);
        REAL_STDERR.store(real, Ordering::SeqCst);
        PIPE_READ.store(pipe[0], Ordering::SeqCst);
        libc::dup2(pipe[1], 2);
        libc::close(pipe[1]);
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = copy_out_on_abort as *const () as libc::sighandler_t;
        libc::sigaction(libc::SIGABRT, &action, std::ptr::null_mut());
    }
    let read = pipe[0];
    std::thread::Builder::new()
        .name("tfserve-stderr".into())
        .spawn(move || {
            // SAFETY: the read end is this thread's alone from here on.
            let pipe = BufReader::new(unsafe { std::fs::File::from_raw_fd(read) });
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| relay(pipe)));
            // However the relay ended, stderr's writers must not fill a
            // pipe nobody reads.
            // SAFETY: both descriptors stay open for the process's life.
            unsafe { libc::dup2(REAL_STDERR.load(Ordering::SeqCst), 2) };
        })?;
    Ok(())
}

/// Reads lines until stderr's last writer is gone.
fn relay(mut pipe: BufReader<std::fs::File>) {
    let mut pending: Option<Line> = None;
    let mut raw = Vec::new();
    loop {
        if pending.is_some() && pipe.buffer().is_empty() && !readable(PIPE_READ.load(Ordering::Relaxed)) {
            if let Some(line) = pending.take() {
                line.log();
            }
        }
        raw.clear();
        match pipe.read_until(b'\n', &mut raw) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        let text = String::from_utf8_lossy(&raw);
        let text = text.trim_end_matches(['\n', '\r']);
        match pending.as_mut() {
            Some(line) if text.starts_with(['\t', ' ']) => {
                line.message.push('\n');
                line.message.push_str(text.trim_start());
            }
            _ => {
                if let Some(line) = pending.take() {
                    line.log();
                }
                if !text.trim().is_empty() {
                    pending = Some(Line::parse(text));
                }
            }
        }
    }
    if let Some(line) = pending {
        line.log();
    }
}

/// Whether more is ready to read within [`CONTINUATION_WAIT`].
fn readable(fd: c_int) -> bool {
    let mut poll = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    unsafe { libc::poll(&mut poll, 1, CONTINUATION_WAIT.as_millis() as c_int) > 0 }
}

/// One line read back, as a record.
#[derive(Debug, PartialEq)]
struct Line {
    level: Level,
    target: &'static str,
    /// `file:line` of a TensorFlow line.
    source: Option<String>,
    message: String,
    fatal: bool,
}

impl Line {
    /// Reads absl's prefix (`I1125 12:00:00.123456  4242 file.cc:12] text`)
    /// or TensorFlow's older one (`2026-11-25 12:00:00.123456: I file.cc:12] text`).
    fn parse(text: &str) -> Line {
        let absl = || {
            let mut chars = text.chars();
            let severity = chars.next()?;
            let rest = chars.as_str();
            rest.get(..4)?.bytes().all(|b| b.is_ascii_digit()).then_some(())?;
            Some((severity, rest))
        };
        let legacy = || {
            let (stamp, rest) = text.split_once(": ")?;
            (stamp.len() >= 19 && stamp.as_bytes()[4] == b'-').then_some(())?;
            let mut chars = rest.chars();
            let severity = chars.next()?;
            (chars.next()? == ' ').then_some((severity, chars.as_str()))
        };
        let found = absl()
            .or_else(legacy)
            .filter(|(severity, _)| "IWEF".contains(*severity))
            .and_then(|(severity, rest)| {
                let (head, message) = rest.split_once("] ")?;
                let source = head.split_whitespace().last()?.to_string();
                Some((severity, source, message))
            });
        match found {
            Some((severity, source, message)) => Line {
                level: match severity {
                    'I' => Level::Info,
                    'W' => Level::Warn,
                    _ => Level::Error,
                },
                target: "tensorflow",
                source: Some(source),
                message: message.to_string(),
                fatal: severity == 'F',
            },
            None => Line {
                level: Level::Warn,
                target: "stderr",
                source: None,
                message: text.to_string(),
                fatal: false,
            },
        }
    }

    fn log(&self) {
        let fields: [(&str, log::kv::Value); 2] = [
            ("source", log::kv::Value::from(self.source.as_deref().unwrap_or(""))),
            ("fatal", log::kv::Value::from(self.fatal)),
        ];
        let fields: &[(&str, log::kv::Value)] = match (&self.source, self.fatal) {
            (None, _) => &[],
            (Some(_), false) => &fields[..1],
            (Some(_), true) => &fields,
        };
        log::logger().log(
            &Record::builder()
                .level(self.level)
                .target(self.target)
                .args(format_args!("{}", self.message))
                .key_values(&fields)
                .build(),
        );
    }
}

/// SIGABRT: a moment for the relay to log what the dying thread wrote, then
/// whatever is left in the pipe goes to the real stderr as it is, and the
/// default action runs. Only async-signal-safe calls.
extern "C" fn copy_out_on_abort(signal: c_int) {
    let (read, real) = (PIPE_READ.load(Ordering::SeqCst), REAL_STDERR.load(Ordering::SeqCst));
    // SAFETY: descriptors this module opened and never closes.
    unsafe {
        let moment = libc::timespec {
            tv_sec: 0,
            tv_nsec: 200_000_000,
        };
        libc::nanosleep(&moment, std::ptr::null_mut());
        if read >= 0 && real >= 0 {
            let flags = libc::fcntl(read, libc::F_GETFL);
            libc::fcntl(read, libc::F_SETFL, flags | libc::O_NONBLOCK);
            let mut buffer = [0u8; 4096];
            loop {
                let n = libc::read(read, buffer.as_mut_ptr().cast(), buffer.len());
                if n <= 0 || libc::write(real, buffer.as_ptr().cast(), n as usize) <= 0 {
                    break;
                }
            }
        }
        libc::signal(signal, libc::SIG_DFL);
        libc::raise(signal);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tensorflow_lines_are_read_with_their_level_and_source() {
        let absl = Line::parse("W0000 00:00:1764072000.123456   4242 cpu_feature_guard.cc:210] This binary uses AVX2");
        assert_eq!(
            absl,
            Line {
                level: Level::Warn,
                target: "tensorflow",
                source: Some("cpu_feature_guard.cc:210".into()),
                message: "This binary uses AVX2".into(),
                fatal: false,
            }
        );
        let legacy = Line::parse(
            "2026-11-25 12:00:00.123456: E tensorflow/core/framework/op_kernel.cc:1840] OP_REQUIRES failed at x",
        );
        assert_eq!((legacy.level, legacy.target), (Level::Error, "tensorflow"));
        assert_eq!(
            legacy.source.as_deref(),
            Some("tensorflow/core/framework/op_kernel.cc:1840")
        );
        assert!(Line::parse("F1125 12:00:00.1 1 x.cc:1] Check failed").fatal);
        let other = Line::parse("thread 'main' panicked at src/x.rs:1:1:");
        assert_eq!((other.level, other.target, other.source), (Level::Warn, "stderr", None));
        assert_eq!(other.message, "thread 'main' panicked at src/x.rs:1:1:");
    }
}
