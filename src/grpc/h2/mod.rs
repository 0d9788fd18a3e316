//! The gRPC listener's HTTP/2, served by hand. Each connection is one task
//! that reads frames, keeps both sides' flow control and runs its streams'
//! calls itself: TF Serving's Predict from its decoded message through the
//! same service method tonic calls, everything else through the tonic
//! services (`transport::Services::route`) with its bodies relayed. Without
//! the layers a general HTTP/2 server puts between the socket and a unary
//! call (a task per stream, a shared stream store behind a lock, a dynamic
//! HPACK table for answers), a small Predict costs about what a REST one does.

mod calls;
mod connection;
mod frame;
mod hpack;
mod request;

pub use calls::RecvBody;
pub use connection::serve;

#[cfg(test)]
mod tests;
