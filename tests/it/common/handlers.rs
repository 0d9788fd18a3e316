//! Handler test support: models with `code/inference.py` copied from
//! tests/handlers, and SageMaker invocations as a client sends them.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use serde_json::Value;

use super::{copy_dir, repo_path, spawn_server, temp_dir};

/// `case`'s code/ next to a copy of `model`'s version 1, under `root/name`.
pub fn archive(root: &Path, name: &str, model: &str, case: Option<&str>) -> PathBuf {
    archive_version(root, name, &format!("models/{model}/1"), "1", case)
}

/// `case`'s code/ next to a copy of the SavedModel at `saved_model` as `version`.
pub fn archive_version(root: &Path, name: &str, saved_model: &str, version: &str, case: Option<&str>) -> PathBuf {
    let dir = root.join(name);
    copy_dir(&repo_path(saved_model), &dir.join(version));
    if let Some(case) = case {
        copy_dir(&repo_path(&format!("tests/handlers/{case}/code")), &dir.join("code"));
    }
    dir
}

pub struct Answer {
    pub status: u16,
    pub content_type: String,
    pub body: String,
}

impl Answer {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }

    pub fn error(&self) -> String {
        self.json()["error"].as_str().unwrap_or_default().to_string()
    }
}

pub fn invoke(base: &str, path: &str, model: &str, content_type: &str, accept: Option<&str>, body: Vec<u8>) -> Answer {
    let mut request = reqwest::blocking::Client::new()
        .post(format!("{base}{path}"))
        .header("Content-Type", content_type)
        .header("X-Amzn-SageMaker-Custom-Attributes", format!("tfs-model-name={model}"))
        .body(body);
    if let Some(accept) = accept {
        request = request.header("Accept", accept);
    }
    let response = request.send().unwrap();
    Answer {
        status: response.status().as_u16(),
        content_type: response
            .headers()
            .get("content-type")
            .map(|v| v.to_str().unwrap().to_string())
            .unwrap_or_default(),
        body: response.text().unwrap(),
    }
}

/// Every case as its own model, plus `plain` without handlers.
pub fn models_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let root = temp_dir("handlers-models");
        for case in ["pair", "rest", "raising", "withlib", "withreqs", "grpc"] {
            archive(&root, case, "half_plus_three", Some(case));
        }
        archive(&root, "image", "image_classifier", Some("image"));
        archive(&root, "plain", "half_plus_three", None);
        // The container's own test model: a TF 1.x export whose signature declares no dims.
        for case in ["pair", "rest"] {
            let tf1 = "tests/compat/models/half_plus_three_tf1/123";
            archive_version(&root, &format!("{case}_tf1"), tf1, "123", Some(case));
        }
        root
    })
}

/// One server on `models_dir()`, with two Python workers and a 2 s REST timeout.
pub fn base_url() -> &'static str {
    static URL: OnceLock<String> = OnceLock::new();
    URL.get_or_init(|| {
        let mut settings = super::local_settings();
        settings.models.models_dir = models_dir().to_path_buf();
        settings.handlers.python_workers = 2;
        settings.http.rest_api_timeout_in_ms = 2000;
        format!("http://{}", spawn_server(settings))
    })
}

/// An `/invocations` call to `model` on that server.
pub fn invocation(model: &str, content_type: &str, body: impl Into<Vec<u8>>) -> Answer {
    invoke(base_url(), "/invocations", model, content_type, None, body.into())
}
