"""Port of TF Serving's
tensorflow_serving/model_servers/test_util/tensorflow_model_server_test_base.py,
pointed at the tfserve binary.

What differs from upstream, and why:
- The binary is `$TFSERVE_BIN`, and the test data is `tests/upstream/testdata`
  (TF Serving's own files, byte for byte; see its README).
- Ports: upstream picks free ports with portpicker and then binds them, which
  can race with other processes on a shared machine. Here the server binds
  port 0 for both listeners and the harness reads the bound addresses from its
  start-up line, so two runs never collide.
- `--grpc_socket_path` is a fresh path per server instead of the fixed
  `/tmp/tf-serving.sock`, for the same reason.
- `extra_args` adds flags a test needs beyond upstream's (tfserve's own).
- `pipe=subprocess.PIPE` servers are waited for and their stderr kept, since
  the harness reads every server's stderr to learn its addresses.
Everything else (flags, requests, assertions) is upstream's.
"""

import json
import sys
import unittest
import os
import tempfile
import time
import urllib.request

import grpc
import tensorflow as tf
from harness import Server, repo_models_config  # noqa: F401
from tensorflow.core.framework import types_pb2
from tensorflow.python.saved_model import signature_constants
from tensorflow_serving.apis import predict_pb2
from tensorflow_serving.apis import prediction_service_pb2_grpc

RPC_TIMEOUT = 5.0
HTTP_REST_TIMEOUT_MS = 5000
WAIT_FOR_SERVER_READY_INT_SECS = 60
TESTDATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "testdata")


def SetVirtualCpus(num_virtual_cpus):
    """Create virtual CPU devices if they haven't yet been created."""
    physical_devices = tf.config.experimental.list_physical_devices("CPU")
    configs = tf.config.experimental.get_virtual_device_configuration(physical_devices[0])
    if configs is None:
        virtual_devices = [tf.config.experimental.VirtualDeviceConfiguration()
                           for _ in range(num_virtual_cpus)]
        tf.config.experimental.set_virtual_device_configuration(physical_devices[0],
                                                                virtual_devices)
    elif len(configs) < num_virtual_cpus:
        raise RuntimeError("Already configured with %d < %d virtual CPUs"
                           % (len(configs), num_virtual_cpus))


def WaitForServerReady(port):
    """Waits for a server on the localhost to become ready (upstream's probe)."""
    for _ in range(0, WAIT_FOR_SERVER_READY_INT_SECS):
        request = predict_pb2.PredictRequest()
        request.model_spec.name = "intentionally_missing_model"
        try:
            channel = grpc.insecure_channel("localhost:{}".format(port))
            stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
            stub.Predict(request, RPC_TIMEOUT)
        except grpc.RpcError as error:
            # Missing model error will have details containing 'Servable'.
            if "Servable" in (error.details() or ""):
                return
        time.sleep(1)
    raise AssertionError("server on port {} never became ready".format(port))


def CallREST(url, req, max_attempts=60):
    """Returns HTTP response body from a REST API call."""
    for attempt in range(max_attempts):
        try:
            json_data = json.dumps(req).encode("utf-8") if req is not None else None
            resp = urllib.request.urlopen(urllib.request.Request(url, data=json_data))
            resp_data = resp.read()
            resp.close()
            return resp_data
        except Exception:  # pylint: disable=broad-except
            if attempt == max_attempts - 1:
                raise
            time.sleep(1)


def SortedObject(obj):
    """Returns sorted object (with nested list/dictionaries)."""
    if isinstance(obj, dict):
        return sorted((k, SortedObject(v)) for k, v in obj.items())
    if isinstance(obj, list):
        return sorted(SortedObject(x) for x in obj)
    if isinstance(obj, tuple):
        return list(sorted(SortedObject(x) for x in obj))
    return obj


def GetArgsKey(*args, **kwargs):
    return args + tuple(sorted(kwargs.items()))


class TensorflowModelServerTestBase(tf.test.TestCase):
    """Upstream's base class: servers started once per set of arguments."""

    model_servers_dict = {}

    @classmethod
    def RunServer(cls, model_name, model_path, model_config_file=None,
                  monitoring_config_file=None, batching_parameters_file=None,
                  grpc_channel_arguments="", wait_for_server_ready=True, pipe=None,
                  model_config_file_poll_period=None, extra_args=""):
        """Run the server with upstream's flags; (process, grpc, rest) addresses."""
        args_key = GetArgsKey(**locals())
        if args_key in TensorflowModelServerTestBase.model_servers_dict:
            return TensorflowModelServerTestBase.model_servers_dict[args_key]
        socket_dir = tempfile.mkdtemp(prefix="tfserve-uds-")
        socket_path = os.path.join(socket_dir, "tf-serving.sock")
        command = os.environ["TFSERVE_BIN"]
        command += " --port=0 --rest_api_port=0 --host=127.0.0.1"
        command += " --rest_api_timeout_in_ms=" + str(HTTP_REST_TIMEOUT_MS)
        command += " --grpc_socket_path=" + socket_path
        if model_config_file:
            command += " --model_config_file=" + model_config_file
        elif model_path:
            command += " --model_name=" + model_name
            command += " --model_base_path=" + model_path
        else:
            raise ValueError("Both model_config_file and model_path cannot be empty!")
        if monitoring_config_file:
            command += " --monitoring_config_file=" + monitoring_config_file
        if model_config_file_poll_period is not None:
            command += " --model_config_file_poll_wait_seconds=" + str(model_config_file_poll_period)
        if batching_parameters_file:
            command += " --enable_batching"
            command += " --batching_parameters_file=" + batching_parameters_file
        if extra_args:
            command += " " + extra_args
        effective = ",".join(a for a in [grpc_channel_arguments, "grpc.so_reuseaddr=1"] if a)
        command += " --grpc_channel_arguments=" + effective
        server = Server(command, keep_stderr=pipe is not None)
        if pipe is not None:
            hostports = (server, None, None)
        else:
            server.started.wait(WAIT_FOR_SERVER_READY_INT_SECS)
            if server.addresses is None:
                raise AssertionError("server did not start:\n" + "".join(server.lines))
            grpc_addr, rest_addr = server.addresses
            if wait_for_server_ready:
                WaitForServerReady(grpc_addr.rsplit(":", 1)[1])
            hostports = (server.proc, grpc_addr, rest_addr)
        if hostports[1] is not None:
            cls.socket_paths[hostports[1]] = socket_path
        TensorflowModelServerTestBase.model_servers_dict[args_key] = hostports
        return hostports

    socket_paths = {}

    @classmethod
    def SocketPathOf(cls, grpc_address):
        """The Unix socket of the server whose gRPC port is `grpc_address`."""
        return cls.socket_paths[grpc_address]

    def VerifyPredictRequest(self, model_server_address, expected_output, expected_version,
                             model_name="default", specify_output=True, batch_input=False,
                             signature_name=signature_constants.DEFAULT_SERVING_SIGNATURE_DEF_KEY,
                             rpc_timeout=RPC_TIMEOUT, channel_options=None):
        """Send PredictionService.Predict request and verify output."""
        request = predict_pb2.PredictRequest()
        request.model_spec.name = model_name
        request.model_spec.signature_name = signature_name
        request.inputs["x"].dtype = types_pb2.DT_FLOAT
        request.inputs["x"].float_val.append(2.0)
        dim = request.inputs["x"].tensor_shape.dim.add()
        dim.size = 1
        if batch_input:
            request.inputs["x"].tensor_shape.dim.add().size = 1
        if specify_output:
            request.output_filter.append("y")
        channel = grpc.insecure_channel(model_server_address, options=channel_options)
        stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
        result = stub.Predict(request, rpc_timeout)
        self.assertTrue("y" in result.outputs)
        self.assertEqual(types_pb2.DT_FLOAT, result.outputs["y"].dtype)
        self.assertEqual(1, len(result.outputs["y"].float_val))
        self.assertEqual(expected_output, result.outputs["y"].float_val[0])
        self._VerifyModelSpec(result.model_spec, request.model_spec.name,
                              signature_name, expected_version)

    def _GetSavedModelBundlePath(self):
        return os.path.join(self.testdata_dir, "saved_model_half_plus_two_cpu")

    def _GetModelVersion(self, model_path):
        return int(os.listdir(model_path)[0])

    def _GetSavedModelHalfPlusTwoTf2(self):
        return os.path.join(self.testdata_dir, "saved_model_half_plus_two_tf2_cpu")

    def _GetSavedModelHalfPlusThreePath(self):
        return os.path.join(self.testdata_dir, "saved_model_half_plus_three")

    def _GetGoodModelConfigTemplate(self):
        return os.path.join(self.testdata_dir, "good_model_config.txt")

    def _GetGoodModelConfigFile(self):
        return os.path.join(self.temp_dir, "good_model_config.conf")

    def _GetBadModelConfigFile(self):
        return os.path.join(self.testdata_dir, "bad_model_config.txt")

    def _GetBatchingParametersFile(self):
        return os.path.join(self.testdata_dir, "batching_config.txt")

    def _GetModelMetadataFile(self):
        return os.path.join(self.testdata_dir, "half_plus_two_model_metadata.json")

    def _GetMonitoringConfigFile(self):
        return os.path.join(self.testdata_dir, "monitoring_config.txt")

    def _VerifyModelSpec(self, actual_model_spec, exp_model_name, exp_signature_name, exp_version):
        self.assertEqual(actual_model_spec.name, exp_model_name)
        self.assertEqual(actual_model_spec.signature_name, exp_signature_name)
        self.assertEqual(actual_model_spec.version.value, exp_version)

    def _TestPredict(self, model_path, batching_parameters_file=None,
                     signature_name=signature_constants.DEFAULT_SERVING_SIGNATURE_DEF_KEY):
        model_server_address = TensorflowModelServerTestBase.RunServer(
            "default", model_path, batching_parameters_file=batching_parameters_file)[1]
        expected_version = self._GetModelVersion(model_path)
        self.VerifyPredictRequest(model_server_address, expected_output=3.0,
                                  expected_version=expected_version,
                                  signature_name=signature_name)
        self.VerifyPredictRequest(model_server_address, expected_output=3.0, specify_output=False,
                                  expected_version=expected_version, signature_name=signature_name)


def run_main(case, upstream):
    """Runs a TestCase's tests (or those named on the command line); the last
    stdout line is the JSON summary tests/it/tensorflow/upstream.rs reads."""
    suite = unittest.defaultTestLoader.loadTestsFromTestCase(case)
    if len(sys.argv) > 1:
        wanted = set(sys.argv[1:])
        suite = unittest.TestSuite(t for t in suite if t._testMethodName in wanted)
    result = unittest.TextTestRunner(stream=sys.stderr, verbosity=2).run(suite)
    name = lambda test: test._testMethodName  # noqa: E731
    print(json.dumps({
        "upstream": upstream,
        "ran": result.testsRun,
        "failed": [name(t) for t, _ in result.failures + result.errors],
        # tf.test.TestCase's own `test_session` helper is not a test.
        "skipped": {name(t): reason for t, reason in result.skipped if reason != "Not a test."},
    }))
