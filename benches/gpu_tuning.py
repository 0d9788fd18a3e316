#!/usr/bin/env python3
"""Which batching and TensorFlow GPU settings feed a GPU best, in one run:
the same gRPC (c=32, c=128) and REST (c=128) load as `gpu_host.py` against
servers that differ in one setting each (batch threads, TensorFlow's GPU
launch threads, its inter-op pool), each row beside the raw C-API figure
taken in the same run after warming every batch size.

    python3 benches/gpu_tuning.py --bin-dir BUNDLE/bin --model-dir MODELS/resnet50 --out /tmp/tuning
"""
import argparse
import json
import pathlib
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import bench  # noqa: E402
import images  # noqa: E402

PORTS = (18960, 18961)
# (label, batch threads, more flags, more environment)
CONFIGS = [
    ("2 threads", 2, [], {}),
    ("4 threads", 4, [], {}),
    ("8 threads", 8, [], {}),
    ("2 threads, gpu_private", 2, [], {"TF_GPU_THREAD_MODE": "gpu_private", "TF_GPU_THREAD_COUNT": "2"}),
    ("4 threads, gpu_private", 4, [], {"TF_GPU_THREAD_MODE": "gpu_private", "TF_GPU_THREAD_COUNT": "2"}),
    ("4 threads, inter-op pool", 4, ["--tensorflow_inter_op_parallelism", "0"], {}),
]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    images.arguments(parser)
    parser.add_argument("--out", type=pathlib.Path, required=True)
    parser.add_argument("--deadline", type=float, default=300)
    parser.add_argument("--no-gpu", dest="gpu_flag", action="store_const", const=[], default=["--gpu"])
    parser.set_defaults(duration=5, raw_seconds=3.0)
    args = parser.parse_args()
    args.model_dir = images.prepare(args)
    started = time.time()
    args.out.mkdir(parents=True, exist_ok=True)
    script, body = args.out / "post.lua", args.out / "image.json"
    script.write_text(bench.WRK_SCRIPT)
    images.image_body(body)
    # Each size twice: the first pass autotunes, the second is the figure.
    raw = images.raw_runs(args.model_dir, args.max_batch, args.raw_seconds)
    rows = []
    for label, threads, flags, env in CONFIGS:
        if time.time() - started > args.deadline - 30:
            rows.append({"config": label, "skipped": "out of time"})
            continue
        try:
            proc = images.serve(args.model, args.model_dir, args.out, PORTS, True, args.max_batch, threads,
                                [*args.gpu_flag, *flags], label=label.replace(" ", "-").replace(",", ""), env=env)
        except Exception as e:  # noqa: BLE001 - one setting's failure must not cost the others
            rows.append({"config": label, "failed": str(e)})
            continue
        try:
            for protocol, c in (("grpc", 32), ("grpc", 128), ("rest", 128)):
                x = images.load(proc, PORTS, args.model, args.model_dir, protocol, body, script, c, args.duration)
                rows.append(dict(x, config=label, protocol=protocol, c=c))
                bench.log(f"{label} {protocol} c={c}: {x}")
        finally:
            bench.stop(proc)
            rows.append({"config": label, "exit": proc.returncode})
        (args.out / "gpu_tuning.json").write_text(json.dumps({"raw": raw, "rows": rows}, indent=2))
    best = max(raw, key=lambda x: x["samples_per_s"])
    lines = ["| raw batch | samples/s | p50 ms |", "|---:|---:|---:|"]
    lines += [f"| {x['batch']} | {x['samples_per_s']:,.1f} | {x['p50_ms']:.2f} |" for x in raw]
    lines += ["", "| setting | protocol | c | req/s | vs raw best | p50 ms | p99 ms | mean batch | GPU busy | "
              "server CPU ms/request |", "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for x in rows:
        if "rps" in x:
            gpu = "–" if x.get("gpu_utilization") is None else f"{x['gpu_utilization']:.0%}"
            lines.append(f"| {x['config']} | {x['protocol']} | {x['c']} | {x['rps']:,.1f} | "
                         f"{x['rps'] / best['samples_per_s']:.0%} | {x['p50_ms']:.1f} | {x['p99_ms']:.1f} | "
                         f"{x['mean_batch']:.1f} | {gpu} | {x['server_cpu_ms']:.2f} |")
        elif "exit" not in x:
            lines.append(f"| {x['config']} | {json.dumps(x)} |")
    exits = [x["exit"] for x in rows if "exit" in x]
    lines.append(f"\nSIGTERM after load: {exits.count(0)} of {len(exits)} exited 0")
    text = "\n".join(lines)
    (args.out / "gpu_tuning.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
