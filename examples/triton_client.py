"""tritonclient's own HTTP and gRPC clients against tfserve (the Open
Inference Protocol): health, server and model metadata, inference with binary
tensors, the model repository.

    python examples/triton_client.py --http localhost:8501 --grpc localhost:8500

Prints one JSON line per protocol.
"""
import argparse
import json

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient


def run(module, url: str) -> dict:
    client = module.InferenceServerClient(url)
    as_json = {"as_json": True} if module is grpcclient else {}
    result = {
        "live": client.is_server_live(),
        "ready": client.is_server_ready(),
        "model_ready": client.is_model_ready("half_plus_three"),
        "server": client.get_server_metadata(**as_json)["name"],
        "inputs": client.get_model_metadata("multi_io", **as_json)["inputs"],
    }
    x = np.array([[1.0], [2.0], [5.0]], dtype=np.float32)
    given = module.InferInput("x", list(x.shape), "FP32")
    given.set_data_from_numpy(x, **({"binary_data": True} if module is httpclient else {}))
    wanted = [module.InferRequestedOutput("y", **({"binary_data": True} if module is httpclient else {}))]
    answer = client.infer("half_plus_three", [given], outputs=wanted)
    result["y"] = answer.as_numpy("y").ravel().tolist()
    tokens = np.array([[7, 8, 0], [9, 0, 0]], dtype=np.int64)
    given = module.InferInput("tokens", list(tokens.shape), "INT64")
    given.set_data_from_numpy(tokens)
    answer = client.infer("first_token", [given])
    result["first"] = answer.as_numpy("first").tolist()
    index = client.get_model_repository_index(**as_json)
    models = index["models"] if module is grpcclient else index
    result["repository"] = sorted({m["name"] for m in models})
    client.unload_model("adder")
    result["after_unload"] = client.is_model_ready("adder")
    client.load_model("adder")
    result["after_load"] = client.is_model_ready("adder")
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--http", default="localhost:8501")
    parser.add_argument("--grpc", default="localhost:8500")
    args = parser.parse_args()
    print(json.dumps({"http": run(httpclient, args.http), "grpc": run(grpcclient, args.grpc)}))


if __name__ == "__main__":
    main()
