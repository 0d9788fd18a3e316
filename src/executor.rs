//! A bounded pool of OS threads that runs TensorFlow sessions, so that model
//! runs never block the HTTP workers. A full queue is refused, not waited on.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::thread::JoinHandle;

use crossbeam_channel::{bounded, Sender, TrySendError};
use tokio::sync::oneshot;

type Job = Box<dyn FnOnce() + Send>;

/// A queued run's eventual result (or the panic message of a run that panicked).
pub struct Pending<R>(oneshot::Receiver<Result<R, String>>);

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ExecError {
    #[error("server overloaded: {capacity} runs are already queued (max_queued_runs); retry later")]
    Overloaded { capacity: usize },
    #[error("server is shutting down")]
    ShuttingDown,
    #[error("the model run panicked: {0}")]
    Panicked(String),
}

pub struct Executor {
    sender: Option<Sender<Job>>,
    threads: Vec<JoinHandle<()>>,
    capacity: usize,
}

impl Executor {
    pub fn new(threads: usize, capacity: usize) -> std::io::Result<Executor> {
        let (sender, receiver) = bounded::<Job>(capacity.max(1));
        let threads = (0..threads.max(1))
            .map(|i| {
                let receiver = receiver.clone();
                std::thread::Builder::new()
                    .name(format!("tfserve-run-{i}"))
                    .spawn(move || {
                        for job in receiver {
                            job();
                        }
                    })
            })
            .collect::<std::io::Result<Vec<_>>>()?;
        Ok(Executor {
            sender: Some(sender),
            threads,
            capacity,
        })
    }

    /// Runs `work` on a pool thread and waits for its result without blocking
    /// the caller's thread.
    pub async fn run<R, F>(&self, work: F) -> Result<R, ExecError>
    where
        R: Send + 'static,
        F: FnOnce() -> R + Send + 'static,
    {
        Self::wait(self.submit(work)?).await
    }

    /// Queues `work` now, or refuses it at once when the queue is full.
    pub fn submit<R, F>(&self, work: F) -> Result<Pending<R>, ExecError>
    where
        R: Send + 'static,
        F: FnOnce() -> R + Send + 'static,
    {
        let (reply, result) = oneshot::channel();
        let job: Job = Box::new(move || {
            let outcome = catch_unwind(AssertUnwindSafe(work)).map_err(|panic| {
                panic
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "unknown panic".to_string())
            });
            // The requester may have gone away; nothing to do then.
            let _ = reply.send(outcome);
        });
        let sender = self.sender.as_ref().ok_or(ExecError::ShuttingDown)?;
        sender.try_send(job).map_err(|e| match e {
            TrySendError::Full(_) => ExecError::Overloaded {
                capacity: self.capacity,
            },
            TrySendError::Disconnected(_) => ExecError::ShuttingDown,
        })?;
        Ok(Pending(result))
    }

    pub async fn wait<R>(pending: Pending<R>) -> Result<R, ExecError> {
        match pending.0.await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(panic)) => Err(ExecError::Panicked(panic)),
            Err(_) => Err(ExecError::ShuttingDown),
        }
    }
}

impl Drop for Executor {
    /// Lets queued runs finish, then joins the threads.
    fn drop(&mut self) {
        self.sender.take();
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn runs_work_and_reports_panics() {
        let executor = Executor::new(2, 4).unwrap();
        assert_eq!(executor.run(|| 2 + 2).await, Ok(4));
        let err = executor.run(|| -> i32 { panic!("boom") }).await.unwrap_err();
        assert_eq!(err, ExecError::Panicked("boom".into()));
        assert_eq!(executor.run(|| "still serving").await, Ok("still serving"));
    }

    #[tokio::test]
    async fn full_queue_is_refused() {
        let executor = Executor::new(1, 1).unwrap();
        let (started, is_started) = crossbeam_channel::bounded::<()>(1);
        let (release, gate) = crossbeam_channel::bounded::<()>(1);
        let busy = executor
            .submit(move || {
                started.send(()).unwrap();
                gate.recv().unwrap();
            })
            .unwrap();
        is_started.recv().unwrap();
        let queued = executor.submit(|| 7).unwrap();
        assert_eq!(executor.submit(|| 0).err(), Some(ExecError::Overloaded { capacity: 1 }));
        release.send(()).unwrap();
        assert_eq!(Executor::wait(busy).await, Ok(()));
        assert_eq!(Executor::wait(queued).await, Ok(7));
    }
}
