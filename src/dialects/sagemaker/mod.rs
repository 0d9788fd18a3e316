//! The SageMaker TensorFlow Serving container contract: request bodies in its
//! content types read as its nginx layer reads them, decoded into tensors,
//! `X-Amzn-SageMaker-Custom-Attributes`, and its environment variables.

mod error;
pub mod models;
pub mod routes;

pub use routes::configure;

use std::borrow::Cow;
use std::sync::OnceLock;

use regex::Regex;

use crate::codec::decode::{decode_csv, decode_instance_list, decode_instance_values};
use crate::codec::nonfinite::quote_bare_tokens;
use crate::codec::payload::{is_image, media_type, read_payload, takes_scalar_instances, Instances, Payload};
use crate::codec::RequestFormat;
pub use error::SageMakerError;

use crate::error::ApiError;
use crate::imaging::{self, ImageFile};
use crate::python_handlers::{Answer, CallContext};
use crate::service::VersionSelector;
use crate::service::{DecodedPredict, RequestBody, Servable, Service, Trace};
use crate::signature::{CLASSIFY_METHOD, REGRESS_METHOD};
use crate::tfs::json as tfs;

pub const CUSTOM_ATTRIBUTES: &str = "x-amzn-sagemaker-custom-attributes";

/// One `/invocations` call, however it arrives (HTTP or `tfserve transform`).
#[derive(Clone, Debug, Default)]
pub struct Invocation {
    /// The model a route names (`/models/{name}/invoke`); else the custom
    /// attributes' `tfs-model-name`; else the default model.
    pub model: Option<String>,
    pub content_type: String,
    /// The raw header, which handlers see (`context.custom_attributes`).
    pub custom_attributes: String,
    /// What the header selects, parsed once.
    pub attributes: CustomAttributes,
    /// The `Accept` header, for handlers (`context.accept_header`).
    pub accept: String,
}

impl Invocation {
    pub fn new(model: Option<String>, content_type: String, custom_attributes: String, accept: String) -> Invocation {
        Invocation {
            model,
            content_type,
            attributes: CustomAttributes::parse(&custom_attributes),
            custom_attributes,
            accept,
        }
    }

    pub fn model_name(&self, service: &Service) -> String {
        self.model
            .clone()
            .or_else(|| self.attributes.model_name.clone())
            .or_else(|| service.default_model())
            .unwrap_or_default()
    }

    /// Reads the body as the container does and runs it.
    pub async fn run(
        &self,
        service: &Service,
        body: &(impl RequestBody + ?Sized),
        trace: &mut Trace,
    ) -> Result<Vec<u8>, ApiError> {
        self.attributes.validate()?;
        let method = self.attributes.method.as_deref().unwrap_or("predict");
        let model = self.model_name(service);
        let selector = version_selector(&self.attributes)?;
        let media = media_type(&self.content_type);
        if is_image(&media) {
            if method != "predict" {
                return Err(SageMakerError::ImageMethod(method.to_string()).into());
            }
            return predict_image(service, &model, &selector, body.shared(), trace).await;
        }
        if method == "predict" {
            return predict_payload(service, &model, &selector, media, body, trace).await;
        }
        let request = match read_payload(&media, body.as_slice())? {
            Payload::Tfs(request) => request,
            // The container sends anything else as `{"instances": ...}`,
            // which has no examples: TF Serving answers as for an empty object.
            Payload::Instances(_) => b"{}",
        };
        call_model(service, &model, &selector, method, request, trace).await
    }

    /// Runs the invocation through the model's `inference.py` when it ships
    /// one, else converts the body as the container does ([`Invocation::run`]).
    pub async fn respond(
        &self,
        service: &Service,
        body: &(impl RequestBody + ?Sized),
        trace: &mut Trace,
    ) -> Result<Answer, ApiError> {
        self.attributes.validate()?;
        let model = self.model_name(service);
        let Some(handlers) = service.handlers().get(&model) else {
            let body = self.run(service, body, trace).await?;
            return Ok(Answer {
                body,
                content_type: None,
            });
        };
        let attributes = &self.attributes;
        let method = attributes.method.clone().unwrap_or_else(|| "predict".into());
        let selector = version_selector(attributes)?;
        let or_json = |value: &str| {
            if value.trim().is_empty() {
                "application/json".to_string()
            } else {
                value.to_string()
            }
        };
        let context = CallContext {
            rest_uri: service
                .handlers()
                .rest_uri(&model, attributes.model_version.as_deref(), &method),
            model_name: model.clone(),
            model_version: attributes.model_version.clone(),
            method: method.clone(),
            custom_attributes: self.custom_attributes.clone(),
            request_content_type: or_json(&self.content_type),
            accept_header: or_json(&self.accept),
            content_length: body.as_slice().len(),
            grpc_port: service.handlers().grpc_port(),
        };
        let run_model =
            |request: Vec<u8>| async move { call_model(service, &model, &selector, &method, &request, trace).await };
        service
            .handlers()
            .invoke(
                &handlers,
                context,
                body.as_slice().to_vec(),
                service.timeout(),
                run_model,
            )
            .await
    }
}

/// An image body as a batch of one, sized for the signature's image input.
async fn predict_image(
    service: &Service,
    model: &str,
    selector: &VersionSelector,
    image: bytes::Bytes,
    trace: &mut Trace,
) -> Result<Vec<u8>, ApiError> {
    let (servable, signature) = service.resolve(model, selector, None)?;
    let input = imaging::image_input(&signature)?;
    let feed = imaging::feed_for(&signature, input, servable.images)?;
    let file = ImageFile {
        name: "request body".into(),
        bytes: image,
    };
    let input = imaging::batch_tensor_off_thread(vec![file], feed).await?;
    trace.resolved(&servable, &signature);
    service
        .predict_inputs(&servable, &signature, vec![input], RequestFormat::Row, trace)
        .await
}

/// A JSON, JSON Lines or CSV body for `predict`: a TF Serving request goes
/// through TF Serving's predict; instances decode straight into the default
/// signature's tensors (off the HTTP workers when the body is large).
async fn predict_payload(
    service: &Service,
    model: &str,
    selector: &VersionSelector,
    media: String,
    body: &(impl RequestBody + ?Sized),
    trace: &mut Trace,
) -> Result<Vec<u8>, ApiError> {
    let servable = service.servable(model, selector)?;
    // `Err(NotInstances)`: a TF Serving request, answered by its own predict.
    let decode = move |servable: &Servable, body: &[u8]| -> Result<Result<DecodedPredict, NotInstances>, ApiError> {
        let body = if media == "text/csv" {
            Cow::Borrowed(body)
        } else {
            quote_bare_tokens(body)
        };
        let Payload::Instances(instances) = read_payload(&media, &body)? else {
            return Ok(Err(NotInstances));
        };
        let signature = Service::signature(servable, None)?;
        let inputs = match instances {
            Instances::List(list) => decode_instance_list(list, &signature)?,
            Instances::Values(values) => decode_instance_values(values, &signature)?,
            Instances::Csv(csv) => vec![decode_csv(csv, &signature, takes_scalar_instances(&signature))?],
        };
        Ok(Ok((signature, RequestFormat::Row, inputs)))
    };
    match service.decode_and_predict(&servable, body, decode, trace).await? {
        Ok(answer) => Ok(answer),
        Err(NotInstances) => tfs::predict(service, model, selector, body, trace).await,
    }
}

struct NotInstances;

/// `tfs-model-version`, when given.
fn version_selector(attributes: &CustomAttributes) -> Result<VersionSelector, ApiError> {
    match &attributes.model_version {
        None => Ok(VersionSelector::Latest),
        Some(v) => v
            .parse()
            .map(VersionSelector::Specific)
            .map_err(|_| SageMakerError::NotAVersion(v.clone()).into()),
    }
}

/// A TF Serving REST body through the model, as `POST /v1/models/{model}:{method}`.
async fn call_model(
    service: &Service,
    model: &str,
    selector: &VersionSelector,
    method: &str,
    tfs_body: &[u8],
    trace: &mut Trace,
) -> Result<Vec<u8>, ApiError> {
    match method {
        "predict" => tfs::predict(service, model, selector, tfs_body, trace).await,
        "classify" => tfs::classify_or_regress(service, model, selector, tfs_body, CLASSIFY_METHOD, trace).await,
        "regress" => tfs::classify_or_regress(service, model, selector, tfs_body, REGRESS_METHOD, trace).await,
        other => Err(SageMakerError::UnknownMethod(other.to_string()).into()),
    }
}

/// What `X-Amzn-SageMaker-Custom-Attributes` selects: `tfs-model-name`,
/// `tfs-model-version`, `tfs-method` (predict, classify or regress).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CustomAttributes {
    pub model_name: Option<String>,
    pub model_version: Option<String>,
    pub method: Option<String>,
}

impl CustomAttributes {
    /// Finds `tfs-<key>=<value>` pairs anywhere in the header, as the container does.
    pub fn parse(header: &str) -> CustomAttributes {
        static PAIR: OnceLock<Regex> = OnceLock::new();
        let pair = PAIR.get_or_init(|| Regex::new(r"tfs-([a-z\-]+)=([^,]+)").expect("static regex"));
        let mut attributes = CustomAttributes::default();
        for caps in pair.captures_iter(header) {
            let value = caps[2].trim().to_string();
            match &caps[1] {
                "model-name" => attributes.model_name = Some(value),
                "model-version" => attributes.model_version = Some(value),
                "method" => attributes.method = Some(value),
                _ => {}
            }
        }
        attributes
    }

    /// The TF Serving 2.20 container's checks (tensorflowServing.js), in its words:
    /// a model name of `[A-Za-z0-9][A-Za-z0-9._-]{0,254}`, a version of digits,
    /// a method of predict, classify or regress.
    pub fn validate(&self) -> Result<(), ApiError> {
        let invalid = |what: &'static str| Err(SageMakerError::InvalidAttribute(what).into());
        if self.model_name.as_deref().is_some_and(|name| !valid_model_name(name)) {
            return invalid("tfs-model-name");
        }
        if let Some(version) = &self.model_version {
            if version.is_empty() || !version.bytes().all(|b| b.is_ascii_digit()) {
                return invalid("tfs-model-version");
            }
        }
        if let Some(method) = &self.method {
            if !["predict", "classify", "regress"].contains(&method.as_str()) {
                return invalid("tfs-method");
            }
        }
        Ok(())
    }
}

/// The container's model names, `[A-Za-z0-9][A-Za-z0-9._-]{0,254}`: one path
/// segment, never `..` (it cannot start with a dot).
pub fn valid_model_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    let allowed = |b: &u8| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-');
    (1..=255).contains(&bytes.len()) && bytes[0].is_ascii_alphanumeric() && bytes.iter().all(allowed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn custom_attributes_as_the_container_reads_them() {
        let attributes =
            CustomAttributes::parse("tfs-model-name=half_plus_three,tfs-method=regress, tfs-model-version=2");
        assert_eq!(attributes.model_name.as_deref(), Some("half_plus_three"));
        assert_eq!(attributes.method.as_deref(), Some("regress"));
        assert_eq!(attributes.model_version.as_deref(), Some("2"));
        assert_eq!(CustomAttributes::parse("something else"), CustomAttributes::default());
        // A value runs from the first '=' to the next comma.
        let padded = CustomAttributes::parse("tfs-model-name=a=b,tfs-method=predict");
        assert_eq!(padded.model_name.as_deref(), Some("a=b"));
    }

    #[test]
    fn attributes_are_checked_as_the_container_checks_them() {
        let check = |header: &str| CustomAttributes::parse(header).validate().map_err(|e| e.to_string());
        assert_eq!(
            check("tfs-model-name=half_plus_three,tfs-model-version=2,tfs-method=regress"),
            Ok(())
        );
        assert_eq!(check("tfs-model-name=m.v_1-x"), Ok(()));
        assert_eq!(check("tfs-model-name=a=b"), Err("invalid tfs-model-name".into()));
        assert_eq!(check("tfs-model-name=_m"), Err("invalid tfs-model-name".into()));
        assert_eq!(
            check(&format!("tfs-model-name={}", "a".repeat(256))),
            Err("invalid tfs-model-name".into())
        );
        assert_eq!(check("tfs-model-version=v2"), Err("invalid tfs-model-version".into()));
        assert_eq!(check("tfs-model-version=-1"), Err("invalid tfs-model-version".into()));
        assert_eq!(check("tfs-method=explain"), Err("invalid tfs-method".into()));
    }
}
