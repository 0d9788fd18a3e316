#!/usr/bin/env python3
"""Served throughput per precision mode: ResNet-50 (random weights) over gRPC
at 32 concurrent callers (`tfserve-bench grpc`), batching on (32 rows, 2 ms),
FP32 and `--mixed_precision bfloat16` alternated on fresh servers, each
measured after a 3 s warm-up. Needs a CPU with AVX512_BF16, AMX or ARM's BF16
(elsewhere the bfloat16 server refuses the model, saying what the host lacks).

    python3 benches/precision.py                    # 2 rounds of 12 s
    python3 benches/precision.py --rounds 3 --seconds 20
"""
import argparse
import json
import os
import pathlib
import subprocess
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import bench  # noqa: E402

PORT = 18700
MODES = [("fp32", []), ("bfloat16", ["--mixed_precision", "bfloat16"])]


def serve(model_dir, flags):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", RUST_LOG="warn")
    proc = subprocess.Popen([str(bench.RELEASE / "tfserve"), "--host", "127.0.0.1", "--rest_api_port", str(PORT),
                             "--port", str(PORT + 1), "--model_name", "resnet50", "--model_base_path", str(model_dir),
                             "--enable_batching", "--max_batch_size", "32", "--batch_timeout_micros", "2000", *flags],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    bench.wait_ready(proc, PORT, "resnet50")
    return proc


def grpc(model_dir, seconds):
    out = bench.run([str(bench.RELEASE / "tfserve-bench"), "grpc", "--model-dir", str(model_dir), "--model", "resnet50",
                     "--target", f"http://127.0.0.1:{PORT + 1}", "--concurrency", "32", "--seconds", str(seconds)],
                    capture_output=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seconds", type=int, default=12)
    args = parser.parse_args()
    bench.build()
    model_dir = bench.model_dirs(["resnet50"])["resnet50"]
    rows = []
    for round_ in range(1, args.rounds + 1):
        for mode, flags in MODES:
            proc = serve(model_dir, flags)
            try:
                grpc(model_dir, 3)
                result = grpc(model_dir, args.seconds)
            finally:
                bench.stop(proc)
            bench.log(f"round {round_} {mode}: {result['rps']:.1f} req/s, p50 {result['p50_ms']:.0f} ms")
            rows.append((round_, mode, result))
    print("| round | mode | req/s | p50 ms | p99 ms |\n|---:|---|---:|---:|---:|")
    for round_, mode, result in rows:
        print(f"| {round_} | {mode} | {result['rps']:.1f} | {result['p50_ms']:.0f} | {result['p99_ms']:.0f} |")


if __name__ == "__main__":
    main()
