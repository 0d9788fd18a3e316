"""The Open Inference Protocol (kserve/open-inference-protocol, REST and gRPC)
against tfserve, with `tritonclient` over HTTP and gRPC unchanged and plain
`requests` for the JSON edge cases; KServe's own SDK clients are in
kserve_client_test.py (their protos clash with tritonclient's in one process).
Each test names the spec section or the peer source it follows.

    TFSERVE_BIN=target/debug/tfserve python tests/upstream/open_inference_protocol_test.py
"""

import json
import os
import struct
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402
import requests  # noqa: E402
import tritonclient.grpc as grpcclient  # noqa: E402
import tritonclient.grpc.service_pb2 as triton_pb2  # noqa: E402
import tritonclient.grpc.service_pb2_grpc as triton_grpc  # noqa: E402
import tritonclient.http as httpclient  # noqa: E402
from tritonclient.utils import InferenceServerException  # noqa: E402

import grpc  # noqa: E402
import model_server_base  # noqa: E402
from model_server_base import TensorflowModelServerTestBase  # noqa: E402

UPSTREAM = "kserve/open-inference-protocol (spec), kserve/kserve and triton-inference-server (sources named per test)"


class OpenInferenceProtocolTest(TensorflowModelServerTestBase):
    """half_plus_three (x: FP32 [-1] → y = x/2 + 3) and multi_io from models/."""

    @classmethod
    def setUpClass(cls):
        cls.config = model_server_base.repo_models_config(["half_plus_three", "multi_io"])
        _, cls.grpc_address, cls.rest_address = cls.RunServer(None, None, model_config_file=cls.config)
        cls.base = "http://" + cls.rest_address

    def x_input(self, module, values):
        given = module.InferInput("x", [len(values)], "FP32")
        given.set_data_from_numpy(np.array(values, dtype=np.float32))
        return given

    def testHealthBodies(self):
        """inference_rest.md "Server Live" / "Server Ready"; KServe v2_endpoints.py."""
        live = requests.get(self.base + "/v2/health/live", timeout=10)
        self.assertEqual((live.status_code, live.json()), (200, {"live": True}))
        ready = requests.get(self.base + "/v2/health/ready", timeout=10)
        self.assertEqual((ready.status_code, ready.json()), (200, {"ready": True}))

    def testModelReadyForUnknownModelIs404(self):
        """KServe dataplane.model_ready: ModelNotFound → 404 "Model with name X does not exist."."""
        answer = requests.get(self.base + "/v2/models/nope/ready", timeout=10)
        self.assertEqual(answer.status_code, 404)
        self.assertEqual(answer.json(), {"error": "Model with name nope does not exist."})
        answer = requests.get(self.base + "/v2/models/half_plus_three/versions/7/ready", timeout=10)
        self.assertEqual(answer.status_code, 404)
        ready = requests.get(self.base + "/v2/models/half_plus_three/ready", timeout=10)
        self.assertEqual(ready.json(), {"name": "half_plus_three", "ready": True})

    def testDuplicateRequestedOutputIsRefused(self):
        """Triton core infer_request.cc: "output 'y' already exists in request" (REST and gRPC)."""
        for module, url in ((httpclient, self.rest_address), (grpcclient, self.grpc_address)):
            client = module.InferenceServerClient(url)
            outputs = [module.InferRequestedOutput("y"), module.InferRequestedOutput("y")]
            with self.assertRaises(InferenceServerException) as raised:
                client.infer("half_plus_three", [self.x_input(module, [1.0])], outputs=outputs)
            self.assertIn("output 'y' already exists in request", raised.exception.message())
            if module is httpclient:
                self.assertEqual(raised.exception.status(), "400")
            else:
                self.assertEqual(raised.exception.status(), "StatusCode.INVALID_ARGUMENT")

    def testOutputBinaryDataOverridesRequestDefault(self):
        """Triton http_server.cc / extension_binary_data.md: an output's own
        "binary_data" wins over "binary_data_output"."""
        body = {"inputs": [{"name": "x", "shape": [2], "datatype": "FP32", "data": [1.0, 2.0]}],
                "outputs": [{"name": "y", "parameters": {"binary_data": False}}],
                "parameters": {"binary_data_output": True}}
        answer = requests.post(self.base + "/v2/models/half_plus_three/infer", json=body, timeout=10)
        self.assertEqual(answer.status_code, 200, answer.text)
        self.assertNotIn("Inference-Header-Content-Length", answer.headers)
        self.assertEqual(answer.json()["outputs"][0]["data"], [3.5, 4.0])
        # Without outputs listed, binary_data_output makes every output binary.
        del body["outputs"]
        answer = requests.post(self.base + "/v2/models/half_plus_three/infer", json=body, timeout=10)
        length = int(answer.headers["Inference-Header-Content-Length"])
        header = json.loads(answer.content[:length])
        self.assertEqual(header["outputs"][0]["parameters"], {"binary_data_size": 8})
        self.assertEqual(struct.unpack("<2f", answer.content[length:]), (3.5, 4.0))

    def testRawBinaryRequest(self):
        """Triton extension_binary_data.md "Raw Binary Request": with
        Inference-Header-Content-Length: 0 the whole body is the one input."""
        answer = requests.post(self.base + "/v2/models/half_plus_three/infer",
                               data=struct.pack("<3f", 1.0, 2.0, 5.0),
                               headers={"Inference-Header-Content-Length": "0",
                                        "Content-Type": "application/octet-stream"}, timeout=10)
        self.assertEqual(answer.status_code, 200, answer.text)
        length = int(answer.headers["Inference-Header-Content-Length"])
        header = json.loads(answer.content[:length])
        self.assertEqual(header["outputs"][0]["shape"], [3])
        self.assertEqual(struct.unpack("<3f", answer.content[length:]), (3.5, 4.0, 5.5))
        # A model with several inputs cannot take a raw body.
        refused = requests.post(self.base + "/v2/models/multi_io/infer", data=b"\0" * 8,
                                headers={"Inference-Header-Content-Length": "0"}, timeout=10)
        self.assertEqual(refused.status_code, 400)
        self.assertIn("Raw request must only have 1 input", refused.json()["error"])

    def testContentsAndRawInputContentsTogetherAreRefused(self):
        """Triton infer_handler.cc: INVALID_ARGUMENT "contents field must not be
        specified when using raw_input_contents ..."."""
        stub = triton_grpc.GRPCInferenceServiceStub(grpc.insecure_channel(self.grpc_address))
        request = triton_pb2.ModelInferRequest(model_name="half_plus_three")
        given = request.inputs.add(name="x", datatype="FP32", shape=[1])
        given.contents.fp32_contents.append(1.0)
        request.raw_input_contents.append(struct.pack("<f", 1.0))
        with self.assertRaises(grpc.RpcError) as raised:
            stub.ModelInfer(request, timeout=10)
        self.assertEqual(raised.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertEqual(raised.exception.details(),
                         "contents field must not be specified when using raw_input_contents "
                         "for 'x' for model 'half_plus_three'")

    def testTritonClientsEndToEnd(self):
        """tritonclient HTTP and gRPC: health, metadata, binary inference."""
        for module, url in ((httpclient, self.rest_address), (grpcclient, self.grpc_address)):
            client = module.InferenceServerClient(url)
            self.assertTrue(client.is_server_live())
            self.assertTrue(client.is_server_ready())
            self.assertTrue(client.is_model_ready("half_plus_three"))
            self.assertFalse(client.is_model_ready("nope"))
            answer = client.infer("half_plus_three", [self.x_input(module, [1.0, 3.0])])
            self.assertEqual(answer.as_numpy("y").tolist(), [3.5, 4.5])


def main():
    model_server_base.run_main(OpenInferenceProtocolTest, UPSTREAM)


if __name__ == "__main__":
    main()
