//! A panic while handling a request becomes that request's 500, naming its
//! request id; it is logged and counted (`tfserve_panics_total`), and the
//! HTTP worker and its other connections carry on.

use std::panic::AssertUnwindSafe;

use actix_web::body::MessageBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::StatusCode;
use actix_web::middleware::Next;
use actix_web::{HttpResponse, ResponseError};
use futures_util::FutureExt;

use crate::error::{error_response, panic_message};

/// A request whose handling panicked; actix answers it with this error's response.
#[derive(Debug, thiserror::Error)]
#[error("internal error while handling request {id}; the server logged it as a panic: {message}")]
struct Panicked {
    id: String,
    message: String,
}

impl ResponseError for Panicked {
    fn status_code(&self) -> StatusCode {
        StatusCode::INTERNAL_SERVER_ERROR
    }

    fn error_response(&self) -> HttpResponse {
        let mut response = error_response(self.status_code(), &self.to_string());
        if let Ok(id) = actix_web::http::header::HeaderValue::from_str(&self.id) {
            response.headers_mut().insert(super::request_id::HEADER, id);
        }
        response
    }
}

/// Middleware (`middleware::from_fn`), inside the one that assigns request
/// ids. The request cannot be kept for the answer (routing needs it to
/// itself), so a panic returns an error, which actix turns into the response.
pub async fn contain(
    req: ServiceRequest,
    next: Next<impl MessageBody>,
) -> Result<ServiceResponse<impl MessageBody>, actix_web::Error> {
    let id = super::request_id(req.request())
        .map(|id| id.0.to_string())
        .unwrap_or_default();
    let (method, path) = (req.method().clone(), req.path().to_string());
    match AssertUnwindSafe(next.call(req)).catch_unwind().await {
        Ok(result) => result,
        Err(panic) => {
            let message = panic_message(panic.as_ref());
            log::error!("[{id}] {method} {path} panicked: {message}");
            crate::metrics::METRICS.panics.with_label_values(&["request"]).inc();
            Err(Panicked { id, message }.into())
        }
    }
}

#[cfg(test)]
mod tests {
    use actix_web::test as actix_test;
    use actix_web::{web, App, HttpResponse};

    #[test]
    fn a_panicking_handler_answers_500_and_the_app_keeps_serving() {
        actix_web::rt::System::new().block_on(async {
            let app = actix_test::init_service(
                App::new()
                    .wrap(actix_web::middleware::from_fn(super::contain))
                    .wrap(actix_web::middleware::from_fn(crate::http::request_id::assign))
                    .route(
                        "/boom",
                        web::get().to(|| async {
                            if "boom".len() == 4 {
                                panic!("boom");
                            }
                            HttpResponse::Ok().finish()
                        }),
                    )
                    .route("/fine", web::get().to(|| async { HttpResponse::Ok().body("fine") })),
            )
            .await;
            let before = crate::metrics::METRICS.panics.with_label_values(&["request"]).get();
            let request = actix_test::TestRequest::get()
                .uri("/boom")
                .insert_header(("x-request-id", "req-42"))
                .to_request();
            let error = match actix_test::try_call_service(&app, request).await {
                Err(error) => error,
                Ok(response) => panic!("a panic answered {}", response.status()),
            };
            let response = error.error_response();
            assert_eq!(response.status(), 500);
            assert_eq!(response.headers().get("x-request-id").unwrap(), "req-42");
            let body = actix_web::body::to_bytes(response.into_body()).await.unwrap();
            let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
            let error = body["error"].as_str().unwrap_or_default();
            assert!(error.contains("req-42") && error.contains("boom"), "{error}");
            assert_eq!(
                crate::metrics::METRICS.panics.with_label_values(&["request"]).get(),
                before + 1
            );
            let fine = actix_test::call_service(&app, actix_test::TestRequest::get().uri("/fine").to_request()).await;
            assert_eq!(fine.status(), 200);
        });
    }
}
