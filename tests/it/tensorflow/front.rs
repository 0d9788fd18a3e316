//! The HTTP front of the binary: idle connections close when the server
//! stops. Its answers against actix-web's: `mock/front.rs`.

use crate::common;

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::time::Duration;

use common::raw_http::{connect, post, read_answer};
use common::repo_path;

// The binary serves on TensorFlow only.
#[test]
fn idle_connections_close_when_the_server_stops() {
    let base_path = repo_path("models/half_plus_three");
    let mut server = common::process::start(&[
        "--rest_api_port=0",
        "--host=127.0.0.1",
        "--drain_timeout=0.2",
        "--keep_alive_seconds=60",
        "--model_base_path",
        base_path.to_str().unwrap(),
    ]);
    let addr: SocketAddr = server.url.trim_start_matches("http://").parse().unwrap();
    // One connection the front serves, one handed to actix-web; both then idle.
    let mut front = connect(addr);
    front
        .get_mut()
        .write_all(post("/v1/models/default:predict", r#"{"instances": [1.0]}"#, "").as_bytes())
        .unwrap();
    assert!(read_answer(&mut front).status.starts_with("HTTP/1.1 200"));
    let mut handed = connect(addr);
    handed
        .get_mut()
        .write_all(b"GET /v1/models/default HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    assert!(read_answer(&mut handed).status.starts_with("HTTP/1.1 200"));
    let started = std::time::Instant::now();
    server.sigterm();
    // Both are closed by the stop, long before their keep-alive or the
    // stop's 30 s bound would end them.
    for connection in [&mut front, &mut handed] {
        let mut rest = Vec::new();
        connection.read_to_end(&mut rest).unwrap();
        assert!(rest.is_empty());
    }
    let status = server.child.wait().unwrap();
    assert!(status.success(), "{status}");
    assert!(started.elapsed() < Duration::from_secs(20), "{:?}", started.elapsed());
}
