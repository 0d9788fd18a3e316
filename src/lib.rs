//! tfserve: a native server for TensorFlow SavedModels.
//!
//! The layers, top to bottom; each imports only from the layers below it.
//!
//! | layer | modules |
//! |---|---|
//! | the process | [`serve`]: start-up and the drained shutdown, over both transports; [`confine`]: the Landlock rules the process runs under |
//! | transports | [`http`] (actix-web: listener, middleware, route table), [`grpc`] (tonic on its own runtime: services, health, reflection) |
//! | dialects | [`dialects`]: one folder per API (`tfs`, `sagemaker`, `stfs`, `tfs_grpc`, `kserve`) |
//! | request glue | [`call`]: what a dialect's handler needs per transport (body limits, trace, answers, metrics) |
//! | server core | [`server`]: shared state, admission, auth, request ids, the drain, start-up |
//! | settings | [`settings`]: flags, file and environment, every layer's settings composed |
//! | TF Serving | [`tfs`]: its REST JSON layouts and refusals, shared by three dialects and `inspect` |
//! | service | [`service`]: the only door to models (resolve, decode off the event loop, run, encode; load and unload) |
//! | errors | [`error`]: the request error every layer's error converts into |
//! | capture | [`capture`]: request/response capture (SageMaker's JSON Lines, TF Serving's PredictionLog records, KServe's CloudEvents) on a bounded writer thread |
//! | models | [`registry`] (versions and states), [`storage`] (base paths in S3, GCS and Azure Blob, mirrored into a local cache), [`modes`] (precision and XLA chosen by a trial at load), [`warmup`], [`python_handlers`] (SageMaker's `inference.py`), [`model_config`] (TF Serving's model config), [`batcher`] (queues and batch threads) |
//! | audit | [`audit`]: what a SavedModel's signatures reach outside the request, and the policy that refuses it at load |
//! | runtime | [`runtime`]: TensorFlow behind the `Loader`/`Model` traits (the mock in tests) |
//!
//! Beside them ([`SHARED`], importing from no layer): [`codec`] (JSON, CSV,
//! protobuf ⇄ typed tensors), [`tensor`] and [`signature`] (TensorFlow-free
//! types), [`status`] (the one code enum and its HTTP and gRPC table),
//! [`metrics`] and [`gpu_metrics`], [`textproto`], [`tls`], [`imaging`],
//! [`proto`], [`logging`], [`flags`], [`arrival`] (when a read's bytes reached
//! the machine); and the subcommands [`inspect`] and
//! [`transform`] (batch transform), at the top.

/// The module graph's layers, top first: a module imports only from layers
/// after its own, and from [`SHARED`]. `tests/it/mock/layers.rs` checks the sources
/// against this list, and that every module is in it or in [`SHARED`].
#[doc(hidden)]
pub const LAYERS: &[&[&str]] = &[
    &["serve", "inspect", "transform", "main", "bin"],
    &["confine"],
    &["http", "grpc"],
    &["dialects"],
    &["call"],
    &["server"],
    &["settings"],
    &["tfs"],
    &["service"],
    &["error"],
    &["capture"],
    &["registry"],
    &["storage"],
    &["modes"],
    &["warmup", "python_handlers"],
    &["model_config"],
    &["audit"],
    &["batcher"],
    &["runtime"],
];

/// Modules beside the layers, any layer may use them: types, formats and
/// metrics. They import from no layer.
#[doc(hidden)]
pub const SHARED: &[&str] = &[
    "codec",
    "tensor",
    "signature",
    "status",
    "metrics",
    "gpu_metrics",
    "textproto",
    "flags",
    "tls",
    "imaging",
    "proto",
    "logging",
    "arrival",
];

pub mod arrival;
pub mod audit;
pub mod batcher;
pub mod call;
pub mod capture;
pub mod codec;
pub mod confine;
pub mod dialects;
pub mod error;
pub mod flags;
pub mod gpu_metrics;
pub mod grpc;
pub mod http;
pub mod imaging;
pub mod inspect;
pub mod logging;
pub mod metrics;
pub mod model_config;
pub mod modes;
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
pub mod storage;
pub mod tensor;
pub mod textproto;
pub mod tfs;
pub mod tls;
pub mod transform;
pub mod warmup;

#[cfg(feature = "tensorflow")]
pub use serve::{run, start};
pub use serve::{start_with, Running};
pub use server::StartError;
