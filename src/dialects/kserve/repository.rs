//! The model repository extension: an index of every model version, and
//! loads and unloads by name. A model loads from `<root>/<name>` under the
//! first of `--model_roots` that has it, the way Triton loads from its repository.

use super::OipError;
use crate::error::ApiError;
use crate::model_config::{ModelSource, VersionPolicy};
use crate::server::ServerState;
use crate::service::Service;
use crate::service::VersionState;

pub struct IndexEntry {
    pub name: String,
    pub version: String,
    pub state: &'static str,
    pub reason: String,
}

/// Every model version and its state, in v2's words (READY, LOADING, ...).
pub fn index(service: &Service, ready_only: bool) -> Vec<IndexEntry> {
    let mut entries = Vec::new();
    for model in service.models() {
        for version in &model.versions {
            let state = match version.state {
                VersionState::Available => "READY",
                VersionState::Start | VersionState::Loading => "LOADING",
                VersionState::Unloading => "UNLOADING",
                VersionState::End => "UNAVAILABLE",
            };
            if ready_only && state != "READY" {
                continue;
            }
            entries.push(IndexEntry {
                name: model.name.clone(),
                version: version.version.to_string(),
                state,
                reason: version.error.clone().unwrap_or_default(),
            });
        }
    }
    entries
}

/// Loads a model by name from the model roots; one already served re-reads
/// its folder (KServe's model agent calls load again after a new download).
pub async fn load(state: &ServerState, model: &str) -> Result<(), ApiError> {
    if model.is_empty() || model.contains(['/', '\\']) || model == ".." || model == "." {
        return Err(OipError::InvalidModelName(model.to_string()).into());
    }
    if state.service.is_served(model) {
        return state.service.refresh(model.to_string()).await;
    }
    let Some(dir) = state
        .service
        .model_roots()
        .iter()
        .map(|root| root.join(model))
        .find(|d| d.is_dir())
    else {
        return Err(OipError::NotInRepository(model.to_string()).into());
    };
    let base_path = state.service.confine(&dir.display().to_string(), model)?;
    state
        .service
        .load(ModelSource::with_policy(model, base_path, VersionPolicy::Latest(1)))
        .await
}

pub async fn unload(state: &ServerState, model: &str) -> Result<(), ApiError> {
    if !state.service.is_served(model) {
        return Err(OipError::NotLoaded(model.to_string()).into());
    }
    state.service.unload(model.to_string()).await
}
