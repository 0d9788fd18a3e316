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
measured while the machine was slower. A round counts what the server answered
in a window of steady load (the load runs before and after it), from the first
batch run to end in it to the last when there are three or more, and says how
much of the window the model's runs filled and how many rows they did per
second of run: the figure the raw C API's samples/s compare with.

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
import threading
import time
import urllib.request

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import bench  # noqa: E402

CASES = [("half_plus_three", 64), ("image_head", 32), ("resnet50", 32)]
RAW_BATCHES = "1,2,4,8,16,32"
# The sizes the server forms at c=32, measured again beside every round: this
# machine's speed drifts by a quarter over minutes, so a server round is
# compared with the raw runs next to it, not with a sweep from the start.
ROUND_RAW_BATCHES = "8,16,32"


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


SERVER_TOTALS = {
    "answered": "tfserve_requests_total{",
    "rows": "tfserve_batch_size_sum{",
    "batches": "tfserve_batch_size_count{",
    "padding": "tfserve_batch_padding_rows_total{",
    "run_s": "tfserve_run_seconds_sum{",
    "runs": "tfserve_run_seconds_count{",
}
# How often a round reads the server's counters to time its batch runs' ends.
POLL_SECONDS = 0.025


def server_totals(port):
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    totals = dict.fromkeys(SERVER_TOTALS, 0.0)
    for line in text.splitlines():
        for key, prefix in SERVER_TOTALS.items():
            if line.startswith(prefix):
                totals[key] += float(line.rsplit(" ", 1)[1])
    return totals


def measured(proc, port, work, duration, warm):
    """Runs `work` under steady load: the load starts `warm` seconds before a
    window of `duration` seconds and ends after it, and throughput, CPU and
    batches are what the server counted inside the window. A round that
    counted from the load's start would charge the server for the pipeline
    filling (no answer for the first batch's whole run) and end on whatever
    batch was running."""
    wait_idle(port)
    result = {}
    load = threading.Thread(target=lambda: result.update(work(warm + duration + warm)))
    load.start()
    time.sleep(warm)
    start, start_cpu, before = time.monotonic(), bench.cpu_seconds(proc.pid), server_totals(port)
    # When each batch run ended (to POLL_SECONDS): images per second between
    # the window's first and last run end do not depend on where the window
    # cut a second-long run, as a count of answers in the window does.
    ends = []
    while time.monotonic() < start + duration:
        time.sleep(POLL_SECONDS)
        now, runs = time.monotonic(), server_totals(port)["runs"]
        if runs > before["runs"] and (not ends or runs > ends[-1][1]):
            ends.append((now, runs))
    end, end_cpu, after = time.monotonic(), bench.cpu_seconds(proc.pid), server_totals(port)
    load.join()
    window = end - start
    delta = {key: after[key] - before[key] for key in SERVER_TOTALS}
    result["seconds"] = window
    result["client_rps"] = result["rps"]
    result["rps"] = delta["answered"] / window
    if len(ends) >= 3 and delta["batches"]:
        (first, first_runs), (last, last_runs) = ends[0], ends[-1]
        result["rps"] = (last_runs - first_runs) * delta["rows"] / delta["batches"] / (last - first)
    result["server_cpu_ms"] = (end_cpu - start_cpu) * 1000 / delta["answered"] if delta["answered"] else 0.0
    result["mean_batch"] = delta["rows"] / delta["batches"] if delta["batches"] else 0.0
    # What the session's runs did with their time, comparable with the raw
    # figures (session time only), and how much of the window they filled.
    result["rows_per_run_s"] = delta["rows"] / delta["run_s"] if delta["run_s"] else 0.0
    result["run_share"] = delta["run_s"] / window
    result["padding_share"] = delta["padding"] / (delta["rows"] + delta["padding"]) if delta["rows"] else 0.0
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
    middle = dict(ordered[len(ordered) // 2], rounds_rps=[r["rps"] for r in rounds])
    if all("of_raw_best" in r for r in rounds):
        ratios = sorted(r["of_raw_best"] for r in rounds)
        middle["rounds_of_raw_best"] = [r["of_raw_best"] for r in rounds]
        middle["median_of_raw_best"] = ratios[len(ratios) // 2]
    return middle


def run_case(name, concurrency, model_dir, work_dir, script, duration, warm, rounds):
    rest_port, grpc_port = 18801, 18800
    body = work_dir / f"{name}.json"
    bench.body_for(name, body)
    decode = tool("decode", "--model-dir", model_dir, "--rest-body", body)[0]
    raw = tool("raw", "--model-dir", model_dir, "--batches", RAW_BATCHES, "--seconds", 5) if name == "resnet50" else []
    proc = serve(name, model_dir, work_dir, rest_port, grpc_port)
    try:
        url = f"http://127.0.0.1:{rest_port}/v1/models/{name}:predict"

        def rest(seconds):
            return bench.wrk(url, body, concurrency, round(seconds), script)

        def grpc(seconds):
            return tool("grpc", "--model-dir", model_dir, "--model", name, "--target",
                        f"http://127.0.0.1:{grpc_port}", "--concurrency", concurrency, "--seconds", round(seconds))[0]

        # Warm both paths (the batch sizes' first runs are slow).
        tool("grpc", "--model-dir", model_dir, "--model", name, "--target", f"http://127.0.0.1:{grpc_port}",
             "--concurrency", concurrency, "--seconds", 2)
        bench.wrk(url, body, concurrency, 2, script)
        measured_rounds = {"rest": [], "grpc": []}
        raw_rounds = []
        for _ in range(rounds):
            if name == "resnet50":
                wait_idle(rest_port)
                raw_rounds.append(max(x["samples_per_s"] for x in tool(
                    "raw", "--model-dir", model_dir, "--batches", ROUND_RAW_BATCHES, "--seconds", 3)))
            for protocol, work in (("rest", rest), ("grpc", grpc)):
                result = measured(proc, rest_port, work, duration, warm)
                if raw_rounds:
                    result["raw_best"] = raw_rounds[-1]
                    result["of_raw_best"] = result["rps"] / raw_rounds[-1]
                measured_rounds[protocol].append(result)
        results = {protocol: median_round(r) for protocol, r in measured_rounds.items()}
    finally:
        bench.stop(proc)
    results["rest"]["decode_us"] = decode["rest_decode_us"]
    results["grpc"]["decode_us"] = decode["grpc_decode_us"]
    return {"concurrency": concurrency, "raw": raw, "raw_rounds": raw_rounds, **results}


def report(results):
    lines = ["| model | protocol | c | req/s (median round) | every round | p50 ms | p99 ms | errors | mean batch | "
             "padded rows | rows per run-second | runs' share of the window | "
             "server CPU ms/request | decode µs/request | decode share of server CPU |",
             "|---|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, case in results.items():
        for protocol in ("rest", "grpc"):
            x = case[protocol]
            share = x["decode_us"] / (x["server_cpu_ms"] * 1000) if x["server_cpu_ms"] else 0.0
            every = " / ".join(f"{r:,.1f}" for r in x["rounds_rps"])
            lines.append(f"| {name} | {protocol} | {case['concurrency']} | {x['rps']:,.1f} | {every} | {x['p50_ms']:.2f} | "
                         f"{x['p99_ms']:.2f} | {x['errors']} | {x['mean_batch']:.1f} | {x['padding_share']:.1%} | "
                         f"{x['rows_per_run_s']:,.1f} | {x['run_share']:.0%} | {x['server_cpu_ms']:.3f} | "
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
                         f"of the raw best (b{best['batch']} {best['samples_per_s']:.1f}); its runs did "
                         f"{x['rows_per_run_s']:.1f} images per run-second "
                         f"({x['rows_per_run_s'] / nearest['samples_per_s']:.0%} of raw at batch {nearest['batch']}) "
                         f"and filled {x['run_share']:.0%} of the window")
            lines.append(f"  against the raw best beside each round ({', '.join(f'{v:.1f}' for v in r['raw_rounds'])}): "
                         f"{', '.join(f'{v:.0%}' for v in x['rounds_of_raw_best'])}; median "
                         f"{x['median_of_raw_best']:.0%}")
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
            # Long enough for the pipeline to fill: two batch runs.
            warm = 3 if name == "resnet50" else 1
            results[name] = run_case(name, concurrency, dirs[name], work_dir, script, duration, warm, args.rounds)
            time.sleep(1)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(results, indent=2))
    print(f"Machine: {os.cpu_count()} cores, {os.uname().machine}.\n")
    print(report(results))


if __name__ == "__main__":
    main()
