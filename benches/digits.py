#!/usr/bin/env python3
"""Accuracy served in each precision mode, on real data with no download: a
small CNN trained here on scikit-learn's handwritten digits (`load_digits`,
shipped inside the wheel: 1,797 8×8 images, a seeded stratified 80/20 split),
exported as a SavedModel into the tfserve cache, then served by the release
binary in FP32, with `--mixed_precision bfloat16` and with `--mixed_precision
auto` (whatever mode its trial chooses on this host). For each mode: the test
split's accuracy, top-1 agreement with FP32, and the largest difference of a
class probability from FP32's. The targets: within 0.5 points of FP32's
accuracy, top-1 agreement at least 99%.

    python3 benches/digits.py
"""
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT / "benches"))
import tfvenv  # noqa: E402

SKLEARN_PIN = "scikit-learn==1.7.2"
PORT = 18720
MODES = [("fp32", []), ("bfloat16", ["--mixed_precision", "bfloat16"]),
         ("auto", ["--mixed_precision", "auto", "--model_cache_dir", tempfile.mkdtemp(prefix="tfserve-digits-")])]


def train(out):
    """The model and the test split, made once (seeded) into `out`."""
    model_dir = out / "digits_cnn"
    split = out / "digits_test.json"
    if (model_dir / "1" / "saved_model.pb").exists() and split.exists():
        return model_dir, json.loads(split.read_text())
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import keras
    import numpy as np
    import tensorflow as tf
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    images = (digits.images / 16.0).astype(np.float32)[..., None]
    x_train, x_test, y_train, y_test = train_test_split(
        images, digits.target, test_size=0.2, random_state=0, stratify=digits.target)
    keras.utils.set_random_seed(0)
    model = keras.Sequential([
        keras.Input((8, 8, 1)),
        keras.layers.Conv2D(32, 3, padding="same", activation="relu"),
        keras.layers.Conv2D(64, 3, padding="same", activation="relu"),
        keras.layers.MaxPooling2D(),
        keras.layers.Flatten(),
        keras.layers.Dense(128, activation="relu"),
        keras.layers.Dense(10, activation="softmax"),
    ])
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    model.fit(x_train, y_train, epochs=40, batch_size=32, verbose=0)
    archive = keras.export.ExportArchive()
    archive.track(model)
    archive.add_endpoint(
        name="serving_default",
        fn=lambda x: {"probabilities": model(x)},
        input_signature=[tf.TensorSpec([None, 8, 8, 1], tf.float32, name="x")],
    )
    archive.write_out(str(model_dir / "1"))
    test = {"x": x_test.tolist(), "y": y_test.tolist()}
    split.write_text(json.dumps(test))
    return model_dir, test


def served_probabilities(binary, model_dir, flags, images):
    """The served class scores of `images`; with `--mixed_precision auto`,
    once its background trial has decided on them (the first server captures
    the request, the second tries modes on it), and the mode chosen."""
    import bench
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", RUST_LOG="warn")
    auto = "auto" in flags
    if auto:
        captured = pathlib.Path(flags[flags.index("--model_cache_dir") + 1]) / "captured" / "log"
        flags = [*flags, "--capture_tfrecord_prefix", str(captured), "--capture_flush_seconds", "1"]

    def start():
        proc = subprocess.Popen([str(binary), "--host", "127.0.0.1", "--rest_api_port", str(PORT), "--port",
                                 str(PORT + 1), "--model_name", "digits", "--model_base_path", str(model_dir), *flags],
                                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        bench.wait_ready(proc, PORT, "digits")
        return proc

    def predict():
        body = json.dumps({"instances": images}).encode()
        request = urllib.request.Request(f"http://127.0.0.1:{PORT}/v1/models/digits:predict", data=body,
                                         headers={"Content-Type": "application/json"})
        return json.load(urllib.request.urlopen(request, timeout=120))["predictions"]

    proc = start()
    try:
        chosen = None
        if auto:
            chosen = bench.mode_decided(proc, PORT, "digits")
            if not chosen["tried"]:
                predict()
                while bench.captured_records(captured) < 1:
                    time.sleep(0.5)
                bench.stop(proc)
                proc = start()
                chosen = bench.mode_decided(proc, PORT, "digits")
            print(f"auto: runs {chosen['chosen']}: {chosen['reason']}")
        return predict(), chosen
    finally:
        bench.stop(proc)


def main():
    tfvenv.ensure(__file__)
    try:
        import sklearn  # noqa: F401
    except ImportError:
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check", SKLEARN_PIN],
                       check=True)
    import bench
    bench.build()
    model_dir, test = train(tfvenv.cache_root() / "bench-models")
    labels = test["y"]
    served = {}
    for mode, flags in MODES:
        served[mode], chosen = served_probabilities(bench.RELEASE / "tfserve", model_dir, flags, test["x"])
        if chosen:
            served[f"{mode} ({chosen['chosen']})"] = served.pop(mode)
    top1 = {mode: [max(range(10), key=row.__getitem__) for row in rows] for mode, rows in served.items()}
    print(f"{len(labels)} test images; model {model_dir}")
    print("| mode | accuracy | top-1 agreement with FP32 | largest probability difference |\n|---|---:|---:|---:|")
    for mode, rows in served.items():
        accuracy = sum(p == y for p, y in zip(top1[mode], labels)) / len(labels)
        agreement = sum(a == b for a, b in zip(top1[mode], top1["fp32"])) / len(labels)
        diff = max(abs(a - b) for row, base in zip(rows, served["fp32"]) for a, b in zip(row, base))
        print(f"| {mode} | {100 * accuracy:.2f}% | {100 * agreement:.2f}% | {diff:.5f} |")


if __name__ == "__main__":
    main()
