//! TF Serving's shared semantics, above the neutral service: its REST JSON
//! layouts (row and columnar predict, classify and regress, status and
//! metadata) and its request errors with their messages. The TF Serving,
//! SageMaker and TF Serving gRPC dialects and `tfserve inspect` use them.

mod error;
pub mod json;

pub use error::TfsError;

#[cfg(test)]
mod tests;
