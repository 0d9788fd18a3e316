//! A byte-string element type for DT_STRING tensors. The `tensorflow` crate's
//! `String` element requires UTF-8, but TensorFlow strings are arbitrary bytes
//! (encoded images, serialized protos), so tfserve packs and unpacks
//! `TF_TString`s itself.

use std::alloc::{self, Layout};
use std::fmt;
use std::os::raw::{c_char, c_int, c_void};
use std::{mem, ptr, slice};

use tensorflow::{DataType, Status, TensorType};
use tensorflow_sys as tf;

#[derive(Clone, Default, Debug, PartialEq, Eq)]
pub struct ByteString(pub Vec<u8>);

impl fmt::Display for ByteString {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", String::from_utf8_lossy(&self.0))
    }
}

fn tstring_layout(count: usize) -> Option<Layout> {
    let size = mem::size_of::<tf::TF_TString>().checked_mul(count.max(1))?;
    Layout::from_size_align(size, mem::align_of::<tf::TF_TString>()).ok()
}

/// Frees the `TF_TString` array handed to `TF_NewTensor` by `pack`.
unsafe extern "C" fn dealloc_tstrings(data: *mut c_void, len: usize, _arg: *mut c_void) {
    let count = len / mem::size_of::<tf::TF_TString>();
    let tstrings = slice::from_raw_parts_mut(data as *mut tf::TF_TString, count);
    for tstring in tstrings.iter_mut() {
        tf::TF_StringDealloc(tstring);
    }
    if let Some(layout) = tstring_layout(count) {
        alloc::dealloc(data as *mut u8, layout);
    }
}

impl TensorType for ByteString {
    type InnerType = tensorflow::TensorDataNoCRepr<ByteString>;

    fn data_type() -> DataType {
        DataType::String
    }

    fn zero() -> Self {
        ByteString(Vec::new())
    }

    fn one() -> Self {
        ByteString(vec![1])
    }

    fn is_repr_c() -> bool {
        false
    }

    fn unpack(data: &[u8], count: usize) -> tensorflow::Result<Vec<Self>> {
        if data.len() < count * mem::size_of::<tf::TF_TString>() {
            return Err(Status::new_set_lossy(
                tensorflow::Code::Internal,
                "string tensor buffer is shorter than its element count",
            ));
        }
        // SAFETY: TensorFlow hands us `count` initialised TF_TStrings in `data`.
        let tstrings = unsafe { slice::from_raw_parts(data.as_ptr() as *const tf::TF_TString, count) };
        Ok(tstrings
            .iter()
            .map(|tstring| unsafe {
                let ptr = tf::TF_StringGetDataPointer(tstring) as *const u8;
                let len = tf::TF_StringGetSize(tstring);
                ByteString(if len == 0 {
                    Vec::new()
                } else {
                    slice::from_raw_parts(ptr, len).to_vec()
                })
            })
            .collect())
    }

    fn pack(data: &[Self], dims: &[u64]) -> tensorflow::Result<*mut tf::TF_Tensor> {
        let internal = |message: &str| Status::new_set_lossy(tensorflow::Code::Internal, message);
        let layout = tstring_layout(data.len()).ok_or_else(|| internal("string tensor too large"))?;
        let byte_len = data.len() * mem::size_of::<tf::TF_TString>();
        // SAFETY: the buffer is sized and aligned for `data.len()` TF_TStrings, each
        // initialised before TF_NewTensor takes ownership; `dealloc_tstrings` frees it.
        unsafe {
            let buffer = alloc::alloc(layout);
            if buffer.is_null() {
                return Err(internal("allocation failure for a string tensor"));
            }
            let tstrings = slice::from_raw_parts_mut(buffer as *mut tf::TF_TString, data.len());
            for (tstring, value) in tstrings.iter_mut().zip(data) {
                tf::TF_StringInit(tstring);
                tf::TF_StringCopy(tstring, value.0.as_ptr() as *const c_char, value.0.len());
            }
            let tensor = tf::TF_NewTensor(
                tf::TF_STRING,
                dims.as_ptr() as *const i64,
                dims.len() as c_int,
                buffer as *mut c_void,
                byte_len,
                Some(dealloc_tstrings),
                ptr::null_mut(),
            );
            if tensor.is_null() {
                dealloc_tstrings(buffer as *mut c_void, byte_len, ptr::null_mut());
                return Err(internal("TF_NewTensor returned null for a string tensor"));
            }
            Ok(tensor)
        }
    }
}
