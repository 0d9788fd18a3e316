//! The front against actix-web: what it takes, how it reads headers, how it
//! writes answers.

use std::rc::Rc;

use super::parse::{header_text, HEAD_LIMIT};
use super::*;
use crate::dialects::tfs::Verb;
use crate::service::VersionSelector;

fn taken(request: &[u8]) -> Option<Rc<Head>> {
    match parse(request, BODY_LIMIT) {
        Parsed::Take(head) => Some(head),
        _ => None,
    }
}

#[test]
fn a_repeated_head_is_taken_without_parsing_it_again() {
    let mut last = LastHead::default();
    let first = b"POST /v1/models/half:predict HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n[]";
    let Parsed::Take(head) = last.parse(first, BODY_LIMIT) else {
        panic!("taken")
    };
    let Parsed::Take(again) = last.parse(first, BODY_LIMIT) else {
        panic!("taken again")
    };
    assert!(Rc::ptr_eq(&head, &again), "the same bytes reuse the parsed head");
    // Another body length, path or header is another head.
    let longer = b"POST /v1/models/half:predict HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\n[1]";
    let Parsed::Take(other) = last.parse(longer, BODY_LIMIT) else {
        panic!("taken")
    };
    assert!(!Rc::ptr_eq(&head, &other));
    assert_eq!(other.body, 3);
    let renamed = b"POST /v1/models/hal:predict HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\n[1]";
    let Parsed::Take(renamed) = last.parse(renamed, BODY_LIMIT) else {
        panic!("taken")
    };
    assert_eq!(renamed.model, "hal");
    // Part of the last head is still a partial one, and a head the front
    // leaves to actix-web is left to it whatever came before.
    assert!(matches!(last.parse(&longer[..30], BODY_LIMIT), Parsed::Partial));
    let handed =
        b"POST /v1/models/hal:predict HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nExpect: 100-continue\r\n\r\n";
    assert!(matches!(last.parse(handed, BODY_LIMIT), Parsed::HandOff));
}

#[test]
fn takes_tf_serving_inference_posts_only() {
    let head = taken(b"POST /v1/models/half/versions/2:predict HTTP/1.1\r\nHost: x\r\nContent-Length: 20\r\nX-Request-Id: abc\r\nConnection: keep-alive\r\n\r\n").unwrap();
    assert_eq!(
        (head.model.as_str(), &head.selector, &head.verb),
        ("half", &VersionSelector::Specific(2), &Verb::Predict)
    );
    assert_eq!(head.body, 20);
    assert!(!head.close);
    let close =
        taken(b"POST /V1/Models/m:Regress HTTP/1.1\r\nhost: x\r\nconnection: Close\r\ncontent-length: 0\r\n\r\n")
            .unwrap();
    assert!(close.close);
    assert_eq!(close.verb, Verb::Regress);
    for other in [
        &b"GET /v1/models/half HTTP/1.1\r\n\r\n"[..],
        b"POST /v1/models/half:predict HTTP/1.0\r\nContent-Length: 2\r\n\r\n",
        b"POST /v1/models/half:predict?x=1 HTTP/1.1\r\nContent-Length: 2\r\n\r\n",
        b"POST /v1/models/half:explain HTTP/1.1\r\nContent-Length: 2\r\n\r\n",
        b"POST /v2/models/half/infer HTTP/1.1\r\nContent-Length: 2\r\n\r\n",
        b"POST /v1/models/half:predict HTTP/1.1\r\n\r\n",
        b"POST /v1/models/half:predict HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\n",
        b"POST /v1/models/half:predict HTTP/1.1\r\nContent-Length: +2\r\n\r\n",
        b"POST /v1/models/half:predict HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
        b"POST /v1/models/half:predict HTTP/1.1\r\nContent-Length: 2\r\nContent-Encoding: gzip\r\n\r\n",
        b"POST /v1/models/half:predict HTTP/1.1\r\nContent-Length: 2\r\nExpect: 100-continue\r\n\r\n",
        b"POST /v1/models/half:predict HTTP/1.1\r\nContent-Length: 2\r\nConnection: upgrade\r\n\r\n",
        b"POST /v1/models/half:predict HTTP/1.1\r\nContent-Length: 65537\r\n\r\n",
        b"BREW /v1/models/half:predict HTTP/1.1\r\n\r\n",
        b"POST /v1/models/ha<lf:predict HTTP/1.1\r\nContent-Length: 2\r\n\r\n",
        "POST /v1/models/h\u{e9}:predict HTTP/1.1\r\nContent-Length: 2\r\n\r\n".as_bytes(),
        b"POST /v1/models/half:predict HTTP/1.1\r\nHost: a\r\nHost: b\r\nContent-Length: 2\r\n\r\n",
        b"POST /v1/models/half:predict HTTP/1.1\r\nContent-Length: 2\r\n\r\n[]",
        b"\x00garbage\r\n\r\n",
    ] {
        assert!(
            matches!(parse(other, BODY_LIMIT), Parsed::HandOff),
            "{}",
            String::from_utf8_lossy(other)
        );
    }
    assert!(matches!(
        parse(b"POST /v1/models/half:pre", BODY_LIMIT),
        Parsed::Partial
    ));
    assert!(matches!(
        parse(&vec![b'a'; HEAD_LIMIT + 1], BODY_LIMIT),
        Parsed::HandOff
    ));
}

#[test]
fn header_values_read_as_actix_reads_them() {
    assert_eq!(header_text(b"abc-1"), Some("abc-1"));
    assert_eq!(header_text(b"a\tb"), Some("a\tb"));
    assert_eq!(header_text("é".as_bytes()), None);
    assert_eq!(header_text(b"a\x7fb"), None);
}

#[test]
fn responses_are_written_as_actix_writes_them() {
    actix_web::rt::System::new().block_on(async {
        let mut out = Vec::new();
        let response = HttpResponse::Ok()
            .content_type("application/json")
            .insert_header(("x-batch-size", "3"))
            .body("{}");
        write_response(response, true, &mut out).await;
        let text = String::from_utf8(out).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert_eq!(body, "{}");
        let lines: Vec<&str> = head.split("\r\n").collect();
        assert_eq!(
            lines[..3],
            ["HTTP/1.1 200 OK", "content-length: 2", "connection: close"]
        );
        assert!(lines.contains(&"content-type: application/json"));
        assert!(lines.contains(&"x-batch-size: 3"));
        assert!(lines.last().unwrap().starts_with("date: "));
    });
}
