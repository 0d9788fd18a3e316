//! A panic while handling a request becomes that request's 500, naming its
//! request id; it is logged and counted (`tfserve_panics_total`), and the
//! HTTP worker and its other connections carry on.

use actix_web::http::StatusCode;
use actix_web::{HttpResponse, ResponseError};

use crate::error::error_response;
use crate::status::panic_message;

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
            response.headers_mut().insert(super::middleware::REQUEST_ID, id);
        }
        response
    }
}

/// The error a panicking request answers with (actix turns it into the
/// response: the request itself cannot be kept for that, as routing needs it
/// to itself); logs and counts the panic.
pub fn contained(
    id: &crate::server::RequestId,
    method: &actix_web::http::Method,
    uri: &actix_web::http::Uri,
    panic: &(dyn std::any::Any + Send),
) -> actix_web::Error {
    let message = panic_message(panic);
    log::error!("[{}] {method} {} panicked: {message}", id.0, uri.path());
    crate::metrics::METRICS.panics.with_label_values(&["request"]).inc();
    Panicked {
        id: id.0.to_string(),
        message,
    }
    .into()
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
                    .wrap(actix_web::middleware::from_fn(crate::http::middleware::assign))
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
