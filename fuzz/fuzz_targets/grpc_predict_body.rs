//! The gRPC port's Predict request path above HTTP/2: a body split into
//! DATA chunks anywhere, gathered as the connection gathers it, then decoded
//! into a PredictRequest and its tensors. The gathered bytes are always the
//! chunks pushed, in order; a body is decoded here exactly when it is one
//! uncompressed message within the limit; nothing panics.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use tfserve::grpc::body::{predict_request, whole, MessageBody};

const LIMIT: usize = 1 << 16;

fuzz_target!(|data: &[u8]| {
    let (splits, body) = data.split_at(data.len().min(3));
    let mut gathered = MessageBody::default();
    let mut pushed = Vec::new();
    let mut at = 0;
    let mut split = splits.iter().cycle();
    let mut fits = true;
    while at < body.len() && fits {
        let step = 1 + usize::from(*split.next().unwrap_or(&255)) * 7;
        let end = (at + step).min(body.len());
        pushed.extend_from_slice(&body[at..end]);
        fits = gathered.push(Bytes::copy_from_slice(&body[at..end]), LIMIT);
        at = end;
    }
    let bytes = gathered.into_bytes();
    assert_eq!(&bytes[..], &pushed[..], "the chunks, in order");
    if at == body.len() && fits {
        assert_eq!(whole(&bytes, LIMIT), whole(body, LIMIT));
    }
    if let Some(request) = predict_request(&bytes, LIMIT) {
        assert!(whole(body, LIMIT));
        for (key, proto) in &request.inputs {
            if let Ok(tensor) = tfserve::codec::tensor_proto::to_tensor(proto, key) {
                assert_eq!(tensor.shape.iter().product::<usize>(), tensor.data.len());
            }
        }
    }
});
