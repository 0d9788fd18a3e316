//! What `tfserve --version` reports: the libtensorflow this process loaded
//! (its version and file), the CUDA and cuDNN libraries it finds, and the
//! devices a TensorFlow session sees.

use std::ffi::{c_int, c_void, CStr};

use super::tf_log::quietly;
use super::SessionConfig;

/// A multi-line report for operators (and bug reports).
pub fn report() -> String {
    let mut out = format!(
        "tfserve {} (linux-{}, built against TensorFlow {})\n",
        env!("CARGO_PKG_VERSION"),
        std::env::consts::ARCH,
        env!("TFSERVE_BUILT_WITH_TENSORFLOW")
    );
    let tf_version = tensorflow::version().unwrap_or_else(|e| format!("unknown ({e})"));
    out += &format!("TensorFlow {tf_version} ({})\n", library_file());
    out += &cuda_line();
    out += "devices:\n";
    match quietly(|| devices(&SessionConfig::default())) {
        Ok(devices) if !devices.is_empty() => {
            for device in devices {
                out += &format!("  {device}\n");
            }
        }
        Ok(_) => out += "  none\n",
        Err(e) => out += &format!("  cannot list them: {e}\n"),
    }
    out
}

fn devices(config: &SessionConfig) -> Result<Vec<String>, tensorflow::Status> {
    let graph = tensorflow::Graph::new();
    let mut options = tensorflow::SessionOptions::new();
    options.set_config(&config.to_config_proto())?;
    let session = tensorflow::Session::new(&options, &graph)?;
    Ok(session
        .device_list()?
        .into_iter()
        .map(|d| {
            // A CPU device's figure is an allocator default, not the host's memory.
            let memory = if d.memory_bytes > 0 && d.device_type != "CPU" {
                format!(", {:.1} GiB", d.memory_bytes as f64 / (1u64 << 30) as f64)
            } else {
                String::new()
            };
            format!("{} ({}{memory})", d.name, d.device_type)
        })
        .collect())
}

/// The GPUs a TensorFlow session sees, or why there are none: what the CUDA
/// libraries and driver lookup found.
pub fn gpus(config: &SessionConfig) -> Result<Vec<String>, String> {
    let devices = quietly(|| devices(config)).map_err(|e| format!("cannot list devices: {e}"))?;
    let gpus: Vec<String> = devices.into_iter().filter(|d| d.contains("(GPU")).collect();
    if gpus.is_empty() {
        let tf_version = tensorflow::version().unwrap_or_default();
        return Err(format!(
            "TensorFlow {tf_version} from {}; {}; `tfserve --version` lists what it finds",
            library_file(),
            cuda_line().trim_end()
        ));
    }
    Ok(gpus)
}

/// Whether CUDA's runtime library loads (libtensorflow's CUDA build with its
/// libraries at hand): only then can TensorFlow see a GPU.
pub fn cuda_runtime_loads() -> bool {
    open(c"libcudart.so.12").is_some()
}

/// The file libtensorflow's C API was loaded from.
fn library_file() -> String {
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: dladdr only reads the address; TF_Version is a function of the loaded library.
    let found = unsafe { libc::dladdr(tensorflow_sys::TF_Version as *const c_void, &mut info) };
    if found == 0 || info.dli_fname.is_null() {
        return "library file unknown".into();
    }
    // SAFETY: dladdr succeeded, so dli_fname is a NUL-terminated path owned by the loader.
    let path = unsafe { CStr::from_ptr(info.dli_fname) };
    std::fs::canonicalize(path.to_string_lossy().as_ref())
        .map(|p| p.display().to_string())
        .unwrap_or_else(|_| path.to_string_lossy().into_owned())
}

/// Opens a shared library by soname (the loader's search path, the binary's rpath included).
fn open(name: &CStr) -> Option<*mut c_void> {
    // SAFETY: a plain dlopen of a library name; the handle is never closed (libraries stay loaded).
    let handle = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_LAZY | libc::RTLD_LOCAL) };
    (!handle.is_null()).then_some(handle)
}

fn symbol(handle: *mut c_void, name: &CStr) -> Option<*mut c_void> {
    // SAFETY: dlsym on a live handle with a NUL-terminated name.
    let address = unsafe { libc::dlsym(handle, name.as_ptr()) };
    (!address.is_null()).then_some(address)
}

fn cuda_line() -> String {
    let Some(cudart) = open(c"libcudart.so.12") else {
        return "CUDA: no libcudart.so.12 found (a CPU build, or a host without the CUDA libraries)\n".into();
    };
    type GetVersion = unsafe extern "C" fn(*mut c_int) -> c_int;
    let version_of = |name: &CStr| -> Option<String> {
        let function = symbol(cudart, name)?;
        // SAFETY: cudaRuntimeGetVersion/cudaDriverGetVersion take an int* and return cudaError_t.
        let function: GetVersion = unsafe { std::mem::transmute::<*mut c_void, GetVersion>(function) };
        let mut version: c_int = 0;
        // SAFETY: `version` outlives the call.
        let status = unsafe { function(&mut version) };
        (status == 0 && version > 0).then(|| format!("{}.{}", version / 1000, (version % 1000) / 10))
    };
    let runtime = version_of(c"cudaRuntimeGetVersion").unwrap_or_else(|| "?".into());
    let driver = version_of(c"cudaDriverGetVersion").unwrap_or_else(|| "none (no NVIDIA driver)".into());
    let cudnn = open(c"libcudnn.so.9")
        .and_then(|lib| symbol(lib, c"cudnnGetVersion"))
        .map(|function| {
            type CudnnVersion = unsafe extern "C" fn() -> usize;
            // SAFETY: cudnnGetVersion takes nothing and returns size_t.
            let function: CudnnVersion = unsafe { std::mem::transmute::<*mut c_void, CudnnVersion>(function) };
            // SAFETY: a plain query.
            let v = unsafe { function() };
            format!("{}.{}.{}", v / 10000, (v % 10000) / 100, v % 100)
        })
        .unwrap_or_else(|| "not found".into());
    format!("CUDA runtime {runtime}, driver {driver}; cuDNN {cudnn}\n")
}
