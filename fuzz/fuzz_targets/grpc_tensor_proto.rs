//! gRPC request messages: a PredictRequest's TensorProtos (typed fields and
//! tensor_content) and a ModelInferRequest's inputs (raw and typed contents).
#![no_main]

use libfuzzer_sys::fuzz_target;
use prost::Message;
use tfserve::proto::inference::ModelInferRequest;
use tfserve::proto::tensorflow::serving::PredictRequest;

fuzz_target!(|data: &[u8]| {
    if let Ok(request) = PredictRequest::decode(data) {
        for (key, proto) in &request.inputs {
            let _ = tfserve::codec::tensor_proto::to_tensor(proto, key);
        }
    }
    if let Ok(request) = ModelInferRequest::decode(data) {
        let _ = tfserve::dialects::kserve::grpc::decode_inputs(request.inputs, request.raw_input_contents, &request.model_name);
    }
});
