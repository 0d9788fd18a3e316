//! An object store failure told in one line: what the store said (its status,
//! error code and message) or why it could not be reached, without the
//! client's nested error text.

/// The longest cause quoted from a store's answer.
const MAX_CAUSE: usize = 300;

pub fn describe(err: &object_store::Error) -> String {
    use object_store::Error as E;
    let kind = match err {
        E::NotFound { .. } => Some("not found"),
        E::PermissionDenied { .. } => Some("access denied"),
        E::Unauthenticated { .. } => Some("the credentials were refused"),
        E::UnknownConfigurationKey { .. } => Some("a variable names no setting"),
        _ => None,
    };
    let mut innermost: &dyn std::error::Error = err;
    let mut chain = vec![err.to_string()];
    while let Some(source) = innermost.source() {
        chain.push(source.to_string());
        innermost = source;
    }
    let text = chain.join(" | ");
    let said = answer(&text).or_else(|| unreachable(&text));
    let detail = said.unwrap_or_else(|| shorten(&innermost.to_string()));
    match kind {
        Some(kind) if !detail.is_empty() => format!("{kind} ({detail})"),
        Some(kind) => kind.to_string(),
        None => detail,
    }
}

/// A store's error answer: its HTTP status, and the code and message of an
/// XML (S3, Azure, GCS's XML API) or JSON (GCS) error body.
fn answer(text: &str) -> Option<String> {
    let status = text
        .find("status code: ")
        .map(|at| &text[at + "status code: ".len()..])
        .map(|rest| rest.split([',', ':', '|']).next().unwrap_or(rest).trim().to_string())?;
    let element = |name: &str| {
        let open = format!("<{name}>");
        let start = text.find(&open)? + open.len();
        let end = text[start..].find(&format!("</{name}>"))?;
        Some(text[start..start + end].trim().to_string())
    };
    let json_message = || {
        let at = text.find("\"message\"")?;
        let rest = text[at + "\"message\"".len()..]
            .trim_start()
            .strip_prefix(':')?
            .trim_start();
        let rest = rest.strip_prefix('"')?;
        Some(rest[..rest.find('"')?].to_string())
    };
    let said: Vec<String> = [element("Code"), element("Message").or_else(json_message)]
        .into_iter()
        .flatten()
        .filter(|s| !s.is_empty())
        .map(|s| shorten(s.lines().next().unwrap_or_default()))
        .collect();
    Some(match said.is_empty() {
        true => format!("the store answered {status}"),
        false => format!("the store answered {status}: {}", said.join(": ")),
    })
}

/// Why no answer came: the connection's failure as the system named it.
fn unreachable(text: &str) -> Option<String> {
    let lower = text.to_ascii_lowercase();
    let causes = [
        ("connection refused", "connection refused"),
        ("dns error", "the host name does not resolve"),
        ("failed to lookup address", "the host name does not resolve"),
        ("timed out", "timed out"),
        ("certificate", "TLS certificate not trusted"),
        ("connection reset", "connection reset"),
    ];
    let cause = causes.iter().find(|(needle, _)| lower.contains(needle))?.1;
    Some(format!("cannot reach the store: {cause}"))
}

fn shorten(text: &str) -> String {
    let line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    match line.char_indices().nth(MAX_CAUSE) {
        Some((at, _)) => format!("{}…", &line[..at]),
        None => line,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_answers_in_one_line() {
        let s3 = "Error performing list | Server returned non-2XX status code: 404 Not Found: <?xml version=\"1.0\"?><Error><Code>NoSuchBucket</Code><Message>The specified bucket does not exist</Message></Error>";
        assert_eq!(
            answer(s3).unwrap(),
            "the store answered 404 Not Found: NoSuchBucket: The specified bucket does not exist"
        );
        let gcs = "status code: 403 Forbidden: {\"error\": {\"code\": 403, \"message\": \"no access\"}}";
        assert_eq!(answer(gcs).unwrap(), "the store answered 403 Forbidden: no access");
        assert_eq!(
            unreachable("error sending request | tcp connect error: Connection refused (os error 111)").unwrap(),
            "cannot reach the store: connection refused"
        );
    }
}
