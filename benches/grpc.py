#!/usr/bin/env python3
"""gRPC against REST and against the raw C API, in one run on one machine:

  1. half_plus_three, batching on, one instance per request at c=64: REST JSON
     (`wrk`) and gRPC Predict (`tfserve-bench grpc`, numbers in tensor_content);
  2. ResNet-50, batching on (one batch thread on every core), one 224x224x3
     image per request at c=32: gRPC (602 kB of tensor_content) and REST JSON
     (1.8 MB of numbers), against the raw C-API throughput at the batch size
     the server formed;
  3. for each: the server's CPU time per request (from /proc) and the time to
     decode one request's inputs (`tfserve-bench decode`), so decoding's share
     of the server's CPU.

Prints a Markdown table and writes target/bench/grpc.json. Uses benches/bench.py's
build, models, batching parameters and wrk.

    python3 benches/grpc.py                 # ~3 minutes
    python3 benches/grpc.py --duration 5
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

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import bench  # noqa: E402

CASES = [("half_plus_three", 64), ("resnet50", 32)]
RAW_BATCHES = "1,2,4,8,16,32"


def cpu_seconds(pid):
    fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def tool(*args):
    out = bench.run([str(bench.RELEASE / "tfserve-bench"), *map(str, args)], capture_output=True).stdout
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def measured(proc, port, work):
    """Runs `work`, adding the server's CPU per request and the mean batch formed."""
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
FLAGS = dict(bench.FLAGS, resnet50=[f"--tensorflow_intra_op_parallelism={os.cpu_count()}"])


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


def run_case(name, concurrency, model_dir, work_dir, script, duration):
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

        # Warm both paths once (the batch sizes' first runs are slow).
        tool("grpc", "--model-dir", model_dir, "--model", name, "--target", f"http://127.0.0.1:{grpc_port}",
             "--concurrency", concurrency, "--seconds", 2)
        results = {"rest": measured(proc, rest_port, rest), "grpc": measured(proc, rest_port, grpc)}
    finally:
        bench.stop(proc)
    results["rest"]["decode_us"] = decode["rest_decode_us"]
    results["grpc"]["decode_us"] = decode["grpc_decode_us"]
    return {"concurrency": concurrency, "raw": raw, **results}


def report(results):
    lines = ["| model | protocol | c | req/s | p50 ms | p99 ms | errors | mean batch | server CPU ms/request | "
             "decode µs/request | decode share of server CPU |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, case in results.items():
        for protocol in ("rest", "grpc"):
            x = case[protocol]
            share = x["decode_us"] / (x["server_cpu_ms"] * 1000) if x["server_cpu_ms"] else 0.0
            lines.append(f"| {name} | {protocol} | {case['concurrency']} | {x['rps']:,.1f} | {x['p50_ms']:.2f} | "
                         f"{x['p99_ms']:.2f} | {x['errors']} | {x['mean_batch']:.1f} | {x['server_cpu_ms']:.3f} | "
                         f"{x['decode_us']:,.1f} | {share:.2%} |")
    lines += ["", "Ratios (one run):"]
    if "half_plus_three" in results:
        r = results["half_plus_three"]
        lines.append(f"- half_plus_three c={r['concurrency']}: gRPC / REST throughput = "
                     f"{r['grpc']['rps'] / r['rest']['rps']:.2f} (target >= 1)")
    if "resnet50" in results:
        r = results["resnet50"]
        batch = r["grpc"]["mean_batch"]
        nearest = min(r["raw"], key=lambda x: abs(x["batch"] - batch))
        lines.append(f"- resnet50 c={r['concurrency']}: gRPC {r['grpc']['rps']:.1f} images/s at mean batch {batch:.1f} "
                     f"vs raw {nearest['samples_per_s']:.1f} samples/s at batch {nearest['batch']} = "
                     f"{r['grpc']['rps'] / nearest['samples_per_s']:.0%} (target >= 95%); "
                     f"raw at every size: " + ", ".join(f"b{x['batch']} {x['samples_per_s']:.1f}" for x in r["raw"]))
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=int, default=10)
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
            results[name] = run_case(name, concurrency, dirs[name], work_dir, script, args.duration)
            time.sleep(1)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(results, indent=2))
    print(f"Machine: {os.cpu_count()} cores, {os.uname().machine}.\n")
    print(report(results))


if __name__ == "__main__":
    main()
