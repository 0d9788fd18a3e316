#!/usr/bin/env python3
"""Image serving over REST JSON, in one run on one machine (the GPU host's
benchmark; it runs on a CPU host too):

  1. raw throughput of the model through the same C API path, no HTTP
     (`tfserve-bench raw`, samples/s at batch 1, 2, 4, ... --max-batch);
  2. tfserve with batching off and on (GPU defaults: batches padded to powers
     of two, each size warmed), one 224x224x3 image per request as clients
     send it (`{"instances": [image]}`, pixels scaled to [0, 1] with three
     decimals, about 1.1 MB), at concurrency 1, 32 and 128: requests/s, p50,
     p99, the mean batch formed, and the server's CPU time per request (from
     /proc, every thread: HTTP, decoding, batching and TensorFlow's own);

then prints Markdown tables and the ratios the targets name: batching on
against the best raw figure at c=32 and c=128, batching on against off at
c=128, and server CPU per request. `--model resnet50` measures the model on a
GPU; `--model image_head` (ResNet-50's input and output, almost no compute)
measures what the server itself costs per image on any host.

    python3 benches/images.py --model resnet50             # ~4 minutes
    python3 benches/images.py --model image_head --duration 5
"""
import argparse
import json
import os
import pathlib
import random
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import bench  # noqa: E402


def cpu_seconds(pid):
    """User and system time of every thread of `pid` so far."""
    fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def image_body(path):
    rng = random.Random(224)
    row = lambda: "[" + ", ".join(  # noqa: E731
        "[" + ", ".join(f"{rng.random():.3f}" for _ in range(3)) + "]" for _ in range(224)) + "]"
    text = '{"instances": [[' + ", ".join(row() for _ in range(224)) + "]]}"
    path.write_text(text)
    return len(text)


def serve(model, model_dir, work, port, batching, max_batch, threads):
    args = [str(bench.RELEASE / "tfserve"), "--host", "127.0.0.1", "--rest_api_port", str(port),
            "--model_name", model, "--model_base_path", str(model_dir)]
    if batching:
        params = work / "batching"
        params.write_text(f"max_batch_size {{ value: {max_batch} }}\nbatch_timeout_micros {{ value: 2000 }}\n"
                          f"max_enqueued_batches {{ value: 1000 }}\nnum_batch_threads {{ value: {threads} }}\n")
        args += ["--enable_batching", "--batching_parameters_file", str(params)]
    env = dict(os.environ, RUST_LOG="warn", TF_CPP_MIN_LOG_LEVEL="2")
    log = open(work / f"server-{'on' if batching else 'off'}.log", "w")
    proc = subprocess.Popen(args, stdout=log, stderr=log, env=env)
    bench.wait_ready(proc, port, model, timeout=900)
    return proc


def load(proc, port, model, body, script, concurrency, duration):
    url = f"http://127.0.0.1:{port}/v1/models/{model}:predict"
    # Warm the connections and any batch size not yet seen.
    bench.wrk(url, body, concurrency, 2, script)
    before_cpu, before = cpu_seconds(proc.pid), bench.batch_totals(port)
    result = bench.wrk(url, body, concurrency, duration, script)
    after_cpu, after = cpu_seconds(proc.pid), bench.batch_totals(port)
    requests = result["rps"] * duration
    result["server_cpu_ms"] = (after_cpu - before_cpu) * 1000 / requests if requests else 0.0
    count = after["count"] - before["count"]
    result["mean_batch"] = (after["sum"] - before["sum"]) / count if count else 0.0
    return result


def report(results):
    raw, best = results["raw"], max(results["raw"], key=lambda x: x["samples_per_s"])
    lines = ["| raw batch | samples/s | p50 ms |", "|---:|---:|---:|"]
    lines += [f"| {x['batch']} | {x['samples_per_s']:,.1f} | {x['p50_ms']:.2f} |" for x in raw]
    lines += ["", "| batching | c | req/s | p50 ms | p99 ms | mean batch | server CPU ms/request | errors | vs raw best |",
              "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for mode in ("off", "on"):
        for c, x in results[mode].items():
            lines.append(f"| {mode} | {c} | {x['rps']:,.1f} | {x['p50_ms']:.2f} | {x['p99_ms']:.2f} | "
                         f"{x['mean_batch']:.1f} | {x['server_cpu_ms']:.2f} | {x['errors']} | "
                         f"{x['rps'] / best['samples_per_s']:.0%} |")
    lines += ["", f"Targets (raw best: {best['samples_per_s']:,.1f} samples/s at batch {best['batch']}):"]
    for c in results["on"]:
        if c >= 32:
            ratio = results["on"][c]["rps"] / best["samples_per_s"]
            lines.append(f"- batching on at c={c}: {ratio:.0%} of raw best (target >= 85%): "
                         f"{'met' if ratio >= 0.85 else 'NOT met'}")
    top = max(results["on"])
    gain = results["on"][top]["rps"] / max(results["off"][top]["rps"], 1e-9)
    lines.append(f"- batching on / off at c={top}: {gain:.1f}x (target >= 5x): {'met' if gain >= 5 else 'NOT met'}")
    cpu = max(x["server_cpu_ms"] for mode in ("off", "on") for x in results[mode].values())
    lines.append(f"- server CPU per image request, worst cell: {cpu:.2f} ms (target <= 3 ms): "
                 f"{'met' if cpu <= 3 else 'NOT met'}")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="resnet50", choices=["resnet50", "image_head"])
    parser.add_argument("--duration", type=int, default=8)
    parser.add_argument("--concurrency", default="1,32,128")
    parser.add_argument("--max-batch", type=int, default=128)
    parser.add_argument("--batch-threads", type=int, default=2)
    parser.add_argument("--raw-seconds", type=float, default=3.0)
    parser.add_argument("--json", type=pathlib.Path, default=bench.ROOT / "target" / "bench" / "images.json")
    args = parser.parse_args()
    concurrency = [int(c) for c in args.concurrency.split(",")]
    bench.ensure_wrk()
    bench.build()
    model_dir = bench.model_dirs([args.model])[args.model]
    work = pathlib.Path(tempfile.mkdtemp(prefix="tfserve-images-"))
    script = work / "post.lua"
    script.write_text(bench.WRK_SCRIPT)
    body = work / "image.json"
    bench.log(f"request body: {image_body(body):,} bytes")
    batches = [1 << i for i in range(args.max_batch.bit_length()) if 1 << i <= args.max_batch]
    bench.log(f"raw runs at batch {batches}")
    out = bench.run([str(bench.RELEASE / "tfserve-bench"), "raw", "--model-dir", str(model_dir), "--batches",
                     ",".join(map(str, batches)), "--seconds", str(args.raw_seconds)], capture_output=True).stdout
    results = {"model": args.model, "raw": [json.loads(x) for x in out.splitlines() if x.startswith("{")]}
    for mode, batching in (("off", False), ("on", True)):
        proc = serve(args.model, model_dir, work, 18950, batching, args.max_batch, args.batch_threads)
        try:
            results[mode] = {}
            for c in concurrency:
                results[mode][c] = load(proc, 18950, args.model, body, script, c, args.duration)
                bench.log(f"batching {mode} c={c}: {results[mode][c]}")
        finally:
            bench.stop(proc)
            time.sleep(1)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(results, indent=2))
    print(f"Machine: {os.cpu_count()} cores, {os.uname().machine}; model {args.model}.\n")
    print(report(results))


if __name__ == "__main__":
    main()
