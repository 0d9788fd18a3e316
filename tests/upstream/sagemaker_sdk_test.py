"""The SageMaker Python SDK (v2) against tfserve, unchanged: its local mode's
runtime client posts to `/invocations` with the endpoint's headers
(Content-Type, Accept, X-Amzn-SageMaker-Custom-Attributes), which is what the
SageMaker TensorFlow Serving container receives behind an endpoint. The cases
are the examples of the SDK's "Deploying to TensorFlow Serving Endpoints" page.

    TFSERVE_BIN=target/debug/tfserve python tests/upstream/sagemaker_sdk_test.py
"""

import json
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")

import boto3  # noqa: E402
from sagemaker.deserializers import JSONDeserializer, JSONLinesDeserializer  # noqa: E402
from sagemaker.local import LocalSession  # noqa: E402
from sagemaker.serializers import CSVSerializer, JSONLinesSerializer  # noqa: E402
from sagemaker.tensorflow import TensorFlowPredictor  # noqa: E402

import harness  # noqa: E402

UPSTREAM = "aws/sagemaker-python-sdk sagemaker/tensorflow/model.py TensorFlowPredictor (sagemaker 2.257.7)"


class SageMakerSdkTest(unittest.TestCase):
    """half_plus_three (y = x/2 + 3), tf1_half_plus_two (classify/regress), adder (version 2)."""

    @classmethod
    def setUpClass(cls):
        config = harness.repo_models_config(["half_plus_three", "tf1_half_plus_two", "adder"])
        cls.server = harness.Server(
            os.environ["TFSERVE_BIN"] + " --port=0 --rest_api_port=0 --host=127.0.0.1"
            " --model_config_file=" + config + " --default_model_name=half_plus_three",
            keep_stderr=False)
        cls.server.started.wait(60)
        if cls.server.addresses is None:
            raise AssertionError("server did not start:\n" + "".join(cls.server.lines))
        port = int(cls.server.addresses[1].rsplit(":", 1)[1])
        cls.session = LocalSession(boto_session=boto3.Session(region_name="us-east-1"))
        # Local mode's runtime client posts to localhost:<local.serving_port>/invocations.
        cls.session.config = {"local": {"local_code": True, "serving_port": port}}
        cls.session.sagemaker_runtime_client.config = cls.session.config

    @classmethod
    def tearDownClass(cls):
        cls.server.proc.kill()
        cls.server.proc.wait()

    def predictor(self, **kwargs):
        return TensorFlowPredictor("tfserve", sagemaker_session=self.session, **kwargs)

    def testPredictJson(self):
        """The page's `predictor.predict(input)` with TF Serving's REST request."""
        result = self.predictor().predict({"instances": [1.0, 2.0, 5.0]})
        self.assertEqual(result, {"predictions": [3.5, 4.0, 5.5]})

    def testPredictSimplifiedJson(self):
        """The page's simplified JSON: a one-dimensional array or a value is one
        instance, a multidimensional array several."""
        self.assertEqual(self.predictor().predict([1.0, 2.0]), {"predictions": [[3.5, 4.0]]})
        self.assertEqual(self.predictor().predict([[1.0, 2.0, 5.0], [1.0, 2.0, 5.0]]),
                         {"predictions": [[3.5, 4.0, 5.5], [3.5, 4.0, 5.5]]})
        self.assertEqual(self.predictor().predict(4.0), {"predictions": [5.0]})

    def testClassifyAndRegress(self):
        """`predictor.classify(input)` / `predictor.regress(input)` (tfs-method)."""
        predictor = self.predictor(model_name="tf1_half_plus_two")
        regress = {"signature_name": "regress_x_to_y", "examples": [{"x": 1.0}, {"x": 3.0}]}
        self.assertEqual(predictor.regress(regress), {"results": [2.5, 3.5]})
        classify = {"signature_name": "classify_x_to_y", "examples": [{"x": 1.0}]}
        self.assertEqual(predictor.classify(classify), {"results": [[["pos", 2.5], ["neg", -1.5]]]})

    def testModelNameAndVersion(self):
        """`TensorFlowPredictor(endpoint, model_name=..., model_version=...)`."""
        predictor = self.predictor(model_name="adder", model_version="2")
        self.assertEqual(predictor.predict({"instances": [1.0]}), {"predictions": [3.0]})
        missing = self.predictor(model_name="adder", model_version="1").predict({"instances": [1.0]})
        self.assertEqual(missing, {"error": "Servable not found for request: Specific(adder, 1)"})

    def testCsvSerializer(self):
        """`Predictor('endpoint-name', serializer=CSVSerializer())` with a list and CSV text."""
        predictor = self.predictor(serializer=CSVSerializer())
        self.assertEqual(predictor.predict([1.0, 2.0, 5.0]), {"predictions": [3.5, 4.0, 5.5]})
        self.assertEqual(predictor.predict("1.0\n2.0\n5.0"), {"predictions": [3.5, 4.0, 5.5]})

    def testJsonLines(self):
        """JSON Lines in and out: one instance per line; the answer is one JSON line."""
        predictor = self.predictor(serializer=JSONLinesSerializer(), deserializer=JSONLinesDeserializer())
        self.assertEqual(predictor.predict([{"x": 1.0}, {"x": 2.0}]), [{"predictions": [3.5, 4.0]}])

    def testEndpointHeaders(self):
        """What the container checks in the headers (TF Serving 2.20 generation):
        invalid custom attributes are 400 in its words; JSON Lines answers are
        typed application/json; Content-Type parameters are ignored."""
        runtime = self.session.sagemaker_runtime_client
        bad = runtime.invoke_endpoint(Body=b'{"instances": [1.0]}', EndpointName="tfserve",
                                      ContentType="application/json",
                                      CustomAttributes="tfs-model-name=../etc,tfs-method=predict")
        self.assertEqual((bad["Body"].status, json.loads(bad["Body"].data)),
                         (400, {"error": "invalid tfs-model-name"}))
        bad = runtime.invoke_endpoint(Body=b'{"instances": [1.0]}', EndpointName="tfserve",
                                      ContentType="application/json", CustomAttributes="tfs-method=explain")
        self.assertEqual(json.loads(bad["Body"].data), {"error": "invalid tfs-method"})
        lines = runtime.invoke_endpoint(Body=b"[1.0]\n[2.0]\n", EndpointName="tfserve",
                                        ContentType="application/jsonlines; charset=utf-8",
                                        Accept="application/jsonlines")
        self.assertEqual(lines["Body"].status, 200)
        self.assertEqual(lines["Body"].headers["Content-Type"], "application/json")
        self.assertEqual(json.loads(lines["Body"].data), {"predictions": [[3.5], [4.0]]})


def main():
    suite = unittest.defaultTestLoader.loadTestsFromTestCase(SageMakerSdkTest)
    result = unittest.TextTestRunner(stream=sys.stderr, verbosity=2).run(suite)
    name = lambda test: test._testMethodName  # noqa: E731
    print(json.dumps({
        "upstream": UPSTREAM,
        "ran": result.testsRun,
        "failed": [name(t) for t, _ in result.failures + result.errors],
        "skipped": {name(t): reason for t, reason in result.skipped},
    }))


if __name__ == "__main__":
    main()
