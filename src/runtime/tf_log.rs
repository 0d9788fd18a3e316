//! TensorFlow's own logging: its level follows the server's, and what
//! libtensorflow prints while the process starts (before `main`) is held back
//! and replayed through the server's log at debug level, so `--help` and
//! `--version` print nothing but their own text.
//!
//! libtensorflow's static initialisers run before `main` and log through absl
//! straight to stderr. The binary registers [`before_libraries`] in
//! `.preinit_array`, which the dynamic loader runs before any shared library's
//! initialisers: it points stderr at a pipe, and [`restore_stderr`] undoes
//! that first thing in `main`.
//!
//! [`quietly`] holds back what TensorFlow prints while `--version` and
//! `--gpu` make their first session, unless it aborts (a `LOG(FATAL)`, a
//! CUDA library it cannot use): then what it printed is written out before
//! the process dies, so the reason is never lost.

use std::ffi::{c_char, c_int};
use std::sync::atomic::{AtomicI32, Ordering};

static SAVED_STDERR: AtomicI32 = AtomicI32::new(-1);
static CAPTURE_READ: AtomicI32 = AtomicI32::new(-1);
/// While [`quietly`] runs: the real stderr, and the file holding what was written instead.
static QUIET_STDERR: AtomicI32 = AtomicI32::new(-1);
static QUIET_HELD: AtomicI32 = AtomicI32::new(-1);

/// Runs `work` with stderr held in an anonymous file and dropped afterwards:
/// a report is its own output, not the notices TensorFlow logs while it makes
/// its first session. Should `work` abort, the held text goes to the real
/// stderr first.
pub fn quietly<T>(work: impl FnOnce() -> T) -> T {
    // SAFETY: plain descriptor calls; every descriptor opened here is closed
    // below, and the handler installed is the previous one again afterwards.
    unsafe {
        let held = libc::memfd_create(c"tfserve-quiet".as_ptr(), libc::MFD_CLOEXEC);
        let saved = libc::fcntl(2, libc::F_DUPFD_CLOEXEC, 3);
        if held < 0 || saved < 0 || libc::dup2(held, 2) < 0 {
            for fd in [held, saved] {
                if fd >= 0 {
                    libc::close(fd);
                }
            }
            return work();
        }
        QUIET_STDERR.store(saved, Ordering::SeqCst);
        QUIET_HELD.store(held, Ordering::SeqCst);
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = replay_held_stderr as *const () as libc::sighandler_t;
        let mut previous: libc::sigaction = std::mem::zeroed();
        libc::sigaction(libc::SIGABRT, &action, &mut previous);
        let out = work();
        libc::sigaction(libc::SIGABRT, &previous, std::ptr::null_mut());
        QUIET_STDERR.store(-1, Ordering::SeqCst);
        QUIET_HELD.store(-1, Ordering::SeqCst);
        libc::dup2(saved, 2);
        libc::close(saved);
        libc::close(held);
        out
    }
}

/// SIGABRT inside [`quietly`]: the real stderr back, what was held written to
/// it, then the default action. Only async-signal-safe calls.
extern "C" fn replay_held_stderr(signal: c_int) {
    let saved = QUIET_STDERR.load(Ordering::SeqCst);
    let held = QUIET_HELD.load(Ordering::SeqCst);
    // SAFETY: descriptors owned by `quietly`, which cannot return while this runs.
    unsafe {
        if saved >= 0 && held >= 0 {
            libc::dup2(saved, 2);
            libc::lseek(held, 0, libc::SEEK_SET);
            let mut buffer = [0u8; 4096];
            loop {
                let n = libc::read(held, buffer.as_mut_ptr().cast(), buffer.len());
                if n <= 0 || libc::write(2, buffer.as_ptr().cast(), n as usize) <= 0 {
                    break;
                }
            }
        }
        libc::signal(signal, libc::SIG_DFL);
        libc::raise(signal);
    }
}

/// `TF_CPP_MIN_LOG_LEVEL` for a server log filter (env_logger's syntax): a
/// `tensorflow=LEVEL` directive, else the filter's global level, else (only
/// module directives) errors. 0 = info, 1 = warning, 2 = error, 3 = fatal only.
pub fn tf_min_log_level(filter: &str) -> u8 {
    let level = |name: &str| match name.trim().to_ascii_lowercase().as_str() {
        "trace" | "debug" | "info" => Some(0),
        "warn" | "warning" => Some(1),
        "error" => Some(2),
        "off" => Some(3),
        _ => None,
    };
    let directives = || filter.split('/').next().unwrap_or_default().split(',');
    let tensorflow = directives().find_map(|d| d.trim().strip_prefix("tensorflow=").and_then(level));
    let global = directives().filter(|d| !d.contains('=')).find_map(level);
    let modules_only = directives().any(|d| d.contains('='));
    tensorflow.or(global).unwrap_or(if modules_only { 2 } else { 0 })
}

/// The server's log filter: `RUST_LOG`, else Simple TensorFlow Serving's
/// `STFS_LOG_LEVEL`, else info.
pub fn server_log_filter() -> String {
    std::env::var("RUST_LOG")
        .ok()
        .filter(|f| !f.trim().is_empty())
        .or_else(|| std::env::var("STFS_LOG_LEVEL").ok().map(|l| l.to_ascii_lowercase()))
        .unwrap_or_else(|| "info".into())
}

/// Runs before any shared library is initialised (from `.preinit_array`):
/// captures stderr until [`restore_stderr`]. Only libc is usable this early,
/// and not even all of it: libc's own initialisation, which runs next,
/// resets the environment, so TensorFlow's level cannot be set here.
///
/// # Safety
/// Called once by the dynamic loader, single-threaded, before `main`.
pub unsafe extern "C" fn before_libraries(_argc: c_int, _argv: *const *const c_char, _envp: *const *const c_char) {
    let mut fds = [0 as c_int; 2];
    // Non-blocking: should the start-up output ever outgrow the pipe, the
    // excess is dropped rather than the process hanging before `main`.
    if libc::pipe2(fds.as_mut_ptr(), libc::O_NONBLOCK | libc::O_CLOEXEC) != 0 {
        return;
    }
    let saved = libc::fcntl(2, libc::F_DUPFD_CLOEXEC, 3);
    if saved < 0 || libc::dup2(fds[1], 2) < 0 {
        libc::close(fds[0]);
        libc::close(fds[1]);
        if saved >= 0 {
            libc::close(saved);
        }
        return;
    }
    libc::close(fds[1]);
    SAVED_STDERR.store(saved, Ordering::SeqCst);
    CAPTURE_READ.store(fds[0], Ordering::SeqCst);
}

/// Makes TensorFlow log at the server's level. libtensorflow reads
/// `TF_CPP_MIN_LOG_LEVEL` once, while it starts (before `main`), and logs at
/// info when it is unset. So when the server's filter asks for less and the
/// environment does not say, the binary executes itself again, same pid and
/// arguments, with the variable set; returns only when that is not needed or
/// fails (then TensorFlow keeps its default).
pub fn follow_server_level(filter: &str) {
    use std::os::unix::process::CommandExt;
    let level = tf_min_log_level(filter);
    if level == 0 || std::env::var_os("TF_CPP_MIN_LOG_LEVEL").is_some() {
        return;
    }
    let Ok(exe) = std::env::current_exe() else {
        return;
    };
    let mut args = std::env::args_os();
    let arg0 = args.next().unwrap_or_else(|| exe.clone().into_os_string());
    let error = std::process::Command::new(&exe)
        .arg0(arg0)
        .args(args)
        .env("TF_CPP_MIN_LOG_LEVEL", level.to_string())
        .exec();
    eprintln!("tfserve: cannot restart with TF_CPP_MIN_LOG_LEVEL={level} ({error}); TensorFlow logs at info");
}

/// Gives stderr back and returns what was written to it before `main`
/// (empty when nothing was captured).
pub fn restore_stderr() -> String {
    let saved = SAVED_STDERR.swap(-1, Ordering::SeqCst);
    let read_end = CAPTURE_READ.swap(-1, Ordering::SeqCst);
    if saved < 0 || read_end < 0 {
        return String::new();
    }
    let mut captured = Vec::new();
    // SAFETY: both descriptors were opened by `before_libraries` and are
    // owned here alone; once stderr is restored, no writer is left on the
    // pipe, so reading ends at EOF (or EAGAIN when it is empty).
    unsafe {
        libc::dup2(saved, 2);
        libc::close(saved);
        let mut buffer = [0u8; 4096];
        loop {
            let n = libc::read(read_end, buffer.as_mut_ptr().cast(), buffer.len());
            if n <= 0 {
                break;
            }
            captured.extend_from_slice(&buffer[..n as usize]);
        }
        libc::close(read_end);
    }
    String::from_utf8_lossy(&captured).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Set in the child process of `an_abort_inside_quietly_still_says_why`.
    const ABORT_CHILD: &str = "TFSERVE_TEST_ABORT_INSIDE_QUIETLY";

    #[test]
    fn an_abort_inside_quietly_still_says_why() {
        if std::env::var_os(ABORT_CHILD).is_some() {
            quietly(|| {
                eprintln!("held back unless the process dies");
                std::process::abort();
            });
            return;
        }
        // What a successful run prints is dropped.
        assert_eq!(quietly(|| 7), 7);
        let child = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "runtime::tf_log::tests::an_abort_inside_quietly_still_says_why",
                "--nocapture",
            ])
            .env(ABORT_CHILD, "1")
            .output()
            .unwrap();
        assert!(!child.status.success());
        let stderr = String::from_utf8_lossy(&child.stderr);
        assert!(stderr.contains("held back unless the process dies"), "{stderr}");
    }

    #[test]
    fn tensorflow_follows_the_server_level() {
        assert_eq!(tf_min_log_level(""), 0);
        assert_eq!(tf_min_log_level("info"), 0);
        assert_eq!(tf_min_log_level("warn"), 1);
        assert_eq!(tf_min_log_level("ERROR"), 2);
        assert_eq!(tf_min_log_level("off"), 3);
        assert_eq!(tf_min_log_level("error,tfserve=debug"), 2);
        assert_eq!(tf_min_log_level("tfserve=debug"), 2);
        assert_eq!(tf_min_log_level("debug,tensorflow=warn"), 1);
        assert_eq!(tf_min_log_level("info/some regex"), 0);
        assert_eq!(tf_min_log_level("nonsense"), 0);
    }
}
