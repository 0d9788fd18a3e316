//! The transport-neutral server core: the state both transports share
//! ([`ServerState`]: the service, limits, auth, the drain), admission, auth,
//! request ids, one request's lifecycle, the drain, model management, and start-up. `http/` and
//! `grpc/` sit on it; nothing here knows either.

pub mod access_log;
pub mod admission;
pub mod auth;
pub mod drain;
pub mod lifecycle;
pub mod listen;
pub mod memory;
pub mod models;
pub mod request_id;
pub mod start;
#[cfg(test)]
pub mod testing;

pub use crate::service::{ByteBudget, BytesBorrowed, BytesHeld};
pub use access_log::AccessLog;
pub use admission::{Admitted, InFlight};
pub use auth::BasicAuth;
pub use drain::{Drain, Phase};
pub use lifecycle::Lifecycle;
pub use request_id::RequestId;
pub use start::{build_service, model_sources, StartError};

use std::time::Duration;

use crate::service::Service;
use crate::settings::Settings;

pub struct ServerState {
    pub service: Service,
    pub max_request_bytes: usize,
    /// The bound on POST requests being handled at once.
    pub in_flight: InFlight,
    /// The model config file, for reloads over HTTP.
    pub config_file: Option<std::path::PathBuf>,
    /// Basic-auth credentials every route but liveness requires, when set.
    pub auth: Option<BasicAuth>,
    /// Set on SIGTERM: readiness fails and connections close after their response.
    pub drain: Drain,
    /// How long a request body may take to arrive (`--client_body_timeout_ms`).
    pub body_timeout: std::time::Duration,
    /// Another path the metrics answer on (`--monitoring_config_file`).
    pub metrics_path: Option<String>,
    /// Which requests get an access line (`--access_log_sampling_rate`).
    pub access_log: AccessLog,
    /// Vertex AI's health and predict routes (`AIP_HEALTH_ROUTE`, `AIP_PREDICT_ROUTE`).
    pub vertex: crate::settings::VertexRoutes,
}

impl ServerState {
    /// The state over a service, with the limits, auth and paths the settings give.
    pub fn new(settings: &Settings, service: Service) -> Result<ServerState, StartError> {
        let security = &settings.security;
        let auth = match (security.enable_auth, &security.auth_username, &security.auth_password) {
            (true, Some(user), Some(password)) => Some(BasicAuth::new(user, &password.0)),
            _ => None,
        };
        Ok(ServerState {
            service: service.with_body_budget(settings.http.max_in_flight_bytes),
            max_request_bytes: settings.http.max_request_bytes,
            in_flight: InFlight::new(settings.http.max_in_flight_requests),
            config_file: settings.models.model_config_file.clone(),
            auth,
            drain: Drain::default(),
            body_timeout: Duration::from_millis(settings.http.client_body_timeout_ms),
            metrics_path: settings.metrics_path()?,
            access_log: AccessLog::new(settings.logging.access_log_sampling_rate),
            vertex: settings.http.vertex_routes()?,
        })
    }

    /// Ready for traffic: every model loaded and the server not draining.
    pub fn ready(&self) -> Result<(), String> {
        if self.drain.is_draining() {
            return Err("the server is shutting down".into());
        }
        self.service.ready()
    }
}
