//! The registry on the mock runtime: loads, policies, swaps, labels, drains
//! and failures, over version directories in a temporary folder.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::*;
use crate::batcher::{BatchParams, Batcher};
use crate::model_config::{ModelSource, VersionPolicy};
use crate::runtime::mock::MockLoader;
use crate::runtime::SessionConfig;
use crate::tensor::{Tensor, TensorData};

struct Fixture {
    root: PathBuf,
    loader: Arc<MockLoader>,
    registry: Arc<Registry>,
}

impl Fixture {
    fn new(name: &str, swap: SwapPolicy) -> Fixture {
        Fixture::batching(name, swap, None)
    }

    /// A fixture whose models batch with `params` (`None`: batching off).
    fn batching(name: &str, swap: SwapPolicy, params: Option<BatchParams>) -> Fixture {
        let root = std::env::temp_dir().join(format!("tfserve-registry-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root).unwrap();
        let loader = Arc::new(MockLoader::default());
        let options = LoadOptions {
            loader: loader.clone(),
            tags: vec!["serve".into()],
            session: SessionConfig::default(),
            batcher: Batcher::new(1).unwrap(),
            batching: BatchingPolicy {
                enabled: params.is_some(),
                params: params.unwrap_or_default(),
                overrides: Default::default(),
                unbatched_queue: 16,
                gpu_batches_in_flight: 2,
            },
            swap,
            load_timeout: Some(std::time::Duration::from_millis(500)),
            storage: Default::default(),
            allow_access: Default::default(),
            activity: Default::default(),
            capture_prefix: None,
        };
        Fixture {
            root,
            loader,
            registry: Registry::new(options).unwrap(),
        }
    }

    /// Creates `model/version` (optionally with a `fail` or `load_ms` file).
    fn version(&self, model: &str, version: i64, file: Option<(&str, &str)>) -> PathBuf {
        let dir = self.root.join(model).join(version.to_string());
        std::fs::create_dir_all(&dir).unwrap();
        // The mock loader reads nothing; a version directory needs the file to count.
        std::fs::write(dir.join("saved_model.pb"), b"").unwrap();
        if let Some((name, text)) = file {
            std::fs::write(dir.join(name), text).unwrap();
        }
        dir
    }

    fn source(&self, model: &str, policy: VersionPolicy) -> ModelSource {
        ModelSource::with_policy(model, self.root.join(model), policy)
    }

    fn states(&self, model: &str) -> Vec<(i64, VersionState)> {
        self.registry
            .status(model, &VersionSelector::Latest)
            .unwrap_or_default()
            .into_iter()
            .map(|s| (s.version, s.state))
            .collect()
    }

    /// What the servable a selector resolves to computes for x = 0 (its version).
    fn answer(&self, model: &str, selector: VersionSelector) -> Result<f32, RegistryError> {
        let servable = self.registry.resolve(model, &selector)?;
        let outputs = servable
            .runtime
            .run(
                "serving_default",
                vec![Tensor::new(vec![1], TensorData::Float(vec![0.0]))],
            )
            .unwrap();
        match &outputs[0].data {
            TensorData::Float(v) => Ok(v[0]),
            other => panic!("{other:?}"),
        }
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

use VersionState::{Available, End};

#[test]
fn all_versions_load_and_latest_is_the_highest() {
    let f = Fixture::new("all", SwapPolicy::AvailabilityPreserving);
    for v in [1, 2, 10] {
        f.version("m", v, None);
    }
    f.registry.sync(&[f.source("m", VersionPolicy::All)]);
    assert_eq!(f.states("m"), vec![(1, Available), (2, Available), (10, Available)]);
    assert_eq!(f.answer("m", VersionSelector::Latest), Ok(10.0));
    assert_eq!(f.answer("m", VersionSelector::Specific(2)), Ok(2.0));
    assert_eq!(
        f.answer("m", VersionSelector::Specific(3)),
        Err(RegistryError::NotFound("Specific(m, 3)".into()))
    );
}

#[test]
fn versions_on_a_gpu_pad_batches_to_powers_of_two_unless_sizes_are_listed() {
    let params = BatchParams {
        max_batch_size: 24,
        ..Default::default()
    };
    let f = Fixture::batching("gpu", SwapPolicy::AvailabilityPreserving, Some(params));
    f.version("gpu", 1, Some(("gpu", "")));
    f.version("cpu", 1, None);
    f.registry
        .sync(&[f.source("gpu", VersionPolicy::All), f.source("cpu", VersionPolicy::All)]);
    let allowed = |model: &str| {
        let servable = f.registry.resolve(model, &VersionSelector::Latest).unwrap();
        servable
            .queue("serving_default")
            .unwrap()
            .params()
            .allowed_batch_sizes
            .clone()
    };
    assert_eq!(allowed("gpu"), vec![1, 2, 4, 8, 16, 24]);
    assert_eq!(allowed("cpu"), Vec::<usize>::new());
}

#[test]
fn latest_policy_loads_only_the_highest() {
    let f = Fixture::new("latest", SwapPolicy::AvailabilityPreserving);
    f.version("m", 1, None);
    f.version("m", 2, None);
    f.registry.sync(&[f.source("m", VersionPolicy::Latest(1))]);
    assert_eq!(f.states("m"), vec![(2, Available)]);
    assert_eq!(f.loader.loads(), 1);
}

#[test]
fn specific_policy_loads_the_listed_versions() {
    let f = Fixture::new("specific", SwapPolicy::AvailabilityPreserving);
    for v in [1, 2, 3] {
        f.version("m", v, None);
    }
    f.registry
        .sync(&[f.source("m", VersionPolicy::Specific(vec![1, 3, 7]))]);
    assert_eq!(f.states("m"), vec![(1, Available), (3, Available)]);
}

#[test]
fn a_new_version_replaces_the_old_under_either_swap_policy() {
    for swap in [SwapPolicy::AvailabilityPreserving, SwapPolicy::ResourcePreserving] {
        let f = Fixture::new(&format!("swap-{swap:?}"), swap);
        f.version("m", 1, None);
        f.registry.sync(&[f.source("m", VersionPolicy::Latest(1))]);
        assert_eq!(f.answer("m", VersionSelector::Latest), Ok(1.0));
        f.version("m", 2, None);
        f.registry.poll();
        // The old version stays known as END while its directory exists, as in TF Serving.
        assert_eq!(f.states("m"), vec![(1, End), (2, Available)], "{swap:?}");
        assert_eq!(f.answer("m", VersionSelector::Latest), Ok(2.0));
        assert!(f.answer("m", VersionSelector::Specific(1)).is_err());
    }
}

#[test]
fn a_removed_directory_unloads_its_version() {
    let f = Fixture::new("removed", SwapPolicy::AvailabilityPreserving);
    f.version("m", 1, None);
    let two = f.version("m", 2, None);
    f.registry.sync(&[f.source("m", VersionPolicy::All)]);
    std::fs::remove_dir_all(two).unwrap();
    f.registry.poll();
    assert_eq!(f.states("m"), vec![(1, Available)]);
    assert_eq!(f.answer("m", VersionSelector::Latest), Ok(1.0));
}

#[test]
fn a_failed_load_is_reported_and_not_retried_until_its_directory_changes() {
    let f = Fixture::new("failed", SwapPolicy::AvailabilityPreserving);
    f.version("good", 1, None);
    let bad = f.version("bad", 1, Some(("fail", "corrupt variables")));
    f.registry.sync(&[
        f.source("good", VersionPolicy::All),
        f.source("bad", VersionPolicy::All),
    ]);
    let status = f.registry.status("bad", &VersionSelector::Latest).unwrap();
    assert_eq!(status[0].state, End);
    assert!(status[0]
        .error
        .as_deref()
        .unwrap_or_default()
        .contains("corrupt variables"));
    assert_eq!(f.answer("good", VersionSelector::Latest), Ok(1.0));
    assert_eq!(f.registry.ready(), Err("model bad has no available version".into()));
    let loads = f.loader.loads();
    f.registry.poll();
    assert_eq!(
        f.loader.loads(),
        loads,
        "a failed version is not reloaded on every poll"
    );
    // Replaced by a good copy: gone on one poll, loaded on the next.
    std::fs::remove_dir_all(&bad).unwrap();
    f.registry.poll();
    f.version("bad", 1, None);
    f.registry.poll();
    assert_eq!(f.answer("bad", VersionSelector::Latest), Ok(1.0));
    assert_eq!(f.registry.ready(), Ok(()));
}

#[test]
fn labels_point_at_available_versions_only() {
    let f = Fixture::new("labels", SwapPolicy::AvailabilityPreserving);
    f.version("m", 1, None);
    f.version("m", 2, None);
    let mut source = f.source("m", VersionPolicy::All);
    source.labels.insert("stable".into(), 1);
    source.labels.insert("canary".into(), 2);
    f.registry.sync(&[source]);
    assert_eq!(f.answer("m", VersionSelector::Label("stable".into())), Ok(1.0));
    assert_eq!(f.answer("m", VersionSelector::Label("canary".into())), Ok(2.0));
    assert_eq!(
        f.answer("m", VersionSelector::Label("beta".into())),
        Err(RegistryError::UnknownLabel("beta".into()))
    );
    assert!(matches!(
        f.registry.set_label("m", "beta", 9),
        Err(RegistryError::LabelTarget { version: 9, .. })
    ));
    assert_eq!(f.registry.check_labels(), Ok(()));
}

#[test]
fn add_model_refuses_taken_names_and_paths_without_versions() {
    let f = Fixture::new("add", SwapPolicy::AvailabilityPreserving);
    f.version("m", 1, None);
    f.registry.add_model(f.source("m", VersionPolicy::All)).unwrap();
    assert_eq!(
        f.registry.add_model(f.source("m", VersionPolicy::All)),
        Err(RegistryError::AlreadyLoaded("m".into()))
    );
    std::fs::create_dir_all(f.root.join("empty")).unwrap();
    let error = f.registry.add_model(f.source("empty", VersionPolicy::All)).unwrap_err();
    assert!(matches!(error, RegistryError::LoadFailed { ref message, .. } if message.contains("no numeric version")));
    assert_eq!(
        f.registry.model_names(),
        vec!["m"],
        "a failed add leaves nothing behind"
    );
}

#[test]
fn a_sync_unloads_models_that_left_the_config() {
    let f = Fixture::new("sync", SwapPolicy::AvailabilityPreserving);
    f.version("a", 1, None);
    f.version("b", 1, None);
    f.registry
        .sync(&[f.source("a", VersionPolicy::All), f.source("b", VersionPolicy::All)]);
    assert_eq!(f.registry.model_names(), vec!["a", "b"]);
    f.registry.sync(&[f.source("b", VersionPolicy::All)]);
    assert_eq!(f.registry.model_names(), vec!["b"]);
    // TF Serving's status API keeps a dropped model's versions, ended.
    let ended = f.registry.status("a", &VersionSelector::Latest).unwrap();
    assert_eq!(ended.len(), 1);
    assert_eq!((ended[0].version, ended[0].state), (1, VersionState::End));
    assert!(f.registry.resolve("a", &VersionSelector::Latest).is_err());
    assert_eq!(
        f.registry.status("never", &VersionSelector::Latest).unwrap_err(),
        RegistryError::UnknownModel("never".into())
    );
    // Served again, it reports its live versions.
    f.registry
        .sync(&[f.source("a", VersionPolicy::All), f.source("b", VersionPolicy::All)]);
    let live = f.registry.status("a", &VersionSelector::Latest).unwrap();
    assert_eq!(live[0].state, VersionState::Available);
}

#[test]
fn unloading_waits_for_requests_in_flight() {
    let f = Fixture::new("drain", SwapPolicy::AvailabilityPreserving);
    f.version("m", 1, None);
    f.registry.sync(&[f.source("m", VersionPolicy::All)]);
    let in_flight = f.registry.resolve("m", &VersionSelector::Latest).unwrap();
    let holder = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(150));
        drop(in_flight);
    });
    let started = Instant::now();
    f.registry.remove_model("m").unwrap();
    assert!(
        started.elapsed() >= Duration::from_millis(140),
        "{:?}",
        started.elapsed()
    );
    holder.join().unwrap();
    assert_eq!(
        f.registry.remove_model("m"),
        Err(RegistryError::UnknownModel("m".into()))
    );
}

#[test]
fn status_errors_name_what_is_missing() {
    let f = Fixture::new("status", SwapPolicy::AvailabilityPreserving);
    f.version("m", 1, None);
    f.registry.sync(&[f.source("m", VersionPolicy::All)]);
    assert_eq!(
        f.registry.status("m", &VersionSelector::Specific(4)).unwrap_err(),
        RegistryError::NotFound("Specific(m, 4)".into())
    );
    assert_eq!(
        f.registry.status("nope", &VersionSelector::Latest).unwrap_err(),
        RegistryError::UnknownModel("nope".into())
    );
    assert_eq!(f.registry.list()[0].base_path, f.root.join("m").display().to_string());
}

#[test]
fn a_missing_base_path_serves_nothing_and_keeps_the_others() {
    let f = Fixture::new("missing", SwapPolicy::AvailabilityPreserving);
    f.version("present", 1, None);
    let missing = ModelSource::with_policy("missing", Path::new("/nonexistent/tfserve-model"), VersionPolicy::All);
    f.registry.sync(&[missing, f.source("present", VersionPolicy::All)]);
    assert!(f.states("missing").is_empty());
    assert_eq!(f.answer("present", VersionSelector::Latest), Ok(1.0));
}

#[test]
fn a_load_that_hangs_or_panics_fails_its_version_and_the_others_load() {
    let f = Fixture::new("hang", SwapPolicy::AvailabilityPreserving);
    f.version("hangs", 1, Some(("load_ms", "3000")));
    f.version("panics", 1, Some(("panic", "")));
    f.version("fine", 1, None);
    let started = std::time::Instant::now();
    f.registry.sync(&[
        f.source("hangs", VersionPolicy::Latest(1)),
        f.source("panics", VersionPolicy::Latest(1)),
        f.source("fine", VersionPolicy::Latest(1)),
    ]);
    // The 500 ms bound, not the 3 s load, is what the sync waited for.
    assert!(
        started.elapsed() < std::time::Duration::from_millis(2500),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(f.states("fine"), vec![(1, Available)]);
    assert_eq!(f.answer("fine", VersionSelector::Latest), Ok(1.0));
    for (model, says) in [("hangs", "model_load_timeout_seconds"), ("panics", "the load panicked")] {
        let status = f.registry.status(model, &VersionSelector::Latest).unwrap();
        assert_eq!(status[0].state, End, "{model}");
        assert!(
            status[0].error.as_deref().unwrap_or("").contains(says),
            "{model}: {status:?}"
        );
    }
    // A failed version is not retried until its files change.
    f.registry.poll();
    assert_eq!(f.states("hangs"), vec![(1, End)]);
}
