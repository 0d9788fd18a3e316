//! Gives the fuzz binaries the rpath tfserve's own binaries have (its build
//! script reports libtensorflow's directory), so `cargo +nightly fuzz run
//! TARGET` runs them without LD_LIBRARY_PATH.

fn main() {
    println!("cargo:rerun-if-env-changed=DEP_TFSERVE_LIBTENSORFLOW_LIB_DIR");
    if let Ok(dir) = std::env::var("DEP_TFSERVE_LIBTENSORFLOW_LIB_DIR") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
    }
}
