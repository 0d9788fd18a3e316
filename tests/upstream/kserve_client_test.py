"""KServe's own Python SDK clients (`kserve`: InferenceRESTClient for the v1
and v2 protocols, InferenceGRPCClient) against tfserve, unchanged.

    TFSERVE_BIN=target/debug/tfserve python tests/upstream/kserve_client_test.py
"""

import asyncio
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402
from kserve import InferenceGRPCClient, InferenceRESTClient, InferInput, InferRequest  # noqa: E402
from kserve.inference_client import RESTConfig  # noqa: E402

import model_server_base  # noqa: E402
from model_server_base import TensorflowModelServerTestBase  # noqa: E402

UPSTREAM = "kserve/kserve python/kserve/kserve/inference_client.py (kserve 0.21.0)"


def run(coroutine):
    return asyncio.run(coroutine)


class KServeClientTest(TensorflowModelServerTestBase):
    """half_plus_three from models/: y = x/2 + 3."""

    @classmethod
    def setUpClass(cls):
        config = model_server_base.repo_models_config(["half_plus_three"])
        _, cls.grpc_address, cls.rest_address = cls.RunServer(None, None, model_config_file=config)
        cls.base = "http://" + cls.rest_address

    def testRestClientV2(self):
        """InferenceRESTClient(protocol="v2"): health, model ready, JSON and binary infer."""
        async def session():
            client = InferenceRESTClient(RESTConfig(protocol="v2", retries=0))
            try:
                live = await client.is_server_live(self.base)
                ready = await client.is_server_ready(self.base)
                model_ready = await client.is_model_ready(self.base, "half_plus_three")
                unknown_ready = await client.is_model_ready(self.base, "nope")
                given = InferInput("x", [3], "FP32")
                given.set_data_from_numpy(np.array([1.0, 2.0, 5.0], dtype=np.float32), binary_data=False)
                answer = await client.infer(self.base, InferRequest("half_plus_three", [given]),
                                            model_name="half_plus_three")
                binary = InferInput("x", [2], "FP32")
                binary.set_data_from_numpy(np.array([4.0, 6.0], dtype=np.float32), binary_data=True)
                binary_answer = await client.infer(
                    self.base, InferRequest("half_plus_three", [binary], parameters={"binary_data_output": True}),
                    model_name="half_plus_three")
                return (live, ready, model_ready, unknown_ready, answer.outputs[0].as_numpy().tolist(),
                        binary_answer.outputs[0].as_numpy().tolist())
            finally:
                await client.close()
        live, ready, model_ready, unknown_ready, y, binary_y = run(session())
        self.assertEqual((live, ready, model_ready, unknown_ready), (True, True, True, False))
        self.assertEqual(y, [3.5, 4.0, 5.5])
        self.assertEqual(binary_y, [5.0, 6.0])

    def testRestClientV1(self):
        """InferenceRESTClient(protocol="v1"): liveness at the root, `:predict`."""
        async def session():
            client = InferenceRESTClient(RESTConfig(protocol="v1", retries=0))
            try:
                live = await client.is_server_live(self.base)
                answer = await client.infer(self.base, {"instances": [1.0, 2.0]},
                                            model_name="half_plus_three")
                return live, answer
            finally:
                await client.close()
        live, answer = run(session())
        self.assertTrue(live)
        self.assertEqual(answer, {"predictions": [3.5, 4.0]})

    def testGrpcClient(self):
        """InferenceGRPCClient: ServerLive, ServerReady, ModelReady, ModelInfer."""
        async def session():
            client = InferenceGRPCClient(self.grpc_address)
            try:
                given = InferInput("x", [2], "FP32")
                given.set_data_from_numpy(np.array([2.0, 4.0], dtype=np.float32))
                answer = await client.infer(InferRequest("half_plus_three", [given]))
                return (await client.is_server_live(), await client.is_server_ready(),
                        await client.is_model_ready("half_plus_three"),
                        answer.outputs[0].as_numpy().tolist())
            finally:
                await client.close()
        self.assertEqual(run(session()), (True, True, True, [4.0, 5.0]))


def main():
    model_server_base.run_main(KServeClientTest, UPSTREAM)


if __name__ == "__main__":
    main()
