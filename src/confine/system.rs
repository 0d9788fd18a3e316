//! The system's part of the confinement's rules: libraries, the files of
//! `/etc` that the loader, the name service, TLS, time zones and pip read,
//! the kernel's views, the devices a process writes, and the Python
//! interpreter that runs handlers.

use std::path::{Path, PathBuf};

use super::Rules;

/// The system's files any process of this server reads.
#[rustfmt::skip]
const SYSTEM_READS: &[&str] = &[
    "/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin", "/opt/conda",
    // The dynamic loader's cache, name service, TLS roots and time zones.
    "/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/nsswitch.conf", "/etc/resolv.conf",
    "/etc/hosts", "/etc/host.conf", "/etc/gai.conf", "/etc/services", "/etc/protocols", "/etc/passwd",
    "/etc/group", "/etc/localtime", "/etc/timezone", "/etc/ssl", "/etc/pki", "/etc/ca-certificates",
    "/etc/alternatives", "/etc/mime.types", "/etc/nvidia", "/etc/OpenCL",
    // What the distribution is (pip's user agent asks), and pip's own configuration.
    "/etc/os-release", "/etc/debian_version", "/etc/lsb-release", "/etc/redhat-release", "/etc/system-release",
    "/etc/pip.conf", "/etc/xdg/pip",
    // CPU topology, cgroup limits, memory: TensorFlow and the server read them.
    "/proc", "/sys",
    // The CUDA toolkit and driver where they are installed outside /usr.
    "/usr/local/cuda", "/usr/local/nvidia",
];

/// Variables naming files or folders that pip and TLS clients read.
const ENVIRONMENT_READS: [&str; 8] = [
    "PIP_FIND_LINKS",
    "PIP_CERT",
    "PIP_CONFIG_FILE",
    "PIP_INDEX_URL",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
];

/// The devices any process writes (and a GPU's render nodes).
#[rustfmt::skip]
const DEVICE_WRITES: &[&str] = &[
    "/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty", "/dev/shm", "/dev/dri",
];

/// What any process of this server needs from the system: its libraries,
/// the name service and TLS configuration, the kernel's views, the devices
/// it writes and a GPU's, and the Python interpreter for handlers.
pub(super) fn add_system(rules: &mut Rules, python: &str) {
    rules.read.extend(SYSTEM_READS.iter().map(PathBuf::from));
    rules.write.extend(DEVICE_WRITES.iter().map(PathBuf::from));
    // A GPU's character devices (`/dev/nvidia0`, `/dev/nvidiactl`, `/dev/nvidia-uvm`, ...).
    if let Ok(entries) = std::fs::read_dir("/dev") {
        for entry in entries.flatten() {
            if entry.file_name().to_string_lossy().starts_with("nvidia") {
                rules.write.insert(entry.path());
            }
        }
    }
    // The bundle: the executable's folder and the libraries beside it.
    if let Some(folder) = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(Path::to_path_buf))
    {
        rules.read.insert(folder.join("..").join("lib"));
        rules.read.insert(folder);
    }
    // Where pip (handlers' requirements) and TLS clients are told to look.
    for variable in ENVIRONMENT_READS {
        let value = std::env::var(variable).unwrap_or_default();
        let paths = value.split_whitespace().map(|item| item.trim_start_matches("file://"));
        rules
            .read
            .extend(paths.filter(|p| p.starts_with('/')).map(PathBuf::from));
    }
    if let Some(paths) = std::env::var_os("LD_LIBRARY_PATH") {
        rules
            .read
            .extend(std::env::split_paths(&paths).filter(|p| p.is_absolute()));
    }
    rules.read.extend(python_prefixes(python));
}

/// The folders a Python interpreter runs from: the environment's prefix and
/// the base installation a virtual environment points to.
fn python_prefixes(python: &str) -> Vec<PathBuf> {
    let found = if python.contains('/') {
        Some(PathBuf::from(python))
    } else {
        std::env::var_os("PATH").and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|dir| dir.join(python))
                .find(|candidate| candidate.is_file())
        })
    };
    let Some(executable) = found else {
        return Vec::new();
    };
    let mut prefixes = Vec::new();
    // `<prefix>/bin/python3`: a virtual environment (its symlink unresolved),
    // then the installation the symlink leads to.
    let unresolved = executable.parent().and_then(Path::parent).map(Path::to_path_buf);
    let resolved = std::fs::canonicalize(&executable)
        .ok()
        .and_then(|real| real.parent().and_then(Path::parent).map(Path::to_path_buf));
    prefixes.extend(unresolved);
    prefixes.extend(resolved);
    prefixes
}
