//! The HTTP dialects, one folder each: its request decoding, answer encoding
//! and routes (`configure`), all over the protocol-neutral `service`. A new
//! dialect is a new folder here and one line in `http::configure`.

pub mod sagemaker;
pub mod stfs;
pub mod tfs;
