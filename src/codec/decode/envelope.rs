//! A predict body's envelope: the signature name and where the `instances` or
//! `inputs` payload lies. Plain envelopes are scanned without parsing the
//! payload twice; anything unusual (escaped keys, duplicate fields, a
//! malformed object) takes serde_json's parse, which owns the errors.

use serde::de::IgnoredAny;
use serde::Deserialize;
use serde_json::value::RawValue;

use super::super::CodecError;

/// The parts of a predict body the decoders need, payload not yet decoded.
pub(super) struct Parts<Raw> {
    pub(super) signature_name: Option<String>,
    pub(super) instances: Option<Raw>,
    pub(super) inputs: Option<Raw>,
}

#[derive(Deserialize)]
struct SerdeParts<'a> {
    #[serde(default)]
    signature_name: Option<String>,
    #[serde(borrow, default)]
    instances: Option<&'a RawValue>,
    #[serde(borrow, default)]
    inputs: Option<&'a RawValue>,
}

/// serde_json's reading of a body: every JSON error, worded as it words them.
/// The body is checked as UTF-8 first: serde_json skips the strings of keys
/// it ignores without looking at their bytes, and JSON is UTF-8 throughout.
pub(super) fn parse(body: &[u8]) -> Result<Parts<&str>, CodecError> {
    let text = std::str::from_utf8(body).map_err(|e| not_utf8(body, e.valid_up_to()))?;
    let parts: SerdeParts<'_> = serde_json::from_str(text).map_err(|e| CodecError::json_parse(&e))?;
    Ok(Parts {
        signature_name: parts.signature_name,
        instances: parts.instances.map(RawValue::get),
        inputs: parts.inputs.map(RawValue::get),
    })
}

/// serde_json's words for a byte that is not UTF-8, at its line and column.
fn not_utf8(body: &[u8], at: usize) -> CodecError {
    let line = 1 + memchr::memchr_iter(b'\n', &body[..at]).count();
    let column = 1 + at - memchr::memrchr(b'\n', &body[..at]).map_or(0, |newline| newline + 1);
    CodecError::JsonParse(format!("invalid unicode code point at line {line} column {column}"))
}

/// The same parts found by scanning: `None` wherever the answer is not plain,
/// and for any body serde_json would refuse but for the payload itself, which
/// the decoders check as they read it. A payload whose brackets close just
/// before the body's last `}` is taken to run to there without walking it:
/// the dense decoder reads it whole or declines, and a body it reads whole
/// has nothing after the payload.
// Kept whole: one forward scan over the body's top-level keys; the position is its only state.
pub(super) fn scan(body: &[u8]) -> Option<Parts<&[u8]>> {
    let mut at = skip_space(body, 0);
    if body.get(at) != Some(&b'{') {
        return None;
    }
    let mut parts = Parts {
        signature_name: None,
        instances: None,
        inputs: None,
    };
    let mut seen_signature = false;
    at = skip_space(body, at + 1);
    if body.get(at) == Some(&b'}') {
        return end(body, at + 1, parts);
    }
    loop {
        let (key, after_key) = plain_string(body, at)?;
        std::str::from_utf8(key).ok()?;
        at = skip_space(body, after_key);
        if body.get(at) != Some(&b':') {
            return None;
        }
        let start = skip_space(body, at + 1);
        if matches!(key, b"instances" | b"inputs") {
            if let Some(last) = last_value_end(body, start).filter(|&last| hides_no_signature(&body[start..last])) {
                let slot = if key == b"instances" {
                    &mut parts.instances
                } else {
                    &mut parts.inputs
                };
                if slot.replace(&body[start..last]).is_some() {
                    return None;
                }
                return Some(parts);
            }
        }
        let stop = value_end(body, start)?;
        let value = &body[start..stop];
        match key {
            b"signature_name" => {
                if std::mem::replace(&mut seen_signature, true) {
                    return None;
                }
                parts.signature_name = match value {
                    b"null" => None,
                    _ => {
                        let (name, after) = plain_string(value, 0)?;
                        (after == value.len()).then_some(())?;
                        Some(std::str::from_utf8(name).ok()?.to_string())
                    }
                };
            }
            b"instances" | b"inputs" => {
                let slot = if key == b"instances" {
                    &mut parts.instances
                } else {
                    &mut parts.inputs
                };
                if slot.is_some() {
                    return None;
                }
                // A `null` payload reads as absent, as serde reads an Option.
                if value != b"null" {
                    *slot = Some(value);
                }
            }
            // Other keys are ignored, as serde ignores them, once known to be
            // JSON: UTF-8 (which serde does not check in what it ignores) and well formed.
            _ => {
                serde_json::from_str::<IgnoredAny>(std::str::from_utf8(value).ok()?).ok()?;
            }
        }
        at = skip_space(body, stop);
        match body.get(at)? {
            b',' => at = skip_space(body, at + 1),
            b'}' => return end(body, at + 1, parts),
            _ => return None,
        }
    }
}

fn end<'a>(body: &[u8], at: usize, parts: Parts<&'a [u8]>) -> Option<Parts<&'a [u8]>> {
    (skip_space(body, at) == body.len()).then_some(parts)
}

/// Whether a tail taken for the payload cannot hold a `signature_name` key
/// (written plainly or with escapes): if the payload turns out to end
/// earlier, the name the caller resolved from the scan is still the body's.
fn hides_no_signature(tail: &[u8]) -> bool {
    memchr::memchr(b'\\', tail).is_none() && memchr::memmem::find(tail, b"signature_name").is_none()
}

/// Where a list or object starting at `start` ends if it is the body's last
/// value: just after the bracket, of its kind, that precedes the final `}`.
fn last_value_end(body: &[u8], start: usize) -> Option<usize> {
    let closer = match body.get(start)? {
        b'[' => b']',
        b'{' => b'}',
        _ => return None,
    };
    let mut end = body.len();
    while end > start && matches!(body[end - 1], b' ' | b'\n' | b'\r' | b'\t') {
        end -= 1;
    }
    if end <= start + 1 || body[end - 1] != b'}' {
        return None;
    }
    end -= 1;
    while end > start && matches!(body[end - 1], b' ' | b'\n' | b'\r' | b'\t') {
        end -= 1;
    }
    (end > start + 1 && body[end - 1] == closer).then_some(end)
}

fn skip_space(body: &[u8], mut at: usize) -> usize {
    while let Some(b' ' | b'\n' | b'\r' | b'\t') = body.get(at) {
        at += 1;
    }
    at
}

/// A string without escapes at `at`: its bytes and the position after it.
fn plain_string(body: &[u8], at: usize) -> Option<(&[u8], usize)> {
    if body.get(at) != Some(&b'"') {
        return None;
    }
    let length = memchr::memchr2(b'"', b'\\', &body[at + 1..])?;
    (body[at + 1 + length] == b'"').then(|| (&body[at + 1..at + 1 + length], at + length + 2))
}

/// The bytes that open or close a string or a bracket.
static STRUCTURAL: [bool; 256] = {
    let mut table = [false; 256];
    table[b'"' as usize] = true;
    table[b'[' as usize] = true;
    table[b']' as usize] = true;
    table[b'{' as usize] = true;
    table[b'}' as usize] = true;
    table
};

/// Where the JSON value starting at `at` ends, following brackets and strings
/// (escapes included) without checking what lies between them.
fn value_end(body: &[u8], at: usize) -> Option<usize> {
    let mut open: Vec<u8> = Vec::new();
    let mut i = at;
    loop {
        let byte = *body.get(i)?;
        match byte {
            b'"' => i = string_end(body, i)?,
            b'[' | b'{' => {
                open.push(byte);
                i += 1;
            }
            b']' | b'}' => {
                // The enclosing object's end: a scalar value stops here.
                if open.is_empty() {
                    return (i > at).then_some(i);
                }
                let opener = if byte == b']' { b'[' } else { b'{' };
                if open.pop() != Some(opener) {
                    return None;
                }
                i += 1;
            }
            b',' | b' ' | b'\n' | b'\r' | b'\t' if open.is_empty() => return (i > at).then_some(i),
            _ if open.is_empty() => i += 1,
            // Inside brackets only brackets and strings matter: numbers,
            // commas and spaces, nearly all of a tensor, go by in a tight loop.
            _ => {
                i += 1;
                while body.get(i).is_some_and(|b| !STRUCTURAL[usize::from(*b)]) {
                    i += 1;
                }
            }
        }
        if open.is_empty() && i > at && matches!(body[at], b'"' | b'[' | b'{') {
            return Some(i);
        }
    }
}

/// The position after the string that opens at `at`.
fn string_end(body: &[u8], at: usize) -> Option<usize> {
    let mut i = at + 1;
    loop {
        i += memchr::memchr2(b'"', b'\\', body.get(i..)?)?;
        if body[i] == b'"' {
            return Some(i + 1);
        }
        i += 2;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(raw: Option<&[u8]>) -> Option<&str> {
        raw.map(|r| std::str::from_utf8(r).unwrap())
    }

    fn scanned(body: &str) -> Option<(Option<String>, Option<&str>, Option<&str>)> {
        scan(body.as_bytes()).map(|p| (p.signature_name, text(p.instances), text(p.inputs)))
    }

    #[test]
    fn finds_the_payload_and_the_signature_in_any_order() {
        assert_eq!(
            scanned(r#" {"instances": [[1, 2], [3, "a]\"b"]], "signature_name": "s"} "#),
            Some((Some("s".into()), Some(r#"[[1, 2], [3, "a]\"b"]]"#), None))
        );
        assert_eq!(
            scanned(r#"{"signature_name":null,"inputs":{"a":[1],"b":"x"},"extra":{"k":[true,null]},"n":1}"#),
            Some((None, None, Some(r#"{"a":[1],"b":"x"}"#)))
        );
        assert_eq!(scanned(r#"{"inputs": 3.5 }"#), Some((None, None, Some("3.5"))));
        assert_eq!(scanned(r#"{"instances": null}"#), Some((None, None, None)));
        assert_eq!(scanned("{}"), Some((None, None, None)));
        // The last value runs to the closing bracket, unwalked.
        assert_eq!(
            scanned(r#"{"signature_name": "s", "instances": [[1], [2]]  }"#),
            Some((Some("s".into()), Some("[[1], [2]]"), None))
        );
        assert_eq!(
            scanned(r#"{"instances": [1], "x": [2]}"#),
            Some((None, Some(r#"[1], "x": [2]"#), None))
        );
        // Unless a signature name could follow it: then the payload is walked.
        assert_eq!(
            scanned(r#"{"instances": [1], "signature_name": "s", "x": [2]}"#),
            Some((Some("s".into()), Some("[1]"), None))
        );
    }

    #[test]
    fn leaves_unusual_bodies_to_serde() {
        for body in [
            r#"{"instances": [1], "instances": 2}"#,
            r#"{"instan\u0063es": [1]}"#,
            r#"{"signature_name": "a\"b", "instances": [1]}"#,
            r#"{"signature_name": 3, "instances": [1]}"#,
            r#"{"instances": [1}"#,
            r#"{"instances": [[1}], "x": 1}"#,
            r#"{"instances": [1]"#,
            r#"{"instances": [1]} x"#,
            r#"{"instances": 1 x}"#,
            r#"{"instances": [1], "signature\u005fname": "s", "x": [2]}"#,
            r#"{"instances": 1, "other": [1,,2]}"#,
            r#"{"instances": [1],}"#,
            r#"[1]"#,
            "",
        ] {
            assert!(scanned(body).is_none(), "{body}");
        }
    }
}
