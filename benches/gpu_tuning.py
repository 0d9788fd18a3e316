#!/usr/bin/env python3
"""Which batching and TensorFlow GPU settings feed a GPU best, in one run:
the same gRPC (c=32, c=128) and REST (c=128) load as `gpu_host.py` against
servers that differ in one setting each (batch threads, TensorFlow's GPU
launch threads, its inter-op pool, XLA with its first and second start),
each row beside the raw C-API figure taken in the same run after warming
every batch size (XLA rows beside the raw figure with XLA).

    python3 benches/gpu_tuning.py --bin-dir BUNDLE/bin --model-dir MODELS/resnet50 --out /tmp/tuning
"""
import argparse
import json
import shutil
import pathlib
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import bench  # noqa: E402
import images  # noqa: E402

PORTS = (18960, 18961)
LOADS = (("grpc", 32), ("grpc", 128), ("rest", 128))
XLA = ["--session_config", '{"xla_jit": true}']


def config(label, threads, flags=(), env=None, loads=LOADS, allowed=(), fresh_cache=False):
    """One server setting: `flags` and `env` added, `allowed` batch sizes (the last one the
    maximum) instead of every power of two up to --max-batch, `fresh_cache` empties the
    compile cache before it starts (a first start)."""
    return {"label": label, "threads": threads, "flags": list(flags), "env": env or {}, "loads": loads,
            "allowed": list(allowed), "fresh_cache": fresh_cache}


# In order of what matters most, as a deadline may cut the tail. On a GPU host
# the default runs ops on TensorFlow's inter-op pool; -1 runs them on the batch thread.
INLINE = ["--tensorflow_inter_op_parallelism", "-1"]
CONFIGS = [
    config("2 threads", 2),
    config("2 threads, ops on the batch thread", 2, INLINE),
    # The host's default: as many batch threads as cores, at most 2 batches in flight.
    config("16 threads", 16),
    # XLA compiles once per batch shape: four sizes, not eight.
    config("4 threads, XLA, first start", 4, XLA, allowed=(8, 16, 32, 64), fresh_cache=True),
    config("4 threads, XLA, second start", 4, XLA, loads=(("grpc", 128),), allowed=(8, 16, 32, 64)),
    config("16 threads, 16 in flight", 16, ["--gpu_batches_in_flight", "16"]),
    config("4 threads, gpu_private", 4, env={"TF_GPU_THREAD_MODE": "gpu_private", "TF_GPU_THREAD_COUNT": "2"}),
]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    images.arguments(parser)
    parser.add_argument("--out", type=pathlib.Path, required=True)
    parser.add_argument("--deadline", type=float, default=300)
    parser.add_argument("--no-gpu", dest="gpu_flag", action="store_const", const=[], default=["--gpu"])
    parser.add_argument("--xla-batches", default="16,32,64", help="raw batch sizes measured with XLA")
    parser.set_defaults(duration=5, raw_seconds=3.0)
    args = parser.parse_args()
    args.model_dir = images.prepare(args)
    started = time.time()
    args.out.mkdir(parents=True, exist_ok=True)
    script, body = args.out / "post.lua", args.out / "image.json"
    script.write_text(bench.WRK_SCRIPT)
    images.image_body(body)
    cache = args.out / "compile-cache"
    # Each size twice: the first pass autotunes, the second is the figure.
    raw = images.raw_runs(args.model_dir, args.max_batch, args.raw_seconds)
    xla_batches = [int(b) for b in args.xla_batches.split(",") if b]
    try:
        raw_xla = images.raw_runs(args.model_dir, args.max_batch, args.raw_seconds, xla_batches, ["--xla"])
    except Exception as e:  # noqa: BLE001 - XLA failing on this host must not cost the rest
        bench.log(f"raw runs with XLA failed: {e}")
        raw_xla = []
    rows = []
    for setting in CONFIGS:
        label = setting["label"]
        if time.time() - started > args.deadline - 30:
            rows.append({"config": label, "skipped": "out of time"})
            continue
        if setting["fresh_cache"]:
            shutil.rmtree(cache, ignore_errors=True)
        flags = [*args.gpu_flag, "--gpu_compile_cache_dir", str(cache), *setting["flags"]]
        began = time.time()
        try:
            allowed = setting["allowed"]
            proc = images.serve(args.model, args.model_dir, args.out, PORTS, True,
                                allowed[-1] if allowed else args.max_batch, setting["threads"], flags,
                                label=label.replace(" ", "-").replace(",", ""), env=setting["env"], allowed=allowed)
        except Exception as e:  # noqa: BLE001 - one setting's failure must not cost the others
            rows.append({"config": label, "failed": str(e)})
            continue
        rows.append({"config": label, "ready_s": round(time.time() - began, 2)})
        bench.log(f"{label}: ready in {rows[-1]['ready_s']} s")
        try:
            for protocol, c in setting["loads"]:
                x = images.load(proc, PORTS, args.model, args.model_dir, protocol, body, script, c, args.duration)
                rows.append(dict(x, config=label, protocol=protocol, c=c))
                bench.log(f"{label} {protocol} c={c}: {x}")
        finally:
            bench.stop(proc)
            rows.append({"config": label, "exit": proc.returncode})
        (args.out / "gpu_tuning.json").write_text(json.dumps({"raw": raw, "raw_xla": raw_xla, "rows": rows}, indent=2))
    best = max(raw, key=lambda x: x["samples_per_s"])
    lines = ["| raw batch | samples/s | p50 ms |", "|---:|---:|---:|"]
    lines += [f"| {x['batch']} | {x['samples_per_s']:,.1f} | {x['p50_ms']:.2f} |" for x in raw]
    best_xla = max(raw_xla, key=lambda x: x["samples_per_s"]) if raw_xla else best
    if raw_xla:
        lines += ["", "| raw batch, XLA | samples/s | p50 ms |", "|---:|---:|---:|"]
        lines += [f"| {x['batch']} | {x['samples_per_s']:,.1f} | {x['p50_ms']:.2f} |" for x in raw_xla]
    lines += ["", "| setting | protocol | c | req/s | vs raw best | p50 ms | p99 ms | mean batch | GPU busy | "
              "server CPU ms/request |", "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for x in rows:
        if "rps" in x:
            gpu = "–" if x.get("gpu_utilization") is None else f"{x['gpu_utilization']:.0%}"
            # XLA rows against the raw XLA best: the same compiled graph without the server.
            ref = best_xla if "XLA" in x["config"] else best
            lines.append(f"| {x['config']} | {x['protocol']} | {x['c']} | {x['rps']:,.1f} | "
                         f"{x['rps'] / ref['samples_per_s']:.0%} | {x['p50_ms']:.1f} | {x['p99_ms']:.1f} | "
                         f"{x['mean_batch']:.1f} | {gpu} | {x['server_cpu_ms']:.2f} |")
        elif "ready_s" in x:
            lines.append(f"| {x['config']} | ready after {x['ready_s']} s |")
        elif "exit" not in x:
            lines.append(f"| {x['config']} | {json.dumps(x)} |")
    exits = [x["exit"] for x in rows if "exit" in x]
    lines.append(f"\nSIGTERM after load: {exits.count(0)} of {len(exits)} exited 0")
    text = "\n".join(lines)
    (args.out / "gpu_tuning.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
