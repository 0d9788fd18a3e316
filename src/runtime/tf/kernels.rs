//! Which devices the linked libtensorflow has a kernel of an op for, from
//! its kernel registry (`TF_GetRegisteredKernelsForOp`): a build without XLA
//! has no `XlaCallModule` kernel, or none for GPUs, and a JAX export then
//! fails on every request unless the load says so first.

use std::ffi::CString;

use prost::Message;
use tensorflow_sys as tf;

/// `tensorflow.KernelList`: only the fields read here.
#[derive(Clone, PartialEq, prost::Message)]
struct KernelList {
    #[prost(message, repeated, tag = "1")]
    kernel: Vec<KernelDef>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct KernelDef {
    #[prost(string, tag = "2")]
    device_type: String,
}

/// The device types (`CPU`, `GPU`, ...) with a kernel of `op`, sorted; an
/// op with no kernel gives an empty list. `None` when the registry cannot
/// be read.
pub fn devices_for(op: &str) -> Option<Vec<String>> {
    let name = CString::new(op).ok()?;
    // SAFETY: the status and the buffer are created and deleted here; the
    // buffer's bytes are copied out before it is deleted.
    let bytes = unsafe {
        let status = tf::TF_NewStatus();
        let buffer = tf::TF_GetRegisteredKernelsForOp(name.as_ptr(), status);
        let ok = tf::TF_GetCode(status) == tf::TF_Code::TF_OK;
        tf::TF_DeleteStatus(status);
        if buffer.is_null() {
            return None;
        }
        // An empty list may come as no bytes at all.
        let (data, length) = ((*buffer).data.cast::<u8>(), (*buffer).length);
        let bytes = ok.then(|| match data.is_null() || length == 0 {
            true => Vec::new(),
            false => std::slice::from_raw_parts(data, length).to_vec(),
        });
        tf::TF_DeleteBuffer(buffer);
        bytes?
    };
    let mut devices: Vec<String> = KernelList::decode(bytes.as_slice())
        .ok()?
        .kernel
        .into_iter()
        .map(|kernel| kernel.device_type)
        .collect();
    devices.sort();
    devices.dedup();
    Some(devices)
}
