//! `grpc.health.v1.Health` as the gRPC health protocol specifies it: Check
//! answers NOT_FOUND for a service nobody registered, and Watch on such a
//! service sends SERVICE_UNKNOWN and keeps the stream open, sending the
//! service's status if it appears later (tonic-health ends that stream instead).

use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::Arc;

use tokio::sync::watch;
use tokio_stream::{Stream, StreamExt};
use tonic::{Request, Response, Status};
use tonic_health::pb::health_check_response::ServingStatus as Wire;
use tonic_health::pb::health_server::{Health, HealthServer};
use tonic_health::pb::{HealthCheckRequest, HealthCheckResponse};

pub use tonic_health::ServingStatus;

/// The statuses by service name, shared by every call and the reporter.
#[derive(Clone)]
pub struct HealthService {
    statuses: Arc<watch::Sender<BTreeMap<String, Wire>>>,
}

impl HealthService {
    pub fn new() -> HealthService {
        HealthService {
            statuses: Arc::new(watch::Sender::new(BTreeMap::new())),
        }
    }

    pub fn server(&self) -> HealthServer<HealthService> {
        HealthServer::new(self.clone())
    }

    pub fn set_status(&self, service: &str, status: ServingStatus) {
        let wire = match status {
            ServingStatus::Unknown => Wire::Unknown,
            ServingStatus::Serving => Wire::Serving,
            ServingStatus::NotServing => Wire::NotServing,
        };
        self.statuses
            .send_if_modified(|statuses| statuses.insert(service.to_string(), wire) != Some(wire));
    }
}

fn answer(status: Wire) -> HealthCheckResponse {
    HealthCheckResponse { status: status as i32 }
}

#[tonic::async_trait]
impl Health for HealthService {
    async fn check(&self, request: Request<HealthCheckRequest>) -> Result<Response<HealthCheckResponse>, Status> {
        let service = request.into_inner().service;
        match self.statuses.borrow().get(&service) {
            Some(status) => Ok(Response::new(answer(*status))),
            None => Err(Status::not_found(format!("unknown service {service:?}"))),
        }
    }

    type WatchStream = Pin<Box<dyn Stream<Item = Result<HealthCheckResponse, Status>> + Send>>;

    async fn watch(&self, request: Request<HealthCheckRequest>) -> Result<Response<Self::WatchStream>, Status> {
        let service = request.into_inner().service;
        let mut last = None;
        // The current status first, then each change of this service's status.
        let updates = tokio_stream::wrappers::WatchStream::new(self.statuses.subscribe()).filter_map(
            move |statuses: BTreeMap<String, Wire>| {
                let status = statuses.get(&service).copied().unwrap_or(Wire::ServiceUnknown);
                (last.replace(status) != Some(status)).then(|| Ok(answer(status)))
            },
        );
        Ok(Response::new(Box::pin(updates)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn watch_on_an_unknown_service_stays_open_and_reports_it_once_known() {
        let health = HealthService::new();
        health.set_status("", ServingStatus::Serving);
        let request = || {
            Request::new(HealthCheckRequest {
                service: "later".into(),
            })
        };
        let error = health.check(request()).await.unwrap_err();
        assert_eq!(error.code(), tonic::Code::NotFound);
        let mut stream = health.watch(request()).await.unwrap().into_inner();
        let first = stream.next().await.unwrap().unwrap();
        assert_eq!(first.status, Wire::ServiceUnknown as i32);
        // Another service changing sends nothing on this stream.
        health.set_status("other", ServingStatus::Serving);
        health.set_status("later", ServingStatus::NotServing);
        let next = stream.next().await.unwrap().unwrap();
        assert_eq!(next.status, Wire::NotServing as i32);
        health.set_status("later", ServingStatus::Serving);
        assert_eq!(stream.next().await.unwrap().unwrap().status, Wire::Serving as i32);
        let checked = health.check(request()).await.unwrap().into_inner();
        assert_eq!(checked.status, Wire::Serving as i32);
    }
}
