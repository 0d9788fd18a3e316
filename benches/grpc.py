#!/usr/bin/env python3
"""gRPC against REST and against the raw C API, in one run on one machine:

  1. half_plus_three, batching on, one instance per request at c=64: REST JSON
     (`wrk`) and gRPC Predict (`tfserve-bench grpc`, numbers in tensor_content);
  2. image_head (ResNet-50's input and output, almost no compute), the same way
     as 3: what a 224x224x3 request costs the server's transports and codecs
     alone, without a model's run to hide it or make it noisy;
  3. ResNet-50, batching on (one batch thread on every core), one 224x224x3
     image per request at c=32: gRPC (602 kB of tensor_content) and REST JSON
     (0.8 MB of numbers), against the raw C-API throughput at the batch size
     the server formed;
  4. for each: the server's CPU time per request (from /proc) and the time to
     decode one request's inputs (`tfserve-bench decode`), so decoding's share
     of the server's CPU.

Both paths are warmed, then measured in alternating rounds (REST, gRPC, REST,
...) on the same server; each protocol's row is its median round by
throughput, with the range of all rounds beside it, so that neither is the one
measured while the machine was slower.

Prints a Markdown table and writes target/bench/grpc.json. Uses benches/bench.py's
build, models, batching parameters and wrk.

    python3 benches/grpc.py                 # ~6 minutes
    python3 benches/grpc.py --duration 5 --rounds 3
    python3 benches/grpc.py --models resnet50 --binary /tmp/tfserve-old   # another tfserve binary
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

CASES = [("half_plus_three", 64), ("image_head", 32), ("resnet50", 32)]
RAW_BATCHES = "1,2,4,8,16,32"


def cpu_seconds(pid):
    fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def tool(*args):
    out = bench.run([str(bench.RELEASE / "tfserve-bench"), *map(str, args)], capture_output=True).stdout
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def wait_idle(port, timeout=120):
    """Until the server has no request in flight: a load generator that stops
    mid-run leaves its last requests running, and a round that started under
    them would count a batch or two fewer (a tenth of a 10 s ResNet-50 round)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
        busy = sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                   if line.startswith("tfserve_requests_in_flight"))
        if busy == 0:
            return
        time.sleep(0.1)


def measured(proc, port, work):
    """Runs `work` on an idle server, adding the server's CPU per request and the mean batch formed."""
    wait_idle(port)
    before_cpu, before_batches = cpu_seconds(proc.pid), bench.batch_totals(port)
    result = work()
    after_cpu, after_batches = cpu_seconds(proc.pid), bench.batch_totals(port)
    requests = result["rps"] * result["seconds"]
    result["server_cpu_ms"] = (after_cpu - before_cpu) * 1000 / requests if requests else 0.0
    count = after_batches["count"] - before_batches["count"]
    result["mean_batch"] = (after_batches["sum"] - before_batches["sum"]) / count if count else 0.0
    return result


# ResNet-50 runs best as one batch at a time on every core (a batch already
# parallelises inside its convolutions): one batch thread, intra-op = cores.
BATCHING = dict(bench.BATCHING, resnet50=bench.BATCHING["resnet50"] + "num_batch_threads { value: 1 }\n")
BATCHING["image_head"] = BATCHING["resnet50"]
FLAGS = dict(bench.FLAGS, resnet50=[f"--tensorflow_intra_op_parallelism={os.cpu_count()}"])
FLAGS["image_head"] = FLAGS["resnet50"]


SERVER = [bench.RELEASE / "tfserve"]


def serve(name, model_dir, work_dir, rest_port, grpc_port):
    params = work_dir / f"{name}.batching"
    params.write_text(BATCHING[name])
    args = [str(SERVER[0]), "--host", "127.0.0.1", "--rest_api_port", str(rest_port),
            "--port", str(grpc_port), "--model_name", name, "--model_base_path", str(model_dir),
            "--enable_batching", "--batching_parameters_file", str(params), *FLAGS.get(name, [])]
    env = dict(os.environ, RUST_LOG="warn", TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    bench.wait_ready(proc, rest_port, name)
    return proc


def median_round(rounds):
    """The round of median throughput, with every round's throughput beside it."""
    ordered = sorted(rounds, key=lambda r: r["rps"])
    return dict(ordered[len(ordered) // 2], rounds_rps=[r["rps"] for r in rounds])


def run_case(name, concurrency, model_dir, work_dir, script, duration, rounds):
    rest_port, grpc_port = 18801, 18800
    body = work_dir / f"{name}.json"
    bench.body_for(name, body)
    decode = tool("decode", "--model-dir", model_dir, "--rest-body", body)[0]
    raw = tool("raw", "--model-dir", model_dir, "--batches", RAW_BATCHES, "--seconds", 3) if name == "resnet50" else []
    proc = serve(name, model_dir, work_dir, rest_port, grpc_port)
    try:
        url = f"http://127.0.0.1:{rest_port}/v1/models/{name}:predict"

        def rest():
            return dict(bench.wrk(url, body, concurrency, duration, script), seconds=duration)

        def grpc():
            answer = tool("grpc", "--model-dir", model_dir, "--model", name, "--target",
                          f"http://127.0.0.1:{grpc_port}", "--concurrency", concurrency, "--seconds", duration)[0]
            return dict(answer, seconds=duration)

        # Warm both paths (the batch sizes' first runs are slow).
        tool("grpc", "--model-dir", model_dir, "--model", name, "--target", f"http://127.0.0.1:{grpc_port}",
             "--concurrency", concurrency, "--seconds", 2)
        bench.wrk(url, body, concurrency, 2, script)
        measured_rounds = {"rest": [], "grpc": []}
        for _ in range(rounds):
            measured_rounds["rest"].append(measured(proc, rest_port, rest))
            measured_rounds["grpc"].append(measured(proc, rest_port, grpc))
        results = {protocol: median_round(r) for protocol, r in measured_rounds.items()}
    finally:
        bench.stop(proc)
    results["rest"]["decode_us"] = decode["rest_decode_us"]
    results["grpc"]["decode_us"] = decode["grpc_decode_us"]
    return {"concurrency": concurrency, "raw": raw, **results}


def report(results):
    lines = ["| model | protocol | c | req/s (median round) | every round | p50 ms | p99 ms | errors | mean batch | "
             "server CPU ms/request | decode µs/request | decode share of server CPU |",
             "|---|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
    for name, case in results.items():
        for protocol in ("rest", "grpc"):
            x = case[protocol]
            share = x["decode_us"] / (x["server_cpu_ms"] * 1000) if x["server_cpu_ms"] else 0.0
            every = " / ".join(f"{r:,.1f}" for r in x["rounds_rps"])
            lines.append(f"| {name} | {protocol} | {case['concurrency']} | {x['rps']:,.1f} | {every} | {x['p50_ms']:.2f} | "
                         f"{x['p99_ms']:.2f} | {x['errors']} | {x['mean_batch']:.1f} | {x['server_cpu_ms']:.3f} | "
                         f"{x['decode_us']:,.1f} | {share:.2%} |")
    lines += ["", "Ratios (one run):"]
    if "half_plus_three" in results:
        r = results["half_plus_three"]
        lines.append(f"- half_plus_three c={r['concurrency']}: gRPC / REST throughput = "
                     f"{r['grpc']['rps'] / r['rest']['rps']:.2f} (target >= 1)")
    if "image_head" in results:
        r = results["image_head"]
        extra = r["rest"]["server_cpu_ms"] - r["grpc"]["server_cpu_ms"]
        lines.append(f"- image_head c={r['concurrency']}: server CPU per request REST {r['rest']['server_cpu_ms']:.2f} ms, "
                     f"gRPC {r['grpc']['server_cpu_ms']:.2f} ms: REST costs {extra:.2f} ms more, "
                     f"{extra * 1000 / r['rest']['decode_us']:.1f}x its JSON decode (target <= 2x)")
    if "resnet50" in results:
        r = results["resnet50"]
        best = max(r["raw"], key=lambda x: x["samples_per_s"])
        for protocol in ("grpc", "rest"):
            x = r[protocol]
            nearest = min(r["raw"], key=lambda raw: abs(raw["batch"] - x["mean_batch"]))
            lines.append(f"- resnet50 c={r['concurrency']} {protocol}: {x['rps']:.1f} images/s at mean batch "
                         f"{x['mean_batch']:.1f} = {x['rps'] / nearest['samples_per_s']:.0%} of raw at batch "
                         f"{nearest['batch']} ({nearest['samples_per_s']:.1f}), {x['rps'] / best['samples_per_s']:.0%} "
                         f"of the raw best (b{best['batch']} {best['samples_per_s']:.1f})")
        lines.append("  raw at every size: " + ", ".join(f"b{x['batch']} {x['samples_per_s']:.1f}" for x in r["raw"]))
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds per protocol")
    parser.add_argument("--models", default=",".join(name for name, _ in CASES))
    parser.add_argument("--json", type=pathlib.Path, default=bench.ROOT / "target" / "bench" / "grpc.json")
    parser.add_argument("--binary", type=pathlib.Path, help="the tfserve binary (default: target/release's)")
    args = parser.parse_args()
    if args.binary:
        SERVER[0] = args.binary
    names = args.models.split(",")
    bench.ensure_wrk()
    bench.build()
    dirs = bench.model_dirs(names)
    work_dir = pathlib.Path(tempfile.mkdtemp(prefix="tfserve-grpc-bench-"))
    script = work_dir / "post.lua"
    script.write_text(bench.WRK_SCRIPT)
    results = {}
    for name, concurrency in CASES:
        if name in names:
            bench.log(f"{name} at c={concurrency}")
            # A ResNet-50 batch takes most of a second here and its requests
            # complete together, so a short round's count moves by a whole
            # batch: its rounds are three times as long.
            duration = args.duration * 3 if name == "resnet50" else args.duration
            results[name] = run_case(name, concurrency, dirs[name], work_dir, script, duration, args.rounds)
            time.sleep(1)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(results, indent=2))
    print(f"Machine: {os.cpu_count()} cores, {os.uname().machine}.\n")
    print(report(results))


if __name__ == "__main__":
    main()
