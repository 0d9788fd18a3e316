//! Model base paths in object storage (`s3://`, `gs://`, `az://`), served
//! from a local cache folder.
//!
//! The mirror decides which versions of a remote model are on local disk. From
//! the store's listing of the base path's numeric version prefixes and the
//! model's version policy, it picks the versions wanted; each wanted version
//! not in the cache is downloaded whole into a temporary folder, every object
//! checked against the size the listing gave, and renamed into place; cached
//! versions no longer wanted are removed. It guarantees: a version folder the
//! registry sees is complete (the rename is atomic and comes last); a failed
//! listing or transfer changes nothing in the cache, so loaded versions keep
//! serving; a restart reuses a cached version whose objects the store still
//! lists with the same sizes and ETags. A base path that holds a SavedModel
//! itself (Vertex AI's `AIP_STORAGE_URI`) is served as version 1.
//!
//! Credentials and endpoints come only from each cloud's own variables and
//! files ([`stores`]), never from flags.

mod errors;
mod mirror;
pub mod private;
mod stores;
mod transfer;
mod url;

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

pub use url::{RemoteUrl, Scheme};

use crate::model_config::ModelSource;

/// How often a store that cannot be listed is reported again.
const UNREACHABLE_REPORT_EVERY: Duration = Duration::from_secs(60);

#[derive(Debug, thiserror::Error, Clone, PartialEq)]
pub enum StorageError {
    #[error("{url}: {reason}")]
    BadUrl { url: String, reason: String },
    #[error("{url}: {cause}")]
    Store { url: String, cause: String },
    #[error("{url}: no version folders (numeric names) and no saved_model.pb under it")]
    NoVersions { url: String },
    #[error("{url}: cache folder {cache}: {cause}")]
    Cache { url: String, cache: String, cause: String },
}

/// The remote base paths' cache, and the clients that fill it.
pub struct Storage {
    cache_root: PathBuf,
    /// One client per bucket: each holds its connection pool and credentials.
    stores: Mutex<HashMap<(Scheme, String), Arc<dyn object_store::ObjectStore>>>,
    /// Cached version folders checked against the store by this process;
    /// later polls list only the version prefixes.
    verified: Mutex<HashSet<PathBuf>>,
    /// Remote base paths that could not be listed, and when that was last said.
    unreachable: Mutex<HashMap<String, Instant>>,
    runtime: OnceLock<Result<tokio::runtime::Runtime, String>>,
}

impl Storage {
    pub fn new(cache_root: impl Into<PathBuf>) -> Storage {
        Storage {
            cache_root: cache_root.into(),
            stores: Mutex::new(HashMap::new()),
            verified: Mutex::new(HashSet::new()),
            unreachable: Mutex::new(HashMap::new()),
            runtime: OnceLock::new(),
        }
    }

    /// `--model_cache_dir`: remote versions' mirrors, and the mode decisions kept.
    pub fn cache_root(&self) -> &Path {
        &self.cache_root
    }

    /// The default cache root: `models` in this user's own temporary
    /// folder, `$TMPDIR/tfserve-<uid>` (see [`private`]).
    pub fn default_cache_root() -> PathBuf {
        private::user_temp_dir().join("models")
    }

    /// The folder a model's versions are read from, as it is now: the cache
    /// folder of a remote base path (not brought up to date), else the path.
    pub fn folder_of(&self, source: &ModelSource) -> PathBuf {
        match RemoteUrl::of(&source.base_path) {
            Some(Ok(url)) => self.cache_folder(&url),
            _ => source.base_path.clone(),
        }
    }

    /// Where the registry reads a model's versions: its base path, or for a
    /// remote one its cache folder, first brought in line with the store. A
    /// store that cannot be read leaves the cache as it was, and is reported
    /// once, then at most every minute.
    pub fn local_base(&self, source: &ModelSource) -> PathBuf {
        let Some(url) = RemoteUrl::of(&source.base_path) else {
            return source.base_path.clone();
        };
        let url = match url {
            Ok(url) => url,
            Err(err) => {
                log::warn!("model {}: {err}", source.name);
                return source.base_path.clone();
            }
        };
        let cache = self.cache_folder(&url);
        match self.mirror_url(&source.name, &url, source) {
            Ok(_) => {
                let recovered = self.lock_unreachable().remove(url.text()).is_some();
                if recovered {
                    log::info!("model {}: {} can be listed again", source.name, url.text());
                }
            }
            Err(err) => self.report_unreachable(&source.name, &url, &err),
        }
        cache
    }

    /// Brings a remote model's cache in line with its store, strictly (at
    /// start-up: any failure is an error naming the URL). Local base paths pass.
    pub fn mirror(&self, source: &ModelSource) -> Result<(), StorageError> {
        match RemoteUrl::of(&source.base_path) {
            None => Ok(()),
            Some(url) => self.mirror_url(&source.name, &url?, source).map(|_| ()),
        }
    }

    fn mirror_url(&self, model: &str, url: &RemoteUrl, source: &ModelSource) -> Result<PathBuf, StorageError> {
        let store = self.store(url)?;
        let cache = self.cache_folder(url);
        let job = mirror::Job {
            model,
            url,
            store: store.as_ref(),
            cache: &cache,
            policy: &source.policy,
            verified: &self.verified,
        };
        self.block_on(url, job.run())?;
        Ok(cache)
    }

    fn report_unreachable(&self, model: &str, url: &RemoteUrl, err: &StorageError) {
        let now = Instant::now();
        let mut unreachable = self.lock_unreachable();
        let due = unreachable
            .get(url.text())
            .is_none_or(|last| now.duration_since(*last) >= UNREACHABLE_REPORT_EVERY);
        if due {
            unreachable.insert(url.text().to_string(), now);
            log::warn!("model {model}: cannot read its versions, the loaded ones keep serving: {err}");
        }
    }

    fn lock_unreachable(&self) -> std::sync::MutexGuard<'_, HashMap<String, Instant>> {
        self.unreachable.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `<cache root>/<scheme>/<bucket>/<prefix>`.
    pub fn cache_folder(&self, url: &RemoteUrl) -> PathBuf {
        let mut folder = self.cache_root.join(url.scheme().name()).join(url.bucket());
        for part in url.prefix().split('/').filter(|p| !p.is_empty()) {
            folder.push(part);
        }
        folder
    }

    fn store(&self, url: &RemoteUrl) -> Result<Arc<dyn object_store::ObjectStore>, StorageError> {
        let key = (url.scheme(), url.bucket().to_string());
        let mut stores = self.stores.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(store) = stores.get(&key) {
            return Ok(store.clone());
        }
        let store = stores::build(url)?;
        stores.insert(key, store.clone());
        Ok(store)
    }

    /// Runs a transfer on the storage runtime from any thread, a transport's
    /// included (its own thread waits, not the caller's runtime).
    fn block_on<T: Send>(
        &self,
        url: &RemoteUrl,
        work: impl std::future::Future<Output = Result<T, StorageError>> + Send,
    ) -> Result<T, StorageError> {
        let runtime = self
            .runtime
            .get_or_init(|| {
                tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .thread_name("tfserve-storage")
                    .enable_all()
                    .build()
                    .map_err(|e| e.to_string())
            })
            .as_ref()
            .map_err(|cause| StorageError::Store {
                url: url.text().to_string(),
                cause: format!("cannot start the transfer threads: {cause}"),
            })?;
        std::thread::scope(|scope| {
            scope.spawn(|| runtime.block_on(work)).join().unwrap_or_else(|_| {
                Err(StorageError::Store {
                    url: url.text().to_string(),
                    cause: "the transfer panicked".into(),
                })
            })
        })
    }
}

impl Drop for Storage {
    /// The transfer threads are let go without waiting: the storage may be
    /// dropped on an async thread (a start-up that failed), where waiting is not allowed.
    fn drop(&mut self) {
        if let Some(Ok(runtime)) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

impl Default for Storage {
    fn default() -> Storage {
        Storage::new(Storage::default_cache_root())
    }
}

/// Whether a base path names object storage rather than a local folder.
pub fn is_remote(path: &Path) -> bool {
    RemoteUrl::of(path).is_some()
}
