#!/usr/bin/env python3
"""Served throughput per precision mode: ResNet-50 (random weights), or with
`--model bert_base` a transformer encoder of BERT-base's shape (128 tokens),
over gRPC at 32 concurrent callers (`--concurrency 1,32` for more rows;
`tfserve-bench grpc`; `--protocols grpc,rest` adds TF Serving's REST API,
one instance per request, under `wrk`), batching on (32 rows, 2 ms),
FP32, `--mixed_precision bfloat16` (also with oneDNN's
TF_ONEDNN_ASSUME_FROZEN_WEIGHTS=1) and `--mixed_precision auto` alternated on
fresh servers, each measured after a 3 s warm-up. `auto` serves FP32 at once
and decides in the background on real requests: the first round's server
captures 320 requests (`--capture_tfrecord_prefix`, the model ships no warm-up
requests), the next start runs the trial on them (its time to decide and its
choice are printed) and is measured once it has switched; the decision is kept
in a fresh cache folder, so later rounds start in the chosen mode. Needs a CPU with
AVX512_BF16, AMX or ARM's BF16 (elsewhere the bfloat16 server refuses the
model, saying what the host lacks). Beside each round, the raw C API
ceiling per mode (`tfserve-bench raw`, session runs in a loop at batch 1 and 32).

    python3 benches/precision.py                    # 2 rounds of 12 s
    python3 benches/precision.py --rounds 3 --seconds 20
    python3 benches/precision.py --model bert_base --concurrency 1,32 --rounds 1
"""
import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import bench  # noqa: E402

PORT = 18700
CACHE = tempfile.mkdtemp(prefix="tfserve-precision-bench-")
FROZEN = {"TF_ONEDNN_ASSUME_FROZEN_WEIGHTS": "1"}
MODES = [("fp32", [], {}), ("bfloat16", ["--mixed_precision", "bfloat16"], {}),
         ("bfloat16, TF_ONEDNN_ASSUME_FROZEN_WEIGHTS=1", ["--mixed_precision", "bfloat16"], FROZEN),
         ("auto", ["--mixed_precision", "auto", "--model_cache_dir", CACHE,
                   "--capture_tfrecord_prefix", f"{CACHE}/captured/log", "--capture_flush_seconds", "1"], {})]
# Rows of class scores `auto` needs to judge their top class (299 at 99%), and some.
CAPTURED = 320


def serve(model, model_dir, flags, extra_env):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", RUST_LOG="warn", **extra_env)
    proc = subprocess.Popen([str(bench.RELEASE / "tfserve"), "--host", "127.0.0.1", "--rest_api_port", str(PORT),
                             "--port", str(PORT + 1), "--model_name", model, "--model_base_path", str(model_dir),
                             "--enable_batching", "--max_batch_size", "32", "--batch_timeout_micros", "2000", *flags],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    bench.wait_ready(proc, PORT, model, timeout=1800)
    return proc


RAW_MODES = [("fp32", []), ("bfloat16", ["--mixed-precision", "bfloat16"])]


def raw(model_dir, flags, seconds):
    out = bench.run([str(bench.RELEASE / "tfserve-bench"), "raw", "--model-dir", str(model_dir), "--batches", "1,32",
                     "--seconds", str(seconds), *flags], capture_output=True).stdout
    lines = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    return {line["batch"]: line["samples_per_s"] for line in lines}


def grpc(model, model_dir, seconds, concurrency):
    out = bench.run([str(bench.RELEASE / "tfserve-bench"), "grpc", "--model-dir", str(model_dir), "--model", model,
                     "--target", f"http://127.0.0.1:{PORT + 1}", "--concurrency", str(concurrency),
                     "--seconds", str(seconds)],
                    capture_output=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seconds", type=int, default=12)
    parser.add_argument("--model", choices=["resnet50", "bert_base"], default="resnet50")
    parser.add_argument("--concurrency", default="32", help="callers, comma-separated (e.g. 1,32)")
    parser.add_argument("--protocols", default="grpc", help="grpc, rest, or both: grpc,rest")
    args = parser.parse_args()
    protocols = args.protocols.split(",")
    if "rest" in protocols:
        bench.ensure_wrk()
    work = pathlib.Path(tempfile.mkdtemp(prefix="tfserve-precision-"))
    script, body = work / "post.lua", work / "body.json"
    script.write_text(bench.WRK_SCRIPT)
    concurrencies = [int(c) for c in args.concurrency.split(",")]
    bench.build()
    model = args.model
    model_dir = bench.model_dirs([model])[model]
    bench.body_for(model, body)

    def load(protocol, concurrency, seconds):
        if protocol == "grpc":
            return grpc(model, model_dir, seconds, concurrency)
        url = f"http://127.0.0.1:{PORT}/v1/models/{model}:predict"
        return bench.wrk(url, body, concurrency, seconds, script)

    rows, raw_rows = [], []
    for round_ in range(1, args.rounds + 1):
        for mode, flags in RAW_MODES:
            samples = raw(model_dir, flags, args.seconds / 2)
            bench.log(f"round {round_} raw {mode}: {samples}")
            raw_rows.append((round_, mode, samples))
        for mode, flags, extra_env in MODES:
            started = time.time()
            proc = serve(model, model_dir, flags, extra_env)
            ready = time.time() - started
            try:
                if mode == "auto":
                    chosen = bench.mode_decided(proc, PORT, model)
                    if not chosen["tried"]:
                        # No real requests yet: capture some, then start again to try modes on them.
                        while bench.captured_records(f"{CACHE}/captured/log") < CAPTURED:
                            load(protocols[0], concurrencies[-1], 3)
                        bench.stop(proc)
                        proc = serve(model, model_dir, flags, extra_env)
                        chosen = bench.mode_decided(proc, PORT, model)
                    bench.log(f"round {round_} auto: ready after {ready:.0f} s, decided after "
                              f"{time.time() - started:.0f} s: runs {chosen['chosen']} ({chosen['reason']}; "
                              f"reused: {chosen['reused']})")
                    mode = f"auto ({chosen['chosen']})"
                load(protocols[0], concurrencies[-1], 3)
                for protocol in protocols:
                    for concurrency in concurrencies:
                        result = load(protocol, concurrency, args.seconds)
                        bench.log(f"round {round_} {mode} {protocol} c={concurrency}: {result['rps']:.1f} req/s, "
                                  f"p50 {result['p50_ms']:.0f} ms")
                        rows.append((round_, mode, protocol, concurrency, result))
            finally:
                bench.stop(proc)
    print(f"{model}\n")
    print("| round | raw C API | samples/s at batch 1 | at batch 32 |\n|---:|---|---:|---:|")
    for round_, mode, samples in raw_rows:
        print(f"| {round_} | {mode} | {samples.get(1, 0):.1f} | {samples.get(32, 0):.1f} |")
    print()
    print("| round | served | protocol | callers | req/s | p50 ms | p99 ms |\n|---:|---|---|---:|---:|---:|---:|")
    for round_, mode, protocol, concurrency, result in rows:
        print(f"| {round_} | {mode} | {protocol} | {concurrency} | {result['rps']:.1f} | {result['p50_ms']:.0f} "
              f"| {result['p99_ms']:.0f} |")


if __name__ == "__main__":
    main()
