"""TF Serving's answers to requests its own suite does not send, pinned with the
real `tensorflow-serving-api` client. Each test names the TF Serving source
that decides the answer (tensorflow/serving, tensorflow_serving/...).

    TFSERVE_BIN=target/debug/tfserve python tests/upstream/tf_serving_errors_test.py
"""

import json
import os
import sys
import tempfile
import time
import unittest
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import grpc  # noqa: E402
from grpc_health.v1 import health_pb2, health_pb2_grpc  # noqa: E402
from tensorflow.core.framework import types_pb2  # noqa: E402
from tensorflow_serving.apis import classification_pb2  # noqa: E402
from tensorflow_serving.apis import get_model_metadata_pb2  # noqa: E402
from tensorflow_serving.apis import get_model_status_pb2  # noqa: E402
from tensorflow_serving.apis import inference_pb2  # noqa: E402
from tensorflow_serving.apis import model_management_pb2  # noqa: E402
from tensorflow_serving.apis import model_service_pb2_grpc  # noqa: E402
from tensorflow_serving.apis import predict_pb2  # noqa: E402
from tensorflow_serving.apis import prediction_service_pb2_grpc  # noqa: E402
from tensorflow_serving.apis import regression_pb2  # noqa: E402

import model_server_base  # noqa: E402
from model_server_base import TensorflowModelServerTestBase  # noqa: E402

UPSTREAM = "tensorflow_serving (sources named per test)"
TIMEOUT = 10.0


def config_file(models):
    """A model config file serving `models` ({name: testdata directory})."""
    entries = "".join(
        'config: {{ name: "{}" base_path: "{}" model_platform: "tensorflow" }}\n'.format(
            name, os.path.join(model_server_base.TESTDATA, directory))
        for name, directory in models.items())
    handle, path = tempfile.mkstemp(suffix=".conf", prefix="tfserve-errors-")
    with os.fdopen(handle, "w") as f:
        f.write("model_config_list: {\n" + entries + "}\n")
    return path


class TfServingErrorsTest(TensorflowModelServerTestBase):
    """Error codes and messages, method by method."""

    @classmethod
    def setUpClass(cls):
        cls.config = config_file({"half_plus_two": "saved_model_half_plus_two_cpu"})
        _, cls.grpc_address, cls.rest_address = cls.RunServer(None, None, model_config_file=cls.config)
        cls.channel = grpc.insecure_channel(cls.grpc_address)
        cls.prediction = prediction_service_pb2_grpc.PredictionServiceStub(cls.channel)
        cls.models = model_service_pb2_grpc.ModelServiceStub(cls.channel)

    def assertRpcError(self, call, code, details):
        with self.assertRaises(grpc.RpcError) as raised:
            call()
        self.assertEqual(raised.exception.code(), code, raised.exception.details())
        self.assertEqual(raised.exception.details(), details)

    def predict_request(self, name="half_plus_two", signature="", dtype=types_pb2.DT_FLOAT):
        request = predict_pb2.PredictRequest()
        request.model_spec.name = name
        request.model_spec.signature_name = signature
        request.inputs["x"].dtype = dtype
        if dtype == types_pb2.DT_BOOL:
            request.inputs["x"].bool_val.append(True)
        else:
            request.inputs["x"].float_val.append(2.0)
        request.inputs["x"].tensor_shape.dim.add().size = 1
        return request

    @staticmethod
    def with_example(request):
        example = request.input.example_list.examples.add()
        example.features.feature["x"].float_list.value.extend([2.0])
        return request

    def testEmptyModelNameIsInvalidArgument(self):
        """server_core.cc ServableRequestFromModelSpec: "ModelSpec has no name specified."."""
        invalid = grpc.StatusCode.INVALID_ARGUMENT
        message = "ModelSpec has no name specified."
        self.assertRpcError(lambda: self.prediction.Predict(self.predict_request(name=""), TIMEOUT),
                            invalid, message)
        classify = self.with_example(classification_pb2.ClassificationRequest())
        classify.model_spec.name = ""
        self.assertRpcError(lambda: self.prediction.Classify(classify, TIMEOUT), invalid, message)
        regress = self.with_example(regression_pb2.RegressionRequest())
        regress.model_spec.name = ""
        self.assertRpcError(lambda: self.prediction.Regress(regress, TIMEOUT), invalid, message)
        metadata = get_model_metadata_pb2.GetModelMetadataRequest()
        metadata.model_spec.name = ""
        metadata.metadata_field.append("signature_def")
        self.assertRpcError(lambda: self.prediction.GetModelMetadata(metadata, TIMEOUT), invalid, message)

    def testUnknownSignatureOnPredictIsFailedPrecondition(self):
        """predict_util.cc RunPredict: FailedPrecondition "Serving signature key ... not found."."""
        self.assertRpcError(
            lambda: self.prediction.Predict(self.predict_request(signature="nope"), TIMEOUT),
            grpc.StatusCode.FAILED_PRECONDITION, 'Serving signature key "nope" not found.')

    def testUnknownSignatureOnClassifyAndRegressIsInvalidArgument(self):
        """classifier.cc / regressor.cc Get*SignatureDef: "No signature was found with the name: ..."."""
        classify = self.with_example(classification_pb2.ClassificationRequest())
        classify.model_spec.name = "half_plus_two"
        classify.model_spec.signature_name = "nope"
        self.assertRpcError(lambda: self.prediction.Classify(classify, TIMEOUT),
                            grpc.StatusCode.INVALID_ARGUMENT,
                            "No signature was found with the name: nope")
        regress = self.with_example(regression_pb2.RegressionRequest())
        regress.model_spec.name = "half_plus_two"
        regress.model_spec.signature_name = "nope"
        self.assertRpcError(lambda: self.prediction.Regress(regress, TIMEOUT),
                            grpc.StatusCode.INVALID_ARGUMENT,
                            "No signature was found with the name: nope")

    def testMultiInferenceSignatureAndMethodErrors(self):
        """multi_inference.cc: unknown signature INVALID_ARGUMENT, predict task UNIMPLEMENTED."""
        request = self.with_example(inference_pb2.MultiInferenceRequest())
        task = request.tasks.add()
        task.model_spec.name = "half_plus_two"
        task.model_spec.signature_name = "nope"
        task.method_name = "tensorflow/serving/regress"
        self.assertRpcError(lambda: self.prediction.MultiInference(request, TIMEOUT),
                            grpc.StatusCode.INVALID_ARGUMENT,
                            "Requested signature not found in model graph: nope")
        task.model_spec.signature_name = "serving_default"
        task.method_name = "tensorflow/serving/predict"
        self.assertRpcError(lambda: self.prediction.MultiInference(request, TIMEOUT),
                            grpc.StatusCode.UNIMPLEMENTED,
                            "Unsupported signature method_name: tensorflow/serving/predict")
        task.model_spec.name = ""
        self.assertRpcError(lambda: self.prediction.MultiInference(request, TIMEOUT),
                            grpc.StatusCode.INVALID_ARGUMENT,
                            "Found ModelSpec with an empty model name.")

    def testWrongDtypeNamesTheArgument(self):
        """TensorFlow's feed check as TF Serving passes it on (predict_util_test.cc)."""
        self.assertRpcError(
            lambda: self.prediction.Predict(self.predict_request(dtype=types_pb2.DT_BOOL), TIMEOUT),
            grpc.StatusCode.INVALID_ARGUMENT, "Expects arg[0] to be float but bool is provided")

    def testUnknownSignatureOverRestIsBadRequest(self):
        """http_rest_api_handler.cc GetInfoMap: InvalidArgument, 400."""
        url = "http://{}/v1/models/half_plus_two:predict".format(self.rest_address)
        body = json.dumps({"signature_name": "nope", "instances": [1.0]}).encode()
        with self.assertRaises(urllib.error.HTTPError) as raised:
            urllib.request.urlopen(urllib.request.Request(url, data=body), timeout=TIMEOUT)
        self.assertEqual(raised.exception.code, 400)
        self.assertEqual(json.loads(raised.exception.read()),
                         {"error": 'Serving signature name: "nope" not found in signature def'})

    def testHealthWatchOnUnknownServiceStaysOpen(self):
        """gRPC health protocol (health.proto): Watch sends SERVICE_UNKNOWN and keeps the stream."""
        health = health_pb2_grpc.HealthStub(self.channel)
        with self.assertRaises(grpc.RpcError) as raised:
            health.Check(health_pb2.HealthCheckRequest(service="no.such.Service"), timeout=TIMEOUT)
        self.assertEqual(raised.exception.code(), grpc.StatusCode.NOT_FOUND)
        stream = health.Watch(health_pb2.HealthCheckRequest(service="no.such.Service"), timeout=3)
        first = next(stream)
        self.assertEqual(first.status, health_pb2.HealthCheckResponse.SERVICE_UNKNOWN)
        # Still open: the call ends by its own deadline, not by the server.
        with self.assertRaises(grpc.RpcError) as ended:
            next(stream)
        self.assertEqual(ended.exception.code(), grpc.StatusCode.DEADLINE_EXCEEDED)
        serving = health.Check(health_pb2.HealthCheckRequest(
            service="tensorflow.serving.PredictionService"), timeout=TIMEOUT)
        self.assertEqual(serving.status, health_pb2.HealthCheckResponse.SERVING)

    def testReloadConfigDropsAModelToEnd(self):
        """model_service_impl.cc + servable_state_monitor: a dropped model's version reads END."""
        _, address, _ = self.RunServer(None, None, model_config_file=config_file({
            "half_plus_two": "saved_model_half_plus_two_cpu",
            "half_plus_three": "saved_model_half_plus_three"}),
            # Paths given over the API must lie under the model roots.
            extra_args="--model_roots=" + model_server_base.TESTDATA)
        models = model_service_pb2_grpc.ModelServiceStub(grpc.insecure_channel(address))
        reload = model_management_pb2.ReloadConfigRequest()
        config = reload.config.model_config_list.config.add()
        config.name = "half_plus_three"
        config.base_path = os.path.join(model_server_base.TESTDATA, "saved_model_half_plus_three")
        config.model_platform = "tensorflow"
        answer = models.HandleReloadConfigRequest(reload, TIMEOUT)
        self.assertEqual(answer.status.error_code, 0)
        status_request = get_model_status_pb2.GetModelStatusRequest()
        status_request.model_spec.name = "half_plus_two"
        deadline = time.monotonic() + 10
        while True:
            status = models.GetModelStatus(status_request, TIMEOUT)
            states = [(s.version, s.state) for s in status.model_version_status]
            if states == [(123, get_model_status_pb2.ModelVersionStatus.END)] or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        self.assertEqual(states, [(123, get_model_status_pb2.ModelVersionStatus.END)])

    def testBadConfigStopsStartUp(self):
        """server.cc: a config that does not parse stops the server, naming the message type."""
        handle, path = tempfile.mkstemp(suffix=".conf")
        with os.fdopen(handle, "w") as f:
            f.write("model_config_list { config { name: 'x' base_path: '/m' } ")
        server = self.RunServer(None, None, model_config_file=path, pipe=True,
                                wait_for_server_ready=False)[0]
        stderr = server.stderr()
        self.assertNotEqual(server.proc.returncode, 0)
        self.assertIn(b"Error parsing text-format tensorflow.serving.ModelServerConfig", stderr)


def main():
    model_server_base.run_main(TfServingErrorsTest, UPSTREAM)


if __name__ == "__main__":
    main()
