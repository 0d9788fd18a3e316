//! TF Serving's request logs: each exchange a `PredictionLog` (its
//! `LogMetadata` and the log of the API called: `PredictLog`, `ClassifyLog`,
//! `RegressLog` or `MultiInferenceLog`) framed as a TFRecord, the format of
//! `assets.extra/tf_serving_warmup_requests`, so a captured file can be a
//! model's warm-up as it is.

use prost::Message;

use super::LogKind;
use crate::codec::results::{classification_result, regression_result};
use crate::codec::tensor_proto::to_proto;
use crate::proto::tensorflow::serving::input::Kind;
use crate::proto::tensorflow::serving::model_spec::VersionChoice;
use crate::proto::tensorflow::serving::prediction_log::LogType;
use crate::proto::tensorflow::serving::{
    ClassificationRequest, ClassificationResponse, ClassificationResult, ClassifyLog, ExampleList, Input, LogMetadata,
    ModelSpec, MultiInferenceLog, PredictLog, PredictRequest, PredictResponse, PredictionLog, RegressLog,
    RegressionRequest, RegressionResponse, RegressionResult, SamplingConfig,
};
use crate::proto::tensorflow::Example;
use crate::tensor::{Tensor, TensorData};
use crate::warmup::records::frame;

/// What one record says about its exchange.
pub struct Exchange<'a> {
    pub model: &'a str,
    pub version: i64,
    pub signature: &'a str,
    pub sampling_rate: f64,
    pub inputs: Option<&'a [(String, Tensor)]>,
    pub outputs: Option<&'a [(String, Tensor)]>,
    pub kind: LogKind,
    /// A MultiInference call's log, as its dialect wrote it.
    pub multi_inference: Option<&'a MultiInferenceLog>,
}

/// The framed record: length, its masked CRC32-C, the `PredictionLog`, its CRC.
pub fn record(exchange: &Exchange<'_>) -> Vec<u8> {
    let spec = ModelSpec {
        name: exchange.model.to_string(),
        signature_name: exchange.signature.to_string(),
        version_choice: Some(VersionChoice::Version(exchange.version)),
    };
    let log = PredictionLog {
        log_metadata: Some(LogMetadata {
            model_spec: Some(spec.clone()),
            sampling_config: Some(SamplingConfig {
                sampling_rate: exchange.sampling_rate,
            }),
            saved_model_tags: vec!["serve".to_string()],
        }),
        log_type: Some(log_type(exchange, spec)),
    };
    frame(&log.encode_to_vec())
}

fn log_type(exchange: &Exchange<'_>, spec: ModelSpec) -> LogType {
    let (inputs, outputs) = (exchange.inputs, exchange.outputs);
    if let Some(multi) = exchange.multi_inference {
        return LogType::MultiInferenceLog(MultiInferenceLog {
            request: multi.request.clone().filter(|_| inputs.is_some()),
            response: multi.response.clone().filter(|_| outputs.is_some()),
        });
    }
    match exchange.kind {
        LogKind::Predict => {
            let tensors =
                |named: &[(String, Tensor)]| named.iter().map(|(key, t)| (key.clone(), to_proto(t))).collect();
            LogType::PredictLog(PredictLog {
                request: inputs.map(|inputs| PredictRequest {
                    model_spec: Some(spec.clone()),
                    inputs: tensors(inputs),
                    output_filter: Vec::new(),
                }),
                response: outputs.map(|outputs| PredictResponse {
                    model_spec: Some(spec.clone()),
                    outputs: tensors(outputs),
                }),
            })
        }
        LogKind::Classify => LogType::ClassifyLog(ClassifyLog {
            request: inputs.map(|inputs| ClassificationRequest {
                model_spec: Some(spec.clone()),
                input: Some(examples_input(inputs)),
            }),
            response: outputs.map(|outputs| ClassificationResponse {
                model_spec: Some(spec.clone()),
                result: Some(classified(outputs)),
            }),
        }),
        LogKind::Regress => LogType::RegressLog(RegressLog {
            request: inputs.map(|inputs| RegressionRequest {
                model_spec: Some(spec.clone()),
                input: Some(examples_input(inputs)),
            }),
            response: outputs.map(|outputs| RegressionResponse {
                model_spec: Some(spec.clone()),
                result: Some(regressed(outputs)),
            }),
        }),
    }
}

/// A classify or regress call's examples, read back from the serialized
/// `tf.Example`s the signature ran on (a context merged into each).
fn examples_input(inputs: &[(String, Tensor)]) -> Input {
    let examples = match inputs.first().map(|(_, t)| &t.data) {
        Some(TensorData::String(serialized)) => serialized
            .iter()
            .map(|bytes| Example::decode(bytes.as_slice()).unwrap_or_default())
            .collect(),
        _ => Vec::new(),
    };
    Input {
        kind: Some(Kind::ExampleList(ExampleList { examples })),
    }
}

fn output<'t>(outputs: &'t [(String, Tensor)], key: &str) -> Option<&'t Tensor> {
    outputs.iter().find(|(k, _)| k == key).map(|(_, t)| t)
}

/// The result a Classify call answered, from the signature's `classes` and `scores`.
fn classified(outputs: &[(String, Tensor)]) -> ClassificationResult {
    let (classes, scores) = (output(outputs, "classes"), output(outputs, "scores"));
    let Some(shaped) = scores.or(classes) else {
        return ClassificationResult::default();
    };
    let labels = match classes.map(|t| &t.data) {
        Some(TensorData::String(labels)) => Some(labels.as_slice()),
        _ => None,
    };
    let values = match scores.map(|t| &t.data) {
        Some(TensorData::Float(values)) => Some(values.as_slice()),
        _ => None,
    };
    let rows = shaped.shape.first().copied().unwrap_or(0);
    classification_result(rows, shaped.row_len(), labels, values)
}

/// The result a Regress call answered, from `outputs` or the only output.
fn regressed(outputs: &[(String, Tensor)]) -> RegressionResult {
    let values = output(outputs, "outputs").or(match outputs {
        [(_, single)] => Some(single),
        _ => None,
    });
    match values.map(|t| &t.data) {
        Some(TensorData::Float(values)) => regression_result(values),
        _ => RegressionResult::default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tensor::TensorData;

    #[test]
    fn records_read_back_as_warm_up_requests() {
        let x = vec![("x".to_string(), Tensor::new(vec![2], TensorData::Float(vec![1.0, 2.0])))];
        let y = vec![("y".to_string(), Tensor::new(vec![2], TensorData::Float(vec![3.5, 4.0])))];
        let exchange = Exchange {
            model: "half",
            version: 123,
            signature: "serving_default",
            sampling_rate: 0.5,
            inputs: Some(&x),
            outputs: Some(&y),
            kind: LogKind::Predict,
            multi_inference: None,
        };
        let mut file = record(&exchange);
        file.extend(record(&exchange));
        let requests = crate::warmup::records::parse(&file).unwrap();
        assert_eq!(requests.len(), 2);
        assert_eq!(requests[0].signature.as_deref(), Some("serving_default"));
        assert_eq!(requests[0].inputs["x"], x[0].1);
        let logs = crate::warmup::records::tfrecords(&file).unwrap();
        let log = PredictionLog::decode(logs[0]).unwrap();
        let metadata = log.log_metadata.unwrap();
        assert_eq!(metadata.sampling_config.unwrap().sampling_rate, 0.5);
        assert_eq!(
            metadata.model_spec.unwrap().version_choice,
            Some(VersionChoice::Version(123))
        );
        let Some(LogType::PredictLog(predict)) = log.log_type else {
            panic!("not a predict log")
        };
        assert_eq!(predict.response.unwrap().outputs["y"].float_val, vec![3.5, 4.0]);
    }

    #[test]
    fn classify_and_regress_calls_are_logged_as_their_own_kinds() {
        use crate::proto::tensorflow::{feature, Feature, Features, FloatList};
        let example = Example {
            features: Some(Features {
                feature: [(
                    "x".to_string(),
                    Feature {
                        kind: Some(feature::Kind::FloatList(FloatList { value: vec![4.0] })),
                    },
                )]
                .into(),
            }),
        };
        let inputs = vec![(
            "inputs".to_string(),
            Tensor::new(vec![1], TensorData::String(vec![example.encode_to_vec()])),
        )];
        let scores = vec![(
            "scores".to_string(),
            Tensor::new(vec![1, 1], TensorData::Float(vec![5.0])),
        )];
        let exchange = |kind| Exchange {
            model: "half",
            version: 1,
            signature: "classify_x_to_y",
            sampling_rate: 1.0,
            inputs: Some(&inputs),
            outputs: Some(&scores),
            kind,
            multi_inference: None,
        };
        let read = |kind| {
            let framed = record(&exchange(kind));
            let logs = crate::warmup::records::tfrecords(&framed).unwrap();
            PredictionLog::decode(logs[0]).unwrap().log_type.unwrap()
        };
        let LogType::ClassifyLog(classify) = read(LogKind::Classify) else {
            panic!("not a classify log")
        };
        let request = classify.request.unwrap();
        let Some(Kind::ExampleList(list)) = request.input.unwrap().kind else {
            panic!("no example list")
        };
        assert_eq!(list.examples, vec![example]);
        let result = classify.response.unwrap().result.unwrap();
        assert_eq!(result.classifications[0].classes[0].score, 5.0);
        // A lone output is what Regress answers.
        let LogType::RegressLog(regress) = read(LogKind::Regress) else {
            panic!("not a regress log")
        };
        assert_eq!(regress.response.unwrap().result.unwrap().regressions[0].value, 5.0);
        // Both replay as warm-up runs of the serialized examples.
        let requests = crate::warmup::records::parse(&record(&exchange(LogKind::Classify))).unwrap();
        assert_eq!(requests[0].inputs["inputs"], inputs[0].1);
    }
}
