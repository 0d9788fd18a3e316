//! Answers written as actix-web's HTTP/1.1 encoder writes them.

use std::time::SystemTime;

use actix_web::body::MessageBody;
use actix_web::http::header::{CONNECTION, CONTENT_LENGTH, CONTENT_TYPE, DATE, TRANSFER_ENCODING};
use actix_web::http::StatusCode;
use actix_web::HttpResponse;

use crate::call::http::Answer;
use crate::http::middleware::REQUEST_ID;

/// Writes an inference call's answer as [`write_response`] writes the
/// response actix-web's route makes of it, without making one.
pub(super) fn write_answer(answer: &Answer, request_id: &str, close: bool, out: &mut Vec<u8>) {
    write_status(answer.status, answer.body.len(), close, out);
    let mut header = |name: &str, value: &[u8]| {
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value);
        out.extend_from_slice(b"\r\n");
    };
    header(CONTENT_TYPE.as_str(), answer.content_type.as_bytes());
    answer.write_headers(&mut header);
    header(REQUEST_ID.as_str(), request_id.as_bytes());
    out.extend_from_slice(b"date: ");
    write_date(out);
    out.extend_from_slice(b"\r\n\r\n");
    out.extend_from_slice(&answer.body);
}

/// The status line, `content-length` and, when closing, `connection: close`.
fn write_status(status: StatusCode, length: usize, close: bool, out: &mut Vec<u8>) {
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(status.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(status.canonical_reason().unwrap_or("<unknown status code>").as_bytes());
    out.extend_from_slice(b"\r\ncontent-length: ");
    out.extend_from_slice(itoa::Buffer::new().format(length).as_bytes());
    out.extend_from_slice(b"\r\n");
    if close {
        out.extend_from_slice(b"connection: close\r\n");
    }
}

/// Writes a response as actix-web's HTTP/1.1 encoder does: the status line,
/// `content-length`, `connection: close` when closing, the headers, `date`.
pub(super) async fn write_response(response: HttpResponse, close: bool, out: &mut Vec<u8>) {
    let (response, body) = response.into_parts();
    let body = match body.try_into_bytes() {
        Ok(bytes) => bytes,
        Err(body) => actix_web::body::to_bytes(body).await.unwrap_or_default(),
    };
    write_status(response.status(), body.len(), close, out);
    let mut dated = false;
    for (name, value) in response.headers() {
        match *name {
            CONNECTION | CONTENT_LENGTH | TRANSFER_ENCODING => continue,
            DATE => dated = true,
            _ => {}
        }
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    if !dated {
        out.extend_from_slice(b"date: ");
        write_date(out);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(&body);
}

/// Today's `Date` value, formatted once a second per worker thread.
pub(super) fn write_date(out: &mut Vec<u8>) {
    thread_local! {
        static DATE: std::cell::RefCell<(u64, String)> = const { std::cell::RefCell::new((u64::MAX, String::new())) };
    }
    let now = SystemTime::now();
    let second = now
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default();
    DATE.with_borrow_mut(|(cached, text)| {
        if *cached != second {
            *cached = second;
            *text = httpdate::fmt_http_date(now);
        }
        out.extend_from_slice(text.as_bytes());
    });
}
