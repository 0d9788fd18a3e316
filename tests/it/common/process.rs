//! The `tfserve` binary as a child process: started and waited for until it
//! reports its address, its log kept, stopped with SIGTERM or killed on drop.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub struct Server {
    pub child: Child,
    pub url: String,
    /// The gRPC listener's address, as the start-up line reports it.
    pub grpc: String,
    pub log: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl Server {
    /// Waits until a logged line contains `needle`: the reader thread sees a
    /// process's last lines a moment after it exits.
    pub fn wait_for_line(&self, needle: &str) {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !self.log.lock().unwrap().iter().any(|l| l.contains(needle)) {
            assert!(std::time::Instant::now() < deadline, "no line with '{needle}'");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Server {
    /// Sends SIGTERM, as an orchestrator stops a server.
    pub fn sigterm(&self) {
        let pid = self.child.id().to_string();
        assert!(Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
    }

    /// The exit status, once the process has exited within `bound`.
    pub fn exit_within(&mut self, bound: Duration) -> std::process::ExitStatus {
        let deadline = std::time::Instant::now() + bound;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the server did not exit within {bound:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The binary on the loopback with ephemeral REST and gRPC ports, with `args`.
pub fn start_local(args: &[&str]) -> Server {
    let mut all = vec!["--rest_api_port=0", "--port=0", "--host=127.0.0.1"];
    all.extend_from_slice(args);
    start(&all)
}

/// The binary serving one model, `name` from `base_path`, as `start_local`
/// does, with `args`.
pub fn serve_model(name: &str, base_path: &std::path::Path, args: &[&str]) -> Server {
    let name = format!("--model_name={name}");
    let base_path = format!("--model_base_path={}", base_path.display());
    let mut all = vec![name.as_str(), base_path.as_str()];
    all.extend_from_slice(args);
    start_local(&all)
}

/// Starts the binary and waits for the log line that reports its address.
pub fn start(args: &[&str]) -> Server {
    start_with_env(args, &[])
}

pub fn start_with_env(args: &[&str], env: &[(&str, &str)]) -> Server {
    launch(args, env).unwrap_or_else(|log| panic!("server reports its address:\n{log}"))
}

/// Starts the binary; `Err` with what it logged when it exits before
/// reporting its address (a port taken by another process, say).
pub fn try_start(args: &[&str]) -> Result<Server, String> {
    launch(args, &[])
}

fn launch(args: &[&str], env: &[(&str, &str)]) -> Result<Server, String> {
    let mut child = Command::new(env!("CARGO_BIN_EXE_tfserve"))
        .args(args)
        .envs(env.iter().copied())
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("binary starts");
    let stderr = child.stderr.take().expect("stderr is piped");
    let (sender, receiver) = std::sync::mpsc::channel();
    let log = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let lines = log.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Some(rest) = line.split(" on http://").nth(1) {
                // A word ends at a space, or at the quote closing a JSON log line's message.
                let word = |text: &str| text.split([' ', '"']).next().unwrap_or_default().to_string();
                let addr = word(rest);
                let grpc = word(rest.split("gRPC on ").nth(1).unwrap_or_default());
                let _ = sender.send((addr, grpc));
            }
            lines.lock().unwrap().push(line);
        }
    });
    match receiver.recv_timeout(Duration::from_secs(60)) {
        Ok((addr, grpc)) => Ok(Server {
            child,
            url: format!("http://{addr}"),
            grpc,
            log,
        }),
        Err(_) => {
            let _ = child.kill();
            let _ = child.wait();
            Err(log.lock().unwrap().join("\n"))
        }
    }
}
