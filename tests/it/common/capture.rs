//! Capture test support: the consumers script (pandas, tf.data, the
//! `cloudevents` SDK) and its CloudEvents receiver, and stopping a server as
//! an orchestrator does.

use std::io::BufRead;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use super::process::Server;
use super::{client_python, repo_path};

const CONSUMERS: &str = "tests/capture/consumers.py";

/// What `consumers.py MODE ARGS...` read, as the JSON it printed last.
pub fn consumers(args: &[&str]) -> Value {
    let output = Command::new(client_python())
        .arg(repo_path(CONSUMERS))
        .args(args)
        .env("TF_CPP_MIN_LOG_LEVEL", "3")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_str(stdout.lines().last().unwrap()).unwrap()
}

/// The CloudEvents receiver, answering each event after `delay` seconds.
pub struct Sink {
    child: Child,
    pub url: String,
}

impl Drop for Sink {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn sink(events: &Path, delay: f64) -> Sink {
    let mut child = Command::new(client_python())
        .arg(repo_path(CONSUMERS))
        .args(["sink", &events.display().to_string(), &delay.to_string()])
        .stdout(Stdio::piped())
        .spawn()
        .expect("the CloudEvents receiver starts");
    let mut port = String::new();
    let stdout = child.stdout.take().expect("stdout is piped");
    std::io::BufReader::new(stdout).read_line(&mut port).unwrap();
    let url = format!("http://127.0.0.1:{}/", port.trim());
    Sink { child, url }
}

pub fn sigterm_and_wait(server: &mut Server) {
    server.sigterm();
    server.exit_within(Duration::from_secs(60));
}

/// A POST as a client with a request id and a bearer token sends it; its answer's body.
pub fn post(server: &Server, path: &str, content_type: &str, id: &str, body: &str) -> String {
    let response = super::client()
        .post(format!("{}{path}", server.url))
        .header("content-type", content_type)
        .header("x-request-id", id)
        .header("authorization", "Bearer secret-token")
        .body(body.to_string())
        .send()
        .unwrap();
    assert_eq!(response.status(), 200, "{path}");
    response.text().unwrap()
}
