//! Where `mixed_precision: auto`'s trials run: one thread per server, one
//! trial at a time, off every load path, so no load, model change or
//! management call waits on a trial. Versions wait their turn in a line of
//! at most [`WAITING`]; a version past it serves FP32 and says so.
//!
//! A trial yields to serving traffic: it runs a round only once no model
//! run of the server is in progress and none started for [`QUIET`], and a
//! round during which one started is thrown away (its times are not the
//! mode's, and it slowed a request). The batch threads never run a trial's
//! work, and a request arriving mid-round shares the CPU with at most the
//! rest of one pass over the timing probes. A trial whose version unloads,
//! or whose server stops, is abandoned at its next round.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use super::trial::{Clock, WallClock};
use super::Surroundings;

/// Versions waiting for a trial, at most.
pub const WAITING: usize = 64;
/// How long the server must have started no model run before a round.
pub const QUIET: Duration = Duration::from_millis(200);

/// The server's model runs, as the trials see them: how many are running
/// and how many ever started. Counted once per batch, not per request.
#[derive(Default)]
pub struct Activity {
    running: AtomicUsize,
    started: AtomicU64,
}

impl Activity {
    /// Runs `run`, counted as one of the server's model runs.
    pub fn count<T>(&self, run: impl FnOnce() -> T) -> T {
        self.started.fetch_add(1, Ordering::Relaxed);
        self.running.fetch_add(1, Ordering::Relaxed);
        let _done = Done(&self.running);
        run()
    }

    fn snapshot(&self) -> (usize, u64) {
        (
            self.running.load(Ordering::Relaxed),
            self.started.load(Ordering::Relaxed),
        )
    }
}

struct Done<'a>(&'a AtomicUsize);

impl Drop for Done<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

type Job = Box<dyn FnOnce(&AtomicBool) + Send>;

struct Line {
    jobs: Mutex<VecDeque<(String, Job)>>,
    wake: Condvar,
    stopping: AtomicBool,
}

/// The server's trial thread and its line of waiting versions.
pub struct Trials {
    line: Arc<Line>,
}

impl Trials {
    pub fn start() -> std::io::Result<Trials> {
        let line = Arc::new(Line {
            jobs: Mutex::new(VecDeque::new()),
            wake: Condvar::new(),
            stopping: AtomicBool::new(false),
        });
        let worker = line.clone();
        std::thread::Builder::new()
            .name("tfserve-trials".into())
            .spawn(move || work(&worker))?;
        Ok(Trials { line })
    }

    /// Queues `job` (named `label`), told whether the server is stopping;
    /// `Err` when the line is full.
    pub fn queue(&self, label: String, job: impl FnOnce(&AtomicBool) + Send + 'static) -> Result<(), String> {
        let mut jobs = self.line.jobs.lock().unwrap_or_else(|p| p.into_inner());
        if jobs.len() >= WAITING {
            return Err(format!("{WAITING} versions already wait for a mode trial"));
        }
        jobs.push_back((label, Box::new(job)));
        self.line.wake.notify_one();
        Ok(())
    }
}

impl Drop for Trials {
    fn drop(&mut self) {
        self.line.stopping.store(true, Ordering::Release);
        self.line.jobs.lock().unwrap_or_else(|p| p.into_inner()).clear();
        self.line.wake.notify_all();
    }
}

fn work(line: &Line) {
    loop {
        let (label, job) = {
            let mut jobs = line.jobs.lock().unwrap_or_else(|p| p.into_inner());
            loop {
                if line.stopping.load(Ordering::Acquire) {
                    return;
                }
                if let Some(job) = jobs.pop_front() {
                    break job;
                }
                jobs = line.wake.wait(jobs).unwrap_or_else(|p| p.into_inner());
            }
        };
        // A trial that panics fails alone; the next version's still runs.
        if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job(&line.stopping))).is_err() {
            crate::metrics::METRICS.panics.with_label_values(&["mode_trial"]).inc();
            log::error!("{label}: the mode trial panicked; it serves as it was");
        }
    }
}

/// A trial's surroundings on a serving host: the wall clock, the server's
/// runs, whether its version still serves and whether the server stops.
pub struct Watch<'a> {
    pub activity: &'a Activity,
    pub alive: &'a dyn Fn() -> bool,
    pub stopping: &'a AtomicBool,
    pub report: &'a dyn Fn(String),
    pub clock: WallClock,
    pub seen: AtomicU64,
}

impl Clock for Watch<'_> {
    fn seconds(&self) -> f64 {
        self.clock.seconds()
    }
}

impl Surroundings for Watch<'_> {
    fn wait_quiet(&self) -> Result<(), String> {
        let mut told = false;
        loop {
            if self.stopping.load(Ordering::Acquire) {
                return Err("the server is stopping".into());
            }
            if !(self.alive)() {
                return Err("the version no longer serves".into());
            }
            let (running, started) = self.activity.snapshot();
            // Nothing ran since the last round ended: the server is still quiet.
            if (running, started) == (0, self.seen.load(Ordering::Relaxed)) {
                return Ok(());
            }
            if running == 0 {
                std::thread::sleep(QUIET);
                if self.activity.snapshot() == (0, started) {
                    self.seen.store(started, Ordering::Relaxed);
                    return Ok(());
                }
            } else {
                std::thread::sleep(QUIET / 4);
            }
            if !told {
                (self.report)("waiting for the server to be quiet".into());
                told = true;
            }
        }
    }

    fn disturbed(&self) -> bool {
        self.activity.snapshot() != (0, self.seen.load(Ordering::Relaxed))
    }

    fn progress(&self, what: String) {
        (self.report)(what);
    }
}
