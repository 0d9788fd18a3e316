//! Reloading `--model_config_file` on request (tfserve's management API):
//! the one management step that needs the server's settings. Every other
//! load and unload is a service method (`service::manage`).

use super::ServerState;
use crate::error::ApiError;
use crate::model_config;
use crate::service::ManageError;

/// Reads `--model_config_file` again and serves what it lists now.
pub async fn reload_config_file(state: &ServerState) -> Result<Vec<String>, ApiError> {
    let file = state.config_file.clone().ok_or(ManageError::NoConfigFile)?;
    let sources = model_config::load(&file).map_err(|e| ApiError::BadRequest(e.to_string()))?;
    state.service.replace_all(sources).await
}
