//! A panic while handling a request becomes that request's 500, naming its
//! request id; it is logged and counted (`tfserve_panics_total`), and the
//! HTTP worker and its other connections carry on.

use actix_web::http::StatusCode;
use actix_web::{HttpResponse, ResponseError};

use crate::error::error_response;
use crate::server::lifecycle::Panicked;

/// A panicked request's 500, with its id in the header as well as the message.
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
struct PanicAnswer(Panicked);

impl ResponseError for PanicAnswer {
    fn status_code(&self) -> StatusCode {
        StatusCode::INTERNAL_SERVER_ERROR
    }

    fn error_response(&self) -> HttpResponse {
        let mut response = error_response(self.status_code(), &self.to_string());
        if let Ok(id) = actix_web::http::header::HeaderValue::from_str(&self.0.id) {
            response.headers_mut().insert(super::middleware::REQUEST_ID, id);
        }
        response
    }
}

/// The error a panicking request answers with (the lifecycle logged and
/// counted the panic; actix turns the error into the response, as the
/// request itself cannot be kept for that: routing needs it to itself).
pub fn answer(panicked: Panicked) -> actix_web::Error {
    PanicAnswer(panicked).into()
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
            // Other tests' panics count in the same process-wide counter.
            assert!(crate::metrics::METRICS.panics.with_label_values(&["request"]).get() > before);
            let fine = actix_test::call_service(&app, actix_test::TestRequest::get().uri("/fine").to_request()).await;
            assert_eq!(fine.status(), 200);
        });
    }
}
