//! The tests that need TensorFlow: its answers, the binary as a process, the
//! real Python clients, custom ops, GPU placement and the object stores.

mod access;
mod binary;
mod capture;
mod capture_limits;
mod capture_logs;
mod clients;
mod compat;
mod custom_op;
mod dashboard;
mod deploy;
mod drain;
mod faults;
mod front;
mod gpu_placement;
mod grpc;
mod grpc_attacks;
mod grpc_binary;
mod h2spec;
mod handlers;
mod inspect;
mod memory;
mod memory_limits;
mod mock_agrees;
mod object_storage;
mod overload;
mod precision;
mod readme;
mod sagemaker;
mod slow_clients;
mod stfs;
mod stfs_images;
mod tfs_predict;
mod transform;
mod upstream;
