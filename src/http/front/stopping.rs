//! Waking a worker's idle connections when the server stops.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::task::{Poll, Waker};

/// A worker's connections, woken when the server stops so that idle ones
/// close. One task per worker waits for the stop, and each connection gives
/// its waker once: waiting for a request then touches nothing another
/// thread writes (the stop signal's own channel is shared by every worker).
#[derive(Default)]
pub(super) struct Stopping {
    stopped: Cell<bool>,
    next: Cell<u64>,
    waiting: RefCell<HashMap<u64, Waker>>,
}

impl Stopping {
    pub(super) fn stop(&self) {
        self.stopped.set(true);
        let waiting = std::mem::take(&mut *self.waiting.borrow_mut());
        waiting.into_values().for_each(Waker::wake);
    }

    /// Wakes the calling task when the server stops, until the registration drops.
    pub(super) async fn register(&self) -> Registered<'_> {
        let key = self.next.get();
        self.next.set(key + 1);
        let waker = std::future::poll_fn(|cx| Poll::Ready(cx.waker().clone())).await;
        self.waiting.borrow_mut().insert(key, waker);
        Registered { stopping: self, key }
    }

    /// Ready once the server stops; polling it costs a flag's read.
    pub(super) fn stopped(&self) -> impl std::future::Future<Output = ()> + '_ {
        std::future::poll_fn(|_| match self.stopped.get() {
            true => Poll::Ready(()),
            false => Poll::Pending,
        })
    }
}

pub(super) struct Registered<'a> {
    stopping: &'a Stopping,
    key: u64,
}

impl Drop for Registered<'_> {
    fn drop(&mut self) {
        self.stopping.waiting.borrow_mut().remove(&self.key);
    }
}
