//! The protobuf messages and gRPC services generated from `proto/` by
//! `build.rs`: TF Serving's, TensorFlow's own, and the Open Inference Protocol's.
#![allow(clippy::all, missing_docs, rustdoc::all)]

pub mod tensorflow {
    include!(concat!(env!("OUT_DIR"), "/tensorflow.rs"));

    pub mod error {
        include!(concat!(env!("OUT_DIR"), "/tensorflow.error.rs"));
    }

    pub mod serving {
        include!(concat!(env!("OUT_DIR"), "/tensorflow.serving.rs"));
    }
}

pub mod inference {
    include!(concat!(env!("OUT_DIR"), "/inference.rs"));
}

/// Every file's descriptor, encoded: what server reflection answers from.
pub const FILE_DESCRIPTOR_SET: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/descriptors.bin"));
