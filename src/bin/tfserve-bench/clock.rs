//! A wait until an instant, to within the kernel's timer slack (50 µs by
//! default) rather than tokio's whole milliseconds: a timerfd the runtime
//! polls with its sockets, so waiting spins no core.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::Instant;

use tokio::io::unix::AsyncFd;

pub struct Clock {
    timer: AsyncFd<OwnedFd>,
}

impl Clock {
    pub fn new() -> io::Result<Clock> {
        // SAFETY: timerfd_create takes no pointers; a valid descriptor is
        // owned from here on.
        let fd = unsafe { libc::timerfd_create(libc::CLOCK_MONOTONIC, libc::TFD_NONBLOCK | libc::TFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just created and nothing else owns it; the
        // descriptor stays open, unreplaced, for as long as `AsyncFd` holds it.
        let timer = unsafe { AsyncFd::register(OwnedFd::from_raw_fd(fd))? };
        Ok(Clock { timer })
    }

    /// Returns at `due` (at once when it has passed).
    pub async fn until(&self, due: Instant) -> io::Result<()> {
        let Some(wait) = due.checked_duration_since(Instant::now()).filter(|w| !w.is_zero()) else {
            return Ok(());
        };
        let spec = libc::itimerspec {
            it_interval: libc::timespec { tv_sec: 0, tv_nsec: 0 },
            it_value: libc::timespec {
                tv_sec: wait.as_secs() as libc::time_t,
                tv_nsec: wait.subsec_nanos() as libc::c_long,
            },
        };
        let fd = self.timer.as_raw_fd();
        // SAFETY: `spec` outlives the call; the old value is not asked for.
        if unsafe { libc::timerfd_settime(fd, 0, &spec, std::ptr::null_mut()) } < 0 {
            return Err(io::Error::last_os_error());
        }
        loop {
            let mut ready = self.timer.readable().await?;
            let mut expirations = [0u8; 8];
            // SAFETY: reads at most 8 bytes into a buffer of 8.
            let read = unsafe { libc::read(fd, expirations.as_mut_ptr().cast(), expirations.len()) };
            if read == 8 {
                return Ok(());
            }
            let error = io::Error::last_os_error();
            if error.kind() != io::ErrorKind::WouldBlock {
                return Err(error);
            }
            ready.clear_ready();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn returns_no_earlier_than_its_instant_and_at_once_for_a_past_one() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let clock = Clock::new().unwrap();
            let start = Instant::now();
            for step in 1..=20u32 {
                let due = start + Duration::from_micros(300) * step;
                clock.until(due).await.unwrap();
                assert!(Instant::now() >= due, "returned before its instant");
            }
            clock.until(start).await.unwrap();
        });
    }
}
