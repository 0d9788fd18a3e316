//! The workers' life cycle: starting a `python3 glue.py` process and loading
//! every model's handler module into it, lending idle workers out, and
//! replacing one that crashed, outlived a deadline, grew past its memory
//! bound or served its share of calls.

use std::collections::BTreeMap;
use std::process::Stdio;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};

use tokio::io::{BufReader, BufWriter};
use tokio::process::Command;
use tokio::sync::Semaphore;

use super::process::Worker;
use super::workers::Loaded;

const GLUE: &str = include_str!("glue.py");

pub(super) struct Shared {
    pub(super) idle: Mutex<Vec<Worker>>,
    /// One permit per idle worker; a load takes them all.
    pub(super) slots: Arc<Semaphore>,
    pub(super) waiting: AtomicUsize,
    /// What a fresh worker loads, by module name, in load order.
    pub(super) modules: Mutex<BTreeMap<u64, Loaded>>,
    pub(super) next_load: AtomicUsize,
    pub(super) python: String,
    pub(super) max_rss_bytes: u64,
    pub(super) max_calls: u64,
}

/// Why a worker was replaced (the metric's `reason` label).
#[derive(Clone, Copy, Debug)]
pub(super) enum Replaced {
    Crashed,
    TimedOut,
    Memory,
    Calls,
}

impl Replaced {
    fn label(self) -> &'static str {
        match self {
            Replaced::Crashed => "crash",
            Replaced::TimedOut => "timeout",
            Replaced::Memory => "memory",
            Replaced::Calls => "calls",
        }
    }
}

impl Shared {
    /// Starts one worker and loads every current module into it.
    pub(super) async fn spawn_worker(&self) -> Result<Worker, String> {
        let mut child = Command::new(&self.python)
            .arg("-c")
            .arg(GLUE)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| {
                format!(
                    "handlers run on Python 3, and `{}` cannot be started ({e}); install Python 3 or name one with --python_executable",
                    self.python
                )
            })?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err("a Python handler worker started without pipes".into());
        };
        let mut worker = Worker {
            child,
            requests: BufWriter::new(stdin),
            replies: BufReader::new(stdout),
            calls: 0,
        };
        let modules: Vec<Loaded> = self
            .modules
            .lock()
            .map(|m| m.values().cloned().collect())
            .unwrap_or_default();
        for loaded in modules {
            // A module that no longer imports (its file changed since) fails
            // its own model's calls, not the worker.
            if let Err(e) = worker.load(&loaded).await {
                log::error!(
                    "a restarted Python handler worker cannot import {}: {e}",
                    loaded.file.display()
                );
                if worker.child.try_wait().map(|s| s.is_some()).unwrap_or(true) {
                    return Err(e);
                }
            }
        }
        Ok(worker)
    }

    /// Imports a module in the first worker (after its install), then in the rest.
    pub(super) async fn load_everywhere(
        &self,
        workers: &mut [Worker],
        install: Option<Value>,
        mut loaded: Loaded,
    ) -> Result<Loaded, String> {
        let Some((first, rest)) = workers.split_first_mut() else {
            return Err("the handler workers have stopped".into());
        };
        if let Some(install) = install {
            let (reply, _) = first.exchange(&install, &[]).await.map_err(|e| e.to_string())?;
            if reply["ok"] != json!(true) {
                return Err(reply["error"].as_str().unwrap_or("pip install failed").to_string());
            }
        }
        loaded.has_handler = first.load(&loaded).await?;
        let loads = rest.iter_mut().map(|worker| worker.load(&loaded));
        for outcome in futures_util::future::join_all(loads).await {
            outcome?;
        }
        let key = self.next_load.fetch_add(1, Ordering::Relaxed) as u64;
        if let Ok(mut modules) = self.modules.lock() {
            modules.retain(|_, m| m.module != loaded.module);
            modules.insert(key, loaded.clone());
        }
        Ok(loaded)
    }

    /// Takes every worker out of the pool once the calls in flight are done
    /// (None once the pool has stopped). Their slots come back with
    /// [`Shared::return_all`].
    pub(super) async fn take_every_worker(&self, count: u32) -> Option<Vec<Worker>> {
        self.slots.clone().acquire_many_owned(count).await.ok()?.forget();
        Some(std::mem::take(
            &mut *self.idle.lock().unwrap_or_else(|p| p.into_inner()),
        ))
    }

    /// Gives back workers taken for a load or unload, replacing any that died
    /// (a replacement brings its slot back once it has started).
    pub(super) fn return_all(self: &Arc<Self>, workers: Vec<Worker>) {
        for mut worker in workers {
            match worker.child.try_wait() {
                Ok(None) => self.give_back(worker),
                _ => self.replace(worker, Replaced::Crashed),
            }
        }
    }

    pub(super) fn give_back(&self, worker: Worker) {
        self.idle.lock().unwrap_or_else(|p| p.into_inner()).push(worker);
        self.slots.add_permits(1);
    }

    /// Returns a worker after a call, or replaces it when it reached a bound.
    pub(super) fn after_call(self: &Arc<Self>, worker: Worker) {
        if self.max_calls > 0 && worker.calls >= self.max_calls {
            return self.replace(worker, Replaced::Calls);
        }
        if self.max_rss_bytes > 0 && worker.resident_bytes().unwrap_or(0) > self.max_rss_bytes {
            return self.replace(worker, Replaced::Memory);
        }
        self.give_back(worker);
    }

    /// Kills `worker` and starts another in its slot, retrying until one starts.
    pub(super) fn replace(self: &Arc<Self>, mut worker: Worker, why: Replaced) {
        crate::metrics::METRICS
            .python_worker_restarts
            .with_label_values(&[why.label()])
            .inc();
        if !matches!(why, Replaced::Calls) {
            log::warn!("replacing a Python handler worker ({})", why.label());
        }
        let _ = worker.child.start_kill();
        let shared = self.clone();
        tokio::spawn(async move {
            let _ = worker.child.wait().await;
            let mut backoff = Duration::from_millis(100);
            loop {
                match shared.spawn_worker().await {
                    Ok(fresh) => return shared.give_back(fresh),
                    Err(e) => log::error!("restarting a Python handler worker: {e}"),
                }
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(10));
            }
        });
    }
}
