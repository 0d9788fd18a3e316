//! TF Serving parses request JSON with rapidjson's `kParseNanAndInfFlag`, so
//! bare `NaN`, `Infinity` and `-Infinity` are numbers there. serde_json has no
//! such mode: this pass quotes those tokens (outside strings) before parsing,
//! and the decoders already read the quoted forms as non-finite floats.

use std::borrow::Cow;

const TOKENS: [&[u8]; 3] = [b"-Infinity", b"Infinity", b"NaN"];

/// The body with every bare non-finite token quoted; borrowed (no copy) when
/// there is none, which is the common case.
pub fn quote_bare_tokens(body: &[u8]) -> Cow<'_, [u8]> {
    // Every token holds an `N` or an `I`; most bodies have neither, and a
    // vectorised search says so without walking them byte by byte.
    if memchr::memchr2(b'N', b'I', body).is_none() {
        return Cow::Borrowed(body);
    }
    let Some(first) = find_bare_token(body, 0) else {
        return Cow::Borrowed(body);
    };
    let mut out = Vec::with_capacity(body.len() + 16);
    let mut copied = 0;
    let mut next = Some(first);
    while let Some((at, len)) = next {
        out.extend_from_slice(&body[copied..at]);
        out.push(b'"');
        out.extend_from_slice(&body[at..at + len]);
        out.push(b'"');
        copied = at + len;
        next = find_bare_token(body, copied);
    }
    out.extend_from_slice(&body[copied..]);
    Cow::Owned(out)
}

/// The position and length of the next bare token at or after `from`, which
/// must lie outside any string.
fn find_bare_token(body: &[u8], from: usize) -> Option<(usize, usize)> {
    let mut in_string = false;
    let mut i = from;
    while i < body.len() {
        let byte = body[i];
        if in_string {
            match byte {
                b'\\' => i += 1,
                b'"' => in_string = false,
                _ => {}
            }
        } else {
            match byte {
                b'"' => in_string = true,
                b'N' | b'I' | b'-' => {
                    if let Some(token) = TOKENS.iter().find(|t| body[i..].starts_with(t)) {
                        let ends_token = body
                            .get(i + token.len())
                            .is_none_or(|b| !b.is_ascii_alphanumeric() && *b != b'_');
                        let starts_token = i == 0 || !body[i - 1].is_ascii_alphanumeric();
                        if ends_token && starts_token {
                            return Some((i, token.len()));
                        }
                    }
                }
                _ => {}
            }
        }
        i += 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn quoted(body: &str) -> String {
        String::from_utf8(quote_bare_tokens(body.as_bytes()).into_owned()).unwrap()
    }

    #[test]
    fn quotes_bare_tokens_outside_strings() {
        assert_eq!(
            quoted(r#"{"instances": [NaN, Infinity, -Infinity, 1]}"#),
            r#"{"instances": ["NaN", "Infinity", "-Infinity", 1]}"#
        );
        assert_eq!(quoted("[NaN]"), r#"["NaN"]"#);
        assert_eq!(quoted(r#"{"x":-Infinity}"#), r#"{"x":"-Infinity"}"#);
    }

    #[test]
    fn leaves_strings_and_other_text_alone() {
        let body = r#"{"s": "NaN \" Infinity", "t": ["-Infinity"], "n": -1.5e3}"#;
        assert!(matches!(quote_bare_tokens(body.as_bytes()), Cow::Borrowed(_)));
        assert_eq!(quoted("[NaNa]"), "[NaNa]");
        assert_eq!(quoted(r#"["a\\", NaN]"#), r#"["a\\", "NaN"]"#);
    }
}
