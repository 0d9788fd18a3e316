//! Confines the server process with Landlock (through the `landlock` crate),
//! so that a model, whatever its ops, touches only what the server needs.
//!
//! Policy: once settings are read and before any thread starts (a Landlock
//! domain binds the calling thread and every thread and child it creates
//! later), the process keeps: read access to its models (`--models_dir`,
//! `--model_base_path`, `--model_roots`, the config file and the base paths
//! it names), its own executable and libraries (the bundle's folder, the
//! system's library folders, `LD_LIBRARY_PATH`, `--custom_op_paths`), the
//! configuration TensorFlow and the network stack read (`/etc`'s name
//! service, certificate and time zone files, `/proc`, `/sys`), and the
//! Python interpreter that runs handlers; write access to its caches (model
//! mirror, `auto` decisions, handler dependencies, GPU compile caches), its
//! capture folders and log prefixes, a private temporary folder (`TMPDIR`
//! points at it), a gRPC Unix socket's folder and the character devices a
//! process writes (`/dev/null`, a GPU's). Anything else, `/etc/hostname`, a
//! home folder, another tenant's models, a service-account token, is
//! refused by the kernel with EACCES. `no_new_privs` is set. The rules are
//! fixed at start: a model added later (`POST /tfserve/models`, SageMaker's
//! `POST /models`, a reloaded config) must lie under a folder known then,
//! which `--model_roots` names. Guarantees: with `--confine` (the default)
//! on a kernel with Landlock, the start line says the process is confined;
//! on a kernel without it, one line says it is not; `--confine=false` skips
//! it. Network access, CPU and memory are not confined here (the request
//! limits bound what a request may use).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use landlock::{Access, AccessFs, PathBeneath, PathFd, Ruleset, RulesetAttr, RulesetCreatedAttr, RulesetStatus, ABI};

use crate::settings::Settings;

/// The Landlock ABI the rules are written for; a newer kernel enforces
/// them as written, an older one as much of them as it knows.
const ABI_VERSION: ABI = ABI::V3;

/// What the process may reach once confined.
#[derive(Debug, Default, PartialEq)]
pub struct Rules {
    /// Read files and list folders beneath these (and execute programs there).
    pub read: BTreeSet<PathBuf>,
    /// Read, write, create and remove beneath these.
    pub write: BTreeSet<PathBuf>,
    /// Folders of `write` the server makes when it first writes there
    /// (captures, caches): made before the rules are applied, since a rule
    /// holds only a folder that exists.
    pub made: BTreeSet<PathBuf>,
}

/// How the process ended up.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    Confined,
    /// The kernel enforces only part of the rules (an older Landlock ABI).
    PartlyConfined,
    /// The kernel has no Landlock: the reason, for the one line logged.
    NotConfined(String),
    Disabled,
}

/// Confines this process per the settings; logs one line saying how.
/// Call it before any thread is started.
pub fn confine(settings: &Settings) -> Result<Outcome, String> {
    if !settings.security.confine {
        log::info!("not confined (--confine=false): models can reach whatever this user can");
        return Ok(Outcome::Disabled);
    }
    let temp = private_temp_dir()?;
    // Children (Python handler workers, pip) and every later temporary file
    // of this process go to the private folder, the only temporary one allowed.
    std::env::set_var("TMPDIR", &temp);
    let mut rules = rules_for(settings);
    rules.write.insert(temp.clone());
    let outcome = apply(&rules)?;
    match &outcome {
        Outcome::Confined | Outcome::PartlyConfined => log::info!(
            "confined by Landlock{}: reads beneath {} folder(s), writes beneath {} (temporary files in {}); \
             --confine=false turns it off",
            if outcome == Outcome::PartlyConfined {
                " (partly: this kernel's Landlock is older)"
            } else {
                ""
            },
            rules.read.len(),
            rules.write.len(),
            temp.display()
        ),
        Outcome::NotConfined(reason) => log::warn!("not confined: {reason}"),
        Outcome::Disabled => {}
    }
    Ok(outcome)
}

/// Restricts the calling thread (and what it starts later) to `rules`.
pub fn apply(rules: &Rules) -> Result<Outcome, String> {
    let failed = |e: landlock::RulesetError| format!("cannot confine the process with Landlock: {e}");
    let read = AccessFs::from_read(ABI_VERSION);
    let all = AccessFs::from_all(ABI_VERSION);
    for folder in &rules.made {
        // One that cannot be made stays unwritable, and its first write says why.
        let _ = std::fs::create_dir_all(folder);
    }
    let mut created = Ruleset::default()
        .handle_access(all)
        .map_err(failed)?
        .create()
        .map_err(failed)?
        .no_new_privs(true);
    for (paths, access) in [(&rules.read, read), (&rules.write, all)] {
        for path in paths {
            // A folder that does not exist (yet) cannot be opened: nothing
            // beneath it is reachable, which is what a missing folder means.
            let Ok(fd) = PathFd::new(path) else { continue };
            let access = if path.is_dir() { access } else { access & file_access() };
            created = created.add_rule(PathBeneath::new(fd, access)).map_err(failed)?;
        }
    }
    let status = created.restrict_self().map_err(failed)?;
    Ok(match status.ruleset {
        RulesetStatus::FullyEnforced => Outcome::Confined,
        RulesetStatus::PartiallyEnforced => Outcome::PartlyConfined,
        RulesetStatus::NotEnforced => Outcome::NotConfined(
            "Landlock is not available here (it needs Linux 5.13 or later with the landlock LSM enabled, and no \
                 emulator in between such as qemu-user)"
                .into(),
        ),
    })
}

/// The rights that apply to a file (not a folder) in a rule.
fn file_access() -> landlock::BitFlags<AccessFs> {
    AccessFs::Execute | AccessFs::WriteFile | AccessFs::ReadFile | AccessFs::Truncate
}

/// A folder only this user can enter, for temporary files:
/// `$TMPDIR/tfserve-<uid>`, created 0700, refused if another user owns it
/// or others may write it.
fn private_temp_dir() -> Result<PathBuf, String> {
    let dir = crate::storage::private::user_temp_dir();
    crate::storage::private::ensure_private(dir, "the private temporary folder (TMPDIR)")?;
    Ok(dir.to_path_buf())
}

/// Every folder and file the settings say the server reads or writes.
pub fn rules_for(settings: &Settings) -> Rules {
    let mut rules = Rules::default();
    add_inputs(&mut rules, settings);
    add_outputs(&mut rules, settings);
    add_system(&mut rules, &settings.handler_settings().workers.python);
    rules
}

/// What the server reads: models, their configuration, TLS files, custom
/// op libraries, handler code.
fn add_inputs(rules: &mut Rules, settings: &Settings) {
    let models = &settings.models;
    rules.read.insert(models.models_dir.clone());
    rules.read.extend(models.model_base_path.clone());
    rules.read.extend(models.model_roots.iter().cloned());
    if let Some(file) = &models.model_config_file {
        rules.read.insert(watched_file(file));
        if let Ok(sources) = crate::model_config::load(file) {
            rules.read.extend(sources.iter().map(|s| s.base_path.clone()));
            for logging in sources.iter().filter_map(|s| s.logging.as_deref()) {
                rules.write.extend(prefix_folder(&logging.filename_prefix));
                rules.made.extend(prefix_folder(&logging.filename_prefix));
            }
        }
    }
    rules.read.extend(settings.batching.batching_parameters_file.clone());
    let security = &settings.security;
    let tls = [&security.secret_pem, &security.secret_key, &security.ssl_client_ca];
    rules
        .read
        .extend(tls.into_iter().flatten().map(|file| watched_file(file)));
    rules.read.extend(settings.http.monitoring_config_file.clone());
    if let Some(paths) = &settings.tensorflow.custom_op_paths {
        let libraries = paths.split(',').map(str::trim).filter(|p| !p.is_empty());
        rules.read.extend(libraries.map(PathBuf::from));
    }
    let handlers = settings.handler_settings();
    rules.read.extend(handlers.handler_path.clone());
    rules.read.extend(handlers.shared_code_dir.clone());
}

/// What the server writes: caches, captures, a gRPC socket.
fn add_outputs(rules: &mut Rules, settings: &Settings) {
    let mut made = Vec::new();
    let cache = settings.models.model_cache_dir.clone();
    made.push(cache.unwrap_or_else(crate::storage::Storage::default_cache_root));
    made.push(settings.handler_settings().deps_dir);
    made.extend(settings.tensorflow.gpu_compile_cache_dir.clone());
    for variable in ["CUDA_CACHE_PATH", "TF_XLA_CACHE_DIR"] {
        made.extend(std::env::var_os(variable).map(PathBuf::from));
    }
    let capture = &settings.capture;
    made.extend(capture.capture_jsonl_dir.clone());
    made.extend(capture.capture_tfrecord_prefix.as_deref().and_then(prefix_folder));
    for model in capture.model_capture.values() {
        made.extend(model.jsonl_dir.clone());
        made.extend(model.tfrecord_prefix.as_deref().and_then(prefix_folder));
    }
    if let Some(socket) = &settings.grpc.grpc_socket_path {
        rules.write.extend(socket.parent().map(Path::to_path_buf));
    }
    rules.write.extend(made.iter().cloned());
    rules.made.extend(made);
}

/// What to allow for a file that may be replaced while the server runs (a
/// reloaded config, rotated certificates): its folder, since a rule holds an
/// inode and a replacement by rename (an editor's save, a Kubernetes
/// ConfigMap's update) is a new one. Only the file itself where the folder
/// is one every program shares.
fn watched_file(file: &Path) -> PathBuf {
    const SHARED: [&str; 8] = ["/", "/etc", "/tmp", "/var/tmp", "/root", "/home", "/usr", "/var"];
    let absolute = std::path::absolute(file).unwrap_or_else(|_| file.to_path_buf());
    match absolute.parent() {
        Some(folder) if !SHARED.iter().any(|shared| folder == Path::new(shared)) => folder.to_path_buf(),
        _ => file.to_path_buf(),
    }
}

/// The folder a file-name prefix (`/logs/requests`) writes into.
fn prefix_folder(prefix: &str) -> Option<PathBuf> {
    let path = Path::new(prefix);
    match path.parent() {
        Some(parent) if parent.as_os_str().is_empty() => Some(PathBuf::from(".")),
        Some(parent) => Some(parent.to_path_buf()),
        None => None,
    }
}

mod system;
use system::add_system;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_name_the_models_caches_and_captures_the_settings_give() {
        let mut settings = Settings::default();
        settings.models.model_base_path = Some("/srv/models/m".into());
        settings.models.model_roots = vec!["/srv/roots".into()];
        settings.capture.capture_jsonl_dir = Some("/var/capture".into());
        settings.capture.capture_tfrecord_prefix = Some("/var/logs/requests".into());
        let rules = rules_for(&settings);
        for read in ["/srv/models/m", "/srv/roots", "/usr", "/proc", "/etc/ssl"] {
            assert!(rules.read.contains(Path::new(read)), "{read}: {rules:?}");
        }
        for write in ["/var/capture", "/var/logs", "/dev/null"] {
            assert!(rules.write.contains(Path::new(write)), "{write}: {rules:?}");
        }
        for never in ["/etc", "/etc/hostname", "/root", "/home", "/tmp", "/var/run/secrets"] {
            assert!(
                !rules.read.contains(Path::new(never)) && !rules.write.contains(Path::new(never)),
                "{never}: {rules:?}"
            );
        }
    }

    #[test]
    fn a_replaceable_file_is_allowed_by_its_folder_unless_the_folder_is_shared() {
        assert_eq!(
            watched_file(Path::new("/config/models.config")),
            PathBuf::from("/config")
        );
        assert_eq!(
            watched_file(Path::new("/etc/models.config")),
            PathBuf::from("/etc/models.config")
        );
        assert_eq!(
            watched_file(Path::new("/tmp/models.config")),
            PathBuf::from("/tmp/models.config")
        );
    }

    #[test]
    fn a_prefix_writes_into_its_folder() {
        assert_eq!(prefix_folder("/logs/requests"), Some(PathBuf::from("/logs")));
        assert_eq!(prefix_folder("requests"), Some(PathBuf::from(".")));
    }
}
