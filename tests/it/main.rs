//! The integration tests, one binary per runtime, each test run once on the
//! runtime it declares by the folder it lives in:
//!
//! - `mock/`: `cargo test --no-default-features --features mock --test it`,
//!   without libtensorflow;
//! - `tensorflow/`: `cargo test --features mock --test it`, what needs
//!   TensorFlow (the mock is linked beside it for the differential test that
//!   keeps the mock's answers TensorFlow's).
//!
//! `common/` holds the harness both share.

mod common;
#[cfg(not(feature = "tensorflow"))]
mod mock;
#[cfg(feature = "tensorflow")]
mod tensorflow;
