//! One `python3 glue.py` process and the frames it speaks on its pipes: a
//! little-endian length and a JSON header, then a length and the raw body,
//! each way. `workers.rs` owns when processes start, serve and are replaced.

use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader, BufWriter};
use tokio::process::{Child, ChildStdin, ChildStdout};

use super::workers::Loaded;
use super::{Answer, CallContext, HandlerError};

/// One `python3 glue.py` process.
pub(super) struct Worker {
    pub(super) child: Child,
    pub(super) requests: BufWriter<ChildStdin>,
    pub(super) replies: BufReader<ChildStdout>,
    pub(super) calls: u64,
}

impl Worker {
    /// Sends one request frame and reads its reply.
    pub(super) async fn exchange(&mut self, header: &Value, body: &[u8]) -> std::io::Result<(Value, Vec<u8>)> {
        let encoded = serde_json::to_vec(header)?;
        self.requests.write_all(&(encoded.len() as u32).to_le_bytes()).await?;
        self.requests.write_all(&encoded).await?;
        self.requests.write_all(&(body.len() as u64).to_le_bytes()).await?;
        self.requests.write_all(body).await?;
        self.requests.flush().await?;
        let size = self.replies.read_u32_le().await? as usize;
        let mut reply = vec![0; size];
        self.replies.read_exact(&mut reply).await?;
        let size = self.replies.read_u64_le().await? as usize;
        let mut out = vec![0; size];
        self.replies.read_exact(&mut out).await?;
        Ok((serde_json::from_slice(&reply)?, out))
    }

    /// Imports a handler module; whether it defines `handler`.
    pub(super) async fn load(&mut self, loaded: &Loaded) -> Result<bool, String> {
        let request = json!({
            "op": "load",
            "module": loaded.module,
            "path": loaded.file.display().to_string(),
            "search_paths": loaded.search_paths,
        });
        let (reply, _) = self
            .exchange(&request, &[])
            .await
            .map_err(|e| format!("the Python handler worker exited while importing it ({e})"))?;
        if reply["ok"] != json!(true) {
            return Err(reply["error"].as_str().unwrap_or("import failed").to_string());
        }
        Ok(reply["handler"] == json!(true))
    }

    /// How the process ended, once its pipe closed.
    pub(super) async fn exit_status(&mut self) -> String {
        match tokio::time::timeout(Duration::from_millis(500), self.child.wait()).await {
            Ok(Ok(status)) => status.to_string(),
            _ => "no exit status".into(),
        }
    }

    pub(super) fn resident_bytes(&self) -> Option<u64> {
        let pid = self.child.id()?;
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
        let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kb * 1024)
    }
}

pub(super) fn call_header(op: &str, loaded: &Loaded, context: &CallContext, status: Option<u16>) -> Value {
    // grpc_uri is the container's "localhost:<grpc_port>"; the glue opens `channel` on it.
    let grpc_uri = if context.grpc_port.is_empty() {
        String::new()
    } else {
        format!("localhost:{}", context.grpc_port)
    };
    json!({
        "op": op,
        "module": loaded.module,
        "status": status,
        "context": [
            context.model_name,
            context.model_version,
            context.method,
            context.rest_uri,
            context.grpc_port,
            null,
            context.custom_attributes,
            context.request_content_type,
            context.accept_header,
            context.content_length,
            grpc_uri,
        ],
    })
}

pub(super) fn answer_of(reply: Value, body: Vec<u8>) -> Result<Answer, HandlerError> {
    if reply["ok"] == json!(true) {
        return Ok(Answer {
            body,
            content_type: reply["content_type"].as_str().map(str::to_string),
        });
    }
    if let Some(detail) = reply["detail"].as_str() {
        log::warn!("inference.py raised {detail}");
    }
    Err(HandlerError::Raised {
        status: reply["status"]
            .as_u64()
            .and_then(|s| u16::try_from(s).ok())
            .unwrap_or(500),
        message: reply["error"].as_str().unwrap_or("the handler failed").to_string(),
    })
}
