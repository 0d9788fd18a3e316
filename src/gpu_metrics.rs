//! GPU memory and utilisation for `/metrics`, read through NVML
//! (`libnvidia-ml.so.1`, which the NVIDIA driver installs), opened at run
//! time: on a host without the driver the GPU gauges are simply absent.

use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::sync::OnceLock;

/// One GPU as NVML sees it at a scrape.
#[derive(Clone, Debug, PartialEq)]
pub struct GpuReading {
    /// NVML's index (all of the host's GPUs, whatever CUDA_VISIBLE_DEVICES says).
    pub index: u32,
    pub used_bytes: u64,
    pub total_bytes: u64,
    /// The share of the last sample period a kernel ran, 0 to 1.
    pub utilization: f64,
}

#[repr(C)]
#[derive(Default)]
struct Memory {
    total: u64,
    free: u64,
    used: u64,
}

#[repr(C)]
#[derive(Default)]
struct Utilization {
    gpu: c_uint,
    memory: c_uint,
}

type Device = *mut c_void;
type Init = unsafe extern "C" fn() -> c_int;
type Count = unsafe extern "C" fn(*mut c_uint) -> c_int;
type Handle = unsafe extern "C" fn(c_uint, *mut Device) -> c_int;
type MemoryInfo = unsafe extern "C" fn(Device, *mut Memory) -> c_int;
type UtilizationRates = unsafe extern "C" fn(Device, *mut Utilization) -> c_int;

/// NVML's entry points, once initialised.
struct Nvml {
    count: Count,
    handle: Handle,
    memory: MemoryInfo,
    utilization: UtilizationRates,
}

// SAFETY: NVML's functions are thread-safe; the struct holds only function pointers.
unsafe impl Send for Nvml {}
unsafe impl Sync for Nvml {}

const SUCCESS: c_int = 0;

fn open() -> Option<Nvml> {
    // SAFETY: dlopen of a library name; the handle stays open for the process.
    let library = unsafe { libc::dlopen(c"libnvidia-ml.so.1".as_ptr(), libc::RTLD_LAZY | libc::RTLD_LOCAL) };
    if library.is_null() {
        return None;
    }
    let symbol = |name: &CStr| -> Option<*mut c_void> {
        // SAFETY: dlsym on a live handle with a NUL-terminated name.
        let address = unsafe { libc::dlsym(library, name.as_ptr() as *const c_char) };
        (!address.is_null()).then_some(address)
    };
    // SAFETY: each symbol is NVML's function of that name, with the C signature given by its type.
    unsafe {
        let init: Init = std::mem::transmute::<*mut c_void, Init>(symbol(c"nvmlInit_v2")?);
        let nvml = Nvml {
            count: std::mem::transmute::<*mut c_void, Count>(symbol(c"nvmlDeviceGetCount_v2")?),
            handle: std::mem::transmute::<*mut c_void, Handle>(symbol(c"nvmlDeviceGetHandleByIndex_v2")?),
            memory: std::mem::transmute::<*mut c_void, MemoryInfo>(symbol(c"nvmlDeviceGetMemoryInfo")?),
            utilization: std::mem::transmute::<*mut c_void, UtilizationRates>(symbol(
                c"nvmlDeviceGetUtilizationRates",
            )?),
        };
        (init() == SUCCESS).then_some(nvml)
    }
}

fn nvml() -> Option<&'static Nvml> {
    static NVML: OnceLock<Option<Nvml>> = OnceLock::new();
    NVML.get_or_init(|| {
        let nvml = open();
        if nvml.is_some() {
            log::info!("NVML found: GPU memory and utilisation are exported in /metrics");
        }
        nvml
    })
    .as_ref()
}

/// Every GPU's memory and utilisation now; empty without NVML.
pub fn readings() -> Vec<GpuReading> {
    let Some(nvml) = nvml() else {
        return Vec::new();
    };
    let mut count: c_uint = 0;
    // SAFETY: `count` outlives the call.
    if unsafe { (nvml.count)(&mut count) } != SUCCESS {
        return Vec::new();
    }
    (0..count)
        .filter_map(|index| {
            let mut device: Device = std::ptr::null_mut();
            let mut memory = Memory::default();
            let mut utilization = Utilization::default();
            // SAFETY: out-pointers to locals that outlive the calls; `device` comes from NVML.
            unsafe {
                if (nvml.handle)(index, &mut device) != SUCCESS || (nvml.memory)(device, &mut memory) != SUCCESS {
                    return None;
                }
                // Utilisation is unsupported on some devices (MIG slices): memory still counts.
                let busy = (nvml.utilization)(device, &mut utilization) == SUCCESS;
                Some(GpuReading {
                    index,
                    used_bytes: memory.used,
                    total_bytes: memory.total,
                    utilization: if busy {
                        f64::from(utilization.gpu) / 100.0
                    } else {
                        f64::NAN
                    },
                })
            }
        })
        .collect()
}
