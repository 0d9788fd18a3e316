//! The SageMaker TensorFlow Serving container contract: request bodies in its
//! content types converted to TF Serving requests (as its nginx layer does),
//! `X-Amzn-SageMaker-Custom-Attributes`, and its environment variables.

pub mod convert;

use std::sync::OnceLock;

use regex::Regex;

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
}

/// Which model `/invocations` serves without a `tfs-model-name`:
/// `SAGEMAKER_TFS_DEFAULT_MODEL_NAME`, else the first model by name.
pub fn default_model(env: Option<String>, models: &[String]) -> Option<String> {
    env.filter(|name| !name.is_empty() && name != "None")
        .or_else(|| models.first().cloned())
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
    }

    #[test]
    fn default_model_falls_back_to_the_first() {
        let models = vec!["a".to_string(), "b".to_string()];
        assert_eq!(default_model(None, &models).as_deref(), Some("a"));
        assert_eq!(default_model(Some("None".into()), &models).as_deref(), Some("a"));
        assert_eq!(default_model(Some("b".into()), &models).as_deref(), Some("b"));
    }
}
