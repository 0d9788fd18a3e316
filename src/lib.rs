//! tfserve: a native server for TensorFlow SavedModels.
//!
//! The layers, top to bottom; each imports only from the layers below it.
//!
//! | layer | modules |
//! |---|---|
//! | the process | [`serve`]: start-up and the drained shutdown, over both transports |
//! | transports | [`http`] (actix-web: listener, middleware, route table), [`grpc`] (tonic on its own runtime: services, health, reflection) |
//! | dialects | [`dialects`]: one folder per API (`tfs`, `sagemaker`, `stfs`, `tfs_grpc`, `kserve`) |
//! | request glue | [`call`]: what a dialect's handler needs per transport (body limits, trace, answers, metrics) |
//! | server core | [`server`]: shared state, admission, auth, request ids, the drain, model management, start-up |
//! | service | [`service`]: the only door to models (resolve, decode off the event loop, run, encode) |
//! | models | [`registry`] (versions and states), [`batcher`] (queues and batch threads), [`python_handlers`] (SageMaker's `inference.py`) |
//! | runtime | [`runtime`]: TensorFlow behind the `Loader`/`Model` traits (the mock in tests) |
//!
//! Beside them: [`codec`] (JSON, CSV, protobuf ⇄ typed tensors), [`tensor`] and
//! [`signature`] (TensorFlow-free types), [`status`] (the one code enum and
//! its HTTP and gRPC table), [`error`] (the request-level error), [`settings`], [`metrics`] and [`gpu_metrics`], [`warmup`],
//! [`model_config`] and [`textproto`], [`tls`], [`imaging`], [`proto`], [`logging`], [`capture`]
//! (request/response capture: SageMaker's JSON Lines, TF Serving's PredictionLog records, KServe's
//! CloudEvents, on a bounded writer thread); and the
//! subcommands [`inspect`] and [`transform`] (batch transform).

pub mod batcher;
pub mod call;
pub mod capture;
pub mod codec;
pub mod dialects;
pub mod error;
pub mod gpu_metrics;
pub mod grpc;
pub mod http;
pub mod imaging;
pub mod inspect;
pub mod logging;
pub mod metrics;
pub mod model_config;
pub mod proto;
pub mod python_handlers;
pub mod registry;
pub mod runtime;
pub mod serve;
pub mod server;
pub mod service;
pub mod settings;
pub mod signature;
pub mod status;
pub mod tensor;
pub mod textproto;
pub mod tls;
pub mod transform;
pub mod warmup;

#[cfg(feature = "tensorflow")]
pub use serve::{run, start};
pub use serve::{start_with, Running};
pub use server::StartError;
