//! Simple TensorFlow Serving's inference contract: `POST /` with
//! `model_name`, `model_version`, `signature_name` and `data`, answered with an
//! object of outputs; and `gen_json`, an example request built from a signature.

mod error;
pub mod routes;

pub use routes::configure;

use std::collections::HashMap;

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{json, Map, Value};

use crate::codec::decode::{decode_base64, decode_named_inputs, Coercion};
use crate::codec::RequestFormat;
pub use error::StfsError;

use crate::error::ApiError;
use crate::imaging::{self, ImageFile};
use crate::service::VersionSelector;
use crate::service::{Service, Trace};
use crate::signature::SignatureSpec;
use crate::tensor::{DType, Tensor, TensorData};

/// The model a request without `model_name` addresses, as in STFS.
pub const DEFAULT_MODEL: &str = "default";

/// A `POST /` JSON body, its `data` not yet decoded.
#[derive(Deserialize)]
pub struct Request<'a> {
    #[serde(default)]
    pub model_name: Option<String>,
    #[serde(default)]
    pub model_version: Option<Value>,
    #[serde(default)]
    pub signature_name: Option<String>,
    #[serde(borrow, default)]
    data: Option<&'a RawValue>,
    /// STFS's flag for Estimator exports: serialized `tf.Example`s arrive as
    /// URL-safe base64 text and are decoded before the run.
    #[serde(default)]
    base64_decode: Option<Value>,
}

impl<'a> Request<'a> {
    /// Parses a body whose bare `NaN`/`Infinity` are already quoted.
    pub fn parse(body: &'a [u8]) -> Result<Request<'a>, ApiError> {
        serde_json::from_slice(body).map_err(|e| StfsError::InvalidJson(e).into())
    }

    /// The raw `data` object; STFS refuses a body without one.
    fn data(&self) -> Result<&'a RawValue, ApiError> {
        self.data.ok_or_else(|| StfsError::NoData.into())
    }

    /// `data` as one tensor per signature input, by numpy's conversions,
    /// with `base64_decode` applied.
    pub fn inputs(&self, signature: &SignatureSpec) -> Result<Vec<Tensor>, ApiError> {
        let data = self.data()?;
        let mut inputs = decode_named_inputs(data.get(), signature, Coercion::Numpy)?;
        if self.base64_decode.as_ref().is_some_and(truthy) {
            base64_decode_inputs(signature, &mut inputs)?;
        }
        Ok(inputs)
    }
}

/// The tensor name STFS decodes under `base64_decode` (an Estimator's
/// serving input receiver).
const ESTIMATOR_EXAMPLES_TENSOR: &str = "input_example_tensor:0";

/// With `base64_decode`, the string inputs whose values are base64 text: the
/// Estimator's examples tensor as STFS has it, or the only string input.
fn base64_decode_inputs(signature: &SignatureSpec, inputs: &mut [Tensor]) -> Result<(), ApiError> {
    let strings: Vec<usize> = (0..signature.inputs.len())
        .filter(|&i| signature.inputs[i].dtype == DType::String)
        .collect();
    let chosen: Vec<usize> = match strings
        .iter()
        .copied()
        .find(|&i| signature.inputs[i].tensor_name == ESTIMATOR_EXAMPLES_TENSOR)
    {
        Some(i) => vec![i],
        None if strings.len() == 1 => strings,
        None => {
            return Err(StfsError::Base64Input {
                signature: signature.name.clone(),
                strings: strings.len(),
                tensor: ESTIMATOR_EXAMPLES_TENSOR,
            }
            .into())
        }
    };
    for i in chosen {
        let key = &signature.inputs[i].key;
        if let TensorData::String(values) = &mut inputs[i].data {
            for (n, value) in values.iter_mut().enumerate() {
                let text = std::str::from_utf8(value).ok();
                *value = text.and_then(decode_base64).ok_or_else(|| StfsError::NotBase64 {
                    element: n,
                    input: key.clone(),
                    bytes: value.len(),
                })?;
            }
        }
    }
    Ok(())
}

/// `model_version` as a number or a numeric string; absent or null: the latest
/// (the highest number, not directory order as STFS had it).
pub fn version_selector(version: Option<&Value>) -> Result<VersionSelector, ApiError> {
    let invalid = |v: &Value| ApiError::from(StfsError::NotAVersion(v.to_string()));
    match version {
        None | Some(Value::Null) => Ok(VersionSelector::Latest),
        Some(v @ Value::Number(n)) => n.as_i64().map(VersionSelector::Specific).ok_or_else(|| invalid(v)),
        Some(v @ Value::String(s)) => s.trim().parse().map(VersionSelector::Specific).map_err(|_| invalid(v)),
        Some(v) => Err(invalid(v)),
    }
}

/// Python's truthiness, as STFS tests the flag.
fn truthy(value: &Value) -> bool {
    match value {
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|x| x != 0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
        Value::Null => false,
    }
}

/// Checks the model exists, naming the available ones otherwise.
pub fn known_model(service: &Service, model: &str) -> Result<(), ApiError> {
    let models = service.model_names();
    if models.iter().any(|m| m == model) {
        return Ok(());
    }
    Err(StfsError::UnknownModel {
        model: model.to_string(),
        available: models.join(", "),
    }
    .into())
}

/// `POST /` with a JSON body.
pub async fn infer(service: &Service, body: &[u8], trace: &mut Trace) -> Result<Vec<u8>, ApiError> {
    // Python's json module, which STFS parses with, reads bare NaN and Infinity.
    let body = crate::codec::nonfinite::quote_bare_tokens(body);
    let request = Request::parse(&body)?;
    let model = request.model_name.as_deref().unwrap_or(DEFAULT_MODEL);
    let selector = version_selector(request.model_version.as_ref())?;
    request.data()?;
    known_model(service, model)?;
    let (servable, signature) = service.resolve(model, &selector, request.signature_name.as_deref())?;
    let inputs = request.inputs(&signature)?;
    service
        .predict_inputs(&servable, &signature, inputs, RequestFormat::Named, trace)
        .await
}

/// `POST /` with image files (`image`/`images` form parts) and the text
/// fields `model_name` (default `default`), `model_version`, `signature_name`.
/// The files form one batch; the answer is an object of outputs, as for JSON.
pub async fn infer_images(
    service: &Service,
    fields: HashMap<String, String>,
    files: Vec<ImageFile>,
    trace: &mut Trace,
) -> Result<Vec<u8>, ApiError> {
    if files.is_empty() {
        return Err(ApiError::BadRequest(
            "the form has no image: send files as 'image' or 'images' (curl -F 'image=@cat.jpg')".into(),
        ));
    }
    let model = fields.get("model_name").map_or(DEFAULT_MODEL, String::as_str);
    let version = fields
        .get("model_version")
        .filter(|v| !v.is_empty())
        .cloned()
        .map(Value::String);
    let selector = version_selector(version.as_ref())?;
    known_model(service, model)?;
    let signature_name = fields.get("signature_name").filter(|s| !s.is_empty());
    let (servable, signature) = service.resolve(model, &selector, signature_name.map(String::as_str))?;
    let input = imaging::image_input(&signature)?;
    let feed = imaging::feed_for(&signature, input, servable.images)?;
    let tensor = imaging::batch_tensor_off_thread(files, feed).await?;
    service
        .predict_inputs(&servable, &signature, vec![tensor], RequestFormat::Named, trace)
        .await
}

/// `{"data": {input: example}}` for a signature: every unknown dimension 2
/// (as STFS's `gen_json` and `gen_client` fill `-1`), numbers 1, booleans
/// true, strings empty.
pub fn gen_json(signature: &SignatureSpec) -> Value {
    let mut data = Map::new();
    for input in &signature.inputs {
        let leaf = match input.dtype {
            DType::Float | DType::Double | DType::Half | DType::BFloat16 => json!(1.0),
            DType::Bool => json!(true),
            DType::String => json!(""),
            _ => json!(1),
        };
        let dims = input.shape.clone().unwrap_or_else(|| vec![-1]);
        let value = dims.iter().rev().fold(leaf, |inner, &d| {
            let length = if d < 0 { 2 } else { d.max(1) as usize };
            Value::Array(vec![inner; length])
        });
        data.insert(input.key.clone(), value);
    }
    json!({ "data": data })
}

/// Languages `gen_client` writes.
pub const CLIENT_LANGUAGES: &[&str] = &["bash", "python", "golang", "javascript", "rust"];

/// A client that sends `request` (a `gen_json` body) to `POST {base_url}/` and
/// prints the answer, in `language`; `None` for an unknown language.
pub fn gen_client(language: &str, base_url: &str, model: &str, request: &Value) -> Option<String> {
    let body = request.to_string();
    let url = format!("{base_url}/");
    let quoted = serde_json::to_string(&body).unwrap_or_default();
    Some(match language {
        "bash" => format!(
            "#!/usr/bin/env bash\n# Calls model {model} on {url} (generated by tfserve).\nset -euo pipefail\n\
             curl -sS -H 'Content-Type: application/json' -d '{}' '{url}'\necho\n",
            body.replace('\'', "'\"'\"'")
        ),
        "python" => format!(
            "#!/usr/bin/env python3\n\"\"\"Calls model {model} on {url} (generated by tfserve).\"\"\"\n\
             import json\nimport urllib.request\n\nREQUEST = json.loads({quoted})\n\n\n\
             def main():\n    request = urllib.request.Request(\"{url}\", data=json.dumps(REQUEST).encode(),\n\
             \x20                                    headers={{\"Content-Type\": \"application/json\"}})\n\
             \x20   with urllib.request.urlopen(request) as response:\n        print(response.read().decode())\n\n\n\
             if __name__ == \"__main__\":\n    main()\n"
        ),
        "golang" => format!(
            "// Calls model {model} on {url} (generated by tfserve). Run: go run client.go\npackage main\n\n\
             import (\n\t\"fmt\"\n\t\"io\"\n\t\"net/http\"\n\t\"strings\"\n)\n\n\
             func main() {{\n\tbody := {quoted}\n\
             \tresp, err := http.Post(\"{url}\", \"application/json\", strings.NewReader(body))\n\
             \tif err != nil {{\n\t\tpanic(err)\n\t}}\n\tdefer resp.Body.Close()\n\
             \tout, _ := io.ReadAll(resp.Body)\n\tfmt.Println(string(out))\n}}\n"
        ),
        "javascript" => format!(
            "// Calls model {model} on {url} (generated by tfserve). Run: node client.js (Node 18+)\n\
             const body = {quoted};\n\
             fetch(\"{url}\", {{ method: \"POST\", headers: {{ \"Content-Type\": \"application/json\" }}, body }})\n\
             \x20 .then((response) => response.text())\n  .then((text) => console.log(text));\n"
        ),
        "rust" => {
            let authority = base_url.trim_start_matches("http://").trim_start_matches("https://");
            format!(
                "// Calls model {model} on {url} (generated by tfserve); std only. Run: rustc client.rs && ./client\n\
                 use std::io::{{Read, Write}};\nuse std::net::TcpStream;\n\n\
                 fn main() -> std::io::Result<()> {{\n    let body = {quoted};\n\
                 \x20   let mut stream = TcpStream::connect(\"{authority}\")?;\n\
                 \x20   write!(stream, \"POST / HTTP/1.1\\r\\nHost: {authority}\\r\\nContent-Type: application/json\\r\\n\
                 Content-Length: {{}}\\r\\nConnection: close\\r\\n\\r\\n{{}}\", body.len(), body)?;\n\
                 \x20   let mut answer = String::new();\n    stream.read_to_string(&mut answer)?;\n\
                 \x20   println!(\"{{}}\", answer.split(\"\\r\\n\\r\\n\").nth(1).unwrap_or(\"\"));\n    Ok(())\n}}\n"
            )
        }
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::signature::TensorSpec;

    #[test]
    fn versions_and_examples() {
        assert_eq!(version_selector(None).unwrap(), VersionSelector::Latest);
        assert_eq!(version_selector(Some(&json!(2))).unwrap(), VersionSelector::Specific(2));
        assert_eq!(
            version_selector(Some(&json!("3"))).unwrap(),
            VersionSelector::Specific(3)
        );
        assert!(version_selector(Some(&json!("latest"))).is_err());
        let spec = |key: &str, dtype, shape: Vec<i64>| TensorSpec {
            key: key.into(),
            tensor_name: format!("{key}:0"),
            dtype,
            shape: Some(shape),
        };
        let signature = SignatureSpec {
            name: "serving_default".into(),
            method_name: String::new(),
            inputs: vec![
                spec("features", DType::Float, vec![-1, 3]),
                spec("flag", DType::Bool, vec![-1]),
            ],
            outputs: vec![],
            base64_inputs: vec![],
        };
        assert_eq!(
            gen_json(&signature),
            json!({"data": {"features": [[1.0, 1.0, 1.0], [1.0, 1.0, 1.0]], "flag": [true, true]}})
        );
    }
}
