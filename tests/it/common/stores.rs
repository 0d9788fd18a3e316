//! Object store APIs on loopback for the storage tests (`scripts/object_stores.py`
//! starts and fills them) and a server started against them.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::process::{start_with_env, Server};
use super::{repo_path, stores_python};

/// A store emulator, stopped when dropped.
pub struct Emulator {
    child: Child,
    pub port: u16,
}

impl Drop for Emulator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

pub fn emulator(kind: &str) -> Emulator {
    let port = free_port();
    let child = Command::new(stores_python())
        .arg(repo_path("scripts/object_stores.py"))
        .args(["serve", kind, "--port", &port.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("the emulator starts");
    let deadline = Instant::now() + Duration::from_secs(60);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "{kind} emulator never listened on {port}");
        std::thread::sleep(Duration::from_millis(100));
    }
    Emulator { child, port }
}

/// Uploads a folder's files under `bucket/prefix` with the cloud's own client.
pub fn put(kind: &str, port: u16, bucket: &str, prefix: &str, folder: &Path) {
    let output = Command::new(stores_python())
        .arg(repo_path("scripts/object_stores.py"))
        .args(["put", kind, "--port", &port.to_string(), bucket, prefix])
        .arg(folder)
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
}

pub fn s3_env(port: u16) -> Vec<(&'static str, String)> {
    vec![
        ("AWS_ACCESS_KEY_ID", "test".into()),
        ("AWS_SECRET_ACCESS_KEY", "test".into()),
        ("AWS_REGION", "us-east-1".into()),
        ("AWS_ENDPOINT_URL", format!("http://127.0.0.1:{port}")),
    ]
}

pub fn serve(base_path: &str, cache: &Path, env: &[(&str, String)]) -> Result<Server, String> {
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let args = [
        "--rest_api_port=0",
        "--port=0",
        "--host=127.0.0.1",
        "--model_name=m",
        "--file_system_poll_wait_seconds=1",
        &format!("--model_base_path={base_path}"),
        &format!("--model_cache_dir={}", cache.display()),
    ];
    std::panic::catch_unwind(|| start_with_env(&args, &env)).map_err(|panic| {
        panic
            .downcast_ref::<String>()
            .cloned()
            .unwrap_or_else(|| "the server did not start".into())
    })
}

pub fn predict(server: &Server) -> Value {
    let answer = super::client()
        .post(format!("{}/v1/models/m:predict", server.url))
        .body(r#"{"instances": [1.0, 2.0]}"#)
        .send()
        .unwrap();
    answer.json().unwrap()
}

pub fn versions(server: &Server) -> Value {
    let status = super::get_json(&format!("{}/v1/models/m", server.url));
    status["model_version_status"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| json!([v["version"], v["state"]]))
        .collect()
}

pub fn cached_versions(folder: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(folder)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

pub fn logged(server: &Server, needle: &str) -> usize {
    server.log.lock().unwrap().iter().filter(|l| l.contains(needle)).count()
}

/// A proxy to `upstream` that cuts the first `cuts` connections whose answers
/// pass `after` bytes, mid-transfer.
pub fn cutting_proxy(upstream: u16, cuts: usize, after: usize) -> (u16, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let left = Arc::new(AtomicUsize::new(cuts));
    let budget = left.clone();
    std::thread::spawn(move || {
        for client in listener.incoming().map_while(Result::ok) {
            let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)) else {
                continue;
            };
            let (mut client_in, mut server_out) = (client.try_clone().unwrap(), server.try_clone().unwrap());
            std::thread::spawn(move || std::io::copy(&mut client_in, &mut server_out));
            let budget = budget.clone();
            std::thread::spawn(move || pump_answers(server, client, &budget, after));
        }
    });
    (port, left)
}

fn pump_answers(mut server: TcpStream, mut client: TcpStream, budget: &AtomicUsize, after: usize) {
    let mut buffer = [0u8; 16 * 1024];
    let mut sent = 0;
    while let Ok(n) = server.read(&mut buffer) {
        if n == 0 {
            break;
        }
        let cut = sent + n > after
            && budget
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |b| b.checked_sub(1))
                .is_ok();
        if cut {
            let _ = client.write_all(&buffer[..after.saturating_sub(sent).min(n)]);
            break;
        }
        if client.write_all(&buffer[..n]).is_err() {
            break;
        }
        sent += n;
    }
    let _ = client.shutdown(std::net::Shutdown::Both);
    let _ = server.shutdown(std::net::Shutdown::Both);
}
