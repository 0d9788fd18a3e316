//! One request's life as a dialect sees it, per transport: what a handler
//! needs to read a request and answer it (trace, body limits, admission,
//! timing headers, metrics, error statuses). Dialects build on this and on
//! the service, never on the transports themselves.

pub mod grpc;
pub mod http;
