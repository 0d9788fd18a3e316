//! The listening sockets both transports accept on. Bound here rather than
//! with `std::net::TcpListener::bind`, whose accept queue holds 128
//! connections: a burst of clients opening connections at once (a load
//! balancer's pool warming, callers reconnecting after a restart) overflows
//! it, and the kernel drops the SYNs it has no room for, which clients
//! resend after a second. A queue of [`ACCEPT_QUEUE`] (the kernel caps it at
//! `net.core.somaxconn`) absorbs such bursts, as actix-web's and nginx's
//! larger defaults do.

use std::io;
use std::net::{SocketAddr, TcpListener, ToSocketAddrs};

use socket2::{Domain, Protocol, Socket, Type};

/// Connections the kernel holds complete for the server to accept.
pub const ACCEPT_QUEUE: i32 = 4096;

/// A TCP socket listening on `addr`.
pub fn tcp(addr: SocketAddr) -> io::Result<TcpListener> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    // As std's bind: a restarted server rebinds at once, its old
    // connections still in TIME_WAIT.
    socket.set_reuse_address(true)?;
    socket.bind(&addr.into())?;
    socket.listen(ACCEPT_QUEUE)?;
    Ok(socket.into())
}

/// Sockets listening on every address `addr` resolves to that binds (as
/// the REST port listens on each of a host name's addresses).
pub fn tcp_every(addr: impl ToSocketAddrs) -> io::Result<Vec<TcpListener>> {
    resolved(addr, true)
}

/// A socket listening on the first address `addr` resolves to that binds,
/// as `std::net::TcpListener::bind` binds it.
pub fn tcp_first(addr: impl ToSocketAddrs) -> io::Result<TcpListener> {
    resolved(addr, false).map(|mut listeners| listeners.swap_remove(0))
}

/// Binds the addresses `addr` resolves to, in order, all of them or up to
/// the first that binds; an error (the last one met) only when none does.
fn resolved(addr: impl ToSocketAddrs, every: bool) -> io::Result<Vec<TcpListener>> {
    let mut listeners = Vec::new();
    let mut last_error = None;
    for resolved in addr.to_socket_addrs()? {
        match tcp(resolved) {
            Ok(listener) if every => listeners.push(listener),
            Ok(listener) => return Ok(vec![listener]),
            Err(error) => last_error = Some(error),
        }
    }
    match (listeners.is_empty(), last_error) {
        (false, _) => Ok(listeners),
        (true, Some(error)) => Err(error),
        (true, None) => Err(io::Error::new(
            io::ErrorKind::AddrNotAvailable,
            "the address resolves to nothing",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// More connections than std's queue of 128 complete while nothing
    /// accepts them: none is left waiting for its SYN to be resent.
    #[test]
    fn a_burst_of_connections_completes_before_any_is_accepted() {
        let listener = tcp("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = listener.local_addr().unwrap();
        let clients: Vec<_> = (0..400)
            .map(|i| {
                std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(500))
                    .unwrap_or_else(|e| panic!("connection {i} did not complete: {e}"))
            })
            .collect();
        assert_eq!(clients.len(), 400);
        drop(listener);
    }

    #[test]
    fn a_port_in_use_is_an_error() {
        let first = tcp("127.0.0.1:0".parse().unwrap()).unwrap();
        assert!(tcp(first.local_addr().unwrap()).is_err());
    }
}
