#!/usr/bin/env python3
"""A TF Serving REST client, as users already write them, pointed at tfserve.

    pip install requests
    python3 examples/tfs_client.py [http://localhost:8501]
"""
import base64
import pathlib
import sys

import requests

BASE = sys.argv[1] if len(sys.argv) > 1 else "http://localhost:8501"
ROOT = pathlib.Path(__file__).resolve().parent.parent


def predict(model, body, version=None):
    path = f"/v1/models/{model}" + (f"/versions/{version}" if version else "") + ":predict"
    response = requests.post(BASE + path, json=body, timeout=30)
    response.raise_for_status()
    return response.json()


def main():
    print("half_plus_three:", predict("half_plus_three", {"instances": [1.0, 2.0, 5.0]})["predictions"])
    print("adder v1 / latest:", predict("adder", {"instances": [1.0]}, version=1)["predictions"],
          predict("adder", {"instances": [1.0]})["predictions"])
    image = base64.b64encode((ROOT / "tests" / "data" / "gradient.png").read_bytes()).decode()
    answer = predict("image_classifier", {"instances": [{"b64": image}]})["predictions"][0]
    print("image_classifier class:", answer["classes"])
    classify = requests.post(BASE + "/v1/models/tf1_half_plus_two:classify", timeout=30,
                             json={"signature_name": "classify_x_to_y", "examples": [{"x": 1.0}]})
    print("classify:", classify.json()["results"])
    metadata = requests.get(BASE + "/v1/models/multi_io/metadata", timeout=30).json()
    inputs = metadata["metadata"]["signature_def"]["signature_def"]["serving_default"]["inputs"]
    print("multi_io inputs:", {name: spec["dtype"] for name, spec in inputs.items()})
    error = requests.post(BASE + "/v1/models/half_plus_three:predict", json={"instances": [[1, 2], [3]]}, timeout=30)
    print("ragged input:", error.status_code, error.json()["error"])


if __name__ == "__main__":
    main()
