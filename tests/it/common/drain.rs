//! Clients calling a server while SIGTERM drains it: what their calls came
//! to, and the check that none was lost.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::thread::JoinHandle;

#[derive(Default)]
pub struct Tally {
    done: AtomicBool,
    answered: AtomicUsize,
    /// Refused before the server took them: the listener had closed.
    refused: AtomicUsize,
    lost: Mutex<Vec<String>>,
}

impl Tally {
    /// Whether the clients should keep calling.
    pub fn running(&self) -> bool {
        !self.done.load(Ordering::SeqCst)
    }

    /// How many calls have been answered so far.
    pub fn answered_count(&self) -> usize {
        self.answered.load(Ordering::SeqCst)
    }

    pub fn answered(&self) {
        self.answered.fetch_add(1, Ordering::SeqCst);
    }

    pub fn refused(&self) {
        self.refused.fetch_add(1, Ordering::SeqCst);
    }

    pub fn lost(&self, what: String) {
        self.lost.lock().unwrap().push(what);
    }

    /// Once the server has exited: lets the clients meet the closed
    /// listener, stops them, then checks that no call was lost and that more
    /// than 100 were answered.
    pub fn finish(&self, clients: Vec<JoinHandle<()>>) {
        super::wait_for("a call refused by the closed listener", || {
            self.refused.load(Ordering::SeqCst) > 0
        });
        self.done.store(true, Ordering::SeqCst);
        for client in clients {
            client.join().unwrap();
        }
        let lost = self.lost.lock().unwrap();
        assert!(
            lost.is_empty(),
            "{} calls lost: {:?}",
            lost.len(),
            &lost[..lost.len().min(5)]
        );
        let answered = self.answered.load(Ordering::SeqCst);
        assert!(answered > 100, "{answered} answered");
    }
}
