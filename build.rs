//! Locates libtensorflow for linking and embeds its directory as an rpath, so the
//! binary runs without LD_LIBRARY_PATH.

use std::env;
use std::path::PathBuf;

const FIX: &str = "run `python3 scripts/setup_libtensorflow.py` (fetches the pinned CPU build), \
or set TENSORFLOW_LIB_DIR (or PKG_CONFIG_PATH) to your own libtensorflow build";

fn main() {
    println!("cargo:rerun-if-env-changed=TENSORFLOW_LIB_DIR");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");
    let lib_dir = match env::var_os("TENSORFLOW_LIB_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => match pkg_config::Config::new().cargo_metadata(false).probe("tensorflow") {
            Ok(lib) => match lib.link_paths.first() {
                Some(dir) => dir.clone(),
                None => panic!("tensorflow.pc names no library directory (-L); {FIX}"),
            },
            Err(err) => panic!("libtensorflow not found through pkg-config ({err}); {FIX}"),
        },
    };
    if !lib_dir.join("libtensorflow.so").exists() && !lib_dir.join("libtensorflow.so.2").exists() {
        panic!("no libtensorflow.so in {}; {FIX}", lib_dir.display());
    }
    println!("cargo:rustc-link-search=native={}", lib_dir.display());
    println!("cargo:rustc-link-arg=-Wl,-rpath,{}", lib_dir.display());
    println!("cargo:rerun-if-changed={}", lib_dir.display());
    #[cfg(feature = "python")]
    embed_python_rpath();
}

/// The embedded CPython's shared library directory as an rpath too, for
/// interpreters outside the linker's default path (pyenv, /opt/python, ...).
#[cfg(feature = "python")]
fn embed_python_rpath() {
    if let Some(dir) = &pyo3_build_config::get().lib_dir {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
    }
}
