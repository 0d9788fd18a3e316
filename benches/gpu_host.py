#!/usr/bin/env python3
"""Everything a GPU host has to show, in one run (ResNet-50 on the GPU, with
tfserve and tfserve-bench from a bundle or a build; nothing else installed):

  1. raw C-API throughput at batch 1 ... 128 (`tfserve-bench raw`);
  2. cold start: process start to ready, twice, with --gpu_compile_cache_dir
     (the second start finds the first one's compiled kernels);
  3. REST JSON and gRPC tensor_content, batching on (the second cold start's
     server) and off, at c=1, 32 and 128 (`images.py`'s cells: req/s, p50,
     p99, mean batch, GPU busy from the server's NVML gauge, server CPU per
     request), and the NVML gauges on /metrics;
  4. a GPU out of memory: a server held to a sliver of the GPU's memory gets
     growing requests until one fails; the failure must be 503 with
     TensorFlow's OOM message, and the next small request must succeed;
  5. replicas: the GPU split into two logical GPUs (--virtual_gpu_memory_mb),
     one replica on each (--gpu_ids 0,1), runs counted per replica;
  6. the same gRPC load with other batch thread counts;
  7. every server stopped by SIGTERM after its load; each must exit 0.

Writes gpu_host.md (tables, targets) and gpu_host.json to --out, and each
server's log beside them. Phases that would not finish before --deadline
seconds are skipped and say so.

    python3 benches/gpu_host.py --bin-dir BUNDLE/bin --model-dir MODELS/resnet50 --out /tmp/gpu
"""
import argparse
import json
import os
import pathlib
import subprocess
import sys
import time
import urllib.error
import urllib.request

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import bench  # noqa: E402
import images  # noqa: E402

PORTS = (18950, 18951)


class Run:
    def __init__(self, args):
        self.args, self.started = args, time.time()
        self.results = {"phases": {}, "exits": []}
        self.out = args.out
        self.out.mkdir(parents=True, exist_ok=True)

    def left(self):
        return self.args.deadline - (time.time() - self.started)

    def phase(self, name, needs, fn):
        if self.left() < needs:
            self.results["phases"][name] = {"skipped": f"{self.left():.0f} s left, needs ~{needs} s"}
            bench.log(f"{name}: skipped")
            return
        began = time.time()
        try:
            self.results["phases"][name] = fn() or {}
        except Exception as e:  # noqa: BLE001 - one phase's failure must not cost the others
            self.results["phases"][name] = {"failed": f"{type(e).__name__}: {e}"}
        self.results["phases"][name]["seconds"] = round(time.time() - began, 1)
        bench.log(f"{name}: {json.dumps(self.results['phases'][name])[:400]}")
        self.save()

    def serve(self, label, batching, extra, threads=None):
        return images.serve(self.args.model, self.args.model_dir, self.out, PORTS, batching, self.args.max_batch,
                            threads or self.args.batch_threads, [*self.args.gpu_flag, *extra], label=label)

    def stop(self, proc, label):
        bench.stop(proc)
        self.results["exits"].append({"server": label, "exit": proc.returncode})
        return proc.returncode

    def cells(self, proc, mode, protocols, concurrency, duration):
        out = []
        for protocol in protocols:
            for c in concurrency:
                x = images.load(proc, PORTS, self.args.model, self.args.model_dir, protocol, self.body, self.script,
                                c, duration)
                out.append(dict(x, protocol=protocol, mode=mode, c=c))
                bench.log(f"{protocol} {mode} c={c}: {x}")
        self.results.setdefault("cells", []).extend(out)
        return out

    def save(self):
        (self.out / "gpu_host.json").write_text(json.dumps(self.results, indent=2))


def metrics(port):
    return urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()


def predict(port, model, images_count):
    """POSTs `images_count` images; (status, first 300 characters of the answer)."""
    row = "[" + ", ".join(["[0.5, 0.25, 0.125]"] * 224) + "]"
    image = "[" + ", ".join([row] * 224) + "]"
    body = ('{"instances": [' + ", ".join([image] * images_count) + "]}").encode()
    request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/models/{model}:predict", data=body,
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=300) as answer:
            return answer.status, answer.read(300).decode(errors="replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read(300).decode(errors="replace")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    images.arguments(parser)
    parser.add_argument("--out", type=pathlib.Path, required=True)
    parser.add_argument("--deadline", type=float, default=540, help="seconds the whole run may take")
    parser.add_argument("--oom-fraction", type=float, default=0.006)
    parser.add_argument("--virtual-gpu-mb", type=int, default=24000)
    parser.add_argument("--no-gpu", dest="gpu_flag", action="store_const", const=[], default=["--gpu"],
                        help="serve without --gpu (a dry run of this script on a CPU host)")
    parser.set_defaults(duration=5, raw_seconds=2.0)
    args = parser.parse_args()
    args.model_dir = images.prepare(args)
    run = Run(args)
    run.script = args.out / "post.lua"
    run.script.write_text(bench.WRK_SCRIPT)
    run.body = args.out / "image.json"
    images.image_body(run.body)
    concurrency = [int(c) for c in args.concurrency.split(",")]
    protocols = args.protocols.split(",")
    version = subprocess.run([str(images.BIN / "tfserve"), "--version"], capture_output=True, text=True)
    run.results["version"] = version.stdout + version.stderr[-2000:]
    bench.log(run.results["version"])

    run.phase("raw", 45, lambda: {"raw": run.results.setdefault(
        "raw", images.raw_runs(args.model_dir, args.max_batch, args.raw_seconds))})

    cache = args.out / "cuda-cache"
    cache_flags = ["--gpu_compile_cache_dir", str(cache)]

    def cache_bytes():
        return sum(f.stat().st_size for f in cache.rglob("*") if f.is_file()) if cache.exists() else 0

    def cold_start_1():
        began = time.time()
        proc = run.serve("cold-1", True, cache_flags)
        ready = time.time() - began
        try:
            images.grpc_load(args.model, args.model_dir, PORTS[1], 32, 3)
        finally:
            code = run.stop(proc, "cold-1")
        return {"ready_s": round(ready, 1), "cache_bytes": cache_bytes(), "exit": code}

    run.phase("cold_start_1", 60, cold_start_1)

    def batching_on():
        began = time.time()
        proc = run.serve("cold-2", True, cache_flags)
        ready = time.time() - began
        try:
            cells = run.cells(proc, "on", protocols, concurrency, args.duration)
            gauges = sorted({line.split("{")[0] for line in metrics(PORTS[0]).splitlines()
                             if line.startswith("tfserve_gpu_")})
        finally:
            code = run.stop(proc, "cold-2 / batching on")
        return {"ready_s": round(ready, 1), "cache_bytes": cache_bytes(), "nvml_gauges": gauges, "exit": code,
                "cells": len(cells)}

    run.phase("cold_start_2_and_batching_on", 100, batching_on)

    def replicas():
        size = str(args.virtual_gpu_mb)
        began = time.time()
        proc = run.serve("replicas", True, ["--virtual_gpu_memory_mb", f"{size},{size}", "--gpu_ids", "0,1"],
                         threads=2 * args.batch_threads)
        ready = time.time() - began
        try:
            cells = run.cells(proc, "on, 2 replicas", protocols, [concurrency[-1]], args.duration)
            runs = {line.split('device="')[1].split('"')[0]: float(line.rsplit(" ", 1)[1])
                    for line in metrics(PORTS[0]).splitlines() if line.startswith("tfserve_replica_runs_total{")}
        finally:
            code = run.stop(proc, "replicas")
        return {"ready_s": round(ready, 1), "replica_runs": runs, "exit": code,
                "rps": {x["protocol"]: x["rps"] for x in cells}}

    run.phase("replicas", 70, replicas)

    def batching_off():
        proc = run.serve("off", False, [])
        try:
            # The lightest and the heaviest load: what batching is measured against.
            run.cells(proc, "off", protocols, sorted({concurrency[0], concurrency[-1]}), args.duration)
        finally:
            code = run.stop(proc, "batching off")
        return {"exit": code}

    run.phase("batching_off", 70, batching_off)

    def out_of_memory():
        config = json.dumps({"per_process_gpu_memory_fraction": args.oom_fraction})
        proc = run.serve("oom", False, ["--session_config", config])
        tries = []
        try:
            for count in (8, 32, 128):
                status, text = predict(PORTS[0], args.model, count)
                tries.append({"images": count, "status": status, "answer": text if status != 200 else text[:40]})
                if status != 200:
                    break
            status, text = predict(PORTS[0], args.model, 1)
            tries.append({"images": 1, "status": status, "answer": text[:120]})
        finally:
            code = run.stop(proc, "oom")
        failed = [t for t in tries if t["status"] != 200]
        return {"tries": tries, "exit": code,
                "ok": bool(failed) and failed[0]["status"] == 503 and tries[-1]["status"] == 200}

    run.phase("out_of_memory", 45, out_of_memory)


    def batch_threads():
        # The batching-on cells ran with --batch-threads; the same gRPC load
        # at the other counts says which the GPU wants.
        rates = {}
        for threads in sorted({1, 2 * args.batch_threads} - {args.batch_threads}):
            proc = run.serve(f"threads-{threads}", True, [], threads=threads)
            try:
                x = images.load(proc, PORTS, args.model, args.model_dir, "grpc", run.body, run.script,
                                concurrency[-1], args.duration)
            finally:
                run.stop(proc, f"{threads} batch threads")
            rates[threads] = {k: x[k] for k in ("rps", "p50_ms", "p99_ms", "mean_batch", "gpu_utilization")}
        return {"grpc_at_c": concurrency[-1], "by_batch_threads": rates}

    run.phase("batch_threads", 60, batch_threads)
    run.results["seconds"] = round(time.time() - run.started, 1)
    run.save()
    text = report(run.results)
    (args.out / "gpu_host.md").write_text(text)
    print(text)


def report(results):
    lines = ["```", results.get("version", "").strip()[:1500], "```", ""]
    if results.get("raw") and results.get("cells"):
        lines.append(images.report({"raw": results["raw"], "cells": results["cells"]}))
        raw = {x["batch"]: x for x in results["raw"]}
        for x in results["cells"]:
            if x["c"] == 32 and x["mode"] == "on":
                size = min((b for b in raw if b >= x["mean_batch"]), default=max(raw))
                bound = 2 * raw[size]["p50_ms"]
                lines.append(f"- {x['protocol']}, p99 at c=32: {x['p99_ms']:.1f} ms against 2 x raw p50 at batch "
                             f"{size} = {bound:.1f} ms: {'met' if x['p99_ms'] <= bound else 'NOT met'}")
    lines += ["", "| phase | result |", "|---|---|"]
    for name, value in results["phases"].items():
        if name != "raw":
            lines.append(f"| {name} | `{json.dumps(value)[:600]}` |")
    exits = results["exits"]
    clean = sum(1 for e in exits if e["exit"] == 0)
    lines += ["", f"SIGTERM after load: {clean} of {len(exits)} servers exited 0 "
              "(" + ", ".join(f"{e['server']}: {e['exit']}" for e in exits) + ")"]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
