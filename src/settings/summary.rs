//! The effective settings as start-up logs them: one line per group (the
//! logger indents them under its `effective settings:` line), each
//! `key=value` as the flag is spelled, unset ones left out, secrets masked.

use serde::Serialize;
use serde_json::Value;

use super::Settings;

impl Settings {
    /// One line per group (`http: rest_api_port=8501 ...`), for the log.
    pub fn summary(&self) -> String {
        let groups: [(&str, Value); 9] = [
            ("http", value_of(&self.http)),
            ("grpc", value_of(&self.grpc)),
            ("models", value_of(&self.models)),
            ("batching", value_of(&self.batching)),
            ("handlers", value_of(&self.handlers)),
            ("security", value_of(&self.security)),
            ("tensorflow", value_of(&self.tensorflow)),
            ("logging", value_of(&self.logging)),
            ("capture", value_of(&self.capture)),
        ];
        let lines: Vec<String> = groups
            .iter()
            .map(|(name, value)| format!("{name}: {}", line(value)))
            .collect();
        lines.join("\n")
    }
}

fn value_of(group: &impl Serialize) -> Value {
    serde_json::to_value(group).unwrap_or_else(|e| Value::String(format!("<{e}>")))
}

fn line(group: &Value) -> String {
    let Value::Object(fields) = group else {
        return group.to_string();
    };
    let mut parts = Vec::with_capacity(fields.len());
    for (key, value) in fields {
        let text = match value {
            Value::Null => continue,
            _ if is_secret(key) => "***".to_string(),
            Value::String(url) if key.ends_with("_url") => crate::capture::redacted_url(url),
            Value::String(text) if !text.is_empty() && !text.contains(char::is_whitespace) => text.clone(),
            other => other.to_string(),
        };
        parts.push(format!("{key}={text}"));
    }
    parts.join(" ")
}

/// Passwords; key files are paths, shown so an operator can check them.
fn is_secret(key: &str) -> bool {
    key.contains("password")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_per_group_with_secrets_masked() {
        let mut settings = Settings::default();
        settings.security.auth_password = Some(super::super::Secret("hunter2".into()));
        settings.capture.capture_cloudevents_url = Some("https://user:hunter3@sink/events".into());
        let summary = settings.summary();
        assert_eq!(summary.lines().count(), 9, "{summary}");
        assert!(
            summary.contains("capture_cloudevents_url=https://***@sink/events"),
            "{summary}"
        );
        assert!(!summary.contains("hunter3"), "{summary}");
        assert!(
            summary.contains("\nlogging: access_log_sampling_rate=0.0 log_format=text"),
            "{summary}"
        );
        assert!(
            summary.lines().next().is_some_and(|l| l.starts_with("http: ")),
            "{summary}"
        );
        assert!(summary.contains("auth_password=***"), "{summary}");
        assert!(!summary.contains("hunter2"), "{summary}");
        assert!(summary.contains("rest_api_timeout_in_ms="), "{summary}");
    }
}
