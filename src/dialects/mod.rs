//! The dialects, one folder each: its request decoding, answer encoding and
//! routes (`configure`) or gRPC services, all over the protocol-neutral
//! `service`. A new HTTP dialect is a new folder here and one line in
//! `http::configure`; a gRPC one, a field of `grpc::transport::Services` and a
//! line in its `route`.

pub mod kserve;
pub mod sagemaker;
pub mod stfs;
pub mod tfs;
pub mod tfs_grpc;
