//! One version's objects downloaded into a folder: a bounded number at once,
//! each retried with backoff when its transfer fails or comes back short,
//! with progress in the log. The store client resumes a cut answer itself a
//! few times; past that, the object is fetched again whole.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use futures_util::{StreamExt, TryStreamExt};
use object_store::path::Path as ObjectPath;
use object_store::{ObjectMeta, ObjectStore, ObjectStoreExt};

use super::url::RemoteUrl;
use super::{errors, StorageError};

/// Objects in flight at once: enough to fill a link with a SavedModel's
/// variable shards, few enough not to crowd the serving threads.
const TRANSFERS: usize = 8;
/// Tries per object, waiting twice as long after each failure.
const ATTEMPTS: u32 = 5;
const FIRST_BACKOFF: Duration = Duration::from_millis(500);
const PROGRESS_EVERY: Duration = Duration::from_secs(5);

pub struct Download<'a> {
    pub model: &'a str,
    pub url: &'a RemoteUrl,
    pub store: &'a dyn ObjectStore,
    pub version: i64,
    pub prefix: &'a ObjectPath,
    pub objects: &'a [ObjectMeta],
    pub into: &'a Path,
}

type Fetch<'a> = std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), StorageError>> + Send + 'a>>;

struct Progress {
    total_bytes: u64,
    bytes: AtomicU64,
    objects: AtomicUsize,
    last_report: Mutex<Instant>,
}

/// An object's path below a version prefix, as parts.
pub fn relative(location: &ObjectPath, prefix: &ObjectPath) -> Vec<String> {
    location
        .prefix_match(prefix)
        .map(|parts| parts.map(|p| p.as_ref().to_string()).collect())
        .unwrap_or_default()
}

impl Download<'_> {
    pub async fn run(&self) -> Result<(), StorageError> {
        let progress = Progress {
            total_bytes: self.objects.iter().map(|o| o.size).sum(),
            bytes: AtomicU64::new(0),
            objects: AtomicUsize::new(0),
            last_report: Mutex::new(Instant::now()),
        };
        let started = Instant::now();
        log::info!(
            "model {}: downloading version {} from {}: {} objects, {}",
            self.model,
            self.version,
            self.url.text(),
            self.objects.len(),
            megabytes(progress.total_bytes)
        );
        // Boxed, so the future stays `Send` for the transfer thread.
        let fetches: Vec<Fetch<'_>> = self
            .objects
            .iter()
            .map(|object| Box::pin(self.fetch(object, &progress)) as Fetch<'_>)
            .collect();
        futures_util::stream::iter(fetches)
            .buffer_unordered(TRANSFERS)
            .try_collect::<Vec<()>>()
            .await?;
        log::info!(
            "model {}: version {} downloaded, {} in {:.1} s",
            self.model,
            self.version,
            megabytes(progress.total_bytes),
            started.elapsed().as_secs_f64()
        );
        Ok(())
    }

    async fn fetch(&self, object: &ObjectMeta, progress: &Progress) -> Result<(), StorageError> {
        let path = self.destination(object)?;
        let mut backoff = FIRST_BACKOFF;
        for attempt in 1..=ATTEMPTS {
            let mut written = 0;
            match self.fetch_once(object, &path, progress, &mut written).await {
                Ok(()) => {
                    progress.objects.fetch_add(1, Ordering::Relaxed);
                    return Ok(());
                }
                Err(cause) => {
                    progress.bytes.fetch_sub(written, Ordering::Relaxed);
                    if attempt == ATTEMPTS {
                        return Err(StorageError::Store {
                            url: self.url.text().to_string(),
                            cause: format!("{}: {cause} ({ATTEMPTS} tries)", object.location),
                        });
                    }
                    log::warn!(
                        "model {}: {}: {cause}; trying again in {} ms",
                        self.model,
                        object.location,
                        backoff.as_millis()
                    );
                    tokio::time::sleep(backoff).await;
                    backoff *= 2;
                }
            }
        }
        Ok(())
    }

    /// One try: the whole object into its file, or the reason it fell short.
    async fn fetch_once(
        &self,
        object: &ObjectMeta,
        path: &Path,
        progress: &Progress,
        written: &mut u64,
    ) -> Result<(), String> {
        let mut file = std::fs::File::create(path).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        let answer = self
            .store
            .get(&object.location)
            .await
            .map_err(|e| errors::describe(&e))?;
        let mut body = answer.into_stream();
        while let Some(chunk) = body.next().await {
            let chunk = chunk.map_err(|e| errors::describe(&e))?;
            file.write_all(&chunk)
                .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
            *written += chunk.len() as u64;
            progress.advance(self, chunk.len() as u64);
        }
        if *written != object.size {
            return Err(format!("the transfer ended at {} of {} bytes", written, object.size));
        }
        file.sync_all()
            .map_err(|e| format!("cannot write {}: {e}", path.display()))
    }

    /// Where an object lands inside the folder; its parents are made.
    fn destination(&self, object: &ObjectMeta) -> Result<PathBuf, StorageError> {
        let parts = relative(&object.location, self.prefix);
        let unsafe_part = parts
            .iter()
            .any(|p| p.is_empty() || p == "." || p == ".." || p.contains('/'));
        if parts.is_empty() || unsafe_part {
            return Err(StorageError::Store {
                url: self.url.text().to_string(),
                cause: format!("object {} has a name that is no file path", object.location),
            });
        }
        let path: PathBuf = parts.iter().fold(self.into.to_path_buf(), |path, part| path.join(part));
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| StorageError::Cache {
                url: self.url.text().to_string(),
                cache: parent.display().to_string(),
                cause: e.to_string(),
            })?;
        }
        Ok(path)
    }
}

impl Progress {
    fn advance(&self, download: &Download, bytes: u64) {
        let done = self.bytes.fetch_add(bytes, Ordering::Relaxed) + bytes;
        let mut last = self.last_report.lock().unwrap_or_else(|p| p.into_inner());
        if last.elapsed() < PROGRESS_EVERY {
            return;
        }
        *last = Instant::now();
        log::info!(
            "model {}: version {}: {} of {}, {} of {} objects",
            download.model,
            download.version,
            megabytes(done),
            megabytes(self.total_bytes),
            self.objects.load(Ordering::Relaxed),
            download.objects.len()
        );
    }
}

fn megabytes(bytes: u64) -> String {
    format!("{:.1} MB", bytes as f64 / 1e6)
}
