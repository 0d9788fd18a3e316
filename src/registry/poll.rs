//! The background thread that re-reads base paths and the model config file,
//! and handing freed memory back to the system after unloads.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::Registry;

/// Hands freed memory back to the operating system: glibc's arenas (where
/// TensorFlow's tensors and sessions live) keep freed pages until trimmed,
/// and mimalloc (the server's own buffers) purges freed segments only some
/// seconds later, so RSS would stay near its peak after an unload or a
/// burst of large requests.
pub fn release_freed_memory() {
    // SAFETY: mi_collect only returns memory mimalloc holds free; it is thread-safe.
    unsafe { libmimalloc_sys::mi_collect(true) };
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        extern "C" {
            fn malloc_trim(pad: usize) -> i32;
        }
        // SAFETY: malloc_trim only releases free heap memory; it is thread-safe.
        unsafe {
            malloc_trim(0);
        }
    }
}

/// Polls base paths (`file_system_poll_wait_seconds`) and re-reads the config
/// file (`model_config_file_poll_wait_seconds`) on a background thread.
pub fn spawn_poller(
    registry: Arc<Registry>,
    file_system: Option<Duration>,
    config: Option<(std::path::PathBuf, Duration)>,
) -> std::io::Result<()> {
    if file_system.is_none() && config.is_none() {
        return Ok(());
    }
    let tick = [file_system, config.as_ref().map(|c| c.1)]
        .into_iter()
        .flatten()
        .min()
        .unwrap_or(Duration::from_secs(1));
    std::thread::Builder::new()
        .name("tfserve-poller".into())
        .spawn(move || {
            let (mut next_fs, mut next_config) = (Instant::now(), Instant::now());
            loop {
                std::thread::sleep(tick);
                let now = Instant::now();
                if let Some((path, every)) = &config {
                    if now >= next_config {
                        next_config = now + *every;
                        let reloads = &crate::metrics::METRICS.config_reloads;
                        match crate::model_config::load(path) {
                            Ok(sources) => {
                                registry.sync(&sources);
                                reloads.with_label_values(&["ok"]).inc();
                            }
                            Err(err) => {
                                log::error!("config reload skipped, the models stay as they were: {err}");
                                reloads.with_label_values(&["failed"]).inc();
                            }
                        }
                    }
                }
                if let Some(every) = file_system {
                    if now >= next_fs {
                        next_fs = now + every;
                        registry.poll();
                    }
                }
            }
        })?;
    Ok(())
}
