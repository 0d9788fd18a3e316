//! The tests that need no TensorFlow: each starts the real server on the mock
//! runtime of `common/mock.rs` (the committed models' signatures and, for the
//! arithmetic ones, their answers) or reads the sources and docs.

mod access;
mod auth;
mod batching;
mod bounded;
mod cors;
mod dashboard;
mod docs;
mod faults;
mod front;
mod grpc;
mod grpc_security;
mod handler_faults;
mod handler_models;
mod handlers;
mod jax_modules;
mod kserve;
mod kserve_agent;
mod layers;
mod management;
mod overload;
mod precision;
mod reload_under_load;
mod repository;
mod sagemaker;
mod slow_clients;
mod stfs;
mod tfs_models;
mod tfs_predict;
mod tls;
mod vertex;
