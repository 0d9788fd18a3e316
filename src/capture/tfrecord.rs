//! TF Serving's request logs: each exchange a `PredictionLog` (its
//! `LogMetadata` and a `PredictLog`) framed as a TFRecord, the format of
//! `assets.extra/tf_serving_warmup_requests`, so a captured file can be a
//! model's warm-up as it is.

use prost::Message;

use crate::codec::tensor_proto::to_proto;
use crate::proto::tensorflow::serving::model_spec::VersionChoice;
use crate::proto::tensorflow::serving::prediction_log::LogType;
use crate::proto::tensorflow::serving::{
    LogMetadata, ModelSpec, PredictLog, PredictRequest, PredictResponse, PredictionLog, SamplingConfig,
};
use crate::tensor::Tensor;
use crate::warmup::records::masked_crc;

/// What one record says about its exchange.
pub struct Exchange<'a> {
    pub model: &'a str,
    pub version: i64,
    pub signature: &'a str,
    pub sampling_rate: f64,
    pub inputs: Option<&'a [(String, Tensor)]>,
    pub outputs: Option<&'a [(String, Tensor)]>,
}

/// The framed record: length, its masked CRC32-C, the `PredictionLog`, its CRC.
pub fn record(exchange: &Exchange<'_>) -> Vec<u8> {
    let spec = ModelSpec {
        name: exchange.model.to_string(),
        signature_name: exchange.signature.to_string(),
        version_choice: Some(VersionChoice::Version(exchange.version)),
    };
    let tensors = |named: &[(String, Tensor)]| named.iter().map(|(key, t)| (key.clone(), to_proto(t))).collect();
    let log = PredictionLog {
        log_metadata: Some(LogMetadata {
            model_spec: Some(spec.clone()),
            sampling_config: Some(SamplingConfig {
                sampling_rate: exchange.sampling_rate,
            }),
            saved_model_tags: vec!["serve".to_string()],
        }),
        log_type: Some(LogType::PredictLog(PredictLog {
            request: exchange.inputs.map(|inputs| PredictRequest {
                model_spec: Some(spec.clone()),
                inputs: tensors(inputs),
                output_filter: Vec::new(),
            }),
            response: exchange.outputs.map(|outputs| PredictResponse {
                model_spec: Some(spec.clone()),
                outputs: tensors(outputs),
            }),
        })),
    };
    let payload = log.encode_to_vec();
    let mut framed = Vec::with_capacity(payload.len() + 16);
    let length = (payload.len() as u64).to_le_bytes();
    framed.extend_from_slice(&length);
    framed.extend_from_slice(&masked_crc(&length).to_le_bytes());
    framed.extend_from_slice(&payload);
    framed.extend_from_slice(&masked_crc(&payload).to_le_bytes());
    framed
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
}
