//! One request's life as a dialect sees it, per transport: what a handler
//! needs to read a request and answer it (trace, body limits, admission,
//! timing headers, metrics, error statuses). Dialects build on this and on
//! the service, never on the transports themselves.

pub mod grpc;
pub mod http;

use crate::service::Trace;

/// The model and version a request's metrics count it under. A name a user
/// sent is a label only when the registry has a model of that name: labels
/// from arbitrary names would be unbounded. A request refused before it
/// resolved a version (a bad body, a missing version) then counts under its
/// model with version "", and the dashboard plots it there.
pub fn metric_labels<'t>(
    trace: &'t Trace,
    requested: &'t str,
    configured: impl FnOnce(&str) -> bool,
    digits: &'t mut itoa::Buffer,
) -> (&'t str, &'t str) {
    match trace.version {
        Some(version) => (trace.model.as_deref().unwrap_or(requested), digits.format(version)),
        None if !requested.is_empty() && configured(requested) => (requested, ""),
        None => ("", ""),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_counts_under_a_model_only_when_it_resolved_one_or_names_a_configured_one() {
        let mut digits = itoa::Buffer::new();
        let resolved = Trace {
            model: Some("m".into()),
            version: Some(3),
            ..Trace::default()
        };
        assert_eq!(metric_labels(&resolved, "m", |_| false, &mut digits), ("m", "3"));
        let mut digits = itoa::Buffer::new();
        let unresolved = Trace::default();
        assert_eq!(
            metric_labels(&unresolved, "m", |name| name == "m", &mut digits),
            ("m", "")
        );
        let mut digits = itoa::Buffer::new();
        assert_eq!(
            metric_labels(&unresolved, "made-up", |name| name == "m", &mut digits),
            ("", "")
        );
        let mut digits = itoa::Buffer::new();
        assert_eq!(metric_labels(&unresolved, "", |_| true, &mut digits), ("", ""));
    }
}
