//! Folders only the server's user may write: the model cache (mirrored
//! versions, kept `auto` decisions) and the private temporary folder.
//!
//! What is read back from these folders is trusted to be what the server
//! wrote: a downloaded version is loaded as the model, a kept decision
//! chooses the precision. So a folder is used only if it is a real folder
//! (not a link), owned by this user, and writable by no group or other user;
//! one that does not exist is created 0700. A folder that fails the check
//! stops the start with a message naming it, what is wrong and what to do,
//! rather than being silently repaired (another user may already have put
//! files in it).

use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// `$TMPDIR/tfserve-<uid>` as the process found `TMPDIR` first: the parent
/// of the default model cache, and the temporary folder of a confined
/// process (which then points `TMPDIR` at it, so it is fixed once).
pub fn user_temp_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| std::env::temp_dir().join(format!("tfserve-{}", current_uid())))
}

fn current_uid() -> u32 {
    // SAFETY: getuid has no preconditions and cannot fail.
    unsafe { libc::getuid() }
}

/// Makes `dir` (0700, its missing parents too) or checks the one there:
/// a folder, not a link, owned by this user, writable only by it.
/// `setting` names where the folder came from, for the message.
pub fn ensure_private(dir: &Path, setting: &str) -> Result<(), String> {
    match std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) => return Err(format!("{setting}: cannot create {}: {e}", dir.display())),
    }
    let meta = std::fs::symlink_metadata(dir).map_err(|e| format!("{setting}: {}: {e}", dir.display()))?;
    let uid = current_uid();
    let mode = meta.permissions().mode() & 0o7777;
    let wrong = if !meta.is_dir() {
        Some("is a link, not a folder".to_string())
    } else if meta.uid() != uid {
        Some(format!("is owned by uid {}, not this server's uid {uid}", meta.uid()))
    } else if mode & 0o022 != 0 {
        Some(format!("has mode {mode:o}: other users may write it"))
    } else {
        None
    };
    match wrong {
        None => Ok(()),
        Some(wrong) => Err(format!(
            "{setting}: {} {wrong}; what is read from it is trusted, so it must be a folder only this user \
             may write (chmod go-w, or choose another folder)",
            dir.display()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("tfserve-private-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn a_missing_folder_is_made_for_this_user_alone() {
        let dir = scratch("made").join("cache");
        ensure_private(&dir, "--model_cache_dir").unwrap();
        let mode = std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
        // Checked again, as it is at every start.
        ensure_private(&dir, "--model_cache_dir").unwrap();
        std::fs::remove_dir_all(dir.parent().unwrap()).unwrap();
    }

    #[test]
    fn a_folder_others_may_write_is_refused_with_its_mode() {
        let dir = scratch("shared");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        let error = ensure_private(&dir, "--model_cache_dir").unwrap_err();
        assert!(error.starts_with("--model_cache_dir: "), "{error}");
        assert!(error.contains("has mode 777: other users may write it"), "{error}");
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        ensure_private(&dir, "--model_cache_dir").unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_link_in_place_of_the_folder_is_refused() {
        let dir = scratch("link");
        std::fs::create_dir_all(dir.join("elsewhere")).unwrap();
        std::os::unix::fs::symlink(dir.join("elsewhere"), dir.join("cache")).unwrap();
        let error = ensure_private(&dir.join("cache"), "--model_cache_dir").unwrap_err();
        assert!(error.contains("is a link, not a folder"), "{error}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
