//! The dialects, one folder each: its request decoding, answer encoding and
//! routes (`configure`) or gRPC services, all over the protocol-neutral
//! `service`. A new HTTP dialect is a new folder here and one line in
//! `http::configure`; a gRPC one, a line in `grpc::routes`.

pub mod kserve;
pub mod sagemaker;
pub mod stfs;
pub mod tfs;
pub mod tfs_grpc;
