//! Locates libtensorflow for linking and embeds its directory as an rpath, so the
//! binary runs without LD_LIBRARY_PATH; compiles `proto/` (TF Serving's and the
//! Open Inference Protocol's messages and services) with a pure-Rust protobuf
//! compiler, so no `protoc` is needed.

use std::env;
use std::path::PathBuf;

const FIX: &str = "run `python3 scripts/setup_libtensorflow.py` (fetches the pinned CPU build), \
or set TENSORFLOW_LIB_DIR (or PKG_CONFIG_PATH) to your own libtensorflow build";

fn main() {
    compile_protos();
    // Without the TensorFlow runtime (`--no-default-features`) nothing links it.
    if env::var_os("CARGO_FEATURE_TENSORFLOW").is_some() {
        link_libtensorflow();
    }
}

fn link_libtensorflow() {
    println!("cargo:rerun-if-env-changed=TENSORFLOW_LIB_DIR");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");
    // pkg-config reads PKG_CONFIG_PATH_<target> first (.cargo/config.toml sets
    // the ARM64 one), so a cross build finds that architecture's library.
    let (lib_dir, version) = match env::var_os("TENSORFLOW_LIB_DIR") {
        Some(dir) => (PathBuf::from(dir), "unknown (TENSORFLOW_LIB_DIR)".to_string()),
        None => match pkg_config::Config::new().cargo_metadata(false).probe("tensorflow") {
            Ok(lib) => match lib.link_paths.first() {
                Some(dir) => (dir.clone(), lib.version.clone()),
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
    println!("cargo:lib_dir={}", lib_dir.display());
    // `tfserve --version` names the pin it was built against beside the library it loads.
    println!("cargo:rustc-env=TFSERVE_BUILT_WITH_TENSORFLOW={version}");
    println!("cargo:rerun-if-changed={}", lib_dir.display());
}

/// The services tfserve serves; their imports come along.
const PROTOS: &[&str] = &[
    "tensorflow_serving/apis/prediction_service.proto",
    "tensorflow_serving/apis/model_service.proto",
    "tensorflow_serving/apis/prediction_log.proto",
    "kserve/grpc_service.proto",
];

/// Generates the messages, the tonic servers and clients, and the encoded
/// descriptor set that server reflection answers from.
fn compile_protos() {
    println!("cargo:rerun-if-changed=proto");
    let descriptors = match protox::compile(PROTOS, ["proto"]) {
        Ok(descriptors) => descriptors,
        Err(error) => panic!("proto/: {error}"),
    };
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let encoded = prost::Message::encode_to_vec(&descriptors);
    if let Err(error) = std::fs::write(out_dir.join("descriptors.bin"), encoded) {
        panic!("cannot write the descriptor set: {error}");
    }
    let generated = tonic_prost_build::configure()
        // Tensor payloads stay slices of the received frame instead of copies.
        .bytes(".tensorflow.TensorProto.tensor_content")
        .bytes(".inference.ModelInferRequest.raw_input_contents")
        .bytes(".inference.ModelInferResponse.raw_output_contents")
        // Feature maps serialize in key order, so equal examples give equal bytes.
        .btree_map(".")
        .compile_fds(descriptors);
    if let Err(error) = generated {
        panic!("generating Rust from proto/: {error}");
    }
}
