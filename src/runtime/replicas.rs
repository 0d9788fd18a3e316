//! Replicas of one model on several GPUs behind the model's one queue. Each
//! run (one batch) goes to the replica with the fewest runs in flight, so a
//! batch never waits behind another while a GPU is idle; ties rotate, so
//! equal replicas share the work.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use prometheus::IntCounter;

use super::{Loader, Model, RuntimeError, SessionConfig};
use crate::signature::SignatureSpec;
use crate::tensor::Tensor;

/// One loaded replica and the device it was pinned to.
pub struct Replica {
    pub device: String,
    pub model: Arc<dyn Model>,
}

/// Loads one replica per GPU `session.gpu_ids` names, each pinned to its GPU;
/// with none named, one replica placed by TensorFlow.
pub fn load(
    loader: &dyn Loader,
    dir: &Path,
    tags: &[String],
    session: &SessionConfig,
) -> Result<Vec<Replica>, RuntimeError> {
    if session.gpu_ids.is_empty() {
        return Ok(vec![Replica {
            device: "default".into(),
            model: loader.load(dir, tags, session)?,
        }]);
    }
    session
        .gpu_ids
        .iter()
        .map(|id| {
            let device = format!("/device:GPU:{id}");
            let pinned = SessionConfig {
                device: Some(device.clone()),
                ..session.clone()
            };
            Ok(Replica {
                model: loader.load(dir, tags, &pinned)?,
                device,
            })
        })
        .collect()
}

struct Slot {
    model: Arc<dyn Model>,
    in_flight: AtomicUsize,
    runs: IntCounter,
}

/// Several replicas as one `Model`.
pub struct Replicated {
    slots: Vec<Slot>,
    /// Where the search for the least busy replica starts, advanced per run.
    next: AtomicUsize,
}

impl Replicated {
    /// `runs[i]` counts the runs of `replicas[i]`.
    pub fn new(replicas: Vec<Replica>, runs: Vec<IntCounter>) -> Replicated {
        assert!(!replicas.is_empty(), "a model has at least one replica");
        assert_eq!(replicas.len(), runs.len(), "one run counter per replica");
        Replicated {
            slots: replicas
                .into_iter()
                .zip(runs)
                .map(|(replica, runs)| Slot {
                    model: replica.model,
                    in_flight: AtomicUsize::new(0),
                    runs,
                })
                .collect(),
            next: AtomicUsize::new(0),
        }
    }

    /// Claims the least busy replica: its in-flight count is raised before
    /// any other caller can see it unchanged, so two concurrent batches never
    /// both take the one idle GPU.
    fn claim(&self) -> InFlight<'_> {
        let count = self.slots.len();
        let start = self.next.fetch_add(1, Ordering::Relaxed) % count;
        loop {
            let (index, busy) = (0..count)
                .map(|offset| (start + offset) % count)
                .map(|i| (i, self.slots[i].in_flight.load(Ordering::Acquire)))
                .min_by_key(|&(_, busy)| busy)
                .unwrap_or((start, 0));
            let slot = &self.slots[index];
            if slot
                .in_flight
                .compare_exchange(busy, busy + 1, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                return InFlight { slot };
            }
        }
    }
}

/// A claimed replica; released when dropped, a panicking run included.
struct InFlight<'a> {
    slot: &'a Slot,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.slot.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Model for Replicated {
    fn signatures(&self) -> &[Arc<SignatureSpec>] {
        self.slots[0].model.signatures()
    }

    fn run(&self, signature: &str, inputs: Vec<Tensor>) -> Result<Vec<Tensor>, RuntimeError> {
        let claimed = self.claim();
        claimed.slot.runs.inc();
        claimed.slot.model.run(signature, inputs)
    }

    fn on_gpu(&self) -> bool {
        self.slots[0].model.on_gpu()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;
    use std::time::Duration;

    use super::*;
    use crate::runtime::mock::{float_signature, MockLoader, MockModel};
    use crate::signature::DEFAULT_SIGNATURE;
    use crate::tensor::TensorData;

    fn counter() -> IntCounter {
        IntCounter::new("replica_runs", "test").unwrap()
    }

    fn input() -> Vec<Tensor> {
        vec![Tensor::new(vec![1], TensorData::Float(vec![1.0]))]
    }

    /// A replica that answers `offset`, after waiting for a go-ahead when `gate` is set.
    fn replica(offset: f32, gate: Option<mpsc::Receiver<()>>) -> Replica {
        let gate = std::sync::Mutex::new(gate);
        let model = MockModel::new(
            vec![float_signature(DEFAULT_SIGNATURE, &["x"], &["y"])],
            move |_, inputs| {
                if let Some(gate) = gate.lock().unwrap().as_ref() {
                    gate.recv_timeout(Duration::from_secs(30)).unwrap();
                }
                let mut x = inputs.into_iter().next().unwrap();
                if let TensorData::Float(values) = &mut x.data {
                    values.iter_mut().for_each(|v| *v = offset);
                }
                Ok(vec![x])
            },
        );
        Replica {
            device: format!("/device:GPU:{offset}"),
            model: Arc::new(model),
        }
    }

    fn answer(model: &Replicated) -> f32 {
        match &model.run(DEFAULT_SIGNATURE, input()).unwrap()[0].data {
            TensorData::Float(values) => values[0],
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn a_batch_goes_to_the_replica_that_is_free() {
        let (go, gate) = mpsc::channel();
        let counts = vec![counter(), counter()];
        let model = Arc::new(Replicated::new(
            vec![replica(0.0, Some(gate)), replica(1.0, None)],
            counts.clone(),
        ));
        // The first run takes replica 0 (both idle, the search starts there)
        // and is held; every run meanwhile goes to replica 1.
        let held = {
            let model = model.clone();
            std::thread::spawn(move || answer(&model))
        };
        while model.slots[0].in_flight.load(Ordering::Acquire) == 0 {
            std::thread::yield_now();
        }
        for _ in 0..5 {
            assert_eq!(answer(&model), 1.0);
        }
        go.send(()).unwrap();
        assert_eq!(held.join().unwrap(), 0.0);
        assert_eq!((counts[0].get(), counts[1].get()), (1, 5));
    }

    #[test]
    fn idle_replicas_take_turns() {
        let counts = vec![counter(), counter(), counter()];
        let model = Replicated::new(
            vec![replica(0.0, None), replica(1.0, None), replica(2.0, None)],
            counts.clone(),
        );
        let answers: Vec<f32> = (0..6).map(|_| answer(&model)).collect();
        assert_eq!(answers, [0.0, 1.0, 2.0, 0.0, 1.0, 2.0]);
        assert!(counts.iter().all(|c| c.get() == 2));
    }

    #[test]
    fn a_failed_or_panicking_run_releases_its_replica() {
        let failing = MockModel::new(vec![float_signature(DEFAULT_SIGNATURE, &["x"], &["y"])], |_, _| {
            panic!("the run broke")
        });
        let model = Replicated::new(
            vec![Replica {
                device: "/device:GPU:0".into(),
                model: Arc::new(failing),
            }],
            vec![counter()],
        );
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| model.run(DEFAULT_SIGNATURE, input())));
        assert!(outcome.is_err());
        assert_eq!(model.slots[0].in_flight.load(Ordering::Acquire), 0);
    }

    #[test]
    fn loads_one_replica_per_gpu_id_each_pinned_to_its_gpu() {
        let dir = std::env::temp_dir().join(format!("tfserve-replicas-test-{}/3", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let loader = MockLoader::default();
        let session = SessionConfig {
            gpu_ids: vec![0, 2],
            ..Default::default()
        };
        let replicas = load(&loader, &dir, &[], &session).unwrap();
        let devices: Vec<&str> = replicas.iter().map(|r| r.device.as_str()).collect();
        assert_eq!(devices, ["/device:GPU:0", "/device:GPU:2"]);
        assert_eq!(loader.loads(), 2);
        let one = load(&loader, &dir, &[], &SessionConfig::default()).unwrap();
        assert_eq!(one.len(), 1);
        let _ = std::fs::remove_dir_all(dir.parent().unwrap());
    }
}
