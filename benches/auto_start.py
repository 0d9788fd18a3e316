#!/usr/bin/env python3
"""How soon `--mixed_precision auto` serves, against a plain start, and how
long its background trials take to decide: three models (mnist_cnn,
lossy_in_bfloat16 and, with `--resnet50`, make_models.py's ResNet-50, else a
second mnist_cnn), each with 320 rows of warm-up requests (`tfserve-bench
warmup`, 10 records of 32 rows), batched to sizes 1, 8 and 32
(so XLA is a candidate on the CPU too), on fresh servers, plain and `auto`
alternated for `--rounds`, each `auto` start with a fresh decision cache.
Times are from process start: "ready" when every model's status is
AVAILABLE, "decided" when the dashboard shows every trial decided. While the
trials run, a fourth model is added over the management API
(POST /tfserve/models) and timed, and readiness (`/v2/health/ready`) is
polled throughout: the script fails if it ever answers other than 200.

    python3 benches/auto_start.py --rounds 3
    python3 benches/auto_start.py --rounds 1 --resnet50
"""
import argparse
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import bench  # noqa: E402

PORT = 18760
MODELS = {"mnist": bench.ROOT / "models" / "mnist_cnn", "second": bench.ROOT / "models" / "mnist_cnn",
          "lossy": bench.ROOT / "models" / "lossy_in_bfloat16"}
BATCHING = "max_batch_size { value: 32 }\nbatch_timeout_micros { value: 2000 }\n" + \
    "".join(f"allowed_batch_sizes: {size}\n" for size in (1, 8, 32))


def prepare(work):
    """The models' folders with their warm-up files, and the config serving them."""
    entries = []
    for name, source in [*MODELS.items(), ("added", MODELS["mnist"])]:
        target = work / "models" / name
        shutil.copytree(source, target)
        bench.run([str(bench.RELEASE / "tfserve-bench"), "warmup", "--model-dir", str(target), "--model", name,
                   "--rows", "32", "--records", "10",
                   "--out", str(target / "1" / "assets.extra" / "tf_serving_warmup_requests")])
        if name in MODELS:
            entries.append(f'config {{ name: "{name}" base_path: "{target}" model_platform: "tensorflow" }}')
    config = work / "models.config"
    config.write_text("model_config_list {\n" + "\n".join(entries) + "\n}\n")
    batching = work / "batching.config"
    batching.write_text(BATCHING)
    return config, batching


def ready_status():
    with urllib.request.urlopen(f"http://127.0.0.1:{PORT}/v2/health/ready", timeout=10) as answer:
        return answer.status


def start(work, config, batching, auto):
    flags = ["--mixed_precision", "auto", "--model_cache_dir", tempfile.mkdtemp(dir=work)] if auto else []
    return subprocess.Popen([str(bench.RELEASE / "tfserve"), "--host", "127.0.0.1", "--rest_api_port", str(PORT),
                             "--port", str(PORT + 1), "--model_config_file", str(config), "--enable_batching",
                             "--batching_parameters_file", str(batching), "--model_roots", str(work / "models"),
                             *flags], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", RUST_LOG="warn"))


def round_of(work, config, batching, auto):
    began = time.time()
    proc = start(work, config, batching, auto)
    try:
        for name in MODELS:
            bench.wait_ready(proc, PORT, name)
        ready = time.time() - began
        result = {"ready_s": round(ready, 2)}
        if not auto:
            return result
        not_ready = []
        watching = True

        def watch():
            while watching:
                try:
                    if ready_status() != 200:
                        not_ready.append(time.time() - began)
                except OSError as error:
                    not_ready.append(str(error))
                time.sleep(0.2)
        watcher = threading.Thread(target=watch)
        watcher.start()
        posted = time.time()
        body = json.dumps({"name": "added", "base_path": str(work / "models" / "added")}).encode()
        request = urllib.request.Request(f"http://127.0.0.1:{PORT}/tfserve/models", data=body,
                                         headers={"Content-Type": "application/json"})
        urllib.request.urlopen(request, timeout=600).read()
        result["management_load_s"] = round(time.time() - posted, 2)
        chosen = {}
        for name in [*MODELS, "added"]:
            mode = bench.mode_decided(proc, PORT, name)
            chosen[name] = f"{mode['chosen']} ({mode['reason']})"
        result["decided_s"] = round(time.time() - began, 2)
        watching = False
        watcher.join()
        if not_ready:
            raise RuntimeError(f"readiness dropped while the trials ran: {not_ready}")
        result["modes"] = chosen
        return result
    finally:
        bench.stop(proc)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--resnet50", action="store_true", help="ResNet-50 in place of the second mnist_cnn")
    args = parser.parse_args()
    bench.build()
    if args.resnet50:
        del MODELS["second"]
        MODELS["resnet50"] = bench.model_dirs(["resnet50"])["resnet50"]
    work = pathlib.Path(tempfile.mkdtemp(prefix="tfserve-auto-start-"))
    try:
        config, batching = prepare(work)
        print("| round | start | ready (s) | management load during the trials (s) | all decided (s) |")
        print("|---:|---|---:|---:|---:|")
        modes = None
        for round_ in range(1, args.rounds + 1):
            for auto in (False, True):
                result = round_of(work, config, batching, auto)
                bench.log(f"round {round_} {'auto' if auto else 'plain'}: {result}")
                print(f"| {round_} | {'auto' if auto else 'plain'} | {result['ready_s']} | "
                      f"{result.get('management_load_s', '–')} | {result.get('decided_s', '–')} |")
                modes = result.get("modes", modes)
        print("\nModes chosen (last round):")
        for name, mode in (modes or {}).items():
            print(f"- {name}: {mode}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
