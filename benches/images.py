#!/usr/bin/env python3
"""Image serving over REST JSON and gRPC, in one run on one machine (the GPU
host's benchmark; it runs on a CPU host too):

  1. raw throughput of the model through the same C API path, no HTTP
     (`tfserve-bench raw`, samples/s at batch 1, 2, 4, ... --max-batch);
  2. tfserve with batching off and on (GPU defaults: batches padded to powers
     of two, each size warmed), one 224x224x3 image per request as clients
     send it, at concurrency 1, 32 and 128, over REST (`{"instances": [image]}`,
     pixels scaled to [0, 1] with three decimals, about 1.1 MB, from `wrk`) and
     gRPC Predict (602 kB of tensor_content, from `tfserve-bench grpc`):
     requests/s, p50, p99, the mean batch formed, the GPU's utilisation (the
     server's own NVML gauge, sampled through the cell) and the server's CPU
     time per request (from /proc, every thread: transport, decoding,
     batching and TensorFlow's own);

then prints Markdown tables and the ratios the targets name: batching on
against the best raw figure at c=32 and c=128, batching on against off at
c=128, and server CPU per request. `--model resnet50` measures the model on a
GPU; `--model image_head` (ResNet-50's input and output, almost no compute)
measures what the server itself costs per image on any host.

    python3 benches/images.py --model resnet50             # ~5 minutes
    python3 benches/images.py --model image_head --duration 5 --protocols rest
    python3 benches/images.py --bin-dir BUNDLE/bin --model-dir DIR   # no build: a bundle on a GPU host
"""
import argparse
import json
import os
import pathlib
import random
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import bench  # noqa: E402


def image_body(path):
    rng = random.Random(224)
    row = lambda: "[" + ", ".join(  # noqa: E731
        "[" + ", ".join(f"{rng.random():.3f}" for _ in range(3)) + "]" for _ in range(224)) + "]"
    text = '{"instances": [[' + ", ".join(row() for _ in range(224)) + "]]}"
    path.write_text(text)
    return len(text)


BIN = bench.RELEASE


def serve(model, model_dir, work, ports, batching, max_batch, threads, extra=(), label=None, env=None, allowed=()):
    """A server for `model`, ready; `extra` flags as given (e.g. --gpu), `env` added to its environment,
    `allowed` the batch sizes runs pad to (default: every power of two up to `max_batch`)."""
    rest, grpc = ports
    args = [str(BIN / "tfserve"), "--host", "127.0.0.1", "--rest_api_port", str(rest), "--port", str(grpc),
            "--model_name", model, "--model_base_path", str(model_dir), *extra]
    if batching:
        params = work / "batching"
        params.write_text(f"max_batch_size {{ value: {max_batch} }}\nbatch_timeout_micros {{ value: 2000 }}\n"
                          f"max_enqueued_batches {{ value: 1000 }}\nnum_batch_threads {{ value: {threads} }}\n"
                          + "".join(f"allowed_batch_sizes: {size}\n" for size in allowed))
        args += ["--enable_batching", "--batching_parameters_file", str(params)]
    env = dict(os.environ, RUST_LOG=os.environ.get("RUST_LOG", "info"), TF_CPP_MIN_LOG_LEVEL="1", **(env or {}))
    log = open(work / f"server-{label or ('on' if batching else 'off')}.log", "w")
    proc = subprocess.Popen(args, stdout=log, stderr=log, env=env)
    bench.wait_ready(proc, rest, model, timeout=900)
    return proc


class GpuSampler:
    """The server's `tfserve_gpu_utilization_ratio` (NVML), sampled every
    0.25 s while a cell runs: its mean over the GPUs it names."""

    def __init__(self, port):
        self.port, self.samples, self.done = port, [], threading.Event()
        self.thread = threading.Thread(target=self.sample, daemon=True)
        self.thread.start()

    def sample(self):
        while not self.done.wait(0.25):
            try:
                text = urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=2).read().decode()
            except OSError:
                continue
            values = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                      if line.startswith("tfserve_gpu_utilization_ratio{")]
            if values:
                self.samples.append(sum(values) / len(values))

    def stop(self):
        self.done.set()
        self.thread.join()
        return sum(self.samples) / len(self.samples) if self.samples else None


def grpc_load(model, model_dir, port, concurrency, duration):
    out = bench.run([str(BIN / "tfserve-bench"), "grpc", "--model-dir", str(model_dir), "--model", model,
                     "--target", f"http://127.0.0.1:{port}", "--concurrency", str(concurrency),
                     "--connections", str(min(concurrency, 16)), "--seconds", str(duration)],
                    capture_output=True).stdout
    return json.loads([line for line in out.splitlines() if line.startswith("{")][-1])


def load(proc, ports, model, model_dir, protocol, body, script, concurrency, duration, warm=2):
    """One cell: `concurrency` clients of one protocol for `duration` seconds."""
    rest, grpc = ports

    def drive(seconds):
        if protocol == "rest":
            return bench.wrk(f"http://127.0.0.1:{rest}/v1/models/{model}:predict", body, concurrency, seconds, script)
        return grpc_load(model, model_dir, grpc, concurrency, seconds)

    # Warm the connections and any batch size not yet seen.
    drive(warm)
    before_cpu, before = bench.cpu_seconds(proc.pid), bench.batch_totals(rest)
    sampler = GpuSampler(rest)
    result = drive(duration)
    result["gpu_utilization"] = sampler.stop()
    after_cpu, after = bench.cpu_seconds(proc.pid), bench.batch_totals(rest)
    requests = result["rps"] * duration
    result["server_cpu_ms"] = (after_cpu - before_cpu) * 1000 / requests if requests else 0.0
    count = after["count"] - before["count"]
    result["mean_batch"] = (after["sum"] - before["sum"]) / count if count else 0.0
    return result


def raw_runs(model_dir, max_batch, seconds, batches=None, extra=()):
    """The raw C API at each power of two up to `max_batch` (or `batches`); `extra` flags as given (--xla)."""
    batches = batches or [1 << i for i in range(max_batch.bit_length()) if 1 << i <= max_batch]
    bench.log(f"raw runs at batch {batches} {' '.join(extra)}")
    out = bench.run([str(BIN / "tfserve-bench"), "raw", "--model-dir", str(model_dir), "--batches",
                     ",".join(map(str, batches)), "--seconds", str(seconds), *extra], capture_output=True).stdout
    return [json.loads(x) for x in out.splitlines() if x.startswith("{")]


def report(results):
    raw, best = results["raw"], max(results["raw"], key=lambda x: x["samples_per_s"])
    lines = ["| raw batch | samples/s | p50 ms |", "|---:|---:|---:|"]
    lines += [f"| {x['batch']} | {x['samples_per_s']:,.1f} | {x['p50_ms']:.2f} |" for x in raw]
    lines += ["", "| protocol | batching | c | req/s | p50 ms | p99 ms | mean batch | GPU busy | server CPU ms/request "
              "| errors | vs raw best |", "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for x in results["cells"]:
        gpu = "–" if x.get("gpu_utilization") is None else f"{x['gpu_utilization']:.0%}"
        lines.append(f"| {x['protocol']} | {x['mode']} | {x['c']} | {x['rps']:,.1f} | {x['p50_ms']:.2f} | "
                     f"{x['p99_ms']:.2f} | {x['mean_batch']:.1f} | {gpu} | {x['server_cpu_ms']:.2f} | "
                     f"{x['errors']} | {x['rps'] / best['samples_per_s']:.0%} |")
    lines += ["", f"Targets (raw best: {best['samples_per_s']:,.1f} samples/s at batch {best['batch']}):"]
    cell = {(x["protocol"], x["mode"], x["c"]): x for x in results["cells"]}
    for protocol in dict.fromkeys(x["protocol"] for x in results["cells"]):
        ons = sorted(c for (p, m, c) in cell if p == protocol and m == "on")
        for c in (c for c in ons if c >= 32):
            ratio = cell[(protocol, "on", c)]["rps"] / best["samples_per_s"]
            lines.append(f"- {protocol}, batching on at c={c}: {ratio:.0%} of raw best (target >= 85%): "
                         f"{'met' if ratio >= 0.85 else 'NOT met'}")
        if ons and (protocol, "off", ons[-1]) in cell:
            top = ons[-1]
            gain = cell[(protocol, "on", top)]["rps"] / max(cell[(protocol, "off", top)]["rps"], 1e-9)
            lines.append(f"- {protocol}, batching on / off at c={top}: {gain:.1f}x (target >= 5x): "
                         f"{'met' if gain >= 5 else 'NOT met'}")
        rates = [cell[(protocol, "on", c)]["rps"] for c in ons]
        if len(rates) > 1:
            falls = any(b < a * 0.97 for a, b in zip(rates, rates[1:]))
            lines.append(f"- {protocol}, throughput as clients rise ({', '.join(f'{r:,.0f}' for r in rates)}): "
                         f"{'falls' if falls else 'never falls'}")
    cpu = max(x["server_cpu_ms"] for x in results["cells"])
    lines.append(f"- server CPU per image request, worst cell: {cpu:.2f} ms")
    return "\n".join(lines)


def measure(args, model_dir, work, modes, extra=(), ports=(18950, 18951)):
    """Every cell of `modes` (a server each), in the order they run."""
    script = work / "post.lua"
    script.write_text(bench.WRK_SCRIPT)
    body = work / "image.json"
    if not body.exists():
        bench.log(f"request body: {image_body(body):,} bytes")
    cells = []
    for mode in modes:
        proc = serve(args.model, model_dir, work, ports, mode == "on", args.max_batch, args.batch_threads, extra)
        try:
            for protocol in args.protocols.split(","):
                for c in (int(c) for c in args.concurrency.split(",")):
                    x = load(proc, ports, args.model, model_dir, protocol, body, script, c, args.duration)
                    cells.append(dict(x, protocol=protocol, mode=mode, c=c))
                    bench.log(f"{protocol} batching {mode} c={c}: {x}")
        finally:
            bench.stop(proc)
            time.sleep(1)
    return cells


def arguments(parser):
    parser.add_argument("--model", default="resnet50", choices=["resnet50", "image_head"])
    parser.add_argument("--duration", type=int, default=8)
    parser.add_argument("--concurrency", default="1,32,128")
    parser.add_argument("--protocols", default="rest,grpc")
    parser.add_argument("--max-batch", type=int, default=128)
    parser.add_argument("--batch-threads", type=int, default=2)
    parser.add_argument("--raw-seconds", type=float, default=3.0)
    parser.add_argument("--bin-dir", type=pathlib.Path, help="tfserve and tfserve-bench from here, not built")
    parser.add_argument("--model-dir", type=pathlib.Path, help="the model's base path, not generated")
    parser.add_argument("--json", type=pathlib.Path, default=bench.ROOT / "target" / "bench" / "images.json")


def prepare(args):
    """The binaries and the model: given, or built and generated here."""
    global BIN
    bench.ensure_wrk()
    if args.bin_dir:
        BIN = args.bin_dir.resolve()
    else:
        bench.build()
    return args.model_dir or bench.model_dirs([args.model])[args.model]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    arguments(parser)
    parser.add_argument("--modes", default="off,on")
    parser.add_argument("--server-flags", default="", help="more flags for tfserve, e.g. '--gpu'")
    args = parser.parse_args()
    model_dir = prepare(args)
    work = pathlib.Path(tempfile.mkdtemp(prefix="tfserve-images-"))
    results = {"model": args.model, "raw": raw_runs(model_dir, args.max_batch, args.raw_seconds)}
    results["cells"] = measure(args, model_dir, work, args.modes.split(","), args.server_flags.split())
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(results, indent=2))
    print(f"Machine: {os.cpu_count()} cores, {os.uname().machine}; model {args.model}.\n")
    print(report(results))


if __name__ == "__main__":
    main()
