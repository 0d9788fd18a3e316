//! Reads that tell when their bytes reached the machine: the kernel's
//! software receive timestamp (`SO_TIMESTAMPNS`), which TCP reports for the
//! last segment a read took. How long a request sat unread in its socket is
//! a wait no queue of the server sees; under a latency objective it is what
//! tells a transport that the server has fallen behind its connections
//! (`Controller::check`). The REST front reads with [`read`]; gRPC's
//! connections read through a [`Stamped`] stream, whose latest stamp the
//! connection reads as each call opens. Asked for only on connections
//! accepted while a queue has an objective: every other read stays a plain
//! `read`.

use std::future::Future;
use std::io;
use std::mem::{size_of, MaybeUninit};
use std::os::fd::{AsRawFd, RawFd};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::{Duration, SystemTime};

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};
use tokio::net::TcpStream;

/// Asks the kernel to stamp what arrives on `stream` from now on.
pub fn enable(stream: &TcpStream) -> io::Result<()> {
    let on: libc::c_int = 1;
    // SAFETY: a valid socket, and an option value of the size given.
    let set = unsafe {
        libc::setsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_TIMESTAMPNS,
            (&on as *const libc::c_int).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    match set {
        0 => Ok(()),
        _ => Err(io::Error::last_os_error()),
    }
}

/// Reads what has arrived into `buf`'s spare room, as `read_buf` does; on a
/// stamped connection, with the time the last byte read reached the machine.
/// A poll function, not an async one: the future is a few words, built once
/// per read on the path every request takes.
pub fn read<'a>(
    stream: &'a mut TcpStream,
    buf: &'a mut BytesMut,
    stamped: bool,
) -> impl Future<Output = io::Result<(usize, Option<SystemTime>)>> + 'a {
    std::future::poll_fn(move |context| {
        if !stamped {
            return read_plain(stream, buf, context);
        }
        loop {
            ready!(stream.poll_read_ready(context))?;
            let fd = stream.as_raw_fd();
            match stream.try_io(Interest::READABLE, || receive(fd, buf.spare_capacity_mut())) {
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => continue,
                Err(error) => return Poll::Ready(Err(error)),
                Ok((read, arrived)) => {
                    // SAFETY: the kernel wrote (initialised) that many bytes of the spare room.
                    unsafe { buf.set_len(buf.len() + read) };
                    return Poll::Ready(Ok((read, arrived)));
                }
            }
        }
    })
}

/// `read_buf`'s poll: a plain read into `buf`'s spare room.
fn read_plain(
    stream: &mut TcpStream,
    buf: &mut BytesMut,
    context: &mut Context<'_>,
) -> Poll<io::Result<(usize, Option<SystemTime>)>> {
    let spare = buf.spare_capacity_mut();
    let mut read = ReadBuf::uninit(spare);
    ready!(Pin::new(stream).poll_read(context, &mut read))?;
    let read = read.filled().len();
    // SAFETY: the read filled (initialised) that many bytes of the spare room.
    unsafe { buf.set_len(buf.len() + read) };
    Poll::Ready(Ok((read, None)))
}

/// One `recvmsg` into `spare`, with its control message read: the bytes it
/// wrote there (and so initialised), and their stamp.
fn receive(socket: RawFd, spare: &mut [MaybeUninit<u8>]) -> io::Result<(usize, Option<SystemTime>)> {
    let mut iov = libc::iovec {
        iov_base: spare.as_mut_ptr().cast(),
        iov_len: spare.len(),
    };
    // Room for one timespec message, aligned as a cmsghdr must be.
    let mut control = [0u64; 8];
    // SAFETY: an all-zero msghdr is a valid empty one.
    let mut message: libc::msghdr = unsafe { std::mem::zeroed() };
    message.msg_iov = &mut iov;
    message.msg_iovlen = 1;
    message.msg_control = control.as_mut_ptr().cast();
    message.msg_controllen = std::mem::size_of_val(&control) as _;
    // SAFETY: the iovec covers `spare`, the control buffer is ours.
    let read = unsafe { libc::recvmsg(socket, &mut message, 0) };
    if read < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((read as usize, stamp(&message)))
}

/// The receive time in a message's control data, when it carries one.
fn stamp(message: &libc::msghdr) -> Option<SystemTime> {
    // SAFETY: the control buffer is the one `recvmsg` filled, walked with
    // the kernel's own macros; the stamp is read unaligned.
    unsafe {
        let mut header = libc::CMSG_FIRSTHDR(message);
        while !header.is_null() {
            if (*header).cmsg_level == libc::SOL_SOCKET && (*header).cmsg_type == libc::SCM_TIMESTAMPNS {
                let time: libc::timespec = std::ptr::read_unaligned(libc::CMSG_DATA(header).cast());
                let since_epoch = Duration::new(time.tv_sec as u64, time.tv_nsec as u32);
                return SystemTime::UNIX_EPOCH.checked_add(since_epoch);
            }
            header = libc::CMSG_NXTHDR(message, header);
        }
    }
    None
}

/// How long ago bytes stamped `arrived` reached the machine, taken at the
/// read: zero for none, or for a stamp ahead of the clock (stepped back
/// since). Stamps are wall-clock time, so a clock stepped forward between
/// arrival and read adds its step; and TCP reports the last segment's
/// stamp, so a request whose segment was lost and resent counts the resend.
pub fn waited(arrived: Option<SystemTime>) -> Duration {
    arrived.map_or(Duration::ZERO, |arrived| {
        SystemTime::now().duration_since(arrived).unwrap_or_default()
    })
}

/// The stamp of the bytes a connection read last, as nanoseconds since the
/// epoch (0: none yet), shared between its stream and the code that reads
/// its calls.
#[derive(Default)]
pub struct LastArrival(AtomicU64);

impl LastArrival {
    fn set(&self, arrived: SystemTime) {
        let nanos = arrived
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos();
        self.0
            .store(u64::try_from(nanos).unwrap_or(u64::MAX), Ordering::Relaxed);
    }

    /// How long ago the bytes read last reached the machine ([`waited`]).
    pub fn waited(&self) -> Duration {
        match self.0.load(Ordering::Relaxed) {
            0 => Duration::ZERO,
            nanos => waited(SystemTime::UNIX_EPOCH.checked_add(Duration::from_nanos(nanos))),
        }
    }
}

/// A TCP stream whose reads are stamped, keeping the latest stamp where
/// its connection's calls read it. Only connections accepted under an
/// objective read through it; every other keeps Tokio's stream as it is.
pub struct Stamped {
    stream: TcpStream,
    last: Arc<LastArrival>,
}

impl Stamped {
    /// Asks the kernel to stamp what arrives on `stream`: the stamped
    /// stream and where its latest stamp is read, or the stream back where
    /// the socket cannot be stamped.
    pub fn new(stream: TcpStream) -> Result<(Stamped, Arc<LastArrival>), TcpStream> {
        if enable(&stream).is_err() {
            return Err(stream);
        }
        let last = Arc::<LastArrival>::default();
        Ok((
            Stamped {
                stream,
                last: last.clone(),
            },
            last,
        ))
    }
}

impl AsyncRead for Stamped {
    fn poll_read(self: Pin<&mut Self>, context: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            ready!(this.stream.poll_read_ready(context))?;
            let fd = this.stream.as_raw_fd();
            // SAFETY: `receive` only writes into the unfilled room, and what
            // it says it wrote is marked initialised below.
            let spare = unsafe { buf.unfilled_mut() };
            match this.stream.try_io(Interest::READABLE, || receive(fd, spare)) {
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => continue,
                Err(error) => return Poll::Ready(Err(error)),
                Ok((read, arrived)) => {
                    // SAFETY: the kernel initialised `read` bytes of the unfilled room.
                    unsafe { buf.assume_init(read) };
                    buf.advance(read);
                    if let Some(arrived) = arrived {
                        this.last.set(arrived);
                    }
                    return Poll::Ready(Ok(()));
                }
            }
        }
    }
}

impl AsyncWrite for Stamped {
    fn poll_write(self: Pin<&mut Self>, context: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write(context, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        context: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write_vectored(context, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(context)
    }

    fn poll_shutdown(self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(context)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_read_tells_how_long_its_bytes_waited_unread() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (accepted, _) = listener.accept().unwrap();
        accepted.set_nonblocking(true).unwrap();
        let mut server = TcpStream::from_std(accepted).unwrap();
        enable(&server).unwrap();
        let mut buf = BytesMut::with_capacity(64);
        // The kernel turns stamping on in deferred work when no socket had
        // it: bytes may arrive unstamped for a moment.
        for _ in 0..200 {
            buf.clear();
            std::io::Write::write_all(&mut client, b".").unwrap();
            let (_, arrived) = read(&mut server, &mut buf, true).await.unwrap();
            if arrived.is_some() {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        buf.clear();
        std::io::Write::write_all(&mut client, b"first").unwrap();
        std::thread::sleep(Duration::from_millis(60));
        let (read, arrived) = super::read(&mut server, &mut buf, true).await.unwrap();
        assert_eq!((read, &buf[..]), (5, &b"first"[..]));
        let waited = waited(arrived);
        assert!(waited >= Duration::from_millis(60), "{waited:?}");
        assert!(waited < Duration::from_secs(30), "{waited:?}");
        // A plain read, on the same connection, tells nothing.
        std::io::Write::write_all(&mut client, b"second").unwrap();
        let (read, arrived) = super::read(&mut server, &mut buf, false).await.unwrap();
        assert_eq!((read, arrived, &buf[5..]), (6, None, &b"second"[..]));
        drop(client);
        assert_eq!(super::read(&mut server, &mut buf, true).await.unwrap().0, 0);
    }

    /// A connected pair: the client's end, and the server's as Tokio's.
    fn connected(listener: &std::net::TcpListener) -> (std::net::TcpStream, TcpStream) {
        let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (accepted, _) = listener.accept().unwrap();
        accepted.set_nonblocking(true).unwrap();
        (client, TcpStream::from_std(accepted).unwrap())
    }

    #[tokio::test]
    async fn a_stamped_stream_keeps_the_stamp_of_what_it_read_last() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut read = [0u8; 16];
        let (mut client, server) = connected(&listener);
        let Ok((mut stream, last)) = Stamped::new(server) else {
            panic!("a TCP socket can be stamped");
        };
        assert_eq!(last.waited(), Duration::ZERO, "nothing read yet");
        for _ in 0..200 {
            std::io::Write::write_all(&mut client, b".").unwrap();
            stream.read_exact(&mut read[..1]).await.unwrap();
            if !last.waited().is_zero() {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        std::io::Write::write_all(&mut client, b"first").unwrap();
        std::thread::sleep(Duration::from_millis(60));
        assert_eq!(stream.read(&mut read).await.unwrap(), 5);
        assert_eq!(&read[..5], b"first");
        let waited = last.waited();
        assert!(waited >= Duration::from_millis(60), "{waited:?}");
        assert!(waited < Duration::from_secs(30), "{waited:?}");
        stream.write_all(b"answer").await.unwrap();
        let mut answer = [0u8; 6];
        std::io::Read::read_exact(&mut client, &mut answer).unwrap();
        assert_eq!(&answer, b"answer");
    }
}
