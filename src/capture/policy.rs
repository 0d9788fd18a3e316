//! Capture's settings: the flags that apply to every model, the settings
//! file's per-model `[model_capture.NAME]` sections, and the policy each
//! model resolves to once, at start.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Arc;

use clap::Args;
use serde::{Deserialize, Serialize};

/// Which halves of an exchange are captured (SageMaker's `CaptureOptions`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
#[value(rename_all = "snake_case")]
pub enum CaptureMode {
    #[default]
    Both,
    Request,
    Response,
}

impl CaptureMode {
    pub fn request(self) -> bool {
        self != CaptureMode::Response
    }

    pub fn response(self) -> bool {
        self != CaptureMode::Request
    }
}

/// One model's capture overrides (settings file only); unset fields keep the flags' values.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct ModelCapture {
    /// `false` turns capture off for this model whatever the flags say.
    pub enabled: Option<bool>,
    pub sampling_rate: Option<f64>,
    pub mode: Option<CaptureMode>,
    pub jsonl_dir: Option<PathBuf>,
    pub tfrecord_prefix: Option<String>,
    pub cloudevents_url: Option<String>,
}

/// Request/response capture, for every model or per model.
#[derive(Args, Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(default)]
#[command(next_help_heading = "Capture")]
pub struct CaptureSettings {
    /// Capture into SageMaker Data Capture's JSON Lines under this directory
    /// (`DIR/ENDPOINT/VARIANT/yyyy/mm/dd/hh/*.jsonl`, what Model Monitor reads), for every model.
    #[arg(long = "capture_jsonl_dir", alias = "capture-jsonl-dir", global = true)]
    pub capture_jsonl_dir: Option<PathBuf>,

    /// Capture into TFRecord files of TF Serving's `PredictionLog` named
    /// `PREFIX-<time>-<n>.tfrecord` (a model's warm-up format), for every model.
    #[arg(long = "capture_tfrecord_prefix", alias = "capture-tfrecord-prefix", global = true)]
    pub capture_tfrecord_prefix: Option<String>,

    /// Post each captured request and response as a CloudEvent (HTTP binary
    /// mode, KServe's logger types) to this URL, for every model.
    #[arg(long = "capture_cloudevents_url", alias = "capture-cloudevents-url", global = true)]
    pub capture_cloudevents_url: Option<String>,

    /// The share of requests captured where a sink is set: 1 all, 0.1 one in ten (random).
    #[arg(
        long = "capture_sampling_rate",
        alias = "capture-sampling-rate",
        global = true,
        default_value_t = 1.0
    )]
    pub capture_sampling_rate: f64,

    /// What is captured of each sampled request: `both`, `request` or `response`.
    #[arg(long = "capture_mode", alias = "capture-mode", global = true, value_enum, default_value_t = CaptureMode::Both)]
    pub capture_mode: CaptureMode,

    /// Records waiting for the writer at most; a record past it is dropped
    /// (counted in tfserve_capture_dropped_total), never a request.
    #[arg(
        long = "capture_queue_size",
        alias = "capture-queue-size",
        global = true,
        default_value_t = 10_000
    )]
    pub capture_queue_size: usize,

    /// A capture file is closed and a new one started past this many MiB.
    #[arg(
        long = "capture_rotate_mb",
        alias = "capture-rotate-mb",
        global = true,
        default_value_t = 64
    )]
    pub capture_rotate_mb: u64,

    /// ... or once it is this many seconds old (JSON Lines also start a new
    /// file each hour, in that hour's directory).
    #[arg(
        long = "capture_rotate_seconds",
        alias = "capture-rotate-seconds",
        global = true,
        default_value_t = 3600
    )]
    pub capture_rotate_seconds: u64,

    /// The endpoint directory of JSON Lines files, as SageMaker names it
    /// after the endpoint. Default: each model's name.
    #[arg(long = "capture_endpoint_name", alias = "capture-endpoint-name", global = true)]
    pub capture_endpoint_name: Option<String>,

    /// The variant directory under the endpoint's (SageMaker's production variant).
    #[arg(
        long = "capture_variant_name",
        alias = "capture-variant-name",
        global = true,
        default_value = "AllTraffic"
    )]
    pub capture_variant_name: String,

    /// Each capture directory (a JSON Lines tree, or a TFRecord prefix's
    /// files) is kept under this many MiB by removing its oldest closed
    /// files; 0 keeps everything.
    #[arg(
        long = "capture_retention_mb",
        alias = "capture-retention-mb",
        global = true,
        default_value_t = 0
    )]
    pub capture_retention_mb: u64,

    /// ... and its files older than this many hours are removed; 0 keeps them.
    #[arg(
        long = "capture_retention_hours",
        alias = "capture-retention-hours",
        global = true,
        default_value_t = 0.0
    )]
    pub capture_retention_hours: f64,

    /// At shutdown, how long queued records may take to be written and
    /// posted; what is left then is counted in tfserve_capture_dropped_total
    /// (reason `shutdown`) and logged once with its count.
    #[arg(
        long = "capture_flush_seconds",
        alias = "capture-flush-seconds",
        global = true,
        default_value_t = 10.0
    )]
    pub capture_flush_seconds: f64,

    /// `ce-source` of every CloudEvent (KServe's logger: its `--source-uri`).
    #[arg(
        long = "capture_cloudevents_source",
        alias = "capture-cloudevents-source",
        global = true,
        default_value = "tfserve"
    )]
    pub capture_cloudevents_source: String,

    /// `ce-inferenceservicename` of every CloudEvent. Default: the
    /// InferenceService KServe runs this predictor for (Knative's `K_SERVICE`
    /// without its `-predictor` suffix), else the model's name.
    #[arg(
        long = "capture_inference_service",
        alias = "capture-inference-service",
        global = true
    )]
    pub capture_inference_service: Option<String>,

    /// `ce-endpoint` of every CloudEvent (KServe: `default`, or `canary`).
    #[arg(
        long = "capture_cloudevents_endpoint",
        alias = "capture-cloudevents-endpoint",
        global = true,
        default_value = ""
    )]
    pub capture_cloudevents_endpoint: String,

    /// Request headers copied into each CloudEvent's `ce-metadata`
    /// (KServe's `--log-metadata-headers`), comma-separated.
    #[arg(
        long = "capture_metadata_headers",
        alias = "capture-metadata-headers",
        global = true,
        value_delimiter = ','
    )]
    pub capture_metadata_headers: Vec<String>,

    /// Per-model capture (settings file only), keyed by model name.
    #[arg(skip)]
    pub model_capture: BTreeMap<String, ModelCapture>,
}

impl Default for CaptureSettings {
    fn default() -> Self {
        crate::flags::clap_defaults()
    }
}

/// What one model's sampled requests go to.
#[derive(Clone, Debug, PartialEq)]
pub struct Policy {
    pub rate: f64,
    pub mode: CaptureMode,
    pub jsonl_dir: Option<PathBuf>,
    pub tfrecord_prefix: Option<String>,
    pub cloudevents_url: Option<String>,
}

impl Policy {
    pub fn enabled(&self) -> bool {
        self.rate > 0.0
            && (self.jsonl_dir.is_some() || self.tfrecord_prefix.is_some() || self.cloudevents_url.is_some())
    }
}

/// The policies resolved from the settings: one per configured model, and
/// the flags' own for every other model.
#[derive(Debug, Default)]
pub struct Policies {
    default: Option<Arc<Policy>>,
    models: HashMap<String, Option<Arc<Policy>>>,
}

impl Policies {
    pub fn policy(&self, model: &str) -> Option<&Arc<Policy>> {
        if self.models.is_empty() {
            return self.default.as_ref();
        }
        match self.models.get(model) {
            Some(policy) => policy.as_ref(),
            None => self.default.as_ref(),
        }
    }
}

impl CaptureSettings {
    /// The `ce-inferenceservicename` set or found in KServe's environment.
    pub fn inference_service(&self) -> Option<String> {
        self.capture_inference_service
            .clone()
            .or_else(|| inference_service_of(std::env::var("K_SERVICE").ok()?.as_str()))
    }

    /// Whether any sink is set, for every model or for one.
    pub fn any_sink(&self) -> bool {
        self.flags_policy().enabled() || self.model_capture.keys().any(|m| self.model_policy(m).enabled())
    }

    pub fn policies(&self) -> Policies {
        let flags = Arc::new(self.flags_policy());
        Policies {
            default: flags.enabled().then_some(flags),
            models: self
                .model_capture
                .keys()
                .map(|model| {
                    let policy = self.model_policy(model);
                    (model.clone(), policy.enabled().then(|| Arc::new(policy)))
                })
                .collect(),
        }
    }

    fn flags_policy(&self) -> Policy {
        Policy {
            rate: self.capture_sampling_rate,
            mode: self.capture_mode,
            jsonl_dir: self.capture_jsonl_dir.clone(),
            tfrecord_prefix: self.capture_tfrecord_prefix.clone(),
            cloudevents_url: self.capture_cloudevents_url.clone(),
        }
    }

    fn model_policy(&self, model: &str) -> Policy {
        let flags = self.flags_policy();
        let Some(own) = self.model_capture.get(model) else {
            return flags;
        };
        let rate = match own.enabled {
            Some(false) => 0.0,
            _ => own.sampling_rate.unwrap_or(flags.rate),
        };
        Policy {
            rate,
            mode: own.mode.unwrap_or(flags.mode),
            jsonl_dir: own.jsonl_dir.clone().or(flags.jsonl_dir),
            tfrecord_prefix: own.tfrecord_prefix.clone().or(flags.tfrecord_prefix),
            cloudevents_url: own.cloudevents_url.clone().or(flags.cloudevents_url),
        }
    }

    /// The first setting out of range, as `(name, value, reason)`.
    // Kept whole: one check per capture setting.
    pub fn invalid(&self) -> Option<(String, String, &'static str)> {
        let rate_range = "must be between 0 and 1";
        if !(0.0..=1.0).contains(&self.capture_sampling_rate) {
            return Some((
                "capture_sampling_rate".into(),
                self.capture_sampling_rate.to_string(),
                rate_range,
            ));
        }
        for (model, own) in &self.model_capture {
            if let Some(rate) = own.sampling_rate.filter(|r| !(0.0..=1.0).contains(r)) {
                return Some((
                    format!("model_capture.{model}.sampling_rate"),
                    rate.to_string(),
                    rate_range,
                ));
            }
            if let Some(url) = own.cloudevents_url.as_deref().filter(|u| !is_http_url(u)) {
                return Some((
                    format!("model_capture.{model}.cloudevents_url"),
                    url.to_string(),
                    "must be an http:// or https:// URL",
                ));
            }
        }
        if let Some(url) = self.capture_cloudevents_url.as_deref().filter(|u| !is_http_url(u)) {
            return Some((
                "capture_cloudevents_url".into(),
                url.to_string(),
                "must be an http:// or https:// URL",
            ));
        }
        if !(self.capture_retention_hours >= 0.0 && self.capture_retention_hours.is_finite()) {
            return Some((
                "capture_retention_hours".into(),
                self.capture_retention_hours.to_string(),
                "must be 0 or more",
            ));
        }
        if !(self.capture_flush_seconds >= 0.0 && self.capture_flush_seconds <= 3600.0) {
            return Some((
                "capture_flush_seconds".into(),
                self.capture_flush_seconds.to_string(),
                "must be between 0 and 3600",
            ));
        }
        for (name, value) in [
            ("capture_endpoint_name", self.capture_endpoint_name.as_deref()),
            ("capture_variant_name", Some(self.capture_variant_name.as_str())),
        ] {
            if let Some(value) = value.filter(|v| !path_segment(v)) {
                return Some((
                    name.into(),
                    value.to_string(),
                    "must be one directory name (not empty, no '/', not '.' or '..')",
                ));
            }
        }
        if self.capture_queue_size == 0 {
            return Some(("capture_queue_size".into(), "0".into(), "must be at least 1"));
        }
        if self.capture_rotate_mb == 0 || self.capture_rotate_seconds == 0 {
            return Some((
                "capture_rotate_mb/capture_rotate_seconds".into(),
                "0".into(),
                "must be at least 1",
            ));
        }
        None
    }
}

/// The InferenceService a Knative service (`K_SERVICE`) serves a predictor for.
fn inference_service_of(knative_service: &str) -> Option<String> {
    let name = ["-predictor-default", "-predictor"]
        .iter()
        .find_map(|suffix| knative_service.strip_suffix(suffix))
        .unwrap_or(knative_service);
    (!name.is_empty()).then(|| name.to_string())
}

fn path_segment(name: &str) -> bool {
    !name.is_empty() && !name.contains(['/', '\\', '\0']) && name != "." && name != ".."
}

fn is_http_url(url: &str) -> bool {
    url.starts_with("http://") || url.starts_with("https://")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kserve_names_its_predictor_service_after_the_inference_service() {
        assert_eq!(inference_service_of("flowers-predictor").as_deref(), Some("flowers"));
        assert_eq!(
            inference_service_of("flowers-predictor-default").as_deref(),
            Some("flowers")
        );
        assert_eq!(inference_service_of("plain").as_deref(), Some("plain"));
        assert_eq!(inference_service_of(""), None);
    }
}
