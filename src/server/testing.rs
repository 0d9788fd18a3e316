//! A server over the mock runtime for the transports' socket-free tests:
//! model `m` with versions 1 and 2, each serving `y = x + version`.

use std::path::PathBuf;
use std::sync::Arc;

use super::{build_service, ServerState};
use crate::runtime::mock::MockLoader;
use crate::settings::Settings;

/// A model directory of its own per test (the mock loader reads no graph).
fn models(name: &str) -> PathBuf {
    let root = std::env::temp_dir().join(format!("tfserve-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    for version in ["1", "2"] {
        let dir = root.join("m").join(version);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("saved_model.pb"), b"").unwrap();
    }
    root
}

/// The state, and the directory to remove when the test ends.
pub fn mock_state(name: &str) -> (Arc<ServerState>, PathBuf) {
    let root = models(name);
    let mut settings = Settings::default();
    settings.models.model_name = "m".into();
    settings.models.model_base_path = Some(root.join("m"));
    settings.models.file_system_poll_wait_seconds = 0;
    settings.models.model_version_policy = crate::model_config::DefaultVersionPolicy::All;
    let (service, _batcher) = build_service(&settings, Arc::new(MockLoader::default())).unwrap();
    (Arc::new(ServerState::new(&settings, service).unwrap()), root)
}
