"""TF Serving's gRPC client flow against tfserve: Predict with the image sent
as raw bytes (`tensor_content`, what tf.make_tensor_proto writes for numpy
arrays), then GetModelMetadata and GetModelStatus, Classify and Regress.

    python examples/tfs_grpc_client.py --server localhost:8500

Prints one JSON object with what each call answered.
"""
import argparse
import json

import grpc
import numpy as np
import tensorflow as tf
from tensorflow_serving.apis import (classification_pb2, get_model_metadata_pb2, get_model_status_pb2,
                                     model_service_pb2_grpc, predict_pb2, prediction_service_pb2_grpc,
                                     regression_pb2)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--server", default="localhost:8500")
    parser.add_argument("--model", default="mnist_cnn")
    args = parser.parse_args()
    # TF Serving's own limit; the default 4 MB would refuse large answers.
    options = [("grpc.max_receive_message_length", 2**31 - 1), ("grpc.max_send_message_length", 2**31 - 1)]
    channel = grpc.insecure_channel(args.server, options=options)
    prediction = prediction_service_pb2_grpc.PredictionServiceStub(channel)
    result = {}

    image = (np.arange(28 * 28, dtype=np.float32) % 255 / 255.0).reshape(1, 28, 28, 1)
    request = predict_pb2.PredictRequest()
    request.model_spec.name = args.model
    request.model_spec.signature_name = "serving_default"
    request.inputs["image"].CopyFrom(tf.make_tensor_proto(image))
    response = prediction.Predict(request, 30.0)
    result["uses_tensor_content"] = len(request.inputs["image"].tensor_content) == image.nbytes
    result["predict"] = {key: tf.make_ndarray(value).tolist() for key, value in response.outputs.items()}
    result["predict_model_spec"] = {"name": response.model_spec.name, "version": response.model_spec.version.value,
                                    "signature_name": response.model_spec.signature_name}

    metadata_request = get_model_metadata_pb2.GetModelMetadataRequest()
    metadata_request.model_spec.name = args.model
    metadata_request.metadata_field.append("signature_def")
    metadata = prediction.GetModelMetadata(metadata_request, 30.0)
    signatures = get_model_metadata_pb2.SignatureDefMap()
    metadata.metadata["signature_def"].Unpack(signatures)
    result["signatures"] = {name: sorted(sig.inputs) for name, sig in signatures.signature_def.items()}

    status_request = get_model_status_pb2.GetModelStatusRequest()
    status_request.model_spec.name = args.model
    status = model_service_pb2_grpc.ModelServiceStub(channel).GetModelStatus(status_request, 30.0)
    result["status"] = [[s.version, get_model_status_pb2.ModelVersionStatus.State.Name(s.state)]
                        for s in status.model_version_status]

    # TF Serving's half_plus_two: classify and regress on tf.Examples.
    classify = classification_pb2.ClassificationRequest()
    classify.model_spec.name = "half_plus_two"
    classify.model_spec.signature_name = "classify_x_to_y"
    classify.input.example_list.examples.add().features.feature["x"].float_list.value.append(4.0)
    answer = prediction.Classify(classify, 30.0)
    result["classify"] = [[c.label, c.score] for c in answer.result.classifications[0].classes]
    regress = regression_pb2.RegressionRequest()
    regress.model_spec.name = "half_plus_two"
    regress.model_spec.signature_name = "regress_x_to_y"
    for x in (1.0, 2.0):
        regress.input.example_list.examples.add().features.feature["x"].float_list.value.append(x)
    result["regress"] = [r.value for r in prediction.Regress(regress, 30.0).result.regressions]
    print(json.dumps(result))


if __name__ == "__main__":
    main()
